//! AMD GIM (MxGPU): each VF gets a graphics time slice in µs per round, out of a fixed budget
//! of `VFs × 6 ms`. The driver rejects requests that over-commit the budget, so the check runs
//! here first.
//!
//! Limits (GIM `amdgv_api.c`, `amdgv_gpumon.c`, debugfs `asymmetric_timeslice`): a slice is
//! 1,000..=500,000 µs in steps of 100 µs; with a single VF no slice can be set; the alternative
//! `gfx_time_divider` is a power of two 1..=32 giving `budget / divider`.

use std::fmt::Write as _;

use serde::Serialize;

use crate::model::{InstanceSchedule, ModelError, ParentSchedule, Refusal};
use crate::plan::{Busy, Plan};
use crate::report::{meets, InstanceReport};
use crate::share::{Share, PPM_PER_WHOLE};

/// GIM's default graphics slice per VF, µs (`DEFAULT_GFX_TIME_SLICE`).
pub const DEFAULT_SLICE_US: u32 = 6_000;
/// Shortest slice `amdgv_set_timeslice` takes, µs.
pub const MIN_SLICE_US: u32 = 1_000;
/// Longest slice `amdgv_set_timeslice` takes, µs.
pub const MAX_SLICE_US: u32 = 500_000;
/// Slices are multiples of this, µs (debugfs granularity).
pub const SLICE_STEP_US: u32 = 100;
/// Most VFs GIM creates per GPU (`vf_num`).
pub const MAX_VFS: u32 = 31;
/// Largest `gfx_time_divider`.
pub const MAX_DIVIDER: u32 = 32;

/// One VF the service manages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdVf {
    /// Its settings.
    pub schedule: InstanceSchedule,
    /// Its index on the GPU (`idx_vf`).
    pub vf_index: u32,
}

/// One VF's slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AmdVfSlice {
    /// Its index on the GPU.
    pub vf_index: u32,
    /// The slice to set, µs; `None` when the GPU has a single VF (no slice can be set).
    pub time_slice_us: Option<u32>,
    /// The closest `gfx_time_divider` (coarser alternative to the slice).
    pub divider: u32,
    /// Requested against effective share.
    pub report: InstanceReport,
}

/// The slices for every managed VF on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AmdSlices {
    /// The GPU.
    pub parent: String,
    /// VFs on the GPU, managed or not.
    pub total_vfs: u32,
    /// The GPU's budget: `total_vfs × 6000 µs`.
    pub budget_us: u32,
    /// Per managed VF, in the order given.
    pub vfs: Vec<AmdVfSlice>,
}

impl AmdSlices {
    /// The writes for `/sys/kernel/debug/gim/<bdf>/asymmetric_timeslice`, `"vf_idx,timeslice_us"`.
    pub fn debugfs_writes(&self) -> Vec<String> {
        self.vfs
            .iter()
            .filter_map(|vf| vf.time_slice_us.map(|us| format!("{},{us}", vf.vf_index)))
            .collect()
    }

    /// A readable summary (also the golden-file format).
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "# AMD GIM {}: {} VF(s), budget {} µs ({} x {} µs)\n",
            self.parent, self.total_vfs, self.budget_us, self.total_vfs, DEFAULT_SLICE_US
        );
        for vf in &self.vfs {
            let slice = vf
                .time_slice_us
                .map_or_else(|| "no slice".to_owned(), |us| format!("{us} µs"));
            let _ = writeln!(
                text,
                "vf {} {}: {slice}, divider {}, requested {}, effective {}, enforced {}{}",
                vf.vf_index,
                vf.report.id,
                vf.divider,
                vf.report.requested,
                vf.report.effective,
                vf.report.enforced,
                if vf.report.note.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", vf.report.note)
                }
            );
        }
        for write in self.debugfs_writes() {
            let _ = writeln!(text, "asymmetric_timeslice {write}");
        }
        text
    }
}

/// The slices for the managed VFs of one GPU with `total_vfs` VFs, from their weights,
/// guarantees and caps. VFs not listed keep the default 6 ms.
pub fn time_slices(
    parent: &ParentSchedule,
    vfs: &[AmdVf],
    total_vfs: u32,
) -> Result<AmdSlices, AmdError> {
    let gpu = || parent.parent.clone();
    if !(1..=MAX_VFS).contains(&total_vfs) || vfs.len() > total_vfs as usize {
        return Err(AmdError::VfCount {
            parent: gpu(),
            total_vfs,
            managed: vfs.len(),
        });
    }
    for (position, vf) in vfs.iter().enumerate() {
        if vf.vf_index >= total_vfs {
            return Err(AmdError::VfIndex {
                parent: gpu(),
                vf_index: vf.vf_index,
                total_vfs,
            });
        }
        if vfs[..position]
            .iter()
            .any(|earlier| earlier.vf_index == vf.vf_index)
        {
            return Err(AmdError::DuplicateVf {
                parent: gpu(),
                vf_index: vf.vf_index,
            });
        }
    }
    let schedules: Vec<InstanceSchedule> = vfs.iter().map(|vf| vf.schedule.clone()).collect();
    // Slices are configuration, not a reaction to load: plan as if every VF were busy.
    let plan =
        Plan::compute(parent, &schedules, Busy::All).map_err(|source| AmdError::Settings {
            parent: gpu(),
            source,
        })?;
    let budget_us = total_vfs * DEFAULT_SLICE_US;
    let managed = u32::try_from(vfs.len()).unwrap_or(MAX_VFS);
    let unmanaged_us = (total_vfs - managed) * DEFAULT_SLICE_US;
    let managed_budget_us = managed * DEFAULT_SLICE_US;

    if total_vfs == 1 {
        let vfs = vfs
            .iter()
            .zip(&plan.instances)
            .map(|(vf, planned)| AmdVfSlice {
                vf_index: vf.vf_index,
                time_slice_us: None,
                divider: 1,
                report: InstanceReport {
                    id: planned.id.clone(),
                    requested: planned.share,
                    effective: Share::WHOLE,
                    enforced: meets(planned.share, Share::WHOLE),
                    note: "single VF: GIM takes no time slice, the VF has the whole GPU".to_owned(),
                },
            })
            .collect();
        return Ok(AmdSlices {
            parent: gpu(),
            total_vfs,
            budget_us,
            vfs,
        });
    }

    let shares: Vec<u32> = plan.instances.iter().map(|i| i.share.ppm()).collect();
    let slices = split_budget(&shares, managed_budget_us);
    let total_us: u32 = slices.iter().sum::<u32>() + unmanaged_us;
    if total_us > budget_us {
        return Err(AmdError::OverCommitted {
            parent: gpu(),
            total_us,
            budget_us,
        });
    }
    let round_us = total_us.max(1);
    let managed_us = slices.iter().sum::<u32>().max(1);
    let vfs = vfs
        .iter()
        .zip(&plan.instances)
        .zip(slices)
        .map(|((vf, planned), slice_us)| {
            let effective_ppm = u64::from(slice_us) * u64::from(PPM_PER_WHOLE) / u64::from(round_us);
            // A slice never exceeds the round it is part of.
            let effective = Share::from_ppm(u32::try_from(effective_ppm).unwrap_or(PPM_PER_WHOLE))
                .unwrap_or(Share::WHOLE);
            let mut notes = Vec::new();
            let mut enforced = meets(planned.share, effective);
            if unmanaged_us > 0 {
                notes.push(format!(
                    "{} VF(s) not managed here keep {} µs each",
                    total_vfs - managed,
                    DEFAULT_SLICE_US
                ));
            }
            if vf.schedule.max_share.is_some() {
                notes.push("GIM gives a VF its slice every round: the cap holds only while every VF uses its slice".to_owned());
                enforced = false;
            }
            let among_managed_ppm = u64::from(slice_us) * u64::from(PPM_PER_WHOLE) / u64::from(managed_us);
            let among_managed = Share::from_ppm(u32::try_from(among_managed_ppm).unwrap_or(PPM_PER_WHOLE))
                .unwrap_or(Share::WHOLE);
            if !meets(planned.share, among_managed) {
                notes.push("slice limits (1-500 ms, 100 µs steps) move it off the request".to_owned());
            }
            AmdVfSlice {
                vf_index: vf.vf_index,
                time_slice_us: Some(slice_us),
                divider: closest_divider(slice_us, budget_us),
                report: InstanceReport {
                    id: planned.id.clone(),
                    requested: planned.share,
                    effective,
                    enforced,
                    note: notes.join("; "),
                },
            }
        })
        .collect();
    Ok(AmdSlices {
        parent: gpu(),
        total_vfs,
        budget_us,
        vfs,
    })
}

/// Splits `budget_us` by ppm shares into 100 µs steps of at least 1 ms each, never more than
/// the budget in total. Whatever the shares leave (all capped) stays unassigned.
fn split_budget(shares: &[u32], budget_us: u32) -> Vec<u32> {
    let steps_total = u64::from(budget_us / SLICE_STEP_US);
    let whole = u64::from(PPM_PER_WHOLE);
    let min_steps = u64::from(MIN_SLICE_US / SLICE_STEP_US);
    let max_steps = u64::from(MAX_SLICE_US / SLICE_STEP_US);
    let exact: Vec<u64> = shares.iter().map(|s| u64::from(*s) * steps_total).collect();
    let mut steps: Vec<u64> = exact.iter().map(|e| e / whole).collect();
    let target = exact.iter().sum::<u64>() / whole;
    let mut missing = target.saturating_sub(steps.iter().sum());
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| (exact[b] % whole).cmp(&(exact[a] % whole)).then(a.cmp(&b)));
    for &index in &order {
        if missing == 0 {
            break;
        }
        steps[index] += 1;
        missing -= 1;
    }
    for step in &mut steps {
        *step = (*step).clamp(min_steps, max_steps);
    }
    // Raising small slices to 1 ms can overrun the budget: take 100 µs at a time from the
    // largest slice still above 1 ms. Every VF at 1 ms always fits (1 ms < 6 ms default).
    let mut total: u64 = steps.iter().sum();
    while total > steps_total {
        let largest = (0..steps.len())
            .filter(|&i| steps[i] > min_steps)
            .max_by(|&a, &b| steps[a].cmp(&steps[b]).then(b.cmp(&a)));
        match largest {
            Some(index) => {
                steps[index] -= 1;
                total -= 1;
            }
            None => break,
        }
    }
    steps
        .into_iter()
        .map(|s| u32::try_from(s * u64::from(SLICE_STEP_US)).unwrap_or(MAX_SLICE_US))
        .collect()
}

/// The power of two 1..=32 whose `budget / divider` is closest to the slice.
fn closest_divider(slice_us: u32, budget_us: u32) -> u32 {
    let mut best = 1;
    let mut best_gap = u32::MAX;
    let mut divider = 1;
    while divider <= MAX_DIVIDER {
        let gap = (budget_us / divider).abs_diff(slice_us);
        if gap < best_gap {
            best = divider;
            best_gap = gap;
        }
        divider *= 2;
    }
    best
}

/// Refusals of the AMD backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmdError {
    /// The settings fail admission control.
    #[error("cannot schedule AMD GPU {parent}")]
    Settings {
        /// The GPU.
        parent: String,
        /// Why.
        #[source]
        source: ModelError,
    },
    /// A VF count GIM does not have.
    #[error("AMD GPU {parent} with {total_vfs} VFs and {managed} managed: GIM has 1..=31 VFs, managed ones among them")]
    VfCount {
        /// The GPU.
        parent: String,
        /// VFs on the GPU.
        total_vfs: u32,
        /// VFs given.
        managed: usize,
    },
    /// A VF index beyond the GPU's VFs.
    #[error("VF index {vf_index} on AMD GPU {parent} is beyond its {total_vfs} VFs")]
    VfIndex {
        /// The GPU.
        parent: String,
        /// The index.
        vf_index: u32,
        /// VFs on the GPU.
        total_vfs: u32,
    },
    /// The same VF twice.
    #[error("VF index {vf_index} on AMD GPU {parent} is listed twice")]
    DuplicateVf {
        /// The GPU.
        parent: String,
        /// The index.
        vf_index: u32,
    },
    /// Slices over the budget (GIM would reject them).
    #[error("time slices on AMD GPU {parent} would total {total_us} µs, over the budget of {budget_us} µs")]
    OverCommitted {
        /// The GPU.
        parent: String,
        /// The total asked.
        total_us: u32,
        /// The budget.
        budget_us: u32,
    },
}

impl AmdError {
    /// Which D-Bus error this refusal maps to.
    pub fn refusal(&self) -> Refusal {
        match self {
            AmdError::Settings { source, .. } => source.refusal(),
            AmdError::OverCommitted { .. } => Refusal::NoCapacity,
            _ => Refusal::InvalidArgs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::Weight;

    fn vf(index: u32, weight: u32) -> AmdVf {
        AmdVf {
            schedule: InstanceSchedule::new(format!("0000:c1:02.{index}"))
                .with_weight(Weight::new(weight).unwrap()),
            vf_index: index,
        }
    }

    #[test]
    fn weights_become_slices_within_the_budget() {
        let parent = ParentSchedule::new("0000:c1:00.0");
        let slices = time_slices(&parent, &[vf(0, 100), vf(1, 100), vf(2, 200)], 3).unwrap();
        let us: Vec<Option<u32>> = slices.vfs.iter().map(|v| v.time_slice_us).collect();
        assert_eq!(us, [Some(4_500), Some(4_500), Some(9_000)]);
        assert_eq!(slices.budget_us, 18_000);
        assert!(slices.vfs.iter().all(|v| v.report.enforced));
        assert_eq!(slices.debugfs_writes(), ["0,4500", "1,4500", "2,9000"]);
    }

    #[test]
    fn small_weights_get_the_minimum_slice() {
        let parent = ParentSchedule::new("0000:c1:00.0");
        let slices = time_slices(&parent, &[vf(0, 1), vf(1, 10_000)], 2).unwrap();
        let us: Vec<u32> = slices.vfs.iter().filter_map(|v| v.time_slice_us).collect();
        assert_eq!(us, [1_000, 11_000]);
        assert!(us.iter().sum::<u32>() <= slices.budget_us);
        assert!(!slices.vfs[0].report.enforced);
    }

    #[test]
    fn every_slice_is_in_range_and_the_total_fits() {
        let parent = ParentSchedule::new("0000:c1:00.0");
        let vfs: Vec<AmdVf> = (0..31).map(|i| vf(i, 1 + i * 300)).collect();
        let slices = time_slices(&parent, &vfs, 31).unwrap();
        let us: Vec<u32> = slices.vfs.iter().filter_map(|v| v.time_slice_us).collect();
        assert!(us
            .iter()
            .all(|s| (MIN_SLICE_US..=MAX_SLICE_US).contains(s) && s % SLICE_STEP_US == 0));
        assert!(us.iter().sum::<u32>() <= slices.budget_us);
    }

    #[test]
    fn single_vf_takes_no_slice() {
        let parent = ParentSchedule::new("0000:c1:00.0");
        let slices = time_slices(&parent, &[vf(0, 100)], 1).unwrap();
        assert_eq!(slices.vfs[0].time_slice_us, None);
        assert!(slices.vfs[0].report.enforced);
        assert!(slices.debugfs_writes().is_empty());
    }

    #[test]
    fn unmanaged_vfs_keep_their_default() {
        let parent = ParentSchedule::new("0000:c1:00.0");
        let slices = time_slices(&parent, &[vf(0, 100), vf(1, 300)], 4).unwrap();
        let us: Vec<u32> = slices.vfs.iter().filter_map(|v| v.time_slice_us).collect();
        assert_eq!(us, [3_000, 9_000]);
        assert_eq!(
            slices.vfs[1].report.effective,
            Share::from_percent(37)
                .unwrap()
                .checked_add(Share::from_ppm(5_000).unwrap())
                .unwrap()
        );
        assert!(!slices.vfs[1].report.enforced);
        assert!(slices.vfs[1]
            .report
            .note
            .contains("2 VF(s) not managed here"));
    }

    #[test]
    fn caps_are_not_held_by_gim() {
        let parent = ParentSchedule::new("0000:c1:00.0");
        let mut capped = vf(0, 100);
        capped.schedule.max_share = Some(Share::from_percent(20).unwrap());
        let slices = time_slices(&parent, &[capped, vf(1, 100)], 2).unwrap();
        assert_eq!(slices.vfs[0].time_slice_us, Some(2_400));
        assert!(!slices.vfs[0].report.enforced);
    }

    #[test]
    fn refuses_bad_vf_lists() {
        let parent = ParentSchedule::new("0000:c1:00.0");
        assert!(matches!(
            time_slices(&parent, &[vf(0, 1)], 0),
            Err(AmdError::VfCount { .. })
        ));
        assert!(matches!(
            time_slices(&parent, &[vf(0, 1)], 32),
            Err(AmdError::VfCount { .. })
        ));
        let err = time_slices(&parent, &[vf(2, 1)], 2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "VF index 2 on AMD GPU 0000:c1:00.0 is beyond its 2 VFs"
        );
        assert!(matches!(
            time_slices(&parent, &[vf(1, 1), vf(1, 2)], 2),
            Err(AmdError::DuplicateVf { vf_index: 1, .. })
        ));
        let mut greedy = vf(0, 1);
        greedy.schedule.min_share = Some(Share::from_percent(70).unwrap());
        let mut greedier = vf(1, 1);
        greedier.schedule.min_share = Some(Share::from_percent(70).unwrap());
        let err = time_slices(&parent, &[greedy, greedier], 2).unwrap_err();
        assert_eq!(err.refusal(), Refusal::NoCapacity);
    }

    #[test]
    fn dividers_are_powers_of_two() {
        assert_eq!(closest_divider(6_000, 24_000), 4);
        assert_eq!(closest_divider(24_000, 24_000), 1);
        assert_eq!(closest_divider(100, 24_000), 32);
        assert_eq!(closest_divider(9_000, 24_000), 2);
    }
}
