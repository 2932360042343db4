//! mdev definitions as mdevctl keeps them: vendor attributes (`attrs`) and definitions made
//! without creating the device (`mdevctl define`).
//!
//! Contract:
//! - An mdev instance's attributes are an ordered list of `(name, value)`; they are written to
//!   the device's sysfs attributes in that order each time the device is created (create,
//!   start, autostart after a boot: `lifecycle::Host::create_mdev`), stored with the
//!   definition and mirrored into `/etc/mdevctl.d`. Names and values are checked as for a
//!   create (a relative path without `..`; one line, no NUL).
//! - [`Engine::set_attributes`] replaces the attributes of a persistent mdev instance. The
//!   running device is not touched: as mdevctl's `modify` without `--live`, the new list takes
//!   effect the next time the device is created. A transient instance (it has no definition)
//!   or another kind is refused naming it; nothing changes.
//! - [`Engine::define_mdev`] records a persistent, stopped mdev instance of a type the parent
//!   has, without writing anything in sysfs (no capacity is taken until it starts). A UUID the
//!   service knows or that exists on the host is refused, nothing changes.

use super::create::Reservation;
use super::{
    Engine, EngineError, EngineEvent, InstanceInfo, InstanceKind, InstanceRecord, Owner, Scheduling,
};
use crate::state::{ParentName, TypeId};
use mdev_host::discovery::{layout, names};

/// What [`Engine::define_mdev`] records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MdevDefinition {
    /// The parent's sysfs name.
    pub parent: String,
    /// The mdev type id on that parent.
    pub type_id: String,
    /// The UUID (any case); generated when absent.
    pub uuid: Option<String>,
    /// Start when the parent appears / after a boot (mdevctl `start: auto`).
    pub autostart: bool,
    /// Vendor attributes, written in order each time the device is created.
    pub attributes: Vec<(String, String)>,
}

/// Checks every attribute's name and value (the first bad one is named).
fn check_attributes(attributes: &[(String, String)]) -> Result<(), EngineError> {
    for (name, value) in attributes {
        names::check_attribute_name(name)?;
        names::check_sysfs_value(name, value)?;
    }
    Ok(())
}

impl Engine {
    /// Replaces the ordered attributes of the persistent mdev instance `uuid` (see the module
    /// contract: the running device is not touched).
    pub fn set_attributes(
        &self,
        uuid: &str,
        attributes: Vec<(String, String)>,
    ) -> Result<InstanceInfo, EngineError> {
        check_attributes(&attributes)?;
        let key = names::parse_uuid(uuid)?.to_string();
        let _held = self.instance_locks.hold(&key);
        let record = self.update_state(|state| {
            let record = state
                .instance_mut(&key)
                .ok_or_else(|| EngineError::UnknownInstance { uuid: key.clone() })?;
            if record.kind != InstanceKind::Mdev {
                return Err(EngineError::NotSupported {
                    what: format!("attributes of {} instance {key}", record.kind),
                    reason: "only mdev instances have vendor attributes".into(),
                });
            }
            if !record.persistent {
                return Err(EngineError::NotSupported {
                    what: format!("attributes of transient mdev {key}"),
                    reason: "attributes belong to a definition; make the instance persistent \
                             first"
                        .into(),
                });
            }
            record.attributes = attributes;
            Ok(record.clone())
        })??;
        self.emit(EngineEvent::InstanceChanged { uuid: key });
        Ok(self.info_of(&record))
    }

    /// The attributes of every instance that has any, by UUID (sorted).
    pub fn instance_attributes(&self) -> Vec<(String, Vec<(String, String)>)> {
        let state = super::lock(&self.state);
        state
            .instances
            .values()
            .filter(|record| !record.attributes.is_empty())
            .map(|record| (record.uuid.to_string(), record.attributes.clone()))
            .collect()
    }

    /// Records a persistent, stopped mdev definition (see the module contract).
    pub fn define_mdev(&self, definition: MdevDefinition) -> Result<InstanceInfo, EngineError> {
        let uuid = match &definition.uuid {
            Some(text) => names::parse_uuid(text)?,
            None => crate::new_uuid(),
        };
        let key = uuid.to_string();
        let parent = ParentName::new(&definition.parent)?;
        let type_id = TypeId::new(&definition.type_id)?;
        check_attributes(&definition.attributes)?;
        if !self.fs().is_dir(&layout::mdev_parent(&definition.parent)) {
            return Err(EngineError::UnknownParent {
                parent: definition.parent,
            });
        }
        if !self
            .fs()
            .is_dir(&layout::mdev_type(&definition.parent, &definition.type_id))
        {
            return Err(EngineError::UnknownType {
                parent: definition.parent,
                type_id: definition.type_id,
            });
        }
        let _reservation = {
            let state = super::lock(&self.state);
            let mut reserved = super::lock(&self.reserved);
            if state.has_instance(&key) || !reserved.insert(key.clone()) {
                return Err(EngineError::AlreadyExists { uuid: key });
            }
            Reservation {
                engine: self,
                uuid: key.clone(),
            }
        };
        if self.fs().exists(&layout::mdev_device(&uuid)) {
            return Err(EngineError::AlreadyExists { uuid: key });
        }
        let record = InstanceRecord {
            uuid,
            kind: InstanceKind::Mdev,
            parent,
            type_id,
            profile: None,
            owner: Owner::CreatedByUs,
            autostart: definition.autostart,
            persistent: true,
            claim: None,
            scheduling: Scheduling::default(),
            attributes: definition.attributes,
            vf: None,
            previous_driver: None,
            force: false,
        };
        self.update_state(|state| {
            state.insert_instance(record.clone());
        })?;
        self.emit(EngineEvent::InstanceAdded { uuid: key });
        self.emit(EngineEvent::ParentChanged {
            parent: record.parent.to_string(),
        });
        Ok(self.info_of(&record))
    }
}
