//! Fuzz target `engine_model`: see `reliability::engine_model` (random programs of engine
//! operations, faults and crashes, checked against a reference model after each step).
//! `ENGINE_MODEL_WRITES=bounded` runs the engines with the daemon's bounded-writer threads
//! instead of inline host writes (to compare the two with one build).
#![no_main]

use std::sync::OnceLock;

use reliability::engine_model::{run_with, HostWrites};

fn writes() -> HostWrites {
    static WRITES: OnceLock<HostWrites> = OnceLock::new();
    *WRITES.get_or_init(|| match std::env::var("ENGINE_MODEL_WRITES").as_deref() {
        Ok("bounded") => HostWrites::Bounded,
        _ => HostWrites::Inline,
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| run_with(data, writes()));
