//! The simulated host: a kernel double that answers the [`HostFs`] file operations with the
//! files, formats, link targets and errno values of a real Linux 6.1 host with VFIO mediated
//! devices and SR-IOV.
//!
//! It is a state machine, not canned answers: writing a UUID to a type's `create` makes an
//! mdev with its own IOMMU group and `/dev/vfio/N`; capacity is accounted per parent the way
//! each driver does it; a `remove` or `sriov_numvfs=0` while a process holds the VFIO device
//! *blocks* until the holder lets go, as `vfio_unregister_group_dev()` does. Around that sit
//! the things a test needs and a real host does by other means: module load/unload, reboot,
//! holder processes, uevents, and fault injection.
//!
//! ```
//! use mdev_host::HostFs;
//! use mdev_sim::SimHost;
//! use std::path::Path;
//!
//! let host = SimHost::builtin("samples").unwrap();
//! let create = Path::new("/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/create");
//! host.write(create, b"83b8f4f2-509f-382f-3c1e-e6bfe0fa1001\n").unwrap();
//! assert!(host.exists(Path::new("/sys/bus/mdev/devices/83b8f4f2-509f-382f-3c1e-e6bfe0fa1001/iommu_group")));
//! ```
//!
//! The topology format, the modelled behaviour and its sources are in `docs/simulated-host.md`.

mod events;
mod faults;
pub mod host_events;
mod kparse;
mod tools;
mod topology;
mod tree;
mod world;

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

pub use events::{SimEvent, UeventAction};
pub use faults::{Fault, FaultAction, FaultId};
pub use tools::SRIOV_MANAGE;
pub use topology::{
    errno_name, CapacityKind, MdevParentSpec, MdevTypeSpec, NvidiaVgpuTypeSpec, PciAddress,
    PciDeviceSpec, PciDriverSpec, SriovSpec, Topology, TopologyError,
};

use mdev_host::HostFs;
use tree::Node;
use world::{Store, World};

/// Errors of the simulated host's own controls (modules, holders); file operations return
/// [`io::Error`]s with the kernel's errno instead.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// `modprobe`/`rmmod` of a module the topology does not have, or `rmmod` of one not loaded.
    #[error("module {0:?} is not present on the simulated host or not loaded")]
    NoSuchModule(String),
    /// `rmmod` while a device it provides is held open.
    #[error("module {0:?} is in use: a process holds one of its VFIO devices")]
    ModuleInUse(String),
}

#[derive(Debug)]
struct Shared {
    world: Mutex<World>,
    changed: Condvar,
}

/// A simulated host. Cheap to clone; clones share the same machine. Thread-safe.
#[derive(Debug, Clone)]
pub struct SimHost {
    shared: Arc<Shared>,
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn path_text(path: &Path) -> io::Result<&str> {
    path.to_str().ok_or_else(|| errno(libc::ENOENT))
}

impl SimHost {
    /// Boots a host from a checked topology.
    pub fn new(topology: Topology) -> Self {
        let world = World::boot(topology, 0);
        Self {
            shared: Arc::new(Shared {
                world: Mutex::new(world),
                changed: Condvar::new(),
            }),
        }
    }

    /// Boots a host from topology TOML text.
    pub fn from_topology_str(text: &str) -> Result<Self, TopologyError> {
        Ok(Self::new(Topology::from_toml(text)?))
    }

    /// Boots one of the embedded topologies: `default` (the product's demo host: NVIDIA T4
    /// with mdev types, H200 with SR-IOV vGPU, AMD MxGPU, Intel GVT-g), `samples` (the VM
    /// tier's guest: mtty, mbochs, mdpy, QEMU nvme with SR-IOV), `scale` (8 parents for
    /// benchmarks) or `ampere` (NVIDIA A2 with SR-IOV and mdev types on each VF).
    pub fn builtin(name: &str) -> Result<Self, TopologyError> {
        let text = topology::builtin_text(name)
            .ok_or_else(|| TopologyError::UnknownBuiltin(name.to_string()))?;
        Self::from_topology_str(text)
    }

    /// The TOML text of an embedded topology.
    pub fn builtin_topology_text(name: &str) -> Option<&'static str> {
        topology::builtin_text(name)
    }

    fn lock(&self) -> MutexGuard<'_, World> {
        // A panic in another test thread must not cascade: the world is still consistent
        // between operations, because every operation finishes under one lock.
        self.shared
            .world
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, World>) -> MutexGuard<'a, World> {
        self.shared
            .changed
            .wait(guard)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The topology the host booted from.
    pub fn topology(&self) -> Topology {
        self.lock().topology.clone()
    }

    /// Receives every uevent from now on, in kernel order.
    pub fn subscribe(&self) -> Receiver<SimEvent> {
        let (sender, receiver) = channel();
        self.lock().subscribers.push(sender);
        receiver
    }

    /// `modprobe <module>`: binds its PCI driver to matching devices and registers its mdev
    /// parents (uevent `change` with `MDEV_STATE=registered`).
    pub fn load_module(&self, module: &str) -> Result<(), SimError> {
        let result = self.lock().load_module(module);
        self.shared.changed.notify_all();
        result.map_err(|_| SimError::NoSuchModule(module.to_string()))
    }

    /// `rmmod <module>`: its mdev parents unregister and all their instances vanish; its PCI
    /// driver unbinds (disabling VFs). Refused while a device it provides is held open.
    pub fn unload_module(&self, module: &str) -> Result<(), SimError> {
        let result = self.lock().unload_module(module);
        self.shared.changed.notify_all();
        result.map_err(|code| {
            if code == libc::EAGAIN {
                SimError::ModuleInUse(module.to_string())
            } else {
                SimError::NoSuchModule(module.to_string())
            }
        })
    }

    /// Whether a module is loaded (`None` if the host has no such module).
    pub fn module_loaded(&self, module: &str) -> Option<bool> {
        self.lock().module_loaded(module)
    }

    /// Reboots: every mdev, VF and holder process is gone; devices, drivers and parents come
    /// back as the topology says. Subscribers and injected faults survive. Writes blocked
    /// across the reboot fail with ENODEV.
    pub fn reboot(&self) {
        let mut world = self.lock();
        let mut fresh = World::boot(world.topology.clone(), world.boot + 1);
        fresh.subscribers = std::mem::take(&mut world.subscribers);
        fresh.faults = std::mem::take(&mut world.faults);
        fresh.next_fault = world.next_fault;
        fresh.released_faults = std::mem::take(&mut world.released_faults);
        fresh.blocked = std::mem::take(&mut world.blocked);
        *world = fresh;
        drop(world);
        self.shared.changed.notify_all();
    }

    /// Adds a fault rule; rules are tried in the order they were added.
    pub fn inject_fault(&self, fault: Fault) -> FaultId {
        let mut world = self.lock();
        let id = world.next_fault;
        world.next_fault += 1;
        world.faults.push((id, fault));
        FaultId(id)
    }

    /// Removes a fault rule and lets every write blocked on it proceed.
    pub fn release_fault(&self, id: FaultId) {
        let mut world = self.lock();
        world.faults.retain(|(rule, _)| *rule != id.0);
        world.released_faults.insert(id.0);
        drop(world);
        self.shared.changed.notify_all();
    }

    /// Removes every fault rule and releases every blocked write.
    pub fn clear_faults(&self) {
        let mut world = self.lock();
        let ids: Vec<u64> = world.faults.iter().map(|(id, _)| *id).collect();
        world.released_faults.extend(ids);
        world.faults.clear();
        drop(world);
        self.shared.changed.notify_all();
    }

    /// Paths of the writes that are blocked right now (by a holder or a blocking fault).
    pub fn blocked_writes(&self) -> Vec<PathBuf> {
        self.lock().blocked.iter().map(PathBuf::from).collect()
    }

    /// Opens `/dev/vfio/<group>` and a device in it as a new simulated process named `comm`
    /// (what QEMU does). The process shows in `/proc/<pid>/{comm,cmdline,fd/}`. ENOENT
    /// without the node, EBUSY while another process holds it.
    pub fn open_vfio_group(&self, group: u32, comm: &str) -> io::Result<SimHolder> {
        self.start_group_opener(group, comm, true)
    }

    /// Opens just `/dev/vfio/<group>` as a new simulated process, no device fd (what libvirt's
    /// `nodedev-destroy` does to see that no VM uses an mdev): a second open is EBUSY, but a
    /// `remove` of the device completes, as on the real kernel.
    pub fn open_vfio_group_node(&self, group: u32, comm: &str) -> io::Result<SimHolder> {
        self.start_group_opener(group, comm, false)
    }

    fn start_group_opener(&self, group: u32, comm: &str, device_fd: bool) -> io::Result<SimHolder> {
        let mut world = self.lock();
        let pid = world.open_group(group, comm, device_fd).map_err(errno)?;
        Ok(SimHolder {
            host: self.clone(),
            pid,
            group,
            boot: world.boot,
            released: false,
        })
    }

    /// Holds the VFIO device at a sysfs device path (`/sys/bus/mdev/devices/<uuid>` or
    /// `/sys/bus/pci/devices/<BDF>`), finding its group through the `iommu_group` link.
    pub fn hold_device(&self, device: &Path, comm: &str) -> io::Result<SimHolder> {
        let group = {
            let world = self.lock();
            let dir = world
                .tree
                .resolve(path_text(device)?, true)
                .map_err(errno)?;
            world
                .group_of_dir(&dir)
                .ok_or_else(|| errno(libc::ENODEV))?
        };
        self.open_vfio_group(group, comm)
    }

    /// UUIDs of the mdevs that exist now.
    pub fn mdev_uuids(&self) -> Vec<String> {
        self.lock().mdev_uuids()
    }

    /// How many VFs exist now.
    pub fn vf_count(&self) -> usize {
        self.lock().vf_count()
    }

    /// Every entry of the namespace, sorted: `path/` for directories, `path -> target` for
    /// links, `path` for files. The golden-file form of the host.
    pub fn tree_listing(&self) -> Vec<String> {
        self.lock().tree.listing()
    }

    /// Every file with what reading it gives (text, or the errno name). For tests of formats.
    pub fn read_all_files(&self) -> Vec<(String, Result<String, String>)> {
        let world = self.lock();
        world
            .tree
            .file_paths()
            .into_iter()
            .map(|path| {
                let value = match world.tree.get(&path) {
                    Some(Node::File(attr)) => world.read_attr(attr).map_err(errno_name),
                    _ => Err(errno_name(libc::ENOENT)),
                };
                (path, value)
            })
            .collect()
    }

    /// Resolves `path` and, when the attribute takes a device lock that a blocked operation
    /// holds (reading `sriov_numvfs` while VFs are being disabled), waits like the kernel's
    /// `device_lock()`. Returns the world and the canonical path.
    fn wait_for_device_lock<'a>(
        &self,
        mut world: MutexGuard<'a, World>,
        path: &str,
        data: Option<&[u8]>,
    ) -> io::Result<(MutexGuard<'a, World>, String)> {
        let boot = world.boot;
        let mut waiting = false;
        let result = loop {
            let canonical = match world.tree.resolve(path, true) {
                Ok(canonical) => canonical,
                Err(code) => break Err(errno(code)),
            };
            // With no device lock held (the usual case) there is nothing to wait for, and the
            // attribute's lookup, a second walk of the tree on every read, can be skipped.
            let locked = !world.device_locks.is_empty()
                && world
                    .attr_at(&canonical)
                    .and_then(|attr| world.lock_target(&attr, data))
                    .is_some_and(|device| world.device_locks.contains(&device));
            if !locked {
                break Ok(canonical);
            }
            if world.boot != boot {
                break Err(errno(libc::ENODEV));
            }
            if !waiting {
                waiting = true;
                world.blocked.push(path.to_string());
            }
            world = self.wait(world);
        };
        if waiting {
            if let Some(position) = world.blocked.iter().position(|p| p == path) {
                world.blocked.remove(position);
            }
        }
        result.map(|canonical| (world, canonical))
    }

    /// Applies the fault rules to a write. Returns with the world lock released.
    fn apply_faults(&self, path: &str) -> io::Result<()> {
        let mut world = self.lock();
        let canonical = world.tree.resolve(path, true).ok();
        let matched = world.faults.iter().position(|(_, rule)| {
            faults::glob_match(&rule.pattern, path)
                || canonical
                    .as_deref()
                    .is_some_and(|c| faults::glob_match(&rule.pattern, c))
        });
        let Some(index) = matched else { return Ok(()) };
        let (id, action) = {
            let (id, rule) = &mut world.faults[index];
            let id = *id;
            let action = rule.action;
            if let Some(remaining) = rule.remaining.as_mut() {
                *remaining = remaining.saturating_sub(1);
            }
            (id, action)
        };
        if world.faults[index].1.remaining == Some(0) && action != FaultAction::Block {
            world.faults.remove(index);
        }
        match action {
            FaultAction::Fail(code) => Err(errno(code)),
            FaultAction::Delay(delay) => {
                drop(world);
                std::thread::sleep(delay);
                Ok(())
            }
            FaultAction::Block => {
                if world
                    .faults
                    .get(index)
                    .is_some_and(|(_, rule)| rule.remaining == Some(0))
                {
                    world.faults.remove(index);
                }
                let boot = world.boot;
                world.blocked.push(path.to_string());
                while !world.released_faults.contains(&id) && world.boot == boot {
                    world = self.wait(world);
                }
                if let Some(position) = world.blocked.iter().position(|p| p == path) {
                    world.blocked.remove(position);
                }
                if world.boot != boot {
                    return Err(errno(libc::ENODEV));
                }
                Ok(())
            }
        }
    }
}

impl HostFs for SimHost {
    fn read(&self, path: &Path) -> io::Result<String> {
        let text = path_text(path)?;
        let world = self.lock();
        let (world, canonical) = self.wait_for_device_lock(world, text, None)?;
        match world.tree.get(&canonical) {
            Some(Node::File(attr)) => world.read_attr(attr).map_err(errno),
            Some(Node::Dir(_)) => Err(errno(libc::EISDIR)),
            _ => Err(errno(libc::ENOENT)),
        }
    }

    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let text = path_text(path)?;
        self.apply_faults(text)?;
        let world = self.lock();
        let (mut world, canonical) = self.wait_for_device_lock(world, text, Some(data))?;
        let boot = world.boot;
        let mut outcome = world.store(&canonical, data);
        let mut taken: Vec<String> = Vec::new();
        let result = loop {
            match outcome {
                Store::Done(result) => break result.map_err(errno),
                Store::WaitThen {
                    groups,
                    locks,
                    then,
                } => {
                    for lock in locks {
                        if world.device_locks.insert(lock.clone()) {
                            taken.push(lock);
                        }
                    }
                    world.blocked.push(text.to_string());
                    while world.boot == boot && groups.iter().any(|g| world.device_held(*g)) {
                        world = self.wait(world);
                    }
                    if let Some(position) = world.blocked.iter().position(|p| p == text) {
                        world.blocked.remove(position);
                    }
                    if world.boot != boot {
                        break Err(errno(libc::ENODEV));
                    }
                    outcome = world.resume(&then);
                }
            }
        };
        if world.boot == boot {
            for lock in &taken {
                world.device_locks.remove(lock);
            }
        }
        drop(world);
        self.shared.changed.notify_all();
        result
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let world = self.lock();
        let canonical = world.tree.resolve(path_text(dir)?, true).map_err(errno)?;
        match world.tree.get(&canonical) {
            Some(Node::Dir(children)) => Ok(children.iter().map(OsString::from).collect()),
            _ => Err(errno(libc::ENOTDIR)),
        }
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        let world = self.lock();
        let canonical = world.tree.resolve(path_text(path)?, false).map_err(errno)?;
        match world.tree.get(&canonical) {
            Some(Node::Link(target)) => Ok(PathBuf::from(target)),
            _ => Err(errno(libc::EINVAL)),
        }
    }

    fn exists(&self, path: &Path) -> bool {
        let Ok(text) = path_text(path) else {
            return false;
        };
        let world = self.lock();
        if world.tree.resolve(text, true).is_ok() {
            return true;
        }
        // A descriptor of an anonymous inode (the VFIO device fd) is a "magic" link: stat()
        // through /proc/<pid>/fd/<n> succeeds although the target text is no path.
        world
            .tree
            .resolve(text, false)
            .ok()
            .and_then(|c| match world.tree.get(&c) {
                Some(Node::Link(target)) => Some(target.starts_with("anon_inode:")),
                _ => None,
            })
            .unwrap_or(false)
    }

    fn is_dir(&self, path: &Path) -> bool {
        let Ok(text) = path_text(path) else {
            return false;
        };
        let world = self.lock();
        world
            .tree
            .resolve(text, true)
            .is_ok_and(|c| matches!(world.tree.get(&c), Some(Node::Dir(_))))
    }

    fn commands(&self) -> &dyn mdev_host::HostCommands {
        self
    }
}

/// A simulated process holding a VFIO group and device open. Dropping it (or
/// [`SimHolder::release`]) closes the descriptors and ends the process, which un-blocks any
/// `remove` or `sriov_numvfs=0` waiting for it.
#[derive(Debug)]
pub struct SimHolder {
    host: SimHost,
    pid: u32,
    group: u32,
    boot: u64,
    released: bool,
}

impl SimHolder {
    /// The simulated process id (`/proc/<pid>`).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The IOMMU group held.
    pub fn group(&self) -> u32 {
        self.group
    }

    /// Closes the descriptors now.
    pub fn release(mut self) {
        self.close();
    }

    fn close(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        let mut world = self.host.lock();
        if world.boot == self.boot {
            world.close_process(self.pid);
        }
        drop(world);
        self.host.shared.changed.notify_all();
    }
}

impl Drop for SimHolder {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tools_tests;
