//! One engine process of the crash torture (see `reliability::torture`):
//! `torture-worker SOCKET ROOT SEED OPS [teardown]`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, root, seed, ops, rest @ ..] = args.as_slice() else {
        eprintln!("usage: torture-worker SOCKET ROOT SEED OPS [teardown]");
        return ExitCode::from(2);
    };
    let (Ok(seed), Ok(ops)) = (seed.parse::<u64>(), ops.parse::<u32>()) else {
        eprintln!("torture-worker: SEED and OPS must be numbers");
        return ExitCode::from(2);
    };
    let teardown = rest.first().is_some_and(|a| a == "teardown");
    match reliability::torture::worker_main(
        &PathBuf::from(socket),
        &PathBuf::from(root),
        seed,
        ops,
        teardown,
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("torture-worker: {error}");
            ExitCode::FAILURE
        }
    }
}
