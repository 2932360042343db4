//! Who holds a VFIO device open. Removing an mdev or disabling VFs while a process holds the
//! VFIO device *blocks in the kernel*, so the engine looks for holders first and refuses.
//!
//! A holder is what the kernel waits for: a process with a VFIO *device* file descriptor.
//! `vfio_unregister_group_dev()` waits until every device fd is closed; an open group node
//! alone does not hold the device (libvirt's `nodedev-destroy` opens `/dev/vfio/<group>` to
//! see that no VM uses it and keeps it open while it runs `mdevctl stop`, and the kernel
//! completes that `remove`). A process counts as a holder when, read through `/proc/<pid>/fd/*`
//! with [`HostFs`]:
//! * it has the device's cdev (`/dev/vfio/devices/vfioX`) open: that fd *is* a device fd; or
//! * it has the device's group node (`/dev/vfio/<group>`) open *and* a device fd taken through
//!   a group (`anon_inode:[vfio-device]`). The link does not say which device such an fd is
//!   for, so a process holding a device of another group beside this group's node counts too:
//!   a refusal the caller can explain beats a `remove` that hangs.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::discovery::layout;
use crate::HostFs;

/// What `/proc/<pid>/fd/<n>` names for a device fd taken with `VFIO_GROUP_GET_DEVICE_FD`.
const GROUP_DEVICE_FD: &str = "anon_inode:[vfio-device]";

/// One process holding a device open through a device node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Its pid.
    pub pid: u32,
    /// Its `comm` (e.g. `qemu-system-x86`), or `?` when it could not be read.
    pub command: String,
    /// The device node it holds.
    pub node: PathBuf,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pid {} ({}) holds {}",
            self.pid,
            self.command,
            self.node.display()
        )
    }
}

/// The device nodes through which a device can be held.
pub fn device_nodes(iommu_group: Option<u32>, vfio_device: Option<&str>) -> Vec<PathBuf> {
    let mut nodes = Vec::new();
    if let Some(group) = iommu_group {
        nodes.push(layout::vfio_group_node(group));
    }
    if let Some(name) = vfio_device {
        nodes.push(layout::vfio_device_node(name));
    }
    nodes
}

/// Finds every process holding the device behind `nodes` (from [`device_nodes`]): the cdev
/// open, or the group node open beside a device fd (see the module header). Processes that vanish while we look, or
/// whose fds we may not read, are skipped: they cannot be told apart from non-holders, and a
/// scan must not fail because some unrelated process exited.
pub fn find_holders(host: &dyn HostFs, nodes: &[PathBuf]) -> Vec<Holder> {
    if nodes.is_empty() {
        return Vec::new();
    }
    let proc_dir = Path::new(layout::PROC);
    let Ok(entries) = host.list(proc_dir) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .iter()
        .filter_map(|name| name.to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let mut holders = Vec::new();
    for pid in pids {
        let fd_dir = proc_dir.join(pid.to_string()).join("fd");
        let Ok(fds) = host.list(&fd_dir) else {
            continue;
        };
        let mut held: Vec<PathBuf> = Vec::new();
        let mut has_group_device_fd = false;
        for fd in fds {
            let Ok(target) = host.read_link(&fd_dir.join(&fd)) else {
                continue;
            };
            if target.as_os_str() == GROUP_DEVICE_FD {
                has_group_device_fd = true;
            } else if nodes.contains(&target) && !held.contains(&target) {
                held.push(target);
            }
        }
        // A group node without a device fd beside it holds nothing the kernel waits for.
        held.retain(|node| has_group_device_fd || !is_group_node(node));
        if held.is_empty() {
            continue;
        }
        let command = host
            .read(&proc_dir.join(pid.to_string()).join("comm"))
            .map(|comm| comm.trim_end().to_owned())
            .unwrap_or_else(|_| "?".to_owned());
        holders.extend(held.into_iter().map(|node| Holder {
            pid,
            command: command.clone(),
            node,
        }));
    }
    holders
}

/// `/dev/vfio/<group>`, as opposed to a cdev under `/dev/vfio/devices/`.
fn is_group_node(node: &Path) -> bool {
    node.parent() == Some(Path::new(layout::DEV_VFIO))
}

/// Formats holders for an error message: `pid 42 (qemu) holds /dev/vfio/7; ...`.
pub fn describe(holders: &[Holder]) -> String {
    holders
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RealFs;

    /// A fake `/proc` under `root`: each process with its `comm` and fd link targets.
    fn fake_proc(root: &Path, processes: &[(u32, &str, &[&str])]) {
        for (pid, comm, targets) in processes {
            let fd_dir = root.join(format!("proc/{pid}/fd"));
            std::fs::create_dir_all(&fd_dir).unwrap();
            std::fs::write(root.join(format!("proc/{pid}/comm")), format!("{comm}\n")).unwrap();
            for (fd, target) in targets.iter().enumerate() {
                std::os::unix::fs::symlink(target, fd_dir.join((fd + 3).to_string())).unwrap();
            }
        }
        std::fs::create_dir_all(root.join("proc/self")).unwrap();
    }

    #[test]
    fn a_process_with_the_group_node_and_a_device_fd_open_holds_the_device() {
        let dir = tempfile::tempdir().unwrap();
        fake_proc(
            dir.path(),
            &[
                (
                    42,
                    "qemu-system-x86",
                    &["/dev/vfio/vfio", "/dev/vfio/7", GROUP_DEVICE_FD],
                ),
                (43, "bash", &["/dev/null"]),
            ],
        );
        let host = RealFs::new(dir.path());
        let holders = find_holders(&host, &device_nodes(Some(7), Some("vfio0")));
        assert_eq!(
            holders,
            vec![Holder {
                pid: 42,
                command: "qemu-system-x86".into(),
                node: "/dev/vfio/7".into()
            }]
        );
        assert_eq!(
            describe(&holders),
            "pid 42 (qemu-system-x86) holds /dev/vfio/7"
        );
        assert!(find_holders(&host, &device_nodes(Some(8), None)).is_empty());
    }

    #[test]
    fn a_process_with_only_the_group_node_open_is_no_holder() {
        // What libvirt's nodedev-destroy does while it runs `mdevctl stop`: the kernel does
        // not wait for it, so neither may the service refuse because of it.
        let dir = tempfile::tempdir().unwrap();
        fake_proc(
            dir.path(),
            &[(40, "libvirtd", &["/dev/null", "/dev/vfio/7"])],
        );
        let host = RealFs::new(dir.path());
        assert_eq!(
            find_holders(&host, &device_nodes(Some(7), Some("vfio0"))),
            vec![]
        );
    }

    #[test]
    fn a_process_with_the_cdev_open_holds_the_device_without_a_group_device_fd() {
        let dir = tempfile::tempdir().unwrap();
        fake_proc(
            dir.path(),
            &[(
                44,
                "cloud-hypervisor",
                &["/dev/iommu", "/dev/vfio/devices/vfio0"],
            )],
        );
        let host = RealFs::new(dir.path());
        assert_eq!(
            find_holders(&host, &device_nodes(Some(7), Some("vfio0"))),
            vec![Holder {
                pid: 44,
                command: "cloud-hypervisor".into(),
                node: "/dev/vfio/devices/vfio0".into()
            }]
        );
    }
}
