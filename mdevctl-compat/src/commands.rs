//! The subcommands, each a pure D-Bus client of the mdev-manager service: listings come from
//! `Manager.ListInstances` / `ListTypes`, changes go through the `Instance` methods, so every
//! change is the service's (authorization, state, claims) and its errors are the service's.
//!
//! What the service cannot do yet is refused with [`CommandError::NotSupported`] before
//! anything changes (docs/libvirt.md, "Node devices"): mdev attributes and changing the type
//! of a definition.

use crate::cli;
use crate::definition::{Definition, DefinitionError};
use crate::format::{self, Device, Listing, TypeInfo};
use dbus_api::proxy::{InstanceProxy, ManagerProxy, Options};
use dbus_api::{ClientError, ErrorKind};
use std::io::Write;
use uuid::Uuid;

/// Why a subcommand failed (printed as `Error: ...`, exit status 1, as mdevctl does).
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The service refused or failed; its message names the device and why.
    #[error("{0}")]
    Service(#[from] ClientError),
    /// The `--jsonfile` definition.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    /// No instance with this UUID (on this parent) has a definition.
    #[error("No defined device {uuid}{}", on_parent(.parent))]
    NotDefined {
        /// The UUID asked for.
        uuid: Uuid,
        /// The parent asked for.
        parent: Option<String>,
    },
    /// No running device with this UUID.
    #[error("Device {uuid} is not active")]
    NotActive {
        /// The UUID asked for.
        uuid: Uuid,
    },
    /// The request is contradictory or incomplete (mdevctl's own checks).
    #[error("{0}")]
    Invalid(String),
    /// mdev-manager cannot do this (yet); the message says what and what to do instead.
    #[error("{0}")]
    NotSupported(String),
    /// Writing the listing failed.
    #[error("Failed to write data: {0}")]
    Output(#[from] std::io::Error),
}

fn on_parent(parent: &Option<String>) -> String {
    parent
        .as_ref()
        .map(|p| format!(" on parent {p}"))
        .unwrap_or_default()
}

fn no_options() -> Options<'static> {
    Options::new()
}

/// `SetAutostart` options that keep (`true`) or drop (`false`) the definition.
fn persistence(persistent: bool) -> Options<'static> {
    Options::from([(dbus_api::names::option::PERSISTENT, persistent.into())])
}

/// The service's mdev instances as mdevctl devices.
async fn devices(manager: &ManagerProxy<'_>) -> Result<Vec<Device>, CommandError> {
    let entries = manager
        .list_instances(no_options())
        .await
        .map_err(ClientError::from)?;
    Ok(entries
        .into_iter()
        .filter(|entry| entry.kind == "mdev")
        .map(|entry| Device {
            uuid: entry.uuid,
            parent: entry.parent_name,
            mdev_type: entry.mdev_type,
            autostart: entry.autostart,
            attrs: Vec::new(),
            active: entry.active,
            defined: entry.persistent,
        })
        .collect())
}

/// The one device with `uuid` (and `parent` when given).
async fn find(
    manager: &ManagerProxy<'_>,
    uuid: Uuid,
    parent: Option<&str>,
) -> Result<Option<Device>, CommandError> {
    let uuid = uuid.hyphenated().to_string();
    Ok(devices(manager)
        .await?
        .into_iter()
        .find(|d| d.uuid == uuid && parent.is_none_or(|p| p == d.parent)))
}

async fn instance<'a>(
    connection: &'a zbus::Connection,
    uuid: &str,
) -> Result<InstanceProxy<'a>, CommandError> {
    let proxy = InstanceProxy::builder(connection)
        .path(dbus_api::path::mdev_instance_path(uuid))
        .build()
        .await
        .map_err(ClientError::from)?;
    Ok(proxy)
}

fn type_change_unsupported(uuid: &str) -> CommandError {
    CommandError::NotSupported(format!(
        "device {uuid}: changing the mdev type of a definition is not supported by \
         mdev-manager yet; undefine it and define it again with the new type"
    ))
}

fn attrs_unsupported(uuid: &str) -> CommandError {
    CommandError::NotSupported(format!(
        "device {uuid}: mdev attributes (attrs) are not supported by mdev-manager yet"
    ))
}

/// `mdevctl list`.
pub async fn list(
    connection: &zbus::Connection,
    args: &cli::List,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(ClientError::from)?;
    let listing = if args.defined {
        Listing::Defined
    } else {
        Listing::Active
    };
    let uuid = args.uuid.map(|u| u.hyphenated().to_string());
    let selected: Vec<Device> = devices(&manager)
        .await?
        .into_iter()
        .filter(|d| match listing {
            Listing::Active => d.active,
            Listing::Defined => d.defined,
        })
        .filter(|d| uuid.as_ref().is_none_or(|u| *u == d.uuid))
        .filter(|d| args.parent.as_ref().is_none_or(|p| *p == d.parent))
        .collect();
    let text = if args.dumpjson {
        format::list_json(&selected, args.uuid.is_some())
    } else {
        format::list_text(&selected, listing, args.verbose)
    };
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// `mdevctl types`.
pub async fn types(
    connection: &zbus::Connection,
    args: &cli::Types,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(ClientError::from)?;
    let mut options = no_options();
    if let Some(parent) = &args.parent {
        options.insert("parent", parent.as_str().into());
    }
    let entries = match manager.list_types(options).await.map_err(ClientError::from) {
        Ok(entries) => entries,
        // mdevctl lists nothing for a parent it does not have.
        Err(error) if error.kind() == Some(ErrorKind::NotFound) => Vec::new(),
        Err(error) => return Err(error.into()),
    };
    let types: Vec<TypeInfo> = entries
        .into_iter()
        .filter(|t| args.parent.as_ref().is_none_or(|p| *p == t.parent_name))
        .map(|t| TypeInfo {
            parent: t.parent_name,
            id: t.id,
            available_instances: t.available_instances,
            device_api: t.device_api,
            name: t.name.trim().to_string(),
            description: format::description_line(&t.description),
        })
        .collect();
    let text = if args.dumpjson {
        format::types_json(&types)
    } else {
        format::types_text(&types)
    };
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// Creates an mdev of `mdev_type` on `parent` through the service (`CreateInstances` with
/// option `type`); returns its UUID.
async fn create(
    connection: &zbus::Connection,
    manager: &ManagerProxy<'_>,
    target: NewDevice<'_>,
) -> Result<String, CommandError> {
    // Only the keys set are sent (a service older than a key refuses unknown keys).
    let sent = dbus_api::options::to_dict(&dbus_api::options::CreateOptions {
        parent: Some(target.parent.to_owned()),
        mdev_type: Some(target.mdev_type.to_owned()),
        uuid: target.uuid.map(|uuid| uuid.hyphenated().to_string()),
        persistent: target.persistent.then_some(true),
        autostart: target.autostart.then_some(true),
        ..Default::default()
    });
    let paths = manager
        .create_instances("", dbus_api::options::as_proxy_options(&sent))
        .await
        .map_err(ClientError::from)?;
    let path = paths.into_iter().next().ok_or_else(|| {
        CommandError::Invalid(format!(
            "the service created no device of type {} on {}",
            target.mdev_type, target.parent
        ))
    })?;
    let proxy = InstanceProxy::builder(connection)
        .path(path)
        .build()
        .await
        .map_err(ClientError::from)?;
    Ok(proxy.uuid().await.map_err(ClientError::from)?)
}

/// What [`create`] makes.
struct NewDevice<'a> {
    parent: &'a str,
    mdev_type: &'a str,
    uuid: Option<Uuid>,
    persistent: bool,
    autostart: bool,
}

/// `mdevctl start`: a defined device by UUID, or a new transient device from `--parent` and
/// `--type` or `--jsonfile` (its UUID printed when mdevctl would print it: none was given).
pub async fn start(
    connection: &zbus::Connection,
    args: &cli::Start,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(ClientError::from)?;
    let (parent, mdev_type) = match &args.jsonfile {
        Some(path) => {
            let definition = Definition::read(path)?;
            let Some(parent) = &args.parent else {
                return Err(CommandError::Invalid(
                    "Parent device required to start device via json file".into(),
                ));
            };
            if !definition.attrs.is_empty() {
                return Err(attrs_unsupported(
                    &args.uuid.map(|u| u.to_string()).unwrap_or_default(),
                ));
            }
            (parent.clone(), definition.mdev_type)
        }
        None => {
            if let Some(uuid) = args.uuid {
                let defined = find(&manager, uuid, args.parent.as_deref())
                    .await?
                    .filter(|d| d.defined);
                if let Some(device) = defined {
                    if args
                        .mdev_type
                        .as_ref()
                        .is_some_and(|t| *t != device.mdev_type)
                    {
                        return Err(CommandError::Invalid(format!(
                            "Device {} already exists on parent {} with type {}",
                            device.uuid, device.parent, device.mdev_type
                        )));
                    }
                    instance(connection, &device.uuid)
                        .await?
                        .start(no_options())
                        .await
                        .map_err(ClientError::from)?;
                    return Ok(());
                }
            }
            match (&args.parent, &args.mdev_type) {
                (Some(parent), Some(mdev_type)) => (parent.clone(), mdev_type.clone()),
                (None, Some(_)) => {
                    return Err(CommandError::Invalid(
                        "can't provide type without parent".into(),
                    ))
                }
                _ => match args.uuid {
                    Some(uuid) if args.parent.is_none() => {
                        return Err(CommandError::NotDefined { uuid, parent: None })
                    }
                    _ => {
                        return Err(CommandError::Invalid(
                            "Device is insufficiently specified".into(),
                        ))
                    }
                },
            }
        }
    };
    let uuid = create(
        connection,
        &manager,
        NewDevice {
            parent: &parent,
            mdev_type: &mdev_type,
            uuid: args.uuid,
            persistent: false,
            autostart: false,
        },
    )
    .await?;
    if args.uuid.is_none() {
        writeln!(out, "{uuid}")?;
    }
    Ok(())
}

/// `mdevctl stop`: a defined device keeps its definition, a transient one is removed.
pub async fn stop(connection: &zbus::Connection, args: &cli::Stop) -> Result<(), CommandError> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(ClientError::from)?;
    let device = find(&manager, args.uuid, None)
        .await?
        .filter(|d| d.active)
        .ok_or(CommandError::NotActive { uuid: args.uuid })?;
    let proxy = instance(connection, &device.uuid).await?;
    if device.defined {
        proxy.stop(no_options()).await
    } else {
        proxy.destroy(no_options()).await
    }
    .map_err(ClientError::from)?;
    Ok(())
}

/// `mdevctl undefine`: forgets a definition; a running device keeps running (as transient).
pub async fn undefine(
    connection: &zbus::Connection,
    args: &cli::Undefine,
) -> Result<(), CommandError> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(ClientError::from)?;
    let device = find(&manager, args.uuid, args.parent.as_deref())
        .await?
        .filter(|d| d.defined)
        .ok_or_else(|| CommandError::Invalid("No devices match the specified uuid".into()))?;
    let proxy = instance(connection, &device.uuid).await?;
    if device.active {
        // The running device stays; only its definition goes (it becomes transient).
        proxy.set_autostart(false, persistence(false)).await
    } else {
        proxy.destroy(no_options()).await
    }
    .map_err(ClientError::from)?;
    Ok(())
}

/// `mdevctl define`: a running transient device gets a definition (`define --uuid U`);
/// otherwise a new definition from `--parent` and `--type` or `--jsonfile`. The service makes
/// a definition by creating the device, so a new one is created and then stopped: it needs
/// room on the parent for that moment (docs/libvirt.md).
pub async fn define(
    connection: &zbus::Connection,
    args: &cli::Define,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(ClientError::from)?;
    let definition = args.jsonfile.as_deref().map(Definition::read).transpose()?;
    let wanted_type = definition
        .as_ref()
        .map(|d| d.mdev_type.clone())
        .or_else(|| args.mdev_type.clone());
    let autostart = definition
        .as_ref()
        .map(|d| d.autostart)
        .unwrap_or(args.auto);
    if definition.as_ref().is_some_and(|d| !d.attrs.is_empty()) {
        return Err(attrs_unsupported(
            &args.uuid.map(|u| u.to_string()).unwrap_or_default(),
        ));
    }
    let existing = match args.uuid {
        Some(uuid) => find(&manager, uuid, args.parent.as_deref()).await?,
        None => None,
    };
    if let Some(device) = existing {
        if device.defined {
            return Err(CommandError::Invalid(format!(
                "Device {} on {} already defined",
                device.uuid, device.parent
            )));
        }
        if wanted_type.as_ref().is_some_and(|t| *t != device.mdev_type) {
            return Err(CommandError::Invalid(format!(
                "Device {} is running with type {}: define it with that type or stop it first",
                device.uuid, device.mdev_type
            )));
        }
        instance(connection, &device.uuid)
            .await?
            .set_autostart(autostart, persistence(true))
            .await
            .map_err(ClientError::from)?;
        return Ok(());
    }
    let Some(parent) = &args.parent else {
        return Err(CommandError::Invalid("No parent specified".into()));
    };
    let Some(mdev_type) = &wanted_type else {
        return Err(CommandError::Invalid("No type specified".into()));
    };
    let uuid = create(
        connection,
        &manager,
        NewDevice {
            parent,
            mdev_type,
            uuid: args.uuid,
            persistent: true,
            autostart,
        },
    )
    .await?;
    instance(connection, &uuid)
        .await?
        .stop(no_options())
        .await
        .map_err(ClientError::from)?;
    if args.uuid.is_none() {
        writeln!(out, "{uuid}")?;
    }
    Ok(())
}

/// `mdevctl modify`: the start mode of a definition (`--auto`, `--manual`, or `start` of a
/// `--jsonfile` with the same type and no attributes).
pub async fn modify(connection: &zbus::Connection, args: &cli::Modify) -> Result<(), CommandError> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(ClientError::from)?;
    let uuid_text = args.uuid.hyphenated().to_string();
    if args.addattr.is_some() || args.delattr {
        return Err(attrs_unsupported(&uuid_text));
    }
    let definition = args.jsonfile.as_deref().map(Definition::read).transpose()?;
    if args.live {
        if args.auto || args.manual {
            let which = if args.auto { "auto" } else { "manual" };
            return Err(CommandError::Invalid(format!(
                "'{which}' cannot be changed on active mdev"
            )));
        }
        let active = find(&manager, args.uuid, args.parent.as_deref())
            .await?
            .filter(|d| d.active)
            .ok_or(CommandError::NotActive { uuid: args.uuid })?;
        let Some(definition) = &definition else {
            return Err(CommandError::Invalid(
                "'live' option must be used with 'jsonfile' option".into(),
            ));
        };
        if definition.mdev_type != active.mdev_type {
            return Err(CommandError::Invalid(
                "'type' cannot be changed on active mdev".into(),
            ));
        }
        if !definition.attrs.is_empty() {
            return Err(attrs_unsupported(&uuid_text));
        }
        if !args.defined {
            // Nothing of a running device without attributes changes.
            return Ok(());
        }
    }
    let device = find(&manager, args.uuid, args.parent.as_deref())
        .await?
        .filter(|d| d.defined)
        .ok_or_else(|| CommandError::NotDefined {
            uuid: args.uuid,
            parent: args.parent.clone(),
        })?;
    let autostart = match &definition {
        Some(definition) => {
            if args.parent.is_none() {
                return Err(CommandError::Invalid(
                    "Parent device required to modify device via json file".into(),
                ));
            }
            if definition.mdev_type != device.mdev_type {
                return Err(type_change_unsupported(&uuid_text));
            }
            if !definition.attrs.is_empty() {
                return Err(attrs_unsupported(&uuid_text));
            }
            definition.autostart
        }
        None => {
            if args.auto && args.manual {
                return Err(CommandError::Invalid(
                    "'auto' and 'manual' are mutually exclusive".into(),
                ));
            }
            if args
                .mdev_type
                .as_ref()
                .is_some_and(|t| *t != device.mdev_type)
            {
                return Err(type_change_unsupported(&uuid_text));
            }
            if args.auto {
                true
            } else if args.manual {
                false
            } else {
                device.autostart
            }
        }
    };
    if autostart != device.autostart {
        instance(connection, &device.uuid)
            .await?
            .set_autostart(autostart, no_options())
            .await
            .map_err(ClientError::from)?;
    }
    Ok(())
}

/// `mdevctl start-parent-mdevs PARENT`: starts the parent's stopped autostart definitions; a
/// failure is reported on stderr and the others are still started (exit 0, as mdevctl).
pub async fn start_parent_mdevs(
    connection: &zbus::Connection,
    args: &cli::StartParentMdevs,
) -> Result<(), CommandError> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(ClientError::from)?;
    for device in devices(&manager).await? {
        if device.parent != args.parent || !device.defined || !device.autostart || device.active {
            continue;
        }
        let started = match instance(connection, &device.uuid).await {
            Ok(proxy) => proxy
                .start(no_options())
                .await
                .map_err(|e| CommandError::Service(e.into())),
            Err(error) => Err(error),
        };
        if let Err(error) = started {
            eprintln!("[WARN  mdevctl] {error}");
        }
    }
    Ok(())
}
