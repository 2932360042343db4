//! Scheduling weights: the one number a profile asks for and the scheduler divides by.

use std::fmt;
use std::str::FromStr;

/// Why a weight was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WeightError {
    /// A weight outside 1..=10000.
    #[error("weight {weight} is outside {min}..={max}", min = Weight::MIN, max = Weight::MAX)]
    OutOfRange {
        /// The weight given.
        weight: u64,
    },
    /// Text that is not a whole number.
    #[error("{text:?} is not a weight (a whole number {min}..={max})", min = Weight::MIN, max = Weight::MAX)]
    NotANumber {
        /// The text given.
        text: String,
    },
}

/// A proportional scheduling weight, 1..=10000, default 100 (the cgroup v2 `cpu.weight`
/// convention). Serialized as the number.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "u32", into = "u32")]
pub struct Weight(u32);

impl Weight {
    /// Smallest weight.
    pub const MIN: u32 = 1;
    /// Largest weight.
    pub const MAX: u32 = 10_000;
    /// The default weight.
    pub const DEFAULT: Weight = Weight(100);

    /// A weight in 1..=10000.
    pub fn new(weight: u32) -> Result<Weight, WeightError> {
        if (Self::MIN..=Self::MAX).contains(&weight) {
            Ok(Weight(weight))
        } else {
            Err(WeightError::OutOfRange {
                weight: weight.into(),
            })
        }
    }

    /// The number.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl Default for Weight {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TryFrom<u32> for Weight {
    type Error = WeightError;

    fn try_from(weight: u32) -> Result<Self, Self::Error> {
        Weight::new(weight)
    }
}

impl From<Weight> for u32 {
    fn from(weight: Weight) -> u32 {
        weight.0
    }
}

impl fmt::Display for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Parses a whole number (surrounding spaces allowed) and checks its range.
impl FromStr for Weight {
    type Err = WeightError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let weight: u64 = text.trim().parse().map_err(|_| WeightError::NotANumber {
            text: text.to_owned(),
        })?;
        match u32::try_from(weight) {
            Ok(weight) => Weight::new(weight),
            Err(_) => Err(WeightError::OutOfRange { weight }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_range_is_cgroup_v2() {
        assert!(Weight::new(0).is_err());
        assert!(Weight::new(10_001).is_err());
        assert_eq!(Weight::new(1).unwrap().get(), 1);
        assert_eq!(Weight::new(10_000).unwrap().get(), 10_000);
        assert_eq!(Weight::default(), Weight::DEFAULT);
        assert_eq!(Weight::default().get(), 100);
        assert_eq!("300".parse::<Weight>().unwrap().get(), 300);
        assert_eq!(" 300 ".parse::<Weight>().unwrap().to_string(), "300");
        assert_eq!(
            "0".parse::<Weight>().unwrap_err().to_string(),
            "weight 0 is outside 1..=10000"
        );
        assert_eq!(
            "lots".parse::<Weight>(),
            Err(WeightError::NotANumber {
                text: "lots".to_owned()
            })
        );
        assert_eq!(
            "99999999999".parse::<Weight>(),
            Err(WeightError::OutOfRange {
                weight: 99_999_999_999
            })
        );
        assert!("-1".parse::<Weight>().is_err());
    }

    #[test]
    fn serde_is_the_number_and_validates() {
        assert_eq!(serde_json::to_string(&Weight::DEFAULT).unwrap(), "100");
        assert_eq!(serde_json::from_str::<Weight>("250").unwrap().get(), 250);
        let error = serde_json::from_str::<Weight>("0").unwrap_err();
        assert!(
            error.to_string().contains("weight 0 is outside 1..=10000"),
            "{error}"
        );
        assert!(serde_json::from_str::<Weight>("10001").is_err());
    }
}
