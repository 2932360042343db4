//! What the probe looks at: an mdev (by UUID) or a PCI function (by address), and where its
//! sysfs directory and IOMMU group are.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Serialize;

/// Errors from naming or locating a probe target.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The text is neither an mdev UUID nor a PCI address.
    #[error(
        "{text:?} is neither an mdev UUID (8-4-4-4-12 hex digits) nor a PCI address (DDDD:BB:DD.F)"
    )]
    Unrecognized {
        /// The text as given.
        text: String,
    },
    /// The device has no directory in sysfs.
    #[error("{target} does not exist: no {}", path.display())]
    NotFound {
        /// The target.
        target: Target,
        /// The sysfs directory looked for.
        path: PathBuf,
    },
    /// The device has no `iommu_group` link, so VFIO cannot reach it.
    #[error("{target} has no IOMMU group (no {} link; is the IOMMU enabled?)", path.display())]
    NoIommuGroup {
        /// The target.
        target: Target,
        /// The link looked for.
        path: PathBuf,
    },
    /// The `iommu_group` link does not end in a group number.
    #[error("{target}: the IOMMU group link {} points at {}, which does not end in a group number", link.display(), points_at.display())]
    BadIommuGroupLink {
        /// The target.
        target: Target,
        /// The link.
        link: PathBuf,
        /// Where it points.
        points_at: PathBuf,
    },
    /// A PCI function bound to a driver other than vfio-pci (or to none): VFIO cannot open it.
    #[error("{target} is {}, not to vfio-pci", match driver { Some(d) => format!("bound to {d}"), None => "not bound to any driver".to_owned() })]
    NotBoundToVfioPci {
        /// The target.
        target: Target,
        /// The driver it is bound to, if any.
        driver: Option<String>,
    },
}

/// A device a VMM would be given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum Target {
    /// A mediated device, by its UUID (lower case, as sysfs names it).
    Mdev(String),
    /// A PCI function (e.g. an SR-IOV VF), by its full address `DDDD:BB:DD.F` (lower case).
    Pci(String),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Mdev(uuid) => write!(f, "mdev {uuid}"),
            Target::Pci(bdf) => write!(f, "PCI device {bdf}"),
        }
    }
}

impl FromStr for Target {
    type Err = TargetError;

    /// Accepts an mdev UUID in the hyphenated form (any case), or a PCI address with or without
    /// its domain (`0000:01:00.1` or `01:00.1`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        if let Some(uuid) = parse_uuid(trimmed) {
            return Ok(Target::Mdev(uuid));
        }
        if let Some(bdf) = parse_pci_address(trimmed) {
            return Ok(Target::Pci(bdf));
        }
        Err(TargetError::Unrecognized {
            text: text.to_owned(),
        })
    }
}

/// Only the hyphenated form (the workspace's one UUID rule): it is the one sysfs uses, and a
/// bare 32-digit string is more likely a typo than a UUID.
fn parse_uuid(text: &str) -> Option<String> {
    vgpu_types::Uuid::parse(text)
        .ok()
        .map(|uuid| uuid.to_string())
}

/// The kernel's `DDDD:BB:DD.F` (the workspace's one PCI address rule), or `BB:DD.F` in domain 0
/// as `lspci` prints it.
fn parse_pci_address(text: &str) -> Option<String> {
    let full = if text.matches(':').count() == 1 {
        format!("0000:{text}")
    } else {
        text.to_owned()
    };
    vgpu_types::PciAddress::parse(&full)
        .ok()
        .map(|address| address.to_string())
}

/// Where a target lives in sysfs, resolved under a root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResolvedTarget {
    /// The device's sysfs directory (under the root), as VFIO wants it.
    pub sysfs_path: PathBuf,
    /// The IOMMU group number (`/dev/vfio/<group>`).
    pub iommu_group: u32,
    /// The driver the device is bound to, if any.
    pub driver: Option<String>,
}

impl Target {
    /// The device's host-absolute sysfs directory.
    pub fn sysfs_path(&self) -> PathBuf {
        match self {
            Target::Mdev(uuid) => PathBuf::from("/sys/bus/mdev/devices").join(uuid),
            Target::Pci(bdf) => PathBuf::from("/sys/bus/pci/devices").join(bdf),
        }
    }

    /// Finds the device under `sysfs_root` (`/` on a real host) and reads its IOMMU group and
    /// driver. A PCI function must be bound to vfio-pci; an mdev is bound to its parent's driver.
    pub fn resolve(&self, sysfs_root: &Path) -> Result<ResolvedTarget, TargetError> {
        let relative = self.sysfs_path();
        let path = sysfs_root.join(relative.strip_prefix("/").unwrap_or(&relative));
        if !path.is_dir() {
            return Err(TargetError::NotFound {
                target: self.clone(),
                path,
            });
        }
        let link = path.join("iommu_group");
        let points_at = std::fs::read_link(&link).map_err(|_| TargetError::NoIommuGroup {
            target: self.clone(),
            path: link.clone(),
        })?;
        let iommu_group = points_at
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.parse::<u32>().ok())
            .ok_or_else(|| TargetError::BadIommuGroupLink {
                target: self.clone(),
                link: link.clone(),
                points_at: points_at.clone(),
            })?;
        let driver = std::fs::read_link(path.join("driver"))
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()));
        if matches!(self, Target::Pci(_)) && driver.as_deref() != Some("vfio-pci") {
            return Err(TargetError::NotBoundToVfioPci {
                target: self.clone(),
                driver,
            });
        }
        Ok(ResolvedTarget {
            sysfs_path: path,
            iommu_group,
            driver,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_uuids_in_any_case_to_lower_case() {
        assert_eq!(
            "83B8F4F2-509F-382F-3C1E-E6BFE0FA1001"
                .parse::<Target>()
                .unwrap(),
            Target::Mdev("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001".into())
        );
    }

    #[test]
    fn parses_pci_addresses_with_and_without_domain() {
        assert_eq!(
            "0000:01:00.1".parse::<Target>().unwrap(),
            Target::Pci("0000:01:00.1".into())
        );
        assert_eq!(
            "3B:1F.7".parse::<Target>().unwrap(),
            Target::Pci("0000:3b:1f.7".into())
        );
    }

    #[test]
    fn refuses_malformed_targets_naming_the_text() {
        for bad in [
            "",
            "83b8f4f2509f382f3c1ee6bfe0fa1001",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa100",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001x",
            "0000:01:20.0",
            "0000:01:00.8",
            "0000:01:00",
            "00:01:00:0.1",
            "0000:1:00.0",
            "zz:00.0",
            "0000:01:00.1.2",
        ] {
            let err = bad.parse::<Target>().unwrap_err();
            assert!(
                err.to_string().contains(&format!("{bad:?}")),
                "{bad:?}: {err}"
            );
        }
    }

    fn fake_device(root: &Path, relative: &str, group: &str, driver: Option<&str>) {
        let dir = root.join(relative);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(
            format!("../../../kernel/iommu_groups/{group}"),
            dir.join("iommu_group"),
        )
        .unwrap();
        if let Some(driver) = driver {
            std::os::unix::fs::symlink(
                format!("../../../bus/pci/drivers/{driver}"),
                dir.join("driver"),
            )
            .unwrap();
        }
    }

    #[test]
    fn resolves_group_and_driver_under_a_root() {
        let root = tempfile::tempdir().unwrap();
        fake_device(
            root.path(),
            "sys/bus/pci/devices/0000:01:00.1",
            "12",
            Some("vfio-pci"),
        );
        let resolved = Target::Pci("0000:01:00.1".into())
            .resolve(root.path())
            .unwrap();
        assert_eq!(resolved.iommu_group, 12);
        assert_eq!(resolved.driver.as_deref(), Some("vfio-pci"));
        assert_eq!(
            resolved.sysfs_path,
            root.path().join("sys/bus/pci/devices/0000:01:00.1")
        );
    }

    #[test]
    fn a_vf_bound_elsewhere_is_refused_with_the_driver_name() {
        let root = tempfile::tempdir().unwrap();
        fake_device(
            root.path(),
            "sys/bus/pci/devices/0000:01:00.1",
            "12",
            Some("nvme"),
        );
        let err = Target::Pci("0000:01:00.1".into())
            .resolve(root.path())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "PCI device 0000:01:00.1 is bound to nvme, not to vfio-pci"
        );
    }

    #[test]
    fn missing_device_and_missing_group_are_named() {
        let root = tempfile::tempdir().unwrap();
        let uuid = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
        let err = Target::Mdev(uuid.into()).resolve(root.path()).unwrap_err();
        assert!(matches!(err, TargetError::NotFound { .. }));
        assert!(err.to_string().contains(uuid));

        std::fs::create_dir_all(root.path().join("sys/bus/mdev/devices").join(uuid)).unwrap();
        let err = Target::Mdev(uuid.into()).resolve(root.path()).unwrap_err();
        assert!(matches!(err, TargetError::NoIommuGroup { .. }), "{err}");
    }

    #[test]
    fn a_group_link_without_a_number_is_refused() {
        let root = tempfile::tempdir().unwrap();
        fake_device(
            root.path(),
            "sys/bus/mdev/devices/83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
            "x",
            None,
        );
        let err = Target::Mdev("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001".into())
            .resolve(root.path())
            .unwrap_err();
        assert!(
            matches!(err, TargetError::BadIommuGroupLink { .. }),
            "{err}"
        );
    }
}
