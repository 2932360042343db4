//! Removing instances: stop (keep a persistent definition), destroy (forget), a batch of
//! destroys with one save, and the rollback of what a failed create made.

use std::collections::HashSet;

use super::{
    claimed, lock, missing_vf, DestroyOptions, Engine, EngineError, EngineEvent, InstanceKind,
};
use crate::state::{InstanceRecord, Uuid};
use mdev_host::discovery::{self, layout, names};

impl Engine {
    /// Destroys several instances with one state save (two when a persistent instance is among
    /// them: the UUIDs are saved as `pending_destroys` first, so a crash part-way cannot bring
    /// an autostart instance back; reconcile finishes the removal). Every UUID is checked
    /// (known or forcibly removable, not claimed unless forced) before anything is removed. A
    /// removal cannot be undone: on a failure part-way, the instances removed so far stay
    /// removed and forgotten, and the error names the step.
    pub fn destroy_batch(
        &self,
        uuids: &[String],
        options: DestroyOptions,
    ) -> Result<(), EngineError> {
        self.destroy_batch_tracked(uuids, options, &mut Vec::new())
    }

    /// [`Engine::destroy_batch`] that adds to `destroyed` each UUID it removed (also when it
    /// fails part-way), so a caller undoing it recreates only what this call removed, never an
    /// instance another call destroyed meanwhile.
    pub(crate) fn destroy_batch_tracked(
        &self,
        uuids: &[String],
        options: DestroyOptions,
        destroyed: &mut Vec<String>,
    ) -> Result<(), EngineError> {
        let total = uuids.len();
        let mut keys = Vec::with_capacity(total);
        let mut seen = HashSet::with_capacity(total);
        for text in uuids {
            let key = names::parse_uuid(text)?.to_string();
            if !seen.insert(key.clone()) {
                return Err(EngineError::InvalidArgument {
                    what: "UUID",
                    value: key,
                    reason: "named twice in one batch".into(),
                });
            }
            keys.push(key);
        }
        // From the checks to the last removal no claim, start or other destroy of these
        // instances can come in between.
        let _held = self.instance_locks.hold_all(&keys);
        let mut any_persistent = false;
        for key in &keys {
            let uuid = names::parse_uuid(key)?;
            let key = key.clone();
            match lock(&self.state).instance(&key) {
                Some(record) => {
                    if let (Some(claim), false) = (&record.claim, options.force) {
                        return Err(claimed(&key, claim));
                    }
                    any_persistent |= record.persistent;
                }
                None if !self.fs().exists(&layout::mdev_device(&uuid)) => {
                    return Err(EngineError::UnknownInstance { uuid: key })
                }
                None if !options.force => return Err(EngineError::NotOwned { uuid: key }),
                None => {}
            }
        }
        if any_persistent {
            self.update_state(|state| {
                state
                    .pending_destroys
                    .extend(keys.iter().filter_map(|key| Uuid::parse(key).ok()))
            })?;
        }
        let mut outcome = Ok(());
        for (index, key) in keys.iter().enumerate() {
            let record = lock(&self.state).instance(key).cloned();
            let removed = match &record {
                Some(record) => {
                    let parent_lock = self.parent_lock(&record.parent);
                    let _serialized = lock(&parent_lock);
                    self.remove_device(record)
                        .map(|()| record.parent.to_string())
                }
                None => self.remove_unmanaged(key),
            };
            match removed {
                Ok(parent) => {
                    // Forgotten in memory now, durably with the one save below.
                    lock(&self.state).remove_instance(key);
                    destroyed.push(key.clone());
                    if let Some(record) = &record {
                        self.after_vf_change(record, true);
                    }
                    self.emit(EngineEvent::InstanceRemoved { uuid: key.clone() });
                    match &record {
                        Some(record) => self.emit_capacity_change(record),
                        None => self.emit(EngineEvent::ParentChanged { parent }),
                    }
                }
                Err(error) => {
                    outcome = Err(EngineError::Batch {
                        step: format!("destroying {key} ({} of {total})", index + 1),
                        source: Box::new(error),
                        rollback_failures: (index > 0)
                            .then(|| {
                                format!("{index} instances destroyed before it stay destroyed")
                            })
                            .into_iter()
                            .collect(),
                    });
                    break;
                }
            }
        }
        self.update_state(|state| {
            for uuid in keys.iter().filter_map(|key| Uuid::parse(key).ok()) {
                state.pending_destroys.remove(&uuid);
            }
        })?;
        outcome
    }

    /// Removes an mdev the state does not know (a forced removal); returns its parent.
    fn remove_unmanaged(&self, key: &str) -> Result<String, EngineError> {
        let uuid = names::parse_uuid(key)?;
        let mdev = discovery::read_mdev(self.fs(), &uuid).ok_or(EngineError::UnknownInstance {
            uuid: key.to_owned(),
        })?;
        let parent_lock = self.parent_lock(&mdev.parent);
        let _serialized = lock(&parent_lock);
        self.host.remove_mdev(&uuid)?;
        Ok(mdev.parent)
    }

    /// Undoes creations in reverse order; returns what could not be undone.
    pub(crate) fn roll_back(&self, created: &[InstanceRecord]) -> Vec<String> {
        let mut failures = Vec::new();
        for record in created.iter().rev() {
            if let Err(error) = self.remove_and_forget(record) {
                failures.push(format!("removing {} {}: {error}", record.kind, record.uuid));
            }
        }
        failures
    }

    fn remove_and_forget(&self, record: &InstanceRecord) -> Result<(), EngineError> {
        {
            let parent_lock = self.parent_lock(&record.parent);
            let _serialized = lock(&parent_lock);
            self.remove_device(record)?;
        }
        self.update_state(|state| {
            state.remove_instance(&record.uuid);
        })?;
        self.emit(EngineEvent::InstanceRemoved {
            uuid: record.uuid.to_string(),
        });
        self.emit_capacity_change(record);
        Ok(())
    }

    /// Removes the device but keeps a persistent definition (a transient record is dropped).
    ///
    /// A transient instance has no definition to keep, so stopping it would silently be a
    /// destroy: refused with `NotSupported` (checked under the instance lock).
    pub fn stop(&self, uuid: &str, options: DestroyOptions) -> Result<(), EngineError> {
        self.remove_instance(uuid, options, Removal::Stop)
    }

    /// [`Engine::stop`] for the engine's own undo steps (a claim rolled back or released): a
    /// record that has become transient meanwhile is forgotten instead of refused.
    pub(crate) fn stop_or_forget(
        &self,
        uuid: &str,
        options: DestroyOptions,
    ) -> Result<(), EngineError> {
        self.remove_instance(uuid, options, Removal::StopOrForget)
    }

    /// Removes the device (if active) and forgets the instance.
    pub fn destroy(&self, uuid: &str, options: DestroyOptions) -> Result<(), EngineError> {
        self.remove_instance(uuid, options, Removal::Destroy)
    }

    fn remove_instance(
        &self,
        uuid: &str,
        options: DestroyOptions,
        removal: Removal,
    ) -> Result<(), EngineError> {
        let uuid = names::parse_uuid(uuid)?;
        let key = uuid.to_string();
        // Held from the claim check to forgetting the record: a claim waits, then finds the
        // instance gone (or finds it claimed first, and this removal is refused).
        let _held = self.instance_locks.hold(&key);
        let Some(record) = lock(&self.state).instance(&key).cloned() else {
            // Not ours: only a forced removal touches it.
            let mdev = discovery::read_mdev(self.fs(), &uuid)
                .ok_or(EngineError::UnknownInstance { uuid: key.clone() })?;
            if removal == Removal::Stop {
                return Err(stop_of_transient(&key));
            }
            if !options.force {
                return Err(EngineError::NotOwned { uuid: key });
            }
            let parent_lock = self.parent_lock(&mdev.parent);
            let _serialized = lock(&parent_lock);
            self.host.remove_mdev(&uuid)?;
            self.emit(EngineEvent::InstanceRemoved { uuid: key });
            self.emit(EngineEvent::TypeChanged {
                parent: mdev.parent,
                type_id: mdev.type_id,
            });
            return Ok(());
        };
        // Checked under the instance lock, with the record the removal acts on: a stop of an
        // instance without a definition would silently be a destroy.
        if removal == Removal::Stop && !record.persistent {
            return Err(stop_of_transient(&key));
        }
        if let Some(claim) = &record.claim {
            if !options.force {
                return Err(claimed(&key, claim));
            }
        }
        {
            let parent_lock = self.parent_lock(&record.parent);
            let _serialized = lock(&parent_lock);
            self.remove_device(&record)?;
        }
        let forget = removal == Removal::Destroy || !record.persistent;
        self.update_state(|state| {
            if forget {
                state.remove_instance(&key);
            } else if let Some(kept) = state.instance_mut(&key) {
                kept.claim = None;
            }
        })?;
        self.after_vf_change(&record, true);
        self.emit(if forget {
            EngineEvent::InstanceRemoved { uuid: key }
        } else {
            EngineEvent::InstanceChanged { uuid: key }
        });
        self.emit_capacity_change(&record);
        Ok(())
    }

    /// Removes a record's device from the host if it is there (caller holds the parent lock).
    pub(crate) fn remove_device(&self, record: &InstanceRecord) -> Result<(), EngineError> {
        match record.kind {
            InstanceKind::Mdev => {
                let uuid = record.uuid;
                if self.fs().exists(&layout::mdev_device(&uuid)) {
                    self.host.remove_mdev(&uuid)?;
                }
            }
            InstanceKind::Vf => {
                let vf = record.vf.ok_or_else(|| missing_vf(record))?;
                self.host
                    .unbind_vfio(vf, record.previous_driver.as_deref())?;
            }
            InstanceKind::NvidiaVf => {
                let vf = record.vf.ok_or_else(|| missing_vf(record))?;
                let current = discovery::read_nvidia_vf(self.fs(), vf)
                    .map(|nv| nv.current_type)
                    .unwrap_or(0);
                if current != 0 {
                    self.host.clear_nvidia_vgpu(vf)?;
                }
            }
            InstanceKind::Passthrough => self.release_passthrough(record)?,
        }
        Ok(())
    }
}

/// What [`Engine::remove_instance`] keeps of the instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removal {
    /// Remove the device and forget the instance.
    Destroy,
    /// Remove the device, keep the definition; refused for a transient instance.
    Stop,
    /// Remove the device, keep the definition if there is one (engine-internal undo).
    StopOrForget,
}

/// The business rule behind [`Engine::stop`]: a transient instance (or a device the service
/// does not manage) has no definition to keep.
fn stop_of_transient(uuid: &str) -> EngineError {
    EngineError::NotSupported {
        what: format!("Stop of instance {uuid}"),
        reason: "it is transient: Stop keeps a definition it does not have; destroy it instead"
            .to_owned(),
    }
}
