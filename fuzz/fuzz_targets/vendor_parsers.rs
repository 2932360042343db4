//! Fuzz target `vendor_parsers`: see `reliability::fuzz_entry::vendor_parsers`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reliability::fuzz_entry::vendor_parsers(data));
