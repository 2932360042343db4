//! Order statistics of repeated measurements. The machine is shared and noisy, so every figure
//! is a median with its spread (10th and 90th percentile), never a single time.

use std::time::Duration;

/// Repeated measurements of one thing, in seconds.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    values: Vec<f64>,
}

impl Samples {
    /// No measurements yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one measured duration.
    pub fn push(&mut self, elapsed: Duration) {
        self.values.push(elapsed.as_secs_f64());
    }

    /// Adds one measured value (any unit; the caller keeps units consistent).
    pub fn push_value(&mut self, value: f64) {
        self.values.push(value);
    }

    /// Adds every value of `other`.
    pub fn extend(&mut self, other: &Samples) {
        self.values.extend_from_slice(&other.values);
    }

    /// How many measurements.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether nothing was measured.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The `q`-quantile (0.0..=1.0) by linear interpolation between closest ranks; NaN when
    /// empty, so a missing figure shows as such instead of as zero.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.values.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.values.clone();
        sorted.sort_by(f64::total_cmp);
        let position = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
        let low = position.floor() as usize;
        let high = position.ceil() as usize;
        let fraction = position - low as f64;
        sorted[low] + (sorted[high] - sorted[low]) * fraction
    }

    /// The median.
    pub fn median(&self) -> f64 {
        self.quantile(0.5)
    }

    /// 10th percentile.
    pub fn p10(&self) -> f64 {
        self.quantile(0.1)
    }

    /// 90th percentile.
    pub fn p90(&self) -> f64 {
        self.quantile(0.9)
    }

    /// 99th percentile.
    pub fn p99(&self) -> f64 {
        self.quantile(0.99)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let mut samples = Samples::new();
        for value in [5.0, 1.0, 3.0, 2.0, 4.0] {
            samples.push_value(value);
        }
        assert_eq!(samples.median(), 3.0);
        assert_eq!(samples.quantile(0.0), 1.0);
        assert_eq!(samples.quantile(1.0), 5.0);
        assert!((samples.p10() - 1.4).abs() < 1e-9);
        assert!((samples.p90() - 4.6).abs() < 1e-9);
    }

    #[test]
    fn empty_samples_give_nan_not_zero() {
        assert!(Samples::new().median().is_nan());
    }
}
