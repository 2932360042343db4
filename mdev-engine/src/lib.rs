//! mdev-engine: the one public surface the daemon calls (see `docs/engine-api.md`).
//!
//! It is synchronous and `Send + Sync`: the daemon calls it from `spawn_blocking`. Operations on
//! one parent are serialized by a per-parent lock; different parents proceed in parallel.
//! Every change to what the manager owns is written to the state store before the call returns.

#![deny(missing_docs)]

pub mod apply;
mod cancel;
mod claims;
mod group_commit;
pub mod intents;
pub use group_commit::CommitStats;
mod instance_locks;
pub mod nvidia_sriov;
pub mod nvidia_telemetry;
pub mod passthrough;
mod profiles;

pub mod domain_index;
pub mod hotplug;
pub mod import;
pub mod lifecycle;
pub mod mdevctl_mirror;
pub mod reconcile;
pub mod schedule;
pub mod state;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use self::cancel::CancelToken;
pub use crate::reconcile::Reconciled;
pub use crate::state::{Claim, DiskFiles, InstanceKind, Owner, Scheduling, StateFiles};
pub use mdev_host::discovery::names::{NameError, PciAddress};
pub use mdev_host::discovery::{
    Inventory, MdevDevice, MdevParent, MdevType, NvidiaVfState, SriovPf, VirtualFunction,
};
pub use mdev_host::error::ErrorKind;
pub use mdev_host::events::{HostEvent, HostEventAction, HostEvents};
pub use mdev_host::holders::Holder;

use crate::lifecycle::{BoundedWriter, Host};
use crate::state::{InstanceRecord, StateFile};
use mdev_host::discovery::{self, layout, names};
use mdev_host::HostFs;

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
            nvidia_modprobe_path: PathBuf::from(crate::schedule::NVIDIA_MODPROBE_PATH),
            placement: PlacementRequest::default(),
            nvidia_mixed_mode_parents: Vec::new(),
            nvidia_sriov_manage: PathBuf::from(nvidia_sriov::SRIOV_MANAGE_PATH),
            vendor_command_timeout: Duration::from_secs(120),
            nvidia_smi: PathBuf::from(nvidia_telemetry::NVIDIA_SMI_PATH),
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
    /// and what it made was removed: the call never acknowledged it (see `engine::intents`).
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

/// What changed, for subscribers (the daemon turns these into D-Bus signals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EngineEvent {
    /// An instance appeared (created by us or seen on the host).
    InstanceAdded {
        /// UUID.
        uuid: String,
    },
    /// An instance went away (or a definition was forgotten).
    InstanceRemoved {
        /// UUID.
        uuid: String,
    },
    /// An instance's record or state changed (claim, weight, persistence, active).
    InstanceChanged {
        /// UUID.
        uuid: String,
    },
    /// A parent (mdev parent or PF) appeared.
    ParentAdded {
        /// Parent name.
        parent: String,
    },
    /// A parent went away.
    ParentRemoved {
        /// Parent name.
        parent: String,
    },
    /// A parent changed (available instances, VF count, schedule).
    ParentChanged {
        /// Parent name.
        parent: String,
    },
}

/// A subscription to [`EngineEvent`]s. Dropping it unsubscribes.
#[derive(Debug)]
pub struct EventSubscription {
    receiver: mpsc::Receiver<EngineEvent>,
}

impl EventSubscription {
    /// Waits for the next event; `None` when the engine is gone.
    pub fn recv(&self) -> Option<EngineEvent> {
        self.receiver.recv().ok()
    }

    /// Waits at most `timeout`; `None` on timeout or when the engine is gone.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<EngineEvent> {
        self.receiver.recv_timeout(timeout).ok()
    }

    /// The next event if one is queued.
    pub fn try_recv(&self) -> Option<EngineEvent> {
        self.receiver.try_recv().ok()
    }
}

/// Every engine failure. `kind()` classifies it for the D-Bus error name.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Bad input (UUID, PCI address, path-like name, newline in a value).
    #[error(transparent)]
    Name(#[from] NameError),
    /// A request field is out of range or inconsistent.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidArgument {
        /// The field.
        what: &'static str,
        /// The refused value.
        value: String,
        /// Why.
        reason: String,
    },
    /// No such mdev parent / PF / VF.
    #[error("no parent device {parent} on this host")]
    UnknownParent {
        /// The name asked for.
        parent: String,
    },
    /// The parent has no such mdev type (or the VF cannot create that NVIDIA type).
    #[error("parent {parent} has no type {type_id}")]
    UnknownType {
        /// Parent.
        parent: String,
        /// Type asked for.
        type_id: String,
    },
    /// No such instance.
    #[error("no instance {uuid}")]
    UnknownInstance {
        /// UUID asked for.
        uuid: String,
    },
    /// No such profile.
    #[error("no profile named {profile:?}")]
    UnknownProfile {
        /// Name asked for.
        profile: String,
    },
    /// The UUID is taken (by a known instance, or an mdev on the host).
    #[error("instance {uuid} already exists")]
    AlreadyExists {
        /// The UUID.
        uuid: String,
    },
    /// No room.
    #[error("no capacity for {what}: {detail}")]
    NoCapacity {
        /// What was asked for (type on parent, profile, VF of PF).
        what: String,
        /// Why (available instances, no free VF, ...).
        detail: String,
    },
    /// Processes hold the device.
    #[error("{what} is in use: {}", mdev_host::holders::describe(holders))]
    InUse {
        /// The device (`mdev <uuid>`, `VF <bdf>`).
        what: String,
        /// Who holds it.
        holders: Vec<Holder>,
    },
    /// A domain holds the instance.
    #[error("instance {uuid} is claimed by domain {domain_name} ({domain_uuid})")]
    Claimed {
        /// The instance.
        uuid: String,
        /// Holder domain name.
        domain_name: String,
        /// Holder domain UUID.
        domain_uuid: String,
    },
    /// A VF carries an instance (or is bound to vfio-pci outside the manager).
    #[error("VF {vf} of {pf} is in use by instance {uuid}")]
    VfCarriesInstance {
        /// The PF.
        pf: String,
        /// The VF.
        vf: String,
        /// The instance on it.
        uuid: String,
    },
    /// The manager did not create this instance; adopt it or force.
    #[error("instance {uuid} was not created by mdev-manager; adopt it or force the operation")]
    NotOwned {
        /// The instance.
        uuid: String,
    },
    /// The host cannot do this.
    #[error("{what} is not supported: {reason}")]
    NotSupported {
        /// The operation and its object.
        what: String,
        /// Why.
        reason: String,
    },
    /// A parent did not appear in time.
    #[error("parent {parent} did not appear within {waited:?} (waited for {path})")]
    ParentNotReady {
        /// The parent waited for.
        parent: String,
        /// The path that was polled.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
    /// A sysfs write did not return in time; the write keeps running on an accounted worker.
    #[error("writing {path} did not finish within {timeout:?}")]
    WriteTimedOut {
        /// The host path.
        path: PathBuf,
        /// The bound.
        timeout: Duration,
    },
    /// Too many sysfs writes are stuck in the kernel; no new blocking write is started.
    #[error(
        "{stuck} sysfs writes are still blocked in the kernel; refusing to start another ({path})"
    )]
    TooManyStuckWrites {
        /// How many are stuck.
        stuck: usize,
        /// The write refused.
        path: PathBuf,
    },
    /// The kernel refused a sysfs operation.
    #[error("{op} {path} failed")]
    Sysfs {
        /// What we did (`write`, `read`, `list`).
        op: &'static str,
        /// The host path.
        path: PathBuf,
        /// The kernel's answer (its errno decides the kind).
        #[source]
        source: std::io::Error,
    },
    /// Discovery failed.
    #[error(transparent)]
    Discovery(#[from] mdev_host::discovery::DiscoveryError),
    /// A vendor tool (`sriov-manage`) could not run, failed, timed out or was cancelled.
    #[error(transparent)]
    Command(#[from] mdev_host::CommandError),
    /// A vendor tool reported success but the host does not show its effect.
    #[error("{command}: {problem}")]
    VendorTool {
        /// The command line.
        command: String,
        /// What the host shows instead.
        problem: String,
    },
    /// A whole-GPU pass-through was refused or failed.
    #[error(transparent)]
    Passthrough(#[from] passthrough::PassthroughError),
    /// The state store failed.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// A profile file could not be loaded or resolved.
    #[error("profile {profile:?}: {reason}")]
    Profile {
        /// The profile or file.
        profile: String,
        /// Why.
        reason: String,
    },
    /// The operation was cancelled ([`CancelToken`]) before this step.
    #[error("cancelled before {what}")]
    Cancelled {
        /// The step not taken (`binding 0000:41:00.0 to vfio-pci`).
        what: String,
    },
    /// A parent did not appear within the wait the caller allowed
    /// ([`Engine::wait_for_parent_then`]).
    #[error("parent {parent} did not appear within {waited:?}")]
    ParentWaitTimedOut {
        /// The parent waited for.
        parent: String,
        /// How long.
        waited: Duration,
        /// The last attempt's failure.
        #[source]
        last: Box<EngineError>,
    },
    /// A step of a batch failed; everything the batch did before was rolled back.
    #[error("{step} failed{}", rollback_note(rollback_failures))]
    Batch {
        /// Which step (`request 2 of 3 (profile T4-2Q)`).
        step: String,
        /// The step's failure.
        #[source]
        source: Box<EngineError>,
        /// Rollback steps that failed too (each names its device).
        rollback_failures: Vec<String>,
    },
    /// A declarative apply was refused or failed (see [`apply`]).
    #[error(transparent)]
    Apply(#[from] apply::ApplyError),
}

fn rollback_note(failures: &[String]) -> String {
    if failures.is_empty() {
        ", rolled back".to_owned()
    } else {
        format!("; rollback incomplete: {}", failures.join("; "))
    }
}

impl EngineError {
    /// The error class.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Name(error) => error.kind(),
            Self::InvalidArgument { .. } => ErrorKind::InvalidArgs,
            Self::UnknownParent { .. }
            | Self::UnknownType { .. }
            | Self::UnknownInstance { .. }
            | Self::UnknownProfile { .. } => ErrorKind::NotFound,
            Self::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            Self::NoCapacity { .. } => ErrorKind::NoCapacity,
            Self::InUse { .. } | Self::Claimed { .. } | Self::VfCarriesInstance { .. } => {
                ErrorKind::InUse
            }
            Self::NotOwned { .. } | Self::NotSupported { .. } => ErrorKind::NotSupported,
            Self::ParentNotReady { .. }
            | Self::WriteTimedOut { .. }
            | Self::ParentWaitTimedOut { .. } => ErrorKind::TimedOut,
            Self::Cancelled { .. } => ErrorKind::Cancelled,
            Self::TooManyStuckWrites { .. } => ErrorKind::Busy,
            Self::Sysfs { source, .. } => ErrorKind::from_io(source),
            Self::Discovery(error) => error.kind(),
            Self::Command(error) => error.kind(),
            Self::VendorTool { .. } => ErrorKind::Failed,
            Self::Passthrough(error) => error.kind(),
            Self::State(error) => error.kind(),
            Self::Profile { .. } => ErrorKind::InvalidArgs,
            Self::Batch { source, .. } => source.kind(),
            Self::Apply(error) => error.kind(),
        }
    }
}

/// The engine. Cheap to share (`Arc<Engine>`); every method takes `&self`.
#[derive(Debug)]
pub struct Engine {
    pub(crate) host: Host,
    pub(crate) files: Arc<dyn StateFiles>,
    pub(crate) config: EngineConfig,
    pub(crate) state: Mutex<StateFile>,
    parent_locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// UUIDs being created right now (not yet in the state), so two requests cannot take one.
    reserved: Mutex<HashSet<String>>,
    /// Instances an operation is checking and changing right now (see `instance_locks`).
    pub(crate) instance_locks: instance_locks::InstanceLocks,
    subscribers: Mutex<Vec<mpsc::Sender<EngineEvent>>>,
    pub(crate) profiles: RwLock<profiles::ProfileSet>,
    /// Threads inside a batch create: the mdev records they commit are saved once, at the
    /// batch's end (their UUIDs were saved as `pending_creates` before any sysfs write).
    batching: Mutex<HashSet<std::thread::ThreadId>>,
    /// How many events have been emitted (see [`Engine::event_generation`]).
    generation: std::sync::atomic::AtomicU64,
    /// The cancel token (and wait deadline) of the call running on each thread, if any.
    operations: Mutex<HashMap<std::thread::ThreadId, cancel::OperationContext>>,
    /// The last `nvidia-smi vgpu -q` answer (see `nvidia_telemetry`).
    telemetry_cache: nvidia_telemetry::TelemetryCache,
    /// Concurrent state changes share one durable write (see `group_commit`).
    commits: group_commit::GroupCommit,
}

/// How often a profile is placed again when its chosen parent filled up meanwhile.
const PLACEMENT_ATTEMPTS: u32 = 3;

/// Locks a mutex, taking the data even if a panicking thread poisoned it: every critical
/// section leaves the data consistent before anything that can panic.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Marks the current thread as inside a batch create until dropped (also on a panic: the
/// daemon's blocking threads are reused, and a stale mark would defer their saves).
struct BatchingThread<'a> {
    engine: &'a Engine,
    thread: std::thread::ThreadId,
}

impl<'a> BatchingThread<'a> {
    fn enter(engine: &'a Engine) -> Self {
        let thread = std::thread::current().id();
        lock(&engine.batching).insert(thread);
        Self { engine, thread }
    }
}

impl Drop for BatchingThread<'_> {
    fn drop(&mut self) {
        lock(&self.engine.batching).remove(&self.thread);
    }
}

/// Releases a UUID reservation when the creating call ends, however it ends.
struct Reservation<'a> {
    engine: &'a Engine,
    uuid: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        lock(&self.engine.reserved).remove(&self.uuid);
    }
}

impl Engine {
    /// Opens the engine: loads the state store and the profiles. Does not touch devices (call
    /// [`Engine::reconcile`] for that).
    pub fn new(
        host: Arc<dyn HostFs>,
        files: Arc<dyn StateFiles>,
        config: EngineConfig,
    ) -> Result<Self, EngineError> {
        let state = state::load(files.as_ref(), &config.state_dir)?;
        domain_index::rebuild(files.as_ref(), &config.state_dir, &state)?;
        let profiles = profiles::ProfileSet::load(files.as_ref(), &config.profiles_dir, false)?;
        let writer = BoundedWriter::new(Arc::clone(&host), config.write_timeout);
        Ok(Self {
            host: Host {
                fs: host,
                writer,
                echoes: Default::default(),
            },
            files,
            config,
            state: Mutex::new(state),
            parent_locks: Mutex::new(HashMap::new()),
            reserved: Mutex::new(HashSet::new()),
            instance_locks: instance_locks::InstanceLocks::default(),
            subscribers: Mutex::new(Vec::new()),
            profiles: RwLock::new(profiles),
            batching: Mutex::new(HashSet::new()),
            generation: std::sync::atomic::AtomicU64::new(0),
            operations: Mutex::new(HashMap::new()),
            telemetry_cache: Default::default(),
            commits: Default::default(),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The host the engine works on.
    pub fn host(&self) -> &Arc<dyn HostFs> {
        &self.host.fs
    }

    pub(crate) fn fs(&self) -> &dyn HostFs {
        self.host.fs.as_ref()
    }

    /// A fresh discovery of the host.
    pub fn inventory(&self) -> Result<Inventory, EngineError> {
        Ok(discovery::discover(self.fs())?)
    }

    /// Every instance: known records (active or defined) and unmanaged mdevs on the host
    /// (`owner == None`), sorted by UUID.
    pub fn instances(&self) -> Result<Vec<InstanceInfo>, EngineError> {
        Ok(self.instances_in(&discovery::discover(self.fs())?))
    }

    /// [`Engine::instances`] with the unmanaged mdevs, and whether each mdev record is active
    /// and its IOMMU group, taken from `inventory` (a discovery the caller has just made)
    /// instead of a second read of the host.
    pub fn instances_in(&self, inventory: &Inventory) -> Vec<InstanceInfo> {
        let records: Vec<InstanceRecord> = lock(&self.state).instances.values().cloned().collect();
        let present: HashMap<&str, &MdevDevice> = inventory
            .mdevs
            .iter()
            .map(|mdev| (mdev.uuid.as_str(), mdev))
            .collect();
        let mut infos: Vec<InstanceInfo> = records
            .iter()
            .map(|record| match record.kind {
                // The discovery lists exactly the mdevs whose device directory exists (what
                // `is_active` checks) with the group link `info_of` would read.
                InstanceKind::Mdev => {
                    let found = present.get(record.uuid.as_str());
                    self.info_from(
                        record,
                        found.is_some(),
                        found.and_then(|mdev| mdev.iommu_group),
                        mdev_sysfs_path(record),
                    )
                }
                _ => self.info_of(record),
            })
            .collect();
        let known: HashSet<&str> = records.iter().map(|r| r.uuid.as_str()).collect();
        for mdev in &inventory.mdevs {
            if !known.contains(mdev.uuid.as_str()) {
                infos.push(unmanaged_info(mdev));
            }
        }
        infos.sort_by(|a, b| a.uuid.cmp(&b.uuid));
        infos
    }

    /// One instance by UUID.
    pub fn instance(&self, uuid: &str) -> Result<InstanceInfo, EngineError> {
        let uuid = names::parse_uuid(uuid)?;
        let key = uuid.to_string();
        if let Some(record) = lock(&self.state).instances.get(&key).cloned() {
            return Ok(self.info_of(&record));
        }
        discovery::read_mdev(self.fs(), &uuid)
            .map(|mdev| unmanaged_info(&mdev))
            .ok_or(EngineError::UnknownInstance { uuid: key })
    }

    /// Creates one instance (see [`Engine::create_batch`]).
    pub fn create(&self, request: CreateRequest) -> Result<InstanceInfo, EngineError> {
        let record = self.create_one(&request, None)?;
        Ok(self.info_of(&record))
    }

    /// Creates every instance or none: a failure part-way rolls back what the batch did and
    /// returns [`EngineError::Batch`] naming the step and its cause.
    ///
    /// A batch of more than one saves the state twice however long it is: its UUIDs as
    /// `pending_creates` before the first sysfs write, then every record at once. A crash in
    /// between leaves devices the state does not list yet; [`Engine::reconcile`] removes them.
    pub fn create_batch(
        &self,
        mut requests: Vec<CreateRequest>,
    ) -> Result<Vec<InstanceInfo>, EngineError> {
        let total = requests.len();
        if total <= 1 {
            return self.create_batch_steps(&requests);
        }
        // Every UUID is fixed up front so the intent can name it.
        for request in &mut requests {
            if request.uuid.is_none() {
                request.uuid = Some(uuid::Uuid::new_v4().to_string());
            }
        }
        // Only UUIDs free now: a crash must never make reconcile remove an instance that was
        // already there (a taken UUID fails its step anyway).
        let intent: Vec<String> = {
            let state = lock(&self.state);
            requests
                .iter()
                .filter_map(|r| names::parse_uuid(r.uuid.as_deref()?).ok())
                .filter(|uuid| {
                    !state.instances.contains_key(&uuid.to_string())
                        && !self.fs().exists(&layout::mdev_device(uuid))
                })
                .map(|uuid| uuid.to_string())
                .collect()
        };
        self.update_state(|state| state.pending_creates.extend(intent.iter().cloned()))?;
        let outcome = {
            let _batching = BatchingThread::enter(self);
            self.create_batch_steps(&requests)
        };
        let saved = self.update_state(|state| {
            for uuid in &intent {
                state.pending_creates.remove(uuid);
            }
        });
        match (outcome, saved) {
            (Ok(infos), Ok(())) => Ok(infos),
            (Err(error), _) => Err(error),
            (Ok(infos), Err(error)) => {
                // Nothing may exist that the durable state does not know: undo the batch.
                let created: Vec<InstanceRecord> = infos
                    .iter()
                    .filter_map(|info| lock(&self.state).instances.get(&info.uuid).cloned())
                    .collect();
                let rollback_failures = self.roll_back(&created);
                Err(EngineError::Batch {
                    step: format!("recording the batch of {total} instances"),
                    source: Box::new(error),
                    rollback_failures,
                })
            }
        }
    }

    fn create_batch_steps(
        &self,
        requests: &[CreateRequest],
    ) -> Result<Vec<InstanceInfo>, EngineError> {
        let total = requests.len();
        let mut done: Vec<InstanceRecord> = Vec::new();
        // One discovery for the whole batch: each step's placement sees it updated with what the
        // steps before it created (re-reading only the parent that changed).
        let mut placement_view = None;
        for (index, request) in requests.iter().enumerate() {
            let created = self
                .check_cancelled(|| format!("creating {}", describe_target(&request.target)))
                .and_then(|()| self.create_one_placed(request, None, &mut placement_view));
            match created {
                Ok(record) => done.push(record),
                Err(error) => {
                    let rollback_failures = self.roll_back(&done);
                    return Err(EngineError::Batch {
                        step: format!(
                            "request {} of {total} ({})",
                            index + 1,
                            describe_target(&request.target)
                        ),
                        source: Box::new(error),
                        rollback_failures,
                    });
                }
            }
        }
        // A cancel that came during the last step still undoes the whole batch.
        if let Err(error) = self.check_cancelled(|| "finishing the batch".to_owned()) {
            let rollback_failures = self.roll_back(&done);
            return Err(EngineError::Batch {
                step: format!("creating {total} instance(s)"),
                source: Box::new(error),
                rollback_failures,
            });
        }
        Ok(done.iter().map(|record| self.info_of(record)).collect())
    }

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
            match lock(&self.state).instances.get(&key) {
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
            self.update_state(|state| state.pending_destroys.extend(keys.iter().cloned()))?;
        }
        let mut outcome = Ok(());
        for (index, key) in keys.iter().enumerate() {
            let record = lock(&self.state).instances.get(key).cloned();
            let removed = match &record {
                Some(record) => {
                    let parent_lock = self.parent_lock(&record.parent);
                    let _serialized = lock(&parent_lock);
                    self.remove_device(record).map(|()| record.parent.clone())
                }
                None => self.remove_unmanaged(key),
            };
            match removed {
                Ok(parent) => {
                    // Forgotten in memory now, durably with the one save below.
                    lock(&self.state).instances.remove(key);
                    if let Some(record) = &record {
                        self.after_vf_change(record, true);
                    }
                    self.emit(EngineEvent::InstanceRemoved { uuid: key.clone() });
                    self.emit(EngineEvent::ParentChanged { parent });
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
            for key in &keys {
                state.pending_destroys.remove(key);
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
            state.instances.remove(&record.uuid);
        })?;
        self.emit(EngineEvent::InstanceRemoved {
            uuid: record.uuid.clone(),
        });
        self.emit(EngineEvent::ParentChanged {
            parent: record.parent.clone(),
        });
        Ok(())
    }

    /// Starts a defined (persistent, inactive) instance.
    pub fn start(&self, uuid: &str) -> Result<InstanceInfo, EngineError> {
        let key = names::parse_uuid(uuid)?.to_string();
        let _held = self.instance_locks.hold(&key);
        let record = self.record(&key)?;
        let record = self.start_record(&record)?;
        Ok(self.info_of(&record))
    }

    /// Creates the device of a known record (same UUID, type, attributes) if it is not active.
    pub(crate) fn start_record(
        &self,
        record: &InstanceRecord,
    ) -> Result<InstanceRecord, EngineError> {
        if self.is_active(record) {
            return Ok(record.clone());
        }
        self.start_inactive_record(record)
    }

    /// [`Engine::start_record`] of a record the caller has just found inactive (reconcile
    /// checks every record first), without reading the host again to check.
    pub(crate) fn start_inactive_record(
        &self,
        record: &InstanceRecord,
    ) -> Result<InstanceRecord, EngineError> {
        let uuid = names::parse_uuid(&record.uuid)?;
        let parent_lock = self.parent_lock(&record.parent);
        let _serialized = lock(&parent_lock);
        let mut started = record.clone();
        match record.kind {
            InstanceKind::Mdev => {
                self.wait_for_path(&record.parent, &layout::mdev_parent(&record.parent), None)?;
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
                self.wait_for_path(&vf.to_string(), &layout::pci_device(&vf), None)?;
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
                            value: record.type_id.clone(),
                            reason: "not a decimal number".into(),
                        })?;
                self.wait_for_path(&record.parent, &layout::pci_device(&pf), None)?;
                let vf = self.pick_nvidia_vf(pf, type_id, record.vf, Some(&record.uuid))?;
                self.host.set_nvidia_vgpu(vf, type_id)?;
                started.vf = Some(vf);
            }
            InstanceKind::Passthrough => {
                let gpu = record.vf.ok_or_else(|| missing_vf(record))?;
                self.bind_passthrough(&mut started, gpu, record.force)?;
            }
        }
        // The state already says what is true when starting changed no field (an mdev always):
        // no save, which keeps reconcile after a reboot at no fsync per instance.
        if started != *record {
            self.update_state(|state| {
                state
                    .instances
                    .insert(started.uuid.clone(), started.clone());
            })?;
        }
        self.emit(EngineEvent::InstanceChanged {
            uuid: started.uuid.clone(),
        });
        self.emit(EngineEvent::ParentChanged {
            parent: started.parent.clone(),
        });
        Ok(started)
    }

    /// Removes the device but keeps a persistent definition (a transient record is dropped).
    pub fn stop(&self, uuid: &str, options: DestroyOptions) -> Result<(), EngineError> {
        self.remove_instance(uuid, options, false)
    }

    /// Removes the device (if active) and forgets the instance.
    pub fn destroy(&self, uuid: &str, options: DestroyOptions) -> Result<(), EngineError> {
        self.remove_instance(uuid, options, true)
    }

    fn remove_instance(
        &self,
        uuid: &str,
        options: DestroyOptions,
        forget: bool,
    ) -> Result<(), EngineError> {
        let uuid = names::parse_uuid(uuid)?;
        let key = uuid.to_string();
        // Held from the claim check to forgetting the record: a claim waits, then finds the
        // instance gone (or finds it claimed first, and this removal is refused).
        let _held = self.instance_locks.hold(&key);
        let Some(record) = lock(&self.state).instances.get(&key).cloned() else {
            // Not ours: only a forced removal touches it.
            let mdev = discovery::read_mdev(self.fs(), &uuid)
                .ok_or(EngineError::UnknownInstance { uuid: key.clone() })?;
            if !options.force {
                return Err(EngineError::NotOwned { uuid: key });
            }
            let parent_lock = self.parent_lock(&mdev.parent);
            let _serialized = lock(&parent_lock);
            self.host.remove_mdev(&uuid)?;
            self.emit(EngineEvent::InstanceRemoved { uuid: key });
            self.emit(EngineEvent::ParentChanged {
                parent: mdev.parent,
            });
            return Ok(());
        };
        if let Some(claim) = &record.claim {
            if !options.force {
                return Err(claimed(&record.uuid, claim));
            }
        }
        {
            let parent_lock = self.parent_lock(&record.parent);
            let _serialized = lock(&parent_lock);
            self.remove_device(&record)?;
        }
        let forget = forget || !record.persistent;
        self.update_state(|state| {
            if forget {
                state.instances.remove(&key);
            } else if let Some(kept) = state.instances.get_mut(&key) {
                kept.claim = None;
            }
        })?;
        self.after_vf_change(&record, true);
        self.emit(if forget {
            EngineEvent::InstanceRemoved { uuid: key }
        } else {
            EngineEvent::InstanceChanged { uuid: key }
        });
        self.emit(EngineEvent::ParentChanged {
            parent: record.parent,
        });
        Ok(())
    }

    /// Removes a record's device from the host if it is there (caller holds the parent lock).
    pub(crate) fn remove_device(&self, record: &InstanceRecord) -> Result<(), EngineError> {
        match record.kind {
            InstanceKind::Mdev => {
                let uuid = names::parse_uuid(&record.uuid)?;
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

    /// Takes over an mdev the manager did not create, so it may be managed and removed.
    pub fn adopt(&self, uuid: &str) -> Result<InstanceInfo, EngineError> {
        let uuid = names::parse_uuid(uuid)?;
        let key = uuid.to_string();
        let _held = self.instance_locks.hold(&key);
        if let Some(record) = lock(&self.state).instances.get(&key).cloned() {
            return Ok(self.info_of(&record));
        }
        let mdev = discovery::read_mdev(self.fs(), &uuid)
            .ok_or(EngineError::UnknownInstance { uuid: key.clone() })?;
        let record = InstanceRecord {
            uuid: key.clone(),
            kind: InstanceKind::Mdev,
            parent: mdev.parent,
            type_id: mdev.type_id,
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
            state.instances.insert(key.clone(), record.clone());
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

    fn modify_record(
        &self,
        uuid: &str,
        change: impl FnOnce(&mut InstanceRecord),
    ) -> Result<InstanceInfo, EngineError> {
        let key = names::parse_uuid(uuid)?.to_string();
        let _held = self.instance_locks.hold(&key);
        let record = self.update_state(|state| {
            state.instances.get_mut(&key).map(|record| {
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
        names::check_sysfs_name("parent", parent)?;
        let known = self.fs().exists(&layout::mdev_parent(parent))
            || parent
                .parse::<PciAddress>()
                .is_ok_and(|a| self.fs().exists(&layout::pci_device(&a)))
            || lock(&self.state).parents.contains_key(parent);
        if !known {
            return Err(EngineError::UnknownParent {
                parent: parent.to_owned(),
            });
        }
        self.update_state(|state| {
            state.parents.entry(parent.to_owned()).or_default().schedule = Some(schedule);
        })?;
        self.emit(EngineEvent::ParentChanged {
            parent: parent.to_owned(),
        });
        Ok(())
    }

    /// Sets a PF's VF count (autoprobe off first, `0` first when changing a non-zero count).
    /// Refuses when any VF is held by a process or carries an instance (unless forced; a held
    /// VF is refused even then). Returns the VF addresses now enabled.
    pub fn set_num_vfs(
        &self,
        pf: &str,
        num_vfs: u32,
        options: DestroyOptions,
    ) -> Result<Vec<PciAddress>, EngineError> {
        let address: PciAddress = pf.parse()?;
        let key = address.to_string();
        let parent_lock = self.parent_lock(&key);
        let _serialized = lock(&parent_lock);
        let current = discovery::read_sriov_pf(self.fs(), address).map(|p| p.num_vfs);
        let changed = self.set_num_vfs_locked(address, num_vfs, options, true);
        let enabled = self.settle_intent(&key, changed)?;
        // A forced change can take VFs that carried instances: transient ones are gone for
        // good; persistent ones stay defined (and unclaimed) for a later start. A change from
        // a non-zero count goes through 0, so the kernel made even the VFs that are enabled
        // again anew, unbound: a record is lost when its VF is gone or no longer its own.
        let recreated = current.is_some_and(|from| from > 0 && from != num_vfs);
        let lost: Vec<(String, bool)> = lock(&self.state)
            .instances
            .values()
            .filter(|r| r.parent == key && r.vf.is_some())
            .filter(|r| recreated || r.vf.is_some_and(|vf| !enabled.contains(&vf)))
            .filter(|r| r.vf.is_some_and(|vf| !enabled.contains(&vf)) || !self.is_active(r))
            .map(|r| (r.uuid.clone(), r.persistent))
            .collect();
        let (forgotten, stopped) = self.update_state(|state| {
            state
                .parents
                .entry(address.to_string())
                .or_default()
                .num_vfs = (num_vfs > 0).then_some(num_vfs);
            Self::intent_done(state, &key);
            let mut forgotten = Vec::new();
            let mut stopped = Vec::new();
            for (uuid, persistent) in lost {
                if persistent {
                    if let Some(record) = state.instances.get_mut(&uuid) {
                        record.claim = None;
                    }
                    stopped.push(uuid);
                } else {
                    state.instances.remove(&uuid);
                    forgotten.push(uuid);
                }
            }
            (forgotten, stopped)
        })?;
        for uuid in forgotten {
            self.emit(EngineEvent::InstanceRemoved { uuid });
        }
        for uuid in stopped {
            self.emit(EngineEvent::InstanceChanged { uuid });
        }
        self.emit(EngineEvent::ParentChanged {
            parent: address.to_string(),
        });
        Ok(enabled)
    }

    /// [`Engine::set_num_vfs`] under the PF's lock, without recording the count; with
    /// `write_ahead`, the change's intent is saved before the first write (a call's change,
    /// not reconcile's own restore).
    pub(crate) fn set_num_vfs_locked(
        &self,
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
        if num_vfs > pf.total_vfs {
            return Err(EngineError::InvalidArgument {
                what: "VF count",
                value: num_vfs.to_string(),
                reason: format!("{address} supports at most {} VFs", pf.total_vfs),
            });
        }
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
                    uuid: record.uuid.clone(),
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
            self.set_nvidia_vfs(&pf, num_vfs)?;
        } else {
            self.host.set_num_vfs(address, pf.num_vfs, num_vfs)?;
        }
        Ok(self.host.vfs_of(address))
    }

    /// Waits (bounded by `timeout`, default [`EngineConfig::readiness_timeout`]) until `parent`
    /// is registered as an mdev parent or present as a PCI device.
    pub fn wait_for_parent(
        &self,
        parent: &str,
        timeout: Option<Duration>,
    ) -> Result<(), EngineError> {
        names::check_sysfs_name("parent", parent)?;
        let mdev_path = layout::mdev_parent(parent);
        let pci_path = parent
            .parse::<PciAddress>()
            .ok()
            .map(|a| layout::pci_device(&a));
        let ready = || {
            self.fs().exists(&mdev_path) || pci_path.as_ref().is_some_and(|p| self.fs().exists(p))
        };
        self.poll_until(parent, &mdev_path, timeout, ready)
    }

    /// Waits for `path` (the thing `parent` needs) to exist, bounded. A parent the host has never
    /// heard of (no PCI device, no record) is unknown at once rather than waited for.
    pub(crate) fn wait_for_path(
        &self,
        parent: &str,
        path: &Path,
        timeout: Option<Duration>,
    ) -> Result<(), EngineError> {
        if self.fs().exists(path) {
            return Ok(());
        }
        let expected = parent
            .parse::<PciAddress>()
            .is_ok_and(|a| self.fs().exists(&layout::pci_device(&a)))
            || {
                let state = lock(&self.state);
                state.parents.contains_key(parent)
                    || state.instances.values().any(|r| r.parent == parent)
            };
        if !expected {
            return Err(EngineError::UnknownParent {
                parent: parent.to_owned(),
            });
        }
        self.poll_until(parent, path, timeout, || self.fs().exists(path))
    }

    fn poll_until(
        &self,
        parent: &str,
        path: &Path,
        timeout: Option<Duration>,
        ready: impl Fn() -> bool,
    ) -> Result<(), EngineError> {
        let waited = timeout.unwrap_or(self.config.readiness_timeout);
        let start = Instant::now();
        // A cancellable call may bound every wait inside it (its caller's wait-for-parent).
        let deadline = match self.wait_deadline() {
            Some(outer) => outer.min(start + waited),
            None => start + waited,
        };
        loop {
            if ready() {
                return Ok(());
            }
            self.check_cancelled(|| format!("{parent} appeared (waiting for {})", path.display()))?;
            let now = Instant::now();
            if now >= deadline {
                return Err(EngineError::ParentNotReady {
                    parent: parent.to_owned(),
                    path: path.to_owned(),
                    waited: now - start,
                });
            }
            std::thread::sleep(
                self.config
                    .poll_interval
                    .min(deadline - now)
                    .min(cancel::CANCEL_SLICE),
            );
        }
    }

    /// How many events the engine has emitted so far. A reader that notes it *before* reading
    /// the engine has seen every change announced up to that count: a subscriber can skip the
    /// events it covers (the daemon refreshes its objects once for a method's own change
    /// instead of once more for the change's events).
    pub fn event_generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Subscribes to engine events.
    pub fn subscribe(&self) -> EventSubscription {
        let (sender, receiver) = mpsc::channel();
        lock(&self.subscribers).push(sender);
        EventSubscription { receiver }
    }

    pub(crate) fn emit(&self, event: EngineEvent) {
        // Counted before it is sent, so a subscriber that sees the event also sees the count.
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // A send fails only for a dropped subscription, which is how unsubscribing works.
        lock(&self.subscribers).retain(|subscriber| subscriber.send(event.clone()).is_ok());
    }

    /// State writes made so far and the changes they made durable (group commit: fewer
    /// writes than changes when calls overlap).
    pub fn state_commits(&self) -> CommitStats {
        self.commits.stats()
    }

    /// How many sysfs writes are still blocked in the kernel after timing out.
    pub fn stuck_writes(&self) -> usize {
        self.host.writer.stuck()
    }

    /// Re-reads the profiles directory. Returns how many profiles are loaded.
    pub fn reload_profiles(&self) -> Result<usize, EngineError> {
        let loaded =
            profiles::ProfileSet::load(self.files.as_ref(), &self.config.profiles_dir, true)?;
        let count = loaded.len();
        *self
            .profiles
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = loaded;
        Ok(count)
    }

    /// The loaded profiles, sorted by name.
    pub fn profiles(&self) -> Vec<ProfileSummary> {
        self.profiles
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .summaries()
    }

    /// Every profile, sorted by name, with whether one instance of it would be placed on the
    /// host as it is now (default placement, free capacity counted) and where, or why not.
    /// Nothing is created or reserved.
    pub fn profile_fit(&self) -> Result<Vec<ProfileFit>, EngineError> {
        let inventory = self.inventory()?;
        let mut fits: Vec<ProfileFit> = self
            .profiles()
            .into_iter()
            .map(|summary| {
                match self.resolve_profile(
                    &summary.name,
                    None,
                    PlacementRequest::default(),
                    &inventory,
                ) {
                    Ok(resolved) => ProfileFit {
                        name: summary.name,
                        fits: true,
                        detail: describe_target(&resolved.target),
                    },
                    Err(error) => ProfileFit {
                        name: summary.name,
                        fits: false,
                        detail: error.to_string(),
                    },
                }
            })
            .collect();
        fits.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(fits)
    }

    // ---- internals shared with claims, reconcile, hotplug and import ----

    pub(crate) fn parent_lock(&self, parent: &str) -> Arc<Mutex<()>> {
        Arc::clone(
            lock(&self.parent_locks)
                .entry(parent.to_owned())
                .or_default(),
        )
    }

    /// Applies a change to the state and saves it atomically before returning.
    pub(crate) fn update_state<R>(
        &self,
        change: impl FnOnce(&mut StateFile) -> R,
    ) -> Result<R, EngineError> {
        // Changed in memory under the lock; written by one group commit with every change
        // made meanwhile (engine::group_commit), outside the lock.
        let (result, ticket) = {
            let mut state = lock(&self.state);
            let result = change(&mut state);
            (result, self.commits.changed())
        };
        let (files, state_dir) = (self.files.as_ref(), &self.config.state_dir);
        self.commits.wait_durable(
            ticket,
            || {
                let state = lock(&self.state);
                (state.clone(), self.commits.latest())
            },
            |snapshot| {
                domain_index::commit(files, state_dir, snapshot, || {
                    state::save(files, state_dir, snapshot)
                })
            },
        )?;
        Ok(result)
    }

    pub(crate) fn record(&self, key: &str) -> Result<InstanceRecord, EngineError> {
        lock(&self.state)
            .instances
            .get(key)
            .cloned()
            .ok_or_else(|| EngineError::UnknownInstance {
                uuid: key.to_owned(),
            })
    }

    /// Whether a record's device exists on the host now.
    pub(crate) fn is_active(&self, record: &InstanceRecord) -> bool {
        match record.kind {
            InstanceKind::Mdev => names::parse_uuid(&record.uuid)
                .is_ok_and(|uuid| self.fs().exists(&layout::mdev_device(&uuid))),
            InstanceKind::Vf => record.vf.is_some_and(|vf| {
                discovery::link_target_name(self.fs(), &layout::pci_device(&vf).join("driver"))
                    .as_deref()
                    == Some(lifecycle::VFIO_PCI)
            }),
            InstanceKind::NvidiaVf => record.vf.is_some_and(|vf| {
                discovery::read_nvidia_vf(self.fs(), vf)
                    .is_some_and(|nv| nv.current_type.to_string() == record.type_id)
            }),
            InstanceKind::Passthrough => self.passthrough_active(record),
        }
    }

    pub(crate) fn info_of(&self, record: &InstanceRecord) -> InstanceInfo {
        let active = self.is_active(record);
        let (sysfs_path, iommu_group) = match (record.kind, record.vf) {
            (InstanceKind::Mdev, _) => {
                let path = mdev_sysfs_path(record);
                let group = if active {
                    discovery::iommu_group_of(self.fs(), &path)
                } else {
                    None
                };
                (path, group)
            }
            (_, Some(vf)) => {
                let path = layout::pci_device(&vf);
                let group = discovery::iommu_group_of(self.fs(), &path);
                (path, group)
            }
            (_, None) => (PathBuf::new(), None),
        };
        self.info_from(record, active, iommu_group, sysfs_path)
    }

    /// The info of `record` with what was read of the host.
    fn info_from(
        &self,
        record: &InstanceRecord,
        active: bool,
        iommu_group: Option<u32>,
        sysfs_path: PathBuf,
    ) -> InstanceInfo {
        InstanceInfo {
            uuid: record.uuid.clone(),
            kind: record.kind,
            parent: record.parent.clone(),
            type_id: record.type_id.clone(),
            profile: record.profile.clone(),
            owner: Some(record.owner),
            active,
            persistent: record.persistent,
            autostart: record.autostart,
            claim: record.claim.clone(),
            scheduling: record.scheduling,
            vf: record.vf,
            iommu_group,
            sysfs_path,
        }
    }

    /// Refuses an mdev create on a type with no room (checked under the parent lock, so
    /// concurrent creates cannot both see the last instance).
    fn check_capacity(&self, parent: &str, type_id: &str) -> Result<(), EngineError> {
        let dir = layout::mdev_type(parent, type_id);
        let path = dir.join("available_instances");
        // One read; only a failed one looks at whether the type is there at all.
        let text = self.fs().read(&path).map_err(|source| {
            if self.fs().exists(&dir) {
                EngineError::Sysfs {
                    op: "read",
                    path: path.clone(),
                    source,
                }
            } else {
                EngineError::UnknownType {
                    parent: parent.to_owned(),
                    type_id: type_id.to_owned(),
                }
            }
        })?;
        let available: u32 = text.trim().parse().map_err(|_| EngineError::Sysfs {
            op: "read",
            path: path.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a count: {text:?}"),
            ),
        })?;
        if available == 0 {
            return Err(EngineError::NoCapacity {
                what: format!("type {type_id} on {parent}"),
                detail: "available_instances is 0".into(),
            });
        }
        Ok(())
    }

    /// Picks a free VF of `pf` that can host NVIDIA type `type_id` (preferring `preferred`).
    /// `starting` is the UUID of a record being started again: the VF it records is its own,
    /// not taken, so it comes back on the same VF (the one its VM's XML names).
    fn pick_nvidia_vf(
        &self,
        pf: PciAddress,
        type_id: u32,
        preferred: Option<PciAddress>,
        starting: Option<&str>,
    ) -> Result<PciAddress, EngineError> {
        let sriov =
            discovery::read_sriov_pf(self.fs(), pf).ok_or_else(|| EngineError::NotSupported {
                what: format!("NVIDIA vGPU on {pf}"),
                reason: not_sriov_reason(self.fs(), pf),
            })?;
        let taken: HashSet<PciAddress> = lock(&self.state)
            .instances
            .values()
            .filter(|r| Some(r.uuid.as_str()) != starting)
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

    /// Creates one instance. `claim` is recorded with it when given.
    pub(crate) fn create_one(
        &self,
        request: &CreateRequest,
        claim: Option<Claim>,
    ) -> Result<InstanceRecord, EngineError> {
        self.create_one_placed(request, claim, &mut None)
    }

    /// [`Engine::create_one`] placing a profile on `view`, the host as a batch's earlier steps
    /// left it (discovered when `None`, then kept up to date with what this step creates).
    fn create_one_placed(
        &self,
        request: &CreateRequest,
        claim: Option<Claim>,
        view: &mut Option<Inventory>,
    ) -> Result<InstanceRecord, EngineError> {
        let uuid = match &request.uuid {
            Some(text) => names::parse_uuid(text)?,
            None => uuid::Uuid::new_v4(),
        };
        let key = uuid.to_string();
        for (name, value) in &request.attributes {
            names::check_attribute_name(name)?;
            names::check_sysfs_value(name, value)?;
        }
        check_scheduling(&request.scheduling)?;
        let _reservation = {
            let state = lock(&self.state);
            let mut reserved = lock(&self.reserved);
            if state.instances.contains_key(&key) || !reserved.insert(key.clone()) {
                return Err(EngineError::AlreadyExists { uuid: key });
            }
            Reservation {
                engine: self,
                uuid: key.clone(),
            }
        };
        // A placement is computed before the parent's lock is taken; if another request took
        // the capacity meanwhile, place again (a pinned parent has nowhere else to go).
        let attempts = match &request.target {
            CreateTarget::Profile { parent: None, .. } => PLACEMENT_ATTEMPTS,
            _ => 1,
        };
        let mut attempt = 1;
        loop {
            let mut scheduling = request.scheduling;
            let (target, profile) = match &request.target {
                CreateTarget::Profile { profile, parent } => {
                    if view.is_none() {
                        *view = Some(self.inventory()?);
                    }
                    let inventory = view.as_ref().ok_or_else(|| EngineError::InvalidArgument {
                        what: "placement",
                        value: profile.clone(),
                        reason: "no host view to place on".into(),
                    })?;
                    let resolved = self.resolve_profile(
                        profile,
                        parent.as_deref(),
                        request.placement,
                        inventory,
                    )?;
                    scheduling.weight = scheduling.weight.or(Some(resolved.default_weight));
                    scheduling.min_share = scheduling.min_share.or(resolved.compute_shares.0);
                    scheduling.max_share = scheduling.max_share.or(resolved.compute_shares.1);
                    (resolved.target, Some(profile.clone()))
                }
                other => (other.clone(), None),
            };
            let target = match target {
                CreateTarget::Passthrough { gpu, force } => CreateTarget::Passthrough {
                    gpu,
                    force: force || request.force,
                },
                other => other,
            };
            let record = InstanceRecord {
                uuid: key.clone(),
                kind: InstanceKind::Mdev,
                parent: String::new(),
                type_id: String::new(),
                profile,
                owner: Owner::CreatedByUs,
                autostart: request.autostart,
                persistent: request.persistent || request.autostart,
                claim: claim.clone(),
                scheduling,
                attributes: request.attributes.clone(),
                vf: None,
                previous_driver: None,
                force: matches!(target, CreateTarget::Passthrough { force: true, .. }),
            };
            let created = self.create_target(&target, &uuid, record, &request.attributes);
            self.update_placement_view(view, &target, &created);
            match created {
                Err(error) if error.kind() == ErrorKind::NoCapacity && attempt < attempts => {
                    attempt += 1
                }
                other => return other,
            }
        }
    }

    /// Creates the device of a resolved target and records it (the reservation of `uuid` is
    /// held by the caller).
    fn create_target(
        &self,
        target: &CreateTarget,
        uuid: &uuid::Uuid,
        mut record: InstanceRecord,
        attributes: &[(String, String)],
    ) -> Result<InstanceRecord, EngineError> {
        let key = uuid.to_string();
        match target {
            CreateTarget::Mdev { parent, type_id } => {
                names::check_sysfs_name("parent", parent)?;
                names::check_sysfs_name("mdev type", type_id)?;
                self.wait_for_path(parent, &layout::mdev_parent(parent), None)?;
                let parent_lock = self.parent_lock(parent);
                let _serialized = lock(&parent_lock);
                self.admit_at_create(parent, &key, &record.scheduling)?;
                if self.fs().exists(&layout::mdev_device(uuid)) {
                    return Err(EngineError::AlreadyExists { uuid: key });
                }
                self.check_capacity(parent, type_id)?;
                self.write_ahead(&key, intents::Intent::mdev(parent, type_id))?;
                let written = self.host.create_mdev(parent, type_id, uuid, attributes);
                self.settle_intent(&key, written)?;
                record.parent = parent.clone();
                record.type_id = type_id.clone();
                self.commit_new(&record)?;
            }
            CreateTarget::Vf { pf, vf } => {
                if !attributes.is_empty() {
                    return Err(EngineError::InvalidArgument {
                        what: "attributes",
                        value: format!("{attributes:?}"),
                        reason: "a VF bound to vfio-pci takes no vendor attributes".into(),
                    });
                }
                let pf: PciAddress = pf.parse()?;
                let wanted: Option<PciAddress> = vf.as_deref().map(str::parse).transpose()?;
                self.wait_for_path(&pf.to_string(), &layout::pci_device(&pf), None)?;
                let parent_lock = self.parent_lock(&pf.to_string());
                let _serialized = lock(&parent_lock);
                self.admit_at_create(&pf.to_string(), &key, &record.scheduling)?;
                let chosen = self.pick_free_vf(pf, wanted)?;
                self.check_cancelled(|| format!("binding VF {chosen} to vfio-pci"))?;
                record.kind = InstanceKind::Vf;
                record.parent = pf.to_string();
                record.type_id = lifecycle::VFIO_PCI.to_owned();
                record.vf = Some(chosen);
                let driver = discovery::link_target_name(
                    self.fs(),
                    &layout::pci_device(&chosen).join("driver"),
                );
                let intent = intents::Intent::vf(
                    InstanceKind::Vf,
                    &record.parent,
                    lifecycle::VFIO_PCI,
                    chosen,
                    driver,
                );
                self.write_ahead(&key, intent)?;
                let bound = self.host.bind_vfio(chosen);
                record.previous_driver = self.settle_intent(&key, bound)?;
                self.commit_new(&record)?;
            }
            CreateTarget::NvidiaVf { pf, type_id, vf } => {
                let pf: PciAddress = pf.parse()?;
                let wanted: Option<PciAddress> = vf.as_deref().map(str::parse).transpose()?;
                self.wait_for_path(&pf.to_string(), &layout::pci_device(&pf), None)?;
                let parent_lock = self.parent_lock(&pf.to_string());
                let _serialized = lock(&parent_lock);
                self.admit_at_create(&pf.to_string(), &key, &record.scheduling)?;
                let vf = self.pick_nvidia_vf(pf, *type_id, wanted, None)?;
                if let Some(wanted) = wanted.filter(|wanted| *wanted != vf) {
                    return Err(EngineError::NoCapacity {
                        what: format!("NVIDIA vGPU type {type_id} on VF {wanted}"),
                        detail: format!(
                            "VF {wanted} of {pf} is taken or does not list type {type_id} in creatable_vgpu_types"
                        ),
                    });
                }
                let intent = intents::Intent::vf(
                    InstanceKind::NvidiaVf,
                    &pf.to_string(),
                    &type_id.to_string(),
                    vf,
                    None,
                );
                self.write_ahead(&key, intent)?;
                let written = self.host.set_nvidia_vgpu(vf, *type_id);
                self.settle_intent(&key, written)?;
                record.kind = InstanceKind::NvidiaVf;
                record.parent = pf.to_string();
                record.type_id = type_id.to_string();
                record.vf = Some(vf);
                if let Err(error) = self.write_vf_attributes(vf, attributes) {
                    let rollback = self
                        .host
                        .clear_nvidia_vgpu(vf)
                        .err()
                        .map(|e| format!("clearing vGPU on VF {vf}: {e}"));
                    return self.settle_intent(
                        &key,
                        Err(EngineError::Batch {
                            step: format!("writing attributes of NVIDIA vGPU {key} on VF {vf}"),
                            source: Box::new(error),
                            rollback_failures: rollback.into_iter().collect(),
                        }),
                    );
                }
                self.commit_new(&record)?;
            }
            CreateTarget::Passthrough { gpu, force } => {
                if !attributes.is_empty() {
                    return Err(EngineError::InvalidArgument {
                        what: "attributes",
                        value: format!("{attributes:?}"),
                        reason: "a pass-through GPU takes no vendor attributes".into(),
                    });
                }
                let gpu: PciAddress = gpu.parse()?;
                let parent_lock = self.parent_lock(&gpu.to_string());
                let _serialized = lock(&parent_lock);
                self.bind_passthrough(&mut record, gpu, *force)?;
            }
            CreateTarget::Profile { profile, .. } => {
                return Err(EngineError::Profile {
                    profile: profile.clone(),
                    reason: "resolves to another profile, which is not allowed".into(),
                });
            }
        }
        self.emit(EngineEvent::InstanceAdded { uuid: key });
        self.emit(EngineEvent::ParentChanged {
            parent: record.parent.clone(),
        });
        self.after_vf_change(&record, false);
        Ok(record)
    }

    fn write_vf_attributes(
        &self,
        vf: PciAddress,
        attributes: &[(String, String)],
    ) -> Result<(), EngineError> {
        for (name, value) in attributes {
            self.host
                .write(&layout::pci_device(&vf).join(name), value)?;
        }
        Ok(())
    }

    /// Records a new instance. If the state cannot be saved the device is removed again, so
    /// nothing exists that the state does not know.
    fn commit_new(&self, record: &InstanceRecord) -> Result<(), EngineError> {
        // Inside a batch an mdev is recorded in memory only: its UUID is in the saved
        // `pending_creates`, which lets reconcile find it after a crash, and the batch saves
        // every record at its end. VF kinds cannot be found by UUID, so they save now.
        if record.kind == InstanceKind::Mdev
            && lock(&self.batching).contains(&std::thread::current().id())
        {
            lock(&self.state)
                .instances
                .insert(record.uuid.clone(), record.clone());
            return Ok(());
        }
        let intent = lock(&self.state).intents.get(&record.uuid).cloned();
        let saved = self.update_state(|state| {
            state.instances.insert(record.uuid.clone(), record.clone());
            Self::intent_done(state, &record.uuid);
        });
        if let Err(error) = saved {
            lock(&self.state).instances.remove(&record.uuid);
            let rollback = self
                .remove_device(record)
                .err()
                .map(|e| format!("removing {} {}: {e}", record.kind, record.uuid));
            if let (Some(intent), Some(_)) = (intent, &rollback) {
                // The device stays: so does the intent that proves it is ours.
                lock(&self.state)
                    .intents
                    .insert(record.uuid.clone(), intent);
            }
            return Err(EngineError::Batch {
                step: format!("recording {} {}", record.kind, record.uuid),
                source: Box::new(error),
                rollback_failures: rollback.into_iter().collect(),
            });
        }
        Ok(())
    }

    /// A VF of `pf` that no instance uses and no driver other than its own holds for a guest.
    fn pick_free_vf(
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
                            |r| r.uuid.clone(),
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

    /// Brings a batch's host view in line after one create: the `available_instances` of the
    /// mdev's parent's types are read again (a create on one type can move them all) and the
    /// new mdev is listed; any other outcome (a VF bound, a failure that may mean another
    /// caller took the room) drops the view, so the next step discovers afresh.
    fn update_placement_view(
        &self,
        view: &mut Option<Inventory>,
        target: &CreateTarget,
        created: &Result<InstanceRecord, EngineError>,
    ) {
        let (Some(inventory), CreateTarget::Mdev { parent, .. }, Ok(record)) =
            (view.as_mut(), target, created)
        else {
            *view = None;
            return;
        };
        let Some(cached) = inventory
            .mdev_parents
            .iter_mut()
            .find(|p| &p.name == parent)
        else {
            *view = None;
            return;
        };
        for mdev_type in &mut cached.types {
            let path = layout::mdev_type(parent, &mdev_type.id).join("available_instances");
            let Some(available) = self
                .fs()
                .read(&path)
                .ok()
                .and_then(|text| text.trim().parse::<u32>().ok())
            else {
                *view = None;
                return;
            };
            mdev_type.available_instances = available;
            if let Some(offered) = &mut mdev_type.offered {
                offered.available_instances = available;
            }
            if mdev_type.id == record.type_id {
                mdev_type.devices.push(record.uuid.clone());
            }
        }
        inventory.mdevs.push(MdevDevice {
            uuid: record.uuid.clone(),
            parent: record.parent.clone(),
            type_id: record.type_id.clone(),
            iommu_group: None,
            vfio_device: None,
        });
    }

    fn resolve_profile(
        &self,
        profile: &str,
        parent: Option<&str>,
        placement: PlacementRequest,
        inventory: &Inventory,
    ) -> Result<profiles::Resolved, EngineError> {
        if let Some(parent) = parent {
            names::check_sysfs_name("parent", parent)?;
        }
        let taken: Vec<PciAddress> = lock(&self.state)
            .instances
            .values()
            .filter_map(|r| r.vf)
            .collect();
        let profiles = self
            .profiles
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(found) = profiles.get(profile) {
            if let Some(target) = self.resolve_passthrough_profile(found, parent)? {
                return Ok(profiles::Resolved {
                    target,
                    default_weight: found.default_weight().get(),
                    compute_shares: (None, None),
                });
            }
        }
        let options = placement.or(self.config.placement).options(parent);
        profiles.resolve(
            profile,
            &options,
            inventory,
            &taken,
            &self.config.nvidia_mixed_mode_parents,
        )
    }
}

/// Why a function is no SR-IOV PF, with its GPU reasons when it is a GPU.
pub(crate) fn not_sriov_reason(host: &dyn HostFs, address: PciAddress) -> String {
    let base = "it has no sriov_totalvfs (not SR-IOV capable)";
    match discovery::gpus::read_other_gpu(host, address) {
        Some(gpu) => format!("{base}; {}", gpu.reason()),
        None => base.to_owned(),
    }
}

fn check_scheduling(scheduling: &Scheduling) -> Result<(), EngineError> {
    if let Some(weight) = scheduling.weight {
        if !(1..=10_000).contains(&weight) {
            return Err(EngineError::InvalidArgument {
                what: "weight",
                value: weight.to_string(),
                reason: "must be 1..=10000".into(),
            });
        }
    }
    Ok(())
}

fn missing_vf(record: &InstanceRecord) -> EngineError {
    EngineError::InvalidArgument {
        what: "instance record",
        value: record.uuid.clone(),
        reason: format!("a {} instance without a VF address", record.kind),
    }
}

pub(crate) fn claimed(uuid: &str, claim: &Claim) -> EngineError {
    EngineError::Claimed {
        uuid: uuid.to_owned(),
        domain_name: claim.domain_name.clone(),
        domain_uuid: claim.domain_uuid.clone(),
    }
}

fn describe_target(target: &CreateTarget) -> String {
    match target {
        CreateTarget::Mdev { parent, type_id } => format!("mdev type {type_id} on {parent}"),
        CreateTarget::Profile {
            profile,
            parent: Some(parent),
        } => format!("profile {profile} on {parent}"),
        CreateTarget::Profile {
            profile,
            parent: None,
        } => format!("profile {profile}"),
        CreateTarget::Vf { pf, vf: Some(vf) } => format!("VF {vf} of {pf}"),
        CreateTarget::Vf { pf, vf: None } => format!("a VF of {pf}"),
        CreateTarget::NvidiaVf {
            pf,
            type_id,
            vf: None,
        } => format!("NVIDIA vGPU type {type_id} on {pf}"),
        CreateTarget::NvidiaVf {
            pf,
            type_id,
            vf: Some(vf),
        } => format!("NVIDIA vGPU type {type_id} on VF {vf} of {pf}"),
        CreateTarget::Passthrough { gpu, .. } => format!("pass-through of GPU {gpu}"),
    }
}

/// The sysfs device path of an mdev record (the devices directory itself when its UUID does
/// not parse).
fn mdev_sysfs_path(record: &InstanceRecord) -> PathBuf {
    names::parse_uuid(&record.uuid)
        .map(|uuid| layout::mdev_device(&uuid))
        .unwrap_or_else(|_| Path::new(layout::MDEV_DEVICES).to_owned())
}

pub(crate) fn unmanaged_info(mdev: &MdevDevice) -> InstanceInfo {
    InstanceInfo {
        uuid: mdev.uuid.clone(),
        kind: InstanceKind::Mdev,
        parent: mdev.parent.clone(),
        type_id: mdev.type_id.clone(),
        profile: None,
        owner: None,
        active: true,
        persistent: false,
        autostart: false,
        claim: None,
        scheduling: Scheduling::default(),
        vf: None,
        iommu_group: mdev.iommu_group,
        sysfs_path: Path::new(layout::MDEV_DEVICES).join(&mdev.uuid),
    }
}

#[cfg(test)]
mod group_commit_tests;
#[cfg(test)]
mod intents_tests;
#[cfg(test)]
mod nvidia_sriov_tests;
#[cfg(test)]
mod nvidia_telemetry_tests;
#[cfg(test)]
mod other_gpu_tests;
#[cfg(test)]
mod race_tests;
#[cfg(test)]
mod tests;
