//! The libvirt qemu hook for mdev-manager: decides which of a domain's devices are vGPUs the
//! service manages, and asks the service over D-Bus to claim and release them.
//!
//! Everything a test or fuzzer needs is pure and lives here: [`plan::plan_from_xml`] turns a
//! domain XML into a [`plan::ClaimPlan`], [`scan::may_hold_vgpus`] is the fast path. The
//! `<hostdev>` elements are written by `dbus_api::hostdev` (one generator for the hook's tests,
//! `vgpuctl xml` and `vgpuctl attach`). Reading untrusted XML is bounded and linear
//! ([`bounded`]); `release` goes by the domain's UUID ([`domain_uuid`]) when the service's
//! index lists it ([`domain_index`]), in the service's state directory ([`config`]). The D-Bus
//! calls ([`service`]), the pending-release record ([`pending`]) and the installer
//! ([`install`]) are thin.
#![deny(missing_docs)]

pub mod bounded;
pub mod config;
pub mod domain_index;
pub mod domain_uuid;
pub mod hook;
pub mod install;
pub mod invocation;
pub mod pci;
pub mod pending;
pub mod plan;
pub mod scan;
pub mod service;

/// The XML namespace of the project's domain metadata
/// (`<metadata><vgpu:vgpus xmlns:vgpu="...">`). Versioned: a change of meaning gets `/2`.
pub const NAMESPACE: &str = "https://mdev-manager.org/xmlns/vgpu/1";

/// The largest domain XML the hook reads. libvirt domains are a few kilobytes (1.4-1.8 kB seen
/// on libvirt 9.0); anything near this bound is not a domain libvirt wrote.
pub const MAX_DOMAIN_XML_BYTES: usize = 4 * 1024 * 1024;
