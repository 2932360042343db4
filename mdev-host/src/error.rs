//! The crate-wide error classification.
//!
//! Every module keeps its own `thiserror` enum (the message says what failed and names the
//! thing); each of them answers `kind()` with one of these classes, which the daemon maps 1:1
//! onto the D-Bus error names `org.mdevmanager.VGpu1.Error.<Kind>`.

use std::fmt;
use std::io;

/// The class of an engine failure, independent of which module raised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ErrorKind {
    /// A parent, type, instance, profile, VF or file that was named does not exist.
    NotFound,
    /// The UUID (or VF, or definition) is already taken.
    AlreadyExists,
    /// A process or a domain holds the device; the operation was refused without touching it.
    InUse,
    /// No parent has room for the request (`ENOSPC`/`EUSERS`, zero available instances).
    NoCapacity,
    /// The input itself is malformed (bad UUID, PCI address, path-like name, newline, count).
    InvalidArgs,
    /// The host or the device cannot do this (no SR-IOV, not ours to remove, ...).
    NotSupported,
    /// The kernel answered `EBUSY`/`EAGAIN`, or another operation holds the resource.
    Busy,
    /// A bounded wait ran out (parent readiness, a blocking sysfs write).
    TimedOut,
    /// The operation was cancelled before it finished.
    Cancelled,
    /// Anything else (I/O failures, corrupt state, unexpected kernel answers).
    Failed,
}

impl ErrorKind {
    /// Every class, in declaration order.
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::NotFound,
        ErrorKind::AlreadyExists,
        ErrorKind::InUse,
        ErrorKind::NoCapacity,
        ErrorKind::InvalidArgs,
        ErrorKind::NotSupported,
        ErrorKind::Busy,
        ErrorKind::TimedOut,
        ErrorKind::Cancelled,
        ErrorKind::Failed,
    ];

    /// The class of a kernel/file-system answer, from its errno (or `io::ErrorKind` when the
    /// error carries no errno).
    pub fn from_io(error: &io::Error) -> Self {
        if let Some(errno) = error.raw_os_error() {
            return Self::from_errno(errno);
        }
        match error.kind() {
            io::ErrorKind::NotFound => Self::NotFound,
            io::ErrorKind::AlreadyExists => Self::AlreadyExists,
            io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => Self::InvalidArgs,
            io::ErrorKind::TimedOut => Self::TimedOut,
            io::ErrorKind::Interrupted => Self::Cancelled,
            io::ErrorKind::Unsupported => Self::NotSupported,
            _ => Self::Failed,
        }
    }

    /// The class of a raw errno as sysfs writes return it.
    pub fn from_errno(errno: i32) -> Self {
        match errno {
            libc::ENOENT | libc::ENODEV | libc::ENXIO => Self::NotFound,
            libc::EEXIST => Self::AlreadyExists,
            libc::ENOSPC | libc::EUSERS => Self::NoCapacity,
            // ERANGE is sriov_numvfs above sriov_totalvfs: the count asked for is out of range.
            libc::EINVAL | libc::ERANGE => Self::InvalidArgs,
            libc::EBUSY | libc::EAGAIN => Self::Busy,
            libc::ETIMEDOUT => Self::TimedOut,
            libc::EINTR | libc::ECANCELED => Self::Cancelled,
            libc::EOPNOTSUPP | libc::ENOSYS => Self::NotSupported,
            _ => Self::Failed,
        }
    }

    /// The D-Bus error name suffix (`org.mdevmanager.VGpu1.Error.<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Self::NotFound => "NotFound",
            Self::AlreadyExists => "AlreadyExists",
            Self::InUse => "InUse",
            Self::NoCapacity => "NoCapacity",
            Self::InvalidArgs => "InvalidArgs",
            Self::NotSupported => "NotSupported",
            Self::Busy => "Busy",
            Self::TimedOut => "TimedOut",
            Self::Cancelled => "Cancelled",
            Self::Failed => "Failed",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_errnos_map_to_the_documented_kinds() {
        let cases = [
            (libc::EEXIST, ErrorKind::AlreadyExists),
            (libc::ENOSPC, ErrorKind::NoCapacity),
            (libc::EUSERS, ErrorKind::NoCapacity),
            (libc::EBUSY, ErrorKind::Busy),
            (libc::EINVAL, ErrorKind::InvalidArgs),
            (libc::ENODEV, ErrorKind::NotFound),
            (libc::ENOENT, ErrorKind::NotFound),
            (libc::EIO, ErrorKind::Failed),
        ];
        for (errno, kind) in cases {
            assert_eq!(
                ErrorKind::from_io(&io::Error::from_raw_os_error(errno)),
                kind,
                "errno {errno}"
            );
        }
    }

    #[test]
    fn errors_without_errno_use_the_io_kind() {
        let error = io::Error::new(io::ErrorKind::TimedOut, "slow");
        assert_eq!(ErrorKind::from_io(&error), ErrorKind::TimedOut);
        assert_eq!(ErrorKind::TimedOut.to_string(), "TimedOut");
    }
}
