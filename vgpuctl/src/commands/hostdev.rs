//! `vgpuctl xml` and `vgpuctl qemu-args`: what gives a VM an instance, libvirt's `<hostdev>`
//! or QEMU's arguments (both computed here from the instance's record).

use dbus_api::ErrorKind;
use vgpu_types::error_chain;

use crate::failure::{failure, Failure};
use crate::output::print_json;
use crate::service::{find_instance, snapshot, Session};

/// `vgpuctl xml UUID [--display] [--ramfb]`.
pub async fn xml(session: &Session, uuid: &str, display: bool, ramfb: bool) -> Result<(), Failure> {
    let snapshot = snapshot(&session.connection).await?;
    let record = find_instance(&snapshot, uuid)?;
    let options = dbus_api::hostdev::MdevDisplay { display, ramfb };
    let xml = dbus_api::hostdev::hostdev_xml(record, options)
        .map_err(|e| failure(ErrorKind::NotSupported, error_chain(&e)))?;
    if session.json {
        return print_json(&serde_json::json!({ "uuid": record.uuid, "xml": xml }));
    }
    out!("{xml}");
    Ok(())
}

/// `vgpuctl qemu-args TARGET`.
pub async fn qemu_args(session: &Session, target: &str) -> Result<(), Failure> {
    let snapshot = snapshot(&session.connection).await?;
    let record = find_instance(&snapshot, target)?;
    let vendor = snapshot.parent(&record.parent).map(|p| p.vendor_id);
    let qemu = dbus_api::hostdev::qemu_args(record, vendor)
        .map_err(|e| failure(ErrorKind::NotSupported, error_chain(&e)))?;
    if session.json {
        return print_json(&serde_json::json!({
            "uuid": record.uuid,
            "args": qemu.args,
            "needs_vm_uuid": qemu.needs_vm_uuid,
        }));
    }
    outln!("{}", qemu.args.join(" "));
    if qemu.needs_vm_uuid {
        // On stderr so that stdout stays a pasteable argument list.
        eprintln!(
            "vgpuctl: NVIDIA vGPU: also pass QEMU `-uuid <vm uuid>`; the vGPU manager reads the VM's UUID (libvirt passes the domain's UUID itself)"
        );
    }
    Ok(())
}
