//! `vgpuctl attach` / `detach`: a vGPU for a running or defined domain through the service and
//! libvirt's own client. `virsh` is run as a program (found on PATH) so that vgpuctl needs no
//! libvirt library; the libvirt hook never does this (it must not call back into libvirt).

use std::io::Write;
use std::process::Command;

use dbus_api::hostdev::{hostdev_elements, hostdev_xml, MdevDisplay};
use dbus_api::options::{DeviceSpec, ForceOptions, PrepareOptions};
use dbus_api::proxy::ManagerProxy;
use dbus_api::wire::InstanceRecord;
use dbus_api::{ClientError, ErrorKind};
use vgpu_types::error_chain;

use crate::failure::{failure, Failure};
use crate::output::print_json;
use crate::service::{instance_proxy, snapshot, Auth, Sent, Session};

/// Where the device goes: `--live`, `--config`, both, or neither (virsh's default: the running
/// domain).
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
}

/// The device dict `attach` sends with `PrepareDomain`: an mdev of `profile` with the fresh
/// `uuid`.
pub fn device(profile: &str, uuid: &str) -> DeviceSpec {
    DeviceSpec {
        kind: Some("mdev".to_owned()),
        profile: Some(profile.to_owned()),
        uuid: Some(uuid.to_owned()),
        ..DeviceSpec::default()
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
/// creation if virsh refuses. Returns the new instance.
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
    let uuid = uuid::Uuid::new_v4().to_string();
    let spec = Sent::new(&device(profile, &uuid));
    let options = Sent::new(&prepare_options(session.auth));
    // A device with a fresh UUID and a profile is created for the domain and claimed by it
    // (transient: the domain's release destroys it), all in one call.
    let manager = ManagerProxy::new(connection).await?;
    manager
        .prepare_domain(domain, &domain_uuid, vec![spec.proxy()], options.proxy())
        .await
        .map_err(ClientError::from)?;
    let snapshot = snapshot(connection).await?;
    let record = snapshot
        .instance(&uuid)
        .cloned()
        .ok_or_else(|| failure(ErrorKind::Failed, format!("instance {uuid} vanished")))?;
    let attached = hostdev_xml(&record, MdevDisplay::default())
        .map_err(|e| failure(ErrorKind::NotSupported, error_chain(&e)))
        .and_then(|xml| change_device("attach-device", domain, &xml, scope));
    if let Err(attach_failure) = attached {
        let sent = Sent::new(&destroy_options(session.auth));
        let undone = match instance_proxy(connection, &record).await {
            Ok(instance) => instance
                .destroy(sent.proxy())
                .await
                .map_err(|e| error_chain(&ClientError::from(e))),
            Err(e) => Err(e.message),
        };
        let message = match undone {
            Ok(()) => format!(
                "{}; instance {uuid} destroyed again",
                attach_failure.message
            ),
            Err(e) => format!(
                "{}; instance {uuid} could not be destroyed: {e}",
                attach_failure.message
            ),
        };
        return Err(Failure::new(message, attach_failure.code));
    }
    Ok(record)
}

/// `vgpuctl detach DOMAIN UUID`.
pub async fn detach(
    session: &Session,
    domain: &str,
    key: &str,
    scope: Scope,
) -> Result<(), Failure> {
    let uuid = detach_instance(session, domain, key, scope).await?;
    if session.json {
        return print_json(&serde_json::json!({ "uuid": uuid }));
    }
    Ok(())
}

/// Detaches instance `key` from `domain` with virsh, then destroys it. An instance another
/// domain holds is refused before anything changes.
async fn detach_instance(
    session: &Session,
    domain: &str,
    key: &str,
    scope: Scope,
) -> Result<String, Failure> {
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
    // A pass-through has one <hostdev> per bound function; virsh takes one at a time.
    let elements = hostdev_elements(record, MdevDisplay::default())
        .map_err(|e| failure(ErrorKind::NotSupported, error_chain(&e)))?;
    for xml in &elements {
        change_device("detach-device", domain, xml, scope)?;
    }
    // The domain's claim is what keeps Destroy from removing it; the device is gone from the
    // domain now, so the claim is stale.
    let sent = Sent::new(&destroy_options(session.auth));
    instance_proxy(connection, record)
        .await?
        .destroy(sent.proxy())
        .await
        .map_err(ClientError::from)?;
    Ok(record.uuid.clone())
}
