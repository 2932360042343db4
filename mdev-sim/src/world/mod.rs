//! The kernel double's state machine: modules, PCI functions and drivers, SR-IOV, mdev
//! parents and instances, IOMMU groups, VFIO device nodes and the processes holding them.
//! Every change updates the file tree and emits the uevents the kernel would.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::Sender;

mod gim;
mod mdev;
mod modules;
mod nvidia;
mod nvidia_smi;
mod pci;

use super::events::{SimEvent, UeventAction};
use super::faults::Fault;
use super::kparse::{kstrtobool, kstrtoul, parse_create_uuid, sysfs_streq};
use super::topology::{
    CapacityKind, MdevParentSpec, PciAddress, PciDriverSpec, SriovSpec, Topology,
};
use super::tree::{join, Node, Tree};

/// How an attribute file behaves.
#[derive(Debug, Clone)]
pub(crate) enum Attr {
    /// Read-only constant text.
    Const(String),
    /// Read-write free text (vendor parameters): a write replaces it.
    Stored(String),
    /// `mdev_supported_types/<type>/create` (write-only).
    Create { parent: String, type_id: String },
    /// `mdev_supported_types/<type>/available_instances`.
    Available { parent: String, type_id: String },
    /// `<mdev>/remove` (write-only).
    Remove { uuid: String },
    /// `<pci>/driver_override`.
    DriverOverride { bdf: String },
    /// `<pf>/sriov_numvfs`.
    SriovNumvfs { bdf: String },
    /// `<pf>/sriov_drivers_autoprobe`.
    SriovAutoprobe { bdf: String },
    /// `/sys/bus/pci/drivers_probe` (write-only).
    DriversProbe,
    /// `/sys/bus/pci/drivers/<driver>/bind` (write-only).
    Bind { driver: String },
    /// `/sys/bus/pci/drivers/<driver>/unbind` (write-only).
    Unbind { driver: String },
    /// `<vf>/nvidia/creatable_vgpu_types`.
    NvCreatable { bdf: String },
    /// `<vf>/nvidia/current_vgpu_type`.
    NvCurrent { bdf: String },
    /// `/dev/vfio/<N>`.
    VfioGroup { group: u32 },
    /// `/dev/vfio/vfio`.
    VfioContainer,
    /// `/dev/null`: reads nothing, swallows writes.
    Null,
    /// `/sys/kernel/debug/gim/<pf>/asymmetric_timeslice` (write-only): VF index → µs.
    GimTimeslice {
        pf: String,
        slices: BTreeMap<u32, u32>,
    },
}

/// The result of a store that may have to wait for a holder, like the kernel's
/// `vfio_unregister_group_dev()`.
#[derive(Debug)]
pub(crate) enum Store {
    Done(Result<(), i32>),
    /// Wait until none of these groups is held, then resume the operation. Meanwhile the
    /// named devices stay locked (`device_lock()`): attributes that take the lock block.
    WaitThen {
        groups: Vec<u32>,
        locks: Vec<String>,
        then: Deferred,
    },
}

/// The second half of an operation that waited for holders.
#[derive(Debug, Clone)]
pub(crate) enum Deferred {
    RemoveMdev(String),
    DisableVfs(String),
    Unbind(String),
}

#[derive(Debug)]
struct Parent {
    spec: MdevParentSpec,
    dir: String,
}

#[derive(Debug)]
struct Mdev {
    parent: String,
    type_id: String,
    dir: String,
    group: u32,
    vfio_index: u32,
}

#[derive(Debug)]
struct Sriov {
    spec: SriovSpec,
    numvfs: u16,
    autoprobe: bool,
    vfs: Vec<String>,
}

#[derive(Debug)]
struct Pci {
    address: PciAddress,
    dir: String,
    group: u32,
    native_driver: Option<String>,
    driver: Option<String>,
    driver_override: Option<String>,
    sriov: Option<Sriov>,
    physfn: Option<String>,
    vfio_index: Option<u32>,
    nvidia_current: u32,
    /// vendor, device, subsystem vendor, subsystem device, class (for uevent properties).
    ids: (u16, u16, u16, u16, u32),
}

#[derive(Debug, Default)]
struct Group {
    /// Canonical sysfs directories of the member devices.
    members: BTreeSet<String>,
    holder: Option<u32>,
    node: bool,
}

#[derive(Debug)]
struct Process {
    group: u32,
    /// It took a device fd from the group (`VFIO_GROUP_GET_DEVICE_FD`), which the kernel's
    /// device removal waits for; a process with just the group node open holds nothing.
    device_fd: bool,
}

/// The whole simulated machine.
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) topology: Topology,
    pub(crate) tree: Tree<Attr>,
    modules: BTreeMap<String, bool>,
    drivers: BTreeMap<String, PciDriverSpec>,
    parents: BTreeMap<String, Parent>,
    mdevs: BTreeMap<String, Mdev>,
    /// The mdevs by parent: UUID → type id (capacity is computed per parent on every create
    /// and every read of `available_instances`; this keeps it from scanning every mdev).
    mdevs_by_parent: BTreeMap<String, BTreeMap<String, String>>,
    pci: BTreeMap<String, Pci>,
    groups: BTreeMap<u32, Group>,
    /// Every group id from the first visible one up to this one is taken: allocation searches
    /// from here (a scan from the start made 4,096 creates quadratic).
    groups_taken_below: u32,
    vfio_indexes: BTreeSet<u32>,
    /// Every VFIO device index below this one is taken (as `groups_taken_below`).
    vfio_taken_below: u32,
    processes: BTreeMap<u32, Process>,
    next_pid: u32,
    /// Incremented by every reboot, so writers blocked across one learn the device is gone.
    pub(crate) boot: u64,
    pub(crate) subscribers: Vec<Sender<SimEvent>>,
    pub(crate) faults: Vec<(u64, Fault)>,
    pub(crate) next_fault: u64,
    /// Paths of writes currently blocked (by a holder or an injected fault).
    pub(crate) blocked: Vec<String>,
    /// Blocking faults that were released.
    pub(crate) released_faults: BTreeSet<u64>,
    /// Devices whose `device_lock()` a blocked operation holds.
    pub(crate) device_locks: BTreeSet<String>,
    /// Set once boot is done; boot itself emits no uevents (nobody listens yet).
    booted: bool,
}

const SYS_PCI_DEVICES: &str = "/sys/bus/pci/devices";
const SYS_PCI_DRIVERS: &str = "/sys/bus/pci/drivers";
const SYS_MDEV_DEVICES: &str = "/sys/bus/mdev/devices";
const SYS_MDEV_DRIVERS: &str = "/sys/bus/mdev/drivers";
const SYS_MDEV_BUS: &str = "/sys/class/mdev_bus";
const SYS_GROUPS: &str = "/sys/kernel/iommu_groups";
/// First pid handed to simulated holder processes.
const FIRST_PID: u32 = 4000;

/// The homogeneous group of a type (itself unless the topology groups types).
fn homogeneous_group(spec: &MdevParentSpec, type_id: &str) -> Option<String> {
    spec.types
        .iter()
        .find(|t| t.id == type_id)
        .map(|t| t.homogeneous_group.clone().unwrap_or_else(|| t.id.clone()))
}

fn devpath(dir: &str) -> String {
    dir.strip_prefix("/sys").unwrap_or(dir).to_string()
}

impl World {
    /// Boots a machine from a topology: every device present, loaded drivers bound, parents
    /// registered. No events (nobody listens before boot).
    pub(crate) fn boot(topology: Topology, boot: u64) -> Self {
        let mut world = World {
            topology: topology.clone(),
            tree: Tree::new(),
            modules: BTreeMap::new(),
            drivers: BTreeMap::new(),
            parents: BTreeMap::new(),
            mdevs: BTreeMap::new(),
            mdevs_by_parent: BTreeMap::new(),
            pci: BTreeMap::new(),
            groups: BTreeMap::new(),
            groups_taken_below: 0,
            vfio_indexes: BTreeSet::new(),
            vfio_taken_below: 0,
            processes: BTreeMap::new(),
            next_pid: FIRST_PID,
            boot,
            subscribers: Vec::new(),
            faults: Vec::new(),
            next_fault: 0,
            blocked: Vec::new(),
            released_faults: BTreeSet::new(),
            device_locks: BTreeSet::new(),
            booted: false,
        };
        for dir in [
            SYS_MDEV_BUS,
            SYS_MDEV_DEVICES,
            SYS_MDEV_DRIVERS,
            SYS_PCI_DEVICES,
            SYS_PCI_DRIVERS,
            SYS_GROUPS,
            "/proc",
        ] {
            world.tree.mkdir_p(dir);
        }
        world
            .tree
            .add_file("/sys/bus/pci/drivers_probe", Attr::DriversProbe);
        world.tree.add_file("/dev/vfio/vfio", Attr::VfioContainer);
        world.tree.add_file("/dev/null", Attr::Null);
        for driver in &topology.pci_drivers {
            world.drivers.insert(driver.name.clone(), driver.clone());
            world.modules.insert(driver.module_name().to_string(), true);
        }
        for parent in &topology.mdev_parents {
            world.modules.insert(parent.module.clone(), true);
        }
        for vf_mdev in topology
            .pci_devices
            .iter()
            .filter_map(|d| d.sriov.as_ref()?.vf_mdev.as_ref())
        {
            world.modules.insert(vf_mdev.module.clone(), true);
        }
        for module in &topology.unloaded_modules {
            world.modules.insert(module.clone(), false);
        }
        for spec in &topology.pci_devices {
            // The topology was validated: the address parses.
            let Ok(address) = PciAddress::parse(&spec.bdf) else {
                continue;
            };
            let root = format!(
                "/sys/devices/pci{:04x}:{:02x}",
                address.domain(),
                spec.bridge
                    .as_deref()
                    .and_then(|bridge| PciAddress::parse(bridge).ok())
                    .map_or(address.bus(), PciAddress::bus)
            );
            let parent_dir = match &spec.bridge {
                Some(bridge) => join(&root, bridge),
                None => root,
            };
            let dir = join(&parent_dir, &spec.bdf);
            let sriov = spec.sriov.clone().map(|s| Sriov {
                spec: s,
                numvfs: 0,
                autoprobe: true,
                vfs: Vec::new(),
            });
            // Validated: every device has a group when the host has an IOMMU; without one the
            // number is never shown (no links, no group directories).
            let group = spec.iommu_group.unwrap_or(0);
            if topology.iommu {
                world.groups.entry(group).or_default();
            }
            world.add_pci(
                &spec.bdf,
                Pci {
                    address,
                    dir,
                    group,
                    native_driver: spec.driver.clone(),
                    driver: None,
                    driver_override: None,
                    sriov,
                    physfn: None,
                    vfio_index: None,
                    nvidia_current: 0,
                    ids: (0, 0, 0, 0, 0),
                },
                (
                    spec.vendor,
                    spec.device,
                    spec.subsystem_vendor,
                    spec.subsystem_device,
                    spec.class,
                    spec.numa_node,
                ),
            );
        }
        let loaded: Vec<String> = world
            .modules
            .iter()
            .filter(|(_, &on)| on)
            .map(|(m, _)| m.clone())
            .collect();
        for module in loaded {
            world.start_module(&module);
        }
        world.booted = true;
        world
    }

    // ----- events -----

    fn emit(&mut self, action: UeventAction, dir: &str, subsystem: &str, extra: &[(&str, String)]) {
        // Nobody listening (a daemon's start-up reconcile runs before it watches uevents):
        // the event would be built only to be dropped.
        if self.subscribers.is_empty() {
            return;
        }
        let devpath = devpath(dir);
        let mut properties = BTreeMap::new();
        properties.insert("ACTION".to_string(), action.as_str().to_string());
        properties.insert("DEVPATH".to_string(), devpath.clone());
        properties.insert("SUBSYSTEM".to_string(), subsystem.to_string());
        for (key, value) in extra {
            // kobject_uevent_env() zaps MODALIAS from unbind events, so that udev does not
            // load a module because a driver went away.
            if action == UeventAction::Unbind && *key == "MODALIAS" {
                continue;
            }
            properties.insert((*key).to_string(), value.clone());
        }
        let event = SimEvent {
            action,
            devpath,
            subsystem: subsystem.to_string(),
            properties,
        };
        self.subscribers
            .retain(|subscriber| subscriber.send(event.clone()).is_ok());
    }

    /// The properties the kernel adds to every uevent of the device at `dir`: for a PCI
    /// function `PCI_CLASS`, `PCI_ID`, `PCI_SUBSYS_ID`, `PCI_SLOT_NAME`, `MODALIAS`, and
    /// `DRIVER` while one is bound.
    pub(super) fn device_properties(&self, dir: &str) -> Vec<(&'static str, String)> {
        let Some((bdf, pci)) = self.pci.iter().find(|(_, p)| p.dir == dir) else {
            return Vec::new();
        };
        let (vendor, device, subsystem_vendor, subsystem_device, class) = pci.ids;
        let mut properties = Vec::new();
        if let Some(driver) = &pci.driver {
            properties.push(("DRIVER", driver.clone()));
        }
        properties.extend([
            ("PCI_CLASS", format!("{class:X}")),
            ("PCI_ID", format!("{vendor:04X}:{device:04X}")),
            ("PCI_SUBSYS_ID", format!("{subsystem_vendor:04X}:{subsystem_device:04X}")),
            ("PCI_SLOT_NAME", bdf.clone()),
            (
                "MODALIAS",
                format!(
                    "pci:v{vendor:08X}d{device:08X}sv{subsystem_vendor:08X}sd{subsystem_device:08X}bc{:02X}sc{:02X}i{:02X}",
                    class >> 16,
                    (class >> 8) & 0xff,
                    class & 0xff
                ),
            ),
        ]);
        properties
    }

    // ----- allocation -----

    fn alloc_group(&mut self) -> u32 {
        // The lowest free id from the first visible one (the kernel's ida): one ordered pass
        // over the ids in use from the first that may be free, up to the first gap.
        let mut id = self
            .groups_taken_below
            .max(self.topology.hidden_iommu_groups);
        for &taken in self.groups.range(id..).map(|(taken, _)| taken) {
            if taken != id {
                break;
            }
            id += 1;
        }
        self.groups.insert(id, Group::default());
        self.groups_taken_below = id + 1;
        id
    }

    /// Forgets group `id` (its last member left), so the next allocation may reuse it.
    fn free_group(&mut self, id: u32) {
        self.groups.remove(&id);
        self.groups_taken_below = self.groups_taken_below.min(id);
    }

    fn alloc_vfio_index(&mut self) -> u32 {
        let mut id = self.vfio_taken_below;
        for &taken in self.vfio_indexes.range(id..) {
            if taken != id {
                break;
            }
            id += 1;
        }
        self.vfio_indexes.insert(id);
        self.vfio_taken_below = id + 1;
        id
    }

    /// Gives VFIO device index `index` back, so the next allocation may reuse it.
    fn free_vfio_index(&mut self, index: u32) {
        self.vfio_indexes.remove(&index);
        self.vfio_taken_below = self.vfio_taken_below.min(index);
    }

    fn group_join(&mut self, group: u32, dir: &str, name: &str) {
        self.groups
            .entry(group)
            .or_default()
            .members
            .insert(dir.to_string());
        self.tree
            .add_relative_link(&format!("{SYS_GROUPS}/{group}/devices/{name}"), dir);
    }

    fn group_leave(&mut self, group: u32, dir: &str, name: &str) {
        self.tree
            .remove(&format!("{SYS_GROUPS}/{group}/devices/{name}"));
        let empty = match self.groups.get_mut(&group) {
            Some(state) => {
                state.members.remove(dir);
                state.members.is_empty()
            }
            None => false,
        };
        if empty {
            self.free_group(group);
            self.tree.remove(&format!("{SYS_GROUPS}/{group}"));
        }
    }

    /// Whether a member device is a registered VFIO device (so the group has a node).
    fn is_vfio_device(&self, dir: &str) -> bool {
        // An mdev's directory ends in its UUID, the key of `mdevs`.
        let name = dir.rsplit('/').next().unwrap_or(dir);
        if self.mdevs.get(name).is_some_and(|m| m.dir == dir) {
            return true;
        }
        self.pci
            .values()
            .any(|p| p.dir == dir && (p.vfio_index.is_some() || p.nvidia_current != 0))
    }

    /// Creates or removes `/dev/vfio/<group>` to match its members, with the `vfio` uevent.
    fn sync_group_node(&mut self, group: u32) {
        let want = self
            .groups
            .get(&group)
            .is_some_and(|g| g.members.iter().any(|d| self.is_vfio_device(d)));
        let have = self.groups.get(&group).is_some_and(|g| g.node)
            || self.tree.get(&format!("/dev/vfio/{group}")).is_some();
        let devdir = format!("/sys/devices/virtual/vfio/{group}");
        if want && !have {
            if let Some(state) = self.groups.get_mut(&group) {
                state.node = true;
            }
            self.tree
                .add_file(&format!("/dev/vfio/{group}"), Attr::VfioGroup { group });
            self.emit(
                UeventAction::Add,
                &devdir,
                "vfio",
                &[("DEVNAME", format!("/dev/vfio/{group}"))],
            );
        } else if !want && have {
            if let Some(state) = self.groups.get_mut(&group) {
                state.node = false;
            }
            self.tree.remove(&format!("/dev/vfio/{group}"));
            self.emit(
                UeventAction::Remove,
                &devdir,
                "vfio",
                &[("DEVNAME", format!("/dev/vfio/{group}"))],
            );
        }
    }

    /// Some process has `/dev/vfio/<group>` open (6.1 groups are single-open).
    pub(crate) fn group_held(&self, group: u32) -> bool {
        self.groups.get(&group).is_some_and(|g| g.holder.is_some())
    }

    /// Some process has a device fd of the group open: what `vfio_unregister_group_dev()`
    /// waits for (a removal blocks, a driver refuses to reconfigure).
    pub(crate) fn device_held(&self, group: u32) -> bool {
        self.groups
            .get(&group)
            .and_then(|g| g.holder)
            .and_then(|pid| self.processes.get(&pid))
            .is_some_and(|p| p.device_fd)
    }

    // ----- holders -----

    /// Opens `/dev/vfio/<group>` as a new process, and with `device_fd` a device fd from it
    /// (what QEMU does; without, what libvirt's busy check does): ENOENT without the node,
    /// EBUSY if held.
    pub(crate) fn open_group(
        &mut self,
        group: u32,
        comm: &str,
        device_fd: bool,
    ) -> Result<u32, i32> {
        if self.tree.get(&format!("/dev/vfio/{group}")).is_none() {
            return Err(libc::ENOENT);
        }
        if self.group_held(group) {
            return Err(libc::EBUSY);
        }
        let pid = self.next_pid;
        self.next_pid += 1;
        if let Some(state) = self.groups.get_mut(&group) {
            state.holder = Some(pid);
        }
        let dir = format!("/proc/{pid}");
        self.tree
            .add_file(&join(&dir, "comm"), Attr::Const(format!("{comm}\n")));
        self.tree
            .add_file(&join(&dir, "cmdline"), Attr::Const(format!("{comm}\0")));
        self.tree.add_link(&join(&dir, "fd/0"), "/dev/null");
        if device_fd {
            self.tree.add_link(&join(&dir, "fd/3"), "/dev/vfio/vfio");
        }
        self.tree
            .add_link(&join(&dir, "fd/4"), format!("/dev/vfio/{group}"));
        if device_fd {
            self.tree
                .add_link(&join(&dir, "fd/5"), "anon_inode:[vfio-device]");
        }
        self.processes.insert(pid, Process { group, device_fd });
        Ok(pid)
    }

    /// The process closes its descriptors and exits.
    pub(crate) fn close_process(&mut self, pid: u32) {
        let Some(process) = self.processes.remove(&pid) else {
            return;
        };
        if let Some(state) = self.groups.get_mut(&process.group) {
            if state.holder == Some(pid) {
                state.holder = None;
            }
        }
        self.tree.remove(&format!("/proc/{pid}"));
    }

    /// The IOMMU group of a device directory (mdev or PCI), by its canonical path.
    pub(crate) fn group_of_dir(&self, dir: &str) -> Option<u32> {
        self.groups
            .iter()
            .find(|(_, g)| g.members.contains(dir))
            .map(|(id, _)| *id)
    }

    // ----- file operations -----

    pub(crate) fn read_attr(&self, attr: &Attr) -> Result<String, i32> {
        match attr {
            Attr::Const(text) | Attr::Stored(text) => Ok(text.clone()),
            Attr::Available { parent, type_id } => {
                Ok(format!("{}\n", self.available(parent, type_id)))
            }
            Attr::DriverOverride { bdf } => {
                let value = self.pci.get(bdf).and_then(|p| p.driver_override.clone());
                Ok(format!("{}\n", value.as_deref().unwrap_or("(null)")))
            }
            Attr::SriovNumvfs { bdf } => Ok(format!(
                "{}\n",
                self.pci
                    .get(bdf)
                    .and_then(|p| p.sriov.as_ref())
                    .map_or(0, |s| s.numvfs)
            )),
            Attr::SriovAutoprobe { bdf } => Ok(format!(
                "{}\n",
                u8::from(
                    self.pci
                        .get(bdf)
                        .and_then(|p| p.sriov.as_ref())
                        .is_some_and(|s| s.autoprobe)
                )
            )),
            Attr::NvCreatable { bdf } => Ok(self.nvidia_creatable(bdf)),
            Attr::NvCurrent { bdf } => Ok(format!(
                "{}\n",
                self.pci.get(bdf).map_or(0, |p| p.nvidia_current)
            )),
            Attr::VfioGroup { group } => Err(if self.group_held(*group) {
                libc::EBUSY
            } else {
                libc::EINVAL
            }),
            Attr::VfioContainer => Err(libc::EINVAL),
            Attr::Null => Ok(String::new()),
            // A debugfs file without a read operation: vfs_read() refuses it.
            Attr::GimTimeslice { .. } => Err(libc::EINVAL),
            Attr::Create { .. }
            | Attr::Remove { .. }
            | Attr::DriversProbe
            | Attr::Bind { .. }
            | Attr::Unbind { .. } => Err(libc::EACCES),
        }
    }

    /// Runs a sysfs store on the file at canonical `path`.
    pub(crate) fn store(&mut self, path: &str, data: &[u8]) -> Store {
        let attr = match self.tree.get(path) {
            Some(Node::File(attr)) => attr.clone(),
            Some(Node::Dir(_)) => return Store::Done(Err(libc::EISDIR)),
            _ => return Store::Done(Err(libc::ENOENT)),
        };
        if let Attr::VfioGroup { group } = attr {
            return Store::Done(Err(if self.group_held(group) {
                libc::EBUSY
            } else {
                libc::EINVAL
            }));
        }
        // sysfs_kf_write(): an empty write never reaches the store function.
        if data.is_empty()
            && !matches!(
                attr,
                Attr::Const(_) | Attr::Available { .. } | Attr::NvCreatable { .. }
            )
        {
            return Store::Done(Ok(()));
        }
        let result = match attr {
            Attr::Const(_) | Attr::Available { .. } | Attr::NvCreatable { .. } => Err(libc::EACCES),
            Attr::VfioContainer => Err(libc::EINVAL),
            Attr::VfioGroup { .. } => Err(libc::EINVAL),
            Attr::Null => Ok(()),
            Attr::Stored(_) => {
                if let Some(Node::File(Attr::Stored(value))) = self.tree.get_mut(path) {
                    *value = String::from_utf8_lossy(data).into_owned();
                }
                Ok(())
            }
            Attr::Create { parent, type_id } => self.create_mdev(&parent, &type_id, data),
            Attr::Remove { uuid } => return self.remove_store(&uuid, data),
            Attr::DriverOverride { bdf } => self.override_store(&bdf, data),
            Attr::SriovNumvfs { bdf } => return self.numvfs_store(&bdf, data),
            Attr::SriovAutoprobe { bdf } => kstrtobool(data).map(|on| {
                if let Some(sriov) = self.pci.get_mut(&bdf).and_then(|p| p.sriov.as_mut()) {
                    sriov.autoprobe = on;
                }
            }),
            Attr::DriversProbe => match self.find_pci_by_name(data) {
                Some(bdf) => {
                    self.probe(&bdf);
                    Ok(())
                }
                None => Err(libc::ENODEV),
            },
            Attr::Bind { driver } => self.bind_store(&driver, data),
            Attr::Unbind { driver } => return self.unbind_store(&driver, data),
            Attr::NvCurrent { bdf } => self.nvidia_current_store(&bdf, data),
            Attr::GimTimeslice { pf, .. } => self.gim_timeslice_store(path, &pf, data),
        };
        Store::Done(result)
    }

    /// Finishes an operation once its groups are free.
    /// Continues an operation once its groups are free; it may have to wait again.
    pub(crate) fn resume(&mut self, deferred: &Deferred) -> Store {
        match deferred {
            Deferred::RemoveMdev(uuid) => self.remove_mdev_now(uuid),
            Deferred::DisableVfs(bdf) => return self.disable_vfs_step(bdf),
            Deferred::Unbind(bdf) => self.unbind_now(bdf),
        }
        Store::Done(Ok(()))
    }

    /// The device whose `device_lock()` an access to `attr` takes (PCI `sriov_numvfs`,
    /// `driver_override`, and the device named in a bind, unbind or drivers_probe write).
    pub(crate) fn lock_target(&self, attr: &Attr, data: Option<&[u8]>) -> Option<String> {
        match attr {
            Attr::SriovNumvfs { bdf } | Attr::DriverOverride { bdf } => Some(bdf.clone()),
            Attr::Bind { .. } | Attr::Unbind { .. } | Attr::DriversProbe => {
                data.and_then(|d| self.find_pci_by_name(d))
            }
            _ => None,
        }
    }

    /// The attribute at a canonical path, if it is a file.
    pub(crate) fn attr_at(&self, path: &str) -> Option<Attr> {
        match self.tree.get(path) {
            Some(Node::File(attr)) => Some(attr.clone()),
            _ => None,
        }
    }

    // ----- introspection for tests and the conformance runner -----

    pub(crate) fn mdev_uuids(&self) -> Vec<String> {
        self.mdevs.keys().cloned().collect()
    }

    pub(crate) fn vf_count(&self) -> usize {
        self.pci.values().filter(|p| p.physfn.is_some()).count()
    }
}
