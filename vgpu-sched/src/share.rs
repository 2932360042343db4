//! Shares of a GPU's time and per-instance weights: the two numbers every other module speaks.
//! [`Weight`] is the workspace's one definition, from `vgpu-types`.
//!
//! A [`Share`] is kept in parts per million (ppm) so that sums are exact integers: plans can
//! promise "the busy instances get exactly 100%" without floating-point slack, and the D-Bus
//! layer can carry the value as a plain `u32`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
pub use vgpu_types::{Weight, WeightError};

/// Parts per million in 100%.
pub const PPM_PER_WHOLE: u32 = 1_000_000;
const PPM_PER_PERCENT: u32 = 10_000;

/// A fraction of a GPU's time, 0%..=100%, stored in parts per million.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(try_from = "u32", into = "u32")]
pub struct Share(u32);

/// Errors for reading or building a [`Share`] or a [`Weight`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    /// A share above 100%.
    #[error("share of {ppm} ppm is above 100% (1000000 ppm)")]
    AboveWhole {
        /// The value given, in ppm.
        ppm: u64,
    },
    /// Text that is not a percentage such as `25`, `12.5` or `12.5%`.
    #[error("{text:?} is not a percentage between 0 and 100 (e.g. 25 or 12.5%)")]
    NotAPercentage {
        /// The text given.
        text: String,
    },
    /// A weight outside 1..=10000 or not a number.
    #[error(transparent)]
    Weight(#[from] WeightError),
}

impl Share {
    /// Nothing.
    pub const ZERO: Share = Share(0);
    /// The whole GPU.
    pub const WHOLE: Share = Share(PPM_PER_WHOLE);

    /// A share from parts per million (0..=1000000).
    pub fn from_ppm(ppm: u32) -> Result<Self, ShareError> {
        if ppm > PPM_PER_WHOLE {
            return Err(ShareError::AboveWhole { ppm: ppm.into() });
        }
        Ok(Share(ppm))
    }

    /// A share from whole percent (0..=100).
    pub fn from_percent(percent: u32) -> Result<Self, ShareError> {
        let ppm = u64::from(percent) * u64::from(PPM_PER_PERCENT);
        match u32::try_from(ppm) {
            Ok(ppm) if ppm <= PPM_PER_WHOLE => Ok(Share(ppm)),
            _ => Err(ShareError::AboveWhole { ppm }),
        }
    }

    /// The value in parts per million.
    pub fn ppm(self) -> u32 {
        self.0
    }

    /// The value as a fraction 0.0..=1.0 (for display and measurement only).
    pub fn fraction(self) -> f64 {
        f64::from(self.0) / f64::from(PPM_PER_WHOLE)
    }

    /// The value in percent 0.0..=100.0 (for display and measurement only).
    pub fn percent(self) -> f64 {
        f64::from(self.0) / f64::from(PPM_PER_PERCENT)
    }

    /// The sum of two shares, if it stays within 100%.
    pub fn checked_add(self, other: Share) -> Option<Share> {
        let sum = self.0.checked_add(other.0)?;
        (sum <= PPM_PER_WHOLE).then_some(Share(sum))
    }

    /// The difference, floored at zero.
    pub fn saturating_sub(self, other: Share) -> Share {
        Share(self.0.saturating_sub(other.0))
    }
}

impl TryFrom<u32> for Share {
    type Error = ShareError;
    fn try_from(ppm: u32) -> Result<Self, Self::Error> {
        Share::from_ppm(ppm)
    }
}

impl From<Share> for u32 {
    fn from(share: Share) -> u32 {
        share.0
    }
}

/// Percent with up to four decimals and no trailing zeros: `25%`, `12.5%`, `33.3333%`.
impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / PPM_PER_PERCENT;
        let frac = self.0 % PPM_PER_PERCENT;
        if frac == 0 {
            write!(f, "{whole}%")
        } else {
            let digits = format!("{frac:04}");
            write!(f, "{whole}.{}%", digits.trim_end_matches('0'))
        }
    }
}

/// Parses `25`, `25%`, `12.5`, `12.5%` (percent, at most four decimals).
impl FromStr for Share {
    type Err = ShareError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || ShareError::NotAPercentage {
            text: text.to_owned(),
        };
        let number = text.trim().strip_suffix('%').unwrap_or(text.trim()).trim();
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !all_digits(whole) || !all_digits(frac) || frac.len() > 4 {
            return Err(bad());
        }
        if number.contains('.') && frac.is_empty() {
            return Err(bad());
        }
        let whole: u64 = whole.parse().map_err(|_| bad())?;
        let frac_ppm: u64 = if frac.is_empty() {
            0
        } else {
            // Pad to four decimals: "5" means 0.5% = 5000 ppm.
            format!("{frac:0<4}").parse().map_err(|_| bad())?
        };
        let ppm = whole
            .checked_mul(u64::from(PPM_PER_PERCENT))
            .and_then(|w| w.checked_add(frac_ppm))
            .ok_or_else(bad)?;
        match u32::try_from(ppm) {
            Ok(ppm) if ppm <= PPM_PER_WHOLE => Ok(Share(ppm)),
            _ => Err(ShareError::AboveWhole { ppm }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_text_round_trips() {
        for (text, ppm, shown) in [
            ("25", 250_000, "25%"),
            ("25%", 250_000, "25%"),
            ("12.5%", 125_000, "12.5%"),
            (" 0.0001 % ", 1, "0.0001%"),
            ("100", 1_000_000, "100%"),
            ("0", 0, "0%"),
        ] {
            let share: Share = text.parse().unwrap();
            assert_eq!(share.ppm(), ppm, "{text}");
            assert_eq!(share.to_string(), shown);
        }
    }

    #[test]
    fn share_text_refusals_name_the_text() {
        for text in ["", "%", "abc", "-5", "1.", ".5", "12.34567", "1e2", "50%%"] {
            let err = text.parse::<Share>().unwrap_err();
            assert_eq!(
                err,
                ShareError::NotAPercentage {
                    text: text.to_owned()
                }
            );
        }
        let err = "100.5".parse::<Share>().unwrap_err();
        assert_eq!(err, ShareError::AboveWhole { ppm: 1_005_000 });
        assert!(err.to_string().contains("1005000 ppm"));
        assert!("99999999999999999999".parse::<Share>().is_err());
    }

    #[test]
    fn share_bounds() {
        assert!(Share::from_ppm(1_000_001).is_err());
        assert!(Share::from_percent(101).is_err());
        assert!(Share::from_percent(u32::MAX).is_err());
        assert_eq!(Share::from_percent(100).unwrap(), Share::WHOLE);
        assert_eq!(Share::WHOLE.checked_add(Share(1)), None);
        assert_eq!(Share(3).saturating_sub(Share(5)), Share::ZERO);
    }

    #[test]
    fn serde_validates() {
        assert!(serde_json::from_str::<Share>("1000001").is_err());
        assert!(serde_json::from_str::<Weight>("0").is_err());
        assert_eq!(serde_json::from_str::<Weight>("250").unwrap().get(), 250);
        assert_eq!(serde_json::to_string(&Share(42)).unwrap(), "42");
    }
}
