//! The `vfio-probe` binary: exit statuses and output formats on a host without the device.

use std::process::Command;

fn vfio_probe(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vfio-probe"))
        .args(args)
        .output()
        .expect("the vfio-probe binary runs")
}

#[test]
fn a_malformed_target_is_a_usage_error_naming_it() {
    let output = vfio_probe(&["0000:01:00"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("\"0000:01:00\" is neither an mdev UUID"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn a_missing_device_gives_a_failed_json_verdict_and_exit_1() {
    let root = tempfile::tempdir().unwrap();
    let output = vfio_probe(&[
        "--json",
        "--sysfs-root",
        root.path().to_str().unwrap(),
        "83B8F4F2-509F-382F-3C1E-E6BFE0FA1001",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(
        report["target"]["id"],
        "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
    );
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 10);
    assert_eq!(steps[0]["step"], "resolve");
    assert_eq!(steps[0]["status"], "failed");
    assert!(steps[1..].iter().all(|s| s["status"] == "not_run"));
}

#[test]
fn text_output_ends_with_the_verdict() {
    let root = tempfile::tempdir().unwrap();
    let output = vfio_probe(&[
        "--sysfs-root",
        root.path().to_str().unwrap(),
        "--kvm",
        "never",
        "0000:3b:00.4",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("PCI device 0000:3b:00.4\n"), "{stdout}");
    assert!(
        stdout.contains("resolve       FAILED   PCI device 0000:3b:00.4 does not exist"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("verdict: NOT usable by a VMM\n"),
        "{stdout}"
    );
}
