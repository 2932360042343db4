//! [`EngineError`]: every way an engine operation fails, each naming the device, UUID, parent
//! or path it is about, and its [`ErrorKind`] (which maps 1:1 to a D-Bus error name).

use std::path::PathBuf;
use std::time::Duration;

use super::{apply, passthrough, ErrorKind, Holder, NameError};

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

/// The ", rolled back" or "; rollback incomplete: ..." tail of a batch error.
pub(super) fn rollback_note(failures: &[String]) -> String {
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
            Self::Sysfs { source, .. } => mdev_host::error::kind_of_io(source),
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

/// A malformed PCI address is bad input, reported as the name error it has always been.
impl From<vgpu_types::PciAddressError> for EngineError {
    fn from(error: vgpu_types::PciAddressError) -> Self {
        EngineError::Name(error.into())
    }
}

/// A malformed UUID is bad input, reported as the name error it has always been.
impl From<vgpu_types::UuidError> for EngineError {
    fn from(error: vgpu_types::UuidError) -> Self {
        EngineError::Name(error.into())
    }
}
