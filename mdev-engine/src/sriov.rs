//! SR-IOV: a PF's VF count (and what a forced change does to the instances on its VFs), and
//! picking a free VF for a VF or NVIDIA vGPU instance.

use std::collections::HashSet;

use super::{
    lock, nvidia_sriov, DestroyOptions, Engine, EngineError, EngineEvent, OperationContext,
    PciAddress, VirtualFunction,
};
use crate::intents;
use crate::lifecycle;
use mdev_host::discovery::{self, layout};
use mdev_host::HostFs;

/// Why a function is no SR-IOV PF, with its GPU reasons when it is a GPU.
fn not_sriov_reason(host: &dyn HostFs, address: PciAddress) -> String {
    let base = "it has no sriov_totalvfs (not SR-IOV capable)";
    match discovery::gpus::read_other_gpu(host, address) {
        Some(gpu) => format!("{base}; {}", gpu.reason()),
        None => base.to_owned(),
    }
}

impl Engine {
    /// Sets a PF's VF count (autoprobe off first, `0` first when changing a non-zero count).
    /// Refuses when any VF is held by a process or carries an instance (unless forced; a held
    /// VF is refused even then). Returns the VF addresses now enabled. Runs with the default
    /// context (see [`Engine::set_num_vfs_with`]).
    pub fn set_num_vfs(
        &self,
        pf: &str,
        num_vfs: u32,
        options: DestroyOptions,
    ) -> Result<Vec<PciAddress>, EngineError> {
        self.set_num_vfs_with(&OperationContext::default(), pf, num_vfs, options)
    }

    /// [`Engine::set_num_vfs`] with `ctx`: on an NVIDIA GPU, a cancel stops it before each
    /// `sriov-manage` run and ends a run in progress.
    pub fn set_num_vfs_with(
        &self,
        ctx: &OperationContext,
        pf: &str,
        num_vfs: u32,
        options: DestroyOptions,
    ) -> Result<Vec<PciAddress>, EngineError> {
        let address: PciAddress = pf.parse()?;
        let key = address.to_string();
        let parent_lock = self.parent_lock(&key);
        let _serialized = lock(&parent_lock);
        let current = discovery::read_sriov_pf(self.fs(), address).map(|p| p.num_vfs);
        let changed = self.set_num_vfs_locked(ctx, address, num_vfs, options, true);
        let enabled = self.settle_intent(&key, changed)?;
        // A forced change can take VFs that carried instances: transient ones are gone for
        // good; persistent ones stay defined (and unclaimed) for a later start. A change from
        // a non-zero count goes through 0, so the kernel made even the VFs that are enabled
        // again anew, unbound: then every record on the PF's VFs is lost.
        let recreated = current.is_some_and(|from| from > 0 && from != num_vfs);
        let lost: Vec<(crate::state::Uuid, bool)> = lock(&self.state)
            .instances
            .values()
            .filter(|r| r.parent == key && r.vf.is_some())
            .filter(|r| recreated || r.vf.is_some_and(|vf| !enabled.contains(&vf)))
            .map(|r| (r.uuid, r.persistent))
            .collect();
        let (forgotten, stopped) = self.update_state(|state| {
            state.parents.entry(address.into()).or_default().num_vfs =
                (num_vfs > 0).then_some(num_vfs);
            Self::intent_done(state, &key);
            let mut forgotten = Vec::new();
            let mut stopped = Vec::new();
            for (uuid, persistent) in lost {
                if persistent {
                    if let Some(record) = state.instance_mut(&uuid) {
                        record.claim = None;
                    }
                    stopped.push(uuid);
                } else {
                    state.remove_instance(&uuid);
                    forgotten.push(uuid);
                }
            }
            (forgotten, stopped)
        })?;
        for uuid in forgotten {
            self.emit(EngineEvent::InstanceRemoved {
                uuid: uuid.to_string(),
            });
        }
        for uuid in stopped {
            self.emit(EngineEvent::InstanceChanged {
                uuid: uuid.to_string(),
            });
        }
        self.emit(EngineEvent::ParentChanged {
            parent: address.to_string(),
        });
        Ok(enabled)
    }

    /// [`Engine::set_num_vfs_with`] under the PF's lock, without recording the count; with
    /// `write_ahead`, the change's intent is saved before the first write (a call's change,
    /// not reconcile's own restore or an undo).
    pub(crate) fn set_num_vfs_locked(
        &self,
        ctx: &OperationContext,
        address: PciAddress,
        num_vfs: u32,
        options: DestroyOptions,
        write_ahead: bool,
    ) -> Result<Vec<PciAddress>, EngineError> {
        if !self.fs().exists(&layout::pci_device(&address)) {
            return Err(EngineError::UnknownParent {
                parent: address.to_string(),
            });
        }
        let pf = discovery::read_sriov_pf(self.fs(), address).ok_or_else(|| {
            EngineError::NotSupported {
                what: format!("setting the VF count of {address}"),
                reason: not_sriov_reason(self.fs(), address),
            }
        })?;
        super::sriov_rules::refuse_vf_count_over(address, pf.total_vfs, num_vfs)?;
        if pf.num_vfs == num_vfs {
            return Ok(pf.vfs.iter().map(|vf| vf.function.address).collect());
        }
        if pf.num_vfs > 0 && !options.force {
            let vfs: Vec<PciAddress> = pf.vfs.iter().map(|vf| vf.function.address).collect();
            if let Some(record) = lock(&self.state)
                .instances
                .values()
                .find(|r| r.vf.is_some_and(|vf| vfs.contains(&vf)))
            {
                return Err(EngineError::VfCarriesInstance {
                    pf: address.to_string(),
                    vf: record.vf.map(|vf| vf.to_string()).unwrap_or_default(),
                    uuid: record.uuid.to_string(),
                });
            }
        }
        if write_ahead {
            let intent = intents::Intent::VfCount {
                from: pf.num_vfs,
                to: num_vfs,
            };
            self.write_ahead(&address.to_string(), intent)?;
        }
        if nvidia_sriov::is_nvidia_pf(&pf) {
            self.set_nvidia_vfs(ctx, &pf, num_vfs)?;
        } else {
            self.host.set_num_vfs(address, pf.num_vfs, num_vfs)?;
        }
        Ok(self.host.vfs_of(address))
    }

    /// A VF of `pf` that no instance uses and no driver other than its own holds for a guest.
    pub(super) fn pick_free_vf(
        &self,
        pf: PciAddress,
        wanted: Option<PciAddress>,
    ) -> Result<PciAddress, EngineError> {
        let sriov =
            discovery::read_sriov_pf(self.fs(), pf).ok_or_else(|| EngineError::NotSupported {
                what: format!("assigning a VF of {pf}"),
                reason: not_sriov_reason(self.fs(), pf),
            })?;
        let taken: HashSet<PciAddress> = lock(&self.state)
            .instances
            .values()
            .filter_map(|r| r.vf)
            .collect();
        let is_free = |vf: &VirtualFunction| {
            !taken.contains(&vf.function.address)
                && vf.function.driver.as_deref() != Some(lifecycle::VFIO_PCI)
                && vf.nvidia.as_ref().is_none_or(|nv| nv.current_type == 0)
        };
        if let Some(wanted) = wanted {
            let vf = sriov
                .vfs
                .iter()
                .find(|vf| vf.function.address == wanted)
                .ok_or_else(|| EngineError::InvalidArgument {
                    what: "VF",
                    value: wanted.to_string(),
                    reason: format!("not an enabled VF of {pf}"),
                })?;
            if !is_free(vf) {
                return Err(EngineError::VfCarriesInstance {
                    pf: pf.to_string(),
                    vf: wanted.to_string(),
                    uuid: lock(&self.state)
                        .instances
                        .values()
                        .find(|r| r.vf == Some(wanted))
                        .map_or_else(
                            || "(bound to vfio-pci outside mdev-manager)".to_owned(),
                            |r| r.uuid.to_string(),
                        ),
                });
            }
            return Ok(wanted);
        }
        // Chosen automatically, only a VF no host driver uses: one bound to a host driver
        // (a NIC VF carrying host traffic, say) is taken only when the caller names it.
        sriov
            .vfs
            .iter()
            .find(|vf| is_free(vf) && vf.function.driver.is_none())
            .map(|vf| vf.function.address)
            .ok_or_else(|| EngineError::NoCapacity {
                what: format!("a VF of {pf}"),
                detail: format!(
                    "{} of {} VFs enabled, none free (unused and without a host driver)",
                    sriov.num_vfs, sriov.total_vfs
                ),
            })
    }

    /// Picks a free VF of `pf` that can host NVIDIA type `type_id` (preferring `preferred`).
    /// `starting` is the UUID of a record being started again: the VF it records is its own,
    /// not taken, so it comes back on the same VF (the one its VM's XML names).
    pub(super) fn pick_nvidia_vf(
        &self,
        pf: PciAddress,
        type_id: u32,
        preferred: Option<PciAddress>,
        starting: Option<crate::state::Uuid>,
    ) -> Result<PciAddress, EngineError> {
        let sriov =
            discovery::read_sriov_pf(self.fs(), pf).ok_or_else(|| EngineError::NotSupported {
                what: format!("NVIDIA vGPU on {pf}"),
                reason: not_sriov_reason(self.fs(), pf),
            })?;
        let taken: HashSet<PciAddress> = lock(&self.state)
            .instances
            .values()
            .filter(|r| Some(r.uuid) != starting)
            .filter_map(|r| r.vf)
            .collect();
        let mut listed = false;
        let mut candidates: Vec<PciAddress> = Vec::new();
        for vf in &sriov.vfs {
            let Some(nvidia) = &vf.nvidia else { continue };
            if !nvidia.creatable.iter().any(|t| t.id == type_id) {
                continue;
            }
            listed = true;
            if nvidia.current_type == 0 && !taken.contains(&vf.function.address) {
                candidates.push(vf.function.address);
            }
        }
        if let Some(preferred) = preferred.filter(|p| candidates.contains(p)) {
            return Ok(preferred);
        }
        if let Some(first) = candidates.first() {
            return Ok(*first);
        }
        if listed || sriov.vfs.iter().any(|vf| vf.nvidia.is_some()) {
            Err(EngineError::NoCapacity {
                what: format!("NVIDIA vGPU type {type_id} on {pf}"),
                detail: format!("no free VF of {pf} lists type {type_id} in creatable_vgpu_types"),
            })
        } else {
            Err(EngineError::NotSupported {
                what: format!("NVIDIA vGPU on {pf}"),
                reason: "its VFs have no nvidia/current_vgpu_type (VFs not enabled, or not an NVIDIA SR-IOV vGPU)".into(),
            })
        }
    }
}
