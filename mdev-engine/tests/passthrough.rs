//! Whole-GPU pass-through on the simulated host (`topologies/passthrough.toml`): bind and
//! release of a two-function group behind a bridge, refusals (host-used member, shared GPU,
//! held group, second domain), crash mid-bind and mid-release followed by reconcile, and
//! pass-through profiles; and the VM tier's stand-in GPU as the `samples` topology mirrors it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdev_engine::passthrough::{BindPhase, MemberRole};
use mdev_engine::ErrorKind;
use mdev_engine::{
    CreateRequest, CreateTarget, DestroyOptions, DeviceRequest, DiskFiles, DomainRef, Engine,
    EngineConfig, InstanceKind, ReconcileAction,
};
use mdev_host::HostFs;
use mdev_sim::{Fault, SimHost};

const TOPOLOGY: &str = include_str!("../../mdev-sim/topologies/passthrough.toml");
const BRIDGE: &str = "0000:40:00.0";
const GPU: &str = "0000:41:00.0";
const AUDIO: &str = "0000:41:00.1";
const NIC_GPU: &str = "0000:61:00.0";
const NIC: &str = "0000:62:00.0";
const SRIOV_GPU: &str = "0000:0c:00.0";
const VM1: &str = "8a6e0f52-8b5c-4d0f-9b1e-2f3a4b5c6d01";
const VM2: &str = "8a6e0f52-8b5c-4d0f-9b1e-2f3a4b5c6d02";

fn config(write_timeout: Duration) -> EngineConfig {
    EngineConfig {
        readiness_timeout: Duration::from_secs(10),
        poll_interval: Duration::from_millis(10),
        write_timeout,
        ..EngineConfig::default()
    }
}

fn open(sim: &SimHost, root: &Path, write_timeout: Duration) -> Arc<Engine> {
    Arc::new(
        Engine::new(
            Arc::new(sim.clone()),
            Arc::new(DiskFiles::new(root)),
            config(write_timeout),
        )
        .unwrap(),
    )
}

fn setup() -> (SimHost, Arc<Engine>, tempfile::TempDir) {
    let sim = SimHost::from_topology_str(TOPOLOGY).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path(), Duration::from_secs(5));
    (sim, engine, dir)
}

fn driver(sim: &SimHost, address: &str) -> Option<String> {
    sim.read_link(Path::new(&format!("/sys/bus/pci/devices/{address}/driver")))
        .ok()
        .and_then(|target| target.file_name().map(|n| n.to_string_lossy().into_owned()))
}

fn override_of(sim: &SimHost, address: &str) -> String {
    sim.read(Path::new(&format!(
        "/sys/bus/pci/devices/{address}/driver_override"
    )))
    .unwrap()
}

fn group_of(sim: &SimHost, address: &str) -> u32 {
    sim.read_link(Path::new(&format!(
        "/sys/bus/pci/devices/{address}/iommu_group"
    )))
    .unwrap()
    .file_name()
    .unwrap()
    .to_string_lossy()
    .parse()
    .unwrap()
}

fn passthrough(gpu: &str, force: bool) -> CreateRequest {
    CreateRequest::new(CreateTarget::Passthrough {
        gpu: gpu.into(),
        force,
    })
}

/// The host as the tests compare it: each device's driver and override.
fn host_drivers(sim: &SimHost) -> Vec<(String, Option<String>, String)> {
    [BRIDGE, GPU, AUDIO, NIC_GPU, NIC, SRIOV_GPU]
        .iter()
        .map(|a| (a.to_string(), driver(sim, a), override_of(sim, a)))
        .collect()
}

fn assert_original_drivers(sim: &SimHost) {
    assert_eq!(driver(sim, GPU).as_deref(), Some("amdgpu"));
    assert_eq!(driver(sim, AUDIO).as_deref(), Some("snd_hda_intel"));
    assert_eq!(driver(sim, BRIDGE).as_deref(), Some("pcieport"));
    assert_eq!(override_of(sim, GPU), "(null)\n");
    assert_eq!(override_of(sim, AUDIO), "(null)\n");
}

#[test]
fn survey_reports_the_group_members_and_their_roles() {
    let (_sim, engine, _dir) = setup();
    let survey = engine.passthrough_group(GPU).unwrap();
    let roles: Vec<(String, MemberRole, Option<String>)> = survey
        .members
        .iter()
        .map(|m| (m.address.to_string(), m.role, m.driver.clone()))
        .collect();
    assert_eq!(
        roles,
        [
            (BRIDGE.into(), MemberRole::Bridge, Some("pcieport".into())),
            (GPU.into(), MemberRole::Gpu, Some("amdgpu".into())),
            (
                AUDIO.into(),
                MemberRole::Function,
                Some("snd_hda_intel".into())
            ),
        ]
    );
    let shared = engine.passthrough_group(NIC_GPU).unwrap();
    let nic = shared
        .members
        .iter()
        .find(|m| m.address.to_string() == NIC)
        .unwrap();
    assert_eq!(nic.role, MemberRole::Unexpected);
    assert_eq!(
        nic.host_use.as_deref(),
        Some("a network controller driven by igb")
    );
    let error = engine.passthrough_group("0000:99:00.0").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert!(error.to_string().contains("0000:99:00.0"), "{error}");
}

#[test]
fn bind_takes_the_whole_group_and_release_gives_each_driver_back() {
    let (sim, engine, dir) = setup();
    let group = group_of(&sim, GPU);
    let info = engine.create(passthrough(GPU, false)).unwrap();
    assert_eq!(info.kind, InstanceKind::Passthrough);
    assert!(info.active);
    assert_eq!(info.iommu_group, Some(group));
    assert_eq!(info.vf.map(|a| a.to_string()).as_deref(), Some(GPU));
    assert_eq!(driver(&sim, GPU).as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&sim, AUDIO).as_deref(), Some("vfio-pci"));
    // The bridge keeps its driver, as the kernel requires of bridges in a VFIO group.
    assert_eq!(driver(&sim, BRIDGE).as_deref(), Some("pcieport"));
    assert!(sim.exists(Path::new(&format!("/dev/vfio/{group}"))));
    let binding = engine.passthrough_binding(&info.uuid).unwrap();
    assert_eq!(binding.phase, BindPhase::Bound);
    let remembered: Vec<(String, Option<String>)> = binding
        .members
        .iter()
        .map(|m| (m.address.to_string(), m.previous_driver.clone()))
        .collect();
    assert_eq!(
        remembered,
        [
            (AUDIO.into(), Some("snd_hda_intel".into())),
            (GPU.into(), Some("amdgpu".into())),
        ]
    );
    assert_eq!(binding.bridges.len(), 1);
    // The binding is on disk, not only in memory.
    let saved =
        std::fs::read_to_string(dir.path().join("var/lib/mdev-manager/state.json")).unwrap();
    assert!(
        saved.contains("\"passthrough\"") && saved.contains("snd_hda_intel"),
        "{saved}"
    );

    engine
        .destroy(&info.uuid, DestroyOptions::default())
        .unwrap();
    assert_original_drivers(&sim);
    assert!(!sim.exists(Path::new(&format!("/dev/vfio/{group}"))));
    assert!(engine.passthrough_binding(&info.uuid).is_none());
    assert!(engine.instances().unwrap().is_empty());
}

#[test]
fn a_host_used_member_is_refused_unless_forced() {
    let (sim, engine, _dir) = setup();
    let before = host_drivers(&sim);
    let error = engine.create(passthrough(NIC_GPU, false)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InUse);
    let text = error.to_string();
    assert!(
        text.contains(NIC) && text.contains("igb") && text.contains(NIC_GPU),
        "{text}"
    );
    assert_eq!(host_drivers(&sim), before, "a refusal changes nothing");
    assert!(engine.instances().unwrap().is_empty());

    let info = engine.create(passthrough(NIC_GPU, true)).unwrap();
    assert_eq!(driver(&sim, NIC).as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&sim, NIC_GPU).as_deref(), Some("vfio-pci"));
    engine
        .destroy(&info.uuid, DestroyOptions::default())
        .unwrap();
    assert_eq!(host_drivers(&sim), before);
}

#[test]
fn a_gpu_with_vfs_or_another_passthrough_is_refused() {
    let (sim, engine, _dir) = setup();
    engine
        .set_num_vfs(SRIOV_GPU, 2, DestroyOptions::default())
        .unwrap();
    let before = host_drivers(&sim);
    let error = engine.create(passthrough(SRIOV_GPU, false)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InUse);
    assert!(error.to_string().contains("2 VFs enabled"), "{error}");
    assert_eq!(host_drivers(&sim), before);

    let first = engine.create(passthrough(GPU, false)).unwrap();
    let error = engine.create(passthrough(GPU, false)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InUse);
    assert!(error.to_string().contains(&first.uuid), "{error}");
    assert_eq!(engine.instances().unwrap().len(), 1);
}

#[test]
fn release_is_refused_while_a_vmm_holds_the_group() {
    let (sim, engine, _dir) = setup();
    let info = engine.create(passthrough(GPU, false)).unwrap();
    let holder = sim
        .open_vfio_group(group_of(&sim, GPU), "qemu-system-x86")
        .unwrap();
    let error = engine
        .destroy(&info.uuid, DestroyOptions { force: true })
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InUse);
    assert!(error.to_string().contains("qemu-system-x86"), "{error}");
    assert_eq!(driver(&sim, GPU).as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&sim, AUDIO).as_deref(), Some("vfio-pci"));
    assert_eq!(
        engine.passthrough_binding(&info.uuid).unwrap().phase,
        BindPhase::Bound,
        "a refused release leaves the group whole"
    );
    holder.release();
    engine
        .destroy(&info.uuid, DestroyOptions::default())
        .unwrap();
    assert_original_drivers(&sim);
}

#[test]
fn a_failed_bind_part_way_gives_the_bound_members_back() {
    let (sim, engine, _dir) = setup();
    // The audio function binds first; the GPU's probe then fails.
    sim.inject_fault(Fault::fail(format!("*/{GPU}/driver_override"), libc_eio()).times(1));
    let error = engine.create(passthrough(GPU, false)).unwrap_err();
    assert!(error.to_string().contains(GPU), "{error}");
    assert_original_drivers(&sim);
    assert!(engine.instances().unwrap().is_empty());
}

fn libc_eio() -> i32 {
    5
}

fn wait_for_blocked(sim: &SimHost) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while sim.blocked_writes().is_empty() {
        assert!(Instant::now() < deadline, "the write never blocked");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Copies the state directory as it is on disk now: what a process killed at this moment
/// leaves behind.
fn crash_copy(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    let state = "var/lib/mdev-manager";
    std::fs::create_dir_all(to.path().join(state)).unwrap();
    std::fs::copy(
        from.join(state).join("state.json"),
        to.path().join(state).join("state.json"),
    )
    .unwrap();
    to
}

#[test]
fn crash_mid_bind_then_reconcile_returns_the_whole_group() {
    let (sim, engine, dir) = setup();
    sim.inject_fault(Fault::block(format!("*/{GPU}/driver_override")).times(1));
    let worker = Arc::clone(&engine);
    // Left blocked for good: this engine stands for the process that died.
    std::thread::spawn(move || worker.create(passthrough(GPU, false)));
    wait_for_blocked(&sim);
    assert_eq!(driver(&sim, AUDIO).as_deref(), Some("vfio-pci"), "split");
    assert_eq!(driver(&sim, GPU).as_deref(), Some("amdgpu"), "split");
    let after_crash = crash_copy(dir.path());
    let restarted = open(&sim, after_crash.path(), Duration::from_secs(5));
    let uuid = restarted.instances().unwrap()[0].uuid.clone();
    assert_eq!(
        restarted.passthrough_binding(&uuid).unwrap().phase,
        BindPhase::Binding,
        "the intent was on disk before the first write"
    );
    let report = restarted.reconcile().unwrap();
    assert_original_drivers(&sim);
    assert!(restarted.passthrough_binding(&uuid).is_none());
    assert!(report.actions.contains(&ReconcileAction::Vanished {
        uuid: uuid.clone(),
        forgotten: true
    }));
    assert!(restarted.instances().unwrap().is_empty());
}

#[test]
fn crash_mid_release_then_reconcile_finishes_returning_the_group() {
    let (sim, engine, dir) = setup();
    let info = engine.create(passthrough(GPU, false)).unwrap();
    sim.inject_fault(Fault::block("/sys/bus/pci/drivers/vfio-pci/unbind").times(1));
    let worker = Arc::clone(&engine);
    let uuid = info.uuid.clone();
    std::thread::spawn(move || worker.destroy(&uuid, DestroyOptions::default()));
    wait_for_blocked(&sim);
    let after_crash = crash_copy(dir.path());
    let restarted = open(&sim, after_crash.path(), Duration::from_secs(5));
    assert_eq!(
        restarted.passthrough_binding(&info.uuid).unwrap().phase,
        BindPhase::Releasing
    );
    restarted.reconcile().unwrap();
    // The dead process's unbind is still blocked in the "kernel"; letting it land now hits a
    // device reconcile already returned, which the kernel refuses, so the group stays whole.
    sim.clear_faults();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !sim.blocked_writes().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_original_drivers(&sim);
    assert!(restarted.passthrough_binding(&info.uuid).is_none());
    assert!(restarted.instances().unwrap().is_empty());
}

#[test]
fn claims_bind_at_prepare_refuse_a_second_domain_and_return_at_release() {
    let (sim, engine, _dir) = setup();
    let vm1 = DomainRef {
        name: "vm1".into(),
        uuid: VM1.into(),
    };
    let vm2 = DomainRef {
        name: "vm2".into(),
        uuid: VM2.into(),
    };
    let device = DeviceRequest {
        kind: "passthrough".into(),
        pci_address: Some(GPU.into()),
        ..DeviceRequest::default()
    };
    let claimed = engine
        .claim_domain(&vm1, std::slice::from_ref(&device))
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].kind, InstanceKind::Passthrough);
    assert_eq!(claimed[0].claim.as_ref().unwrap().domain_name, "vm1");
    assert_eq!(driver(&sim, AUDIO).as_deref(), Some("vfio-pci"));
    // prepare sent twice for the same domain is a no-op
    let again = engine
        .claim_domain(&vm1, std::slice::from_ref(&device))
        .unwrap();
    assert_eq!(again[0].uuid, claimed[0].uuid);

    assert_eq!(
        engine.verify_domain(&vm1, std::slice::from_ref(&device)),
        Vec::<String>::new()
    );
    let drift = engine.verify_domain(&vm2, std::slice::from_ref(&device));
    assert!(
        drift
            .iter()
            .any(|line| line.contains("claimed by domain vm1")),
        "{drift:?}"
    );

    let error = engine
        .claim_domain(&vm2, std::slice::from_ref(&device))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InUse);
    assert!(error.to_string().contains("vm2") || format!("{error:?}").contains("vm1"));
    assert_eq!(driver(&sim, GPU).as_deref(), Some("vfio-pci"));

    let report = engine.release_domain(&vm1).unwrap();
    assert_eq!(report.destroyed, [claimed[0].uuid.clone()]);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_original_drivers(&sim);
    // Now the second domain gets it.
    let second = engine.claim_domain(&vm2, &[device]).unwrap();
    assert_eq!(second[0].claim.as_ref().unwrap().domain_name, "vm2");
}

#[test]
fn a_passthrough_profile_picks_a_matching_free_gpu() {
    let sim = SimHost::from_topology_str(TOPOLOGY).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("etc/mdev-manager/profiles.d");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("gpu.toml"),
        "[[profile]]\nname = \"rx6800\"\nisolation = \"passthrough\"\n\
         [profile.device]\nvendor_id = \"1002\"\ndevice_id = \"73bf\"\n",
    )
    .unwrap();
    let engine = open(&sim, dir.path(), Duration::from_secs(5));
    let info = engine
        .create(CreateRequest::new(CreateTarget::Profile {
            profile: "rx6800".into(),
            parent: None,
        }))
        .unwrap();
    assert_eq!(info.kind, InstanceKind::Passthrough);
    assert_eq!(info.parent, GPU);
    assert_eq!(info.profile.as_deref(), Some("rx6800"));
    // The only matching GPU is taken now.
    let error = engine
        .create(CreateRequest::new(CreateTarget::Profile {
            profile: "rx6800".into(),
            parent: None,
        }))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NoCapacity);
    assert!(error.to_string().contains("rx6800"), "{error}");
}

#[test]
fn an_autostart_passthrough_is_bound_again_after_a_reboot() {
    let (sim, engine, dir) = setup();
    let info = engine
        .create(CreateRequest {
            autostart: true,
            ..passthrough(GPU, false)
        })
        .unwrap();
    sim.reboot();
    assert_original_drivers(&sim);
    let restarted = open(&sim, dir.path(), Duration::from_secs(5));
    assert!(!restarted.instance(&info.uuid).unwrap().active);
    let report = restarted.reconcile().unwrap();
    assert!(
        report.actions.contains(&ReconcileAction::Recreated {
            uuid: info.uuid.clone()
        }),
        "{report:?}"
    );
    assert_eq!(driver(&sim, GPU).as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&sim, AUDIO).as_deref(), Some("vfio-pci"));
    assert_eq!(
        restarted.passthrough_binding(&info.uuid).unwrap().phase,
        BindPhase::Bound
    );
}

#[test]
fn a_forced_autostart_passthrough_is_taken_again_after_a_reboot_with_its_host_nic() {
    let (sim, engine, dir) = setup();
    let info = engine
        .create(CreateRequest {
            autostart: true,
            ..passthrough(NIC_GPU, true)
        })
        .unwrap();
    assert_eq!(driver(&sim, NIC).as_deref(), Some("vfio-pci"));
    // The state says it was forced, so the reboot's reconcile takes the NIC again.
    let state = std::fs::read_to_string(dir.path().join("var/lib/mdev-manager/state.json"))
        .expect("state.json");
    assert!(state.contains("\"force\": true"), "{state}");
    sim.reboot();
    assert_eq!(driver(&sim, NIC).as_deref(), Some("igb"));
    let restarted = open(&sim, dir.path(), Duration::from_secs(5));
    let report = restarted.reconcile().unwrap();
    assert!(
        report.actions.contains(&ReconcileAction::Recreated {
            uuid: info.uuid.clone()
        }),
        "{report:?}"
    );
    assert_eq!(driver(&sim, NIC_GPU).as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&sim, NIC).as_deref(), Some("vfio-pci"));
    restarted
        .destroy(&info.uuid, DestroyOptions::default())
        .unwrap();
    assert_eq!(driver(&sim, NIC).as_deref(), Some("igb"));

    // An unforced one is not written with the key (older readers see the same file).
    let (_sim, engine, dir) = setup();
    engine.create(passthrough(GPU, false)).unwrap();
    let state = std::fs::read_to_string(dir.path().join("var/lib/mdev-manager/state.json"))
        .expect("state.json");
    assert!(!state.contains("\"force\""), "{state}");
}

/// Each member of `gpu`'s IOMMU group with its role and host use, as the survey reports them.
fn member_roles(engine: &Engine, gpu: &str) -> Vec<(String, MemberRole, Option<String>)> {
    engine
        .passthrough_group(gpu)
        .unwrap()
        .members
        .iter()
        .map(|m| (m.address.to_string(), m.role, m.host_use.clone()))
        .collect()
}

/// The VM tier's stand-in GPU as the `samples` topology mirrors it (bochs-display + HDA, one
/// group, drivers loaded by the guest's `passthrough` group): the same bind and release the
/// real kernel runs in `tests/vm` (`group_passthrough`).
#[test]
fn the_vm_tier_stand_in_gpu_binds_and_returns_on_the_samples_topology() {
    const STAND_IN: &str = "0000:02:00.0";
    const STAND_IN_AUDIO: &str = "0000:02:00.1";
    let sim = SimHost::builtin("samples").unwrap();
    // Unbound at boot, as in the guest before it loads the drivers.
    assert_eq!(driver(&sim, STAND_IN), None);
    sim.load_module("bochs").unwrap();
    sim.load_module("snd_hda_intel").unwrap();
    assert_eq!(driver(&sim, STAND_IN).as_deref(), Some("bochs-drm"));
    assert_eq!(
        driver(&sim, STAND_IN_AUDIO).as_deref(),
        Some("snd_hda_intel")
    );
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path(), Duration::from_secs(5));

    assert_eq!(
        member_roles(&engine, STAND_IN),
        [
            (STAND_IN.into(), MemberRole::Gpu, None),
            (STAND_IN_AUDIO.into(), MemberRole::Function, None),
        ]
    );

    let group = group_of(&sim, STAND_IN);
    let info = engine.create(passthrough(STAND_IN, false)).unwrap();
    assert!(info.active);
    assert_eq!(driver(&sim, STAND_IN).as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&sim, STAND_IN_AUDIO).as_deref(), Some("vfio-pci"));
    assert!(sim.exists(Path::new(&format!("/dev/vfio/{group}"))));

    engine
        .destroy(&info.uuid, DestroyOptions::default())
        .unwrap();
    assert_eq!(driver(&sim, STAND_IN).as_deref(), Some("bochs-drm"));
    assert_eq!(
        driver(&sim, STAND_IN_AUDIO).as_deref(),
        Some("snd_hda_intel")
    );
    assert_eq!(override_of(&sim, STAND_IN), "(null)\n");
    assert_eq!(override_of(&sim, STAND_IN_AUDIO), "(null)\n");
    assert!(!sim.exists(Path::new(&format!("/dev/vfio/{group}"))));
}

/// The VM tier's force stand-in as the `samples` topology mirrors it (a bochs-display and an
/// AHCI controller in one group, drivers loaded by the guest's `passthrough` group): refused
/// without force naming the AHCI function and its driver, taken whole with force, given back
/// whole at release - what `tests/vm` checks on the real kernel (`pt_force_*`).
#[test]
fn the_vm_tier_force_stand_in_is_refused_then_forced_on_the_samples_topology() {
    const DISPLAY: &str = "0000:03:00.0";
    const SATA: &str = "0000:03:00.1";
    let sim = SimHost::builtin("samples").unwrap();
    assert_eq!(driver(&sim, SATA), None);
    sim.load_module("bochs").unwrap();
    sim.load_module("ahci").unwrap();
    assert_eq!(driver(&sim, DISPLAY).as_deref(), Some("bochs-drm"));
    assert_eq!(driver(&sim, SATA).as_deref(), Some("ahci"));
    let group = group_of(&sim, DISPLAY);
    assert_eq!(group_of(&sim, SATA), group);
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path(), Duration::from_secs(5));

    assert_eq!(
        member_roles(&engine, DISPLAY),
        [
            (DISPLAY.into(), MemberRole::Gpu, None),
            (
                SATA.into(),
                MemberRole::Unexpected,
                Some("a storage controller driven by ahci".into())
            ),
        ]
    );

    let err = engine.create(passthrough(DISPLAY, false)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InUse);
    assert_eq!(
        err.to_string(),
        format!(
            "IOMMU group {group} of GPU {DISPLAY}: {SATA} is in use by the host (a storage \
             controller driven by ahci); force takes it anyway"
        )
    );
    assert_eq!(driver(&sim, DISPLAY).as_deref(), Some("bochs-drm"));
    assert_eq!(driver(&sim, SATA).as_deref(), Some("ahci"));
    assert_eq!(override_of(&sim, DISPLAY), "(null)\n");
    assert_eq!(override_of(&sim, SATA), "(null)\n");
    assert!(engine.instances().unwrap().is_empty());

    let info = engine.create(passthrough(DISPLAY, true)).unwrap();
    assert!(info.active);
    assert_eq!(driver(&sim, DISPLAY).as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&sim, SATA).as_deref(), Some("vfio-pci"));
    assert!(sim.exists(Path::new(&format!("/dev/vfio/{group}"))));

    engine
        .destroy(&info.uuid, DestroyOptions::default())
        .unwrap();
    assert_eq!(driver(&sim, DISPLAY).as_deref(), Some("bochs-drm"));
    assert_eq!(driver(&sim, SATA).as_deref(), Some("ahci"));
    assert_eq!(override_of(&sim, DISPLAY), "(null)\n");
    assert_eq!(override_of(&sim, SATA), "(null)\n");
    assert!(!sim.exists(Path::new(&format!("/dev/vfio/{group}"))));
}
