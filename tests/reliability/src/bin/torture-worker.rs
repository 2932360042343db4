//! One engine process of the crash torture (see `reliability::torture`):
//! `torture-worker SOCKET ROOT SEED OPS [teardown|stall]` (`stall`: stop talking after the
//! reconcile, for the harness's own tests of its bounds).

use std::path::PathBuf;
use std::process::ExitCode;

use reliability::torture::WorkerMode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, root, seed, ops, rest @ ..] = args.as_slice() else {
        eprintln!("usage: torture-worker SOCKET ROOT SEED OPS [teardown|stall]");
        return ExitCode::from(2);
    };
    let (Ok(seed), Ok(ops)) = (seed.parse::<u64>(), ops.parse::<u32>()) else {
        eprintln!("torture-worker: SEED and OPS must be numbers");
        return ExitCode::from(2);
    };
    let mode = match rest.first().map(String::as_str) {
        None => WorkerMode::Operations,
        Some("teardown") => WorkerMode::Teardown,
        Some("stall") => WorkerMode::Stall,
        Some(other) => {
            eprintln!("torture-worker: unknown mode {other:?} (teardown or stall)");
            return ExitCode::from(2);
        }
    };
    match reliability::torture::worker_main(
        &PathBuf::from(socket),
        &PathBuf::from(root),
        seed,
        ops,
        mode,
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("torture-worker: {error}");
            ExitCode::FAILURE
        }
    }
}
