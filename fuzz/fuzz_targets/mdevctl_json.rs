//! Fuzz target `mdevctl_json`: see `reliability::fuzz_entry::mdevctl_json`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reliability::fuzz_entry::mdevctl_json(data));
