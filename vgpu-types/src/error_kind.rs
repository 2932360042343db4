//! The one classification of failures: what the engine reports, what the daemon sends as
//! `org.mdevmanager.VGpu1.Error.<Kind>` and what `vgpuctl` turns into its exit status.
//!
//! Every module keeps its own `thiserror` enum (the message says what failed and names the
//! thing); each answers `kind()` with one of these.

use std::fmt;

/// The class of a failure, as a caller can act on it. One D-Bus error name per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ErrorKind {
    /// A parent, type, instance, profile, VF, job or file that was named does not exist.
    NotFound,
    /// The UUID (or VF, or definition, or other key) is already taken.
    AlreadyExists,
    /// A process or a domain holds the device; the operation was refused without touching it.
    InUse,
    /// No parent has room for the request (`ENOSPC`/`EUSERS`, zero available instances).
    NoCapacity,
    /// The input itself is malformed, unknown or contradicts another (bad UUID, PCI address,
    /// path-like name, newline, count, option).
    InvalidArgs,
    /// The caller may not do this (polkit said no, or polkitd is absent and the caller is not
    /// root). Raised by the daemon only; the engine never decides authorization.
    NotAuthorized,
    /// The host or the device cannot do this (no SR-IOV, no mdev support, not ours to remove).
    NotSupported,
    /// The kernel answered `EBUSY`/`EAGAIN`, or another operation holds the resource.
    Busy,
    /// A bounded wait ran out (parent readiness, a blocking sysfs write, a device's answer).
    TimedOut,
    /// The operation was cancelled before it finished.
    Cancelled,
    /// Anything else (I/O failures, corrupt state, unexpected kernel answers).
    Failed,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 11] = [
        ErrorKind::NotFound,
        ErrorKind::AlreadyExists,
        ErrorKind::InUse,
        ErrorKind::NoCapacity,
        ErrorKind::InvalidArgs,
        ErrorKind::NotAuthorized,
        ErrorKind::NotSupported,
        ErrorKind::Busy,
        ErrorKind::TimedOut,
        ErrorKind::Cancelled,
        ErrorKind::Failed,
    ];

    /// The prefix of every D-Bus error name of the service.
    pub const DBUS_ERROR_PREFIX: &'static str = "org.mdevmanager.VGpu1.Error";

    /// The kind's name, which is also the last component of its D-Bus error name (`NotFound`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::NotFound => "NotFound",
            Self::AlreadyExists => "AlreadyExists",
            Self::InUse => "InUse",
            Self::NoCapacity => "NoCapacity",
            Self::InvalidArgs => "InvalidArgs",
            Self::NotAuthorized => "NotAuthorized",
            Self::NotSupported => "NotSupported",
            Self::Busy => "Busy",
            Self::TimedOut => "TimedOut",
            Self::Cancelled => "Cancelled",
            Self::Failed => "Failed",
        }
    }

    /// The same as [`ErrorKind::name`]: the last component of the D-Bus error name.
    pub const fn short_name(self) -> &'static str {
        self.name()
    }

    /// The kind of a name (`NotFound`); `None` for any other text.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The full D-Bus error name (`org.mdevmanager.VGpu1.Error.NotFound`).
    pub fn dbus_name(self) -> String {
        format!("{}.{}", Self::DBUS_ERROR_PREFIX, self.name())
    }

    /// Parses a full D-Bus error name; `None` for names outside this API.
    pub fn from_dbus_name(name: &str) -> Option<ErrorKind> {
        let short = name
            .strip_prefix(Self::DBUS_ERROR_PREFIX)?
            .strip_prefix('.')?;
        Self::from_name(short)
    }

    /// The `vgpuctl` exit status for this kind (documented in docs/vgpuctl.md); never 0 (success)
    /// or 2 (usage).
    pub const fn exit_code(self) -> u8 {
        match self {
            Self::Failed => 1,
            Self::NotFound => 3,
            Self::NoCapacity => 4,
            Self::NotAuthorized => 5,
            Self::InUse => 6,
            Self::AlreadyExists => 7,
            Self::InvalidArgs => 8,
            Self::NotSupported => 9,
            Self::Busy => 10,
            Self::TimedOut => 11,
            Self::Cancelled => 12,
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
    fn every_kind_round_trips_through_its_name_and_dbus_name() {
        for kind in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_name(kind.name()), Some(kind));
            assert_eq!(kind.to_string(), kind.name());
            let name = kind.dbus_name();
            assert_eq!(name, format!("org.mdevmanager.VGpu1.Error.{kind}"));
            assert_eq!(ErrorKind::from_dbus_name(&name), Some(kind));
            let stored = serde_json::to_string(&kind).unwrap();
            assert_eq!(stored, format!("\"{}\"", kind.name()));
        }
        let mut names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorKind::ALL.len(), "names are distinct");
    }

    #[test]
    fn foreign_names_are_not_parsed_as_ours() {
        for name in [
            "org.freedesktop.DBus.Error.Failed",
            "org.mdevmanager.VGpu1.Error.Nope",
            "org.mdevmanager.VGpu1.ErrorNotFound",
            "org.mdevmanager.VGpu1.Error.",
            "NotFound",
        ] {
            assert_eq!(ErrorKind::from_dbus_name(name), None, "{name}");
        }
        assert_eq!(ErrorKind::from_name("notfound"), None);
    }

    #[test]
    fn exit_codes_are_distinct_and_not_success_or_usage() {
        let mut codes: Vec<u8> = ErrorKind::ALL.iter().map(|k| k.exit_code()).collect();
        assert!(!codes.contains(&0) && !codes.contains(&2));
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), ErrorKind::ALL.len());
    }
}
