//! Scheduling on the bus: option names of `Instance.SetSchedule` and
//! `Parent.SetSchedulerPolicy`, the scheduling properties as plain records, and the plan of one
//! parent computed from them (with the pure `vgpu-sched` crate, so clients need no host code).
//!
//! Units: shares are `u` in parts per million (1% = 10000), `0` meaning unset; durations are
//! `u` in microseconds, a parent's `TimeSliceUs` `0` meaning the backend's default.

use serde::Serialize;
use vgpu_sched::{Busy, InstanceSchedule, ModelError, ParentSchedule, Plan, Policy};
use zbus::OwnedVariant;

use crate::proxy::PropertyMap;
use crate::wire::PropertyError;

/// Keys of `Parent.SetSchedulerPolicy`'s options.
pub mod option {
    /// `u`: the period in µs (1000..=1000000).
    pub const PERIOD: &str = "period";
    /// `u`: the time slice in µs (100..=period); `0` returns to the backend's default.
    pub const SLICE: &str = "slice";
}

/// Instance property names.
pub mod instance_property {
    /// `u`: weight 1..=10000 (0 when never set: the default 100 applies).
    pub const WEIGHT: &str = "Weight";
    /// `u`: guarantee in ppm, 0 = none.
    pub const MIN_SHARE: &str = "MinShare";
    /// `u`: cap in ppm, 0 = none.
    pub const MAX_SHARE: &str = "MaxShare";
    /// `u`: the plan's share in ppm.
    pub const REQUESTED_SHARE: &str = "RequestedShare";
    /// `u`: what the backend gives, ppm.
    pub const EFFECTIVE_SHARE: &str = "EffectiveShare";
    /// `u`: GPU time per period, µs (AMD: the VF's GIM time slice).
    pub const TIME_SLICE_US: &str = "TimeSliceUs";
    /// `b`: whether the backend holds the instance to the request.
    pub const ENFORCED: &str = "Enforced";
    /// `s`: why not, or how.
    pub const SCHEDULING_NOTE: &str = "SchedulingNote";
}

/// Parent property names.
pub mod parent_property {
    /// `s`: `best-effort`, `equal-share`, `fixed-share`, `weighted`.
    pub const POLICY: &str = "Policy";
    /// `u`: period in µs.
    pub const PERIOD_US: &str = "PeriodUs";
    /// `u`: time slice in µs, 0 = the backend's default.
    pub const TIME_SLICE_US: &str = "TimeSliceUs";
    /// `s`: `software`, `nvidia`, `amd-gim`, `intel-gvt`.
    pub const SCHEDULER_BACKEND: &str = "SchedulerBackend";
    /// `as`: knobs the backend enforces: `weight`, `min`, `max`, `runtime-change`,
    /// `requires-idle-gpu`.
    pub const SCHEDULER_CAPABILITIES: &str = "SchedulerCapabilities";
    /// `s`: what applying needs (e.g. a driver reload) or what went wrong.
    pub const SCHEDULER_NOTE: &str = "SchedulerNote";
}

fn get<T: TryFrom<OwnedVariant>>(
    path: &str,
    interface: &'static str,
    map: &PropertyMap,
    property: &'static str,
) -> Result<T, PropertyError> {
    map.get(property)
        .and_then(|value| value.try_clone().ok())
        .and_then(|value| T::try_from(value).ok())
        .ok_or_else(|| PropertyError {
            path: path.to_string(),
            interface,
            property,
        })
}

/// An instance's scheduling properties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceScheduleRecord {
    /// UUID.
    pub uuid: String,
    /// Parent name.
    pub parent: String,
    /// Whether it runs now.
    pub active: bool,
    /// Weight (0: never set, the default 100 applies).
    pub weight: u32,
    /// Guarantee, ppm (0 none).
    pub min_share_ppm: u32,
    /// Cap, ppm (0 none).
    pub max_share_ppm: u32,
    /// The plan's share, ppm.
    pub requested_share_ppm: u32,
    /// What the backend gives, ppm.
    pub effective_share_ppm: u32,
    /// GPU time per period, µs.
    pub time_slice_us: u32,
    /// Held to the request by the backend.
    pub enforced: bool,
    /// Why not, or how.
    pub note: String,
}

impl InstanceScheduleRecord {
    /// Reads the scheduling properties of an `Instance` object.
    pub fn from_properties(path: &str, map: &PropertyMap) -> Result<Self, PropertyError> {
        use instance_property as p;
        let i = crate::names::interface::INSTANCE;
        Ok(Self {
            uuid: get(path, i, map, "Uuid")?,
            parent: get(path, i, map, "ParentName")?,
            active: get(path, i, map, "Active")?,
            weight: get(path, i, map, p::WEIGHT)?,
            min_share_ppm: get(path, i, map, p::MIN_SHARE)?,
            max_share_ppm: get(path, i, map, p::MAX_SHARE)?,
            requested_share_ppm: get(path, i, map, p::REQUESTED_SHARE)?,
            effective_share_ppm: get(path, i, map, p::EFFECTIVE_SHARE)?,
            time_slice_us: get(path, i, map, p::TIME_SLICE_US)?,
            enforced: get(path, i, map, p::ENFORCED)?,
            note: get(path, i, map, p::SCHEDULING_NOTE)?,
        })
    }

    /// The settings as `vgpu-sched` takes them (weight 0 is the default).
    pub fn settings(&self) -> Result<InstanceSchedule, ModelError> {
        let weight = if self.weight == 0 {
            u32::from(vgpu_sched::Weight::DEFAULT)
        } else {
            self.weight
        };
        InstanceSchedule::from_raw(
            self.uuid.as_str(),
            weight,
            self.min_share_ppm,
            self.max_share_ppm,
        )
    }
}

/// A parent's scheduling properties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParentScheduleRecord {
    /// Parent name.
    pub parent: String,
    /// Policy name.
    pub policy: String,
    /// Period, µs.
    pub period_us: u32,
    /// Time slice, µs (0: backend default).
    pub time_slice_us: u32,
    /// Backend name.
    pub backend: String,
    /// Knobs the backend enforces.
    pub capabilities: Vec<String>,
    /// What applying needs, or problems.
    pub note: String,
}

impl ParentScheduleRecord {
    /// Reads the scheduling properties of a `Parent` object.
    pub fn from_properties(path: &str, map: &PropertyMap) -> Result<Self, PropertyError> {
        use parent_property as p;
        let i = crate::names::interface::PARENT;
        Ok(Self {
            parent: get(path, i, map, "Name")?,
            policy: get(path, i, map, p::POLICY)?,
            period_us: get(path, i, map, p::PERIOD_US)?,
            time_slice_us: get(path, i, map, p::TIME_SLICE_US)?,
            backend: get(path, i, map, p::SCHEDULER_BACKEND)?,
            capabilities: get(path, i, map, p::SCHEDULER_CAPABILITIES)?,
            note: get(path, i, map, p::SCHEDULER_NOTE)?,
        })
    }

    /// The settings as `vgpu-sched` takes them.
    pub fn settings(&self) -> Result<ParentSchedule, ModelError> {
        let policy: Policy = self.policy.parse()?;
        let mut schedule = ParentSchedule::new(self.parent.as_str())
            .with_policy(policy)
            .with_period_us(self.period_us);
        if self.time_slice_us > 0 {
            schedule = schedule.with_time_slice_us(self.time_slice_us);
        }
        Ok(schedule)
    }

    /// The plan of the parent's running instances among `instances`, every one busy: what
    /// `vgpuctl schedule show --svg` draws.
    pub fn plan(&self, instances: &[InstanceScheduleRecord]) -> Result<Plan, ModelError> {
        let settings = instances
            .iter()
            .filter(|i| i.parent == self.parent && i.active)
            .map(InstanceScheduleRecord::settings)
            .collect::<Result<Vec<_>, _>>()?;
        Plan::compute(&self.settings()?, &settings, Busy::All)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(uuid: &str, weight: u32, min: u32, active: bool) -> InstanceScheduleRecord {
        InstanceScheduleRecord {
            uuid: uuid.into(),
            parent: "mtty".into(),
            active,
            weight,
            min_share_ppm: min,
            max_share_ppm: 0,
            requested_share_ppm: 0,
            effective_share_ppm: 0,
            time_slice_us: 0,
            enforced: true,
            note: String::new(),
        }
    }

    #[test]
    fn the_plan_uses_running_instances_and_treats_weight_zero_as_the_default() {
        let parent = ParentScheduleRecord {
            parent: "mtty".into(),
            policy: "weighted".into(),
            period_us: 10_000,
            time_slice_us: 0,
            backend: "software".into(),
            capabilities: vec![],
            note: String::new(),
        };
        let plan = parent
            .plan(&[
                instance("a", 0, 0, true),
                instance("b", 300, 0, true),
                instance("c", 100, 500_000, false),
            ])
            .unwrap();
        let shares: Vec<u32> = plan.instances.iter().map(|i| i.share.ppm()).collect();
        assert_eq!(shares, vec![250_000, 750_000]);
        assert_eq!(plan.instances[1].slice_us, 7_500);
    }

    #[test]
    fn an_unknown_policy_is_refused_by_name() {
        let parent = ParentScheduleRecord {
            parent: "mtty".into(),
            policy: "round-robin".into(),
            period_us: 10_000,
            time_slice_us: 0,
            backend: "software".into(),
            capabilities: vec![],
            note: String::new(),
        };
        let error = parent.settings().unwrap_err();
        assert!(error.to_string().contains("round-robin"), "{error}");
    }
}
