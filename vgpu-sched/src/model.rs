//! What an administrator sets: per instance a weight, a guarantee and a cap; per parent a policy,
//! a period and a time slice. Plus admission control, which keeps the guarantees on a parent
//! within 100%.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::share::{Share, ShareError, Weight};

/// Names one instance in messages and results: an mdev UUID or a VF's PCI address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InstanceId(pub String);

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for InstanceId {
    fn from(id: &str) -> Self {
        InstanceId(id.to_owned())
    }
}

impl From<String> for InstanceId {
    fn from(id: String) -> Self {
        InstanceId(id)
    }
}

/// How a parent divides its time between its instances.
///
/// The four policies are the combinations of two questions: are weights used (otherwise every
/// instance counts the same), and is the scheduler work-conserving (an idle instance's time goes
/// to the busy ones) or does every instance keep its slot whether it uses it or not.
///
/// | policy | weights | idle time |
/// |---|---|---|
/// | `best-effort` | ignored | given to busy instances |
/// | `equal-share` | ignored | kept by its owner (unused) |
/// | `fixed-share` | used | kept by its owner (unused) |
/// | `weighted` | used | given to busy instances |
///
/// Guarantees and caps apply under every policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Round robin among instances with work (NVIDIA's default).
    BestEffort,
    /// Every existing instance gets the same share, used or not.
    EqualShare,
    /// Every instance gets its weighted share of the parent, used or not.
    FixedShare,
    /// Shares by weight among the busy instances (cgroup v2 `cpu.weight`).
    #[default]
    Weighted,
}

impl Policy {
    /// All policies, in the order they are documented.
    pub const ALL: [Policy; 4] = [
        Policy::BestEffort,
        Policy::EqualShare,
        Policy::FixedShare,
        Policy::Weighted,
    ];

    /// Whether instance weights change the shares (otherwise all count as equal).
    pub fn uses_weights(self) -> bool {
        matches!(self, Policy::FixedShare | Policy::Weighted)
    }

    /// Whether an idle instance's time goes to the busy ones.
    pub fn is_work_conserving(self) -> bool {
        matches!(self, Policy::BestEffort | Policy::Weighted)
    }

    /// The kebab-case name used in files, on D-Bus and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Policy::BestEffort => "best-effort",
            Policy::EqualShare => "equal-share",
            Policy::FixedShare => "fixed-share",
            Policy::Weighted => "weighted",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = ModelError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|policy| policy.name() == text)
            .ok_or_else(|| ModelError::UnknownPolicy {
                text: text.to_owned(),
            })
    }
}

/// The scheduling settings of one instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceSchedule {
    /// Which instance.
    pub id: InstanceId,
    /// Proportional weight among the instances on the same parent.
    #[serde(default)]
    pub weight: Weight,
    /// Guarantee: the instance gets at least this share whenever it is busy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_share: Option<Share>,
    /// Cap: the instance never gets more than this share, even on an otherwise idle parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_share: Option<Share>,
}

impl InstanceSchedule {
    /// Default settings (weight 100, no guarantee, no cap) for an instance.
    pub fn new(id: impl Into<InstanceId>) -> Self {
        Self {
            id: id.into(),
            weight: Weight::DEFAULT,
            min_share: None,
            max_share: None,
        }
    }

    /// With a weight.
    pub fn with_weight(mut self, weight: Weight) -> Self {
        self.weight = weight;
        self
    }

    /// With a guarantee.
    pub fn with_min_share(mut self, min: Share) -> Self {
        self.min_share = Some(min);
        self
    }

    /// With a cap.
    pub fn with_max_share(mut self, max: Share) -> Self {
        self.max_share = Some(max);
        self
    }

    /// The guarantee, zero when unset.
    pub fn guarantee(&self) -> Share {
        self.min_share.unwrap_or(Share::ZERO)
    }

    /// The cap, 100% when unset.
    pub fn cap(&self) -> Share {
        self.max_share.unwrap_or(Share::WHOLE)
    }

    /// Settings from D-Bus style numbers: weight 1..=10000, shares in ppm with 0 meaning unset
    /// (no guarantee, no cap). Refusals name the instance and the value.
    pub fn from_raw(
        id: impl Into<InstanceId>,
        weight: u32,
        min_share_ppm: u32,
        max_share_ppm: u32,
    ) -> Result<Self, ModelError> {
        let id = id.into();
        let value = |what: &str, source| ModelError::Value {
            what: format!("{what} of {id}"),
            source,
        };
        let weight = Weight::new(weight).map_err(|e| value("weight", e.into()))?;
        let share = |what: &str, ppm: u32| -> Result<Option<Share>, ModelError> {
            if ppm == 0 {
                return Ok(None);
            }
            Share::from_ppm(ppm).map(Some).map_err(|e| value(what, e))
        };
        let settings = InstanceSchedule {
            min_share: share("min share", min_share_ppm)?,
            max_share: share("max share", max_share_ppm)?,
            weight,
            id,
        };
        settings.validate()?;
        Ok(settings)
    }

    /// Checks the settings on their own: a cap above zero, and a guarantee no larger than the cap.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.max_share == Some(Share::ZERO) {
            return Err(ModelError::ZeroCap {
                instance: self.id.clone(),
            });
        }
        if self.guarantee() > self.cap() {
            return Err(ModelError::MinAboveMax {
                instance: self.id.clone(),
                min: self.guarantee(),
                max: self.cap(),
            });
        }
        Ok(())
    }
}

/// What a profile asks for in compute, as written in the profile (`weight = 200`,
/// `min_share = "25%"`): the instance's initial scheduling settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ComputeRequest {
    /// Requested weight, default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Weight>,
    /// Requested guarantee ("50% compute" in the cGPU sense).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_share: Option<Share>,
    /// Requested cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_share: Option<Share>,
}

impl ComputeRequest {
    /// The initial settings of a new instance created from a profile with this request.
    ///
    /// A profile that only names a guarantee gets a weight in proportion to it (50% → 5000,
    /// like cgroup's weight scale where 100 is 1%), so that the spare time above the guarantees
    /// is also split in the ratio the profile asked for; an explicit weight wins.
    pub fn initial_settings(
        &self,
        id: impl Into<InstanceId>,
    ) -> Result<InstanceSchedule, ModelError> {
        let weight = match (self.weight, self.min_share) {
            (Some(weight), _) => weight,
            (None, Some(min)) if min > Share::ZERO => {
                // 1% of the GPU is worth weight 100: ppm / 100, clamped into 1..=10000.
                let weight = (min.ppm() / 100).clamp(Weight::MIN, Weight::MAX);
                // Cannot fail: clamped into the valid range just above.
                Weight::new(weight).unwrap_or(Weight::DEFAULT)
            }
            _ => Weight::DEFAULT,
        };
        let settings = InstanceSchedule {
            id: id.into(),
            weight,
            min_share: self.min_share.filter(|min| *min > Share::ZERO),
            max_share: self.max_share,
        };
        settings.validate()?;
        Ok(settings)
    }
}

/// Smallest period: 1 ms (AMD GIM's smallest slice).
pub const MIN_PERIOD_US: u32 = 1_000;
/// Largest period: 1 s (AMD GIM's `MAX_TIME_SLICE`).
pub const MAX_PERIOD_US: u32 = 1_000_000;
/// The default period: 100 ms, cgroup `cpu.max`'s default period.
pub const DEFAULT_PERIOD_US: u32 = 100_000;
/// Smallest time slice: 100 µs (GIM's debugfs granularity).
pub const MIN_TIME_SLICE_US: u32 = 100;

/// The scheduling settings of one parent device (a physical GPU or a sample parent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentSchedule {
    /// The parent's name: a PCI address (`0000:3b:00.0`) or a virtual parent (`mtty`).
    pub parent: String,
    /// How time is divided.
    #[serde(default)]
    pub policy: Policy,
    /// The round over which shares are met, in µs: in each period every instance gets its
    /// share of the period.
    #[serde(default = "default_period")]
    pub period_us: u32,
    /// The longest run an instance gets before the scheduler switches, in µs. `None` lets the
    /// backend choose (software: 1 ms; NVIDIA: the driver default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_slice_us: Option<u32>,
    /// NVIDIA adaptive round robin: scheduling frequency in Hz (63..=960 on the hardware).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_hz: Option<u32>,
}

fn default_period() -> u32 {
    DEFAULT_PERIOD_US
}

impl ParentSchedule {
    /// Default settings for a parent: `weighted`, 100 ms period, backend time slice.
    pub fn new(parent: impl Into<String>) -> Self {
        Self {
            parent: parent.into(),
            policy: Policy::default(),
            period_us: DEFAULT_PERIOD_US,
            time_slice_us: None,
            frequency_hz: None,
        }
    }

    /// With a policy.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// With a period in µs.
    pub fn with_period_us(mut self, period_us: u32) -> Self {
        self.period_us = period_us;
        self
    }

    /// With a time slice in µs.
    pub fn with_time_slice_us(mut self, time_slice_us: u32) -> Self {
        self.time_slice_us = Some(time_slice_us);
        self
    }

    /// Checks the period and time slice ranges.
    pub fn validate(&self) -> Result<(), ModelError> {
        if !(MIN_PERIOD_US..=MAX_PERIOD_US).contains(&self.period_us) {
            return Err(ModelError::PeriodOutOfRange {
                parent: self.parent.clone(),
                period_us: self.period_us,
            });
        }
        if let Some(slice) = self.time_slice_us {
            if !(MIN_TIME_SLICE_US..=self.period_us).contains(&slice) {
                return Err(ModelError::TimeSliceOutOfRange {
                    parent: self.parent.clone(),
                    time_slice_us: slice,
                    period_us: self.period_us,
                });
            }
        }
        if self.frequency_hz == Some(0) {
            return Err(ModelError::ZeroFrequency {
                parent: self.parent.clone(),
            });
        }
        Ok(())
    }
}

/// Reads a duration for a period or time slice: `2ms`, `0.5ms`, `500us`, `500µs`, `1s`; a bare
/// number is µs. Returns µs.
pub fn parse_duration_us(text: &str) -> Result<u32, ModelError> {
    let bad = || ModelError::NotADuration {
        text: text.to_owned(),
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let scale: u64 = match unit.trim() {
        "" | "us" | "µs" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        _ => return Err(bad()),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || (number.contains('.') && frac.is_empty()) {
        return Err(bad());
    }
    let whole: u64 = whole.parse().map_err(|_| bad())?;
    let mut us = whole.checked_mul(scale).ok_or_else(bad)?;
    // Fractions only down to whole µs: 0.5ms is fine, 0.5us is not.
    let mut place = scale;
    for digit in frac.bytes() {
        place /= 10;
        let digit = u64::from(digit - b'0');
        if place == 0 {
            if digit != 0 {
                return Err(bad());
            }
            continue;
        }
        us = us.checked_add(digit * place).ok_or_else(bad)?;
    }
    u32::try_from(us).map_err(|_| bad())
}

/// Admission control for a whole parent: each instance valid, no instance twice, and the
/// guarantees within 100%.
pub fn check_parent(
    parent: &ParentSchedule,
    instances: &[InstanceSchedule],
) -> Result<(), ModelError> {
    parent.validate()?;
    for (index, instance) in instances.iter().enumerate() {
        instance.validate()?;
        if instances[..index]
            .iter()
            .any(|earlier| earlier.id == instance.id)
        {
            return Err(ModelError::DuplicateInstance {
                parent: parent.parent.clone(),
                instance: instance.id.clone(),
            });
        }
    }
    check_guarantees(&parent.parent, instances.iter())
}

/// Admission control for one change: would `candidate` (new, or replacing the instance with the
/// same id) keep the parent's guarantees within 100%? Refusals name every guarantee.
pub fn admit(
    parent: &ParentSchedule,
    existing: &[InstanceSchedule],
    candidate: &InstanceSchedule,
) -> Result<(), ModelError> {
    candidate.validate()?;
    let others = existing
        .iter()
        .filter(|instance| instance.id != candidate.id);
    check_guarantees(&parent.parent, others.chain(std::iter::once(candidate)))
}

fn check_guarantees<'a>(
    parent: &str,
    instances: impl Iterator<Item = &'a InstanceSchedule> + Clone,
) -> Result<(), ModelError> {
    let total: u64 = instances
        .clone()
        .map(|instance| u64::from(instance.guarantee().ppm()))
        .sum();
    if total <= u64::from(Share::WHOLE.ppm()) {
        return Ok(());
    }
    let parts = instances
        .filter(|instance| instance.guarantee() > Share::ZERO)
        .map(|instance| format!("{} (uuid {})", instance.guarantee(), instance.id))
        .collect::<Vec<_>>()
        .join(" + ");
    Err(ModelError::GuaranteesExceedWhole {
        parent: parent.to_owned(),
        total_ppm: total,
        parts,
    })
}

/// What callers do with a refusal: which D-Bus error it becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Bad input: out of range, malformed, contradictory (`InvalidArgs`).
    InvalidArgs,
    /// The parent has no room left for the request (`NoCapacity`).
    NoCapacity,
    /// Not possible right now, e.g. vGPUs are running (`Busy`).
    Busy,
    /// The backend cannot do this at all (`NotSupported`).
    NotSupported,
}

/// Refusals of scheduling settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// A share or weight that is malformed or out of range.
    #[error("invalid scheduling value for {what}")]
    Value {
        /// What the value was for (e.g. `min share of uuid ...`).
        what: String,
        /// Why it is invalid.
        #[source]
        source: ShareError,
    },
    /// A policy name that is not one of the four.
    #[error("unknown scheduling policy {text:?} (expected best-effort, equal-share, fixed-share or weighted)")]
    UnknownPolicy {
        /// The text given.
        text: String,
    },
    /// A cap of zero.
    #[error("a max share of 0% on {instance} would stop it from ever running; leave the cap unset for no cap")]
    ZeroCap {
        /// The instance.
        instance: InstanceId,
    },
    /// A guarantee above the cap.
    #[error("min share {min} of {instance} is above its max share {max}")]
    MinAboveMax {
        /// The instance.
        instance: InstanceId,
        /// Its guarantee.
        min: Share,
        /// Its cap.
        max: Share,
    },
    /// Guarantees over 100%.
    #[error("guarantees on {parent} would total {total}: {parts}", total = percent_of_ppm(*total_ppm))]
    GuaranteesExceedWhole {
        /// The parent.
        parent: String,
        /// The total in ppm.
        total_ppm: u64,
        /// Each guarantee with its instance, `50% (uuid a) + 70% (uuid b)`.
        parts: String,
    },
    /// The same instance twice on one parent.
    #[error("instance {instance} is listed twice on {parent}")]
    DuplicateInstance {
        /// The parent.
        parent: String,
        /// The instance.
        instance: InstanceId,
    },
    /// A period outside 1 ms..=1 s.
    #[error(
        "period of {period_us} µs on {parent} is outside {MIN_PERIOD_US}..={MAX_PERIOD_US} µs"
    )]
    PeriodOutOfRange {
        /// The parent.
        parent: String,
        /// The period given.
        period_us: u32,
    },
    /// A time slice outside 100 µs..=period.
    #[error("time slice of {time_slice_us} µs on {parent} is outside {MIN_TIME_SLICE_US} µs..=the period ({period_us} µs)")]
    TimeSliceOutOfRange {
        /// The parent.
        parent: String,
        /// The time slice given.
        time_slice_us: u32,
        /// The parent's period.
        period_us: u32,
    },
    /// A scheduling frequency of 0 Hz.
    #[error("scheduling frequency of 0 Hz on {parent}; leave it unset for the driver default")]
    ZeroFrequency {
        /// The parent.
        parent: String,
    },
    /// Text that is not a duration.
    #[error("{text:?} is not a duration (e.g. 2ms, 500us, 1s)")]
    NotADuration {
        /// The text given.
        text: String,
    },
}

impl ModelError {
    /// Which D-Bus error this refusal maps to.
    pub fn refusal(&self) -> Refusal {
        match self {
            ModelError::GuaranteesExceedWhole { .. } => Refusal::NoCapacity,
            _ => Refusal::InvalidArgs,
        }
    }
}

fn percent_of_ppm(ppm: u64) -> String {
    match u32::try_from(ppm)
        .ok()
        .and_then(|ppm| Share::from_ppm(ppm).ok())
    {
        Some(share) => share.to_string(),
        // Above 100%: format by hand, Share cannot hold it.
        None => {
            let whole = ppm / 10_000;
            let frac = ppm % 10_000;
            if frac == 0 {
                format!("{whole}%")
            } else {
                format!("{whole}.{}%", format!("{frac:04}").trim_end_matches('0'))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pct(p: u32) -> Share {
        Share::from_percent(p).unwrap()
    }

    #[test]
    fn overcommitted_guarantees_are_refused_with_the_numbers() {
        let parent = ParentSchedule::new("0000:3b:00.0");
        let a = InstanceSchedule::new("a").with_min_share(pct(50));
        let b = InstanceSchedule::new("b").with_min_share(pct(70));
        let err = admit(&parent, std::slice::from_ref(&a), &b).unwrap_err();
        assert_eq!(
            err.to_string(),
            "guarantees on 0000:3b:00.0 would total 120%: 50% (uuid a) + 70% (uuid b)"
        );
        assert_eq!(err.refusal(), Refusal::NoCapacity);
        assert!(check_parent(&parent, &[a.clone(), b]).is_err());
    }

    #[test]
    fn admission_replaces_the_instance_being_changed() {
        let parent = ParentSchedule::new("0000:3b:00.0");
        let a = InstanceSchedule::new("a").with_min_share(pct(60));
        let b = InstanceSchedule::new("b").with_min_share(pct(40));
        // Lowering a's own guarantee must not count its old value.
        let a_new = InstanceSchedule::new("a").with_min_share(pct(55));
        admit(&parent, &[a.clone(), b.clone()], &a_new).unwrap();
        // Exactly 100% is allowed.
        check_parent(&parent, &[a, b]).unwrap();
        let over = InstanceSchedule::new("c").with_min_share(Share::from_ppm(1).unwrap());
        let err = admit(
            &parent,
            &[
                a_new.clone(),
                InstanceSchedule::new("b").with_min_share(pct(45)),
            ],
            &over,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "guarantees on 0000:3b:00.0 would total 100.0001%: 55% (uuid a) + 45% (uuid b) + 0.0001% (uuid c)"
        );
    }

    #[test]
    fn instance_settings_are_checked() {
        let err = InstanceSchedule::new("u1")
            .with_min_share(pct(30))
            .with_max_share(pct(20))
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "min share 30% of u1 is above its max share 20%"
        );
        assert_eq!(err.refusal(), Refusal::InvalidArgs);
        let err = InstanceSchedule::new("u1")
            .with_max_share(Share::ZERO)
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("max share of 0% on u1"));
        InstanceSchedule::new("u1")
            .with_min_share(pct(20))
            .with_max_share(pct(20))
            .validate()
            .unwrap();
    }

    #[test]
    fn parent_ranges_are_checked() {
        let bad_period = ParentSchedule::new("0000:3b:00.0").with_period_us(999);
        assert_eq!(
            bad_period.validate().unwrap_err().to_string(),
            "period of 999 µs on 0000:3b:00.0 is outside 1000..=1000000 µs"
        );
        assert!(ParentSchedule::new("p")
            .with_period_us(1_000_001)
            .validate()
            .is_err());
        let slice_too_long = ParentSchedule::new("p")
            .with_period_us(10_000)
            .with_time_slice_us(10_001);
        assert!(matches!(
            slice_too_long.validate(),
            Err(ModelError::TimeSliceOutOfRange {
                time_slice_us: 10_001,
                ..
            })
        ));
        assert!(ParentSchedule::new("p")
            .with_time_slice_us(99)
            .validate()
            .is_err());
        let mut zero_hz = ParentSchedule::new("p");
        zero_hz.frequency_hz = Some(0);
        assert!(zero_hz.validate().is_err());
        ParentSchedule::new("p")
            .with_time_slice_us(100)
            .validate()
            .unwrap();
    }

    #[test]
    fn raw_values_from_dbus() {
        let settings = InstanceSchedule::from_raw("u1", 300, 250_000, 0).unwrap();
        assert_eq!(settings.weight.get(), 300);
        assert_eq!(settings.min_share, Some(pct(25)));
        assert_eq!(settings.max_share, None);
        let err = InstanceSchedule::from_raw("u1", 0, 0, 0).unwrap_err();
        assert_eq!(err.to_string(), "invalid scheduling value for weight of u1");
        assert_eq!(
            std::error::Error::source(&err).unwrap().to_string(),
            "weight 0 is outside 1..=10000"
        );
        let err = InstanceSchedule::from_raw("u1", 100, 0, 2_000_000).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid scheduling value for max share of u1"
        );
        assert!(matches!(
            InstanceSchedule::from_raw("u1", 100, 500_000, 400_000),
            Err(ModelError::MinAboveMax { .. })
        ));
    }

    #[test]
    fn durations() {
        for (text, us) in [
            ("2ms", 2_000),
            ("0.5ms", 500),
            ("500us", 500),
            ("500µs", 500),
            ("1s", 1_000_000),
            ("1.25 s", 1_250_000),
            ("750", 750),
            ("3.000ms", 3_000),
        ] {
            assert_eq!(parse_duration_us(text).unwrap(), us, "{text}");
        }
        for text in [
            "",
            "ms",
            "2 min",
            "1.ms",
            ".5ms",
            "0.5us",
            "-1ms",
            "99999999s",
            "1.0001ms",
        ] {
            assert_eq!(
                parse_duration_us(text),
                Err(ModelError::NotADuration {
                    text: text.to_owned()
                }),
                "{text}"
            );
        }
    }

    #[test]
    fn duplicates_are_refused() {
        let parent = ParentSchedule::new("mtty");
        let err = check_parent(
            &parent,
            &[InstanceSchedule::new("a"), InstanceSchedule::new("a")],
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "instance a is listed twice on mtty");
    }

    #[test]
    fn policy_names_round_trip() {
        for policy in Policy::ALL {
            assert_eq!(policy.name().parse::<Policy>().unwrap(), policy);
            let json = serde_json::to_string(&policy).unwrap();
            assert_eq!(json, format!("\"{}\"", policy.name()));
        }
        assert!(matches!(
            "fair".parse::<Policy>(),
            Err(ModelError::UnknownPolicy { .. })
        ));
    }

    #[test]
    fn compute_request_becomes_initial_settings() {
        let none = ComputeRequest::default().initial_settings("a").unwrap();
        assert_eq!(none, InstanceSchedule::new("a"));

        let half = ComputeRequest {
            min_share: Some(pct(50)),
            ..Default::default()
        }
        .initial_settings("b")
        .unwrap();
        assert_eq!(half.weight.get(), 5_000);
        assert_eq!(half.min_share, Some(pct(50)));

        let tiny = ComputeRequest {
            min_share: Some(Share::from_ppm(50).unwrap()),
            ..Default::default()
        }
        .initial_settings("c")
        .unwrap();
        assert_eq!(tiny.weight.get(), 1);

        let explicit = ComputeRequest {
            weight: Some(Weight::new(300).unwrap()),
            min_share: Some(pct(10)),
            max_share: Some(pct(40)),
        }
        .initial_settings("d")
        .unwrap();
        assert_eq!(explicit.weight.get(), 300);
        assert_eq!(explicit.max_share, Some(pct(40)));

        let contradictory = ComputeRequest {
            min_share: Some(pct(60)),
            max_share: Some(pct(40)),
            ..Default::default()
        };
        assert!(matches!(
            contradictory.initial_settings("e"),
            Err(ModelError::MinAboveMax { .. })
        ));
    }

    #[test]
    fn settings_deserialize_with_defaults() {
        let parent: ParentSchedule = serde_json::from_str(r#"{"parent":"0000:3b:00.0"}"#).unwrap();
        assert_eq!(parent, ParentSchedule::new("0000:3b:00.0"));
        let instance: InstanceSchedule =
            serde_json::from_str(r#"{"id":"a","min_share":250000}"#).unwrap();
        assert_eq!(instance.weight, Weight::DEFAULT);
        assert_eq!(instance.min_share, Some(pct(25)));
        assert!(serde_json::from_str::<InstanceSchedule>(r#"{"id":"a","weight":0}"#).is_err());
    }
}
