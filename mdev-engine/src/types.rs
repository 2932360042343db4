//! The engine's request and report types: its configuration, what a create or a claim asks
//! for, and what an instance, a reconcile pass or an import reports. Plain data, no I/O.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{nvidia_sriov, nvidia_telemetry, Claim, InstanceKind, Owner, PciAddress, Scheduling};
use mdev_host::discovery::layout;

/// Engine settings. [`EngineConfig::default`] gives the product's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Host path of the state directory (`/var/lib/mdev-manager`).
    pub state_dir: PathBuf,
    /// Host path of the profile directory (`/etc/mdev-manager/profiles.d`).
    pub profiles_dir: PathBuf,
    /// Host path of mdevctl's definitions (`/etc/mdevctl.d`).
    pub mdevctl_dir: PathBuf,
    /// How long an operation waits for a named parent that is not there yet (driver loading).
    pub readiness_timeout: Duration,
    /// How often readiness is re-checked while waiting.
    pub poll_interval: Duration,
    /// How long a sysfs write that can block in the kernel (mdev `remove`, `sriov_numvfs`,
    /// `unbind`) may take before the call gives up with `TimedOut`.
    pub write_timeout: Duration,
    /// Perform sysfs writes on the calling thread with no deadline (`write_timeout` is then
    /// unused). For simulated hosts whose writes cannot block, where handing each write to a
    /// worker thread only adds two thread wake-ups (the model fuzzer); the daemon never sets it.
    pub inline_host_writes: bool,
    /// Host path of the NVIDIA scheduler options file the service owns
    /// (`/etc/modprobe.d/mdev-manager-nvidia.conf`; a simulated host keeps it elsewhere).
    pub nvidia_modprobe_path: PathBuf,
    /// How profiles are placed when a request says nothing (`pack`, no NUMA preference).
    pub placement: PlacementRequest,
    /// NVIDIA GPUs (PCI addresses) whose vGPU heterogeneous ("mixed-size") mode is on, so
    /// time-sliced vGPUs of different sizes may share them. Neither sysfs nor our fixtures show
    /// the mode, so the administrator states it (`nvidia-smi vgpu -shm 1` turns it on);
    /// placement otherwise keeps one size per GPU, as the driver does by default.
    pub nvidia_mixed_mode_parents: Vec<String>,
    /// Host path of NVIDIA's `sriov-manage`, the only way VFs of an NVIDIA GPU change
    /// (`/usr/lib/nvidia/sriov-manage`).
    pub nvidia_sriov_manage: PathBuf,
    /// How long a vendor tool (`sriov-manage`, `nvidia-smi`) may run before it is killed with
    /// `TimedOut`.
    pub vendor_command_timeout: Duration,
    /// Host path of `nvidia-smi`, read for vGPU telemetry (`/usr/bin/nvidia-smi`;
    /// `engine::nvidia_telemetry`).
    pub nvidia_smi: PathBuf,
    /// Keep durable changes in the append-only state journal (`state.journal`, one line per
    /// group of changes, folded into `state.json` now and then) instead of rewriting the whole
    /// `state.json` for every change. Off by default for the engine (whole-file mode, which
    /// benches compare against); the daemon turns it on unless its config says
    /// `state_journal = false`.
    pub state_journal: bool,
}

pub use vgpu_profiles::placement::Policy as PlacementPolicy;

/// How a profile is placed over the parents that can take it (see `vgpu_profiles::placement`).
/// Every field left unset falls back to [`EngineConfig::placement`]. A pinned parent
/// (`CreateTarget::Profile { parent: Some(..) }`) overrides all of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementRequest {
    /// `pack` fills the busiest parent first (keeps whole GPUs free); `spread` takes the idlest.
    #[serde(default)]
    pub policy: Option<PlacementPolicy>,
    /// Prefer parents on this NUMA node (the node of the guest's memory or CPUs).
    #[serde(default)]
    pub numa_node: Option<u32>,
    /// Accept only parents on `numa_node` (otherwise they are only preferred).
    #[serde(default)]
    pub numa_strict: bool,
}

impl PlacementRequest {
    /// This request with its unset fields taken from `default` (the NUMA node and its
    /// strictness go together).
    pub fn or(self, default: PlacementRequest) -> PlacementRequest {
        let (numa_node, numa_strict) = match self.numa_node {
            Some(node) => (Some(node), self.numa_strict),
            None => (default.numa_node, default.numa_strict),
        };
        PlacementRequest {
            policy: self.policy.or(default.policy),
            numa_node,
            numa_strict,
        }
    }

    /// The options `vgpu_profiles::placement::place` takes.
    pub(crate) fn options(
        self,
        parent: Option<&str>,
    ) -> vgpu_profiles::placement::PlacementOptions {
        vgpu_profiles::placement::PlacementOptions {
            policy: self.policy.unwrap_or_default(),
            numa: self
                .numa_node
                .map(|node| vgpu_profiles::placement::NumaPreference {
                    node,
                    strict: self.numa_strict,
                }),
            parent: parent.map(str::to_owned),
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            state_dir: PathBuf::from(layout::STATE_DIR),
            profiles_dir: PathBuf::from(layout::CONFIG_DIR).join("profiles.d"),
            mdevctl_dir: PathBuf::from(layout::MDEVCTL_CONFIG),
            readiness_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_millis(100),
            write_timeout: Duration::from_secs(10),
            inline_host_writes: false,
            nvidia_modprobe_path: PathBuf::from(crate::schedule::NVIDIA_MODPROBE_PATH),
            placement: PlacementRequest::default(),
            nvidia_mixed_mode_parents: Vec::new(),
            nvidia_sriov_manage: PathBuf::from(nvidia_sriov::SRIOV_MANAGE_PATH),
            vendor_command_timeout: Duration::from_secs(120),
            nvidia_smi: PathBuf::from(nvidia_telemetry::NVIDIA_SMI_PATH),
            state_journal: false,
        }
    }
}

/// What to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CreateTarget {
    /// An mdev of an explicit type on an explicit parent.
    Mdev {
        /// Parent sysfs name (`0000:41:00.0`, `mtty`).
        parent: String,
        /// mdev type id (`nvidia-256`).
        type_id: String,
    },
    /// Whatever the named profile resolves to, placed by `vgpu-profiles` (optionally pinned to
    /// a parent).
    Profile {
        /// Profile name.
        profile: String,
        /// Parent to use instead of automatic placement.
        parent: Option<String>,
    },
    /// A free VF of a PF bound to `vfio-pci` (enable VFs first with [`Engine::set_num_vfs`]).
    Vf {
        /// The PF's address.
        pf: String,
        /// A specific VF address; any free VF when absent.
        vf: Option<String>,
    },
    /// An NVIDIA SR-IOV vGPU: a free VF of `pf` whose `creatable_vgpu_types` lists `type_id`.
    NvidiaVf {
        /// The PF's address.
        pf: String,
        /// The numeric vGPU type id.
        type_id: u32,
        /// This VF only (the caller named it); any free VF that lists the type when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vf: Option<String>,
    },
    /// A whole GPU and the rest of its IOMMU group bound to `vfio-pci` (see [`passthrough`]).
    Passthrough {
        /// The GPU's address.
        gpu: String,
        /// Take group members the host uses, or that are not functions of the GPU.
        force: bool,
    },
}

/// A create request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateRequest {
    /// What to create.
    pub target: CreateTarget,
    /// The UUID to use (any case; normalized to lower case); generated when absent.
    pub uuid: Option<String>,
    /// Keep the definition when the device goes away.
    pub persistent: bool,
    /// Recreate on start and after a reboot (implies `persistent`).
    pub autostart: bool,
    /// Vendor attributes written in this order after creation (`nvidia/vgpu_params`, ...).
    pub attributes: Vec<(String, String)>,
    /// Scheduling fields to record.
    pub scheduling: Scheduling,
    /// How a `Profile` target is placed (unset fields: [`EngineConfig::placement`]).
    #[serde(default)]
    pub placement: PlacementRequest,
    /// A pass-through (a `Passthrough` target, or a profile that resolves to one) takes its
    /// GPU's IOMMU group even when a member serves the host or is not a function of the GPU.
    /// Ignored by the other kinds.
    #[serde(default)]
    pub force: bool,
}

impl CreateRequest {
    /// A transient request for `target` with a generated UUID and no attributes.
    pub fn new(target: CreateTarget) -> Self {
        Self {
            target,
            uuid: None,
            persistent: false,
            autostart: false,
            attributes: Vec::new(),
            scheduling: Scheduling::default(),
            placement: PlacementRequest::default(),
            force: false,
        }
    }
}

/// Options of [`Engine::destroy`] and [`Engine::stop`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DestroyOptions {
    /// Remove even if the manager did not create it, or a domain claims it. Processes holding
    /// the device open still refuse it (`InUse`): the kernel would block.
    pub force: bool,
}

/// One instance as the engine sees it: its record (if the manager knows it) joined with what
/// the host shows.
///
/// Not a second record: the one record of an instance is [`crate::state::InstanceRecord`].
/// This view exists because callers need what the record cannot hold (whether the device
/// exists now, its IOMMU group and sysfs path) and instances the manager does not manage,
/// which have no record (`owner: None`). Its names are plain strings, as the record's typed
/// ones print.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceInfo {
    /// UUID (lower case).
    pub uuid: String,
    /// Device kind.
    pub kind: InstanceKind,
    /// mdev parent name or PF address.
    pub parent: String,
    /// mdev type id / NVIDIA type id / `vfio-pci`.
    pub type_id: String,
    /// Profile it came from.
    pub profile: Option<String>,
    /// Ownership; `None` for an instance found on the host that the manager does not manage.
    pub owner: Option<Owner>,
    /// Whether the device exists on the host now.
    pub active: bool,
    /// Kept as a definition when stopped.
    pub persistent: bool,
    /// Recreated on start.
    pub autostart: bool,
    /// Holder domain.
    pub claim: Option<Claim>,
    /// Scheduling fields.
    pub scheduling: Scheduling,
    /// VF address for VF kinds.
    pub vf: Option<PciAddress>,
    /// IOMMU group when active.
    pub iommu_group: Option<u32>,
    /// Host sysfs path of the device (`/sys/bus/mdev/devices/<uuid>`, `/sys/bus/pci/devices/<vf>`).
    pub sysfs_path: PathBuf,
}

/// The domain a claim is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainRef {
    /// libvirt domain name.
    pub name: String,
    /// libvirt domain UUID (validated; any case).
    pub uuid: String,
}

/// What a domain asks for (one `aa{sv}` entry of `PrepareDomain`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRequest {
    /// `mdev`, `vf` or `passthrough`.
    pub kind: String,
    /// UUID of a known persistent instance, or the UUID to create with.
    pub uuid: Option<String>,
    /// Profile to create from when no known instance has `uuid`.
    pub profile: Option<String>,
    /// Parent to pin placement to.
    pub parent: Option<String>,
    /// Weight to record.
    pub weight: Option<u32>,
    /// VF / passthrough PCI address.
    pub pci_address: Option<String>,
    /// A pass-through takes its GPU's IOMMU group even when a member serves the host or is
    /// not a function of the GPU (see [`CreateRequest::force`]).
    #[serde(default)]
    pub force: bool,
    /// How a device created from `profile` is placed (unset fields: the config's).
    #[serde(default)]
    pub placement: PlacementRequest,
}

/// What a release did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReleaseReport {
    /// Transient instances destroyed.
    pub destroyed: Vec<String>,
    /// Persistent instances whose claim was dropped (kept or stopped per their policy).
    pub unclaimed: Vec<String>,
    /// Things that could not be done (release never fails; these are logged and reported).
    pub problems: Vec<String>,
}

/// One action of a reconcile pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReconcileAction {
    /// An autostart instance was missing and has been recreated.
    Recreated {
        /// Its UUID.
        uuid: String,
    },
    /// An autostart instance was missing and could not be recreated.
    RecreateFailed {
        /// Its UUID.
        uuid: String,
        /// Why.
        error: String,
    },
    /// A PF's VF count was restored.
    VfsRestored {
        /// PF address.
        pf: String,
        /// The count written.
        num_vfs: u32,
    },
    /// Restoring a PF's VF count failed.
    VfsRestoreFailed {
        /// PF address.
        pf: String,
        /// Why.
        error: String,
    },
    /// A non-autostart instance the manager knew is gone (transient ones are forgotten,
    /// persistent ones kept as stopped definitions).
    Vanished {
        /// Its UUID.
        uuid: String,
        /// Whether the record was dropped.
        forgotten: bool,
    },
    /// An instance on the host the manager does not manage (left untouched).
    Unknown {
        /// Its UUID (mdev) or VF address.
        id: String,
        /// Its parent.
        parent: String,
    },
    /// A pending release left by the hook was finished and its file deleted.
    PendingReleaseDone {
        /// Domain UUID.
        domain_uuid: String,
        /// What the release did.
        report: ReleaseReport,
    },
    /// A pending release file could not be processed.
    PendingReleaseFailed {
        /// The file name.
        file: String,
        /// Why.
        error: String,
    },
    /// A write-ahead intent was found (a crash, or a timed-out write that completed later)
    /// and what it made was removed: the call never acknowledged it (see `intents`).
    IntentUndone {
        /// The instance UUID, or the PF address of a VF count.
        id: String,
        /// What was undone.
        what: String,
    },
    /// Undoing a write-ahead intent failed; it is kept and the next pass tries again.
    IntentUndoFailed {
        /// The instance UUID, or the PF address of a VF count.
        id: String,
        /// Why.
        error: String,
    },
}

/// Every action of a reconcile pass, in the order taken.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReconcileReport {
    /// The actions.
    pub actions: Vec<ReconcileAction>,
}

/// What an mdevctl import did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImportReport {
    /// UUIDs imported as adopted persistent definitions.
    pub imported: Vec<String>,
    /// UUIDs already known (left as they were).
    pub skipped: Vec<String>,
    /// Files that could not be imported, with why.
    pub problems: Vec<String>,
}

/// A short view of one profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileSummary {
    /// Profile name.
    pub name: String,
    /// Human description, if any.
    pub description: Option<String>,
}

/// Whether one profile fits the host now (see [`Engine::profile_fit`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileFit {
    /// Profile name.
    pub name: String,
    /// Whether a create of it would be placed now.
    pub fits: bool,
    /// Where it would go (`mdev type nvidia-231 on 0000:3b:00.0`), or why it cannot go
    /// anywhere (every parent's reason, then the GPUs that host no vGPU and why).
    pub detail: String,
}
