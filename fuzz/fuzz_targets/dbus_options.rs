//! Fuzz target `dbus_options`: see `reliability::fuzz_entry::dbus_options`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| reliability::fuzz_entry::dbus_options(data));
