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

fn engine_on(sim: &SimHost, root: &std::path::Path) -> Arc<Engine> {
    let config = EngineConfig {
        readiness_timeout: Duration::from_secs(10),
        poll_interval: Duration::from_millis(10),
        write_timeout: Duration::from_secs(10),
        ..EngineConfig::default()
    };
    Arc::new(
        Engine::new(
            Arc::new(sim.clone()),
            Arc::new(DiskFiles::new(root)),
            config,
        )
        .unwrap(),
    )
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

/// Every mdev on the simulated host is one the engine records (nothing unmanaged appeared).
fn assert_nothing_unmanaged(engine: &Engine, sim: &SimHost, round: usize) {
    let state = lock(&engine.state);
    for uuid in sim.mdev_uuids() {
        assert!(
            state.has_instance(&uuid),
            "round {round}: mdev {uuid} is on the host but not managed"
        );
    }
}

#[test]
fn concurrent_claims_of_one_instance_by_different_domains_let_exactly_one_win() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_on(&sim, dir.path());
    // Starting a defined instance is the claim's slow step (between its check and its write).
    let _slow = sim.inject_fault(Fault::slow("*/mdev_supported_types/*/create", SLOW_WRITE));
    let claimants = 6;
    for round in 0..12 {
        let uuid = round_uuid(round);
        engine
            .create(CreateRequest {
                uuid: Some(uuid.clone()),
                persistent: true,
                ..CreateRequest::new(CreateTarget::Mdev {
                    parent: MTTY.into(),
                    type_id: MTTY_TYPE.into(),
                })
            })
            .unwrap();
        // Odd rounds race on a defined (stopped) instance, even ones on a running one.
        if round % 2 == 1 {
            engine.stop(&uuid, DestroyOptions::default()).unwrap();
        }
        let barrier = Arc::new(Barrier::new(claimants));
        let results: Vec<_> = (0..claimants)
            .map(|index| {
                let engine = Arc::clone(&engine);
                let barrier = Arc::clone(&barrier);
                let uuid = uuid.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    engine.claim_domain(&domain_of(index), &[by_uuid(&uuid)])
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|thread| thread.join().unwrap())
            .collect();
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
        assert!(
            sim.mdev_uuids().contains(&uuid),
            "round {round}: not on the host"
        );
        assert_nothing_unmanaged(&engine, &sim, round);
        engine.release_domain(&domain_of(winners[0])).unwrap();
        engine.destroy(&uuid, DestroyOptions::default()).unwrap();
    }
}

#[test]
fn a_claim_racing_a_destroy_never_both_succeed_and_leave_nothing_unmanaged() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_on(&sim, dir.path());
    // The removal is the destroy's slow step (between its claim check and forgetting).
    let _slow = sim.inject_fault(Fault::slow("*/remove", SLOW_WRITE));
    let domain = domain_of(1);
    for round in 0..16 {
        let uuid = round_uuid(round);
        engine
            .create(CreateRequest {
                uuid: Some(uuid.clone()),
                ..CreateRequest::new(CreateTarget::Mdev {
                    parent: MTTY.into(),
                    type_id: MTTY_TYPE.into(),
                })
            })
            .unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let destroyer = {
            let (engine, barrier, uuid) = (Arc::clone(&engine), Arc::clone(&barrier), uuid.clone());
            std::thread::spawn(move || {
                barrier.wait();
                engine.destroy(&uuid, DestroyOptions::default())
            })
        };
        let claimer = {
            let (engine, barrier, uuid) = (Arc::clone(&engine), Arc::clone(&barrier), uuid.clone());
            let domain = domain.clone();
            std::thread::spawn(move || {
                barrier.wait();
                // The destroy gets a head start into its slow removal (most rounds).
                std::thread::sleep(Duration::from_millis((round % 3) as u64 * 4));
                engine.claim_domain(&domain, &[by_uuid(&uuid)])
            })
        };
        let destroyed = destroyer.join().unwrap();
        let claimed = claimer.join().unwrap();
        let on_host = sim.mdev_uuids().contains(&uuid);
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
        assert_nothing_unmanaged(&engine, &sim, round);
        engine.release_domain(&domain).unwrap();
        let _ = engine.destroy(&uuid, DestroyOptions::default());
        assert!(!sim.mdev_uuids().contains(&uuid), "round {round}: cleanup");
    }
}

#[test]
fn a_definition_racing_a_create_of_the_same_uuid_lets_exactly_one_win() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_on(&sim, dir.path());
    // The create's slow step is its sysfs write, between reserving the UUID and recording it.
    let _slow = sim.inject_fault(Fault::slow("*/create", SLOW_WRITE));
    for round in 0..12 {
        let uuid = round_uuid(round);
        let barrier = Arc::new(Barrier::new(2));
        let creator = {
            let (engine, barrier, uuid) = (Arc::clone(&engine), Arc::clone(&barrier), uuid.clone());
            std::thread::spawn(move || {
                barrier.wait();
                engine.create(CreateRequest {
                    uuid: Some(uuid),
                    ..CreateRequest::new(CreateTarget::Mdev {
                        parent: MTTY.into(),
                        type_id: MTTY_TYPE.into(),
                    })
                })
            })
        };
        let definer = {
            let (engine, barrier, uuid) = (Arc::clone(&engine), Arc::clone(&barrier), uuid.clone());
            std::thread::spawn(move || {
                barrier.wait();
                std::thread::sleep(Duration::from_millis((round % 3) as u64 * 4));
                engine.define_mdev(crate::MdevDefinition {
                    parent: MTTY.into(),
                    type_id: MTTY_TYPE.into(),
                    uuid: Some(uuid),
                    autostart: false,
                    attributes: Vec::new(),
                })
            })
        };
        let created = creator.join().unwrap();
        let defined = definer.join().unwrap();
        let on_host = sim.mdev_uuids().contains(&uuid);
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
        assert_nothing_unmanaged(&engine, &sim, round);
        engine.destroy(&uuid, DestroyOptions::default()).unwrap();
        assert!(!sim.mdev_uuids().contains(&uuid), "round {round}: cleanup");
    }
}
