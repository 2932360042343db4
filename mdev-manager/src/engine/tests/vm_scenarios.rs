//! The engine scenarios the VM tier runs on a real kernel, here on the simulated guest.

use super::*;

#[test]
fn the_engine_scenarios_pass_on_the_simulated_vm_tier_guest() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let holder = crate::conformance::SimDeviceHolder(sim.clone());
    let results = scenarios::run(
        Arc::new(sim.clone()),
        Arc::new(DiskFiles::new(dir.path())),
        Path::new("/scenarios"),
        &holder,
    );
    assert_eq!(results.len(), 9);
    for result in &results {
        assert_eq!(
            result.verdict,
            scenarios::Verdict::Passed,
            "{}",
            result.name
        );
    }
    assert!(
        sim.mdev_uuids().is_empty(),
        "the scenarios leave nothing behind"
    );
    assert_eq!(sim.vf_count(), 0);
}
