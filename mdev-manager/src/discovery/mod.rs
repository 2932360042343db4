//! Discovery: what the host offers (mdev parents and their types, SR-IOV PFs and VFs, NVIDIA
//! SR-IOV vGPU VFs) and what already exists (mdevs, bound VFs), read through a [`HostFs`].
//!
//! The output is deterministic (every list sorted) and serde-serializable, so a golden file of
//! an [`Inventory`] pins what discovery sees on a topology.

pub mod layout;
pub mod names;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::HostFs;
use names::PciAddress;

/// Everything discovery found on a host.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Registered mdev parents (`/sys/class/mdev_bus/*`), sorted by name.
    pub mdev_parents: Vec<MdevParent>,
    /// SR-IOV capable PCI functions (those with `sriov_totalvfs`), sorted by address.
    pub sriov_pfs: Vec<SriovPf>,
    /// Existing mdevs (`/sys/bus/mdev/devices/*`), sorted by UUID.
    pub mdevs: Vec<MdevDevice>,
}

/// One mdev parent device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MdevParent {
    /// The parent's sysfs name (a PCI address for GPUs, `mtty` for the sample driver).
    pub name: String,
    /// PCI identity when the parent is a PCI function.
    pub pci: Option<PciFunction>,
    /// Its mdev types, sorted by type id.
    pub types: Vec<MdevType>,
}

/// One `mdev_supported_types/<type-id>` directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MdevType {
    /// The type id (`nvidia-256`, `i915-GVTg_V5_4`, `mtty-2`).
    pub id: String,
    /// The `name` attribute (trimmed), when present.
    pub name: Option<String>,
    /// The `description` attribute (trimmed), when present.
    pub description: Option<String>,
    /// The description parsed into `key -> value` pairs (NVIDIA `k=v, k=v`, GVT-g `k: v` lines);
    /// empty when the description has no such structure.
    pub description_fields: BTreeMap<String, String>,
    /// `available_instances`.
    pub available_instances: u32,
    /// `device_api` (`vfio-pci`).
    pub device_api: Option<String>,
    /// UUIDs of the mdevs of this type (`devices/`), sorted.
    pub devices: Vec<String>,
}

/// Identity and placement of one PCI function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PciFunction {
    /// Its address.
    pub address: PciAddress,
    /// `vendor` (e.g. 0x10de).
    pub vendor_id: Option<u16>,
    /// `device`.
    pub device_id: Option<u16>,
    /// The bound driver's name (`driver` link), if any.
    pub driver: Option<String>,
    /// `driver_override`, if set.
    pub driver_override: Option<String>,
    /// The IOMMU group number (`iommu_group` link), if any.
    pub iommu_group: Option<u32>,
    /// `numa_node` (-1 when the platform does not say).
    pub numa_node: Option<i32>,
}

/// An SR-IOV physical function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SriovPf {
    /// The PF itself.
    pub function: PciFunction,
    /// `sriov_totalvfs`.
    pub total_vfs: u32,
    /// `sriov_numvfs`.
    pub num_vfs: u32,
    /// `sriov_vf_device` (hex), when present.
    pub vf_device_id: Option<u16>,
    /// `sriov_drivers_autoprobe`, when present.
    pub drivers_autoprobe: Option<bool>,
    /// Its enabled VFs (`virtfnN`), sorted by index.
    pub vfs: Vec<VirtualFunction>,
}

/// One enabled VF of a PF.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VirtualFunction {
    /// N of `virtfnN`.
    pub index: u32,
    /// The VF's PCI identity.
    pub function: PciFunction,
    /// NVIDIA SR-IOV vGPU state when the VF has `nvidia/current_vgpu_type`.
    pub nvidia: Option<NvidiaVfState>,
}

/// The NVIDIA vendor-VFIO vGPU files of a VF.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvidiaVfState {
    /// `nvidia/creatable_vgpu_types` rows (id, name), in file order.
    pub creatable: Vec<NvidiaVgpuType>,
    /// `nvidia/current_vgpu_type` (0 = no vGPU).
    pub current_type: u32,
}

/// One row of `creatable_vgpu_types`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvidiaVgpuType {
    /// The numeric type id written to `current_vgpu_type`.
    pub id: u32,
    /// Its name (`NVIDIA H200X-1-18C`).
    pub name: String,
}

/// One existing mdev.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MdevDevice {
    /// Its UUID (lower case).
    pub uuid: String,
    /// Its parent's sysfs name.
    pub parent: String,
    /// Its type id.
    pub type_id: String,
    /// Its IOMMU group, if linked.
    pub iommu_group: Option<u32>,
    /// The `vfio-dev/vfioX` cdev name, if any.
    pub vfio_device: Option<String>,
}

/// A discovery read that failed for a reason other than "not there".
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// Reading a host path failed.
    #[error("cannot read {path}")]
    Read {
        /// The host path.
        path: PathBuf,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// A file held something discovery cannot parse.
    #[error("unexpected content {content:?} in {path}")]
    Parse {
        /// The host path.
        path: PathBuf,
        /// What the file held.
        content: String,
    },
}

impl DiscoveryError {
    /// The error class.
    pub fn kind(&self) -> crate::ErrorKind {
        match self {
            Self::Read { source, .. } => crate::ErrorKind::from_io(source),
            Self::Parse { .. } => crate::ErrorKind::Failed,
        }
    }
}

/// Reads the whole inventory of a host.
pub fn discover(host: &dyn HostFs) -> Result<Inventory, DiscoveryError> {
    let _ = host;
    let _: &Path = Path::new(layout::MDEV_BUS_CLASS);
    todo!("discovery lands in the next commit")
}
