//! `mdev-conformance --engine`: the engine scenarios through the binary the VM tier runs.

use std::process::Command;

#[test]
fn engine_scenarios_run_through_the_binary_and_report_json() {
    let output = Command::new(env!("CARGO_BIN_EXE_mdev-conformance"))
        .args(["--engine", "--simulate", "samples", "--json"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["host"], "sim:samples");
    let scenarios = report["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 9, "{report:#}");
    assert!(
        scenarios.iter().all(|s| s["verdict"] == "passed"),
        "{report:#}"
    );
}

#[test]
fn engine_mode_needs_a_host() {
    let output = Command::new(env!("CARGO_BIN_EXE_mdev-conformance"))
        .arg("--engine")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--root"));
}
