//! Fuzz target `engine_model`: see `reliability::engine_model` (random programs of engine
//! operations, faults and crashes, checked against a reference model after each step).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reliability::engine_model::run(data));
