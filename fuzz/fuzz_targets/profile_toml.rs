//! Fuzz target `profile_toml`: see `reliability::fuzz_entry::profile_toml`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reliability::fuzz_entry::profile_toml(data));
