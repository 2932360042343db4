//! The subcommands, each a pure D-Bus client of the mdev-manager service: listings come from
//! `Manager.ListInstances` / `ListTypes`, changes go through the `Instance` methods, so every
//! change is the service's (authorization, state, claims) and its errors are the service's.
//!
//! What the service cannot do yet is refused with [`CommandError::NotSupported`] before
//! anything changes (docs/libvirt.md, "Node devices"): changing the type of a definition.
//! Attributes (`attrs`) are the service's: sent with a new device or definition, changed with
//! `Instance.SetAttributes`, listed from `Manager.ListInstanceAttributes` in `list --defined`
//! (mdevctl shows a running device's attributes only from a callout script, so never).

use crate::cli;
use crate::definition::{Definition, DefinitionError};
use crate::format::{self, Device, Listing, TypeInfo};
use dbus_api::options::{as_proxy_options, to_dict, AutostartOptions, ListTypesOptions};
use dbus_api::proxy::{InstanceProxy, ManagerProxy, Options};
use dbus_api::{ClientError, ErrorKind};
use std::collections::HashMap;
use std::io::Write;
use vgpu_types::Uuid;
use zbus::OwnedVariant;

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

/// `SetAutostart` options that keep (`true`) or drop (`false`) the definition: the service's
/// own option set, as its `a{sv}` (pass it through `as_proxy_options`).
fn persistence(persistent: bool) -> HashMap<String, OwnedVariant> {
    to_dict(&AutostartOptions {
        persistent: Some(persistent),
        no_user_interaction: None,
    })
}

/// The service's mdev instances as mdevctl devices; with `with_attributes`, their
/// definitions' attributes too (one more call, which a listing of running devices, which
/// shows none, does without).
async fn devices(
    manager: &ManagerProxy<'_>,
    with_attributes: bool,
) -> Result<Vec<Device>, CommandError> {
    let entries = manager
        .list_instances(no_options())
        .await
        .map_err(ClientError::from)?;
    let mut attributes: std::collections::HashMap<String, Vec<(String, String)>> =
        if with_attributes {
            manager
                .list_instance_attributes(no_options())
                .await
                .map_err(ClientError::from)?
                .into_iter()
                .collect()
        } else {
            Default::default()
        };
    Ok(entries
        .into_iter()
        .filter(|entry| entry.kind == "mdev")
        .map(|entry| Device {
            // mdevctl knows attributes only from a definition file.
            attrs: if entry.persistent {
                attributes.remove(&entry.uuid).unwrap_or_default()
            } else {
                Vec::new()
            },
            uuid: entry.uuid,
            parent: entry.parent_name,
            mdev_type: entry.mdev_type,
            autostart: entry.autostart,
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
    let uuid = uuid.to_string();
    Ok(devices(manager, true)
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

/// `Instance.SetAttributes` of `uuid`.
async fn set_attributes(
    connection: &zbus::Connection,
    uuid: &str,
    attrs: &[(String, String)],
) -> Result<(), CommandError> {
    instance(connection, uuid)
        .await?
        .set_attributes(attrs, no_options())
        .await
        .map_err(ClientError::from)?;
    Ok(())
}

/// mdevctl's message for an attribute index out of range, with its list of the attributes.
fn bad_index(uuid: &str, index: usize, attrs: &[(String, String)]) -> CommandError {
    let hint = if attrs.is_empty() {
        format!("Device {uuid} has no attributes")
    } else {
        let mut text = String::from("  Attrs:\n");
        for (i, (name, value)) in attrs.iter().enumerate() {
            text.push_str(&format!("    @{{{i}}}: {{\"{name}\":\"{value}\"}}\n"));
        }
        text
    };
    CommandError::Invalid(format!("Attribute index {index} is invalid\n{hint}"))
}

/// `--addattr NAME --value V [--index I]` / `--delattr [--index I]` applied to `attrs` as
/// mdevctl does (at the end without an index; deleting from an empty list changes nothing).
fn edit_attributes(
    uuid: &str,
    args: &cli::Modify,
    attrs: &mut Vec<(String, String)>,
) -> Result<(), CommandError> {
    let index = args.index.map(|i| i as usize);
    if let Some(name) = &args.addattr {
        let Some(value) = &args.value else {
            return Err(CommandError::Invalid("No attribute value provided".into()));
        };
        match index {
            Some(i) if i > attrs.len() => return Err(bad_index(uuid, i, attrs)),
            Some(i) => attrs.insert(i, (name.clone(), value.clone())),
            None => attrs.push((name.clone(), value.clone())),
        }
    } else if args.delattr {
        match index {
            Some(i) if i >= attrs.len() => return Err(bad_index(uuid, i, attrs)),
            Some(i) => {
                attrs.remove(i);
            }
            None => {
                attrs.pop();
            }
        }
    }
    Ok(())
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
    let uuid = args.uuid.map(|u| u.to_string());
    let selected: Vec<Device> = devices(&manager, listing == Listing::Defined)
        .await?
        .into_iter()
        .filter(|d| match listing {
            Listing::Active => d.active,
            Listing::Defined => d.defined,
        })
        .filter(|d| uuid.as_ref().is_none_or(|u| *u == d.uuid))
        .filter(|d| args.parent.as_ref().is_none_or(|p| *p == d.parent))
        .map(|mut d| {
            // mdevctl lists a running device's attributes only from a callout script (none
            // here), never from its definition.
            if listing == Listing::Active {
                d.attrs.clear();
            }
            d
        })
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
    let options = to_dict(&ListTypesOptions {
        parent: args.parent.clone(),
        ..ListTypesOptions::default()
    });
    let entries = match manager
        .list_types(as_proxy_options(&options))
        .await
        .map_err(ClientError::from)
    {
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
        uuid: target.uuid.map(|uuid| uuid.to_string()),
        persistent: target.persistent.then_some(true),
        autostart: target.autostart.then_some(true),
        attributes: (!target.attrs.is_empty()).then(|| target.attrs.to_vec()),
        start: (!target.start).then_some(false),
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
    /// Written in order after the device is created, kept with a definition.
    attrs: &'a [(String, String)],
    /// Create the device now; `false` records a stopped definition only (`define`).
    start: bool,
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
    let (parent, mdev_type, attrs) = match &args.jsonfile {
        Some(path) => {
            let definition = Definition::read(path)?;
            let Some(parent) = &args.parent else {
                return Err(CommandError::Invalid(
                    "Parent device required to start device via json file".into(),
                ));
            };
            (parent.clone(), definition.mdev_type, definition.attrs)
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
                (Some(parent), Some(mdev_type)) => (parent.clone(), mdev_type.clone(), Vec::new()),
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
            attrs: &attrs,
            start: true,
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
        let drop_definition = persistence(false);
        proxy
            .set_autostart(false, as_proxy_options(&drop_definition))
            .await
    } else {
        proxy.destroy(no_options()).await
    }
    .map_err(ClientError::from)?;
    Ok(())
}

/// `mdevctl define`: a running transient device gets a definition (`define --uuid U`);
/// otherwise a new, stopped definition from `--parent` and `--type` or `--jsonfile` (the
/// service records it without creating the device, as mdevctl writes only a file).
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
    let attrs = definition
        .as_ref()
        .map(|d| d.attrs.clone())
        .unwrap_or_default();
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
        let keep_definition = persistence(true);
        instance(connection, &device.uuid)
            .await?
            .set_autostart(autostart, as_proxy_options(&keep_definition))
            .await
            .map_err(ClientError::from)?;
        if !attrs.is_empty() {
            set_attributes(connection, &device.uuid, &attrs).await?;
        }
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
            attrs: &attrs,
            start: false,
        },
    )
    .await?;
    if args.uuid.is_none() {
        writeln!(out, "{uuid}")?;
    }
    Ok(())
}

/// `mdevctl modify`: the start mode and attributes of a definition (`--auto`, `--manual`,
/// `--addattr`/`--delattr` [`--index`], or `start` and `attrs` of a `--jsonfile` with the same
/// type). `--live` changes nothing of the running device (mdevctl 1.4 runs only its callouts
/// there); with `--defined` the definition takes the file's values.
pub async fn modify(connection: &zbus::Connection, args: &cli::Modify) -> Result<(), CommandError> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(ClientError::from)?;
    let uuid_text = args.uuid.to_string();
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
        if !args.defined {
            // Nothing of the running device changes (mdevctl 1.4 runs only its callouts).
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
    let mut attrs = device.attrs.clone();
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
            attrs = definition.attrs.clone();
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
    edit_attributes(&uuid_text, args, &mut attrs)?;
    if autostart != device.autostart {
        instance(connection, &device.uuid)
            .await?
            .set_autostart(autostart, no_options())
            .await
            .map_err(ClientError::from)?;
    }
    if attrs != device.attrs {
        set_attributes(connection, &device.uuid, &attrs).await?;
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
    for device in devices(&manager, false).await? {
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
