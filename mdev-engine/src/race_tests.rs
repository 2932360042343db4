//! Races on one instance inside the engine, on the simulated host: several domains claiming
//! one instance at once, and a claim against a destroy. A slowed sysfs write of the simulated
//! host widens the window between an operation's check and its write, so a check made outside
//! the lock its write takes shows up in a few rounds. After every round: at most one holder,
//! what was acknowledged is true of the state and the host, nothing the engine does not manage
//! is on the host.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use super::*;
use mdev_sim::{Fault, SimHost};

const MTTY: &str = "mtty";
const MTTY_TYPE: &str = "mtty-2";
/// Long enough that every racing thread has read the record before the first write lands.
const SLOW_WRITE: Duration = Duration::from_millis(15);

/// An engine on the simulated `samples` host with its state in a temporary directory. Fields
/// drop in order: the engine before the directory it writes to.
struct Fixture {
    engine: Engine,
    dir: tempfile::TempDir,
    sim: SimHost,
}

impl Fixture {
    /// The state on the real disk; timeouts long enough for the slowed writes.
    fn new() -> Fixture {
        let config = EngineConfig {
            readiness_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(10),
            write_timeout: Duration::from_secs(10),
            ..EngineConfig::default()
        };
        Fixture::with_files(config, |root, _| Arc::new(DiskFiles::new(root)))
    }

    /// The state in the files `files` makes for the temporary root and `config`.
    fn with_files(
        config: EngineConfig,
        files: impl FnOnce(&std::path::Path, &EngineConfig) -> Arc<dyn StateFiles>,
    ) -> Fixture {
        let sim = SimHost::builtin("samples").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let files = files(dir.path(), &config);
        let engine = Engine::new(Arc::new(sim.clone()), files, config).unwrap();
        Fixture { engine, dir, sim }
    }

    /// Slows the host's writes to paths matching `pattern` by `SLOW_WRITE`, for the whole test.
    fn slow(&self, pattern: &str) {
        self.sim.inject_fault(Fault::slow(pattern, SLOW_WRITE));
    }

    /// Whether the mdev `uuid` is on the simulated host.
    fn on_host(&self, uuid: &str) -> bool {
        self.sim.mdev_uuids().iter().any(|u| u == uuid)
    }

    /// Creates the persistent mtty-2 instance `uuid`.
    fn create_persistent(&self, uuid: &str) {
        self.engine
            .create(CreateRequest {
                persistent: true,
                ..mtty_create(uuid)
            })
            .unwrap();
    }

    /// Destroys `uuid` with the default options.
    fn destroy(&self, uuid: &str) -> Result<(), EngineError> {
        self.engine.destroy(uuid, DestroyOptions::default())
    }

    /// Every mdev on the simulated host is one the engine records (nothing unmanaged appeared).
    fn assert_nothing_unmanaged(&self, round: usize) {
        let state = lock(&self.engine.state);
        for uuid in self.sim.mdev_uuids() {
            assert!(
                state.has_instance(&uuid),
                "round {round}: mdev {uuid} is on the host but not managed"
            );
        }
    }
}

fn round_uuid(round: usize) -> String {
    format!("7ace0000-0000-4000-8000-{round:012x}")
}

fn domain_of(index: usize) -> DomainRef {
    DomainRef {
        name: format!("race-vm-{index}"),
        uuid: format!("d0a10000-0000-4000-8000-{index:012x}"),
    }
}

fn by_uuid(uuid: &str) -> DeviceRequest {
    DeviceRequest {
        kind: "mdev".into(),
        uuid: Some(uuid.into()),
        ..DeviceRequest::default()
    }
}

fn mtty_create(uuid: &str) -> CreateRequest {
    CreateRequest {
        uuid: Some(uuid.into()),
        ..CreateRequest::new(CreateTarget::Mdev {
            parent: MTTY.into(),
            type_id: MTTY_TYPE.into(),
        })
    }
}

/// Runs `each(0..threads)` on as many threads released by one barrier; their results in order.
fn race_all<R: Send>(threads: usize, each: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let barrier = Barrier::new(threads);
    std::thread::scope(|scope| {
        let running: Vec<_> = (0..threads)
            .map(|index| {
                let (barrier, each) = (&barrier, &each);
                scope.spawn(move || {
                    barrier.wait();
                    each(index)
                })
            })
            .collect();
        running.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

/// Runs `first` and `second` on two threads released by one barrier, each after its lag.
fn race_lagged<A: Send, B: Send>(
    (lag_first, lag_second): (Duration, Duration),
    first: impl FnOnce() -> A + Send,
    second: impl FnOnce() -> B + Send,
) -> (A, B) {
    let barrier = Barrier::new(2);
    let barrier = &barrier;
    std::thread::scope(|scope| {
        let one = scope.spawn(move || {
            barrier.wait();
            std::thread::sleep(lag_first);
            first()
        });
        let two = scope.spawn(move || {
            barrier.wait();
            std::thread::sleep(lag_second);
            second()
        });
        (one.join().unwrap(), two.join().unwrap())
    })
}

/// `second` starts 0, 4 or 8 ms (by round) after `first`, which gets the head start.
fn race_first_ahead<A: Send, B: Send>(
    round: usize,
    first: impl FnOnce() -> A + Send,
    second: impl FnOnce() -> B + Send,
) -> (A, B) {
    let lag = Duration::from_millis((round % 3) as u64 * 4);
    race_lagged((Duration::ZERO, lag), first, second)
}

/// Runs `first` and `second` on two threads released by one barrier. Both orders happen over
/// the rounds: in even rounds `second` starts a few milliseconds after `first`, in odd rounds
/// `first` starts a few milliseconds after `second` (0, 4 or 8 ms plus 1, by round).
fn race<A: Send, B: Send>(
    round: usize,
    first: impl FnOnce() -> A + Send,
    second: impl FnOnce() -> B + Send,
) -> (A, B) {
    let lag = Duration::from_millis((round % 3) as u64 * 4 + 1);
    if round % 2 == 0 {
        race_lagged((Duration::ZERO, lag), first, second)
    } else {
        race_lagged((lag, Duration::ZERO), first, second)
    }
}

#[test]
fn concurrent_claims_of_one_instance_by_different_domains_let_exactly_one_win() {
    let fx = Fixture::new();
    let engine = &fx.engine;
    // Starting a defined instance is the claim's slow step (between its check and its write).
    fx.slow("*/mdev_supported_types/*/create");
    let claimants = 6;
    for round in 0..12 {
        let uuid = round_uuid(round);
        fx.create_persistent(&uuid);
        // Odd rounds race on a defined (stopped) instance, even ones on a running one.
        if round % 2 == 1 {
            engine.stop(&uuid, DestroyOptions::default()).unwrap();
        }
        let results = race_all(claimants, |index| {
            engine.claim_domain(&domain_of(index), &[by_uuid(&uuid)])
        });
        let winners: Vec<usize> = (0..claimants).filter(|i| results[*i].is_ok()).collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: domains {winners:?} were told they won"
        );
        for error in results.iter().filter_map(|r| r.as_ref().err()) {
            assert_eq!(error.kind(), ErrorKind::InUse, "round {round}: {error}");
            assert!(error.to_string().contains(&uuid), "{error}");
        }
        // The stored holder is the one winner, and the device is on the host.
        let holder = engine
            .instance(&uuid)
            .unwrap()
            .claim
            .map(|c| c.domain_uuid.to_string());
        assert_eq!(holder, Some(domain_of(winners[0]).uuid), "round {round}");
        assert!(fx.on_host(&uuid), "round {round}: not on the host");
        fx.assert_nothing_unmanaged(round);
        engine.release_domain(&domain_of(winners[0])).unwrap();
        fx.destroy(&uuid).unwrap();
    }
}

#[test]
fn a_claim_racing_a_destroy_never_both_succeed_and_leave_nothing_unmanaged() {
    let fx = Fixture::new();
    let engine = &fx.engine;
    // The removal is the destroy's slow step (between its claim check and forgetting).
    fx.slow("*/remove");
    let domain = domain_of(1);
    for round in 0..16 {
        let uuid = round_uuid(round);
        engine.create(mtty_create(&uuid)).unwrap();
        // The destroy gets a head start into its slow removal (most rounds).
        let (destroyed, claimed) = race_first_ahead(
            round,
            || fx.destroy(&uuid),
            || engine.claim_domain(&domain, &[by_uuid(&uuid)]),
        );
        let on_host = fx.on_host(&uuid);
        match (&destroyed, &claimed) {
            (Ok(()), Ok(_)) => panic!("round {round}: a claimed instance was destroyed unforced"),
            (Ok(()), Err(error)) => {
                assert_eq!(error.kind(), ErrorKind::NotFound, "round {round}: {error}");
                assert!(error.to_string().contains(&uuid), "{error}");
                assert!(!on_host, "round {round}: destroyed, yet on the host");
                assert!(
                    engine.instance(&uuid).is_err(),
                    "round {round}: still known"
                );
            }
            (Err(error), Ok(_)) => {
                assert_eq!(error.kind(), ErrorKind::InUse, "round {round}: {error}");
                assert!(on_host, "round {round}: claimed, yet not on the host");
                let claim = engine.instance(&uuid).unwrap().claim;
                assert_eq!(
                    claim.map(|c| c.domain_uuid.to_string()),
                    Some(domain.uuid.clone())
                );
            }
            (Err(d), Err(c)) => panic!("round {round}: both failed: destroy {d}; claim {c}"),
        }
        fx.assert_nothing_unmanaged(round);
        engine.release_domain(&domain).unwrap();
        let _ = fx.destroy(&uuid);
        assert!(!fx.on_host(&uuid), "round {round}: cleanup");
    }
}

#[test]
fn a_definition_racing_a_create_of_the_same_uuid_lets_exactly_one_win() {
    let fx = Fixture::new();
    let engine = &fx.engine;
    // The create's slow step is its sysfs write, between reserving the UUID and recording it.
    fx.slow("*/create");
    for round in 0..12 {
        let uuid = round_uuid(round);
        let (created, defined) = race_first_ahead(
            round,
            || engine.create(mtty_create(&uuid)),
            || {
                engine.define_mdev(crate::MdevDefinition {
                    parent: MTTY.into(),
                    type_id: MTTY_TYPE.into(),
                    uuid: Some(uuid.clone()),
                    autostart: false,
                    attributes: Vec::new(),
                })
            },
        );
        let on_host = fx.on_host(&uuid);
        let known = engine.instance(&uuid).unwrap();
        match (&created, &defined) {
            (Ok(_), Ok(_)) => panic!("round {round}: one UUID both created and defined"),
            (Ok(_), Err(error)) => {
                assert_eq!(
                    error.kind(),
                    ErrorKind::AlreadyExists,
                    "round {round}: {error}"
                );
                assert!(error.to_string().contains(&uuid), "{error}");
                assert!(
                    on_host && known.active && !known.persistent,
                    "round {round}"
                );
            }
            (Err(error), Ok(_)) => {
                assert_eq!(
                    error.kind(),
                    ErrorKind::AlreadyExists,
                    "round {round}: {error}"
                );
                assert!(!on_host, "round {round}: defined only, yet on the host");
                assert!(!known.active && known.persistent, "round {round}");
            }
            (Err(c), Err(d)) => panic!("round {round}: both failed: create {c}; define {d}"),
        }
        fx.assert_nothing_unmanaged(round);
        fx.destroy(&uuid).unwrap();
        assert!(!fx.on_host(&uuid), "round {round}: cleanup");
    }
}

// ---- declarative apply, mdevctl import, attributes and the mdevctl mirror against the
// ---- instance operations (issue 15 race tests)

fn desired_on_mtty(profile: &str, count: u32) -> vgpu_profiles::desired::DesiredState {
    vgpu_profiles::desired::DesiredState {
        instances: vec![vgpu_profiles::desired::DesiredInstances {
            parent: Some(MTTY.into()),
            profile: profile.into(),
            type_id: None,
            count,
            autostart: false,
            weight: None,
            min_share: None,
            max_share: None,
        }],
        ..Default::default()
    }
}

/// Creates `count` dual-port instances on mtty in one batch; their UUIDs.
fn create_duals_on_mtty(engine: &Engine, count: usize) -> Vec<String> {
    let requests = vec![
        CreateRequest::new(CreateTarget::Profile {
            profile: "mtty-dual".into(),
            parent: Some(MTTY.into()),
        });
        count
    ];
    engine
        .create_batch(requests)
        .unwrap()
        .into_iter()
        .map(|info| info.uuid)
        .collect()
}

#[test]
fn an_apply_racing_a_create_for_the_last_room_on_its_parent_lets_exactly_one_win() {
    let fx = Fixture::new();
    let engine = &fx.engine;
    // 10 dual-port instances take 20 of mtty's 24 ports: room for two more, not three.
    let base = create_duals_on_mtty(engine, 10);
    fx.slow("*/mdev_supported_types/*/create");
    for round in 0..12 {
        let plan = engine
            .plan_apply(&desired_on_mtty("mtty-dual", 12), false)
            .unwrap();
        assert_eq!(
            (
                plan.creates.len(),
                plan.creates[0].count,
                plan.destroys.len()
            ),
            (1, 2, 0),
            "round {round}: {}",
            plan.render()
        );
        let uuid = round_uuid(round);
        let (applied, created) = race(
            round,
            || engine.apply_plan(&plan),
            || engine.create(mtty_create(&uuid)),
        );
        let on_host = fx.sim.mdev_uuids();
        match (&applied, &created) {
            (Ok(_), Ok(_)) => panic!("round {round}: 6 ports granted where 4 were free"),
            (Ok(report), Err(error)) => {
                assert_eq!(
                    error.kind(),
                    ErrorKind::NoCapacity,
                    "round {round}: {error}"
                );
                assert_eq!(report.created.len(), 2, "round {round}");
                for made in &report.created {
                    assert!(
                        on_host.contains(made),
                        "round {round}: {made} not on the host"
                    );
                }
                assert!(
                    !on_host.contains(&uuid),
                    "round {round}: the loser's device"
                );
                assert!(
                    engine.instance(&uuid).is_err(),
                    "round {round}: loser known"
                );
            }
            (Err(error), Ok(info)) => {
                assert_eq!(
                    error.kind(),
                    ErrorKind::NoCapacity,
                    "round {round}: {error}"
                );
                assert!(
                    on_host.contains(&info.uuid),
                    "round {round}: winner not on host"
                );
                // The apply rolled back whole: only the base and the create's instance.
                assert_eq!(on_host.len(), base.len() + 1, "round {round}: {on_host:?}");
            }
            (Err(a), Err(c)) => panic!("round {round}: both failed: apply {a}; create {c}"),
        }
        fx.assert_nothing_unmanaged(round);
        for uuid in fx.sim.mdev_uuids() {
            if !base.contains(&uuid) {
                fx.destroy(&uuid).unwrap();
            }
        }
        assert_eq!(
            fx.sim.mdev_uuids().len(),
            base.len(),
            "round {round}: cleanup"
        );
    }
}

#[test]
fn an_apply_racing_a_destroy_of_an_instance_it_removes_never_brings_it_back() {
    let fx = Fixture::new();
    let engine = &fx.engine;
    // The removal is the slow step of both the apply's destroys and the plain destroy.
    fx.slow("*/remove");
    for round in 0..12 {
        let pair = create_duals_on_mtty(engine, 2);
        // The file wants single-port instances: both dual-port ones are planned for removal.
        let plan = engine
            .plan_apply(&desired_on_mtty("mtty", 2), false)
            .unwrap();
        assert_eq!(plan.destroys.len(), 2, "round {round}: {}", plan.render());
        let target = &pair[round % 2];
        let other = &pair[1 - round % 2];
        let (applied, destroyed) = race(round, || engine.apply_plan(&plan), || fx.destroy(target));
        let on_host = fx.sim.mdev_uuids();
        // Whoever removed it, the instance the destroy named is gone for good.
        assert!(!on_host.contains(target), "round {round}: {target} is back");
        assert!(
            engine.instance(target).is_err(),
            "round {round}: {target} is known again"
        );
        match (&applied, &destroyed) {
            (Ok(_), Ok(())) => panic!("round {round}: {target} removed twice"),
            (Ok(report), Err(error)) => {
                assert_eq!(error.kind(), ErrorKind::NotFound, "round {round}: {error}");
                assert!(error.to_string().contains(target), "{error}");
                assert_eq!(report.destroyed.len(), 2, "round {round}");
                assert_eq!(report.created.len(), 2, "round {round}");
                assert!(!on_host.contains(other), "round {round}");
            }
            (Err(error), Ok(())) => {
                assert_eq!(error.kind(), ErrorKind::NotFound, "round {round}: {error}");
                // The apply changed nothing else: the other planned removal is still there.
                assert!(on_host.contains(other), "round {round}: {other} lost");
                assert!(engine.instance(other).is_ok(), "round {round}");
                assert_eq!(on_host.len(), 1, "round {round}: {on_host:?}");
            }
            (Err(a), Err(d)) => panic!("round {round}: both failed: apply {a}; destroy {d}"),
        }
        fx.assert_nothing_unmanaged(round);
        for uuid in fx.sim.mdev_uuids() {
            fx.destroy(&uuid).unwrap();
        }
    }
}

/// Writes mdevctl's definition of `uuid` (an mtty-2 instance) as mdevctl would.
fn write_definition(root: &std::path::Path, uuid: &str, autostart: bool) -> std::path::PathBuf {
    let dir = root.join("etc/mdevctl.d").join(MTTY);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(uuid);
    std::fs::write(
        &path,
        crate::mdevctl_mirror::definition_text(MTTY_TYPE, autostart, &[]),
    )
    .unwrap();
    path
}

#[test]
fn an_import_racing_a_create_of_the_same_uuid_lets_exactly_one_take_it() {
    let fx = Fixture::new();
    let engine = &fx.engine;
    // The create's slow step is its sysfs write, between reserving the UUID and recording it.
    fx.slow("*/create");
    for round in 0..12 {
        let uuid = round_uuid(round);
        let file = write_definition(fx.dir.path(), &uuid, false);
        let (created, imported) = race(
            round,
            || engine.create(mtty_create(&uuid)),
            || engine.import_mdevctl().unwrap(),
        );
        let took = imported.imported.contains(&uuid);
        let known = engine.instance(&uuid).unwrap();
        let on_host = fx.on_host(&uuid);
        match (&created, took) {
            (Ok(_), true) => panic!("round {round}: {uuid} both created and imported"),
            (Ok(_), false) => {
                assert!(
                    on_host && known.active && !known.persistent,
                    "round {round}: {known:?}"
                );
                assert_eq!(known.owner, Some(Owner::CreatedByUs), "round {round}");
                let mentioned = imported.skipped.contains(&uuid)
                    || imported.problems.iter().any(|p| p.contains(&uuid));
                assert!(mentioned, "round {round}: {imported:?}");
            }
            (Err(error), true) => {
                assert_eq!(
                    error.kind(),
                    ErrorKind::AlreadyExists,
                    "round {round}: {error}"
                );
                assert!(error.to_string().contains(&uuid), "{error}");
                assert!(!on_host, "round {round}: imported only, yet on the host");
                assert!(!known.active && known.persistent, "round {round}");
                assert_eq!(known.owner, Some(Owner::Adopted), "round {round}");
            }
            (Err(error), false) => {
                panic!("round {round}: neither took {uuid}: {error}; {imported:?}")
            }
        }
        fx.assert_nothing_unmanaged(round);
        std::fs::remove_file(&file).unwrap();
        fx.destroy(&uuid).unwrap();
        assert!(!fx.on_host(&uuid), "round {round}: cleanup");
    }
}

#[test]
fn an_import_racing_a_destroy_of_the_same_uuid_ends_as_one_order_or_the_other() {
    let fx = Fixture::new();
    let engine = &fx.engine;
    fx.slow("*/remove");
    for round in 0..12 {
        let uuid = round_uuid(round);
        fx.create_persistent(&uuid);
        // mdevctl's own definition of the same instance (as after `mdevctl define`).
        let file = write_definition(fx.dir.path(), &uuid, false);
        let (destroyed, imported) = race(
            round,
            || fx.destroy(&uuid),
            || engine.import_mdevctl().unwrap(),
        );
        destroyed.unwrap_or_else(|error| panic!("round {round}: {error}"));
        assert!(
            !fx.on_host(&uuid),
            "round {round}: destroyed, yet on the host"
        );
        if imported.imported.contains(&uuid) {
            // Destroy first, then the import took mdevctl's definition: a stopped definition.
            let known = engine.instance(&uuid).unwrap();
            assert!(
                !known.active && known.persistent,
                "round {round}: {known:?}"
            );
            assert_eq!(known.owner, Some(Owner::Adopted), "round {round}");
        } else {
            // Import first (the UUID was known, so skipped), then the destroy forgot it.
            assert!(
                imported.skipped.contains(&uuid),
                "round {round}: {imported:?}"
            );
            assert!(
                engine.instance(&uuid).is_err(),
                "round {round}: still known"
            );
        }
        fx.assert_nothing_unmanaged(round);
        std::fs::remove_file(&file).unwrap();
        let _ = fx.destroy(&uuid);
        assert!(engine.instance(&uuid).is_err(), "round {round}: cleanup");
    }
}

#[test]
fn set_attributes_racing_a_destroy_never_leaves_a_record_of_the_destroyed_instance() {
    let fx = Fixture::new();
    let engine = &fx.engine;
    fx.slow("*/remove");
    for round in 0..12 {
        let uuid = round_uuid(round);
        fx.create_persistent(&uuid);
        let (destroyed, set) = race(
            round,
            || fx.destroy(&uuid),
            || engine.set_attributes(&uuid, vec![("a".into(), format!("{round}"))]),
        );
        destroyed.unwrap_or_else(|error| panic!("round {round}: {error}"));
        if let Err(error) = &set {
            // After the destroy: the instance is unknown, and the error names it.
            assert_eq!(error.kind(), ErrorKind::NotFound, "round {round}: {error}");
            assert!(error.to_string().contains(&uuid), "{error}");
        }
        // Either way the destroy is the last word: no record, no device, no attributes.
        assert!(engine.instance(&uuid).is_err(), "round {round}: known");
        assert!(!fx.on_host(&uuid), "round {round}: on host");
        assert!(
            engine.instance_attributes().iter().all(|(u, _)| u != &uuid),
            "round {round}: attributes of a destroyed instance"
        );
        fx.assert_nothing_unmanaged(round);
    }
}

/// State files whose writes and removals under `under` take `delay` (the mirror's writes),
/// on the real disk.
#[derive(Debug)]
struct SlowFilesUnder {
    inner: DiskFiles,
    under: std::path::PathBuf,
    delay: Duration,
}

impl SlowFilesUnder {
    fn pause(&self, path: &std::path::Path) {
        if path.starts_with(&self.under) {
            std::thread::sleep(self.delay);
        }
    }
}

impl StateFiles for SlowFilesUnder {
    fn read(&self, path: &std::path::Path) -> std::io::Result<Option<Vec<u8>>> {
        self.inner.read(path)
    }
    fn write_atomic(&self, path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
        self.pause(path);
        self.inner.write_atomic(path, data)
    }
    fn list(&self, dir: &std::path::Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        self.inner.list(dir)
    }
    fn remove(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.pause(path);
        self.inner.remove(path)
    }
}

#[test]
fn the_mdevctl_mirror_racing_a_persistence_change_ends_in_step_with_the_state() {
    let fx = Fixture::with_files(EngineConfig::default(), |root, config| {
        Arc::new(SlowFilesUnder {
            inner: DiskFiles::new(root),
            under: config.mdevctl_dir.clone(),
            delay: SLOW_WRITE,
        })
    });
    let engine = &fx.engine;
    let uuid = round_uuid(0);
    engine
        .create(CreateRequest {
            autostart: true,
            ..mtty_create(&uuid)
        })
        .unwrap();
    engine.sync_mdevctl_mirror();
    let file = fx.dir.path().join("etc/mdevctl.d").join(MTTY).join(&uuid);
    // (persistent, autostart) in turn: toggled autostart, undefined, defined again.
    let steps = [
        (true, false),
        (true, true),
        (false, false),
        (true, true),
        (false, false),
        (true, false),
    ];
    for round in 0..18 {
        let (persistent, autostart) = steps[round % steps.len()];
        let (changed, other_pass) = race(
            round,
            || {
                let info = engine.set_persistence(&uuid, persistent, autostart);
                // As the service does after every change.
                engine.sync_mdevctl_mirror();
                info
            },
            // Another call's sync, running meanwhile.
            || engine.sync_mdevctl_mirror(),
        );
        let info = changed.unwrap_or_else(|error| panic!("round {round}: {error}"));
        assert!(
            other_pass.problems.is_empty(),
            "round {round}: {other_pass:?}"
        );
        assert_eq!((info.persistent, info.autostart), (persistent, autostart));
        let on_disk = std::fs::read_to_string(&file).ok();
        let wanted =
            persistent.then(|| crate::mdevctl_mirror::definition_text(MTTY_TYPE, autostart, &[]));
        assert_eq!(on_disk, wanted, "round {round}: the mirror is out of step");
        let manifest: std::collections::BTreeMap<String, String> = serde_json::from_slice(
            &std::fs::read(
                fx.dir
                    .path()
                    .join("var/lib/mdev-manager")
                    .join(crate::mdevctl_mirror::MANIFEST),
            )
            .unwrap_or_else(|_| b"{}".to_vec()),
        )
        .unwrap();
        assert_eq!(
            manifest.len(),
            usize::from(persistent),
            "round {round}: the mirror's list {manifest:?}"
        );
    }
}
