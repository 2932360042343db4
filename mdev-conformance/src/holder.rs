//! Holding a VFIO device open like a VMM: the simulated QEMU and a real one made of the
//! VFIO group/container/device ioctls.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use mdev_host::HostFs;
use mdev_sim::{SimHolder, SimHost};

/// Something that holds a VFIO device open the way a VMM does, until dropped.
pub trait HeldDevice: Send + std::fmt::Debug {}

impl HeldDevice for SimHolder {}

/// Opens a device's VFIO group and the device itself (what QEMU does at start).
pub trait DeviceHolder: Send + Sync {
    /// Holds the device whose sysfs directory is `device` (`/sys/bus/mdev/devices/<uuid>`,
    /// `/sys/bus/pci/devices/<BDF>`). Errors carry the kernel's errno (EBUSY while another
    /// process holds the group).
    fn hold(&self, device: &Path) -> io::Result<Box<dyn HeldDevice>>;

    /// Opens just the device's group node, no container and no device fd (what libvirt's
    /// `nodedev-destroy` does to see that no VM uses an mdev). Same errors as [`Self::hold`].
    fn open_group_node(&self, device: &Path) -> io::Result<Box<dyn HeldDevice>>;
}

/// The IOMMU group number of the device whose sysfs directory is `device`.
fn group_of(fs: &dyn HostFs, device: &Path) -> io::Result<u32> {
    fs.read_link(&device.join("iommu_group"))?
        .file_name()
        .and_then(|n| n.to_str()?.parse().ok())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

/// [`DeviceHolder`] on the simulated host: a simulated `qemu-system-x86` process.
#[derive(Debug, Clone)]
pub struct SimDeviceHolder(pub SimHost);

impl DeviceHolder for SimDeviceHolder {
    fn hold(&self, device: &Path) -> io::Result<Box<dyn HeldDevice>> {
        Ok(Box::new(self.0.hold_device(device, "qemu-system-x86")?))
    }

    fn open_group_node(&self, device: &Path) -> io::Result<Box<dyn HeldDevice>> {
        let group = group_of(&self.0, device)?;
        Ok(Box::new(self.0.open_vfio_group_node(group, "libvirtd")?))
    }
}

/// [`DeviceHolder`] on a real host rooted at `root`: opens `/dev/vfio/vfio` and
/// `/dev/vfio/<group>`, attaches the group to the container with the type1 IOMMU, and gets
/// the device fd (`VFIO_GROUP_GET_DEVICE_FD`), which is what makes a `remove` block.
#[derive(Debug, Clone)]
pub struct VfioDeviceHolder {
    root: PathBuf,
}

impl VfioDeviceHolder {
    /// A holder for the host rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
}

/// The open descriptors of a real VFIO device; closing them releases it.
#[derive(Debug)]
pub struct VfioHeld {
    _device: std::os::fd::OwnedFd,
    _group: File,
    _container: File,
}

impl HeldDevice for VfioHeld {}

/// A real VFIO group node opened alone; closing it releases the group.
#[derive(Debug)]
pub struct VfioGroupOpen {
    _group: File,
}

impl HeldDevice for VfioGroupOpen {}

/// `_IO(';', nr)`: VFIO's ioctls carry no size or direction bits.
const fn vfio_io(nr: u64) -> u64 {
    ((b';' as u64) << 8) | nr
}
const VFIO_SET_IOMMU: u64 = vfio_io(102);
const VFIO_GROUP_SET_CONTAINER: u64 = vfio_io(104);
const VFIO_GROUP_GET_DEVICE_FD: u64 = vfio_io(106);
const VFIO_TYPE1_IOMMU: libc::c_ulong = 1;
const VFIO_TYPE1V2_IOMMU: libc::c_ulong = 3;

impl DeviceHolder for VfioDeviceHolder {
    fn hold(&self, device: &Path) -> io::Result<Box<dyn HeldDevice>> {
        use std::os::fd::{AsRawFd, FromRawFd};
        let fs = mdev_host::RealFs::new(&self.root);
        let group_link = fs.read_link(&device.join("iommu_group"))?;
        let group = group_link
            .file_name()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        let name = fs.resolve(device)?.canonicalize()?;
        let name = name
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?
            .to_string();
        let container = OpenOptions::new()
            .read(true)
            .write(true)
            .open(fs.resolve(Path::new("/dev/vfio/vfio"))?)?;
        let group_file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(fs.resolve(&Path::new("/dev/vfio").join(group))?)?;
        let container_fd: libc::c_int = container.as_raw_fd();
        // SAFETY: VFIO_GROUP_SET_CONTAINER reads one int (the container fd) through the
        // pointer, which points at a live local for the duration of the call.
        if unsafe {
            libc::ioctl(
                group_file.as_raw_fd(),
                VFIO_GROUP_SET_CONTAINER as libc::Ioctl,
                &container_fd,
            )
        } < 0
        {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: VFIO_SET_IOMMU takes the IOMMU type by value; no memory is passed.
        if unsafe {
            libc::ioctl(
                container.as_raw_fd(),
                VFIO_SET_IOMMU as libc::Ioctl,
                VFIO_TYPE1V2_IOMMU,
            )
        } < 0
        {
            // SAFETY: as above, with the older type1 IOMMU.
            if unsafe {
                libc::ioctl(
                    container.as_raw_fd(),
                    VFIO_SET_IOMMU as libc::Ioctl,
                    VFIO_TYPE1_IOMMU,
                )
            } < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        let cname =
            std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: VFIO_GROUP_GET_DEVICE_FD reads a NUL-terminated device name through the
        // pointer, which stays valid for the call; it returns a new fd or -1.
        let fd = unsafe {
            libc::ioctl(
                group_file.as_raw_fd(),
                VFIO_GROUP_GET_DEVICE_FD as libc::Ioctl,
                cname.as_ptr(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the ioctl succeeded, so `fd` is a new descriptor nobody else owns.
        let device_fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        Ok(Box::new(VfioHeld {
            _device: device_fd,
            _group: group_file,
            _container: container,
        }))
    }

    fn open_group_node(&self, device: &Path) -> io::Result<Box<dyn HeldDevice>> {
        let fs = mdev_host::RealFs::new(&self.root);
        let group = group_of(&fs, device)?;
        let group_file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(fs.resolve(&Path::new("/dev/vfio").join(group.to_string()))?)?;
        Ok(Box::new(VfioGroupOpen { _group: group_file }))
    }
}
