//! vgpu-types: the vocabulary every mdev-manager crate shares. Small value types only: no I/O,
//! no dependencies beyond serde and thiserror, so the libvirt hook and a UI can link it as
//! freely as the daemon.
#![deny(missing_docs)]

mod error_chain;
mod instance_kind;

pub use error_chain::error_chain;
pub use instance_kind::InstanceKind;
