//! Who holds a VFIO device open. Removing an mdev or disabling VFs while a process holds the
//! VFIO device *blocks in the kernel*, so the engine looks for holders first and refuses.
//!
//! A holder is a process with an open file descriptor on the device's group node
//! (`/dev/vfio/<group>`) or its cdev (`/dev/vfio/devices/vfioX`), found by reading the
//! `/proc/<pid>/fd/*` links through [`HostFs`].

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::discovery::layout;
use crate::HostFs;

/// One process holding a device node open.
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

/// Finds every process holding one of `nodes` open. Processes that vanish while we look, or
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
        for fd in fds {
            let Ok(target) = host.read_link(&fd_dir.join(&fd)) else {
                continue;
            };
            if nodes.contains(&target) && !held.contains(&target) {
                held.push(target);
            }
        }
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

    #[test]
    fn finds_processes_with_the_group_node_open() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (pid, comm, target) in [
            (42, "qemu-system-x86\n", "/dev/vfio/7"),
            (43, "bash\n", "/dev/null"),
        ] {
            let fd_dir = root.join(format!("proc/{pid}/fd"));
            std::fs::create_dir_all(&fd_dir).unwrap();
            std::fs::write(root.join(format!("proc/{pid}/comm")), comm).unwrap();
            std::os::unix::fs::symlink(target, fd_dir.join("3")).unwrap();
        }
        std::fs::create_dir_all(root.join("proc/self")).unwrap();
        let host = RealFs::new(root);
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
}
