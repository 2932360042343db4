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
    let child = Command::new(env!("CARGO_BIN_EXE_mdev-conformance"))
        .arg("--engine")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--root"));
    // Refused before anything is made: no scratch directory is left behind.
    let scratch = std::env::temp_dir().join(format!("mdev-conformance-engine-{pid}"));
    assert!(!scratch.exists(), "{} left behind", scratch.display());
}
