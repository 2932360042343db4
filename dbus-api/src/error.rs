//! Typed errors on the wire: the service sends `org.mdevmanager.VGpu1.Error.<Kind>` with a
//! message naming the object; clients parse the name back into an [`ErrorKind`].

/// What went wrong, as a client can act on it: the workspace's one classification
/// (`vgpu-types`), one D-Bus error name per kind (`ErrorKind::dbus_name`).
pub use vgpu_types::ErrorKind;

/// The error a service method replies with. Each variant carries the human-readable message,
/// which names the object (UUID, PCI address, profile, path).
#[derive(Debug, Clone, PartialEq, Eq, zbus::DBusError)]
#[zbus(prefix = "org.mdevmanager.VGpu1.Error")]
#[allow(missing_docs)] // The variants are the kinds of `ErrorKind`, documented there.
pub enum BusError {
    Failed(String),
    NotAuthorized(String),
    NotFound(String),
    AlreadyExists(String),
    InUse(String),
    NoCapacity(String),
    InvalidArgs(String),
    NotSupported(String),
    Busy(String),
    TimedOut(String),
    Cancelled(String),
}

impl BusError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        let message = message.into();
        match kind {
            ErrorKind::Failed => BusError::Failed(message),
            ErrorKind::NotAuthorized => BusError::NotAuthorized(message),
            ErrorKind::NotFound => BusError::NotFound(message),
            ErrorKind::AlreadyExists => BusError::AlreadyExists(message),
            ErrorKind::InUse => BusError::InUse(message),
            ErrorKind::NoCapacity => BusError::NoCapacity(message),
            ErrorKind::InvalidArgs => BusError::InvalidArgs(message),
            ErrorKind::NotSupported => BusError::NotSupported(message),
            ErrorKind::Busy => BusError::Busy(message),
            ErrorKind::TimedOut => BusError::TimedOut(message),
            ErrorKind::Cancelled => BusError::Cancelled(message),
        }
    }

    /// This error's kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            BusError::Failed(_) => ErrorKind::Failed,
            BusError::NotAuthorized(_) => ErrorKind::NotAuthorized,
            BusError::NotFound(_) => ErrorKind::NotFound,
            BusError::AlreadyExists(_) => ErrorKind::AlreadyExists,
            BusError::InUse(_) => ErrorKind::InUse,
            BusError::NoCapacity(_) => ErrorKind::NoCapacity,
            BusError::InvalidArgs(_) => ErrorKind::InvalidArgs,
            BusError::NotSupported(_) => ErrorKind::NotSupported,
            BusError::Busy(_) => ErrorKind::Busy,
            BusError::TimedOut(_) => ErrorKind::TimedOut,
            BusError::Cancelled(_) => ErrorKind::Cancelled,
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        match self {
            BusError::Failed(m)
            | BusError::NotAuthorized(m)
            | BusError::NotFound(m)
            | BusError::AlreadyExists(m)
            | BusError::InUse(m)
            | BusError::NoCapacity(m)
            | BusError::InvalidArgs(m)
            | BusError::NotSupported(m)
            | BusError::Busy(m)
            | BusError::TimedOut(m)
            | BusError::Cancelled(m) => m,
        }
    }
}

/// A failed call as a client sees it.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The service answered with one of its typed errors.
    #[error("{message}")]
    Service {
        /// The parsed kind.
        kind: ErrorKind,
        /// The message, naming the object.
        message: String,
    },
    /// The service is not running or not reachable on the bus.
    #[error("the mdev-manager service ({name}) is not available on this bus: {message}")]
    Unavailable {
        /// The D-Bus error name the bus answered with.
        name: String,
        /// The bus's message.
        message: String,
    },
    /// Some other D-Bus error (from the bus itself, or a standard error such as UnknownMethod).
    #[error("{name}: {message}")]
    Other {
        /// The D-Bus error name.
        name: String,
        /// Its message.
        message: String,
    },
    /// Talking to the bus failed (no bus, broken connection, bad reply).
    #[error("D-Bus connection failed")]
    Bus(#[source] zbus::Error),
}

impl ClientError {
    /// The kind when the service sent a typed error.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            ClientError::Service { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

impl From<zbus::Error> for ClientError {
    fn from(error: zbus::Error) -> Self {
        let (name, message) = match &error {
            zbus::Error::MethodError(name, message, _) => {
                (name.to_string(), message.clone().unwrap_or_default())
            }
            zbus::Error::FDO(fdo) => {
                let name = zbus::DBusError::name(fdo.as_ref()).to_string();
                let message = zbus::DBusError::description(fdo.as_ref())
                    .unwrap_or_default()
                    .to_string();
                (name, message)
            }
            _ => return ClientError::Bus(error),
        };
        if let Some(kind) = ErrorKind::from_dbus_name(&name) {
            return ClientError::Service { kind, message };
        }
        const UNAVAILABLE: [&str; 3] = [
            "org.freedesktop.DBus.Error.ServiceUnknown",
            "org.freedesktop.DBus.Error.NameHasNoOwner",
            "org.freedesktop.DBus.Error.NoReply",
        ];
        if UNAVAILABLE.contains(&name.as_str()) {
            return ClientError::Unavailable { name, message };
        }
        ClientError::Other { name, message }
    }
}

impl From<zbus::fdo::Error> for ClientError {
    fn from(error: zbus::fdo::Error) -> Self {
        ClientError::from(zbus::Error::from(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_its_dbus_name() {
        for kind in ErrorKind::ALL {
            let name = kind.dbus_name();
            assert!(name.starts_with("org.mdevmanager.VGpu1.Error."), "{name}");
            assert_eq!(ErrorKind::from_dbus_name(&name), Some(kind));
            assert_eq!(BusError::new(kind, "m").kind(), kind);
            let bus_name = zbus::DBusError::name(&BusError::new(kind, "m")).to_string();
            assert_eq!(bus_name, name, "derived name and documented name agree");
        }
    }

    #[test]
    fn foreign_names_are_not_parsed_as_ours() {
        assert_eq!(
            ErrorKind::from_dbus_name("org.freedesktop.DBus.Error.Failed"),
            None
        );
        assert_eq!(
            ErrorKind::from_dbus_name("org.mdevmanager.VGpu1.Error.Nope"),
            None
        );
        assert_eq!(
            ErrorKind::from_dbus_name("org.mdevmanager.VGpu1.ErrorNotFound"),
            None
        );
    }

    #[test]
    fn exit_codes_are_distinct_and_not_usage_code() {
        let mut codes: Vec<u8> = ErrorKind::ALL.iter().map(|k| k.exit_code()).collect();
        assert!(!codes.contains(&0) && !codes.contains(&2));
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), ErrorKind::ALL.len());
    }
}
