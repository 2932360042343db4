//! The engine: the one public surface the daemon calls (see `docs/engine-api.md`).
//!
//! It is synchronous and `Send + Sync`: the daemon calls it from `spawn_blocking`. Operations on
//! one parent are serialized by a per-parent lock; different parents proceed in parallel.
//! Every change to what the manager owns is written to the state store before the call returns.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::discovery::names::{NameError, PciAddress};
pub use crate::discovery::{
    Inventory, MdevDevice, MdevParent, MdevType, NvidiaVfState, SriovPf, VirtualFunction,
};
pub use crate::error::ErrorKind;
pub use crate::holders::Holder;
pub use crate::hotplug::{HostEvent, HostEventAction, HostEvents};
pub use crate::state::{Claim, DiskFiles, InstanceKind, Owner, Scheduling, StateFiles};

use crate::discovery::layout;
use crate::host::HostFs;

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
    #[error("{what} is in use: {}", crate::holders::describe(holders))]
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
    Discovery(#[from] crate::discovery::DiscoveryError),
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
            Self::InUse { .. } | Self::Claimed { .. } => ErrorKind::InUse,
            Self::NotOwned { .. } | Self::NotSupported { .. } => ErrorKind::NotSupported,
            Self::ParentNotReady { .. } | Self::WriteTimedOut { .. } => ErrorKind::TimedOut,
            Self::TooManyStuckWrites { .. } => ErrorKind::Busy,
            Self::Sysfs { source, .. } => ErrorKind::from_io(source),
            Self::Discovery(error) => error.kind(),
            Self::State(error) => error.kind(),
            Self::Profile { .. } => ErrorKind::InvalidArgs,
            Self::Batch { source, .. } => source.kind(),
        }
    }
}

/// The engine. Cheap to share (`Arc<Engine>`); every method takes `&self`.
#[derive(Debug)]
pub struct Engine {
    host: Arc<dyn HostFs>,
    files: Arc<dyn StateFiles>,
    config: EngineConfig,
}

impl Engine {
    /// Opens the engine: loads the state store and the profiles. Does not touch devices (call
    /// [`Engine::reconcile`] for that).
    pub fn new(
        host: Arc<dyn HostFs>,
        files: Arc<dyn StateFiles>,
        config: EngineConfig,
    ) -> Result<Self, EngineError> {
        let _ = (&host, &files, &config);
        todo!()
    }

    /// The configuration in use.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The host the engine works on.
    pub fn host(&self) -> &Arc<dyn HostFs> {
        &self.host
    }

    /// A fresh discovery of the host.
    pub fn inventory(&self) -> Result<Inventory, EngineError> {
        todo!()
    }

    /// Every instance: known records (active or defined) and unmanaged mdevs on the host
    /// (`owner == None`), sorted by UUID.
    pub fn instances(&self) -> Result<Vec<InstanceInfo>, EngineError> {
        todo!()
    }

    /// One instance by UUID.
    pub fn instance(&self, uuid: &str) -> Result<InstanceInfo, EngineError> {
        let _ = uuid;
        todo!()
    }

    /// Creates one instance (see [`Engine::create_batch`]).
    pub fn create(&self, request: CreateRequest) -> Result<InstanceInfo, EngineError> {
        let _ = request;
        todo!()
    }

    /// Creates every instance or none: a failure part-way rolls back what the batch did and
    /// returns [`EngineError::Batch`] naming the step and its cause.
    pub fn create_batch(
        &self,
        requests: Vec<CreateRequest>,
    ) -> Result<Vec<InstanceInfo>, EngineError> {
        let _ = requests;
        todo!()
    }

    /// Starts a defined (persistent, inactive) instance.
    pub fn start(&self, uuid: &str) -> Result<InstanceInfo, EngineError> {
        let _ = uuid;
        todo!()
    }

    /// Removes the device but keeps a persistent definition (a transient record is dropped).
    pub fn stop(&self, uuid: &str, options: DestroyOptions) -> Result<(), EngineError> {
        let _ = (uuid, options);
        todo!()
    }

    /// Removes the device (if active) and forgets the instance.
    pub fn destroy(&self, uuid: &str, options: DestroyOptions) -> Result<(), EngineError> {
        let _ = (uuid, options);
        todo!()
    }

    /// Takes over an mdev the manager did not create, so it may be managed and removed.
    pub fn adopt(&self, uuid: &str) -> Result<InstanceInfo, EngineError> {
        let _ = uuid;
        todo!()
    }

    /// Changes persistence/autostart of a known instance (`autostart` implies `persistent`).
    pub fn set_persistence(
        &self,
        uuid: &str,
        persistent: bool,
        autostart: bool,
    ) -> Result<InstanceInfo, EngineError> {
        let _ = (uuid, persistent, autostart);
        todo!()
    }

    /// Records an instance's scheduling fields.
    pub fn set_scheduling(
        &self,
        uuid: &str,
        scheduling: Scheduling,
    ) -> Result<InstanceInfo, EngineError> {
        let _ = (uuid, scheduling);
        todo!()
    }

    /// A parent's stored scheduling policy.
    pub fn parent_schedule(&self, parent: &str) -> Option<serde_json::Value> {
        let _ = parent;
        todo!()
    }

    /// Stores a parent's scheduling policy (opaque to the engine).
    pub fn set_parent_schedule(
        &self,
        parent: &str,
        schedule: serde_json::Value,
    ) -> Result<(), EngineError> {
        let _ = (parent, schedule);
        todo!()
    }

    /// Sets a PF's VF count (autoprobe off first, `0` first when changing a non-zero count).
    /// Refuses when any VF is held by a process, bound to vfio-pci by us, or an instance.
    /// Returns the VF addresses now enabled.
    pub fn set_num_vfs(
        &self,
        pf: &str,
        num_vfs: u32,
        options: DestroyOptions,
    ) -> Result<Vec<PciAddress>, EngineError> {
        let _ = (pf, num_vfs, options);
        todo!()
    }

    /// Claims every device a domain asks for, all or nothing.
    pub fn claim_domain(
        &self,
        domain: &DomainRef,
        devices: &[DeviceRequest],
    ) -> Result<Vec<InstanceInfo>, EngineError> {
        let _ = (domain, devices);
        todo!()
    }

    /// Releases a domain's claims: destroys its transient instances, drops the claim on
    /// persistent ones. Idempotent.
    pub fn release_domain(&self, domain: &DomainRef) -> Result<ReleaseReport, EngineError> {
        let _ = domain;
        todo!()
    }

    /// Compares what a running domain should hold with what exists; never fails for drift.
    pub fn verify_domain(&self, domain: &DomainRef, devices: &[DeviceRequest]) -> Vec<String> {
        let _ = (domain, devices);
        todo!()
    }

    /// Brings the host in line with the desired state (see [`ReconcileReport`]).
    pub fn reconcile(&self) -> Result<ReconcileReport, EngineError> {
        todo!()
    }

    /// Imports mdevctl definitions (`/etc/mdevctl.d/<parent>/<uuid>`) as adopted persistent
    /// instances.
    pub fn import_mdevctl(&self) -> Result<ImportReport, EngineError> {
        todo!()
    }

    /// Re-reads the profiles directory. Returns how many profiles are loaded.
    pub fn reload_profiles(&self) -> Result<usize, EngineError> {
        todo!()
    }

    /// The loaded profiles, sorted by name.
    pub fn profiles(&self) -> Vec<ProfileSummary> {
        todo!()
    }

    /// Waits (bounded by `timeout`, default [`EngineConfig::readiness_timeout`]) until `parent`
    /// is registered as an mdev parent or present as a PCI device.
    pub fn wait_for_parent(
        &self,
        parent: &str,
        timeout: Option<Duration>,
    ) -> Result<(), EngineError> {
        let _ = (parent, timeout);
        todo!()
    }

    /// Subscribes to engine events.
    pub fn subscribe(&self) -> EventSubscription {
        todo!()
    }

    /// Applies one host event to the model and emits the matching [`EngineEvent`]s.
    pub fn handle_host_event(&self, event: &HostEvent) {
        let _ = event;
        todo!()
    }

    /// Runs a thread feeding `source` into [`Engine::handle_host_event`] until the source
    /// closes or `stop` is set.
    pub fn spawn_hotplug(
        self: &Arc<Self>,
        source: Box<dyn HostEvents>,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        let _ = (source, stop);
        todo!()
    }

    /// How many sysfs writes are still blocked in the kernel after timing out.
    pub fn stuck_writes(&self) -> usize {
        todo!()
    }
}
