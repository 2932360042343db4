//! Intel GVT-g: read-only. Each vGPU's weight is fixed by its type (`GVTg_V5_8` → 2,
//! `_4` → 4, `_2` → 8, `_1` → 16; `VGPU_WEIGHT(n) = 16 / n`), and the i915 scheduler refills
//! credit every 100 ms in proportion to the weights of the *active* vGPUs. Nothing can be set;
//! this module says what each vGPU gets and how that compares with the settings.

use crate::model::{InstanceSchedule, ModelError, ParentSchedule, Refusal};
use crate::plan::{Busy, Plan};
use crate::report::{meets, InstanceReport};
use crate::share::{Share, Weight, PPM_PER_WHOLE};

/// i915's `VGPU_MAX_WEIGHT`.
pub const MAX_TYPE_WEIGHT: u32 = 16;

/// One GVT-g vGPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GvtVgpu {
    /// Its settings (as stored; GVT-g cannot apply them).
    pub schedule: InstanceSchedule,
    /// Its type's weight, 1..=16.
    pub type_weight: u32,
}

/// The type weight from a type id such as `i915-GVTg_V5_4` or `GVTg_V4_1`.
pub fn type_weight(type_id: &str) -> Result<u32, GvtError> {
    let bad = || GvtError::UnknownType {
        type_id: type_id.to_owned(),
    };
    let name = type_id.strip_prefix("i915-").unwrap_or(type_id);
    let rest = name.strip_prefix("GVTg_V").ok_or_else(bad)?;
    let (version, count) = rest.split_once('_').ok_or_else(bad)?;
    if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match count {
        "1" | "2" | "4" | "8" => {
            // One of the four literals just matched.
            let count: u32 = count.parse().map_err(|_| bad())?;
            Ok(MAX_TYPE_WEIGHT / count)
        }
        _ => Err(bad()),
    }
}

/// The type weight from a type's `description` (`... weight: 4\n`).
pub fn type_weight_from_description(description: &str) -> Option<u32> {
    description
        .lines()
        .find_map(|line| line.trim().strip_prefix("weight:"))
        .and_then(|value| value.trim().parse().ok())
        .filter(|weight| (1..=MAX_TYPE_WEIGHT).contains(weight))
}

/// A type weight on the service's 1..=10000 scale, 16 → 100 (the default), for display.
pub fn display_weight(type_weight: u32) -> Weight {
    let scaled = (type_weight * 100 / MAX_TYPE_WEIGHT).max(1);
    // 1..=16 scales into 6..=100.
    Weight::new(scaled).unwrap_or(Weight::DEFAULT)
}

/// What the i915 scheduler gives each vGPU (weights of the busy vGPUs), against the settings.
pub fn report(
    parent: &ParentSchedule,
    vgpus: &[GvtVgpu],
    busy: Busy<'_>,
) -> Result<Vec<InstanceReport>, GvtError> {
    for vgpu in vgpus {
        if !(1..=MAX_TYPE_WEIGHT).contains(&vgpu.type_weight) {
            return Err(GvtError::TypeWeight {
                instance: vgpu.schedule.id.to_string(),
                type_weight: vgpu.type_weight,
            });
        }
    }
    let schedules: Vec<InstanceSchedule> = vgpus.iter().map(|v| v.schedule.clone()).collect();
    let requested =
        Plan::compute(parent, &schedules, busy).map_err(|source| GvtError::Settings {
            parent: parent.parent.clone(),
            source,
        })?;
    let active_weight: u64 = vgpus
        .iter()
        .filter(|v| busy.contains(&v.schedule.id))
        .map(|v| u64::from(v.type_weight))
        .sum();
    Ok(vgpus
        .iter()
        .zip(&requested.instances)
        .map(|(vgpu, planned)| {
            let effective = if planned.busy && active_weight > 0 {
                let ppm = u64::from(vgpu.type_weight) * u64::from(PPM_PER_WHOLE) / active_weight;
                Share::from_ppm(u32::try_from(ppm).unwrap_or(PPM_PER_WHOLE)).unwrap_or(Share::WHOLE)
            } else {
                Share::ZERO
            };
            InstanceReport {
                id: planned.id.clone(),
                requested: planned.share,
                effective,
                enforced: meets(planned.share, effective),
                note: format!(
                    "GVT-g weight is fixed by type ({}); settings are not applied",
                    vgpu.type_weight
                ),
            }
        })
        .collect())
}

/// Refusals of the GVT-g backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GvtError {
    /// Not a GVT-g type id.
    #[error("{type_id:?} is not a GVT-g type (i915-GVTg_V<gen>_<1|2|4|8>)")]
    UnknownType {
        /// The type id given.
        type_id: String,
    },
    /// A type weight outside 1..=16.
    #[error("vGPU {instance} has type weight {type_weight}, outside GVT-g's 1..=16")]
    TypeWeight {
        /// The vGPU.
        instance: String,
        /// The weight given.
        type_weight: u32,
    },
    /// The settings fail admission control.
    #[error("cannot schedule GVT-g GPU {parent}")]
    Settings {
        /// The GPU.
        parent: String,
        /// Why.
        #[source]
        source: ModelError,
    },
}

impl GvtError {
    /// Which D-Bus error this refusal maps to.
    pub fn refusal(&self) -> Refusal {
        match self {
            GvtError::Settings { source, .. } => source.refusal(),
            _ => Refusal::InvalidArgs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::InstanceId;

    #[test]
    fn type_weights_follow_i915() {
        assert_eq!(type_weight("i915-GVTg_V5_8").unwrap(), 2);
        assert_eq!(type_weight("i915-GVTg_V5_4").unwrap(), 4);
        assert_eq!(type_weight("GVTg_V5_2").unwrap(), 8);
        assert_eq!(type_weight("i915-GVTg_V4_1").unwrap(), 16);
        for bad in [
            "i915-GVTg_V5_3",
            "i915-GVTg_V5_",
            "i915-GVTg_5_4",
            "nvidia-558",
            "i915-GVTg_Vx_4",
        ] {
            assert_eq!(
                type_weight(bad),
                Err(GvtError::UnknownType {
                    type_id: bad.to_owned()
                })
            );
        }
    }

    #[test]
    fn weight_from_the_kernels_description() {
        // Format of kvmgt.c intel_vgpu_show_description.
        let description =
            "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n";
        assert_eq!(type_weight_from_description(description), Some(4));
        assert_eq!(type_weight_from_description("weight: 99\n"), None);
        assert_eq!(
            type_weight_from_description("virtual display, 4 MB video memory"),
            None
        );
        assert_eq!(display_weight(16).get(), 100);
        assert_eq!(display_weight(2).get(), 12);
    }

    #[test]
    fn shares_follow_type_weights_of_the_busy() {
        let parent = ParentSchedule::new("0000:00:02.0");
        let vgpus = [
            GvtVgpu {
                schedule: InstanceSchedule::new("a"),
                type_weight: 4,
            },
            GvtVgpu {
                schedule: InstanceSchedule::new("b"),
                type_weight: 8,
            },
            GvtVgpu {
                schedule: InstanceSchedule::new("c"),
                type_weight: 4,
            },
        ];
        let reports = report(&parent, &vgpus, Busy::All).unwrap();
        let effective: Vec<u32> = reports.iter().map(|r| r.effective.ppm()).collect();
        assert_eq!(effective, [250_000, 500_000, 250_000]);
        assert!(
            !reports[1].enforced,
            "weight 100 asks for a third, type gives half"
        );
        let busy = [InstanceId::from("a"), InstanceId::from("c")];
        let reports = report(&parent, &vgpus, Busy::Only(&busy)).unwrap();
        let effective: Vec<u32> = reports.iter().map(|r| r.effective.ppm()).collect();
        assert_eq!(effective, [500_000, 0, 500_000]);
        assert!(reports.iter().all(|r| r.enforced));
        let bad = [GvtVgpu {
            schedule: InstanceSchedule::new("z"),
            type_weight: 17,
        }];
        assert!(matches!(
            report(&parent, &bad, Busy::All),
            Err(GvtError::TypeWeight { .. })
        ));
    }
}
