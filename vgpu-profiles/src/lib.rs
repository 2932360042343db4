//! vGPU profiles: what an admin asks for, how it maps onto what vendor drivers offer,
//! and where it fits. Pure logic: no I/O, no host, no bus.
//!
//! * [`vendor`]: parsers for what drivers show (mdev types, descriptions, NVIDIA names,
//!   `creatable_vgpu_types`, `nvidia-smi mig`) and the vendor-neutral [`vendor::OfferedType`].
//! * [`profile`] and [`catalog`]: profiles as TOML, the built-in catalog and overrides.
//! * [`resolve`]: which of one parent's types a profile gets, or why none fits.
//! * [`placement`]: which parent, capacity-aware, with pack/spread and NUMA preference.
//! * [`desired`] and [`vgpu_dm`]: desired host state for `apply` (this project's TOML,
//!   NVIDIA vgpu-device-manager's YAML).
//! * [`mig_plan`]: where a set of MIG GPU instances goes on a GPU's memory slices.
#![deny(missing_docs)]

pub mod catalog;
pub mod desired;
pub mod mig_plan;
pub mod placement;
pub mod profile;
pub mod resolve;
pub mod vendor;
pub mod vgpu_dm;

pub use catalog::Catalog;
pub use profile::{Profile, ProfileError, ProfileName};
