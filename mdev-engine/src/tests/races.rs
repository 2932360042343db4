//! Races: concurrent creates for the last capacity never overcommit, and one blocked parent does
//! not hold up the others.

use super::*;

#[test]
fn concurrent_creates_never_overcommit_the_last_instances() {
    let s = setup("samples");
    let threads = 12;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let engine = Arc::clone(&s.engine);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                // mdpy holds 4 instances in total, whatever the type.
                let type_id = ["mdpy-vga", "mdpy-xga", "mdpy-hd"][i % 3];
                engine.create(mdev("mdpy", type_id, None))
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let created = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(created, 4);
    for error in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(error.kind(), ErrorKind::NoCapacity, "{error}");
    }
    assert_eq!(s.sim.mdev_uuids().len(), 4);
    assert_eq!(saved_state(&s)["instances"].as_object().unwrap().len(), 4);
}

#[test]
fn different_parents_proceed_while_one_is_blocked() {
    let s = setup("samples");
    // A long write bound, so the blocked mtty removal holds mtty's lock until released.
    let patient = EngineConfig {
        write_timeout: Duration::from_secs(60),
        ..config()
    };
    let engine = Arc::new(
        Engine::new(
            Arc::new(s.sim.clone()),
            Arc::new(DiskFiles::new(s.dir.path())),
            patient,
        )
        .unwrap(),
    );
    engine.create(mdev("mtty", "mtty-2", Some(UUID_A))).unwrap();
    let fault = s.sim.inject_fault(Fault::block("*/mtty/*/remove"));
    let blocked = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.destroy(UUID_A, DestroyOptions::default()))
    };
    while s.sim.blocked_writes().is_empty() {
        std::thread::yield_now();
    }
    // mbochs is another parent: its create does not wait behind mtty's lock.
    engine.create(mdev("mbochs", "mbochs-small", None)).unwrap();
    assert!(
        !blocked.is_finished(),
        "the mtty removal is still blocked while mbochs was served"
    );
    s.sim.release_fault(fault);
    blocked.join().unwrap().unwrap();
    assert_eq!(s.sim.mdev_uuids().len(), 1);
}

#[test]
fn concurrent_profile_creates_fill_every_parent_without_overcommit() {
    let s = setup("samples");
    let threads = 10;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let engine = Arc::clone(&s.engine);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                engine.create(profile("mdpy-vga"))
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 4);
    assert!(results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .all(|e| e.kind() == ErrorKind::NoCapacity));
}
