//! Placement: which parent (and type) a profile gets among all parents of the host.
//!
//! Each parent is resolved on its own ([`crate::resolve`]), with NVIDIA's rule that one
//! GPU runs one time-sliced type at a time unless mixed mode is on. The fitting parents are
//! then ranked: the preferred NUMA node first, then by policy (`pack` fills the busiest
//! parent, `spread` the idlest), then the smaller type, then the address, so the same
//! input always gives the same answer. Every parent not chosen carries its reason.

use crate::profile::Profile;
use crate::resolve::{check_type_ignoring_capacity, resolve_with, NoFit, TypeRejection};
use crate::vendor::{Isolation, NvidiaTypeName, OfferedType, Vendor};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;

/// How to choose among parents that fit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Fill the busiest parent first (keeps whole GPUs free).
    #[default]
    Pack,
    /// Use the idlest parent first (spreads load).
    Spread,
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Policy::Pack => "pack",
            Policy::Spread => "spread",
        })
    }
}

/// A NUMA node preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NumaPreference {
    /// The node.
    pub node: u32,
    /// Only parents on this node are acceptable (otherwise they are only preferred).
    pub strict: bool,
}

/// Options of one placement.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementOptions {
    /// Pack or spread.
    pub policy: Policy,
    /// NUMA node preference.
    pub numa: Option<NumaPreference>,
    /// Only this parent (the user named one).
    pub parent: Option<String>,
}

/// An instance that already exists on a parent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExistingInstance {
    /// Its type id on the parent (mdev type dir or NVIDIA type id).
    pub type_id: String,
    /// Its type name, when known (used when the parent no longer lists the type).
    pub type_name: Option<String>,
}

/// One parent as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentState {
    /// PCI address or device name (`0000:3b:00.0`, `mbochs`).
    pub address: String,
    /// NUMA node, when the host says.
    pub numa_node: Option<u32>,
    /// The types it offers now, with free capacity.
    pub offered: Vec<OfferedType>,
    /// Instances it holds now.
    pub instances: Vec<ExistingInstance>,
    /// NVIDIA mixed-size mode is on (time-sliced types of different sizes may coexist).
    pub nvidia_mixed_mode: bool,
}

impl ParentState {
    /// The NVIDIA time-sliced type this GPU already runs, if any (its short name).
    pub fn nvidia_time_sliced_in_use(&self) -> Option<String> {
        self.instances.iter().find_map(|instance| {
            if let Some(t) = self.offered.iter().find(|t| t.id == instance.type_id) {
                return (t.vendor == Vendor::Nvidia && t.isolation == Isolation::TimeSliced)
                    .then(|| t.short_name());
            }
            let name = instance
                .type_name
                .as_deref()
                .and_then(|n| NvidiaTypeName::parse(n).ok());
            match name {
                Some(n) => (!n.is_mig_backed()).then(|| n.token()),
                None => (Vendor::from_type_id(&instance.type_id) == Vendor::Nvidia)
                    .then(|| instance.type_id.clone()),
            }
        })
    }

    /// Checks one of this parent's types for a profile, with NVIDIA's one-type rule.
    /// The one-type rule is checked before free capacity: the kernel reports the other
    /// types of a homogeneous GPU as full, and the rule is the better explanation.
    pub fn check(&self, profile: &Profile, offered: &OfferedType) -> Result<(), TypeRejection> {
        check_type_ignoring_capacity(profile, offered)?;
        let homogeneous = !self.nvidia_mixed_mode
            && offered.vendor == Vendor::Nvidia
            && offered.isolation == Isolation::TimeSliced;
        if homogeneous {
            if let Some(in_use) = self.nvidia_time_sliced_in_use() {
                if in_use != offered.short_name() {
                    return Err(TypeRejection::OtherTypeInUse(in_use));
                }
            }
        }
        if offered.available_instances == 0 {
            return Err(TypeRejection::Full);
        }
        Ok(())
    }
}

/// Why a parent was not chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ParentRejection {
    /// Not the parent the user named.
    NotRequested,
    /// On another NUMA node than the strict preference.
    NumaNode {
        /// The parent's node, when known.
        node: Option<u32>,
        /// The node the request insists on.
        wanted: u32,
    },
    /// No type fits (the reason in words).
    NoFit(String),
    /// It fits, but another parent ranked first.
    RankedLower {
        /// The type it would have used.
        type_id: String,
    },
}

impl fmt::Display for ParentRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParentRejection::NotRequested => f.write_str("not the requested parent"),
            ParentRejection::NumaNode {
                node: Some(n),
                wanted,
            } => write!(f, "on NUMA node {n}, not the required node {wanted}"),
            ParentRejection::NumaNode { node: None, wanted } => {
                write!(f, "NUMA node unknown, not the required node {wanted}")
            }
            ParentRejection::NoFit(reason) => f.write_str(reason),
            ParentRejection::RankedLower { type_id } => {
                write!(f, "fits ({type_id}) but ranked lower")
            }
        }
    }
}

/// The chosen parent and type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The parent's address.
    pub parent: String,
    /// The type to create.
    pub offered: OfferedType,
    /// Every other parent with why it was not chosen, in input order.
    pub rejected: Vec<(String, ParentRejection)>,
}

/// No parent can host the profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no parent can host profile `{profile}`: {}", summary(.rejected))]
pub struct NoPlacement {
    /// The profile name.
    pub profile: String,
    /// Every parent with its reason, in input order.
    pub rejected: Vec<(String, ParentRejection)>,
}

fn summary(rejected: &[(String, ParentRejection)]) -> String {
    if rejected.is_empty() {
        return "the host has no parents".into();
    }
    rejected
        .iter()
        .filter(|(_, r)| *r != ParentRejection::NotRequested)
        .map(|(parent, r)| match r {
            // NoFit reasons already name the parent.
            ParentRejection::NoFit(reason) if reason.contains(parent.as_str()) => reason.clone(),
            other => format!("{parent}: {other}"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Chooses a parent and type for one instance of `profile`.
pub fn place(
    profile: &Profile,
    parents: &[ParentState],
    options: &PlacementOptions,
) -> Result<Placement, NoPlacement> {
    let mut fitting: Vec<(usize, &OfferedType)> = Vec::new();
    let mut rejected: Vec<(usize, ParentRejection)> = Vec::new();
    for (index, parent) in parents.iter().enumerate() {
        if options
            .parent
            .as_deref()
            .is_some_and(|p| p != parent.address)
        {
            rejected.push((index, ParentRejection::NotRequested));
            continue;
        }
        if let Some(numa) = options.numa.filter(|n| n.strict) {
            if parent.numa_node != Some(numa.node) {
                rejected.push((
                    index,
                    ParentRejection::NumaNode {
                        node: parent.numa_node,
                        wanted: numa.node,
                    },
                ));
                continue;
            }
        }
        let resolved = resolve_with(profile, &parent.address, &parent.offered, |t| {
            parent.check(profile, t)
        });
        match resolved {
            Ok(t) => fitting.push((index, t)),
            Err(NoFit { reason, .. }) => rejected.push((index, ParentRejection::NoFit(reason))),
        }
    }
    let named = |list: Vec<(usize, ParentRejection)>| {
        let mut list = list;
        list.sort_by_key(|(i, _)| *i);
        list.into_iter()
            .map(|(i, r)| (parents[i].address.clone(), r))
            .collect::<Vec<_>>()
    };
    fitting.sort_by(|a, b| rank(parents, options, *a, *b));
    let Some(&(chosen, offered)) = fitting.first() else {
        return Err(NoPlacement {
            profile: profile.name.to_string(),
            rejected: named(rejected),
        });
    };
    for &(index, t) in &fitting[1..] {
        rejected.push((
            index,
            ParentRejection::RankedLower {
                type_id: t.id.clone(),
            },
        ));
    }
    Ok(Placement {
        parent: parents[chosen].address.clone(),
        offered: offered.clone(),
        rejected: named(rejected),
    })
}

/// Orders two fitting (parent index, type) pairs: best first.
fn rank(
    parents: &[ParentState],
    options: &PlacementOptions,
    (ia, ta): (usize, &OfferedType),
    (ib, tb): (usize, &OfferedType),
) -> Ordering {
    let (pa, pb) = (&parents[ia], &parents[ib]);
    let off_node = |p: &ParentState| options.numa.is_some_and(|n| p.numa_node != Some(n.node));
    let by_numa = off_node(pa).cmp(&off_node(pb));
    let (load_a, load_b) = (pa.instances.len(), pb.instances.len());
    let by_policy = match options.policy {
        Policy::Pack => load_b
            .cmp(&load_a)
            .then(ta.available_instances.cmp(&tb.available_instances)),
        Policy::Spread => load_a
            .cmp(&load_b)
            .then(tb.available_instances.cmp(&ta.available_instances)),
    };
    by_numa
        .then(by_policy)
        .then_with(|| crate::resolve::smaller_first(ta, tb))
        .then_with(|| pa.address.cmp(&pb.address))
}

/// One instance of a batch failed to place; nothing of the batch applies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("instance {index} of the batch: {source}")]
pub struct BatchError {
    /// 0-based position in the batch.
    pub index: usize,
    /// Why it could not be placed, given the placements before it.
    #[source]
    pub source: NoPlacement,
}

/// Places several instances at once, in order, all or nothing. Each placement consumes
/// capacity before the next is placed, so the batch never asks a parent for more than it
/// has (see [`consume`]).
pub fn place_batch(
    requests: &[(&Profile, PlacementOptions)],
    parents: &[ParentState],
) -> Result<Vec<Placement>, BatchError> {
    let mut working = parents.to_vec();
    let mut placements = Vec::with_capacity(requests.len());
    for (index, (profile, options)) in requests.iter().enumerate() {
        let placement =
            place(profile, &working, options).map_err(|source| BatchError { index, source })?;
        if let Some(parent) = working.iter_mut().find(|p| p.address == placement.parent) {
            consume(parent, &placement.offered.id);
        }
        placements.push(placement);
    }
    Ok(placements)
}

/// Records one new instance of `type_id` on `parent` and lowers what the parent's other
/// types can still offer.
///
/// Types on one parent share its resources (framebuffer, ports, aperture). Where both
/// framebuffers are known, one instance of T costs a type U at most
/// `ceil(fb(T) / fb(U))` instances: the count of a shared pool `floor(pool / fb(U))` drops by
/// no more than that, so the estimate never exceeds what the parent really has left. Where
/// a framebuffer is unknown (mtty), sizes are inferred from the free counts:
/// `ceil(free(U) / free(T))`.
pub fn consume(parent: &mut ParentState, type_id: &str) {
    let Some(placed) = parent.offered.iter().find(|t| t.id == type_id).cloned() else {
        return;
    };
    for other in &mut parent.offered {
        if other.id == placed.id {
            other.available_instances = other.available_instances.saturating_sub(1);
            continue;
        }
        if other.available_instances == 0 {
            continue;
        }
        let lost = match (placed.framebuffer_bytes, other.framebuffer_bytes) {
            (Some(t), Some(u)) if t > 0 && u > 0 => t.div_ceil(u),
            _ => u64::from(other.available_instances)
                .div_ceil(u64::from(placed.available_instances.max(1))),
        };
        let lost = u32::try_from(lost).unwrap_or(u32::MAX);
        other.available_instances = other.available_instances.saturating_sub(lost);
    }
    parent.instances.push(ExistingInstance {
        type_id: placed.id.clone(),
        type_name: Some(placed.name.clone()),
    });
}
