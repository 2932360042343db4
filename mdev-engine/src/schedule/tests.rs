//! Scheduling on the simulated host: admission refusals with their numbers, the software,
//! NVIDIA and AMD backends' outputs as the host sees them, and persistence across a restart
//! and a reboot.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::{CreateRequest, CreateTarget, DestroyOptions, DiskFiles, EngineConfig};
use mdev_host::HostFs;
use mdev_sim::SimHost;

const UUID_A: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
const UUID_B: &str = "0b7f4c6e-1a2b-4c3d-8e9f-001122334455";
const UUID_C: &str = "5d0c0a8e-3b1f-4a57-9d7e-0e1f2a3b4c5d";
const T4: &str = "0000:3b:00.0";
const AMD: &str = "0000:0c:00.0";

fn config() -> EngineConfig {
    EngineConfig {
        readiness_timeout: Duration::from_secs(10),
        poll_interval: Duration::from_millis(10),
        write_timeout: Duration::from_secs(10),
        ..EngineConfig::default()
    }
}

fn open(host: Arc<dyn HostFs>, root: &Path) -> Engine {
    Engine::new(host, Arc::new(DiskFiles::new(root)), config()).unwrap()
}

fn mdev(parent: &str, type_id: &str, uuid: &str) -> CreateRequest {
    CreateRequest {
        uuid: Some(uuid.to_owned()),
        ..CreateRequest::new(CreateTarget::Mdev {
            parent: parent.into(),
            type_id: type_id.into(),
        })
    }
}

fn pct(percent: u32) -> u32 {
    percent * 10_000
}

fn stored_scheduling(engine: &Engine, uuid: &str) -> Scheduling {
    lock(&engine.state).instance(uuid).unwrap().scheduling
}

#[test]
fn guarantees_over_100_percent_are_refused_with_the_numbers_and_change_nothing() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(Arc::new(sim.clone()), dir.path());
    engine.create(mdev("mtty", "mtty-1", UUID_A)).unwrap();
    engine.create(mdev("mtty", "mtty-1", UUID_B)).unwrap();
    engine
        .set_instance_schedule(UUID_A, 100, pct(60), 0)
        .unwrap();
    let before = std::fs::read(dir.path().join("var/lib/mdev-manager/state.json")).unwrap();

    let error = engine
        .set_instance_schedule(UUID_B, 100, pct(50), 0)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NoCapacity);
    let message = chain(&error);
    for needle in ["mtty", "110%", "60%", "50%", UUID_A, UUID_B] {
        assert!(
            message.contains(needle),
            "{needle:?} missing from {message}"
        );
    }
    assert_eq!(stored_scheduling(&engine, UUID_B), Scheduling::default());
    let after = std::fs::read(dir.path().join("var/lib/mdev-manager/state.json")).unwrap();
    assert_eq!(
        before, after,
        "a refused change must not touch the state file"
    );

    // Exactly 100% is admitted.
    engine
        .set_instance_schedule(UUID_B, 100, pct(40), 0)
        .unwrap();
}

#[test]
fn bad_settings_are_invalid_arguments_naming_the_instance() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(Arc::new(sim), dir.path());
    engine.create(mdev("mtty", "mtty-1", UUID_A)).unwrap();
    for (weight, min, max, needle) in [
        (0, 0, 0, "weight"),
        (10_001, 0, 0, "weight"),
        (100, pct(50), pct(20), "50%"),
        (100, 0, 1_000_001, "max share"),
    ] {
        let error = engine
            .set_instance_schedule(UUID_A, weight, min, max)
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgs, "{error:?}");
        let message = chain(&error);
        assert!(
            message.contains(UUID_A) && message.contains(needle),
            "{message}"
        );
    }
    assert_eq!(stored_scheduling(&engine, UUID_A), Scheduling::default());
    let missing = engine.set_instance_schedule(UUID_C, 100, 0, 0).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    let malformed = engine
        .set_instance_schedule("not-a-uuid", 100, 0, 0)
        .unwrap_err();
    assert_eq!(malformed.kind(), ErrorKind::InvalidArgs);
    let parent = engine
        .set_parent_policy(
            "mtty",
            ParentScheduleChange {
                period_us: Some(10),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(parent.kind(), ErrorKind::InvalidArgs);
    assert!(chain(&parent).contains("mtty"));
    let unknown = engine
        .set_parent_policy("nosuchparent", ParentScheduleChange::default())
        .unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::NotFound);
}

#[test]
fn software_backend_reports_the_plan_for_running_instances() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(Arc::new(sim.clone()), dir.path());
    engine.create(mdev("mtty", "mtty-1", UUID_A)).unwrap();
    engine.create(mdev("mtty", "mtty-1", UUID_B)).unwrap();
    let events = engine.subscribe();
    engine.set_instance_schedule(UUID_A, 100, 0, 0).unwrap();
    let b = engine.set_instance_schedule(UUID_B, 300, 0, 0).unwrap();
    assert_eq!(b.requested.ppm(), pct(75));
    assert_eq!(b.effective.ppm(), pct(75));
    assert!(b.enforced);
    assert_eq!(b.time_slice_us, 75_000, "75% of the default 100 ms period");
    assert!(b.note.contains("software scheduler"), "{}", b.note);
    let mut seen = Vec::new();
    while let Some(event) = events.try_recv() {
        seen.push(event);
    }
    assert!(seen.contains(&EngineEvent::InstanceChanged {
        uuid: UUID_A.into()
    }));
    assert!(seen.contains(&EngineEvent::ParentChanged {
        parent: "mtty".into()
    }));

    // A cap on B under `fixed-share` leaves time unused; its slice follows.
    let status = engine
        .set_parent_policy(
            "mtty",
            ParentScheduleChange {
                policy: Some(Policy::FixedShare),
                period_us: Some(20_000),
                time_slice_us: Some(2_000),
            },
        )
        .unwrap();
    assert_eq!(status.backend, Backend::Software);
    assert!(status.stored);
    assert_eq!(status.schedule.period_us, 20_000);
    let a = &status.instances[status
        .instances
        .iter()
        .position(|i| i.uuid == UUID_A)
        .unwrap()];
    assert_eq!(a.time_slice_us, 5_000, "25% of 20 ms");

    // A stopped (defined) instance is listed but not planned.
    engine.destroy(UUID_B, DestroyOptions::default()).unwrap();
    let status = engine.parent_schedule_status("mtty").unwrap();
    assert_eq!(status.instances.len(), 1);
    assert_eq!(status.instances[0].requested.ppm(), pct(100));
    assert_eq!(status.plan().unwrap().instances.len(), 1);
}

#[test]
fn nvidia_policy_goes_to_the_modprobe_file_under_the_root_and_is_refused_while_vgpus_run() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(Arc::new(sim.clone()), dir.path());
    let file = dir.path().join("etc/modprobe.d/mdev-manager-nvidia.conf");
    assert!(!file.exists(), "nothing is written before a policy is set");
    // The driver's default is reported until a policy is set.
    let status = engine.parent_schedule_status(T4).unwrap();
    assert_eq!(status.backend, Backend::Nvidia);
    assert_eq!(status.schedule.policy, Policy::BestEffort);
    assert!(!status.stored);

    let status = engine
        .set_parent_policy(
            T4,
            ParentScheduleChange {
                policy: Some(Policy::EqualShare),
                time_slice_us: Some(3_000),
                ..Default::default()
            },
        )
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains(
            "options nvidia NVreg_RegistryDwordsPerDevice=\"pci=0000:3b:00.0;RmPVMRL=0x00030001\""
        ),
        "{text}"
    );
    assert!(status.note.contains("reload"), "{}", status.note);

    // With a vGPU on the GPU the driver takes no scheduler change: refused, nothing changes.
    engine.create(mdev(T4, "nvidia-230", UUID_A)).unwrap();
    let error = engine
        .set_parent_policy(
            T4,
            ParentScheduleChange {
                policy: Some(Policy::FixedShare),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Busy);
    assert!(chain(&error).contains(T4), "{}", chain(&error));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    assert_eq!(
        engine.parent_schedule_status(T4).unwrap().schedule.policy,
        Policy::EqualShare
    );

    // Under equal share the weight is stored but does not count, in the plan as in the driver.
    engine.create(mdev(T4, "nvidia-230", UUID_B)).unwrap();
    let b = engine.set_instance_schedule(UUID_B, 300, 0, 0).unwrap();
    assert_eq!(b.requested.ppm(), pct(50), "equal-share ignores weights");
    assert_eq!(b.effective.ppm(), pct(50), "equal share among two vGPUs");
    assert!(b.enforced, "{}", b.note);
    // A guarantee the driver cannot give is reported as such.
    let b = engine
        .set_instance_schedule(UUID_B, 300, pct(70), 0)
        .unwrap();
    assert_eq!(b.requested.ppm(), pct(70));
    assert!(!b.enforced);
    assert!(b.note.contains("guarantee"), "{}", b.note);
    // Fixed share reported from the type's max_instance (T4-1Q: 16).
    engine.destroy(UUID_A, DestroyOptions::default()).unwrap();
    engine.destroy(UUID_B, DestroyOptions::default()).unwrap();
    engine
        .set_parent_policy(
            T4,
            ParentScheduleChange {
                policy: Some(Policy::FixedShare),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("pci=0000:3b:00.0;RmPVMRL=0x00030011"));
    engine.create(mdev(T4, "nvidia-230", UUID_C)).unwrap();
    let c = engine.instance_schedule_status(UUID_C).unwrap();
    assert_eq!(c.effective.ppm(), 1_000_000 / 16);
}

fn amd_vf() -> CreateRequest {
    CreateRequest::new(CreateTarget::Vf {
        pf: AMD.into(),
        vf: None,
    })
}

/// The VF index (on the AMD PF) of a VF instance.
fn vf_index(engine: &Engine, uuid: &str) -> u32 {
    let record = lock(&engine.state).instance(uuid).unwrap().clone();
    engine
        .inventory()
        .unwrap()
        .sriov_pfs
        .iter()
        .find(|p| p.function.address.to_string() == AMD)
        .unwrap()
        .vfs
        .iter()
        .find(|vf| Some(vf.function.address) == record.vf)
        .unwrap()
        .index
}

#[test]
fn amd_slices_reach_gim_debugfs_in_proportion_to_the_weights_and_come_back_after_a_reboot() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(Arc::new(sim.clone()), dir.path());
    assert_eq!(sim.gim_time_slices(AMD), Some(Default::default()));
    let first = engine
        .create(CreateRequest {
            autostart: true,
            ..amd_vf()
        })
        .unwrap();
    let second = engine
        .create(CreateRequest {
            autostart: true,
            ..amd_vf()
        })
        .unwrap();
    engine
        .set_parent_policy(
            AMD,
            ParentScheduleChange {
                policy: Some(Policy::FixedShare),
                ..Default::default()
            },
        )
        .unwrap();
    let status = engine
        .set_instance_schedule(&second.uuid, 300, 0, 0)
        .unwrap();
    let slices = sim.gim_time_slices(AMD).unwrap();
    assert_eq!(slices.len(), 2, "{slices:?}");
    let a = slices[&vf_index(&engine, &first.uuid)];
    let b = slices[&vf_index(&engine, &second.uuid)];
    assert_eq!(b, 3 * a, "weights 100 : 300 -> slices {a} : {b}");
    // The other two VFs keep GIM's default 6 ms; the sim refuses over-commit, so the whole fits.
    assert!(a + b + 2 * 6_000 <= 4 * 6_000, "{a} + {b}");
    assert_eq!(status.time_slice_us, b);
    // Honest report: the VFs not managed here keep their default slice, so the managed ones get
    // their slice out of the whole budget, not the 25% / 75% the plan asks.
    assert!(!status.enforced);
    assert!(status.note.contains("not managed"), "{}", status.note);
    assert_eq!(
        u64::from(status.effective.ppm()),
        u64::from(b) * 1_000_000 / (4 * 6_000)
    );

    // Reboot: GIM starts with defaults; reconcile recreates the VFs and writes the slices again.
    sim.reboot();
    assert_eq!(sim.gim_time_slices(AMD), Some(Default::default()));
    let reopened = open(Arc::new(sim.clone()), dir.path());
    reopened.reconcile().unwrap();
    assert_eq!(sim.gim_time_slices(AMD).unwrap(), slices);
}

#[test]
fn weights_and_policies_survive_a_restart_and_a_reboot() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etc/modprobe.d/mdev-manager-nvidia.conf");
    {
        let engine = open(Arc::new(sim.clone()), dir.path());
        // The policy first, while the GPU has no vGPU (the driver's rule).
        engine
            .set_parent_policy(
                T4,
                ParentScheduleChange {
                    policy: Some(Policy::FixedShare),
                    time_slice_us: Some(24_000),
                    ..Default::default()
                },
            )
            .unwrap();
        engine
            .create(CreateRequest {
                autostart: true,
                ..mdev(T4, "nvidia-230", UUID_A)
            })
            .unwrap();
        engine
            .set_instance_schedule(UUID_A, 250, pct(20), pct(80))
            .unwrap();
    }
    let check = |engine: &Engine| {
        let status = engine.instance_schedule_status(UUID_A).unwrap();
        assert!(status.active);
        assert_eq!(status.settings.weight.get(), 250);
        assert_eq!(status.settings.min_share.map(Share::ppm), Some(pct(20)));
        assert_eq!(status.settings.max_share.map(Share::ppm), Some(pct(80)));
        let parent = engine.parent_schedule_status(T4).unwrap();
        assert!(parent.stored);
        assert_eq!(parent.schedule.policy, Policy::FixedShare);
        assert_eq!(parent.schedule.time_slice_us, Some(24_000));
        assert!(std::fs::read_to_string(&file)
            .unwrap()
            .contains("pci=0000:3b:00.0;RmPVMRL=0x00180011"));
    };
    // Restart: a new engine over the same state directory.
    check(&open(Arc::new(sim.clone()), dir.path()));

    // Reboot: the vGPU is gone and so is the modprobe file (say an admin removed it);
    // reconcile recreates the autostart instance with its settings and rewrites the file.
    sim.reboot();
    std::fs::remove_file(&file).unwrap();
    let engine = open(Arc::new(sim.clone()), dir.path());
    engine.reconcile().unwrap();
    check(&engine);
}

#[test]
fn a_profiles_compute_request_becomes_the_settings_and_is_admitted_at_create() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("etc/mdev-manager/profiles.d");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("site.toml"),
        "[[profile]]\nname = \"serial-60\"\nvendor = \"mtty\"\nisolation = \"time-sliced\"\n\
         [profile.compute]\nweight = 600\nmin_share = 60\nmax_share = 90\n",
    )
    .unwrap();
    let engine = open(Arc::new(sim.clone()), dir.path());
    let request = |uuid: &str| CreateRequest {
        uuid: Some(uuid.to_owned()),
        ..CreateRequest::new(CreateTarget::Profile {
            profile: "serial-60".into(),
            parent: None,
        })
    };
    engine.create(request(UUID_A)).unwrap();
    let status = engine.instance_schedule_status(UUID_A).unwrap();
    assert_eq!(status.settings.weight.get(), 600);
    assert_eq!(status.settings.min_share.map(Share::ppm), Some(pct(60)));
    assert_eq!(status.settings.max_share.map(Share::ppm), Some(pct(90)));
    assert_eq!(status.requested.ppm(), pct(90), "alone, up to its cap");

    // A second 60% guarantee on the same GPU does not fit: refused before any device exists.
    let error = engine.create(request(UUID_B)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NoCapacity, "{error}");
    let message = chain(&error);
    assert!(
        message.contains("120%") && message.contains(UUID_B),
        "{message}"
    );
    assert_eq!(sim.mdev_uuids(), vec![UUID_A.to_owned()]);
    assert!(engine.instance(UUID_B).is_err());
}

#[test]
fn gim_slices_follow_vf_creates_and_a_destroyed_vf_gets_the_default_back() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(Arc::new(sim.clone()), dir.path());
    let first = engine.create(amd_vf()).unwrap();
    engine
        .set_instance_schedule(&first.uuid, 300, 0, 0)
        .unwrap();
    let alone = sim.gim_time_slices(AMD).unwrap();
    // A second VF changes every managed VF's slice: written at create, without a settings call.
    let second = engine.create(amd_vf()).unwrap();
    let both = sim.gim_time_slices(AMD).unwrap();
    let (first_index, second_index) = (
        vf_index(&engine, &first.uuid),
        vf_index(&engine, &second.uuid),
    );
    assert_ne!(
        alone.get(&first_index),
        both.get(&first_index),
        "{alone:?} -> {both:?}"
    );
    assert_eq!(both[&first_index], 3 * both[&second_index], "{both:?}");
    engine
        .destroy(&second.uuid, DestroyOptions::default())
        .unwrap();
    let after = sim.gim_time_slices(AMD).unwrap();
    assert_eq!(
        after.get(&second_index),
        Some(&6_000),
        "the released VF gets GIM's default back: {after:?}"
    );
    assert_eq!(after[&first_index], alone[&first_index]);
}

#[test]
fn a_raw_stored_policy_without_the_parent_name_is_read_and_a_bad_one_falls_back() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(Arc::new(sim), dir.path());
    engine
        .set_parent_schedule("mtty", serde_json::json!({"policy": "fixed-share"}))
        .unwrap();
    let status = engine.parent_schedule_status("mtty").unwrap();
    assert!(status.stored);
    assert_eq!(status.schedule.policy, Policy::FixedShare);
    engine
        .set_parent_schedule("mtty", serde_json::json!({"policy": "round-robin"}))
        .unwrap();
    let status = engine.parent_schedule_status("mtty").unwrap();
    assert!(!status.stored);
    assert_eq!(status.schedule.policy, Policy::Weighted);
    assert!(status.note.contains("not valid"), "{}", status.note);
}
