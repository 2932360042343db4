//! The crate-wide error classification.
//!
//! Every module keeps its own `thiserror` enum (the message says what failed and names the
//! thing); each of them answers `kind()` with one [`ErrorKind`], the workspace's one
//! classification (defined in `vgpu-types`), which the daemon sends as the D-Bus error name
//! `org.mdevmanager.VGpu1.Error.<Kind>`. This module adds what needs the host: the class of a
//! kernel or file-system answer.

use std::io;

pub use vgpu_types::ErrorKind;

/// The class of a kernel/file-system answer, from its errno (or `io::ErrorKind` when the error
/// carries no errno).
pub fn kind_of_io(error: &io::Error) -> ErrorKind {
    if let Some(errno) = error.raw_os_error() {
        return kind_of_errno(errno);
    }
    match error.kind() {
        io::ErrorKind::NotFound => ErrorKind::NotFound,
        io::ErrorKind::AlreadyExists => ErrorKind::AlreadyExists,
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => ErrorKind::InvalidArgs,
        io::ErrorKind::TimedOut => ErrorKind::TimedOut,
        io::ErrorKind::Interrupted => ErrorKind::Cancelled,
        io::ErrorKind::Unsupported => ErrorKind::NotSupported,
        _ => ErrorKind::Failed,
    }
}

/// The class of a raw errno as sysfs writes return it.
pub fn kind_of_errno(errno: i32) -> ErrorKind {
    match errno {
        libc::ENOENT | libc::ENODEV | libc::ENXIO => ErrorKind::NotFound,
        libc::EEXIST => ErrorKind::AlreadyExists,
        libc::ENOSPC | libc::EUSERS => ErrorKind::NoCapacity,
        // ERANGE is sriov_numvfs above sriov_totalvfs: the count asked for is out of range.
        libc::EINVAL | libc::ERANGE => ErrorKind::InvalidArgs,
        libc::EBUSY | libc::EAGAIN => ErrorKind::Busy,
        libc::ETIMEDOUT => ErrorKind::TimedOut,
        libc::EINTR | libc::ECANCELED => ErrorKind::Cancelled,
        libc::EOPNOTSUPP | libc::ENOSYS => ErrorKind::NotSupported,
        _ => ErrorKind::Failed,
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
                kind_of_io(&io::Error::from_raw_os_error(errno)),
                kind,
                "errno {errno}"
            );
        }
    }

    #[test]
    fn errors_without_errno_use_the_io_kind() {
        let error = io::Error::new(io::ErrorKind::TimedOut, "slow");
        assert_eq!(kind_of_io(&error), ErrorKind::TimedOut);
        assert_eq!(ErrorKind::TimedOut.to_string(), "TimedOut");
    }
}
