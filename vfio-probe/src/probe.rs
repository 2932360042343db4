//! The steps themselves, in the order a VMM takes them.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kvm_bindings::{kvm_create_device, kvm_device_type_KVM_DEV_TYPE_VFIO};
use kvm_ioctls::Kvm;
use vfio_bindings::bindings::vfio::{
    VFIO_GROUP_FLAGS_CONTAINER_SET, VFIO_GROUP_FLAGS_VIABLE, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_MMAP,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioDeviceFd, VfioError};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use crate::report::{error_chain, IrqSummary, ProbeReport, RegionSummary, Step, StepStatus};
use crate::target::Target;

/// Whether to use KVM for the kvm-vfio step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvmUse {
    /// Use `/dev/kvm` when it can create a VM; otherwise report the step as not run.
    #[default]
    Auto,
    /// Never use KVM (the kvm steps are not run).
    Never,
    /// KVM must work: its absence is a failure.
    Required,
}

/// How to probe.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Root under which sysfs paths are resolved (`/` on a real host). The `/dev/vfio` and
    /// `/dev/kvm` nodes are always the machine's own: vfio-ioctls opens them by fixed path.
    pub sysfs_root: PathBuf,
    /// Size of the guest-memory region mapped for DMA (a multiple of the page size).
    pub dma_map_size: usize,
    /// Whether to attach the group to a KVM VM.
    pub kvm: KvmUse,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            sysfs_root: PathBuf::from("/"),
            dma_map_size: 1 << 20,
            kvm: KvmUse::Auto,
        }
    }
}

/// Why a step failed, for the report's detail line.
#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error("no group file {} (is the vfio module loaded and the device bound to a VFIO driver?)", path.display())]
    GroupMissing { path: PathBuf },
    #[error("{} is held by another process (a running VMM?)", path.display())]
    GroupBusy { path: PathBuf },
    #[error("cannot open {}", path.display())]
    GroupOpen {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("VFIO_GROUP_GET_STATUS on {}", path.display())]
    GroupStatus {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "IOMMU group {group} is not viable: another device in it is not bound to a VFIO driver"
    )]
    GroupNotViable { group: u32 },
    #[error("IOMMU group {group} is already attached to a container")]
    GroupInUse { group: u32 },
    #[error("cannot create a kvm-vfio device on the VM")]
    KvmVfioDevice(#[source] kvm_ioctls::Error),
    #[error("cannot allocate {size} bytes of guest memory")]
    GuestMemory {
        size: usize,
        #[source]
        source: vm_memory::mmap::FromRangesError,
    },
    #[error("cannot find the host address of guest memory")]
    HostAddress(#[source] vm_memory::GuestMemoryError),
}

/// Runs every step on `target` and reports each one. Never panics on a missing or broken
/// device or host: each failure is a step with status `failed` and the reason.
pub fn probe(target: &Target, options: &ProbeOptions) -> ProbeReport {
    let mut report = ProbeReport::new(target.clone());

    let resolved = match target.resolve(&options.sysfs_root) {
        Ok(resolved) => {
            report.record(
                Step::Resolve,
                StepStatus::Ok,
                format!(
                    "{} in IOMMU group {}{}",
                    resolved.sysfs_path.display(),
                    resolved.iommu_group,
                    resolved
                        .driver
                        .as_deref()
                        .map(|d| format!(", driver {d}"))
                        .unwrap_or_default()
                ),
            );
            report.sysfs_path = Some(resolved.sysfs_path.clone());
            report.iommu_group = Some(resolved.iommu_group);
            resolved
        }
        Err(err) => {
            report.record(Step::Resolve, StepStatus::Failed, error_chain(&err));
            skip_rest(&mut report, Step::Resolve);
            return report;
        }
    };

    match check_group(resolved.iommu_group) {
        Ok(detail) => report.record(Step::Group, StepStatus::Ok, detail),
        Err(err) => {
            report.record(Step::Group, StepStatus::Failed, error_chain(&err));
            skip_rest(&mut report, Step::Group);
            return report;
        }
    }

    let kvm_device = open_kvm_vfio(options.kvm, &mut report);
    let kvm_attached = kvm_device.is_some();
    let device_handle = kvm_device.map(|fd| Arc::new(VfioDeviceFd::new_from_kvm(fd)));

    let container = match VfioContainer::new(device_handle) {
        Ok(container) => {
            report.record(
                Step::Container,
                StepStatus::Ok,
                "/dev/vfio/vfio: API version matches, type1v2 IOMMU supported",
            );
            Arc::new(container)
        }
        Err(err) => {
            report.record(Step::Container, StepStatus::Failed, err.to_string());
            skip_rest(&mut report, Step::Container);
            return report;
        }
    };

    let device = match VfioDevice::new(&resolved.sysfs_path, container.clone(), false) {
        Ok(device) => {
            report.record(
                Step::Device,
                StepStatus::Ok,
                format!(
                    "group {} set on the container, type1v2 IOMMU set, device fd open",
                    resolved.iommu_group
                ),
            );
            if kvm_attached {
                report.record(
                    Step::KvmVfio,
                    StepStatus::Ok,
                    format!(
                        "group {} added to the VM's kvm-vfio device",
                        resolved.iommu_group
                    ),
                );
            } else {
                report.record(
                    Step::KvmVfio,
                    StepStatus::NotRun,
                    "no VM (see the kvm step)",
                );
            }
            device
        }
        Err(err) => {
            // The kvm-vfio attach happens inside the device step; name it when that is what failed.
            let failed = match err {
                VfioError::SetDeviceAttr(_) => Step::KvmVfio,
                _ => Step::Device,
            };
            if failed == Step::KvmVfio {
                report.record(
                    Step::Device,
                    StepStatus::NotRun,
                    "the kvm-vfio attach failed first",
                );
            }
            report.record(failed, StepStatus::Failed, err.to_string());
            skip_rest(&mut report, failed);
            return report;
        }
    };

    match map_guest_memory(&container, options.dma_map_size) {
        Ok(detail) => report.record(Step::DmaMap, StepStatus::Ok, detail),
        Err(detail) => report.record(Step::DmaMap, StepStatus::Failed, detail),
    }

    read_regions(&device, &mut report);
    read_irqs(&device, &mut report);
    read_config_space(&device, &resolved.sysfs_path, target, &mut report);

    // Dropping the device detaches the group from the kvm-vfio device and the container.
    drop(device);
    report
}

const ALL_STEPS: [Step; 10] = [
    Step::Resolve,
    Step::Group,
    Step::Kvm,
    Step::Container,
    Step::Device,
    Step::KvmVfio,
    Step::DmaMap,
    Step::Regions,
    Step::Irqs,
    Step::ConfigSpace,
];

/// Records every step not yet in the report as not run because `failed` failed.
fn skip_rest(report: &mut ProbeReport, failed: Step) {
    for step in ALL_STEPS {
        if report.step(step).is_none() {
            report.record(step, StepStatus::NotRun, format!("needs the {failed} step"));
        }
    }
}

// _IO(VFIO_TYPE, VFIO_BASE + 3): vfio-bindings has the numbers but not the request code.
const VFIO_GROUP_GET_STATUS: libc::c_ulong = (59 << 8) | (100 + 3);

#[repr(C)]
struct VfioGroupStatus {
    argsz: u32,
    flags: u32,
}

/// Opens the group alone first, so that a busy or non-viable group gets its own clear message
/// instead of the container's generic one. The file is closed again before the real attach,
/// since a group can be open only once.
fn check_group(group: u32) -> Result<String, StepError> {
    let path = PathBuf::from(format!("/dev/vfio/{group}"));
    let file: File = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Err(StepError::GroupMissing { path })
        }
        Err(err) if err.raw_os_error() == Some(libc::EBUSY) => {
            return Err(StepError::GroupBusy { path })
        }
        Err(source) => return Err(StepError::GroupOpen { path, source }),
    };
    let mut status = VfioGroupStatus {
        argsz: std::mem::size_of::<VfioGroupStatus>() as u32,
        flags: 0,
    };
    // SAFETY: `file` is an open VFIO group; VFIO_GROUP_GET_STATUS writes at most `argsz` bytes
    // into `status`, which is a live, correctly laid out `struct vfio_group_status`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), VFIO_GROUP_GET_STATUS, &mut status) };
    if rc < 0 {
        return Err(StepError::GroupStatus {
            path,
            source: io::Error::last_os_error(),
        });
    }
    if status.flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
        return Err(StepError::GroupNotViable { group });
    }
    if status.flags & VFIO_GROUP_FLAGS_CONTAINER_SET != 0 {
        return Err(StepError::GroupInUse { group });
    }
    Ok(format!(
        "{} opened, viable, not in a container",
        path.display()
    ))
}

/// Creates a VM with a kvm-vfio device when KVM is wanted and usable; records the kvm step.
fn open_kvm_vfio(kvm_use: KvmUse, report: &mut ProbeReport) -> Option<kvm_ioctls::DeviceFd> {
    if kvm_use == KvmUse::Never {
        report.record(Step::Kvm, StepStatus::NotRun, "KVM not requested");
        return None;
    }
    let unusable = |report: &mut ProbeReport, reason: String| {
        let status = if kvm_use == KvmUse::Required {
            StepStatus::Failed
        } else {
            StepStatus::NotRun
        };
        report.record(Step::Kvm, status, reason);
        None
    };
    if !Path::new("/dev/kvm").exists() {
        return unusable(report, "no /dev/kvm on this host".to_owned());
    }
    let kvm = match Kvm::new() {
        Ok(kvm) => kvm,
        Err(err) => return unusable(report, format!("cannot open /dev/kvm: {err}")),
    };
    let vm = match kvm.create_vm() {
        Ok(vm) => vm,
        Err(err) => return unusable(report, format!("/dev/kvm cannot create a VM: {err}")),
    };
    let mut request = kvm_create_device {
        type_: kvm_device_type_KVM_DEV_TYPE_VFIO,
        fd: 0,
        flags: 0,
    };
    match vm.create_device(&mut request) {
        Ok(device) => {
            report.record(Step::Kvm, StepStatus::Ok, "VM and kvm-vfio device created");
            Some(device)
        }
        Err(err) => {
            report.record(
                Step::Kvm,
                StepStatus::Failed,
                error_chain(&StepError::KvmVfioDevice(err)),
            );
            None
        }
    }
}

fn map_guest_memory(container: &VfioContainer, size: usize) -> Result<String, String> {
    let memory = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), size)])
        .map_err(|source| error_chain(&StepError::GuestMemory { size, source }))?;
    let host = memory
        .get_host_address(GuestAddress(0))
        .map_err(|source| error_chain(&StepError::HostAddress(source)))?;
    let iova = 0;
    // SAFETY: `host` is the start of the `size`-byte anonymous mapping owned by `memory`, which
    // lives until after the unmap below (or forever if the unmap fails); no Rust reference to
    // that memory exists while the device may access it.
    if let Err(err) = unsafe { container.vfio_dma_map(iova, size, host) } {
        return Err(err.to_string());
    }
    match container.vfio_dma_unmap(iova, size) {
        Ok(()) => Ok(format!(
            "{size} bytes of guest memory mapped at IOVA {iova:#x} and unmapped"
        )),
        Err(err) => {
            // The device may still reach the memory: it must never be freed or reused.
            std::mem::forget(memory);
            Err(format!("mapped, but the unmap failed: {err}"))
        }
    }
}

const REGION_NAMES: [&str; VFIO_PCI_NUM_REGIONS as usize] = [
    "bar0", "bar1", "bar2", "bar3", "bar4", "bar5", "rom", "config", "vga",
];
const IRQ_NAMES: [&str; VFIO_PCI_NUM_IRQS as usize] = ["intx", "msi", "msix", "err", "req"];

fn read_regions(device: &VfioDevice, report: &mut ProbeReport) {
    let regions: Vec<RegionSummary> = (0..VFIO_PCI_NUM_REGIONS)
        .filter(|index| device.get_region_size(*index) > 0)
        .map(|index| {
            let flags = device.get_region_flags(index);
            RegionSummary {
                index,
                name: REGION_NAMES[index as usize],
                size: device.get_region_size(index),
                readable: flags & VFIO_REGION_INFO_FLAG_READ != 0,
                writable: flags & VFIO_REGION_INFO_FLAG_WRITE != 0,
                mmap: flags & VFIO_REGION_INFO_FLAG_MMAP != 0,
            }
        })
        .collect();
    let has_config = regions
        .iter()
        .any(|r| r.index == VFIO_PCI_CONFIG_REGION_INDEX);
    let detail = regions
        .iter()
        .map(|r| format!("{} {}", r.name, r.size))
        .collect::<Vec<_>>()
        .join(", ");
    if has_config {
        report.record(Step::Regions, StepStatus::Ok, detail);
    } else {
        report.record(
            Step::Regions,
            StepStatus::Failed,
            format!("no config space region (regions: {detail})"),
        );
    }
    report.device.regions = regions;
}

fn read_irqs(device: &VfioDevice, report: &mut ProbeReport) {
    let irqs: Vec<IrqSummary> = (0..VFIO_PCI_NUM_IRQS)
        .filter_map(|index| device.get_irq_info(index).map(|irq| (index, irq.count)))
        .filter(|(_, count)| *count > 0)
        .map(|(index, count)| IrqSummary {
            index,
            name: IRQ_NAMES[index as usize],
            count,
        })
        .collect();
    report.device.max_interrupts = device.max_interrupts();
    let detail = irqs
        .iter()
        .map(|irq| format!("{} {}", irq.name, irq.count))
        .collect::<Vec<_>>()
        .join(", ");
    report.record(
        Step::Irqs,
        StepStatus::Ok,
        if detail.is_empty() {
            "no interrupts".to_owned()
        } else {
            detail
        },
    );
    report.device.irqs = irqs;
}

fn read_config_space(
    device: &VfioDevice,
    sysfs_path: &Path,
    target: &Target,
    report: &mut ProbeReport,
) {
    // vfio-ioctls logs and leaves the buffer untouched when a read fails; all-ones is what
    // PCI returns for "no device" too, so it doubles as the failure marker.
    let mut ids = [0xffu8; 4];
    device.region_read(VFIO_PCI_CONFIG_REGION_INDEX, &mut ids, 0);
    let vendor = u16::from_le_bytes([ids[0], ids[1]]);
    let device_id = u16::from_le_bytes([ids[2], ids[3]]);
    report.device.vendor_id = Some(format!("{vendor:04x}"));
    report.device.device_id = Some(format!("{device_id:04x}"));
    if vendor == 0xffff {
        report.record(
            Step::ConfigSpace,
            StepStatus::Failed,
            "config space read failed or gave vendor ffff",
        );
        return;
    }
    // For a PCI function sysfs also knows the ids; vfio-pci must present the same ones (for a
    // VF it fills them in, since a VF's own registers read as ffff).
    if matches!(target, Target::Pci(_)) {
        let sysfs_id = |name: &str| {
            std::fs::read_to_string(sysfs_path.join(name))
                .ok()
                .and_then(|text| u16::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok())
        };
        if let (Some(sys_vendor), Some(sys_device)) = (sysfs_id("vendor"), sysfs_id("device")) {
            if (sys_vendor, sys_device) != (vendor, device_id) {
                report.record(
                    Step::ConfigSpace,
                    StepStatus::Failed,
                    format!(
                        "config space says {vendor:04x}:{device_id:04x}, sysfs says {sys_vendor:04x}:{sys_device:04x}"
                    ),
                );
                return;
            }
        }
    }
    report.record(
        Step::ConfigSpace,
        StepStatus::Ok,
        format!("vendor:device {vendor:04x}:{device_id:04x}"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options_under(root: &Path) -> ProbeOptions {
        ProbeOptions {
            sysfs_root: root.to_path_buf(),
            kvm: KvmUse::Never,
            ..ProbeOptions::default()
        }
    }

    #[test]
    fn a_missing_device_fails_the_resolve_step_and_runs_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let target = Target::Mdev("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001".into());
        let report = probe(&target, &options_under(root.path()));
        assert!(!report.ok);
        assert_eq!(report.steps.len(), ALL_STEPS.len());
        assert_eq!(report.steps[0].step, Step::Resolve);
        assert_eq!(report.steps[0].status, StepStatus::Failed);
        assert!(report.steps[0]
            .detail
            .contains("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"));
        for step in &report.steps[1..] {
            assert_eq!(step.status, StepStatus::NotRun, "{step:?}");
            assert_eq!(step.detail, "needs the resolve step");
        }
    }

    #[test]
    fn no_vfio_on_the_host_is_a_clean_group_failure() {
        // A device whose group has no /dev/vfio node: what a host without the vfio module
        // (like the development machine) looks like. The group number is far beyond any real one.
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sys/bus/pci/devices/0000:01:00.1");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(
            "../../../kernel/iommu_groups/987654",
            dir.join("iommu_group"),
        )
        .unwrap();
        std::os::unix::fs::symlink("../../../bus/pci/drivers/vfio-pci", dir.join("driver"))
            .unwrap();
        let report = probe(
            &Target::Pci("0000:01:00.1".into()),
            &options_under(root.path()),
        );
        assert!(!report.ok);
        assert_eq!(report.iommu_group, Some(987654));
        assert_eq!(report.step(Step::Resolve).unwrap().status, StepStatus::Ok);
        let group = report.step(Step::Group).unwrap();
        assert_eq!(group.status, StepStatus::Failed);
        assert!(
            group.detail.contains("/dev/vfio/987654"),
            "{}",
            group.detail
        );
        assert_eq!(
            report.step(Step::Container).unwrap().status,
            StepStatus::NotRun
        );
        assert_eq!(
            report.step(Step::ConfigSpace).unwrap().status,
            StepStatus::NotRun
        );
    }

    #[test]
    fn kvm_never_records_the_kvm_step_as_not_run() {
        let mut report = ProbeReport::new(Target::Pci("0000:01:00.1".into()));
        assert!(open_kvm_vfio(KvmUse::Never, &mut report).is_none());
        let kvm = report.step(Step::Kvm).unwrap();
        assert_eq!(kvm.status, StepStatus::NotRun);
        assert!(report.ok);
    }

    #[test]
    fn group_status_request_matches_the_kernel_encoding() {
        // _IO(';', 103) from include/uapi/linux/vfio.h.
        assert_eq!(VFIO_GROUP_GET_STATUS, 0x3b67);
    }
}
