//! The scenarios on the simulated host, checked against the real-kernel oracle.

use super::*;

fn fast() -> RunOptions {
    RunOptions {
        block_wait: Duration::from_millis(300),
        release_wait: Duration::from_secs(20),
    }
}

#[test]
fn samples_sim_matches_the_real_kernel_table() {
    let host = SimHost::builtin("samples").unwrap();
    let report = run_on_sim(&host, "sim:samples", fast());
    let mismatches = report.mismatches();
    assert!(mismatches.is_empty(), "{}", report.to_table());
    assert!(
        report
            .steps
            .iter()
            .all(|s| !matches!(s.outcome, Outcome::Skipped(_))),
        "{}",
        report.to_table()
    );
    assert!(report.steps.len() > 100);
    // Everything the scenarios made is gone again.
    assert!(host.mdev_uuids().is_empty());
    assert_eq!(host.vf_count(), 0);
    assert!(host
        .read(Path::new(
            "/sys/bus/pci/devices/0000:01:00.0/driver_override"
        ))
        .is_ok());
}

#[test]
fn each_oracle_outcome_is_reached() {
    let host = SimHost::builtin("samples").unwrap();
    let report = run_on_sim(&host, "sim:samples", fast());
    for expected in [
        "EINVAL", "EEXIST", "ENOSPC", "EUSERS", "ENOENT", "ERANGE", "EBUSY", "ENODEV", "blocks",
    ] {
        assert!(
            report
                .steps
                .iter()
                .any(|s| String::from(s.outcome.clone()) == expected),
            "no step gave {expected}"
        );
    }
}

#[test]
fn a_broken_simulator_is_caught() {
    // Make remove fail instead of blocking: the report must flag it.
    let host = SimHost::builtin("samples").unwrap();
    host.inject_fault(mdev_sim::Fault::fail(
        "/sys/bus/mdev/devices/cf000000-0000-4000-8000-000000000028/remove",
        libc::EBUSY,
    ));
    let report = run_on_sim(&host, "sim:samples", fast());
    let bad: Vec<&str> = report
        .mismatches()
        .iter()
        .map(|s| s.step.as_str())
        .collect();
    assert_eq!(bad, ["remove while held", "device gone after release"]);
}

#[test]
fn report_round_trips_and_diffs() {
    let host = SimHost::builtin("samples").unwrap();
    let report = run_on_sim(&host, "sim:samples", fast());
    let json = serde_json::to_string_pretty(&report).unwrap();
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
    assert!(json.contains("\"blocks\""));
    let mut other = back.clone();
    other.host = "root:/".into();
    other.steps[0].outcome = Outcome::Value("23".into());
    let diff = report.diff(&other);
    assert_eq!(diff.len(), 1);
    assert!(
        diff[0].contains("sim:samples = = 24") && diff[0].contains("root:/ = = 23"),
        "{diff:?}"
    );
}

#[test]
fn missing_parents_are_skipped_not_guessed() {
    let host = SimHost::builtin("samples").unwrap();
    host.unload_module("mtty").unwrap();
    let report = run_on_sim(&host, "sim:no-mtty", fast());
    assert!(report.mismatches().is_empty(), "{}", report.to_table());
    assert!(report
        .steps
        .iter()
        .any(|s| matches!(&s.outcome, Outcome::Skipped(why) if why.contains("mtty"))));
}
