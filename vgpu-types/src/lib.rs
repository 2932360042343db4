//! vgpu-types: the vocabulary every mdev-manager crate shares. Small value types only: no I/O,
//! no dependencies beyond serde and thiserror, so the libvirt hook and a UI can link it as
//! freely as the daemon.
//!
//! One definition each: [`PciAddress`], [`Uuid`], [`Weight`], [`ErrorKind`], [`InstanceKind`]
//! and [`error_chain`].
#![deny(missing_docs)]

mod error_chain;
mod error_kind;
mod instance_kind;
mod pci;
mod uuid;
mod weight;

pub use error_chain::error_chain;
pub use error_kind::ErrorKind;
pub use instance_kind::InstanceKind;
pub use pci::{PciAddress, PciAddressError};
pub use uuid::{Uuid, UuidError};
pub use weight::{Weight, WeightError};
