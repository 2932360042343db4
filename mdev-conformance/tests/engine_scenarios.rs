//! The engine's scenarios (what `mdev-conformance --engine` runs) on the simulated host.

use std::path::Path;
use std::sync::Arc;

use mdev_conformance::engine_scenarios as scenarios;
use mdev_conformance::SimDeviceHolder;
use mdev_engine::DiskFiles;
use mdev_sim::SimHost;

#[test]
fn the_engine_scenarios_pass_on_the_simulated_vm_tier_guest() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let holder = SimDeviceHolder(sim.clone());
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
