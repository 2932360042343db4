//! End-to-end tests across processes (see tests/ in this crate) and the VM tier (tests/vm).

pub mod bus;
pub mod in_process;
