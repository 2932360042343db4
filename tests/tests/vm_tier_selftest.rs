//! Negative controls of the VM tier's own checking (tests/vm/selftest, no QEMU): every guest
//! check helper and the tier's verdict must fail on a wrong value, not only pass on a right
//! one (issue 14: a check chain that could not fail, skips that passed the tier).

use std::path::PathBuf;
use std::process::Command;

fn selftest(mode: &str) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("vm/selftest");
    let output = Command::new("bash")
        .arg(&script)
        .arg(mode)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "tests/vm/selftest {mode} failed:\n{stdout}{stderr}"
    );
    assert!(stdout.contains("ok "), "no assertion ran:\n{stdout}");
}

#[test]
fn expect_equal_and_check_fail_on_a_wrong_value() {
    selftest("expect-equal");
}

#[test]
fn smoke_types_initial_fails_when_any_one_of_its_comparisons_is_wrong() {
    selftest("smoke-types-initial");
}

#[test]
fn a_skip_not_listed_as_expected_is_a_failure_in_the_guest() {
    selftest("skip");
}

#[test]
fn a_skipped_engine_scenario_fails_on_the_real_kernel() {
    selftest("engine-skip");
}

#[test]
fn the_tier_verdict_fails_on_unexpected_skips_and_missing_or_unknown_checks() {
    selftest("verdict");
}
