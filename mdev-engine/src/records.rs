//! Changing what the engine records about an instance or a parent without touching a device:
//! adopting an unmanaged mdev, persistence and autostart, scheduling fields, a parent's
//! stored schedule.

use super::create::check_scheduling;
use super::{
    lock, Engine, EngineError, EngineEvent, InstanceInfo, InstanceKind, Owner, PciAddress,
    Scheduling,
};
use crate::state::{InstanceRecord, ParentName, TypeId};
use mdev_host::discovery::{self, layout, names};

impl Engine {
    /// Takes over an mdev the manager did not create, so it may be managed and removed.
    pub fn adopt(&self, uuid: &str) -> Result<InstanceInfo, EngineError> {
        let uuid = names::parse_uuid(uuid)?;
        let key = uuid.to_string();
        let _held = self.instance_locks.hold(&key);
        if let Some(record) = lock(&self.state).instance(&key).cloned() {
            return Ok(self.info_of(&record));
        }
        let mdev = discovery::read_mdev(self.fs(), &uuid)
            .ok_or(EngineError::UnknownInstance { uuid: key.clone() })?;
        let record = InstanceRecord {
            uuid,
            kind: InstanceKind::Mdev,
            parent: ParentName::new(&mdev.parent)?,
            type_id: TypeId::new(&mdev.type_id)?,
            profile: None,
            owner: Owner::Adopted,
            autostart: false,
            persistent: false,
            claim: None,
            scheduling: Scheduling::default(),
            attributes: Vec::new(),
            vf: None,
            previous_driver: None,
            force: false,
        };
        self.update_state(|state| {
            state.insert_instance(record.clone());
        })?;
        self.emit(EngineEvent::InstanceChanged { uuid: key });
        Ok(self.info_of(&record))
    }

    /// Changes persistence/autostart of a known instance (`autostart` implies `persistent`).
    pub fn set_persistence(
        &self,
        uuid: &str,
        persistent: bool,
        autostart: bool,
    ) -> Result<InstanceInfo, EngineError> {
        self.modify_record(uuid, |record| {
            record.autostart = autostart;
            record.persistent = persistent || autostart;
        })
    }

    /// Records an instance's scheduling fields.
    pub fn set_scheduling(
        &self,
        uuid: &str,
        scheduling: Scheduling,
    ) -> Result<InstanceInfo, EngineError> {
        check_scheduling(&scheduling)?;
        self.modify_record(uuid, |record| record.scheduling = scheduling)
    }

    pub(super) fn modify_record(
        &self,
        uuid: &str,
        change: impl FnOnce(&mut InstanceRecord),
    ) -> Result<InstanceInfo, EngineError> {
        let key = names::parse_uuid(uuid)?.to_string();
        let _held = self.instance_locks.hold(&key);
        let record = self.update_state(|state| {
            state.instance_mut(&key).map(|record| {
                change(record);
                record.clone()
            })
        })?;
        let record = record.ok_or(EngineError::UnknownInstance { uuid: key.clone() })?;
        self.emit(EngineEvent::InstanceChanged { uuid: key });
        Ok(self.info_of(&record))
    }

    /// A parent's stored scheduling policy.
    pub fn parent_schedule(&self, parent: &str) -> Option<serde_json::Value> {
        lock(&self.state)
            .parents
            .get(parent)
            .and_then(|p| p.schedule.clone())
    }

    /// Stores a parent's scheduling policy (opaque to the engine).
    pub fn set_parent_schedule(
        &self,
        parent: &str,
        schedule: serde_json::Value,
    ) -> Result<(), EngineError> {
        let name = ParentName::new(parent)?;
        let known = self.fs().exists(&layout::mdev_parent(parent))
            || parent
                .parse::<PciAddress>()
                .is_ok_and(|a| self.fs().exists(&layout::pci_device(&a)))
            || lock(&self.state).parents.contains_key(name.as_str());
        if !known {
            return Err(EngineError::UnknownParent {
                parent: parent.to_owned(),
            });
        }
        self.update_state(|state| {
            state.parents.entry(name.clone()).or_default().schedule = Some(schedule);
        })?;
        self.emit(EngineEvent::ParentChanged {
            parent: name.to_string(),
        });
        Ok(())
    }
}
