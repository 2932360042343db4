//! Whole-GPU pass-through: a GPU and every other function of its IOMMU group handed to
//! `vfio-pci` as one instance (kind [`InstanceKind::Passthrough`]), and given back to the
//! drivers they had.
//!
//! VFIO hands out whole IOMMU groups: a guest can open the GPU's group only when every
//! non-bridge member is bound to `vfio-pci` (or to no driver). So the unit of a pass-through is
//! the group, and the state records each member's original driver in a [`GroupBinding`].
//!
//! Crash safety: the binding is written to the state *before* the first sysfs write (phase
//! [`BindPhase::Binding`]) and marked [`BindPhase::Bound`] after the last one; a release marks
//! it [`BindPhase::Releasing`] first. A binding found in any phase but `Bound` (or `Bound` with a
//! member no longer on `vfio-pci`) by [`Engine::reconcile`] is rolled back to the original
//! drivers, so a group is never left split between the host and `vfio-pci`; an autostart
//! pass-through is then bound again as a whole by the ordinary reconcile pass.
//!
//! The bind/unbind steps are the engine's VF machinery ([`crate::lifecycle::Host::bind_vfio`],
//! [`crate::lifecycle::Host::unbind_vfio`]: `driver_override`, unbind, `drivers_probe`).

use serde::{Deserialize, Serialize};

use super::{lock, Engine, EngineError, InstanceKind, OperationContext};
use crate::lifecycle::VFIO_PCI;
use crate::state::{InstanceRecord, TypeId, Uuid};
use mdev_host::discovery::{self, layout, names::PciAddress, PciFunction};

/// PCI class code (base class and subclass) of a PCI-to-PCI bridge. The kernel lets bridges
/// stay with their driver (`pcieport`) in a group handed to VFIO, so they are left alone.
pub const PCI_CLASS_BRIDGE_PCI: u32 = 0x0604;

/// Where a pass-through's group binding stands (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BindPhase {
    /// The intent is recorded; members may be partly bound.
    Binding,
    /// Every member is on `vfio-pci`.
    Bound,
    /// A release started; members may be partly returned.
    Releasing,
}

/// One group member taken to `vfio-pci`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundMember {
    /// Its address.
    pub address: PciAddress,
    /// Its 24-bit class code when it was taken.
    pub class: u32,
    /// The driver it had (`None`: no driver; `vfio-pci`: already there, left there on release).
    pub previous_driver: Option<String>,
}

/// The group binding of one pass-through instance, stored in the state under its UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupBinding {
    /// The GPU (the instance's device).
    pub gpu: PciAddress,
    /// The IOMMU group number when it was bound.
    pub iommu_group: u32,
    /// Where the binding stands.
    pub phase: BindPhase,
    /// The members taken, GPU included, in binding order.
    pub members: Vec<BoundMember>,
    /// Bridges in the group, left with their drivers.
    #[serde(default)]
    pub bridges: Vec<PciAddress>,
}

/// What a group member is to a pass-through of its GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemberRole {
    /// The GPU asked for.
    Gpu,
    /// Another function of the same card (HDMI audio, USB-C, UCSI): goes along.
    Function,
    /// A PCI-to-PCI bridge: left alone.
    Bridge,
    /// Anything else: the service does not expect it in a GPU's group.
    Unexpected,
}

/// One member of a GPU's IOMMU group as the service sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMember {
    /// Its address.
    pub address: PciAddress,
    /// 24-bit class code (0 when unreadable).
    pub class: u32,
    /// Bound driver, if any.
    pub driver: Option<String>,
    /// What it is to the pass-through.
    pub role: MemberRole,
    /// Why the host needs it, when it does (refused unless forced).
    pub host_use: Option<String>,
}

/// A GPU's IOMMU group, member by member ([`Engine::passthrough_group`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSurvey {
    /// The GPU.
    pub gpu: PciAddress,
    /// Its IOMMU group number.
    pub iommu_group: u32,
    /// Every member, sorted by address.
    pub members: Vec<GroupMember>,
}

/// Failures specific to pass-through.
#[derive(Debug, thiserror::Error)]
pub enum PassthroughError {
    /// The address names no PCI function.
    #[error("no PCI device {address} on this host")]
    NoDevice {
        /// The address asked for.
        address: PciAddress,
    },
    /// The GPU has no IOMMU group.
    #[error("GPU {gpu} has no IOMMU group (IOMMU off or not supported by the platform)")]
    NoIommuGroup {
        /// The GPU.
        gpu: PciAddress,
    },
    /// The GPU is shared (vGPU instances or VFs): a whole-GPU pass-through would take them away.
    #[error(
        "GPU {gpu} has {what}; pass-through takes only a GPU with no vGPU instances and no VFs"
    )]
    GpuShared {
        /// The GPU.
        gpu: PciAddress,
        /// What it carries.
        what: String,
    },
    /// Another pass-through instance already holds the GPU.
    #[error("GPU {gpu} is already passed through as instance {uuid}")]
    AlreadyPassedThrough {
        /// The GPU.
        gpu: PciAddress,
        /// The instance holding it.
        uuid: String,
    },
    /// A group member serves the host.
    #[error("IOMMU group {group} of GPU {gpu}: {member} is in use by the host ({reason}); force takes it anyway")]
    HostUsedMember {
        /// The GPU.
        gpu: PciAddress,
        /// The group number.
        group: u32,
        /// The member.
        member: PciAddress,
        /// Why the host needs it.
        reason: String,
    },
    /// A group member is not a function of the GPU's card.
    #[error("IOMMU group {group} of GPU {gpu}: {member} (class {class:06x}) is not a function of the GPU; force takes it anyway")]
    UnexpectedMember {
        /// The GPU.
        gpu: PciAddress,
        /// The group number.
        group: u32,
        /// The member.
        member: PciAddress,
        /// Its class code.
        class: u32,
    },
    /// No device on the host matches a pass-through profile.
    #[error("profile {profile}: no free device matches its [profile.device]{}", pinned.map(|p| format!(" at {p}")).unwrap_or_default())]
    NoMatchingDevice {
        /// The profile.
        profile: String,
        /// The device a parent pin named.
        pinned: Option<PciAddress>,
    },
    /// Binding a member failed; the members already bound were given back.
    #[error(
        "binding {member} (IOMMU group {group} of GPU {gpu}) to vfio-pci failed{}",
        super::rollback_note(rollback_failures)
    )]
    BindFailed {
        /// The GPU.
        gpu: PciAddress,
        /// The group number.
        group: u32,
        /// The member that failed.
        member: PciAddress,
        /// The failure.
        #[source]
        source: Box<EngineError>,
        /// Members that could not be given back.
        rollback_failures: Vec<String>,
    },
    /// Returning members failed; the binding stays `Releasing` and reconcile finishes it.
    #[error("returning IOMMU group {group} of GPU {gpu} to its drivers is incomplete: {}", failures.join("; "))]
    ReleaseIncomplete {
        /// The GPU.
        gpu: PciAddress,
        /// The group number.
        group: u32,
        /// One line per member that failed.
        failures: Vec<String>,
        /// The first failure.
        #[source]
        source: Box<EngineError>,
    },
}

impl PassthroughError {
    /// The error class.
    pub fn kind(&self) -> crate::ErrorKind {
        use crate::ErrorKind;
        match self {
            Self::NoDevice { .. } => ErrorKind::NotFound,
            Self::NoIommuGroup { .. } => ErrorKind::NotSupported,
            Self::GpuShared { .. }
            | Self::AlreadyPassedThrough { .. }
            | Self::HostUsedMember { .. }
            | Self::UnexpectedMember { .. } => ErrorKind::InUse,
            Self::NoMatchingDevice { .. } => ErrorKind::NoCapacity,
            Self::BindFailed { source, .. } | Self::ReleaseIncomplete { source, .. } => {
                source.kind()
            }
        }
    }
}

/// Why the host needs a member bound to `driver`, if it does. Decided by class: storage,
/// network and chipset functions serve the host whatever their driver; a display is the
/// host's console when the firmware booted on it (`boot_vga`).
fn host_use(function: &PciFunction, boot_vga: bool) -> Option<String> {
    let driver = function.driver.as_deref()?;
    if driver == VFIO_PCI {
        return None;
    }
    let class = function.class.unwrap_or(0);
    let what = match class >> 16 {
        0x01 => "a storage controller",
        0x02 => "a network controller",
        0x03 if boot_vga => "the host console's display (boot_vga)",
        0x06 if class >> 8 != PCI_CLASS_BRIDGE_PCI => "a chipset bridge",
        _ => return None,
    };
    Some(format!("{what} driven by {driver}"))
}

/// Whether a class code is one a GPU card carries besides the GPU: display, multimedia (HDMI
/// audio), serial bus (USB-C controller, UCSI).
fn is_card_function_class(class: u32) -> bool {
    matches!(class >> 16, 0x03 | 0x04 | 0x0c)
}

impl Engine {
    /// The GPU's IOMMU group, member by member, with what each one is to a pass-through.
    /// Changes nothing.
    pub fn passthrough_group(&self, gpu: &str) -> Result<GroupSurvey, EngineError> {
        let gpu: PciAddress = gpu.parse()?;
        self.survey_group(gpu)
    }

    /// The group binding of a pass-through instance, while it has one.
    pub fn passthrough_binding(&self, uuid: &str) -> Option<GroupBinding> {
        let uuid = Uuid::parse(uuid).ok()?;
        lock(&self.state).passthrough.get(&uuid).cloned()
    }

    fn survey_group(&self, gpu: PciAddress) -> Result<GroupSurvey, EngineError> {
        let fs = self.fs();
        let dir = layout::pci_device(&gpu);
        if !fs.exists(&dir) {
            return Err(PassthroughError::NoDevice { address: gpu }.into());
        }
        let group =
            discovery::iommu_group_of(fs, &dir).ok_or(PassthroughError::NoIommuGroup { gpu })?;
        let mut members = Vec::new();
        for name in discovery::list_sorted(fs, &layout::iommu_group_devices(group))? {
            // Non-PCI names cannot appear in a PCI device's group; skip rather than guess.
            let Ok(address) = name.parse::<PciAddress>() else {
                continue;
            };
            let function = discovery::read_pci_function(fs, address);
            let class = function.class.unwrap_or(0);
            let boot_vga =
                discovery::read_optional(fs, &layout::pci_device(&address).join("boot_vga"))
                    .is_some_and(|text| text.trim() == "1");
            let role = if address == gpu {
                MemberRole::Gpu
            } else if class >> 8 == PCI_CLASS_BRIDGE_PCI {
                MemberRole::Bridge
            } else if address.domain() == gpu.domain()
                && address.bus() == gpu.bus()
                && address.device() == gpu.device()
                && is_card_function_class(class)
            {
                MemberRole::Function
            } else {
                MemberRole::Unexpected
            };
            let host_use = if role == MemberRole::Bridge {
                None
            } else {
                host_use(&function, boot_vga)
            };
            members.push(GroupMember {
                address,
                class,
                driver: function.driver,
                role,
                host_use,
            });
        }
        members.sort_by_key(|m| m.address);
        Ok(GroupSurvey {
            gpu,
            iommu_group: group,
            members,
        })
    }

    /// Refuses a GPU that carries vGPU instances or VFs, or that another pass-through holds.
    /// `uuid` is the instance asking (its own record does not count), if it has one yet.
    fn check_gpu_unshared(&self, gpu: PciAddress, uuid: Option<Uuid>) -> Result<(), EngineError> {
        let gpu_name = gpu.to_string();
        {
            let state = lock(&self.state);
            if let Some(other) = state
                .instances
                .values()
                .find(|r| Some(r.uuid) != uuid && (r.parent == gpu_name || r.vf == Some(gpu)))
            {
                return Err(if other.kind == InstanceKind::Passthrough {
                    PassthroughError::AlreadyPassedThrough {
                        gpu,
                        uuid: other.uuid.to_string(),
                    }
                } else {
                    PassthroughError::GpuShared {
                        gpu,
                        what: format!("{} instance {}", other.kind, other.uuid),
                    }
                }
                .into());
            }
        }
        let inventory = self.inventory()?;
        let mdevs = inventory
            .mdevs
            .iter()
            .filter(|m| m.parent == gpu_name)
            .count();
        if mdevs > 0 {
            return Err(PassthroughError::GpuShared {
                gpu,
                what: format!("{mdevs} mdev instance(s)"),
            }
            .into());
        }
        if let Some(pf) = inventory
            .sriov_pfs
            .iter()
            .find(|pf| pf.function.address == gpu && pf.num_vfs > 0)
        {
            return Err(PassthroughError::GpuShared {
                gpu,
                what: format!("{} VFs enabled", pf.num_vfs),
            }
            .into());
        }
        Ok(())
    }

    /// Binds the GPU's whole IOMMU group to `vfio-pci` for `record` (caller holds the GPU's
    /// parent lock) and records it. On failure nothing is left bound and nothing recorded.
    pub(crate) fn bind_passthrough(
        &self,
        ctx: &OperationContext,
        record: &mut InstanceRecord,
        gpu: PciAddress,
        force: bool,
    ) -> Result<(), EngineError> {
        self.check_gpu_unshared(gpu, Some(record.uuid))?;
        let survey = self.survey_group(gpu)?;
        let group = survey.iommu_group;
        let mut members = Vec::new();
        let mut bridges = Vec::new();
        for member in &survey.members {
            if member.role == MemberRole::Bridge {
                bridges.push(member.address);
                continue;
            }
            if !force {
                if let Some(reason) = &member.host_use {
                    return Err(PassthroughError::HostUsedMember {
                        gpu,
                        group,
                        member: member.address,
                        reason: reason.clone(),
                    }
                    .into());
                }
                if member.role == MemberRole::Unexpected {
                    return Err(PassthroughError::UnexpectedMember {
                        gpu,
                        group,
                        member: member.address,
                        class: member.class,
                    }
                    .into());
                }
            }
            members.push(BoundMember {
                address: member.address,
                class: member.class,
                previous_driver: member.driver.clone(),
            });
        }
        // Functions of the card first, the GPU last: a GPU driver may reach into its audio
        // function, never the other way round.
        members.sort_by_key(|m| (m.address == gpu, m.address));
        record.kind = InstanceKind::Passthrough;
        record.parent = gpu.into();
        record.type_id = TypeId::vfio_pci();
        record.vf = Some(gpu);
        record.previous_driver = members
            .iter()
            .find(|m| m.address == gpu)
            .and_then(|m| m.previous_driver.clone());
        let mut binding = GroupBinding {
            gpu,
            iommu_group: group,
            phase: BindPhase::Binding,
            members,
            bridges,
        };
        // Intent first: a crash from here on is rolled back by reconcile.
        self.update_state(|state| {
            state.insert_instance(record.clone());
            state.passthrough.insert(record.uuid, binding.clone());
        })?;
        for (index, member) in binding.members.iter().enumerate() {
            if member.previous_driver.as_deref() == Some(VFIO_PCI) {
                continue;
            }
            let bound = ctx
                .check(|| format!("binding {} to vfio-pci", member.address))
                .and_then(|()| self.host.bind_vfio(member.address).map(drop));
            if let Err(error) = bound {
                let rollback_failures = self.return_members(&binding.members[..index]);
                self.forget_binding(record.uuid, rollback_failures.is_empty(), true);
                return Err(PassthroughError::BindFailed {
                    gpu,
                    group,
                    member: member.address,
                    source: Box::new(error),
                    rollback_failures,
                }
                .into());
            }
        }
        binding.phase = BindPhase::Bound;
        let saved = self.update_state(|state| {
            state.passthrough.insert(record.uuid, binding.clone());
        });
        if let Err(error) = saved {
            let rollback_failures = self.return_members(&binding.members);
            self.forget_binding(record.uuid, rollback_failures.is_empty(), true);
            return Err(EngineError::Batch {
                step: format!("recording pass-through {} of GPU {gpu}", record.uuid),
                source: Box::new(error),
                rollback_failures,
            });
        }
        Ok(())
    }

    /// Gives every member of a pass-through back to its original driver (caller holds the
    /// GPU's parent lock) and drops the binding. Refused while a process holds any member.
    pub(crate) fn release_passthrough(&self, record: &InstanceRecord) -> Result<(), EngineError> {
        let Some(mut binding) = lock(&self.state).passthrough.get(&record.uuid).cloned() else {
            // No binding: nothing was bound (or reconcile already gave the group back).
            return Ok(());
        };
        // Every holder check before the first write, so a refusal leaves the group whole.
        for member in &binding.members {
            if self.fs().exists(&layout::pci_device(&member.address)) {
                self.host.check_pci_not_held(member.address)?;
            }
        }
        binding.phase = BindPhase::Releasing;
        self.update_state(|state| {
            state.passthrough.insert(record.uuid, binding.clone());
        })?;
        let mut failures = Vec::new();
        let mut first = None;
        for member in binding.members.iter().rev() {
            if member.previous_driver.as_deref() == Some(VFIO_PCI) {
                continue;
            }
            if let Err(error) = self
                .host
                .unbind_vfio(member.address, member.previous_driver.as_deref())
            {
                failures.push(format!("{}: {error}", member.address));
                first.get_or_insert(error);
            }
        }
        if let Some(source) = first {
            return Err(PassthroughError::ReleaseIncomplete {
                gpu: binding.gpu,
                group: binding.iommu_group,
                failures,
                source: Box::new(source),
            }
            .into());
        }
        self.update_state(|state| {
            state.passthrough.remove(&record.uuid);
        })?;
        Ok(())
    }

    /// Whether the GPU and every non-bridge member of its group are on `vfio-pci`. Read from
    /// the host alone: callers may hold the state lock (a binding left incomplete by a crash
    /// is settled by [`Engine::reconcile`] before anything relies on this).
    pub(crate) fn passthrough_active(&self, record: &InstanceRecord) -> bool {
        let Some(gpu) = record.vf else {
            return false;
        };
        self.survey_group(gpu).is_ok_and(|survey| {
            survey.members.iter().all(|member| {
                member.role == MemberRole::Bridge || member.driver.as_deref() == Some(VFIO_PCI)
            })
        })
    }

    fn all_on_vfio(&self, binding: &GroupBinding) -> bool {
        binding.members.iter().all(|member| {
            discovery::link_target_name(
                self.fs(),
                &layout::pci_device(&member.address).join("driver"),
            )
            .as_deref()
                == Some(VFIO_PCI)
        })
    }

    /// Returns members to their original drivers; one line per member that failed.
    fn return_members(&self, members: &[BoundMember]) -> Vec<String> {
        let mut failures = Vec::new();
        for member in members.iter().rev() {
            if member.previous_driver.as_deref() == Some(VFIO_PCI) {
                continue;
            }
            if let Err(error) = self
                .host
                .unbind_vfio(member.address, member.previous_driver.as_deref())
            {
                failures.push(format!("returning {}: {error}", member.address));
            }
        }
        failures
    }

    /// Drops a binding (when its members are back) and, for a transient instance whose bind
    /// failed, the instance record too. A failed save is logged: reconcile retries from the
    /// state on disk, which still says `Binding`.
    fn forget_binding(&self, uuid: Uuid, members_returned: bool, drop_transient: bool) {
        let saved = self.update_state(|state| {
            if members_returned {
                state.passthrough.remove(&uuid);
            }
            if drop_transient && state.instance(&uuid).is_some_and(|r| !r.persistent) {
                state.remove_instance(&uuid);
            }
        });
        if let Err(error) = saved {
            tracing::warn!(%uuid, %error, "cannot record the end of a failed pass-through bind");
        }
    }

    /// Reconcile step (before instances are checked): every binding that is not complete, or
    /// whose group is no longer wholly on `vfio-pci`, or whose instance is gone, is returned to
    /// the original drivers. The ordinary pass then forgets or restarts the instance.
    pub(crate) fn reconcile_passthrough(&self) {
        let bindings: Vec<(Uuid, GroupBinding)> = lock(&self.state)
            .passthrough
            .iter()
            .map(|(uuid, binding)| (*uuid, binding.clone()))
            .collect();
        for (uuid, binding) in bindings {
            let known = lock(&self.state).has_instance(&uuid);
            if known && binding.phase == BindPhase::Bound && self.all_on_vfio(&binding) {
                continue;
            }
            let parent_lock = self.parent_lock(&binding.gpu.to_string());
            let _serialized = lock(&parent_lock);
            let failures = self.return_members(&binding.members);
            if failures.is_empty() {
                tracing::info!(
                    target: "reconcile",
                    %uuid,
                    gpu = %binding.gpu,
                    phase = ?binding.phase,
                    "pass-through group returned to its drivers"
                );
                self.forget_binding(uuid, true, false);
            } else {
                tracing::warn!(
                    target: "reconcile",
                    %uuid,
                    gpu = %binding.gpu,
                    failures = %failures.join("; "),
                    "cannot return pass-through group; kept for the next pass"
                );
            }
        }
    }

    /// The UUID of the pass-through instance of the device at `address`, if there is one.
    pub(crate) fn passthrough_instance_at(&self, address: &str) -> Option<String> {
        let address: PciAddress = address.parse().ok()?;
        lock(&self.state)
            .instances
            .values()
            .find(|r| r.kind == InstanceKind::Passthrough && r.vf == Some(address))
            .map(|r| r.uuid.to_string())
    }

    /// Resolves a `passthrough` profile to a free matching device: display class unless the
    /// profile names an address; no vGPU instances, no VFs, not passed through already.
    /// `Ok(None)` when the profile is not a pass-through one.
    pub(crate) fn resolve_passthrough_profile(
        &self,
        profile: &vgpu_profiles::Profile,
        parent: Option<&str>,
    ) -> Result<Option<super::CreateTarget>, EngineError> {
        if profile.isolation != Some(vgpu_profiles::vendor::Isolation::Passthrough) {
            return Ok(None);
        }
        let pinned: Option<PciAddress> = parent.map(str::parse).transpose()?;
        let fs = self.fs();
        let mut candidates = Vec::new();
        for name in discovery::list_sorted(fs, std::path::Path::new(layout::PCI_DEVICES))? {
            let Ok(address) = name.parse::<PciAddress>() else {
                continue;
            };
            if pinned.is_some_and(|p| p != address) {
                continue;
            }
            let function = discovery::read_pci_function(fs, address);
            let (Some(vendor), Some(device), Some(class)) =
                (function.vendor_id, function.device_id, function.class)
            else {
                continue;
            };
            if profile.device.pci_address.is_none() && class >> 16 != 0x03 {
                continue;
            }
            if profile
                .device
                .matches(vendor, device, class, &address.to_string())
            {
                candidates.push(address);
            }
        }
        for gpu in candidates {
            if self.check_gpu_unshared(gpu, None).is_ok() {
                return Ok(Some(super::CreateTarget::Passthrough {
                    gpu: gpu.to_string(),
                    force: false,
                }));
            }
        }
        Err(PassthroughError::NoMatchingDevice {
            profile: profile.name.to_string(),
            pinned,
        }
        .into())
    }
}
