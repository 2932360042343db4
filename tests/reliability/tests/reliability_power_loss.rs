//! Power loss: the machine dies after the state file was written but before it was synced.
//! The store must come back with the last durable state, and reconcile must then bring the
//! (rebooted) host in line with it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mdev_engine::state::{self, DiskFiles, StateFiles};
use mdev_engine::{CreateRequest, CreateTarget, Engine, EngineConfig};
use mdev_sim::SimHost;
use reliability::power_loss::{PowerCut, PowerLossFiles, UnsyncedWrite};

const DURABLE: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
const LOST: &str = "0b7f4c6e-1a2b-4c3d-8e9f-001122334455";

fn config() -> EngineConfig {
    EngineConfig {
        readiness_timeout: Duration::from_millis(300),
        poll_interval: Duration::from_millis(10),
        write_timeout: Duration::from_millis(300),
        ..EngineConfig::default()
    }
}

fn autostart_mdev(uuid: &str, type_id: &str) -> CreateRequest {
    CreateRequest {
        uuid: Some(uuid.into()),
        persistent: true,
        autostart: true,
        ..CreateRequest::new(CreateTarget::Mdev {
            parent: "mtty".into(),
            type_id: type_id.into(),
        })
    }
}

/// The service's mode: every change an append to the state journal.
fn journal_config() -> EngineConfig {
    EngineConfig {
        state_journal: true,
        ..config()
    }
}

/// Creates `DURABLE`, then cuts the power during the state write of the `LOST` create.
fn crash_during_second_create(root: &Path, sim: &SimHost, mode: UnsyncedWrite) {
    crash_during_second_create_with(root, sim, mode, config())
}

/// [`crash_during_second_create`] with an engine of `config`.
fn crash_during_second_create_with(
    root: &Path,
    sim: &SimHost,
    mode: UnsyncedWrite,
    config: EngineConfig,
) {
    let files = Arc::new(PowerLossFiles::new(root));
    let engine = Engine::new(Arc::new(sim.clone()), files.clone(), config).expect("engine");
    engine
        .create(autostart_mdev(DURABLE, "mtty-1"))
        .expect("durable create");
    files.arm(1, mode);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let _ = engine.create(autostart_mdev(LOST, "mtty-2"));
    }));
    let payload = outcome.expect_err("the power cut must interrupt the create");
    assert!(
        payload.downcast_ref::<PowerCut>().is_some(),
        "a real panic, not the power cut"
    );
    assert!(files.is_dead());
    // The kernel's devices do not survive a power loss either.
    sim.reboot();
}

#[test]
fn atomic_store_recovers_the_last_durable_state_after_a_power_cut_before_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SimHost::builtin("samples").unwrap();
    crash_during_second_create(dir.path(), &sim, UnsyncedWrite::Atomic);

    let files: Arc<dyn StateFiles> = Arc::new(DiskFiles::new(dir.path()));
    let recovered = state::load(files.as_ref(), &config().state_dir).expect("state loads");
    let uuids: Vec<String> = recovered
        .instances
        .keys()
        .map(ToString::to_string)
        .collect();
    assert_eq!(uuids, vec![DURABLE], "state after the power cut");

    let engine = Engine::new(Arc::new(sim.clone()), files, config()).expect("engine restarts");
    let report = engine.reconcile().expect("reconcile");
    assert!(
        format!("{report:?}").contains(DURABLE),
        "reconcile recreates the durable autostart instance: {report:?}"
    );
    assert_eq!(sim.mdev_uuids(), vec![DURABLE.to_string()]);
    let managed: Vec<String> = engine
        .instances()
        .unwrap()
        .into_iter()
        .filter(|i| i.owner.is_some())
        .map(|i| i.uuid)
        .collect();
    assert_eq!(managed, vec![DURABLE.to_string()]);
}

#[test]
fn journal_store_loses_only_the_unacknowledged_change_when_power_is_cut_between_append_and_sync() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SimHost::builtin("samples").unwrap();
    crash_during_second_create_with(dir.path(), &sim, UnsyncedWrite::Atomic, journal_config());

    let files: Arc<dyn StateFiles> = Arc::new(DiskFiles::new(dir.path()));
    let loaded = state::load_detailed(files.as_ref(), &config().state_dir).expect("state loads");
    assert!(
        loaded.journal.torn,
        "the cut fell between the append and its sync: {:?}",
        loaded.journal
    );
    let uuids: Vec<String> = loaded
        .state
        .instances
        .keys()
        .map(ToString::to_string)
        .collect();
    assert_eq!(uuids, vec![DURABLE], "state after the power cut");
    assert!(
        loaded.state.intents.is_empty() && loaded.state.pending_creates.is_empty(),
        "nothing of the cut create survives: {:?}",
        loaded.state
    );

    let engine =
        Engine::new(Arc::new(sim.clone()), files, journal_config()).expect("engine restarts");
    let report = engine.reconcile().expect("reconcile");
    assert!(
        format!("{report:?}").contains(DURABLE),
        "reconcile recreates the durable autostart instance: {report:?}"
    );
    assert_eq!(sim.mdev_uuids(), vec![DURABLE.to_string()]);
    let reloaded = state::load(&DiskFiles::new(dir.path()), &config().state_dir).unwrap();
    assert_eq!(
        reloaded
            .instances
            .keys()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec![DURABLE],
        "the restart folded the journal, dropping the torn tail"
    );
}

#[test]
fn in_place_store_would_lose_everything_negative_control() {
    // Shows the check above can fail: a store that rewrites the file in place is left torn.
    let dir = tempfile::tempdir().unwrap();
    let sim = SimHost::builtin("samples").unwrap();
    crash_during_second_create(dir.path(), &sim, UnsyncedWrite::InPlace);
    let files = DiskFiles::new(dir.path());
    let error = state::load(&files, &config().state_dir).expect_err("a torn file cannot load");
    assert!(error.to_string().contains("state.json"), "{error}");
    let engine = Engine::new(Arc::new(sim), Arc::new(files), config());
    assert!(
        engine.is_err(),
        "the engine refuses a torn state rather than starting empty"
    );
}

#[test]
fn a_leftover_temp_file_from_a_crash_before_rename_is_ignored_and_replaced() {
    // What a crash inside DiskFiles::write_atomic before its rename leaves on a real disk: the
    // old state.json and a temp file with part of the new content.
    let dir = tempfile::tempdir().unwrap();
    let sim = SimHost::builtin("samples").unwrap();
    let files = Arc::new(DiskFiles::new(dir.path()));
    let engine = Engine::new(Arc::new(sim.clone()), files.clone(), config()).unwrap();
    engine.create(autostart_mdev(DURABLE, "mtty-1")).unwrap();
    let state_dir = dir.path().join("var/lib/mdev-manager");
    let good = std::fs::read(state_dir.join("state.json")).unwrap();
    for pid in [std::process::id(), 1] {
        std::fs::write(
            state_dir.join(format!("state.json.tmp.{pid}")),
            &good[..good.len() / 3],
        )
        .unwrap();
    }
    drop(engine);
    sim.reboot();
    let engine = Engine::new(Arc::new(sim.clone()), files, config()).expect("restart");
    engine.reconcile().unwrap();
    assert_eq!(sim.mdev_uuids(), vec![DURABLE.to_string()]);
    // The next save replaces a temp file of the same name instead of appending to it.
    engine.create(autostart_mdev(LOST, "mtty-2")).unwrap();
    let reloaded = state::load(&DiskFiles::new(dir.path()), &config().state_dir).unwrap();
    assert_eq!(reloaded.instances.len(), 2);
}
