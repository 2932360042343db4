//! Crash torture, short CI version: the engine in a worker process is SIGKILLed at chosen
//! points (after a sysfs write took effect, before one, at random times, during a rollback),
//! restarted, reconciled and checked (see `reliability::torture`). Long runs:
//! `scripts/torture --kills N`.

use std::path::PathBuf;

use reliability::torture::{run, TortureConfig, DEFAULT_WAIT_BOUND};

#[test]
fn engine_survives_kills_at_random_points_without_invariant_violations() {
    let kills = std::env::var("TORTURE_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let config = TortureConfig {
        kills,
        seed: 20261129,
        worker: PathBuf::from(env!("CARGO_BIN_EXE_torture-worker")),
        verbose: true,
        wait_bound: DEFAULT_WAIT_BOUND,
    };
    let report = run(&config).expect("torture runs");
    eprintln!("{report:#?}");
    assert_eq!(report.kills, kills);
    assert!(
        report.kills_after_write > 0,
        "no kill landed after a sysfs write"
    );
    assert!(
        report.ops_acknowledged > kills,
        "workers did too little: {report:?}"
    );
    assert!(
        report.violations.is_empty(),
        "{} violations, first: {:?}",
        report.violations.len(),
        report.violations.first()
    );
}
