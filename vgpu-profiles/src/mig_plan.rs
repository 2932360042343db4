//! MIG planning: put a requested set of MIG GPU instances onto a GPU's memory slices.
//!
//! The GPU's legal placements come from `nvidia-smi mig -lgipp` (on an H200:
//! `1g.18gb {0..6}:1`, `1g.35gb {0,2,4,6}:2`, `2g.35gb {0,2,4}:2`, `3g.71gb {0,4}:4`,
//! `4g.71gb {0}:4`, `7g.141gb {0}:8`). A plan gives every requested instance a start slice
//! so that no two instances (new or existing) share a slice, each profile stays within its
//! instance count, and the compute slices stay within the GPU's.
//!
//! Among all valid plans the planner keeps the largest profiles creatable: it compares
//! plans by how many more instances of each profile would still fit afterwards, largest
//! profile first, and takes the best (best fit). It searches every arrangement (a GPU has
//! at most a few slices and instances, so this is small), largest requests first.

use crate::vendor::{
    MigGpuInstance, MigGpuInstanceProfile, MigMediaAttr, MigProfileTable, NvidiaTypeName,
};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// Why a set of MIG instances cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MigPlanError {
    /// The GPU has no profile with this id.
    #[error("GPU {gpu} has no MIG profile with id {profile_id}")]
    UnknownProfile {
        /// GPU index.
        gpu: u32,
        /// The requested profile id.
        profile_id: u32,
    },
    /// The profile has no placements in the `-lgipp` output.
    #[error("MIG profile {name} (id {profile_id}) has no placements on GPU {gpu}")]
    NoPlacements {
        /// GPU index.
        gpu: u32,
        /// Profile id.
        profile_id: u32,
        /// Profile name.
        name: String,
    },
    /// More instances of a profile than the GPU supports.
    #[error("{requested} more MIG {name} requested but GPU {gpu} allows {total} in all and {existing} exist")]
    TooMany {
        /// GPU index.
        gpu: u32,
        /// Profile name.
        name: String,
        /// Requested count.
        requested: u32,
        /// The profile's instance total.
        total: u32,
        /// Existing instances of it.
        existing: u32,
    },
    /// The request needs more memory slices than are free.
    #[error("the request needs {needed} memory slices but GPU {gpu} has {free} free of {slices}")]
    Memory {
        /// GPU index.
        gpu: u32,
        /// Slices the request needs.
        needed: u32,
        /// Free slices.
        free: u32,
        /// All slices.
        slices: u32,
    },
    /// The request needs more compute slices than are free.
    #[error("the request needs {needed} compute slices but GPU {gpu} has {free} free of {total}")]
    Compute {
        /// GPU index.
        gpu: u32,
        /// Compute slices the request needs.
        needed: u32,
        /// Free compute slices.
        free: u32,
        /// All compute slices.
        total: u32,
    },
    /// Enough slices are free, but no arrangement fits the legal placements.
    #[error(
        "no arrangement of {request} fits the legal placements on GPU {gpu} (free slices: {free})"
    )]
    Fragmented {
        /// GPU index.
        gpu: u32,
        /// The request in words (`2 x 3g.71gb`).
        request: String,
        /// The free slices (`1,3,5-7`).
        free: String,
    },
    /// An existing instance overlaps another or lies outside the GPU.
    #[error("existing instance {instance_id} ({name}) at {start}:{size} overlaps another or lies outside GPU {gpu}")]
    BadExisting {
        /// GPU index.
        gpu: u32,
        /// Instance id.
        instance_id: u32,
        /// Profile name.
        name: String,
        /// Start slice.
        start: u8,
        /// Size.
        size: u8,
    },
}

/// One planned instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedInstance {
    /// Profile id (for `nvidia-smi mig -cgi <id>:<start>` or NVML).
    pub profile_id: u32,
    /// Profile name.
    pub name: String,
    /// First memory slice.
    pub start: u8,
    /// Memory slices spanned.
    pub size: u8,
}

/// A plan: where each requested instance goes, and what stays creatable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigPlan {
    /// One entry per requested instance, in request order.
    pub instances: Vec<PlannedInstance>,
    /// For each profile (largest first): how many more instances would still fit after
    /// the plan. This is what the plan maximised.
    pub creatable_after: Vec<(String, u32)>,
}

/// The MIG profile of a MIG-backed NVIDIA vGPU type (`H200X-1-18C` → `1g.18gb`,
/// `A100-1-5CME` → `1g.5gb+me`), if the GPU has it.
pub fn profile_for_type<'a>(
    table: &'a MigProfileTable,
    gpu: u32,
    name: &NvidiaTypeName,
) -> Option<&'a MigGpuInstanceProfile> {
    let slices = name.gpu_slices?;
    let attrs: Vec<&str> = match name.attr {
        None | Some(MigMediaAttr::NoMe) => vec![],
        Some(MigMediaAttr::Me) => vec!["me"],
        Some(MigMediaAttr::MeAll) => vec!["me.all"],
        Some(MigMediaAttr::Gfx) => vec!["gfx"],
    };
    table.profiles.iter().find(|p| {
        p.gpu == gpu
            && p.name.gpu_slices == slices
            && p.name.memory_gb == name.framebuffer_gb
            && p.name
                .attrs
                .iter()
                .map(String::as_str)
                .eq(attrs.iter().copied())
    })
}

/// A profile as the planner uses it.
#[derive(Debug, Clone)]
struct Shape {
    id: u32,
    name: String,
    compute: u32,
    total: u32,
    starts: Vec<u8>,
    size: u8,
}

impl Shape {
    fn mask(&self, start: u8) -> u64 {
        slice_mask(start, self.size)
    }
}

/// The GPU state the search walks over.
#[derive(Debug, Clone)]
struct State {
    occupied: u64,
    compute_used: u32,
    counts: Vec<u32>,
}

struct Gpu {
    shapes: Vec<Shape>,
    slices: u32,
    compute_total: u32,
}

impl Gpu {
    fn new(table: &MigProfileTable, gpu: u32) -> Gpu {
        let mut shapes: Vec<Shape> = table
            .profiles
            .iter()
            .filter(|p| p.gpu == gpu)
            .filter_map(|p| {
                let placement = table.placements_of(gpu, p.id)?;
                // Placements beyond 32 slices cannot be represented; no GPU has them.
                let fits = placement
                    .starts
                    .iter()
                    .all(|&s| u32::from(s) + u32::from(placement.size) <= 32);
                fits.then(|| Shape {
                    id: p.id,
                    name: p.name.to_string(),
                    compute: u32::from(p.name.gpu_slices),
                    total: p.instances_total,
                    starts: placement.starts.clone(),
                    size: placement.size,
                })
            })
            .collect();
        // Largest first: memory, then compute, then id (the order `creatable_after` uses).
        shapes.sort_by(|a, b| {
            b.size
                .cmp(&a.size)
                .then(b.compute.cmp(&a.compute))
                .then(a.id.cmp(&b.id))
        });
        let slices = u32::from(table.memory_slices(gpu)).min(32);
        let compute_total = shapes.iter().map(|s| s.compute).max().unwrap_or(0);
        Gpu {
            shapes,
            slices,
            compute_total,
        }
    }

    fn fits(&self, state: &State, shape_index: usize, start: u8) -> bool {
        let shape = &self.shapes[shape_index];
        state.occupied & shape.mask(start) == 0
            && state.counts[shape_index] < shape.total
            && state.compute_used + shape.compute <= self.compute_total
    }

    fn apply(&self, state: &mut State, shape_index: usize, start: u8) {
        let shape = &self.shapes[shape_index];
        state.occupied |= shape.mask(start);
        state.compute_used += shape.compute;
        state.counts[shape_index] += 1;
    }

    /// How many more instances of each profile (largest first) fit on their own.
    fn creatable(&self, state: &State) -> Vec<u32> {
        (0..self.shapes.len())
            .map(|index| {
                let mut probe = state.clone();
                let mut count = 0;
                // Leftmost-first is optimal for one profile: its placements are aligned
                // to its size, so they never straddle each other.
                for &start in &self.shapes[index].starts {
                    if self.fits(&probe, index, start) {
                        self.apply(&mut probe, index, start);
                        count += 1;
                    }
                }
                count
            })
            .collect()
    }
}

/// Plans `request` (profile ids; repeat an id for several instances) on GPU `gpu` of
/// `table`, around the `existing` instances.
pub fn plan(
    table: &MigProfileTable,
    gpu: u32,
    existing: &[MigGpuInstance],
    request: &[u32],
) -> Result<MigPlan, MigPlanError> {
    let model = Gpu::new(table, gpu);
    let mut state = State {
        occupied: 0,
        compute_used: 0,
        counts: vec![0; model.shapes.len()],
    };
    let index_of = |profile_id: u32| model.shapes.iter().position(|s| s.id == profile_id);
    for instance in existing.iter().filter(|i| i.gpu == gpu) {
        let bad = || MigPlanError::BadExisting {
            gpu,
            instance_id: instance.instance_id,
            name: instance.name.to_string(),
            start: instance.start,
            size: instance.size,
        };
        let end = u32::from(instance.start) + u32::from(instance.size);
        if instance.size == 0 || end > model.slices {
            return Err(bad());
        }
        let mask = slice_mask(instance.start, instance.size);
        if state.occupied & mask != 0 {
            return Err(bad());
        }
        state.occupied |= mask;
        state.compute_used += u32::from(instance.name.gpu_slices);
        if let Some(index) = index_of(instance.profile_id) {
            state.counts[index] += 1;
        }
    }

    // Validate the request and order it largest first (the search order).
    let mut wanted: Vec<(usize, usize)> = Vec::with_capacity(request.len());
    for (position, &profile_id) in request.iter().enumerate() {
        let Some(index) = index_of(profile_id) else {
            let known = table
                .profiles
                .iter()
                .find(|p| p.gpu == gpu && p.id == profile_id);
            return Err(match known {
                Some(p) => MigPlanError::NoPlacements {
                    gpu,
                    profile_id,
                    name: p.name.to_string(),
                },
                None => MigPlanError::UnknownProfile { gpu, profile_id },
            });
        };
        wanted.push((index, position));
    }
    wanted.sort();
    for (index, shape) in model.shapes.iter().enumerate() {
        let requested = wanted.iter().filter(|(i, _)| *i == index).count() as u32;
        if requested > 0 && state.counts[index] + requested > shape.total {
            return Err(MigPlanError::TooMany {
                gpu,
                name: shape.name.clone(),
                requested,
                total: shape.total,
                existing: state.counts[index],
            });
        }
    }
    let needed: u32 = wanted
        .iter()
        .map(|(i, _)| u32::from(model.shapes[*i].size))
        .sum();
    let free = model.slices - state.occupied.count_ones().min(model.slices);
    if needed > free {
        return Err(MigPlanError::Memory {
            gpu,
            needed,
            free,
            slices: model.slices,
        });
    }
    let compute_needed: u32 = wanted.iter().map(|(i, _)| model.shapes[*i].compute).sum();
    let compute_free = model.compute_total.saturating_sub(state.compute_used);
    if compute_needed > compute_free {
        return Err(MigPlanError::Compute {
            gpu,
            needed: compute_needed,
            free: compute_free,
            total: model.compute_total,
        });
    }

    let mut best: Option<(Vec<u32>, Vec<u8>)> = None;
    let mut starts = Vec::with_capacity(wanted.len());
    search(&model, &wanted, 0, &mut state, &mut starts, &mut best);
    let Some((score, chosen)) = best else {
        return Err(MigPlanError::Fragmented {
            gpu,
            request: describe_request(&model, &wanted),
            free: describe_free(state.occupied, model.slices),
        });
    };
    let mut instances: Vec<(usize, PlannedInstance)> = wanted
        .iter()
        .zip(&chosen)
        .map(|(&(index, position), &start)| {
            let shape = &model.shapes[index];
            (
                position,
                PlannedInstance {
                    profile_id: shape.id,
                    name: shape.name.clone(),
                    start,
                    size: shape.size,
                },
            )
        })
        .collect();
    instances.sort_by_key(|(position, _)| *position);
    Ok(MigPlan {
        instances: instances.into_iter().map(|(_, i)| i).collect(),
        creatable_after: model
            .shapes
            .iter()
            .zip(score)
            .map(|(s, n)| (s.name.clone(), n))
            .collect(),
    })
}

/// Depth-first over the (largest-first) request; keeps the plan with the best score.
/// Identical profiles take non-decreasing starts so each arrangement is visited once.
fn search(
    model: &Gpu,
    wanted: &[(usize, usize)],
    depth: usize,
    state: &mut State,
    starts: &mut Vec<u8>,
    best: &mut Option<(Vec<u32>, Vec<u8>)>,
) {
    let Some(&(index, _)) = wanted.get(depth) else {
        let score = model.creatable(state);
        let better = match best {
            None => true,
            Some((best_score, _)) => score.cmp(best_score) == Ordering::Greater,
        };
        if better {
            *best = Some((score, starts.clone()));
        }
        return;
    };
    let floor = match depth.checked_sub(1).map(|d| wanted[d].0) {
        Some(previous) if previous == index => starts.last().copied(),
        _ => None,
    };
    for &start in &model.shapes[index].starts {
        if floor.is_some_and(|f| start <= f) || !model.fits(state, index, start) {
            continue;
        }
        let saved = state.clone();
        model.apply(state, index, start);
        starts.push(start);
        search(model, wanted, depth + 1, state, starts, best);
        starts.pop();
        *state = saved;
    }
}

fn describe_request(model: &Gpu, wanted: &[(usize, usize)]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < wanted.len() {
        let index = wanted[i].0;
        let count = wanted[i..].iter().take_while(|(j, _)| *j == index).count();
        parts.push(format!("{count} x {}", model.shapes[index].name));
        i += count;
    }
    parts.join(" + ")
}

/// The bits of slices `start .. start + size`; callers keep `start + size <= 32`.
fn slice_mask(start: u8, size: u8) -> u64 {
    ((1u64 << size.min(32)) - 1) << start.min(32)
}

fn describe_free(occupied: u64, slices: u32) -> String {
    let free: Vec<u32> = (0..slices)
        .filter(|s| occupied & (1u64 << s) == 0)
        .collect();
    if free.is_empty() {
        return "none".into();
    }
    let mut ranges: Vec<String> = Vec::new();
    let mut i = 0;
    while i < free.len() {
        let mut j = i;
        while j + 1 < free.len() && free[j + 1] == free[j] + 1 {
            j += 1;
        }
        ranges.push(if i == j {
            free[i].to_string()
        } else {
            format!("{}-{}", free[i], free[j])
        });
        i = j + 1;
    }
    ranges.join(",")
}
