//! Topology files: the hardware, drivers and modules a simulated host boots with.
//! The format is documented in `docs/simulated-host.md`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

/// Errors in a topology file; each names the entry at fault.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The text is not valid TOML for the topology schema.
    #[error("topology is not valid TOML for the schema")]
    Syntax(#[source] toml::de::Error),
    /// A PCI address is not in `DDDD:BB:DD.F` form.
    #[error("PCI address {0:?} is not of the form DDDD:BB:DD.F")]
    BadPciAddress(String),
    /// Two entries share a name that must be unique.
    #[error("{what} {name:?} is defined twice")]
    Duplicate {
        /// Which kind of entry.
        what: &'static str,
        /// The repeated name.
        name: String,
    },
    /// An entry refers to something that is not defined.
    #[error("{from} refers to undefined {what} {name:?}")]
    Undefined {
        /// The entry holding the reference.
        from: String,
        /// Which kind of entry is missing.
        what: &'static str,
        /// The missing name.
        name: String,
    },
    /// A value is out of its range or not allowed.
    #[error("{entry}: {problem}")]
    Invalid {
        /// The entry at fault.
        entry: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `SimHost::builtin` was given a name no built-in topology has.
    #[error("no built-in topology named {0:?} (have: default, samples, scale, ampere, h200-real)")]
    UnknownBuiltin(String),
}

/// A whole topology file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// One line saying what host this is.
    #[serde(default)]
    pub description: String,
    /// Modules that are *not* loaded at boot (everything else a driver or parent names is).
    #[serde(default)]
    pub unloaded_modules: Vec<String>,
    /// IOMMU groups `0..N` belong to devices the topology does not list (bridges, chipset),
    /// so groups made at run time (mdevs, VFs) are numbered from N like on the real host.
    #[serde(default)]
    pub hidden_iommu_groups: u32,
    /// Whether the host has an IOMMU (default `true`). Without one (firmware or kernel
    /// command line turned it off) the kernel makes no groups: no `iommu_group` links and an
    /// empty `/sys/kernel/iommu_groups`, as on the real H200 host of `h200-real`.
    #[serde(default = "default_iommu")]
    pub iommu: bool,
    /// Vendor tools installed on the host (host paths), answered by the simulated host's
    /// models (`sim::tools`): `/usr/lib/nvidia/sriov-manage`, `/usr/bin/nvidia-smi`.
    #[serde(default)]
    pub host_tools: Vec<String>,
    /// PCI drivers.
    #[serde(default, rename = "pci_driver")]
    pub pci_drivers: Vec<PciDriverSpec>,
    /// PCI functions present at boot (VFs are made by enabling SR-IOV).
    #[serde(default, rename = "pci_device")]
    pub pci_devices: Vec<PciDeviceSpec>,
    /// Devices that register as mdev parents.
    #[serde(default, rename = "mdev_parent")]
    pub mdev_parents: Vec<MdevParentSpec>,
}

/// A PCI driver (`/sys/bus/pci/drivers/<name>`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PciDriverSpec {
    /// Driver name.
    pub name: String,
    /// Module providing it (default: the driver name).
    #[serde(default)]
    pub module: Option<String>,
    /// Whether it implements `sriov_configure` (else `sriov_numvfs` writes give ENOENT).
    #[serde(default)]
    pub sriov_configure: bool,
    /// Whether bound devices are VFIO devices (`/dev/vfio/N` appears): `vfio-pci`.
    #[serde(default)]
    pub vfio: bool,
}

impl PciDriverSpec {
    /// The module that provides this driver.
    pub fn module_name(&self) -> &str {
        self.module.as_deref().unwrap_or(&self.name)
    }
}

/// A PCI function present at boot.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PciDeviceSpec {
    /// `DDDD:BB:DD.F`.
    pub bdf: String,
    /// Upstream bridge (root port) the device sits below, if any.
    #[serde(default)]
    pub bridge: Option<String>,
    /// PCI vendor id.
    pub vendor: u16,
    /// PCI device id.
    pub device: u16,
    /// Subsystem vendor id.
    #[serde(default)]
    pub subsystem_vendor: u16,
    /// Subsystem device id.
    #[serde(default)]
    pub subsystem_device: u16,
    /// 24-bit class code (`0x030200`).
    pub class: u32,
    /// NUMA node (`-1` = none).
    #[serde(default = "default_numa")]
    pub numa_node: i32,
    /// IOMMU group number (required unless the topology has `iommu = false`).
    #[serde(default)]
    pub iommu_group: Option<u32>,
    /// The driver that claims it when probed (and is bound at boot when loaded).
    #[serde(default)]
    pub driver: Option<String>,
    /// SR-IOV capability, if it is a PF.
    #[serde(default)]
    pub sriov: Option<SriovSpec>,
}

fn default_numa() -> i32 {
    -1
}

fn default_iommu() -> bool {
    true
}

/// The SR-IOV capability of a PF.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SriovSpec {
    /// `sriov_totalvfs`.
    pub total_vfs: u16,
    /// `sriov_offset` (routing-id offset of VF 0).
    pub offset: u16,
    /// `sriov_stride`.
    pub stride: u16,
    /// `sriov_vf_device` (VF PCI device id).
    pub vf_device: u16,
    /// The driver that claims a VF when probed; none = probing fails and the VF stays unbound.
    #[serde(default)]
    pub vf_driver: Option<String>,
    /// VFs the PF driver enables by itself when it binds (AMD GIM's `vf_num`).
    #[serde(default)]
    pub vfs_at_bind: u16,
    /// NVIDIA vendor-VFIO vGPU types offered on each VF (`nvidia/creatable_vgpu_types`).
    #[serde(default)]
    pub nvidia_vgpu_types: Vec<NvidiaVgpuTypeSpec>,
    /// mdev types each VF offers once bound (NVIDIA Ampere SR-IOV + mdev): every VF becomes
    /// an mdev parent holding at most one instance.
    #[serde(default)]
    pub vf_mdev: Option<VfMdevSpec>,
}

/// The mdev parent every VF of a PF becomes (NVIDIA Ampere-style SR-IOV vGPU).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VfMdevSpec {
    /// The module whose load registers the VF parents.
    pub module: String,
    /// Prefix of the type directory names.
    pub type_prefix: String,
    /// The mdev bus driver the instances bind to.
    pub mdev_driver: String,
    /// Writable per-instance vendor attributes.
    #[serde(default)]
    pub instance_attributes: Vec<String>,
    /// The types; `max_instances` is per GPU (all VFs of the PF together).
    #[serde(rename = "type")]
    pub types: Vec<MdevTypeSpec>,
}

impl VfMdevSpec {
    /// The parent spec of one VF.
    pub(crate) fn parent_for(&self, vf: &str) -> MdevParentSpec {
        MdevParentSpec {
            name: vf.to_string(),
            virtual_device: None,
            pci: Some(vf.to_string()),
            module: self.module.clone(),
            type_prefix: self.type_prefix.clone(),
            mdev_driver: self.mdev_driver.clone(),
            capacity: CapacityKind::PerVf,
            resources: BTreeMap::new(),
            max_instances: None,
            exhausted_errno: None,
            instance_attributes: self.instance_attributes.clone(),
            instance_constants: BTreeMap::new(),
            types: self.types.clone(),
        }
    }
}

/// One NVIDIA SR-IOV vGPU type.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvidiaVgpuTypeSpec {
    /// Numeric type id (unique per card model).
    pub id: u32,
    /// Name as listed (`NVIDIA H200X-4C`).
    pub name: String,
    /// Instances of this type one GPU holds.
    pub max_instances: u32,
}

/// How a parent accounts for its capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityKind {
    /// The driver keeps resource pools; each type costs some of each (mtty ports, mbochs MB,
    /// GVT-g aperture). Exhaustion is the driver's errno (ENOSPC).
    Pool,
    /// The 6.1 core's `max_instances`: one counter shared by all types. Exhaustion is EUSERS.
    MaxInstances,
    /// Each type has its own `max_instances` and only one type (or one `homogeneous_group`)
    /// may be in use at a time (NVIDIA time-sliced vGPU).
    Homogeneous,
    /// One instance per parent (a VF); homogeneous and counted across all VFs of the PF.
    /// Only for `sriov.vf_mdev` parents.
    PerVf,
}

/// A device that registers as an mdev parent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MdevParentSpec {
    /// The name under `/sys/class/mdev_bus/` (the device name: `mtty`, or a BDF).
    pub name: String,
    /// For a virtual parent: the path below `/sys/devices/virtual/` (`mtty/mtty`).
    #[serde(default)]
    pub virtual_device: Option<String>,
    /// For a PCI parent: its BDF (must be a `pci_device`).
    #[serde(default)]
    pub pci: Option<String>,
    /// The module whose load registers the parent.
    pub module: String,
    /// Prefix of the type directory names (`dev_driver_string` of the parent).
    pub type_prefix: String,
    /// The mdev bus driver the instances bind to (`driver` link, `DRIVER=` in uevents).
    pub mdev_driver: String,
    /// Capacity model.
    pub capacity: CapacityKind,
    /// Resource pools for `capacity = "pool"` (name → total).
    #[serde(default)]
    pub resources: BTreeMap<String, u64>,
    /// The shared limit for `capacity = "max_instances"`.
    #[serde(default)]
    pub max_instances: Option<u32>,
    /// errno of a create with nothing left (default: ENOSPC for pool and homogeneous,
    /// EUSERS for max_instances).
    #[serde(default)]
    pub exhausted_errno: Option<String>,
    /// Writable per-instance vendor attributes (`nvidia/vgpu_params`), initially empty.
    #[serde(default)]
    pub instance_attributes: Vec<String>,
    /// Read-only per-instance vendor attributes; `{uuid}` in the value is replaced.
    #[serde(default)]
    pub instance_constants: BTreeMap<String, String>,
    /// Supported types.
    #[serde(rename = "type")]
    pub types: Vec<MdevTypeSpec>,
}

/// One entry of `mdev_supported_types`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MdevTypeSpec {
    /// The driver's `sysfs_name`; the directory is `<type_prefix>-<id>`.
    pub id: String,
    /// `name` attribute (default: the sysfs name).
    #[serde(default)]
    pub name: Option<String>,
    /// `description` attribute; absent when the driver has none (mtty).
    #[serde(default)]
    pub description: Option<String>,
    /// `device_api`.
    #[serde(default = "default_device_api")]
    pub device_api: String,
    /// Resource cost per instance for pool capacity.
    #[serde(default)]
    pub cost: BTreeMap<String, u64>,
    /// Per-type limit for homogeneous capacity.
    #[serde(default)]
    pub max_instances: Option<u32>,
    /// Types with the same group may share a GPU under homogeneous capacity (NVIDIA allows
    /// different series of one framebuffer size); default: the type alone.
    #[serde(default)]
    pub homogeneous_group: Option<String>,
    /// Read-only vendor attributes of this type's instances (`vendor/resolution`); `{uuid}`
    /// in the value is replaced.
    #[serde(default)]
    pub instance_constants: BTreeMap<String, String>,
}

fn default_device_api() -> String {
    "vfio-pci".to_string()
}

/// A PCI address: the workspace's one definition (`vgpu-types`, through the host crate).
pub use mdev_host::discovery::names::PciAddress;

/// Maps an errno name from a topology file to its number.
pub(crate) fn errno_from_name(name: &str) -> Option<i32> {
    Some(match name {
        "ENOSPC" => libc::ENOSPC,
        "EUSERS" => libc::EUSERS,
        "EINVAL" => libc::EINVAL,
        "EBUSY" => libc::EBUSY,
        "ENODEV" => libc::ENODEV,
        "ENOMEM" => libc::ENOMEM,
        "EIO" => libc::EIO,
        "EAGAIN" => libc::EAGAIN,
        "EPERM" => libc::EPERM,
        "EEXIST" => libc::EEXIST,
        "ENOENT" => libc::ENOENT,
        "ERANGE" => libc::ERANGE,
        "EACCES" => libc::EACCES,
        "ETIMEDOUT" => libc::ETIMEDOUT,
        "ENXIO" => libc::ENXIO,
        _ => return None,
    })
}

/// The name of an errno number (`ENOSPC`), or `errno N` for one we do not name.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::ENOSPC => "ENOSPC",
        libc::EUSERS => "EUSERS",
        libc::EINVAL => "EINVAL",
        libc::EBUSY => "EBUSY",
        libc::ENODEV => "ENODEV",
        libc::ENOMEM => "ENOMEM",
        libc::EIO => "EIO",
        libc::EAGAIN => "EAGAIN",
        libc::EPERM => "EPERM",
        libc::EEXIST => "EEXIST",
        libc::ENOENT => "ENOENT",
        libc::ERANGE => "ERANGE",
        libc::EACCES => "EACCES",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ENXIO => "ENXIO",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::ELOOP => "ELOOP",
        libc::ENOTTY => "ENOTTY",
        libc::EINTR => "EINTR",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}

impl Topology {
    /// Parses and checks a topology.
    pub fn from_toml(text: &str) -> Result<Self, TopologyError> {
        let topology: Topology = toml::from_str(text).map_err(TopologyError::Syntax)?;
        topology.validate()?;
        Ok(topology)
    }

    /// The errno a parent's create gives when nothing is left.
    pub(crate) fn exhausted_errno(parent: &MdevParentSpec) -> i32 {
        parent
            .exhausted_errno
            .as_deref()
            .and_then(errno_from_name)
            .unwrap_or(match parent.capacity {
                CapacityKind::MaxInstances => libc::EUSERS,
                CapacityKind::Pool | CapacityKind::Homogeneous | CapacityKind::PerVf => {
                    libc::ENOSPC
                }
            })
    }

    fn validate(&self) -> Result<(), TopologyError> {
        let invalid = |entry: &str, problem: String| TopologyError::Invalid {
            entry: entry.to_string(),
            problem,
        };
        let mut drivers = BTreeSet::new();
        for driver in &self.pci_drivers {
            check_name("PCI driver", &driver.name)?;
            if !drivers.insert(driver.name.as_str()) {
                return Err(TopologyError::Duplicate {
                    what: "PCI driver",
                    name: driver.name.clone(),
                });
            }
        }
        let mut addresses = BTreeSet::new();
        for device in &self.pci_devices {
            let address = PciAddress::parse(&device.bdf)
                .map_err(|_| TopologyError::BadPciAddress(device.bdf.clone()))?;
            if address.to_string() != device.bdf {
                return Err(invalid(
                    &device.bdf,
                    "PCI addresses are written in lower case".to_string(),
                ));
            }
            if !addresses.insert(address) {
                return Err(TopologyError::Duplicate {
                    what: "PCI device",
                    name: device.bdf.clone(),
                });
            }
            if let Some(bridge) = &device.bridge {
                PciAddress::parse(bridge)
                    .map_err(|_| TopologyError::BadPciAddress(bridge.clone()))?;
            }
            if self.iommu && device.iommu_group.is_none() {
                return Err(invalid(
                    &device.bdf,
                    "iommu_group is required (the host has an IOMMU)".to_string(),
                ));
            }
            if device.class > 0xff_ffff {
                return Err(invalid(
                    &device.bdf,
                    format!("class {:#x} is wider than 24 bits", device.class),
                ));
            }
            for name in device
                .driver
                .iter()
                .chain(device.sriov.iter().flat_map(|s| s.vf_driver.iter()))
            {
                if !drivers.contains(name.as_str()) {
                    return Err(TopologyError::Undefined {
                        from: device.bdf.clone(),
                        what: "PCI driver",
                        name: name.clone(),
                    });
                }
            }
            if let Some(sriov) = &device.sriov {
                if sriov.stride == 0 && sriov.total_vfs > 1 {
                    return Err(invalid(
                        &device.bdf,
                        "sriov stride 0 with more than one VF".to_string(),
                    ));
                }
                if sriov.vfs_at_bind > sriov.total_vfs {
                    return Err(invalid(
                        &device.bdf,
                        "vfs_at_bind exceeds total_vfs".to_string(),
                    ));
                }
                let last = u32::from(address.routing_id())
                    + u32::from(sriov.offset)
                    + u32::from(sriov.stride) * u32::from(sriov.total_vfs.saturating_sub(1));
                if last > 0xffff || sriov.offset == 0 {
                    return Err(invalid(
                        &device.bdf,
                        "VF routing ids fall outside the bus range".to_string(),
                    ));
                }
                if let Some(vf_mdev) = &sriov.vf_mdev {
                    check_name("module", &vf_mdev.module)?;
                    check_name("mdev driver", &vf_mdev.mdev_driver)?;
                    let mut type_ids = BTreeSet::new();
                    for mdev_type in &vf_mdev.types {
                        check_name("mdev type", &mdev_type.id)?;
                        if !type_ids.insert(mdev_type.id.as_str())
                            || mdev_type.max_instances.is_none()
                        {
                            return Err(invalid(
                                &device.bdf,
                                format!(
                                    "VF mdev type {} is repeated or lacks max_instances",
                                    mdev_type.id
                                ),
                            ));
                        }
                    }
                    if sriov.vf_driver.is_none() {
                        return Err(invalid(
                            &device.bdf,
                            "vf_mdev needs a vf_driver to bind the VFs".to_string(),
                        ));
                    }
                }
                let mut ids = BTreeSet::new();
                for vgpu in &sriov.nvidia_vgpu_types {
                    if vgpu.id == 0 || !ids.insert(vgpu.id) || vgpu.max_instances == 0 {
                        return Err(invalid(
                            &device.bdf,
                            format!(
                                "NVIDIA vGPU type id {} is 0, repeated, or has no instances",
                                vgpu.id
                            ),
                        ));
                    }
                }
            }
        }
        let mut parents = BTreeSet::new();
        for parent in &self.mdev_parents {
            check_name("mdev parent", &parent.name)?;
            if !parents.insert(parent.name.as_str()) {
                return Err(TopologyError::Duplicate {
                    what: "mdev parent",
                    name: parent.name.clone(),
                });
            }
            match (&parent.virtual_device, &parent.pci) {
                (Some(path), None) => {
                    if path
                        .split('/')
                        .any(|c| c.is_empty() || c == "." || c == "..")
                    {
                        return Err(invalid(
                            &parent.name,
                            format!("virtual_device {path:?} is not a plain relative path"),
                        ));
                    }
                }
                (None, Some(bdf)) => {
                    let address = PciAddress::parse(bdf)
                        .map_err(|_| TopologyError::BadPciAddress(bdf.clone()))?;
                    if !addresses.contains(&address) {
                        return Err(TopologyError::Undefined {
                            from: parent.name.clone(),
                            what: "PCI device",
                            name: bdf.clone(),
                        });
                    }
                }
                _ => {
                    return Err(invalid(
                        &parent.name,
                        "give exactly one of virtual_device and pci".to_string(),
                    ))
                }
            }
            check_name("module", &parent.module)?;
            check_name("mdev driver", &parent.mdev_driver)?;
            if let Some(name) = &parent.exhausted_errno {
                if errno_from_name(name).is_none() {
                    return Err(invalid(
                        &parent.name,
                        format!("unknown errno name {name:?}"),
                    ));
                }
            }
            if parent.capacity == CapacityKind::MaxInstances && parent.max_instances.is_none() {
                return Err(invalid(
                    &parent.name,
                    "capacity max_instances needs max_instances".to_string(),
                ));
            }
            let mut type_ids = BTreeSet::new();
            for mdev_type in &parent.types {
                check_name("mdev type", &mdev_type.id)?;
                if !type_ids.insert(mdev_type.id.as_str()) {
                    return Err(TopologyError::Duplicate {
                        what: "mdev type",
                        name: format!("{}-{}", parent.type_prefix, mdev_type.id),
                    });
                }
                match parent.capacity {
                    CapacityKind::Pool => {
                        if mdev_type.cost.is_empty() || mdev_type.cost.values().any(|&c| c == 0) {
                            return Err(invalid(
                                &parent.name,
                                format!("type {} needs a non-zero cost in a pool", mdev_type.id),
                            ));
                        }
                        if let Some(resource) = mdev_type
                            .cost
                            .keys()
                            .find(|r| !parent.resources.contains_key(*r))
                        {
                            return Err(TopologyError::Undefined {
                                from: format!("{} type {}", parent.name, mdev_type.id),
                                what: "resource",
                                name: resource.clone(),
                            });
                        }
                    }
                    CapacityKind::Homogeneous => {
                        if mdev_type.max_instances.is_none() {
                            return Err(invalid(
                                &parent.name,
                                format!("type {} needs max_instances", mdev_type.id),
                            ));
                        }
                    }
                    CapacityKind::MaxInstances => {}
                    CapacityKind::PerVf => {
                        return Err(invalid(
                            &parent.name,
                            "capacity per_vf is only for sriov.vf_mdev".to_string(),
                        ));
                    }
                }
            }
            let type_constants = parent
                .types
                .iter()
                .flat_map(|t| t.instance_constants.keys());
            for attribute in parent
                .instance_attributes
                .iter()
                .chain(parent.instance_constants.keys())
                .chain(type_constants)
            {
                if attribute
                    .split('/')
                    .any(|c| c.is_empty() || c == "." || c == "..")
                {
                    return Err(invalid(
                        &parent.name,
                        format!("instance attribute {attribute:?} is not a plain relative path"),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn check_name(what: &'static str, name: &str) -> Result<(), TopologyError> {
    if name.is_empty()
        || name.contains('/')
        || name == "."
        || name == ".."
        || name.chars().any(char::is_whitespace)
    {
        return Err(TopologyError::Invalid {
            entry: format!("{what} {name:?}"),
            problem: "names must be non-empty, without '/' or spaces".to_string(),
        });
    }
    Ok(())
}

/// The embedded topology files.
pub(crate) fn builtin_text(name: &str) -> Option<&'static str> {
    match name {
        "default" => Some(include_str!("../topologies/default.toml")),
        "samples" => Some(include_str!("../topologies/samples.toml")),
        "scale" => Some(include_str!("../topologies/scale.toml")),
        "scale-4096" => Some(include_str!("../topologies/scale-4096.toml")),
        "ampere" => Some(include_str!("../topologies/ampere.toml")),
        "h200-real" => Some(include_str!("../topologies/h200-real.toml")),
        "t4-pair" => Some(include_str!("../topologies/t4-pair.toml")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_address_round_trips_and_computes_vf_ids() {
        let pf = PciAddress::parse("0000:01:00.0").unwrap();
        assert_eq!(
            PciAddress::from_routing_id(0, pf.routing_id() + 1).to_string(),
            "0000:01:00.1"
        );
        let gpu = PciAddress::parse("0001:04:00.0").unwrap();
        assert_eq!(
            PciAddress::from_routing_id(1, gpu.routing_id() + 2 + 8).to_string(),
            "0001:04:01.2"
        );
        assert!(PciAddress::parse("0000:01:20.0").is_err());
        assert!(PciAddress::parse("0000:01:00.8").is_err());
        assert!(PciAddress::parse("../../x").is_err());
    }

    #[test]
    fn builtins_validate() {
        for name in [
            "default",
            "samples",
            "scale",
            "scale-4096",
            "ampere",
            "h200-real",
            "t4-pair",
        ] {
            let text = builtin_text(name).unwrap();
            if let Err(error) = Topology::from_toml(text) {
                panic!("{name}: {error}: {:?}", std::error::Error::source(&error));
            }
        }
    }

    #[test]
    fn validation_names_the_bad_entry() {
        let text = r#"
[[mdev_parent]]
name = "p"
virtual_device = "p/p"
module = "p"
type_prefix = "p"
mdev_driver = "p"
capacity = "pool"
resources = { mem = 10 }
[[mdev_parent.type]]
id = "a"
cost = { vram = 1 }
"#;
        let error = Topology::from_toml(text).unwrap_err().to_string();
        assert!(error.contains("vram"), "{error}");
        let error = Topology::from_toml("[[pci_device]]\nbdf = \"00:01.0\"\nvendor = 1\ndevice = 1\nclass = 1\niommu_group = 1\n").unwrap_err().to_string();
        assert!(error.contains("00:01.0"), "{error}");
    }
}
