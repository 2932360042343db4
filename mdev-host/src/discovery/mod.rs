//! Discovery: what the host offers (mdev parents and their types, SR-IOV PFs and VFs, NVIDIA
//! SR-IOV vGPU VFs) and what already exists (mdevs, bound VFs), read through a [`HostFs`].
//!
//! The output is deterministic (every list sorted) and serde-serializable, so a golden file of
//! an [`Inventory`] pins what discovery sees on a topology.

pub mod gpus;
pub mod layout;
pub mod names;

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use vgpu_profiles::vendor::{CreatableVgpuType, MdevTypeAttributes, MdevTypeInfo, OfferedType};

use crate::HostFs;
use names::PciAddress;

/// The driver VFs and pass-through devices are bound to for assignment.
pub const VFIO_PCI: &str = "vfio-pci";

/// Everything discovery found on a host.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Registered mdev parents (`/sys/class/mdev_bus/*`), sorted by name.
    pub mdev_parents: Vec<MdevParent>,
    /// SR-IOV capable PCI functions (those with `sriov_totalvfs`), sorted by address.
    pub sriov_pfs: Vec<SriovPf>,
    /// Existing mdevs (`/sys/bus/mdev/devices/*`), sorted by UUID.
    pub mdevs: Vec<MdevDevice>,
    /// GPUs (display-class functions) that are neither mdev parents, SR-IOV PFs nor VFs,
    /// with why no vGPU can be made on them, sorted by address.
    #[serde(default)]
    pub other_gpus: Vec<gpus::OtherGpu>,
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
    /// `available_instances`.
    pub available_instances: u32,
    /// `device_api` (`vfio-pci`).
    pub device_api: Option<String>,
    /// UUIDs of the mdevs of this type (`devices/`), sorted.
    pub devices: Vec<String>,
    /// The vendor-neutral reading of the type (`vgpu-profiles`), when its attributes parse.
    pub offered: Option<OfferedType>,
    /// Why the attributes did not parse (the type is still listed, with what could be read).
    pub parse_error: Option<String>,
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
    /// `class` (24-bit class code, e.g. 0x030200 for a 3D controller).
    pub class: Option<u32>,
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
    pub creatable: Vec<CreatableVgpuType>,
    /// `nvidia/current_vgpu_type` (0 = no vGPU).
    pub current_type: u32,
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
    pub fn kind(&self) -> crate::error::ErrorKind {
        match self {
            Self::Read { source, .. } => crate::error::kind_of_io(source),
            Self::Parse { .. } => crate::error::ErrorKind::Failed,
        }
    }
}

/// Reads the whole inventory of a host. Devices that vanish while being read are left out
/// (a removal racing with discovery is normal); only an unreadable top-level directory fails.
pub fn discover(host: &dyn HostFs) -> Result<Inventory, DiscoveryError> {
    let mdev_parents = discover_mdev_parents(host)?;
    let sriov_pfs = discover_sriov_pfs(host)?;
    let other_gpus = gpus::discover_other_gpus(host, &mdev_parents, &sriov_pfs)?;
    Ok(Inventory {
        mdev_parents,
        sriov_pfs,
        mdevs: discover_mdevs(host)?,
        other_gpus,
    })
}

/// Lists a directory's entry names, sorted; a missing directory is empty.
pub fn list_sorted(host: &dyn HostFs, dir: &Path) -> Result<Vec<String>, DiscoveryError> {
    match host.list(dir) {
        Ok(names) => {
            let mut names: Vec<String> = names
                .into_iter()
                .filter_map(|name| name.into_string().ok())
                .collect();
            names.sort();
            Ok(names)
        }
        Err(error) if is_absent(&error) => Ok(Vec::new()),
        Err(source) => Err(DiscoveryError::Read {
            path: dir.to_owned(),
            source,
        }),
    }
}

/// Whether an error means "the file or device is not there".
pub fn is_absent(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOENT | libc::ENODEV | libc::ENOTDIR)
    ) || error.kind() == io::ErrorKind::NotFound
}

/// Reads an optional attribute, trimmed of its trailing newline; `None` when absent or
/// unreadable.
pub fn read_optional(host: &dyn HostFs, path: &Path) -> Option<String> {
    host.read(path)
        .ok()
        .map(|text| text.trim_end_matches(['\n', '\r']).to_owned())
}

fn parse_hex_u16(text: &str) -> Option<u16> {
    let text = text.trim();
    let digits = text.strip_prefix("0x").unwrap_or(text);
    u16::from_str_radix(digits, 16).ok()
}

/// The last component of a link, if the link exists.
pub fn link_target_name(host: &dyn HostFs, path: &Path) -> Option<String> {
    host.read_link(path)
        .ok()
        .as_deref()
        .and_then(layout::link_name)
}

/// The IOMMU group number behind `<device>/iommu_group`.
pub fn iommu_group_of(host: &dyn HostFs, device_dir: &Path) -> Option<u32> {
    link_target_name(host, &device_dir.join("iommu_group"))?
        .parse()
        .ok()
}

/// Reads a PCI function's identity and placement.
pub fn read_pci_function(host: &dyn HostFs, address: PciAddress) -> PciFunction {
    let dir = layout::pci_device(&address);
    let driver_override = read_optional(host, &dir.join("driver_override"))
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty() && value != "(null)");
    PciFunction {
        address,
        vendor_id: read_optional(host, &dir.join("vendor"))
            .as_deref()
            .and_then(parse_hex_u16),
        device_id: read_optional(host, &dir.join("device"))
            .as_deref()
            .and_then(parse_hex_u16),
        class: read_optional(host, &dir.join("class")).and_then(|text| {
            let text = text.trim();
            u32::from_str_radix(text.strip_prefix("0x").unwrap_or(text), 16).ok()
        }),
        driver: link_target_name(host, &dir.join("driver")),
        driver_override,
        iommu_group: iommu_group_of(host, &dir),
        numa_node: read_optional(host, &dir.join("numa_node")).and_then(|v| v.trim().parse().ok()),
    }
}

fn discover_mdev_parents(host: &dyn HostFs) -> Result<Vec<MdevParent>, DiscoveryError> {
    let mut parents = Vec::new();
    for name in list_sorted(host, Path::new(layout::MDEV_BUS_CLASS))? {
        if names::check_sysfs_name("parent", &name).is_err() {
            continue;
        }
        if let Some(parent) = read_mdev_parent(host, &name)? {
            parents.push(parent);
        }
    }
    Ok(parents)
}

/// Reads one mdev parent; `None` when it is not registered.
pub fn read_mdev_parent(
    host: &dyn HostFs,
    name: &str,
) -> Result<Option<MdevParent>, DiscoveryError> {
    if !host.exists(&layout::mdev_parent(name)) {
        return Ok(None);
    }
    let pci = name
        .parse::<PciAddress>()
        .ok()
        .filter(|address| host.exists(&layout::pci_device(address)))
        .map(|address| read_pci_function(host, address));
    let mut types = Vec::new();
    for type_id in list_sorted(host, &layout::mdev_types(name))? {
        if names::check_sysfs_name("mdev type", &type_id).is_err() {
            continue;
        }
        types.push(read_mdev_type(host, name, &type_id));
    }
    Ok(Some(MdevParent {
        name: name.to_owned(),
        pci,
        types,
    }))
}

/// Reads one type directory. Unparseable attributes are reported in `parse_error`.
pub fn read_mdev_type(host: &dyn HostFs, parent: &str, type_id: &str) -> MdevType {
    let dir = layout::mdev_type(parent, type_id);
    let name_text = host.read(&dir.join("name")).ok();
    let description_text = host.read(&dir.join("description")).ok();
    let available_text = host
        .read(&dir.join("available_instances"))
        .unwrap_or_default();
    let device_api_text = host.read(&dir.join("device_api")).unwrap_or_default();
    let devices = list_sorted(host, &dir.join("devices")).unwrap_or_default();
    let attributes = MdevTypeAttributes {
        type_id,
        name: name_text.as_deref(),
        description: description_text.as_deref(),
        available_instances: &available_text,
        device_api: &device_api_text,
    };
    let trimmed = |text: &Option<String>| {
        text.as_deref()
            .map(str::trim_end)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
    };
    let mut mdev_type = MdevType {
        id: type_id.to_owned(),
        name: trimmed(&name_text),
        description: trimmed(&description_text),
        available_instances: available_text.trim().parse().unwrap_or(0),
        device_api: Some(device_api_text.trim().to_owned()).filter(|api| !api.is_empty()),
        devices,
        offered: None,
        parse_error: None,
    };
    match MdevTypeInfo::parse(&attributes) {
        Ok(info) => match OfferedType::from_mdev(&info) {
            Ok(offered) => mdev_type.offered = Some(offered),
            Err(error) => {
                mdev_type.parse_error =
                    Some(format!("{}: {error}", dir.join("description").display()))
            }
        },
        Err(error) => mdev_type.parse_error = Some(format!("{}: {error}", dir.display())),
    }
    mdev_type
}

fn discover_sriov_pfs(host: &dyn HostFs) -> Result<Vec<SriovPf>, DiscoveryError> {
    let mut pfs = Vec::new();
    for name in list_sorted(host, Path::new(layout::PCI_DEVICES))? {
        let Ok(address) = name.parse::<PciAddress>() else {
            continue;
        };
        if let Some(pf) = read_sriov_pf(host, address) {
            pfs.push(pf);
        }
    }
    Ok(pfs)
}

/// Reads a PF's SR-IOV state; `None` when the function is not SR-IOV capable (or gone).
pub fn read_sriov_pf(host: &dyn HostFs, address: PciAddress) -> Option<SriovPf> {
    let dir = layout::pci_device(&address);
    let total_vfs = read_optional(host, &dir.join("sriov_totalvfs"))?
        .trim()
        .parse()
        .ok()?;
    let num_vfs = read_optional(host, &dir.join("sriov_numvfs"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut vfs: Vec<VirtualFunction> = list_sorted(host, &dir)
        .unwrap_or_default()
        .iter()
        .filter_map(|entry| entry.strip_prefix("virtfn")?.parse::<u32>().ok())
        .filter_map(|index| {
            let target = link_target_name(host, &dir.join(format!("virtfn{index}")))?;
            let vf_address = target.parse::<PciAddress>().ok()?;
            Some(VirtualFunction {
                index,
                function: read_pci_function(host, vf_address),
                nvidia: read_nvidia_vf(host, vf_address),
            })
        })
        .collect();
    vfs.sort_by_key(|vf| vf.index);
    Some(SriovPf {
        function: read_pci_function(host, address),
        total_vfs,
        num_vfs,
        vf_device_id: read_optional(host, &dir.join("sriov_vf_device"))
            .as_deref()
            .and_then(parse_hex_u16),
        drivers_autoprobe: read_optional(host, &dir.join("sriov_drivers_autoprobe"))
            .map(|value| value.trim() != "0"),
        vfs,
    })
}

/// Reads a VF's NVIDIA vGPU files; `None` when it has none.
pub fn read_nvidia_vf(host: &dyn HostFs, vf: PciAddress) -> Option<NvidiaVfState> {
    let dir = layout::pci_device(&vf).join("nvidia");
    let current_type = read_optional(host, &dir.join("current_vgpu_type"))?
        .trim()
        .parse()
        .ok()?;
    let creatable = host
        .read(&dir.join("creatable_vgpu_types"))
        .ok()
        .and_then(|text| CreatableVgpuType::parse_list(&text).ok())
        .unwrap_or_default();
    Some(NvidiaVfState {
        creatable,
        current_type,
    })
}

fn discover_mdevs(host: &dyn HostFs) -> Result<Vec<MdevDevice>, DiscoveryError> {
    let mut mdevs = Vec::new();
    for name in list_sorted(host, Path::new(layout::MDEV_DEVICES))? {
        let Ok(uuid) = names::parse_uuid(&name) else {
            continue;
        };
        if let Some(device) = read_mdev(host, &uuid) {
            mdevs.push(device);
        }
    }
    mdevs.sort_by(|a, b| a.uuid.cmp(&b.uuid));
    Ok(mdevs)
}

/// Reads one existing mdev; `None` when it does not exist.
pub fn read_mdev(host: &dyn HostFs, uuid: &vgpu_types::Uuid) -> Option<MdevDevice> {
    let dir = layout::mdev_device(uuid);
    if !host.exists(&dir) {
        return None;
    }
    let type_link = host.read_link(&dir.join("mdev_type")).ok();
    let type_id = type_link
        .as_deref()
        .and_then(layout::link_name)
        .unwrap_or_default();
    // The type link names the parent when it is absolute-ish (`.../<parent>/mdev_supported_types/<type>`);
    // otherwise the device's own link (`.../<parent>/<uuid>`) does.
    let parent_from_type = type_link.as_deref().and_then(|target| {
        let parts: Vec<_> = target.components().collect();
        let at = parts
            .iter()
            .position(|c| c.as_os_str() == "mdev_supported_types")?;
        let parent = parts.get(at.checked_sub(1)?)?.as_os_str().to_str()?;
        (parent != "..").then(|| parent.to_owned())
    });
    let parent = parent_from_type
        .or_else(|| {
            let target = host.read_link(&dir).ok()?;
            let parent = target.parent()?.file_name()?.to_str()?.to_owned();
            Some(parent)
        })
        .unwrap_or_default();
    let vfio_device = list_sorted(host, &dir.join("vfio-dev"))
        .ok()
        .and_then(|names| names.into_iter().next());
    Some(MdevDevice {
        uuid: uuid.to_string(),
        parent,
        type_id,
        iommu_group: iommu_group_of(host, &dir),
        vfio_device,
    })
}

/// The VFIO cdev name (`vfioX`) of a PCI function, if it has one.
pub fn pci_vfio_device(host: &dyn HostFs, address: PciAddress) -> Option<String> {
    list_sorted(host, &layout::pci_device(&address).join("vfio-dev"))
        .ok()?
        .into_iter()
        .next()
}

/// The PF of a VF (`physfn` link), if it is one.
pub fn physfn_of(host: &dyn HostFs, vf: PciAddress) -> Option<PciAddress> {
    link_target_name(host, &layout::pci_device(&vf).join("physfn"))?
        .parse()
        .ok()
}
