//! Write-ahead intent (issue 16): every host write that makes something — an mdev `create`, a
//! VF bound to vfio-pci, an NVIDIA vGPU type written to `current_vgpu_type`, a VF count change
//! — is preceded by a durable record of what it is about to make (`StateFile::intents`). The
//! save that records the made thing (`commit_new`, the VF count's record) drops the intent in
//! the same write, so at every instant the durable state either knows the device or holds
//! the intent that proves we made it. (Pass-through groups have had their own write-ahead
//! binding since issue 13, `passthrough::GroupBinding`; batches of mdevs use
//! `pending_creates`, one save for the whole batch.)
//!
//! The rule for an intent found later (reconcile, or a device that appears once its timed-out
//! write completes): **undo**. The call that wrote the intent never told its caller it
//! succeeded (its acknowledgement comes only after the save that drops the intent), so the
//! caller still owns the decision: it retries or gives up. Adopting the device instead would
//! leave an instance nobody asked to keep (a retry with the same UUID would then fail
//! `AlreadyExists`, one without a UUID would make a second), and for a transient instance a
//! record no domain will ever release. Undoing is what the same call does when its own save
//! fails, so a crash and a failed save end the same way. An intent whose device does not
//! exist is simply cleared — unless a write the engine gave up on is still stuck in the
//! kernel and may yet make it; then the intent stays until the device appears (hotplug calls
//! [`Engine::late_completion`]) or the next pass finds no write left in flight.
//!
//! The rule "never touch what we did not create" stands: an intent is the proof that we wrote
//! the `create`, bound the VF or set the type; nothing without an intent or a record is touched.

use serde::{Deserialize, Serialize};

use crate::lifecycle;
use crate::state::{InstanceKind, InstanceRecord, Owner, ParentName, TypeId, Uuid};
use crate::{
    lock, DestroyOptions, Engine, EngineError, EngineEvent, OperationContext, ReconcileAction,
    ReconcileReport,
};
use mdev_host::discovery::{self, names, names::PciAddress};

/// What a write that makes something is about to make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "making", rename_all = "snake_case")]
pub enum Intent {
    /// The device of an instance (the map key is its UUID).
    Instance {
        /// Mdev, VF or NVIDIA VF.
        kind: InstanceKind,
        /// Mdev parent or PF address.
        parent: ParentName,
        /// Mdev type, `vfio-pci`, or the NVIDIA type id.
        type_id: TypeId,
        /// The VF, for the VF kinds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vf: Option<PciAddress>,
        /// The VF's driver before the bind (given back on undo).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous_driver: Option<String>,
    },
    /// A PF's VF count changing from `from` (the map key is the PF address).
    VfCount {
        /// The count before the change (what undo writes back).
        from: u32,
        /// The count asked for.
        to: u32,
    },
}

impl Intent {
    /// The intent of an mdev `create`.
    pub(crate) fn mdev(parent: ParentName, type_id: TypeId) -> Self {
        Self::Instance {
            kind: InstanceKind::Mdev,
            parent,
            type_id,
            vf: None,
            previous_driver: None,
        }
    }

    /// The intent of a VF bind (`kind` Vf) or an NVIDIA vGPU type write (`kind` NvidiaVf).
    pub(crate) fn vf(
        kind: InstanceKind,
        pf: PciAddress,
        type_id: TypeId,
        vf: PciAddress,
        previous_driver: Option<String>,
    ) -> Self {
        Self::Instance {
            kind,
            parent: pf.into(),
            type_id,
            vf: Some(vf),
            previous_driver,
        }
    }

    /// What the intent announces, for messages.
    fn describe(&self, key: &str) -> String {
        match self {
            Self::Instance { kind, parent, .. } => format!("{kind} {key} on {parent}"),
            Self::VfCount { to, .. } => format!("{to} VFs on {key}"),
        }
    }

    /// The record an instance intent would have become (what undo removes).
    fn record(&self, key: &str) -> Option<InstanceRecord> {
        let Self::Instance {
            kind,
            parent,
            type_id,
            vf,
            previous_driver,
        } = self
        else {
            return None;
        };
        Some(InstanceRecord {
            uuid: Uuid::parse(key).ok()?,
            kind: *kind,
            parent: parent.clone(),
            type_id: type_id.clone(),
            profile: None,
            owner: Owner::CreatedByUs,
            autostart: false,
            persistent: false,
            claim: None,
            scheduling: Default::default(),
            attributes: Vec::new(),
            vf: *vf,
            previous_driver: previous_driver.clone(),
            force: false,
        })
    }
}

impl Engine {
    /// Makes `intent` durable under `key` before the write it announces. An mdev inside a
    /// batch needs none: the batch's `pending_creates`, saved before its first write, holds it.
    pub(crate) fn write_ahead(&self, key: &str, intent: Intent) -> Result<(), EngineError> {
        if Uuid::parse(key).is_ok_and(|uuid| lock(&self.state).pending_creates.contains(&uuid)) {
            return Ok(());
        }
        let what = intent.describe(key);
        let saved = self.update_state(|state| {
            state.intents.insert(key.to_owned(), intent);
        });
        saved.map_err(|error| {
            // Not durable, so no write follows: forget it in memory too.
            lock(&self.state).intents.remove(key);
            EngineError::Batch {
                step: format!("recording the intent to make {what}"),
                source: Box::new(error),
                rollback_failures: Vec::new(),
            }
        })
    }

    /// After the write `key`'s intent announced: a success is left to the save that records
    /// it (which drops the intent); a failure that made nothing clears the intent; a timed-out
    /// write (the kernel may still finish it) or a failure that left the device keeps it.
    pub(crate) fn settle_intent<T>(
        &self,
        key: &str,
        written: Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let Err(error) = written else {
            return written;
        };
        let intent = lock(&self.state).intents.get(key).cloned();
        let Some(intent) = intent else {
            return Err(error);
        };
        let timed_out = matches!(error, EngineError::WriteTimedOut { .. });
        if !timed_out && !self.intent_made_something(key, &intent) {
            // Best effort: a save that fails here leaves an intent reconcile clears.
            let _ = self.update_state(|state| state.intents.remove(key));
        }
        Err(error)
    }

    /// The intent is dropped (with the state change of the same save).
    pub(crate) fn intent_done(state: &mut crate::state::StateFile, key: &str) {
        state.intents.remove(key);
    }

    /// Whether what `intent` announced exists on the host now.
    fn intent_made_something(&self, key: &str, intent: &Intent) -> bool {
        match intent {
            Intent::Instance { .. } => intent.record(key).is_some_and(|r| self.is_active(&r)),
            Intent::VfCount { from, .. } => key
                .parse::<PciAddress>()
                .ok()
                .and_then(|pf| discovery::read_sriov_pf(self.fs(), pf))
                .is_some_and(|pf| pf.num_vfs != *from),
        }
    }

    /// Reconcile step (first, before pending releases and VF counts): undoes every intent
    /// that no call in flight owns (see the module documentation).
    pub(crate) fn finish_intents(&self, report: &mut ReconcileReport) {
        let intents: Vec<(String, Intent)> = lock(&self.state)
            .intents
            .iter()
            .map(|(k, i)| (k.clone(), i.clone()))
            .collect();
        for (key, intent) in intents {
            self.finish_intent(&key, &intent, report);
        }
    }

    /// A device appeared (hotplug): if an intent names it and no call in flight owns it, the
    /// write that made it was given up on (timed out) and never acknowledged — undo it.
    pub fn late_completion(&self, uuid: &str) {
        let Ok(parsed) = names::parse_uuid(uuid) else {
            return;
        };
        let key = parsed.to_string();
        let intent = lock(&self.state).intents.get(&key).cloned();
        if let Some(intent) = intent {
            let mut report = ReconcileReport::default();
            self.finish_intent(&key, &intent, &mut report);
            for action in report.actions {
                tracing::info!(target: "reconcile", "late completion: {action:?}");
            }
        }
    }

    fn finish_intent(&self, key: &str, intent: &Intent, report: &mut ReconcileReport) {
        let parent = match intent {
            Intent::Instance { parent, .. } => parent.to_string(),
            Intent::VfCount { .. } => key.to_owned(),
        };
        // Every write that makes something holds its parent's lock from its intent to the
        // save that drops it: under that lock an intent still there is no call's in flight
        // (for an instance, also no reservation: a call placing it has not reached the lock).
        let parent_lock = self.parent_lock(&parent);
        let _serialized = lock(&parent_lock);
        if lock(&self.state).intents.get(key) != Some(intent) || lock(&self.reserved).contains(key)
        {
            return;
        }
        let recorded = lock(&self.state).has_instance(key);
        let undone: Result<Option<String>, EngineError> = if recorded {
            // Saved before the crash: the record is the truth, the intent is stale.
            Ok(None)
        } else if self.intent_made_something(key, intent) {
            self.undo(key, intent).map(Some)
        } else if self.stuck_writes() > 0 {
            // A write the engine gave up on may still make it: keep the intent for it.
            return;
        } else {
            Ok(None)
        };
        match undone {
            Ok(done) => {
                let cleared = self.update_state(|state| Self::intent_done(state, key));
                if let Err(error) = cleared {
                    report.actions.push(ReconcileAction::IntentUndoFailed {
                        id: key.to_owned(),
                        error: format!("clearing the intent: {error}"),
                    });
                    return;
                }
                if let Some(what) = done {
                    report.actions.push(ReconcileAction::IntentUndone {
                        id: key.to_owned(),
                        what,
                    });
                    self.emit(EngineEvent::ParentChanged { parent });
                }
            }
            // Kept: the next pass tries again.
            Err(error) => report.actions.push(ReconcileAction::IntentUndoFailed {
                id: key.to_owned(),
                error: error.to_string(),
            }),
        }
    }

    /// Removes what `intent` made; returns what it did, for the report.
    fn undo(&self, key: &str, intent: &Intent) -> Result<String, EngineError> {
        match intent {
            Intent::Instance { .. } => {
                let record = intent
                    .record(key)
                    .ok_or_else(|| EngineError::InvalidArgument {
                        what: "intent",
                        value: key.to_owned(),
                        reason: "not an instance intent".into(),
                    })?;
                self.remove_device(&record)?;
                Ok(match record.kind {
                    InstanceKind::Mdev => {
                        format!("removed mdev {key} ({}/{})", record.parent, record.type_id)
                    }
                    InstanceKind::Vf => format!(
                        "unbound VF {} of {} from {} (instance {key})",
                        record.vf.map(|v| v.to_string()).unwrap_or_default(),
                        record.parent,
                        lifecycle::VFIO_PCI
                    ),
                    _ => format!(
                        "cleared vGPU type {} on VF {} (instance {key})",
                        record.type_id,
                        record.vf.map(|v| v.to_string()).unwrap_or_default()
                    ),
                })
            }
            Intent::VfCount { from, to } => {
                let pf: PciAddress = key.parse()?;
                self.set_num_vfs_locked(
                    &OperationContext::default(),
                    pf,
                    *from,
                    DestroyOptions { force: true },
                    false,
                )?;
                Ok(format!(
                    "set {key} back to {from} VFs (a change to {to} was not acknowledged)"
                ))
            }
        }
    }
}
