//! The service as every command reaches it: the connection with the global flags, the
//! listings several commands read, the proxies, and the option sets they send.

use std::collections::HashMap;

use dbus_api::names::{BUS_NAME, ROOT_PATH};
use dbus_api::options::{as_proxy_options, to_dict, ListTypesOptions, NoOptions};
use dbus_api::proxy::{InstanceProxy, ManagerProxy};
use dbus_api::wire::{InstanceRecord, MdevTypeRecord, Snapshot};
use dbus_api::{BusTarget, ClientError, ErrorKind};
use serde::Serialize;
use zbus::wire::Type;
use zbus::{Connection, OwnedVariant};

use crate::cli::Cli;
use crate::failure::{failure, Failure};

/// What a command that talks to the service gets: the connection and the global flags.
pub struct Session {
    /// The bus connection.
    pub connection: Connection,
    /// `--json`.
    pub json: bool,
    /// `--no-ask`.
    pub auth: Auth,
}

impl Session {
    /// Connects to the bus `cli` names.
    pub async fn connect(cli: &Cli) -> Result<Self, Failure> {
        let connection = dbus_api::connect(&target(cli)).await?;
        Ok(Self {
            connection,
            json: cli.json,
            auth: Auth { no_ask: cli.no_ask },
        })
    }
}

/// Whether the service may ask the caller to authenticate: the `auth.no_user_interaction` key
/// every option set carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Auth {
    /// `--no-ask`: never; fail with "not authorized" instead.
    pub no_ask: bool,
}

impl Auth {
    /// `auth.no_user_interaction`: set (true) with `--no-ask`, left out otherwise.
    pub fn no_user_interaction(self) -> Option<bool> {
        self.no_ask.then_some(true)
    }

    /// The options of a call that takes none of its own.
    pub fn no_options(self) -> NoOptions {
        NoOptions {
            no_user_interaction: self.no_user_interaction(),
        }
    }
}

/// The bus `--address`, `--session` or the system bus.
fn target(cli: &Cli) -> BusTarget {
    if let Some(address) = &cli.address {
        BusTarget::Address(address.clone())
    } else if cli.session {
        BusTarget::Session
    } else {
        BusTarget::System
    }
}

/// An option set as it goes on the wire (`a{sv}`), owned; pass [`Sent::proxy`] to a call.
/// The set is one of `dbus_api::options`, the struct the service reads the dict with, so a
/// key the service does not know cannot be sent.
pub struct Sent(HashMap<String, OwnedVariant>);

impl Sent {
    /// Encodes `options`.
    pub fn new<T: Serialize + Type>(options: &T) -> Self {
        Self(to_dict(options))
    }

    /// The dict as the proxies take it.
    pub fn proxy(&self) -> dbus_api::proxy::Options<'_> {
        as_proxy_options(&self.0)
    }

    /// The dict as the service receives it.
    #[cfg(test)]
    pub fn into_dict(self) -> HashMap<String, OwnedVariant> {
        self.0
    }
}

/// Every object the service exports, in one ObjectManager call.
pub async fn managed_objects(
    connection: &Connection,
) -> Result<zbus::fdo::ManagedObjects, Failure> {
    let manager = zbus::fdo::ObjectManagerProxy::builder(connection)
        .destination(BUS_NAME)
        .path(ROOT_PATH)
        .build()
        .await?;
    Ok(manager
        .get_managed_objects()
        .await
        .map_err(ClientError::from)?)
}

/// Everything the service exports, read into records.
pub async fn snapshot(connection: &Connection) -> Result<Snapshot, Failure> {
    let objects = managed_objects(connection).await?;
    Snapshot::from_managed_objects(objects).map_err(|e| Failure::new(e.to_string(), 1))
}

/// The Manager without property caching: the listings need no properties, and a caching proxy
/// would first subscribe to their changes (a round trip per command).
pub async fn manager(connection: &Connection) -> Result<ManagerProxy<'static>, Failure> {
    Ok(ManagerProxy::builder(connection)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?)
}

/// Whether the service predates a method (it answered `UnknownMethod`).
fn unknown_method(error: &zbus::Error) -> bool {
    matches!(error, zbus::Error::MethodError(name, _, _)
        if name.as_str() == "org.freedesktop.DBus.Error.UnknownMethod")
}

/// Every instance, from `Manager.ListInstances` (one reply); from the ObjectManager walk when
/// the service is older than that method.
pub async fn list_instances(connection: &Connection) -> Result<Vec<InstanceRecord>, Failure> {
    let sent = Sent::new(&NoOptions::default());
    match manager(connection)
        .await?
        .list_instances(sent.proxy())
        .await
    {
        Ok(entries) => Ok(dbus_api::wire::instances_from_entries(entries)),
        Err(error) if unknown_method(&error) => Ok(snapshot(connection).await?.instances),
        Err(error) => Err(ClientError::from(error).into()),
    }
}

/// The options of `Manager.ListTypes`: only `parent`'s types when one is named.
pub fn list_types_options(parent: Option<&str>) -> ListTypesOptions {
    ListTypesOptions {
        parent: parent.map(str::to_owned),
        ..ListTypesOptions::default()
    }
}

/// The mdev types (of one parent), from `Manager.ListTypes`; from the ObjectManager walk when
/// the service is older than that method.
pub async fn list_types(
    connection: &Connection,
    parent: Option<&str>,
) -> Result<Vec<MdevTypeRecord>, Failure> {
    let sent = Sent::new(&list_types_options(parent));
    match manager(connection).await?.list_types(sent.proxy()).await {
        Ok(entries) => Ok(dbus_api::wire::types_from_entries(entries)),
        Err(error) if unknown_method(&error) => {
            let snapshot = snapshot(connection).await?;
            if let Some(parent) = parent {
                if snapshot.parent(parent).is_none() {
                    return Err(failure(ErrorKind::NotFound, format!("no parent {parent}")));
                }
            }
            Ok(snapshot
                .types
                .into_iter()
                .filter(|t| parent.is_none_or(|p| t.parent.eq_ignore_ascii_case(p)))
                .collect())
        }
        Err(error) => Err(ClientError::from(error).into()),
    }
}

/// The instance `key` (a UUID) in `snapshot`, or `NotFound` naming it.
pub fn find_instance<'a>(snapshot: &'a Snapshot, key: &str) -> Result<&'a InstanceRecord, Failure> {
    snapshot
        .instance(key)
        .ok_or_else(|| failure(ErrorKind::NotFound, format!("no instance {key}")))
}

/// The Instance object of `record`, without property caching.
pub async fn instance_proxy<'a>(
    connection: &Connection,
    record: &InstanceRecord,
) -> Result<InstanceProxy<'a>, Failure> {
    Ok(InstanceProxy::builder(connection)
        .path(record.object.clone())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?)
}
