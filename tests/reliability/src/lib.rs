//! Reliability and security checks for mdev-manager (issue #9): the fuzzing entry points
//! shared with `fuzz/`, a state-file layer that loses unsynced data on power loss, and the
//! pieces of the crash-torture harness. The tests live in `tests/` of this crate; the figures
//! and commands are in `docs/reliability.md`.
#![deny(missing_docs)]

pub mod engine_model;
pub mod fuzz_entry;
pub mod power_loss;
pub mod remote_host;
pub mod torture;
