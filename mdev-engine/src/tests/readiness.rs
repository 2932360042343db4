//! Bounded host writes and waits: a blocked write times out and stays accounted, a wait for a
//! parent ends naming it.

use super::*;

#[test]
fn a_blocked_write_times_out_and_is_accounted_until_it_finishes() {
    let s = setup_with("samples", short_timeouts());
    s.engine
        .create(mdev("mtty", "mtty-2", Some(UUID_A)))
        .unwrap();
    let fault = s.sim.inject_fault(Fault::block("*/remove"));
    let error = s
        .engine
        .destroy(UUID_A, DestroyOptions::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TimedOut);
    assert!(
        error
            .to_string()
            .contains(&format!("/sys/bus/mdev/devices/{UUID_A}/remove")),
        "{error}"
    );
    assert_eq!(s.engine.stuck_writes(), 1);
    assert!(
        s.engine.instance(UUID_A).unwrap().owner.is_some(),
        "the record stays while the device exists"
    );
    s.sim.release_fault(fault);
    for _ in 0..200 {
        if s.engine.stuck_writes() == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(s.engine.stuck_writes(), 0);
    assert!(
        s.sim.mdev_uuids().is_empty(),
        "the released write completed the removal"
    );
}

#[test]
fn readiness_waits_for_a_parent_then_times_out_naming_it() {
    let s = setup_with("default", short_timeouts());
    s.sim.unload_module("nvidia_vgpu_vfio").unwrap();
    let error = s.engine.create(mdev(T4, "nvidia-231", None)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TimedOut);
    let text = error.to_string();
    assert!(
        text.contains(T4) && text.contains("/sys/class/mdev_bus/0000:3b:00.0"),
        "{text}"
    );

    let sim = s.sim.clone();
    let loader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        sim.load_module("nvidia_vgpu_vfio").unwrap();
    });
    // A patient engine, so a loaded machine cannot turn the wait into a timeout.
    let patient_dir = tempfile::tempdir().unwrap();
    open(&s.sim, patient_dir.path())
        .create(mdev(T4, "nvidia-231", Some(UUID_A)))
        .unwrap();
    loader.join().unwrap();
    // A parent nobody has heard of is unknown at once, not waited for.
    let error = s
        .engine
        .create(mdev("nosuchparent", "x-1", None))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert!(error.to_string().contains("nosuchparent"));
    let error = s
        .engine
        .wait_for_parent(
            &OperationContext::new(),
            "0000:99:00.0",
            Some(Duration::from_millis(20)),
        )
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TimedOut);
}
