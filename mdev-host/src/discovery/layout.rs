//! Where the kernel keeps things. Every host path the engine touches is built here, and only
//! from validated names ([`super::names`]), so no input can steer a path.

use std::path::{Path, PathBuf};

use super::names::PciAddress;

/// `/sys/class/mdev_bus`: one entry per registered mdev parent.
pub const MDEV_BUS_CLASS: &str = "/sys/class/mdev_bus";
/// `/sys/bus/mdev/devices`: one entry per existing mdev.
pub const MDEV_DEVICES: &str = "/sys/bus/mdev/devices";
/// `/sys/bus/pci/devices`: every PCI function.
pub const PCI_DEVICES: &str = "/sys/bus/pci/devices";
/// `/sys/bus/pci/drivers`: PCI drivers (their `bind`/`unbind` files).
pub const PCI_DRIVERS: &str = "/sys/bus/pci/drivers";
/// `/sys/bus/pci/drivers_probe`: asks the kernel to probe a device (honours `driver_override`).
pub const PCI_DRIVERS_PROBE: &str = "/sys/bus/pci/drivers_probe";
/// `/sys/kernel/iommu_groups`.
pub const IOMMU_GROUPS: &str = "/sys/kernel/iommu_groups";
/// `/dev/vfio`: group character devices `/dev/vfio/<N>`.
pub const DEV_VFIO: &str = "/dev/vfio";
/// `/dev/vfio/devices`: per-device cdevs `vfioX` (iommufd).
pub const DEV_VFIO_DEVICES: &str = "/dev/vfio/devices";
/// `/proc`.
pub const PROC: &str = "/proc";
/// `/etc/mdevctl.d`: mdevctl's persistent definitions.
pub const MDEVCTL_CONFIG: &str = "/etc/mdevctl.d";
/// `/var/lib/mdev-manager`: the default state directory.
pub const STATE_DIR: &str = "/var/lib/mdev-manager";
/// `/etc/mdev-manager`: configuration and `profiles.d/`.
pub const CONFIG_DIR: &str = "/etc/mdev-manager";

/// `/sys/class/mdev_bus/<parent>`.
pub fn mdev_parent(parent: &str) -> PathBuf {
    Path::new(MDEV_BUS_CLASS).join(parent)
}

/// `/sys/class/mdev_bus/<parent>/mdev_supported_types`.
pub fn mdev_types(parent: &str) -> PathBuf {
    mdev_parent(parent).join("mdev_supported_types")
}

/// `/sys/class/mdev_bus/<parent>/mdev_supported_types/<type>`.
pub fn mdev_type(parent: &str, type_id: &str) -> PathBuf {
    mdev_types(parent).join(type_id)
}

/// `/sys/bus/mdev/devices/<uuid>`.
pub fn mdev_device(uuid: &vgpu_types::Uuid) -> PathBuf {
    Path::new(MDEV_DEVICES).join(uuid.to_string())
}

/// `/sys/bus/pci/devices/<bdf>`.
pub fn pci_device(address: &PciAddress) -> PathBuf {
    Path::new(PCI_DEVICES).join(address.to_string())
}

/// `/sys/bus/pci/drivers/<driver>/<file>`.
pub fn pci_driver_file(driver: &str, file: &str) -> PathBuf {
    Path::new(PCI_DRIVERS).join(driver).join(file)
}

/// `/sys/kernel/iommu_groups/<n>/devices`.
pub fn iommu_group_devices(group: u32) -> PathBuf {
    Path::new(IOMMU_GROUPS)
        .join(group.to_string())
        .join("devices")
}

/// `/dev/vfio/<n>`.
pub fn vfio_group_node(group: u32) -> PathBuf {
    Path::new(DEV_VFIO).join(group.to_string())
}

/// `/dev/vfio/devices/<name>` for a `vfio-dev/<name>` entry.
pub fn vfio_device_node(name: &str) -> PathBuf {
    Path::new(DEV_VFIO_DEVICES).join(name)
}

/// The last component of a sysfs link target (`../../../kernel/iommu_groups/4` → `4`).
pub fn link_name(target: &Path) -> Option<String> {
    target
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
}
