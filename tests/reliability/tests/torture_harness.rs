//! The crash torture's harness itself (issue 14): it serves only the worker it started, and
//! every wait on a worker is bounded, so a stuck worker fails the run naming the round, the
//! seed and the last request instead of hanging CI.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reliability::torture::{Harness, TortureConfig};

const SEED: u64 = 4242;

fn config(worker: PathBuf, wait_bound: Duration) -> TortureConfig {
    TortureConfig {
        kills: 0,
        seed: SEED,
        worker,
        verbose: true,
        wait_bound,
    }
}

fn real_worker() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_torture-worker"))
}

/// A shell script standing in for the worker; `exec` keeps the pid the harness started.
fn script_worker(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn a_connection_left_by_a_killed_worker_is_not_served_as_the_next_workers() {
    // The bound only keeps a regression from hanging: with a worker served, a round takes
    // milliseconds.
    let config = config(real_worker(), Duration::from_secs(20));
    let mut harness = Harness::new(&config).unwrap();
    assert_eq!(harness.check_once().unwrap(), Vec::<String>::new());
    // What a worker killed right after it connected, before the harness accepted it, leaves
    // behind: a connection queued on the host socket whose other end is gone. Served as the
    // next worker's, it reads as closed at once, and the harness waited for a worker that was
    // waiting for its first answer: the hang of `scripts/torture --seed 4242`.
    drop(UnixStream::connect(harness.socket()).unwrap());
    let violations = harness
        .check_once()
        .expect("the next worker is served although a dead worker's connection was queued");
    assert_eq!(violations, Vec::<String>::new());
    assert_eq!(harness.stale_connections(), 1);
}

#[test]
fn a_worker_that_never_connects_fails_the_round_naming_round_and_seed() {
    let dir = tempfile::tempdir().unwrap();
    let worker = script_worker(dir.path(), "sleeper", "exec sleep 3600");
    let config = config(worker, Duration::from_millis(500));
    let mut harness = Harness::new(&config).unwrap();
    let error = harness
        .check_once()
        .expect_err("a worker that never connects");
    let message = error.to_string();
    assert_eq!(error.kind(), std::io::ErrorKind::TimedOut, "{message}");
    for wanted in [
        "--seed 4242",
        "round 1",
        "neither connected to the host socket nor exited",
        "last request: (none yet)",
    ] {
        assert!(message.contains(wanted), "{wanted:?} not in: {message}");
    }
    assert!(!message.contains("did not even die"), "{message}");
}

#[test]
fn a_worker_that_stops_talking_fails_the_round_naming_its_last_request() {
    let dir = tempfile::tempdir().unwrap();
    let worker = script_worker(
        dir.path(),
        "staller",
        &format!("exec '{}' \"$@\" stall", real_worker().display()),
    );
    let config = config(worker, Duration::from_secs(2));
    let mut harness = Harness::new(&config).unwrap();
    let error = harness
        .check_once()
        .expect_err("a worker that stops talking");
    let message = error.to_string();
    for wanted in [
        "--seed 4242",
        "round 1 (restart and check)",
        "it sent no complete request",
        "last request: {\"op\":\"mark\",\"line\":\"RECONCILED",
    ] {
        assert!(message.contains(wanted), "{wanted:?} not in: {message}");
    }
}
