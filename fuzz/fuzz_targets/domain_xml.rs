//! Fuzz target `domain_xml`: see `reliability::fuzz_entry::domain_xml`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reliability::fuzz_entry::domain_xml(data));
