//! GPUs the service cannot host vGPUs on, and why.
//!
//! Contract: every display- or 3D-class PCI function (class `0x03xxxx`) that is neither an
//! mdev parent, an SR-IOV PF nor a VF is listed here with what the service can still do with
//! it (pass it through whole, when it has an IOMMU group) and every reason it hosts no vGPU,
//! read from sysfs alone: the bound driver, the IOMMU group link. An admin who looks for a
//! GPU in `vgpuctl parents` finds it with these reasons instead of an empty table.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::names::PciAddress;
use super::{layout, link_target_name, list_sorted, read_optional, MdevParent, PciFunction};
use super::{DiscoveryError, SriovPf};
use crate::HostFs;

/// The PCI base class of display controllers (VGA `0x0300`, XGA `0x0301`, 3D `0x0302`,
/// other `0x0380`): every GPU.
pub const DISPLAY_BASE_CLASS: u32 = 0x03;

/// The driver that ships NVIDIA's vGPU manager (mdev types or SR-IOV vGPU VFs) when the vGPU
/// host package is installed, and plain compute/graphics otherwise.
const NVIDIA_DRIVER: &str = "nvidia";

/// A GPU that is no mdev parent and no SR-IOV PF: listed so the admin sees it, with why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtherGpu {
    /// Its identity.
    pub function: PciFunction,
    /// Whether the service can pass it through whole (it has an IOMMU group and no VMM
    /// already has it through `vfio-pci`).
    pub passthrough: bool,
    /// Why it hosts no vGPU (and, without an IOMMU group, no pass-through either), most
    /// important first. Never empty.
    pub reasons: Vec<String>,
}

impl OtherGpu {
    /// The reasons as one sentence (`; `-separated).
    pub fn reason(&self) -> String {
        self.reasons.join("; ")
    }
}

/// Whether a class code is a display controller (any GPU).
pub fn is_display_class(class: u32) -> bool {
    class >> 16 == DISPLAY_BASE_CLASS
}

/// Why the service hosts no vGPU on a GPU that offers neither mdev types nor SR-IOV, from
/// its driver and IOMMU group. Pure, so the wording is tested on its own.
pub fn reasons_for(function: &PciFunction) -> Vec<String> {
    let mut reasons = Vec::new();
    match function.driver.as_deref() {
        None => reasons.push("no driver bound (no mdev types, no SR-IOV VFs)".to_owned()),
        Some(crate::discovery::VFIO_PCI) => {
            reasons.push("bound to vfio-pci (passed through)".to_owned())
        }
        Some(NVIDIA_DRIVER) => reasons.push(
            "nvidia driver without vGPU support loaded (no mdev types, no SR-IOV VFs)".to_owned(),
        ),
        Some(driver) => reasons.push(format!(
            "{driver} driver offers no vGPU (no mdev types, no SR-IOV VFs)"
        )),
    }
    if function.iommu_group.is_none() {
        reasons.push("IOMMU off: no IOMMU group, so no pass-through".to_owned());
    }
    reasons
}

/// Every GPU that is none of `mdev_parents`, `sriov_pfs` or a VF, sorted by address.
pub fn discover_other_gpus(
    host: &dyn HostFs,
    mdev_parents: &[MdevParent],
    sriov_pfs: &[SriovPf],
) -> Result<Vec<OtherGpu>, DiscoveryError> {
    let mut gpus = Vec::new();
    for name in list_sorted(host, Path::new(layout::PCI_DEVICES))? {
        let Ok(address) = name.parse::<PciAddress>() else {
            continue;
        };
        let known = mdev_parents.iter().any(|p| p.name == name)
            || sriov_pfs.iter().any(|pf| {
                pf.function.address == address
                    || pf.vfs.iter().any(|vf| vf.function.address == address)
            });
        if known {
            continue;
        }
        if let Some(gpu) = read_other_gpu(host, address) {
            gpus.push(gpu);
        }
    }
    Ok(gpus)
}

/// Reads one function as an [`OtherGpu`]; `None` when it is not a display-class function, is
/// a VF (its PF speaks for it), or is gone.
pub fn read_other_gpu(host: &dyn HostFs, address: PciAddress) -> Option<OtherGpu> {
    let dir = layout::pci_device(&address);
    let class = read_optional(host, &dir.join("class"))?;
    let class = u32::from_str_radix(class.trim().trim_start_matches("0x"), 16).ok()?;
    if !is_display_class(class) || link_target_name(host, &dir.join("physfn")).is_some() {
        return None;
    }
    let function = super::read_pci_function(host, address);
    let reasons = reasons_for(&function);
    Some(OtherGpu {
        passthrough: function.iommu_group.is_some()
            && function.driver.as_deref() != Some(crate::discovery::VFIO_PCI),
        function,
        reasons,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(driver: Option<&str>, iommu_group: Option<u32>) -> PciFunction {
        PciFunction {
            address: "0000:00:06.0".parse().unwrap(),
            vendor_id: Some(0x10de),
            device_id: Some(0x2335),
            class: Some(0x030200),
            driver: driver.map(str::to_owned),
            driver_override: None,
            iommu_group,
            numa_node: Some(-1),
        }
    }

    #[test]
    fn an_nvidia_gpu_without_vgpu_manager_or_iommu_says_both() {
        assert_eq!(
            reasons_for(&function(Some("nvidia"), None)),
            vec![
                "nvidia driver without vGPU support loaded (no mdev types, no SR-IOV VFs)",
                "IOMMU off: no IOMMU group, so no pass-through"
            ]
        );
    }

    #[test]
    fn a_gpu_bound_to_vfio_pci_is_passed_through_and_others_name_their_driver() {
        assert_eq!(
            reasons_for(&function(Some("vfio-pci"), Some(4))),
            vec!["bound to vfio-pci (passed through)"]
        );
        assert_eq!(
            reasons_for(&function(Some("amdgpu"), Some(4))),
            vec!["amdgpu driver offers no vGPU (no mdev types, no SR-IOV VFs)"]
        );
        assert_eq!(
            reasons_for(&function(None, Some(4))),
            vec!["no driver bound (no mdev types, no SR-IOV VFs)"]
        );
    }

    #[test]
    fn only_base_class_3_is_a_gpu() {
        assert!(is_display_class(0x030000));
        assert!(is_display_class(0x030200));
        assert!(is_display_class(0x038000));
        assert!(!is_display_class(0x020000));
        assert!(!is_display_class(0x120000));
    }
}
