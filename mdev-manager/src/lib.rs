//! mdev-manager: the host service that turns GPUs into vGPU instances (VFIO mediated devices
//! and SR-IOV virtual functions), persists what it created, and reconciles after crashes.
#![deny(missing_docs)]

pub mod host;
