//! Crash torture driver: `torture [--kills N] [--seed S] [--wait-bound SECONDS] [--verbose]`
//! (see `reliability::torture` and docs/reliability.md). Exits non-zero on any invariant
//! violation, and when a worker hangs longer than the wait bound (naming the round, the seed
//! and the worker's last request).

use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let mut kills = 200u32;
    let mut seed = 1u64;
    let mut verbose = false;
    let mut wait_bound = reliability::torture::DEFAULT_WAIT_BOUND;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "--verbose" | "-v" => {
                verbose = true;
                continue;
            }
            "--kills" | "--seed" | "--wait-bound" => {
                args.next().and_then(|v| v.parse::<u64>().ok())
            }
            _ => None,
        };
        match (arg.as_str(), value) {
            ("--kills", Some(v)) => kills = u32::try_from(v).unwrap_or(u32::MAX),
            ("--seed", Some(v)) => seed = v,
            ("--wait-bound", Some(v)) if v > 0 => wait_bound = Duration::from_secs(v),
            _ => {
                eprintln!(
                    "usage: torture [--kills N] [--seed S] [--wait-bound SECONDS] [--verbose]"
                );
                return ExitCode::from(2);
            }
        }
    }
    let worker = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name("torture-worker"),
        Err(error) => {
            eprintln!("torture: cannot find myself: {error}");
            return ExitCode::FAILURE;
        }
    };
    let config = reliability::torture::TortureConfig {
        kills,
        seed,
        worker,
        verbose,
        wait_bound,
    };
    let started = Instant::now();
    let report = match reliability::torture::run(&config) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("torture: {error}");
            return ExitCode::FAILURE;
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    println!("seed                       {seed}");
    println!("kills survived             {}", report.kills);
    println!("  right after a sysfs write {}", report.kills_after_write);
    println!("  during a batch rollback   {}", report.kills_in_rollback);
    println!("rounds finished unkilled   {}", report.clean_rounds);
    println!("operations acknowledged    {}", report.ops_acknowledged);
    println!("operations interrupted     {}", report.ops_interrupted);
    println!("orphans (violations too)   {}", report.orphans);
    println!("stale connections closed   {}", report.stale_connections);
    println!("invariant violations       {}", report.violations.len());
    println!("time                       {seconds:.1} s");
    for violation in report.violations.iter().take(20) {
        println!("  {violation}");
    }
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
