//! Starting defined instances: creating the device of a known record again (same UUID, type and
//! attributes), waiting for its parent within the operation's deadline.

use super::{
    lock, missing_vf, Engine, EngineError, EngineEvent, InstanceInfo, InstanceKind,
    OperationContext, PciAddress,
};
use crate::state::InstanceRecord;
use mdev_host::discovery::{layout, names};

impl Engine {
    /// Starts a defined (persistent, inactive) instance, with the default context.
    pub fn start(&self, uuid: &str) -> Result<InstanceInfo, EngineError> {
        self.start_with(&OperationContext::default(), uuid)
    }

    /// [`Engine::start`] with `ctx` (its wait for the parent ends by `ctx`'s deadline).
    pub fn start_with(
        &self,
        ctx: &OperationContext,
        uuid: &str,
    ) -> Result<InstanceInfo, EngineError> {
        let key = names::parse_uuid(uuid)?.to_string();
        let _held = self.instance_locks.hold(&key);
        let record = self.record(&key)?;
        let record = self.start_record(ctx, &record)?;
        Ok(self.info_of(&record))
    }

    /// Creates the device of a known record (same UUID, type, attributes) if it is not active.
    pub(crate) fn start_record(
        &self,
        ctx: &OperationContext,
        record: &InstanceRecord,
    ) -> Result<InstanceRecord, EngineError> {
        if self.is_active(record) {
            return Ok(record.clone());
        }
        self.start_inactive_record(ctx, record)
    }

    /// [`Engine::start_record`] of a record the caller has just found inactive (reconcile
    /// checks every record first), without reading the host again to check.
    pub(crate) fn start_inactive_record(
        &self,
        ctx: &OperationContext,
        record: &InstanceRecord,
    ) -> Result<InstanceRecord, EngineError> {
        let uuid = record.uuid;
        let parent_lock = self.parent_lock(&record.parent);
        let _serialized = lock(&parent_lock);
        let mut started = record.clone();
        match record.kind {
            InstanceKind::Mdev => {
                self.wait_for_path(
                    ctx,
                    &record.parent,
                    &layout::mdev_parent(&record.parent),
                    None,
                )?;
                self.check_capacity(&record.parent, &record.type_id)?;
                self.host.create_mdev(
                    &record.parent,
                    &record.type_id,
                    &uuid,
                    &record.attributes,
                )?;
            }
            InstanceKind::Vf => {
                let vf = record.vf.ok_or_else(|| missing_vf(record))?;
                self.wait_for_path(ctx, &vf.to_string(), &layout::pci_device(&vf), None)?;
                started.previous_driver = self.host.bind_vfio(vf)?;
            }
            InstanceKind::NvidiaVf => {
                let pf: PciAddress = record.parent.parse()?;
                let type_id: u32 =
                    record
                        .type_id
                        .parse()
                        .map_err(|_| EngineError::InvalidArgument {
                            what: "NVIDIA vGPU type id",
                            value: record.type_id.to_string(),
                            reason: "not a decimal number".into(),
                        })?;
                self.wait_for_path(ctx, &record.parent, &layout::pci_device(&pf), None)?;
                let vf = self.pick_nvidia_vf(pf, type_id, record.vf, Some(record.uuid))?;
                self.host.set_nvidia_vgpu(vf, type_id)?;
                started.vf = Some(vf);
            }
            InstanceKind::Passthrough => {
                let gpu = record.vf.ok_or_else(|| missing_vf(record))?;
                self.bind_passthrough(ctx, &mut started, gpu, record.force)?;
            }
        }
        // The state already says what is true when starting changed no field (an mdev always):
        // no save, which keeps reconcile after a reboot at no fsync per instance.
        if started != *record {
            self.update_state(|state| {
                state.insert_instance(started.clone());
            })?;
        }
        self.emit(EngineEvent::InstanceChanged {
            uuid: started.uuid.to_string(),
        });
        self.emit_capacity_change(&started);
        Ok(started)
    }
}
