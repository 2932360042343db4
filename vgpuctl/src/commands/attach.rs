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

use std::io::Write;
use std::process::Command;

use dbus_api::hostdev::{hostdev_elements, hostdev_xml, MdevDisplay};
use dbus_api::options::{CreateOptions, DeviceSpec, ForceOptions, PrepareOptions};
use dbus_api::proxy::ManagerProxy;
use dbus_api::wire::InstanceRecord;
use dbus_api::{ClientError, ErrorKind};
use vgpu_types::error_chain;

use crate::failure::{failure, Failure};
use crate::output::print_json;
use crate::service::{instance_proxy, snapshot, Auth, Sent, Session};

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
    /// `--live` and `--config` as given.
    pub fn new(live: bool, config: bool) -> Self {
        Self { live, config }
    }

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

/// The device dict `attach` sends with `PrepareDomain` for a device only the running domain
/// gets: an mdev of `profile` with the fresh `uuid`, created and claimed in one call.
pub fn device(profile: &str, uuid: &str) -> DeviceSpec {
    DeviceSpec {
        kind: Some("mdev".to_owned()),
        profile: Some(profile.to_owned()),
        uuid: Some(uuid.to_owned()),
        ..DeviceSpec::default()
    }
}

/// The device dict `attach --config` sends with `PrepareDomain`: the claim on the persistent
/// mdev `uuid` it has just created.
pub fn claim(uuid: &str) -> DeviceSpec {
    DeviceSpec {
        kind: Some("mdev".to_owned()),
        uuid: Some(uuid.to_owned()),
        ..DeviceSpec::default()
    }
}

/// The options of the `CreateInstances` of `attach --config`: one persistent (defined, not
/// autostart) instance with the fresh `uuid`.
pub fn create_options(auth: Auth, uuid: &str) -> CreateOptions {
    CreateOptions {
        uuid: Some(uuid.to_owned()),
        persistent: Some(true),
        no_user_interaction: auth.no_user_interaction(),
        ..CreateOptions::default()
    }
}

/// The options of `attach`'s `PrepareDomain`.
pub fn prepare_options(auth: Auth) -> PrepareOptions {
    PrepareOptions {
        wait_for_parent: None,
        no_user_interaction: auth.no_user_interaction(),
    }
}

/// The options of the `Destroy` that undoes a failed attach or ends a detach: forced, as the
/// domain's claim is stale once the device is not (or no longer) in the domain.
pub fn destroy_options(auth: Auth) -> ForceOptions {
    ForceOptions {
        force: Some(true),
        no_user_interaction: auth.no_user_interaction(),
    }
}

/// Runs `virsh ARGS`, returning its stdout; a failure carries virsh's own message.
fn virsh(args: &[&std::ffi::OsStr]) -> Result<String, Failure> {
    let output = Command::new("virsh").args(args).output().map_err(|e| {
        Failure::new(
            format!("cannot run virsh (is libvirt-clients installed?): {e}"),
            1,
        )
    })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    Err(Failure::new(
        format!(
            "virsh {} failed ({}): {}",
            words.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ),
        1,
    ))
}

/// `virsh attach-device|detach-device DOMAIN FILE [--live] [--config]` with `xml` in FILE.
fn change_device(verb: &str, domain: &str, xml: &str, scope: Scope) -> Result<(), Failure> {
    let mut file = tempfile::Builder::new()
        .prefix("vgpuctl-hostdev-")
        .suffix(".xml")
        .tempfile()
        .map_err(|e| {
            Failure::new(
                format!("cannot create a temporary file for the hostdev XML: {e}"),
                1,
            )
        })?;
    file.write_all(xml.as_bytes())
        .map_err(|e| Failure::new(format!("cannot write {}: {e}", file.path().display()), 1))?;
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
async fn undo_create(session: &Session, record: &InstanceRecord) -> String {
    let sent = Sent::new(&destroy_options(session.auth));
    let undone = match instance_proxy(&session.connection, record).await {
        Ok(instance) => instance
            .destroy(sent.proxy())
            .await
            .map_err(|e| error_chain(&ClientError::from(e))),
        Err(e) => Err(e.message),
    };
    match undone {
        Ok(()) => format!("instance {} destroyed again", record.uuid),
        Err(e) => format!("instance {} could not be destroyed: {e}", record.uuid),
    }
}

/// `vgpuctl attach DOMAIN PROFILE`: prints the new instance's UUID (or its record).
pub async fn attach(
    session: &Session,
    domain: &str,
    profile: &str,
    scope: Scope,
) -> Result<(), Failure> {
    let record = attach_instance(session, domain, profile, scope).await?;
    if session.json {
        return print_json(&record);
    }
    outln!("{}", record.uuid);
    Ok(())
}

/// Creates an instance of `profile` claimed by `domain` and attaches it with virsh; undoes the
/// creation if the claim or virsh refuses. Returns the new instance.
async fn attach_instance(
    session: &Session,
    domain: &str,
    profile: &str,
    scope: Scope,
) -> Result<InstanceRecord, Failure> {
    let connection = &session.connection;
    let domain_uuid = virsh(&["domuuid".as_ref(), domain.as_ref()])?
        .trim()
        .to_string();
    let scope = scope.resolve(domain)?;
    let uuid = uuid::Uuid::new_v4().to_string();
    let manager = ManagerProxy::new(connection).await?;
    let prepare = Sent::new(&prepare_options(session.auth));
    if scope.config {
        // Named by the configuration: a definition that outlives the domain's stop, then the
        // domain's claim on it.
        let create = Sent::new(&create_options(session.auth, &uuid));
        manager
            .create_instances(profile, create.proxy())
            .await
            .map_err(ClientError::from)?;
        let spec = Sent::new(&claim(&uuid));
        if let Err(error) = manager
            .prepare_domain(domain, &domain_uuid, vec![spec.proxy()], prepare.proxy())
            .await
        {
            let refused = Failure::from(ClientError::from(error));
            let record = snapshot(connection).await?.instance(&uuid).cloned();
            let undone = match record {
                Some(record) => undo_create(session, &record).await,
                None => format!("instance {uuid} is gone"),
            };
            return Err(Failure::new(
                format!("{}; {undone}", refused.message),
                refused.code,
            ));
        }
    } else {
        // Only the running domain: a device with a fresh UUID and a profile is created for the
        // domain and claimed by it (transient: the domain's release destroys it), in one call.
        let spec = Sent::new(&device(profile, &uuid));
        manager
            .prepare_domain(domain, &domain_uuid, vec![spec.proxy()], prepare.proxy())
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
        let undone = undo_create(session, &record).await;
        return Err(Failure::new(
            format!("{}; {undone}", attach_failure.message),
            attach_failure.code,
        ));
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

/// `vgpuctl detach DOMAIN UUID`: says where the domain still names an instance it keeps.
pub async fn detach(
    session: &Session,
    domain: &str,
    key: &str,
    scope: Scope,
) -> Result<(), Failure> {
    let detached = detach_instance(session, domain, key, scope).await?;
    if session.json {
        return print_json(&serde_json::json!({
            "uuid": detached.uuid,
            "destroyed": detached.still_named_in.is_empty(),
            "still_named_in": detached.still_named_in,
        }));
    }
    if !detached.still_named_in.is_empty() {
        eprintln!(
            "instance {} kept: domain {domain} still names it in {}",
            detached.uuid,
            detached.still_named_in.join(" and ")
        );
    }
    Ok(())
}

/// Detaches instance `key` from `domain` with virsh, then destroys it unless the domain still
/// names it (e.g. `--live` only on a device its configuration keeps). An instance another
/// domain holds is refused before anything changes.
async fn detach_instance(
    session: &Session,
    domain: &str,
    key: &str,
    scope: Scope,
) -> Result<Detached, Failure> {
    let connection = &session.connection;
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
        let sent = Sent::new(&destroy_options(session.auth));
        instance_proxy(connection, record)
            .await?
            .destroy(sent.proxy())
            .await
            .map_err(ClientError::from)?;
    }
    Ok(Detached {
        uuid: record.uuid.clone(),
        still_named_in,
    })
}
