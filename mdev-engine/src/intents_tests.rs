//! Write-ahead intents (`engine::intents`): what a crash between a host write and its save
//! leaves is undone by reconcile, a timed-out create that completes later is matched to its
//! intent, a device without an intent is never touched, and a forced VF count change forgets
//! the records of VFs the kernel re-made.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::intents::Intent;
use super::*;
use mdev_host::discovery::{self, layout};
use mdev_sim::{Fault, SimHost};

const UUID_A: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
const UUID_B: &str = "0b7f4c6e-1a2b-4c3d-8e9f-001122334455";
const NVME: &str = "0000:01:00.0";

fn config() -> EngineConfig {
    EngineConfig {
        readiness_timeout: Duration::from_secs(10),
        poll_interval: Duration::from_millis(10),
        write_timeout: Duration::from_secs(10),
        ..EngineConfig::default()
    }
}

fn open(sim: &SimHost, root: &Path, config: EngineConfig) -> Engine {
    Engine::new(
        Arc::new(sim.clone()),
        Arc::new(DiskFiles::new(root)),
        config,
    )
    .unwrap()
}

/// The durable state a crash right after a host write leaves: the intents, no record.
fn crashed_state(root: &Path, intents: &[(&str, Intent)]) {
    let mut state = StateFile::default();
    for (key, intent) in intents {
        state.intents.insert((*key).to_owned(), intent.clone());
    }
    state::save(
        &DiskFiles::new(root),
        &EngineConfig::default().state_dir,
        &state,
    )
    .unwrap();
}

fn mdev(parent: &str, type_id: &str, uuid: &str) -> CreateRequest {
    CreateRequest {
        uuid: Some(uuid.to_owned()),
        ..CreateRequest::new(CreateTarget::Mdev {
            parent: parent.to_owned(),
            type_id: type_id.to_owned(),
        })
    }
}

fn create_on_host(sim: &SimHost, parent: &str, type_id: &str, uuid: &str) {
    sim.write(
        &layout::mdev_type(parent, type_id).join("create"),
        uuid.as_bytes(),
    )
    .unwrap();
}

fn undone(report: &ReconcileReport) -> Vec<&str> {
    report
        .actions
        .iter()
        .filter_map(|a| match a {
            ReconcileAction::IntentUndone { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_intent_is_durable_before_the_create_write_and_dropped_by_the_save_that_records_it() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(open(&sim, dir.path(), config()));
    // While the create write is slow, the state on disk already names it.
    let slow =
        sim.inject_fault(Fault::slow("*/mtty-1/create", Duration::from_millis(400)).times(1));
    let creating = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.create(mdev("mtty", "mtty-1", UUID_A)))
    };
    let state_path = dir.path().join("var/lib/mdev-manager/state.json");
    let mut during = String::new();
    for _ in 0..200 {
        during = std::fs::read_to_string(&state_path).unwrap_or_default();
        if during.contains(UUID_A) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        during.contains("\"intents\"") && during.contains(UUID_A),
        "no intent on disk during the create write: {during}"
    );
    assert!(
        sim.mdev_uuids().is_empty(),
        "the intent was not written first"
    );
    creating.join().unwrap().unwrap();
    sim.release_fault(slow);
    let after = std::fs::read_to_string(&state_path).unwrap();
    assert!(
        !after.contains("\"intents\""),
        "the intent outlived the save: {after}"
    );
    assert!(after.contains(UUID_A), "{after}");
}

#[test]
fn reconcile_removes_an_mdev_whose_create_was_never_acknowledged_and_clears_the_intent() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    create_on_host(&sim, "mtty", "mtty-1", UUID_A);
    crashed_state(
        dir.path(),
        &[(
            UUID_A,
            Intent::mdev("mtty".parse().unwrap(), "mtty-1".parse().unwrap()),
        )],
    );
    let engine = open(&sim, dir.path(), config());
    let report = engine.reconcile().unwrap();
    assert_eq!(undone(&report), [UUID_A], "{report:?}");
    assert!(
        sim.mdev_uuids().is_empty(),
        "the unacknowledged mdev stayed"
    );
    assert!(lock(&engine.state).intents.is_empty());
    // Durably cleared: a second start has nothing to undo.
    drop(engine);
    let again = open(&sim, dir.path(), config()).reconcile().unwrap();
    assert!(undone(&again).is_empty(), "{again:?}");
}

#[test]
fn an_intent_whose_write_never_happened_is_cleared_and_nothing_else_is_touched() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Someone else's mdev, no intent: the rule "never touch what we did not create" stands.
    create_on_host(&sim, "mbochs", "mbochs-small", UUID_B);
    crashed_state(
        dir.path(),
        &[(
            UUID_A,
            Intent::mdev("mtty".parse().unwrap(), "mtty-1".parse().unwrap()),
        )],
    );
    let engine = open(&sim, dir.path(), config());
    let report = engine.reconcile().unwrap();
    assert!(undone(&report).is_empty(), "{report:?}");
    assert_eq!(sim.mdev_uuids(), [UUID_B]);
    assert!(report.actions.contains(&ReconcileAction::Unknown {
        id: UUID_B.into(),
        parent: "mbochs".into()
    }));
    assert!(lock(&engine.state).intents.is_empty());
}

#[test]
fn reconcile_unbinds_a_vf_whose_bind_was_never_acknowledged() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let vf = {
        let engine = open(&sim, dir.path(), config());
        engine
            .set_num_vfs(NVME, 2, DestroyOptions::default())
            .unwrap()[0]
    };
    // The crash: the VF is bound, the state holds only the intent.
    let engine = open(&sim, dir.path(), config());
    engine.host.bind_vfio(vf).unwrap();
    drop(engine);
    let mut state = state::load(
        &DiskFiles::new(dir.path()),
        &EngineConfig::default().state_dir,
    )
    .unwrap();
    state.intents.insert(
        UUID_A.into(),
        Intent::vf(
            InstanceKind::Vf,
            NVME.parse().unwrap(),
            TypeId::vfio_pci(),
            vf,
            None,
        ),
    );
    state::save(
        &DiskFiles::new(dir.path()),
        &EngineConfig::default().state_dir,
        &state,
    )
    .unwrap();
    let engine = open(&sim, dir.path(), config());
    let report = engine.reconcile().unwrap();
    assert_eq!(undone(&report), [UUID_A], "{report:?}");
    let driver = discovery::link_target_name(engine.fs(), &layout::pci_device(&vf).join("driver"));
    assert_eq!(driver, None, "VF {vf} still bound");
    // The VF is free again for the next create.
    let info = engine
        .create(CreateRequest::new(CreateTarget::Vf {
            pf: NVME.into(),
            vf: Some(vf.to_string()),
        }))
        .unwrap();
    assert_eq!(info.vf, Some(vf));
}

#[test]
fn reconcile_sets_back_a_vf_count_change_that_was_never_acknowledged() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open(&sim, dir.path(), config());
        engine
            .host
            .set_num_vfs(NVME.parse().unwrap(), 0, 3)
            .unwrap();
    }
    crashed_state(dir.path(), &[(NVME, Intent::VfCount { from: 0, to: 3 })]);
    assert_eq!(sim.vf_count(), 3);
    let engine = open(&sim, dir.path(), config());
    let report = engine.reconcile().unwrap();
    assert_eq!(undone(&report), [NVME], "{report:?}");
    assert_eq!(sim.vf_count(), 0);
}

#[test]
fn a_timed_out_create_that_completes_later_is_removed_never_left_unknown() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(
        &sim,
        dir.path(),
        EngineConfig {
            write_timeout: Duration::from_millis(200),
            ..config()
        },
    );
    sim.inject_fault(Fault::slow("*/mbochs-small/create", Duration::from_millis(800)).times(1));
    let error = engine
        .create(mdev("mbochs", "mbochs-small", UUID_A))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TimedOut, "{error}");
    // Still in flight: a pass now keeps the intent (the kernel may yet make the device).
    let early = engine.reconcile().unwrap();
    if sim.mdev_uuids().is_empty() {
        assert!(undone(&early).is_empty(), "{early:?}");
        assert!(lock(&engine.state).intents.contains_key(UUID_A));
    }
    for _ in 0..400 {
        if engine.stuck_writes() == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(engine.stuck_writes(), 0, "the slow write never finished");
    // The kernel finished the write: hotplug (or the next rescan) matches it to the intent.
    if !sim.mdev_uuids().is_empty() {
        engine.late_completion(UUID_A);
    }
    assert!(sim.mdev_uuids().is_empty(), "the late device was left");
    let report = engine.reconcile().unwrap();
    assert!(
        !report
            .actions
            .iter()
            .any(|a| matches!(a, ReconcileAction::Unknown { .. })),
        "{report:?}"
    );
    assert!(lock(&engine.state).intents.is_empty());
}

#[test]
fn a_forced_vf_count_change_forgets_the_records_of_vfs_the_kernel_made_anew() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path(), config());
    let vfs = engine
        .set_num_vfs(NVME, 3, DestroyOptions::default())
        .unwrap();
    let first = engine
        .create(CreateRequest::new(CreateTarget::Vf {
            pf: NVME.into(),
            vf: Some(vfs[0].to_string()),
        }))
        .unwrap();
    // 3 -> 1 goes through 0: VF 0 exists again afterwards, but unbound, without our instance.
    engine
        .set_num_vfs(NVME, 1, DestroyOptions { force: true })
        .unwrap();
    let left: Vec<InstanceInfo> = engine
        .instances()
        .unwrap()
        .into_iter()
        .filter(|i| i.owner.is_some())
        .collect();
    assert!(
        left.iter().all(|i| i.uuid != first.uuid),
        "the record of the re-made VF {} is kept: {left:?}",
        vfs[0]
    );
    // The VF can be taken again.
    engine
        .create(CreateRequest::new(CreateTarget::Vf {
            pf: NVME.into(),
            vf: Some(vfs[0].to_string()),
        }))
        .unwrap();
}
