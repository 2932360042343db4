//! vGPU profiles: what an admin asks for, how it maps onto what vendor drivers offer,
//! and where it fits. Pure logic: no I/O, no host, no bus.
#![deny(missing_docs)]

pub mod vendor;
