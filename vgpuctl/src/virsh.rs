//! `vgpuctl attach` / `detach`: a vGPU for a running or defined domain through the service and
//! libvirt's own client. `virsh` is run as a program (found on PATH) so that vgpuctl needs no
//! libvirt library; the libvirt hook never does this (it must not call back into libvirt).
//!
//! What the instance is follows from where the device goes. Only into the running domain
//! (`--live`): transient, claimed by the domain, destroyed by its release (its stop). Into the
//! persistent configuration (`--config`, with or without `--live`): persistent (defined, not
//! autostart), claimed by the domain; the domain's stop drops the claim and keeps the
//! definition, so the configuration still names a device the next start can claim (the hook
//! claims it, starting it if it is not running). Detach destroys the instance only when neither
//! the live domain nor its configuration names it any more.

use std::collections::HashMap;
use std::io::Write;
use std::process::Command;

use dbus_api::hostdev::{hostdev_elements, hostdev_xml, MdevDisplay};
use dbus_api::names::{device_key, option};
use dbus_api::proxy::ManagerProxy;
use dbus_api::wire::InstanceRecord;
use dbus_api::{ClientError, ErrorKind};
use zbus::{Connection, Variant};

use crate::{error_chain, failure, instance_proxy, snapshot, Failure};

/// Where the device goes: `--live`, `--config`, both, or neither (virsh's `--current`: the
/// running domain if it runs, else its configuration).
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    /// `--live`.
    pub live: bool,
    /// `--config`.
    pub config: bool,
}

impl Scope {
    /// With neither flag, what virsh's default means for `domain` now: the running domain if
    /// it runs (or is paused), else its persistent configuration.
    fn resolve(self, domain: &str) -> Result<Scope, Failure> {
        if self.live || self.config {
            return Ok(self);
        }
        let state = virsh(&["domstate".as_ref(), domain.as_ref()])?;
        let shut_off = matches!(state.trim(), "shut off" | "crashed");
        Ok(Scope {
            live: !shut_off,
            config: shut_off,
        })
    }
}

/// Runs `virsh ARGS`, returning its stdout; a failure carries virsh's own message.
fn virsh(args: &[&std::ffi::OsStr]) -> Result<String, Failure> {
    let output = Command::new("virsh")
        .args(args)
        .output()
        .map_err(|e| Failure {
            message: format!("cannot run virsh (is libvirt-clients installed?): {e}"),
            code: 1,
        })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    Err(Failure {
        message: format!(
            "virsh {} failed ({}): {}",
            words.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ),
        code: 1,
    })
}

/// `virsh attach-device|detach-device DOMAIN FILE [--live] [--config]` with `xml` in FILE.
fn change_device(verb: &str, domain: &str, xml: &str, scope: Scope) -> Result<(), Failure> {
    let mut file = tempfile::Builder::new()
        .prefix("vgpuctl-hostdev-")
        .suffix(".xml")
        .tempfile()
        .map_err(|e| Failure {
            message: format!("cannot create a temporary file for the hostdev XML: {e}"),
            code: 1,
        })?;
    file.write_all(xml.as_bytes()).map_err(|e| Failure {
        message: format!("cannot write {}: {e}", file.path().display()),
        code: 1,
    })?;
    let mut args: Vec<&std::ffi::OsStr> =
        vec![verb.as_ref(), domain.as_ref(), file.path().as_os_str()];
    if scope.live {
        args.push("--live".as_ref());
    }
    if scope.config {
        args.push("--config".as_ref());
    }
    virsh(&args).map(drop)
}

/// The `<address .../>` source element of each `<hostdev>` of `record`, as libvirt writes it
/// back in `dumpxml` (`<address uuid='...'/>` for an mdev, `<address domain='0x0000' bus=...
/// function='0x4'/>` for a PCI function).
fn source_addresses(record: &InstanceRecord) -> Result<Vec<String>, Failure> {
    let elements = hostdev_elements(record, MdevDisplay::default())
        .map_err(|e| failure(ErrorKind::NotSupported, error_chain(&e)))?;
    Ok(elements
        .iter()
        .filter_map(|xml| {
            let start = xml.find("<address ")?;
            let length = xml[start..].find("/>")? + 2;
            Some(xml[start..start + length].to_string())
        })
        .collect())
}

/// Where `domain` still names the device of `record` after a detach: its live definition
/// (`dumpxml`: the configuration when it is not running) or its persistent configuration
/// (`dumpxml --inactive`: the live definition of a transient domain).
fn still_named(domain: &str, record: &InstanceRecord) -> Result<Vec<&'static str>, Failure> {
    let needles = source_addresses(record)?;
    let mut places = Vec::new();
    for (place, args) in [
        (
            "the running domain",
            &["dumpxml".as_ref(), domain.as_ref()][..],
        ),
        (
            "its persistent configuration",
            &["dumpxml".as_ref(), "--inactive".as_ref(), domain.as_ref()][..],
        ),
    ] {
        let xml = virsh(args)?;
        if needles.iter().any(|needle| xml.contains(needle.as_str())) {
            places.push(place);
        }
    }
    Ok(places)
}

/// Destroys `record` (forced: the domain's claim is what would refuse it), for the undo of a
/// failed attach; returns the text to add to the failure.
async fn undo_create(
    connection: &Connection,
    record: &InstanceRecord,
    mut options: HashMap<&'static str, Variant<'static>>,
) -> String {
    options.insert(option::FORCE, Variant::from(true));
    let undone = match instance_proxy(connection, record).await {
        Ok(instance) => instance
            .destroy(options)
            .await
            .map_err(|e| error_chain(&ClientError::from(e))),
        Err(e) => Err(e.message),
    };
    match undone {
        Ok(()) => format!("instance {} destroyed again", record.uuid),
        Err(e) => format!("instance {} could not be destroyed: {e}", record.uuid),
    }
}

/// Creates an instance of `profile` claimed by `domain` and attaches it with virsh; undoes the
/// creation if the claim or virsh refuses. Returns the new instance.
pub async fn attach(
    connection: &Connection,
    domain: &str,
    profile: &str,
    scope: Scope,
    options: HashMap<&'static str, Variant<'static>>,
) -> Result<InstanceRecord, Failure> {
    let domain_uuid = virsh(&["domuuid".as_ref(), domain.as_ref()])?
        .trim()
        .to_string();
    let scope = scope.resolve(domain)?;
    let uuid = uuid::Uuid::new_v4().to_string();
    let manager = ManagerProxy::new(connection).await?;
    let claim_by_uuid: HashMap<&str, Variant<'_>> = HashMap::from([
        (device_key::KIND, Variant::from("mdev")),
        (device_key::UUID, Variant::from(uuid.as_str())),
    ]);
    if scope.config {
        // Named by the configuration: a definition that outlives the domain's stop, then the
        // domain's claim on it.
        let mut create = options.clone();
        create.insert(option::UUID, Variant::from(uuid.clone()));
        create.insert(option::PERSISTENT, Variant::from(true));
        manager
            .create_instances(profile, create)
            .await
            .map_err(ClientError::from)?;
        if let Err(error) = manager
            .prepare_domain(domain, &domain_uuid, vec![claim_by_uuid], options.clone())
            .await
        {
            let refused = Failure::from(ClientError::from(error));
            let record = snapshot(connection).await?.instance(&uuid).cloned();
            let undone = match record {
                Some(record) => undo_create(connection, &record, options.clone()).await,
                None => format!("instance {uuid} is gone"),
            };
            return Err(Failure {
                message: format!("{}; {undone}", refused.message),
                code: refused.code,
            });
        }
    } else {
        // Only the running domain: a device with a fresh UUID and a profile is created for the
        // domain and claimed by it (transient: the domain's release destroys it), in one call.
        let device: HashMap<&str, Variant<'_>> = HashMap::from([
            (device_key::KIND, Variant::from("mdev")),
            (device_key::PROFILE, Variant::from(profile)),
            (device_key::UUID, Variant::from(uuid.as_str())),
        ]);
        manager
            .prepare_domain(domain, &domain_uuid, vec![device], options.clone())
            .await
            .map_err(ClientError::from)?;
    }
    let snapshot = snapshot(connection).await?;
    let record = snapshot
        .instance(&uuid)
        .cloned()
        .ok_or_else(|| failure(ErrorKind::Failed, format!("instance {uuid} vanished")))?;
    let attached = hostdev_xml(&record, MdevDisplay::default())
        .map_err(|e| failure(ErrorKind::NotSupported, error_chain(&e)))
        .and_then(|xml| change_device("attach-device", domain, &xml, scope));
    if let Err(attach_failure) = attached {
        let undone = undo_create(connection, &record, options).await;
        return Err(Failure {
            message: format!("{}; {undone}", attach_failure.message),
            code: attach_failure.code,
        });
    }
    Ok(record)
}

/// What a detach did with the instance.
#[derive(Debug)]
pub struct Detached {
    /// The instance's UUID.
    pub uuid: String,
    /// Where the domain still names it (then it is kept), empty when it was destroyed.
    pub still_named_in: Vec<&'static str>,
}

/// Detaches instance `key` from `domain` with virsh, then destroys it unless the domain still
/// names it (e.g. `--live` only on a device its configuration keeps). An instance another
/// domain holds is refused before anything changes.
pub async fn detach(
    connection: &Connection,
    domain: &str,
    key: &str,
    scope: Scope,
    mut options: HashMap<&'static str, Variant<'static>>,
) -> Result<Detached, Failure> {
    let snapshot = snapshot(connection).await?;
    let record = snapshot
        .instance(key)
        .ok_or_else(|| failure(ErrorKind::NotFound, format!("no instance {key}")))?;
    if !record.holder.is_empty() && record.holder != domain {
        return Err(failure(
            ErrorKind::InUse,
            format!(
                "instance {} is held by domain {}, not {domain}",
                record.uuid, record.holder
            ),
        ));
    }
    let scope = scope.resolve(domain)?;
    // A pass-through has one <hostdev> per bound function; virsh takes one at a time.
    let elements = hostdev_elements(record, MdevDisplay::default())
        .map_err(|e| failure(ErrorKind::NotSupported, error_chain(&e)))?;
    for xml in &elements {
        change_device("detach-device", domain, xml, scope)?;
    }
    let still_named_in = still_named(domain, record)?;
    if still_named_in.is_empty() {
        // The domain's claim is what keeps Destroy from removing it; the device is gone from
        // the domain now, so the claim is stale.
        options.insert(option::FORCE, Variant::from(true));
        instance_proxy(connection, record)
            .await?
            .destroy(options)
            .await
            .map_err(ClientError::from)?;
    }
    Ok(Detached {
        uuid: record.uuid.clone(),
        still_named_in,
    })
}
