//! mdev-manager: the host service that turns GPUs into vGPU instances (VFIO mediated devices
//! and SR-IOV virtual functions), persists what it created, and reconciles after crashes.
#![deny(missing_docs)]

pub mod conformance;
pub mod daemon;
pub mod discovery;
pub mod domain_index;
pub mod engine;
pub mod error;
pub mod holders;
pub mod host;
pub mod hotplug;
pub mod import;
pub mod lifecycle;
pub mod mdevctl_mirror;
pub mod reconcile;
pub mod schedule;
pub mod sim;
pub mod state;

pub use error::ErrorKind;
