//! Declarative apply: the plan from a desired state to the host, and its application.
//!
//! Contract: [`plan`] is pure (desired state + the engine's view → [`ApplyPlan`]); it never
//! plans removing an instance a VM holds or one the service did not create unless forced, and
//! names each such instance with why in [`ApplyPlan::refused`]. [`Engine::apply_plan`] applies
//! a plan all or nothing: destroys, then VF counts, then creates (one `create_batch`), then
//! re-weights; a failing step undoes the earlier ones (destroyed instances are recreated with
//! their UUIDs, VF counts set back, created ones removed, records restored).
//!
//! Scope: a parent named by an `[[instances]]` entry or an `[[sriov]]` PF is described whole
//! (a running instance there that no entry wants is removed); a placed entry (no parent) also
//! takes in the running instances of its profile anywhere. Stopped definitions are left alone.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use vgpu_profiles::desired::{DesiredInstances, DesiredState};

use super::{
    CreateRequest, CreateTarget, DestroyOptions, Engine, EngineError, InstanceInfo, InstanceKind,
    OperationContext, Owner, Scheduling,
};
use mdev_host::error::ErrorKind;

/// Instances to create for one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedCreate {
    /// Profile.
    pub profile: String,
    /// Pinned parent, or `None` (placed).
    pub parent: Option<String>,
    /// An explicit mdev type id on `parent` instead of the profile (vgpu-device-manager
    /// files); `profile` is then the vendor's name of the type.
    #[serde(default)]
    pub type_id: Option<String>,
    /// How many.
    pub count: u32,
    /// Autostart (and persistent).
    pub autostart: bool,
    /// Scheduling fields the entry sets.
    pub scheduling: Scheduling,
    /// Why.
    pub reason: String,
}

/// An instance to remove.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedDestroy {
    /// The instance as planned (kept to recreate it on rollback).
    pub instance: InstanceInfo,
    /// Removed although held or not the service's (`force`).
    pub forced: bool,
    /// Why.
    pub reason: String,
}

/// A kept instance whose record changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedUpdate {
    /// The instance.
    pub uuid: String,
    /// Scheduling now and wanted, when it changes.
    pub scheduling: Option<(Scheduling, Scheduling)>,
    /// (persistent, autostart) now and wanted, when it changes.
    pub persistence: Option<((bool, bool), (bool, bool))>,
    /// Why.
    pub reason: String,
}

/// A PF whose VF count changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedVfCount {
    /// PF address.
    pub pf: String,
    /// Count now.
    pub from: u32,
    /// Count wanted.
    pub to: u32,
}

/// An instance the plan would remove but may not without `force`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedRefusal {
    /// The instance.
    pub uuid: String,
    /// Its parent.
    pub parent: String,
    /// Why it is not removed.
    pub reason: String,
}

/// What applying a desired state changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplyPlan {
    /// Instances to create.
    pub creates: Vec<PlannedCreate>,
    /// Instances to remove.
    pub destroys: Vec<PlannedDestroy>,
    /// Kept instances whose weight, shares or autostart change.
    pub updates: Vec<PlannedUpdate>,
    /// VF counts to change.
    pub vf_counts: Vec<PlannedVfCount>,
    /// Instances that stand in the way (held by a VM, not created by the service).
    pub refused: Vec<PlannedRefusal>,
}

/// Why an apply was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The plan would remove instances it may not remove without `force`.
    #[error("apply refused: {}", list_refusals(refused))]
    Refused {
        /// Each instance and why.
        refused: Vec<PlannedRefusal>,
    },
    /// An `[[sriov]]` PF is not an SR-IOV PF on this host.
    #[error("apply: {pf} is not an SR-IOV PF on this host")]
    UnknownPf {
        /// The address given.
        pf: String,
    },
    /// A step failed; the steps before it were undone.
    #[error("apply: {step} failed{}", rollback_note(rollback_failures))]
    Step {
        /// Which step.
        step: String,
        /// Its failure.
        #[source]
        source: Box<EngineError>,
        /// Undo steps that failed too (each names its device).
        rollback_failures: Vec<String>,
    },
    /// A vgpu-device-manager entry that does not fit this host (a type the GPU does not
    /// offer, a GPU that is not an mdev parent).
    #[error("{file}: line {line}: key {key}: {reason}")]
    VgpuDm {
        /// The file name given by the caller.
        file: String,
        /// 1-based line of the key.
        line: usize,
        /// The key.
        key: String,
        /// Why it does not fit.
        reason: String,
    },
    /// `assert`: the host differs from the desired state.
    #[error("the host differs from the desired state:\n{difference}")]
    Differs {
        /// The plan that would make it match, rendered.
        difference: String,
    },
}

impl ApplyError {
    /// The error class.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Refused { .. } => ErrorKind::InUse,
            Self::UnknownPf { .. } => ErrorKind::NotFound,
            Self::Step { source, .. } => source.kind(),
            Self::VgpuDm { .. } => ErrorKind::NotSupported,
            Self::Differs { .. } => ErrorKind::Failed,
        }
    }
}

fn list_refusals(refused: &[PlannedRefusal]) -> String {
    refused
        .iter()
        .map(|refusal| {
            format!(
                "{} on {} ({})",
                refusal.uuid, refusal.parent, refusal.reason
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn rollback_note(failures: &[String]) -> String {
    if failures.is_empty() {
        ", rolled back".to_owned()
    } else {
        format!(", rollback incomplete: {}", failures.join("; "))
    }
}

impl ApplyPlan {
    /// No change and nothing refused: the host matches.
    pub fn is_empty(&self) -> bool {
        self.creates.is_empty()
            && self.destroys.is_empty()
            && self.updates.is_empty()
            && self.vf_counts.is_empty()
            && self.refused.is_empty()
    }

    /// One line per change, `create`/`destroy`/`update`/`vf-count`/`refused`, each with its
    /// reason; `no changes: the host matches` for an empty plan.
    pub fn render(&self) -> String {
        if self.is_empty() {
            return "no changes: the host matches\n".to_owned();
        }
        let mut out = String::new();
        for change in &self.vf_counts {
            let _ = writeln!(
                out,
                "vf-count {}: {} -> {} (sriov_numvfs differs)",
                change.pf, change.from, change.to
            );
        }
        for destroy in &self.destroys {
            let info = &destroy.instance;
            let _ = writeln!(
                out,
                "destroy {} on {} ({}){}: {}",
                info.uuid,
                info.parent,
                info.profile.as_deref().unwrap_or(&info.type_id),
                if destroy.forced { " [forced]" } else { "" },
                destroy.reason
            );
        }
        for create in &self.creates {
            let _ = writeln!(
                out,
                "create {} x {}{} on {}{}: {}",
                create.count,
                create.profile,
                create
                    .type_id
                    .as_ref()
                    .map_or(String::new(), |type_id| format!(" ({type_id})")),
                create.parent.as_deref().unwrap_or("(placed)"),
                if create.autostart { " autostart" } else { "" },
                create.reason
            );
        }
        for update in &self.updates {
            let _ = writeln!(out, "update {}: {}", update.uuid, update.reason);
        }
        for refusal in &self.refused {
            let _ = writeln!(
                out,
                "refused {} on {}: {}",
                refusal.uuid, refusal.parent, refusal.reason
            );
        }
        out
    }
}

/// The plan from `desired` to the host whose running and defined instances are `instances`
/// and whose SR-IOV PFs have `vf_counts` (address, `sriov_numvfs`). With `force`, instances a
/// VM holds or the service did not create are planned for removal (marked forced) instead of
/// refused.
pub fn plan(
    desired: &DesiredState,
    instances: &[InstanceInfo],
    vf_counts: &[(String, u32)],
    force: bool,
) -> Result<ApplyPlan, ApplyError> {
    let mut result = ApplyPlan::default();
    for wanted in &desired.sriov {
        let pf = wanted.pf.to_ascii_lowercase();
        let Some((_, now)) = vf_counts.iter().find(|(address, _)| *address == pf) else {
            return Err(ApplyError::UnknownPf {
                pf: wanted.pf.clone(),
            });
        };
        if *now != wanted.num_vfs {
            result.vf_counts.push(PlannedVfCount {
                pf,
                from: *now,
                to: wanted.num_vfs,
            });
        }
    }

    let named_parents: BTreeSet<String> = desired
        .instances
        .iter()
        .filter_map(|entry| entry.parent.clone())
        .chain(
            desired
                .sriov
                .iter()
                .map(|entry| entry.pf.to_ascii_lowercase()),
        )
        .chain(desired.whole_parents.iter().cloned())
        .collect();
    let placed_profiles: BTreeSet<&str> = desired
        .instances
        .iter()
        .filter(|entry| entry.parent.is_none())
        .map(|entry| entry.profile.as_str())
        .collect();
    let in_scope: Vec<&InstanceInfo> = instances
        .iter()
        .filter(|info| info.active)
        .filter(|info| {
            named_parents.contains(&info.parent)
                || info
                    .profile
                    .as_deref()
                    .is_some_and(|profile| placed_profiles.contains(profile))
        })
        .collect();

    // Pinned entries first, so a placed entry does not take an instance a pinned one wants.
    let mut entries: Vec<&DesiredInstances> = desired.instances.iter().collect();
    entries.sort_by_key(|entry| entry.parent.is_none());
    let mut kept: HashSet<&str> = HashSet::new();
    for entry in entries {
        let mut candidates: Vec<&InstanceInfo> = in_scope
            .iter()
            .copied()
            .filter(|info| !kept.contains(info.uuid.as_str()))
            .filter(|info| match &entry.type_id {
                Some(type_id) => info.type_id == *type_id,
                None => info.profile.as_deref() == Some(entry.profile.as_str()),
            })
            .filter(|info| {
                entry
                    .parent
                    .as_ref()
                    .is_none_or(|parent| *parent == info.parent)
            })
            .collect();
        // Keep the ones that are hardest to remove: held, then not the service's.
        candidates.sort_by_key(|info| {
            (
                info.claim.is_none(),
                info.owner == Some(Owner::CreatedByUs),
                info.uuid.clone(),
            )
        });
        candidates.truncate(entry.count as usize);
        for info in &candidates {
            kept.insert(info.uuid.as_str());
            if let Some(update) = planned_update(entry, info) {
                result.updates.push(update);
            }
        }
        let missing = entry.count - candidates.len() as u32;
        if missing > 0 {
            result.creates.push(PlannedCreate {
                profile: entry.profile.clone(),
                parent: entry.parent.clone(),
                type_id: entry.type_id.clone(),
                count: missing,
                autostart: entry.autostart,
                scheduling: Scheduling {
                    weight: entry.weight,
                    min_share: entry.min_share,
                    max_share: entry.max_share,
                },
                reason: format!("{} of {} running", candidates.len(), entry.count),
            });
        }
    }

    for info in in_scope {
        if kept.contains(info.uuid.as_str()) {
            continue;
        }
        let why_not_ours = match (&info.claim, info.owner) {
            (Some(claim), _) => Some(format!("held by VM {}", claim.domain_name)),
            (None, Some(Owner::CreatedByUs)) => None,
            (None, Some(Owner::Adopted)) => Some("adopted, not created by the service".into()),
            (None, None) => Some("found on the host, not created by the service".into()),
        };
        let unwanted = match &info.profile {
            Some(profile) => format!("no entry wants another {profile} on {}", info.parent),
            None => format!("not in the file ({} on {})", info.type_id, info.parent),
        };
        match why_not_ours {
            None => result.destroys.push(PlannedDestroy {
                instance: info.clone(),
                forced: false,
                reason: unwanted,
            }),
            Some(why) if force => result.destroys.push(PlannedDestroy {
                instance: info.clone(),
                forced: true,
                reason: format!("{unwanted}; {why}"),
            }),
            Some(why) => result.refused.push(PlannedRefusal {
                uuid: info.uuid.clone(),
                parent: info.parent.clone(),
                reason: format!("{unwanted}, but {why} (use force)"),
            }),
        }
    }
    Ok(result)
}

fn planned_update(entry: &DesiredInstances, info: &InstanceInfo) -> Option<PlannedUpdate> {
    let now = info.scheduling;
    let wanted = Scheduling {
        weight: entry.weight.or(now.weight),
        min_share: entry.min_share.or(now.min_share),
        max_share: entry.max_share.or(now.max_share),
    };
    let persistence_now = (info.persistent, info.autostart);
    let persistence_wanted = if entry.autostart {
        (true, true)
    } else {
        (info.persistent, false)
    };
    let mut reasons = Vec::new();
    if wanted != now {
        reasons.push(format!(
            "scheduling {} -> {}",
            show_scheduling(&now),
            show_scheduling(&wanted)
        ));
    }
    if persistence_wanted != persistence_now {
        reasons.push(format!(
            "autostart {} -> {}",
            persistence_now.1, persistence_wanted.1
        ));
    }
    if reasons.is_empty() {
        return None;
    }
    Some(PlannedUpdate {
        uuid: info.uuid.clone(),
        scheduling: (wanted != now).then_some((now, wanted)),
        persistence: (persistence_wanted != persistence_now)
            .then_some((persistence_now, persistence_wanted)),
        reason: reasons.join(", "),
    })
}

fn show_scheduling(scheduling: &Scheduling) -> String {
    let show = |value: Option<u32>| value.map_or("-".to_owned(), |value| value.to_string());
    format!(
        "weight {} min {} max {}",
        show(scheduling.weight),
        show(scheduling.min_share),
        show(scheduling.max_share)
    )
}

/// What an apply changed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplyReport {
    /// Instances created.
    pub created: Vec<String>,
    /// Instances removed.
    pub destroyed: Vec<String>,
    /// Instances whose record changed.
    pub updated: Vec<String>,
    /// PFs whose VF count changed.
    pub vf_counts: Vec<String>,
}

impl Engine {
    /// The plan from `desired` to the host as the engine sees it now (see [`plan`]).
    pub fn plan_apply(
        &self,
        desired: &DesiredState,
        force: bool,
    ) -> Result<ApplyPlan, EngineError> {
        let inventory = self.inventory()?;
        let instances = self.instances_in(&inventory);
        let vf_counts: Vec<(String, u32)> = inventory
            .sriov_pfs
            .iter()
            .map(|pf| (pf.function.address.to_string(), pf.num_vfs))
            .collect();
        Ok(plan(desired, &instances, &vf_counts, force)?)
    }

    /// Applies `plan` all or nothing (see the module header). A plan with refusals is refused
    /// whole ([`ApplyError::Refused`]). Runs with the default context (see
    /// [`Engine::apply_plan_with`]).
    pub fn apply_plan(&self, plan: &ApplyPlan) -> Result<ApplyReport, EngineError> {
        self.apply_plan_with(&OperationContext::default(), plan)
    }

    /// [`Engine::apply_plan`] with `ctx`: a cancel stops the step running (the VF counts, the
    /// creates) and the plan is rolled back. The rollback itself runs with the default
    /// context, so the cancel that caused it does not stop it half-way.
    pub fn apply_plan_with(
        &self,
        ctx: &OperationContext,
        plan: &ApplyPlan,
    ) -> Result<ApplyReport, EngineError> {
        if !plan.refused.is_empty() {
            return Err(ApplyError::Refused {
                refused: plan.refused.clone(),
            }
            .into());
        }
        let mut report = ApplyReport::default();

        // 1. Destroys.
        if !plan.destroys.is_empty() {
            let uuids: Vec<String> = plan
                .destroys
                .iter()
                .map(|destroy| destroy.instance.uuid.clone())
                .collect();
            let force = plan.destroys.iter().any(|destroy| destroy.forced);
            let mut destroyed = Vec::new();
            if let Err(error) =
                self.destroy_batch_tracked(&uuids, DestroyOptions { force }, &mut destroyed)
            {
                // Only what this apply removed comes back: a planned instance another call
                // destroyed meanwhile (the reason the batch failed) stays destroyed.
                let rollback_failures = self.recreate_destroyed(plan, &destroyed);
                return Err(step_failed("removing instances", error, rollback_failures));
            }
            report.destroyed = destroyed;
        }

        // 2. VF counts.
        let force = plan.destroys.iter().any(|destroy| destroy.forced);
        for (index, change) in plan.vf_counts.iter().enumerate() {
            if let Err(error) =
                self.set_num_vfs_with(ctx, &change.pf, change.to, DestroyOptions { force })
            {
                let mut failures = self.undo_vf_counts(&plan.vf_counts[..index]);
                failures.extend(self.recreate_destroyed(plan, &report.destroyed));
                return Err(step_failed(
                    &format!("setting {} VFs on {}", change.to, change.pf),
                    error,
                    failures,
                ));
            }
            report.vf_counts.push(change.pf.clone());
        }

        // 3. Creates, one batch (it rolls itself back).
        let requests: Vec<CreateRequest> = plan
            .creates
            .iter()
            .flat_map(|create| {
                (0..create.count).map(move |_| {
                    let target = match (&create.type_id, &create.parent) {
                        // A numeric id is an NVIDIA SR-IOV vGPU type on the PF `parent`.
                        (Some(type_id), Some(parent)) => match type_id.parse::<u32>() {
                            Ok(nvidia_type) => CreateTarget::NvidiaVf {
                                pf: parent.clone(),
                                type_id: nvidia_type,
                                vf: None,
                            },
                            Err(_) => CreateTarget::Mdev {
                                parent: parent.clone(),
                                type_id: type_id.clone(),
                            },
                        },
                        _ => CreateTarget::Profile {
                            profile: create.profile.clone(),
                            parent: create.parent.clone(),
                        },
                    };
                    let mut request = CreateRequest::new(target);
                    request.autostart = create.autostart;
                    request.persistent = create.autostart;
                    request.scheduling = create.scheduling;
                    request
                })
            })
            .collect();
        if !requests.is_empty() {
            match self.create_batch_with(ctx, requests) {
                Ok(created) => {
                    report.created = created.into_iter().map(|info| info.uuid).collect();
                }
                Err(error) => {
                    let mut failures = self.undo_vf_counts(&plan.vf_counts);
                    failures.extend(self.recreate_destroyed(plan, &report.destroyed));
                    return Err(step_failed("creating instances", error, failures));
                }
            }
        }

        // 4. Record changes.
        for (index, update) in plan.updates.iter().enumerate() {
            if let Err(error) = self.apply_update(update, false) {
                let mut failures = Vec::new();
                for done in plan.updates[..index].iter().rev() {
                    if let Err(undo) = self.apply_update(done, true) {
                        failures.push(format!("restoring {}: {undo}", done.uuid));
                    }
                }
                if !report.created.is_empty() {
                    if let Err(undo) =
                        self.destroy_batch(&report.created, DestroyOptions { force: true })
                    {
                        failures.push(format!("removing the created instances: {undo}"));
                    }
                }
                failures.extend(self.undo_vf_counts(&plan.vf_counts));
                failures.extend(self.recreate_destroyed(plan, &report.destroyed));
                return Err(step_failed(
                    &format!("updating {}", update.uuid),
                    error,
                    failures,
                ));
            }
            report.updated.push(update.uuid.clone());
        }
        Ok(report)
    }

    fn apply_update(&self, update: &PlannedUpdate, undo: bool) -> Result<(), EngineError> {
        let pick = |pair: (Scheduling, Scheduling)| if undo { pair.0 } else { pair.1 };
        if let Some(pair) = update.scheduling {
            self.set_scheduling(&update.uuid, pick(pair))?;
        }
        if let Some((now, wanted)) = update.persistence {
            let (persistent, autostart) = if undo { now } else { wanted };
            self.set_persistence(&update.uuid, persistent, autostart)?;
        }
        Ok(())
    }

    fn undo_vf_counts(&self, done: &[PlannedVfCount]) -> Vec<String> {
        let mut failures = Vec::new();
        for change in done.iter().rev() {
            if let Err(error) =
                self.set_num_vfs(&change.pf, change.from, DestroyOptions { force: false })
            {
                failures.push(format!(
                    "setting {} back to {} VFs: {error}",
                    change.pf, change.from
                ));
            }
        }
        failures
    }

    /// Recreates, with their UUIDs, the planned destroys this apply removed (`destroyed`)
    /// that are still gone.
    fn recreate_destroyed(&self, plan: &ApplyPlan, destroyed: &[String]) -> Vec<String> {
        let mut failures = Vec::new();
        let mut requests = Vec::new();
        for destroy in &plan.destroys {
            let info = &destroy.instance;
            if !destroyed.contains(&info.uuid) || self.instance(&info.uuid).is_ok() {
                continue;
            }
            if info.kind != InstanceKind::Mdev {
                failures.push(format!(
                    "{} ({} on {}) cannot be recreated by apply",
                    info.uuid, info.type_id, info.parent
                ));
                continue;
            }
            let target = match &info.profile {
                Some(profile) => CreateTarget::Profile {
                    profile: profile.clone(),
                    parent: Some(info.parent.clone()),
                },
                None => CreateTarget::Mdev {
                    parent: info.parent.clone(),
                    type_id: info.type_id.clone(),
                },
            };
            let mut request = CreateRequest::new(target);
            request.uuid = Some(info.uuid.clone());
            request.persistent = info.persistent;
            request.autostart = info.autostart;
            request.scheduling = info.scheduling;
            requests.push(request);
        }
        if !requests.is_empty() {
            if let Err(error) = self.create_batch(requests) {
                failures.push(format!("recreating the removed instances: {error}"));
            }
        }
        failures
    }
}

fn step_failed(step: &str, error: EngineError, rollback_failures: Vec<String>) -> EngineError {
    ApplyError::Step {
        step: step.to_owned(),
        source: Box::new(error),
        rollback_failures,
    }
    .into()
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
