//! VFs of NVIDIA GPUs change only through `sriov-manage` (the simulated host models it as
//! NVIDIA documents it), and they come back, with the vGPUs on them, after a reboot and after
//! a driver reload.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use mdev_sim::{Fault, SimEvent, SimHost, UeventAction};

const H200: &str = "0000:4b:00.0";
const NVME: &str = "0000:01:00.0";

fn open_with(sim: &SimHost, dir: &Path, config: EngineConfig) -> Engine {
    Engine::new(
        Arc::new(sim.clone()),
        Arc::new(DiskFiles::new(dir)),
        EngineConfig {
            readiness_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(10),
            ..config
        },
    )
    .unwrap()
}

fn open(sim: &SimHost, dir: &Path) -> Engine {
    open_with(sim, dir, EngineConfig::default())
}

fn numvfs(sim: &SimHost, pf: &str) -> String {
    sim.read(Path::new(&format!(
        "/sys/bus/pci/devices/{pf}/sriov_numvfs"
    )))
    .unwrap()
    .trim()
    .to_owned()
}

fn current_vgpu_type(sim: &SimHost, vf: PciAddress) -> String {
    sim.read(Path::new(&format!(
        "/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"
    )))
    .unwrap()
    .trim()
    .to_owned()
}

fn autostart_vgpu(engine: &Engine, type_id: u32) -> InstanceInfo {
    engine
        .create(CreateRequest {
            autostart: true,
            ..CreateRequest::new(CreateTarget::NvidiaVf {
                pf: H200.into(),
                type_id,
                vf: None,
            })
        })
        .unwrap()
}

#[test]
fn nvidia_vfs_are_enabled_and_disabled_through_sriov_manage_all_or_none() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path());
    // sriov-manage -e makes every VF the GPU has; another count cannot be had from it.
    let error = engine
        .set_num_vfs(H200, 4, DestroyOptions::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgs, "{error}");
    let text = error.to_string();
    assert!(
        text.contains(H200) && text.contains("/usr/lib/nvidia/sriov-manage") && text.contains("32"),
        "{text}"
    );
    assert_eq!(numvfs(&sim, H200), "0", "nothing changed");

    let vfs = engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap();
    assert_eq!(vfs.len(), 32);
    assert_eq!(numvfs(&sim, H200), "32");
    engine
        .set_num_vfs(H200, 0, DestroyOptions::default())
        .unwrap();
    assert_eq!(numvfs(&sim, H200), "0");
}

#[test]
fn without_sriov_manage_an_nvidia_vf_change_is_refused_naming_the_tool_and_its_package() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The tool at another path: as on a host without NVIDIA's vGPU manager.
    let engine = open_with(
        &sim,
        dir.path(),
        EngineConfig {
            nvidia_sriov_manage: "/opt/nvidia/sriov-manage".into(),
            ..EngineConfig::default()
        },
    );
    let error = engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotSupported, "{error}");
    let text = error.to_string();
    assert!(
        text.contains(H200)
            && text.contains("/opt/nvidia/sriov-manage is not installed")
            && text.contains("NVIDIA vGPU manager"),
        "{text}"
    );
    // No raw sriov_numvfs write happened instead.
    assert_eq!(numvfs(&sim, H200), "0");
    // Other PFs keep sriov_numvfs.
    let samples = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&samples, dir.path());
    assert!(!samples
        .commands()
        .installed(Path::new("/usr/lib/nvidia/sriov-manage")));
    assert_eq!(
        engine
            .set_num_vfs(NVME, 2, DestroyOptions::default())
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn a_failing_sriov_manage_is_an_error_carrying_its_command_line_and_output() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path());
    sim.inject_fault(Fault::fail("*/sriov_numvfs", libc::EIO).times(1));
    let error = engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Failed, "{error}");
    let text = error.to_string();
    assert!(
        text.contains("/usr/lib/nvidia/sriov-manage -e 0000:4b:00.0")
            && text.contains("exit status 1")
            && text.contains("Input/output error"),
        "{text}"
    );
    assert_eq!(numvfs(&sim, H200), "0");
}

#[test]
fn after_a_reboot_without_sriov_manage_the_vf_restore_fails_naming_the_tool() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path());
    engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap();
    autostart_vgpu(&engine, 1405);
    sim.reboot();
    let engine = open_with(
        &sim,
        dir.path(),
        EngineConfig {
            nvidia_sriov_manage: "/opt/nvidia/sriov-manage".into(),
            ..EngineConfig::default()
        },
    );
    let report = engine.reconcile().unwrap();
    let failed = report
        .actions
        .iter()
        .find_map(|action| match action {
            ReconcileAction::VfsRestoreFailed { pf, error } if pf == H200 => Some(error.clone()),
            _ => None,
        })
        .expect("the VF restore is reported as failed");
    assert!(
        failed.contains("/opt/nvidia/sriov-manage is not installed"),
        "{failed}"
    );
    assert_eq!(numvfs(&sim, H200), "0", "no raw sriov_numvfs write instead");
}

/// Feeds the host's uevents so far to the engine, as the udev monitor does.
fn pump(engine: &Engine, events: &std::sync::mpsc::Receiver<SimEvent>) {
    while let Ok(event) = events.try_recv() {
        engine.handle_host_event(&HostEvent {
            action: match event.action {
                UeventAction::Add => HostEventAction::Add,
                UeventAction::Remove => HostEventAction::Remove,
                UeventAction::Change => HostEventAction::Change,
                UeventAction::Bind => HostEventAction::Bind,
                UeventAction::Unbind => HostEventAction::Unbind,
            },
            subsystem: event.subsystem.clone(),
            sysname: event
                .devpath
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned(),
            properties: event.properties.clone(),
        });
    }
}

#[test]
fn after_an_nvidia_driver_reload_the_vfs_come_back_before_their_vgpus() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path());
    engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap();
    let info = autostart_vgpu(&engine, 1405);
    let vf = info.vf.unwrap();
    let events = sim.subscribe();

    sim.unload_module("nvidia").unwrap();
    pump(&engine, &events);
    assert_eq!(numvfs(&sim, H200), "0", "the driver's unbind took the VFs");
    assert!(!engine.instance(&info.uuid).unwrap().active);

    sim.load_module("nvidia").unwrap();
    pump(&engine, &events);
    assert_eq!(
        numvfs(&sim, H200),
        "32",
        "sriov-manage -e ran on the PF's bind"
    );
    let back = engine.instance(&info.uuid).unwrap();
    assert!(back.active, "{back:?}");
    assert_eq!(back.vf, Some(vf));
    assert_eq!(current_vgpu_type(&sim, vf), "1405");
}

#[test]
fn after_a_reboot_nvidia_vfs_come_back_through_sriov_manage_before_their_vgpus() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path());
    engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap();
    let info = autostart_vgpu(&engine, 1407);
    sim.reboot();
    assert_eq!(numvfs(&sim, H200), "0");
    let engine = open(&sim, dir.path());
    let report = engine.reconcile().unwrap();
    assert_eq!(
        report.actions,
        vec![
            ReconcileAction::VfsRestored {
                pf: H200.into(),
                num_vfs: 32
            },
            ReconcileAction::Recreated {
                uuid: info.uuid.clone()
            },
        ]
    );
    let back = engine.instance(&info.uuid).unwrap();
    assert_eq!(back.vf, info.vf, "on the VF its VM's XML names");
    assert_eq!(current_vgpu_type(&sim, back.vf.unwrap()), "1407");
}

#[test]
fn ampere_vfs_come_through_sriov_manage_and_register_as_mdev_parents() {
    let sim = SimHost::builtin("ampere").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path());
    let vfs = engine
        .set_num_vfs("0000:08:00.0", 16, DestroyOptions::default())
        .unwrap();
    assert_eq!(vfs.len(), 16);
    assert!(sim.exists(Path::new("/sys/class/mdev_bus/0000:08:00.4")));
}
