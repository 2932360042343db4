//! The results table: each figure with its spread, its baseline from the same run, the ratio
//! and the target it is held against.

use std::fmt::Write as _;

use crate::stats::Samples;

/// What a figure's samples count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Wall time in seconds (printed in ms or µs).
    Seconds,
    /// A rate per second.
    PerSecond,
    /// Resident memory in MiB.
    MiB,
}

/// A measured quantity: its samples and unit.
#[derive(Debug, Clone)]
pub struct Figure {
    /// The unit of every sample.
    pub unit: Unit,
    /// The measurements.
    pub samples: Samples,
}

impl Figure {
    /// A time figure.
    pub fn time(samples: Samples) -> Self {
        Self {
            unit: Unit::Seconds,
            samples,
        }
    }

    /// A rate figure.
    pub fn rate(samples: Samples) -> Self {
        Self {
            unit: Unit::PerSecond,
            samples,
        }
    }

    /// A memory figure.
    pub fn mib(samples: Samples) -> Self {
        Self {
            unit: Unit::MiB,
            samples,
        }
    }

    fn format_value(&self, value: f64) -> String {
        if value.is_nan() {
            return "n/a".into();
        }
        match self.unit {
            Unit::Seconds if value < 0.001 => format!("{:.0} µs", value * 1e6),
            Unit::Seconds if value < 0.01 => format!("{:.2} ms", value * 1e3),
            Unit::Seconds if value < 1.0 => format!("{:.1} ms", value * 1e3),
            Unit::Seconds => format!("{value:.2} s"),
            Unit::PerSecond => format!("{value:.0} /s"),
            Unit::MiB => format!("{value:.1} MiB"),
        }
    }

    /// The median, formatted.
    pub fn median_text(&self) -> String {
        self.format_value(self.samples.median())
    }

    /// `p10 – p90 (n=N)`, formatted.
    pub fn spread_text(&self) -> String {
        format!(
            "{} – {} (n={})",
            self.format_value(self.samples.p10()),
            self.format_value(self.samples.p90()),
            self.samples.len()
        )
    }
}

/// The bound a figure is held against.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// median / baseline median at most this.
    RatioAtMost(f64),
    /// Median at most this (in the figure's unit: seconds, MiB).
    AtMost(f64),
    /// Median at least this (rates).
    AtLeast(f64),
}

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Row {
    /// Item of the benchmark issue (`1`, `2`, ...).
    pub item: &'static str,
    /// What was measured.
    pub what: String,
    /// The figure.
    pub figure: Figure,
    /// The baseline measured in the same run, with its name.
    pub baseline: Option<(String, Figure)>,
    /// The target, when the issue sets one.
    pub target: Option<Target>,
}

impl Row {
    /// A row without baseline or target.
    pub fn new(item: &'static str, what: impl Into<String>, figure: Figure) -> Self {
        Self {
            item,
            what: what.into(),
            figure,
            baseline: None,
            target: None,
        }
    }

    /// Adds the baseline.
    pub fn against(mut self, name: impl Into<String>, baseline: &Figure) -> Self {
        self.baseline = Some((name.into(), baseline.clone()));
        self
    }

    /// Adds the target.
    pub fn target(mut self, target: Target) -> Self {
        self.target = Some(target);
        self
    }

    /// Median over baseline median.
    pub fn ratio(&self) -> Option<f64> {
        let (_, baseline) = self.baseline.as_ref()?;
        let ratio = self.figure.samples.median() / baseline.samples.median();
        ratio.is_finite().then_some(ratio)
    }

    /// Whether the target is met (`None` without a target or without data).
    pub fn met(&self) -> Option<bool> {
        if self.figure.samples.is_empty() {
            return None;
        }
        let median = self.figure.samples.median();
        match self.target? {
            Target::RatioAtMost(limit) => self.ratio().map(|ratio| ratio <= limit),
            Target::AtMost(limit) => Some(median <= limit),
            Target::AtLeast(limit) => Some(median >= limit),
        }
    }

    fn target_text(&self) -> String {
        match self.target {
            None => String::new(),
            Some(Target::RatioAtMost(limit)) => format!("≤ {limit}×"),
            Some(Target::AtMost(limit)) => format!("≤ {}", self.figure.format_value(limit)),
            Some(Target::AtLeast(limit)) => format!("≥ {}", self.figure.format_value(limit)),
        }
    }
}

/// A titled group of rows with notes.
#[derive(Debug, Clone, Default)]
pub struct Section {
    /// Heading.
    pub title: String,
    /// The rows.
    pub rows: Vec<Row>,
    /// Notes printed under the table (how it was measured, caveats).
    pub notes: Vec<String>,
}

impl Section {
    /// An empty section.
    pub fn new(title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            ..Self::default()
        }
    }

    /// Adds a row.
    pub fn row(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// Adds a note.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// The section as Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "### {}\n", self.title);
        if !self.rows.is_empty() {
            out.push_str(TABLE_HEADER);
            for row in &self.rows {
                out.push_str(&row_markdown(row));
            }
            out.push('\n');
        }
        for note in &self.notes {
            let _ = writeln!(out, "* {note}");
        }
        if !self.notes.is_empty() {
            out.push('\n');
        }
        out
    }
}

const TABLE_HEADER: &str = "| # | measurement | median | p10 – p90 | baseline (same run) | baseline median | ratio | target | met |\n|---|---|---|---|---|---|---|---|---|\n";

fn row_markdown(row: &Row) -> String {
    let (baseline_name, baseline_median) = match &row.baseline {
        Some((name, figure)) => (name.clone(), figure.median_text()),
        None => (String::new(), String::new()),
    };
    let ratio = row.ratio().map(|r| format!("{r:.2}×")).unwrap_or_default();
    let met = match row.met() {
        Some(true) => "yes",
        Some(false) => "**no**",
        None if row.target.is_some() => "n/a",
        None => "",
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        row.item,
        row.what,
        row.figure.median_text(),
        row.figure.spread_text(),
        baseline_name,
        baseline_median,
        ratio,
        row.target_text(),
        met
    )
}

/// Every row with a target, as `met`/`missed` lines for the summary.
pub fn target_summary(sections: &[Section]) -> String {
    let mut out = String::new();
    for row in sections.iter().flat_map(|s| s.rows.iter()) {
        if row.target.is_none() {
            continue;
        }
        let verdict = match row.met() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "not measured",
        };
        let value = match (row.target, row.ratio()) {
            (Some(Target::RatioAtMost(_)), Some(ratio)) => format!("{ratio:.2}×"),
            _ => row.figure.median_text(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            row.item,
            row.what,
            row.target_text(),
            value,
            verdict
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(values: &[f64]) -> Figure {
        let mut samples = Samples::new();
        for v in values {
            samples.push_value(*v);
        }
        Figure::time(samples)
    }

    #[test]
    fn ratio_target_is_judged_on_medians() {
        let row = Row::new("1", "x", figure(&[0.003, 0.002, 0.0021]))
            .against("base", &figure(&[0.001, 0.0012, 0.0011]))
            .target(Target::RatioAtMost(1.5));
        assert!((row.ratio().unwrap() - 2.1 / 1.1).abs() < 1e-9);
        assert_eq!(row.met(), Some(false));
        assert!(row_markdown(&row).contains("**no**"));
    }

    #[test]
    fn missing_data_is_not_a_pass() {
        let row = Row::new("4", "x", figure(&[])).target(Target::AtMost(0.1));
        assert_eq!(row.met(), None);
    }
}
