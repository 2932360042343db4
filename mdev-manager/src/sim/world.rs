//! The kernel double's state machine: modules, PCI functions and drivers, SR-IOV, mdev
//! parents and instances, IOMMU groups, VFIO device nodes and the processes holding them.
//! Every change updates the file tree and emits the uevents the kernel would.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::Sender;

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
}

/// The result of a store that may have to wait for a holder, like the kernel's
/// `vfio_unregister_group_dev()`.
#[derive(Debug)]
pub(crate) enum Store {
    Done(Result<(), i32>),
    /// Wait until none of these groups is held, then run the operation.
    WaitThen {
        groups: Vec<u32>,
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
    pci: BTreeMap<String, Pci>,
    groups: BTreeMap<u32, Group>,
    vfio_indexes: BTreeSet<u32>,
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
            pci: BTreeMap::new(),
            groups: BTreeMap::new(),
            vfio_indexes: BTreeSet::new(),
            processes: BTreeMap::new(),
            next_pid: FIRST_PID,
            boot,
            subscribers: Vec::new(),
            faults: Vec::new(),
            next_fault: 0,
            blocked: Vec::new(),
            released_faults: BTreeSet::new(),
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
            let Some(address) = PciAddress::parse(&spec.bdf) else {
                continue;
            };
            let root = format!(
                "/sys/devices/pci{:04x}:{:02x}",
                address.domain,
                spec.bridge
                    .as_deref()
                    .and_then(PciAddress::parse)
                    .map_or(address.bus, |b| b.bus)
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
            world.groups.entry(spec.iommu_group).or_default();
            world.add_pci(
                &spec.bdf,
                Pci {
                    address,
                    dir,
                    group: spec.iommu_group,
                    native_driver: spec.driver.clone(),
                    driver: None,
                    driver_override: None,
                    sriov,
                    physfn: None,
                    vfio_index: None,
                    nvidia_current: 0,
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
        world
    }

    // ----- events -----

    fn emit(&mut self, action: UeventAction, dir: &str, subsystem: &str, extra: &[(&str, String)]) {
        let devpath = devpath(dir);
        let mut properties = BTreeMap::new();
        properties.insert("ACTION".to_string(), action.as_str().to_string());
        properties.insert("DEVPATH".to_string(), devpath.clone());
        properties.insert("SUBSYSTEM".to_string(), subsystem.to_string());
        for (key, value) in extra {
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

    // ----- allocation -----

    fn alloc_group(&mut self) -> u32 {
        let mut id = 0;
        while self.groups.contains_key(&id) {
            id += 1;
        }
        self.groups.insert(id, Group::default());
        id
    }

    fn alloc_vfio_index(&mut self) -> u32 {
        let mut id = 0;
        while self.vfio_indexes.contains(&id) {
            id += 1;
        }
        self.vfio_indexes.insert(id);
        id
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
            self.groups.remove(&group);
            self.tree.remove(&format!("{SYS_GROUPS}/{group}"));
        }
    }

    /// Whether a member device is a registered VFIO device (so the group has a node).
    fn is_vfio_device(&self, dir: &str) -> bool {
        if self.mdevs.values().any(|m| m.dir == dir) {
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
                &[("DEVNAME", format!("vfio/{group}"))],
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
                &[("DEVNAME", format!("vfio/{group}"))],
            );
        }
    }

    pub(crate) fn group_held(&self, group: u32) -> bool {
        self.groups.get(&group).is_some_and(|g| g.holder.is_some())
    }

    // ----- modules -----

    pub(crate) fn module_loaded(&self, module: &str) -> Option<bool> {
        self.modules.get(module).copied()
    }

    fn start_module(&mut self, module: &str) {
        let drivers: Vec<String> = self
            .drivers
            .values()
            .filter(|d| d.module_name() == module)
            .map(|d| d.name.clone())
            .collect();
        for driver in drivers {
            let dir = join(SYS_PCI_DRIVERS, &driver);
            self.tree.mkdir_p(&dir);
            self.tree.add_file(
                &join(&dir, "bind"),
                Attr::Bind {
                    driver: driver.clone(),
                },
            );
            self.tree.add_file(
                &join(&dir, "unbind"),
                Attr::Unbind {
                    driver: driver.clone(),
                },
            );
            let candidates: Vec<String> = self.pci.keys().cloned().collect();
            for bdf in candidates {
                let matches = self
                    .pci
                    .get(&bdf)
                    .is_some_and(|p| p.driver.is_none() && self.driver_matches(p, &driver));
                if matches {
                    self.bind(&bdf, &driver);
                }
            }
        }
        let parents: Vec<MdevParentSpec> = self
            .parent_specs()
            .into_iter()
            .filter(|p| p.module == module)
            .collect();
        for parent in parents {
            self.register_parent(parent);
        }
    }

    /// Every parent the machine could register now: the topology's, and one per existing VF
    /// of a PF with `vf_mdev`.
    fn parent_specs(&self) -> Vec<MdevParentSpec> {
        let mut specs = self.topology.mdev_parents.clone();
        for (bdf, pci) in &self.pci {
            let vf_mdev = pci
                .physfn
                .as_ref()
                .and_then(|pf| self.pci.get(pf))
                .and_then(|pf| pf.sriov.as_ref())
                .and_then(|s| s.spec.vf_mdev.as_ref());
            if let Some(vf_mdev) = vf_mdev {
                specs.push(vf_mdev.parent_for(bdf));
            }
        }
        specs
    }

    /// `modprobe`: ENOENT for a module the host does not have.
    pub(crate) fn load_module(&mut self, module: &str) -> Result<(), i32> {
        match self.modules.get(module) {
            None => Err(libc::ENOENT),
            Some(true) => Ok(()),
            Some(false) => {
                self.modules.insert(module.to_string(), true);
                self.start_module(module);
                Ok(())
            }
        }
    }

    /// `rmmod`: ENOENT when not loaded, EAGAIN ("in use") while a device it provides is held.
    pub(crate) fn unload_module(&mut self, module: &str) -> Result<(), i32> {
        if self.modules.get(module) != Some(&true) {
            return Err(libc::ENOENT);
        }
        let parents: Vec<String> = self
            .parents
            .values()
            .filter(|p| p.spec.module == module)
            .map(|p| p.spec.name.clone())
            .collect();
        let drivers: Vec<String> = self
            .drivers
            .values()
            .filter(|d| d.module_name() == module)
            .map(|d| d.name.clone())
            .collect();
        let mut groups = Vec::new();
        for mdev in self.mdevs.values().filter(|m| parents.contains(&m.parent)) {
            groups.push(mdev.group);
        }
        for pci in self
            .pci
            .values()
            .filter(|p| p.driver.as_ref().is_some_and(|d| drivers.contains(d)))
        {
            groups.push(pci.group);
            for vf in pci.sriov.iter().flat_map(|s| s.vfs.iter()) {
                if let Some(vf) = self.pci.get(vf) {
                    groups.push(vf.group);
                }
            }
        }
        let bound: Vec<String> = self
            .pci
            .iter()
            .filter(|(_, p)| p.driver.as_ref().is_some_and(|d| drivers.contains(d)))
            .map(|(bdf, _)| bdf.clone())
            .collect();
        for bdf in bound {
            groups.extend(self.parent_mdev_groups(&bdf));
        }
        if groups.iter().any(|g| self.group_held(*g)) {
            return Err(libc::EAGAIN);
        }
        for parent in parents {
            self.unregister_parent(&parent);
        }
        for driver in drivers {
            let bound: Vec<String> = self
                .pci
                .iter()
                .filter(|(_, p)| p.driver.as_deref() == Some(driver.as_str()))
                .map(|(b, _)| b.clone())
                .collect();
            for bdf in bound {
                self.unbind_now(&bdf);
            }
            self.tree.remove(&join(SYS_PCI_DRIVERS, &driver));
        }
        self.modules.insert(module.to_string(), false);
        Ok(())
    }

    // ----- mdev parents -----

    fn parent_dir(&self, spec: &MdevParentSpec) -> Option<String> {
        match (&spec.virtual_device, &spec.pci) {
            (Some(path), _) => Some(format!("/sys/devices/virtual/{path}")),
            (None, Some(bdf)) => self.pci.get(bdf).map(|p| p.dir.clone()),
            (None, None) => None,
        }
    }

    fn register_parent(&mut self, spec: MdevParentSpec) {
        if self.parents.contains_key(&spec.name) {
            return;
        }
        // A GPU's vendor module registers the parent only for a function its PCI driver has
        // bound (nvidia_vgpu_vfio on nvidia, kvmgt on i915).
        if let Some(bdf) = &spec.pci {
            if self.pci.get(bdf).is_none_or(|p| p.driver.is_none()) {
                return;
            }
        }
        let Some(dir) = self.parent_dir(&spec) else {
            return;
        };
        let is_virtual = spec.virtual_device.is_some();
        if is_virtual {
            self.tree.mkdir_p(&dir);
            let subsystem = spec
                .virtual_device
                .as_deref()
                .and_then(|p| p.split('/').next())
                .unwrap_or("virtual")
                .to_string();
            self.tree
                .add_relative_link(&join(&dir, "subsystem"), &format!("/sys/class/{subsystem}"));
            self.tree.mkdir_p(&format!("/sys/class/{subsystem}"));
            self.tree
                .add_relative_link(&format!("/sys/class/{subsystem}/{}", spec.name), &dir);
            self.emit(UeventAction::Add, &dir, &subsystem, &[]);
        }
        for mdev_type in &spec.types {
            let full = format!("{}-{}", spec.type_prefix, mdev_type.id);
            let type_dir = format!("{dir}/mdev_supported_types/{full}");
            self.tree.mkdir_p(&join(&type_dir, "devices"));
            self.tree.add_file(
                &join(&type_dir, "create"),
                Attr::Create {
                    parent: spec.name.clone(),
                    type_id: mdev_type.id.clone(),
                },
            );
            self.tree.add_file(
                &join(&type_dir, "available_instances"),
                Attr::Available {
                    parent: spec.name.clone(),
                    type_id: mdev_type.id.clone(),
                },
            );
            self.tree.add_file(
                &join(&type_dir, "device_api"),
                Attr::Const(format!("{}\n", mdev_type.device_api)),
            );
            let name = mdev_type
                .name
                .clone()
                .unwrap_or_else(|| mdev_type.id.clone());
            self.tree
                .add_file(&join(&type_dir, "name"), Attr::Const(format!("{name}\n")));
            if let Some(description) = &mdev_type.description {
                self.tree.add_file(
                    &join(&type_dir, "description"),
                    Attr::Const(format!("{description}\n")),
                );
            }
        }
        self.tree
            .add_relative_link(&join(SYS_MDEV_BUS, &spec.name), &dir);
        self.tree
            .mkdir_p(&join(SYS_MDEV_DRIVERS, &spec.mdev_driver));
        let subsystem = if is_virtual {
            spec.virtual_device
                .as_deref()
                .and_then(|p| p.split('/').next())
                .unwrap_or("virtual")
                .to_string()
        } else {
            "pci".to_string()
        };
        self.emit(
            UeventAction::Change,
            &dir,
            &subsystem,
            &[("MDEV_STATE", "registered".to_string())],
        );
        self.parents.insert(spec.name.clone(), Parent { spec, dir });
    }

    fn unregister_parent(&mut self, name: &str) {
        let Some(parent) = self.parents.remove(name) else {
            return;
        };
        let is_virtual = parent.spec.virtual_device.is_some();
        let subsystem = if is_virtual {
            parent
                .spec
                .virtual_device
                .as_deref()
                .and_then(|p| p.split('/').next())
                .unwrap_or("virtual")
                .to_string()
        } else {
            "pci".to_string()
        };
        self.emit(
            UeventAction::Change,
            &parent.dir,
            &subsystem,
            &[("MDEV_STATE", "unregistered".to_string())],
        );
        self.tree.remove(&join(SYS_MDEV_BUS, name));
        let uuids: Vec<String> = self
            .mdevs
            .iter()
            .filter(|(_, m)| m.parent == name)
            .map(|(u, _)| u.clone())
            .collect();
        for uuid in uuids {
            self.remove_mdev_now(&uuid);
        }
        self.tree.remove(&join(&parent.dir, "mdev_supported_types"));
        let driver_in_use = self
            .parents
            .values()
            .any(|p| p.spec.mdev_driver == parent.spec.mdev_driver);
        if !driver_in_use {
            self.tree
                .remove(&join(SYS_MDEV_DRIVERS, &parent.spec.mdev_driver));
        }
        if is_virtual {
            self.tree.remove(&parent.dir);
            self.tree.remove(&format!("/sys/class/{subsystem}/{name}"));
            self.tree
                .prune_empty(&format!("/sys/class/{subsystem}"), "/sys/class");
            if let Some((upper, _)) = parent.dir.rsplit_once('/') {
                self.tree.prune_empty(upper, "/sys/devices/virtual");
            }
            self.emit(UeventAction::Remove, &parent.dir, &subsystem, &[]);
        }
    }

    fn parent_spec(&self, parent: &str) -> Option<&MdevParentSpec> {
        self.parents.get(parent).map(|p| &p.spec)
    }

    /// `available_instances` of a type, by the parent's capacity model.
    pub(crate) fn available(&self, parent: &str, type_id: &str) -> u64 {
        let Some(spec) = self.parent_spec(parent) else {
            return 0;
        };
        let Some(mdev_type) = spec.types.iter().find(|t| t.id == type_id) else {
            return 0;
        };
        let mine = || self.mdevs.values().filter(move |m| m.parent == parent);
        match spec.capacity {
            CapacityKind::MaxInstances => {
                let max = u64::from(spec.max_instances.unwrap_or(0));
                max.saturating_sub(mine().count() as u64)
            }
            CapacityKind::Homogeneous => {
                let wanted = homogeneous_group(spec, type_id);
                if mine().any(|m| homogeneous_group(spec, &m.type_id) != wanted) {
                    return 0;
                }
                let max = u64::from(mdev_type.max_instances.unwrap_or(0));
                max.saturating_sub(mine().count() as u64)
            }
            CapacityKind::PerVf => {
                if mine().next().is_some() {
                    return 0;
                }
                let wanted = homogeneous_group(spec, type_id);
                let pf = self.pci.get(parent).and_then(|vf| vf.physfn.clone());
                let on_gpu: Vec<&Mdev> = self
                    .mdevs
                    .values()
                    .filter(|m| {
                        pf.is_some()
                            && self.pci.get(&m.parent).and_then(|vf| vf.physfn.clone()) == pf
                    })
                    .collect();
                if on_gpu
                    .iter()
                    .any(|m| homogeneous_group(spec, &m.type_id) != wanted)
                {
                    return 0;
                }
                let max = mdev_type.max_instances.unwrap_or(0) as usize;
                u64::from(on_gpu.len() < max)
            }
            CapacityKind::Pool => {
                let mut used: BTreeMap<&str, u64> = BTreeMap::new();
                for mdev in mine() {
                    if let Some(t) = spec.types.iter().find(|t| t.id == mdev.type_id) {
                        for (resource, cost) in &t.cost {
                            *used.entry(resource.as_str()).or_default() += cost;
                        }
                    }
                }
                mdev_type
                    .cost
                    .iter()
                    .map(|(resource, cost)| {
                        let total = spec.resources.get(resource).copied().unwrap_or(0);
                        total.saturating_sub(used.get(resource.as_str()).copied().unwrap_or(0))
                            / cost
                    })
                    .min()
                    .unwrap_or(0)
            }
        }
    }

    // ----- mdev instances -----

    fn create_mdev(&mut self, parent: &str, type_id: &str, data: &[u8]) -> Result<(), i32> {
        let uuid = parse_create_uuid(data)?;
        if self.mdevs.contains_key(&uuid) {
            return Err(libc::EEXIST);
        }
        let Some(spec) = self.parent_spec(parent).cloned() else {
            return Err(libc::ENODEV);
        };
        let available = self.available(parent, type_id);
        if spec.capacity == CapacityKind::MaxInstances && available == 0 {
            return Err(Topology::exhausted_errno(&spec));
        }
        let Some(parent_dir) = self.parents.get(parent).map(|p| p.dir.clone()) else {
            return Err(libc::ENODEV);
        };
        let dir = join(&parent_dir, &uuid);
        if available == 0 {
            // device_add() already ran when the driver's probe refuses: udev sees the device
            // come and go.
            self.emit(
                UeventAction::Add,
                &dir,
                "mdev",
                &[("MDEV_TYPE", format!("{}-{type_id}", spec.type_prefix))],
            );
            self.emit(
                UeventAction::Remove,
                &dir,
                "mdev",
                &[("MDEV_TYPE", format!("{}-{type_id}", spec.type_prefix))],
            );
            return Err(Topology::exhausted_errno(&spec));
        }
        let full_type = format!("{}-{type_id}", spec.type_prefix);
        let group = self.alloc_group();
        let vfio_index = self.alloc_vfio_index();
        self.tree.mkdir_p(&dir);
        self.tree
            .add_file(&join(&dir, "remove"), Attr::Remove { uuid: uuid.clone() });
        self.tree.add_relative_link(
            &join(&dir, "mdev_type"),
            &format!("{parent_dir}/mdev_supported_types/{full_type}"),
        );
        self.tree
            .add_relative_link(&join(&dir, "iommu_group"), &format!("{SYS_GROUPS}/{group}"));
        self.tree
            .add_relative_link(&join(&dir, "subsystem"), "/sys/bus/mdev");
        for attribute in &spec.instance_attributes {
            self.tree
                .add_file(&join(&dir, attribute), Attr::Stored(String::new()));
        }
        let type_constants = spec
            .types
            .iter()
            .find(|t| t.id == type_id)
            .map(|t| t.instance_constants.clone())
            .unwrap_or_default();
        for (attribute, value) in spec.instance_constants.iter().chain(&type_constants) {
            self.tree.add_file(
                &join(&dir, attribute),
                Attr::Const(value.replace("{uuid}", &uuid)),
            );
        }
        self.tree
            .add_relative_link(&join(SYS_MDEV_DEVICES, &uuid), &dir);
        self.tree.add_relative_link(
            &format!("{parent_dir}/mdev_supported_types/{full_type}/devices/{uuid}"),
            &dir,
        );
        self.emit(
            UeventAction::Add,
            &dir,
            "mdev",
            &[("MDEV_TYPE", full_type.clone())],
        );
        self.mdevs.insert(
            uuid.clone(),
            Mdev {
                parent: parent.to_string(),
                type_id: type_id.to_string(),
                dir: dir.clone(),
                group,
                vfio_index,
            },
        );
        self.group_join(group, &dir, &uuid);
        let vfio_dev = format!("{dir}/vfio-dev/vfio{vfio_index}");
        self.tree.mkdir_p(&vfio_dev);
        self.emit(UeventAction::Add, &vfio_dev, "vfio-dev", &[]);
        self.sync_group_node(group);
        self.tree.add_relative_link(
            &join(&dir, "driver"),
            &join(SYS_MDEV_DRIVERS, &spec.mdev_driver),
        );
        self.tree.add_relative_link(
            &format!("{SYS_MDEV_DRIVERS}/{}/{uuid}", spec.mdev_driver),
            &dir,
        );
        self.emit(
            UeventAction::Bind,
            &dir,
            "mdev",
            &[
                ("DRIVER", spec.mdev_driver.clone()),
                ("MDEV_TYPE", full_type),
            ],
        );
        Ok(())
    }

    fn remove_store(&mut self, uuid: &str, data: &[u8]) -> Store {
        // remove_store() turns every kstrtoul() failure into EINVAL.
        let Ok(value) = kstrtoul(data, 0, u64::MAX) else {
            return Store::Done(Err(libc::EINVAL));
        };
        if value == 0 {
            return Store::Done(Ok(()));
        }
        let Some(mdev) = self.mdevs.get(uuid) else {
            return Store::Done(Err(libc::ENODEV));
        };
        // device_remove_file_self(): the attribute is gone before the removal starts, so a
        // second writer cannot even open it while the first one waits.
        self.tree.remove(&join(&mdev.dir, "remove"));
        let group = mdev.group;
        if self.group_held(group) {
            return Store::WaitThen {
                groups: vec![group],
                then: Deferred::RemoveMdev(uuid.to_string()),
            };
        }
        self.remove_mdev_now(uuid);
        Store::Done(Ok(()))
    }

    fn remove_mdev_now(&mut self, uuid: &str) {
        let Some(mdev) = self.mdevs.remove(uuid) else {
            return;
        };
        let driver = self
            .parent_spec(&mdev.parent)
            .map(|s| s.mdev_driver.clone())
            .unwrap_or_default();
        let parent_dir = self
            .parents
            .get(&mdev.parent)
            .map(|p| p.dir.clone())
            .unwrap_or_default();
        let full_type = self
            .parent_spec(&mdev.parent)
            .map(|s| format!("{}-{}", s.type_prefix, mdev.type_id))
            .unwrap_or_default();
        let vfio_dev = format!("{}/vfio-dev/vfio{}", mdev.dir, mdev.vfio_index);
        self.tree.remove(&join(&mdev.dir, "vfio-dev"));
        self.vfio_indexes.remove(&mdev.vfio_index);
        self.emit(UeventAction::Remove, &vfio_dev, "vfio-dev", &[]);
        self.kill_holders(mdev.group);
        self.group_leave(mdev.group, &mdev.dir, uuid);
        self.sync_group_node(mdev.group);
        self.emit(
            UeventAction::Unbind,
            &mdev.dir,
            "mdev",
            &[("MDEV_TYPE", full_type.clone())],
        );
        self.tree
            .remove(&format!("{SYS_MDEV_DRIVERS}/{driver}/{uuid}"));
        self.tree.remove(&join(SYS_MDEV_DEVICES, uuid));
        self.tree.remove(&format!(
            "{parent_dir}/mdev_supported_types/{full_type}/devices/{uuid}"
        ));
        self.tree.remove(&mdev.dir);
        self.emit(
            UeventAction::Remove,
            &mdev.dir,
            "mdev",
            &[("MDEV_TYPE", full_type)],
        );
    }

    /// A holder of a group that is going away entirely (reboot of a device, rmmod) loses it.
    fn kill_holders(&mut self, group: u32) {
        let pids: Vec<u32> = self
            .processes
            .iter()
            .filter(|(_, p)| p.group == group)
            .map(|(pid, _)| *pid)
            .collect();
        for pid in pids {
            self.close_process(pid);
        }
    }

    // ----- PCI -----

    fn add_pci(&mut self, bdf: &str, pci: Pci, ids: (u16, u16, u16, u16, u32, i32)) {
        let (vendor, device, subsystem_vendor, subsystem_device, class, numa) = ids;
        let dir = pci.dir.clone();
        let constants = [
            ("vendor", format!("{vendor:#06x}\n")),
            ("device", format!("{device:#06x}\n")),
            ("subsystem_vendor", format!("{subsystem_vendor:#06x}\n")),
            ("subsystem_device", format!("{subsystem_device:#06x}\n")),
            ("class", format!("{class:#08x}\n")),
            ("numa_node", format!("{numa}\n")),
        ];
        for (name, value) in constants {
            self.tree.add_file(&join(&dir, name), Attr::Const(value));
        }
        self.tree.add_file(
            &join(&dir, "driver_override"),
            Attr::DriverOverride {
                bdf: bdf.to_string(),
            },
        );
        self.tree
            .add_relative_link(&join(&dir, "subsystem"), "/sys/bus/pci");
        self.tree.add_relative_link(
            &join(&dir, "iommu_group"),
            &format!("{SYS_GROUPS}/{}", pci.group),
        );
        if let Some(sriov) = &pci.sriov {
            let spec = &sriov.spec;
            self.tree.add_file(
                &join(&dir, "sriov_totalvfs"),
                Attr::Const(format!("{}\n", spec.total_vfs)),
            );
            self.tree.add_file(
                &join(&dir, "sriov_offset"),
                Attr::Const(format!("{}\n", spec.offset)),
            );
            self.tree.add_file(
                &join(&dir, "sriov_stride"),
                Attr::Const(format!("{}\n", spec.stride)),
            );
            self.tree.add_file(
                &join(&dir, "sriov_vf_device"),
                Attr::Const(format!("{:x}\n", spec.vf_device)),
            );
            self.tree.add_file(
                &join(&dir, "sriov_numvfs"),
                Attr::SriovNumvfs {
                    bdf: bdf.to_string(),
                },
            );
            self.tree.add_file(
                &join(&dir, "sriov_drivers_autoprobe"),
                Attr::SriovAutoprobe {
                    bdf: bdf.to_string(),
                },
            );
        }
        if let Some(pf) = pci.physfn.as_ref().and_then(|pf| self.pci.get(pf)) {
            let pf_dir = pf.dir.clone();
            self.tree.add_relative_link(&join(&dir, "physfn"), &pf_dir);
        }
        self.tree
            .add_relative_link(&join(SYS_PCI_DEVICES, bdf), &dir);
        let group = pci.group;
        self.pci.insert(bdf.to_string(), pci);
        self.group_join(group, &dir, bdf);
    }

    fn driver_loaded(&self, driver: &str) -> bool {
        self.drivers
            .get(driver)
            .is_some_and(|d| self.modules.get(d.module_name()) == Some(&true))
    }

    /// `pci_match_device` with `driver_override`: only the named driver when set, else the
    /// driver whose id table matches (the device's native driver).
    fn driver_matches(&self, pci: &Pci, driver: &str) -> bool {
        match &pci.driver_override {
            Some(name) => name == driver,
            None => pci.native_driver.as_deref() == Some(driver),
        }
    }

    /// `device_attach`: the first loaded driver that matches binds.
    fn probe(&mut self, bdf: &str) {
        let Some(pci) = self.pci.get(bdf) else { return };
        if pci.driver.is_some() {
            return;
        }
        let candidate = self
            .drivers
            .keys()
            .find(|d| self.driver_loaded(d) && self.driver_matches(pci, d))
            .cloned();
        if let Some(driver) = candidate {
            self.bind(bdf, &driver);
        }
    }

    fn bind(&mut self, bdf: &str, driver: &str) {
        let vfio = self.drivers.get(driver).is_some_and(|d| d.vfio);
        let Some(pci) = self.pci.get_mut(bdf) else {
            return;
        };
        pci.driver = Some(driver.to_string());
        let dir = pci.dir.clone();
        let group = pci.group;
        let physfn = pci.physfn.clone();
        self.tree
            .add_relative_link(&join(&dir, "driver"), &join(SYS_PCI_DRIVERS, driver));
        self.tree
            .add_relative_link(&format!("{SYS_PCI_DRIVERS}/{driver}/{bdf}"), &dir);
        if vfio {
            let index = self.alloc_vfio_index();
            if let Some(pci) = self.pci.get_mut(bdf) {
                pci.vfio_index = Some(index);
            }
            let vfio_dev = format!("{dir}/vfio-dev/vfio{index}");
            self.tree.mkdir_p(&vfio_dev);
            self.emit(UeventAction::Add, &vfio_dev, "vfio-dev", &[]);
            self.sync_group_node(group);
        }
        // The NVIDIA driver gives its VFs the vendor vGPU attributes.
        let nvidia_types = physfn
            .as_ref()
            .and_then(|pf| self.pci.get(pf))
            .filter(|pf| pf.driver.as_deref() == Some(driver))
            .and_then(|pf| pf.sriov.as_ref())
            .is_some_and(|s| !s.spec.nvidia_vgpu_types.is_empty());
        if nvidia_types {
            self.tree.add_file(
                &format!("{dir}/nvidia/creatable_vgpu_types"),
                Attr::NvCreatable {
                    bdf: bdf.to_string(),
                },
            );
            self.tree.add_file(
                &format!("{dir}/nvidia/current_vgpu_type"),
                Attr::NvCurrent {
                    bdf: bdf.to_string(),
                },
            );
            self.tree.add_file(
                &format!("{dir}/nvidia/vgpu_params"),
                Attr::Stored(String::new()),
            );
        }
        self.emit(
            UeventAction::Bind,
            &dir,
            "pci",
            &[
                ("DRIVER", driver.to_string()),
                ("PCI_SLOT_NAME", bdf.to_string()),
            ],
        );
        let parents: Vec<MdevParentSpec> = self
            .parent_specs()
            .into_iter()
            .filter(|p| p.pci.as_deref() == Some(bdf) && self.modules.get(&p.module) == Some(&true))
            .collect();
        for parent in parents {
            self.register_parent(parent);
        }
        let vfs_at_bind = self
            .pci
            .get(bdf)
            .and_then(|p| p.sriov.as_ref())
            .map_or(0, |s| s.spec.vfs_at_bind);
        if vfs_at_bind > 0 {
            self.enable_vfs(bdf, vfs_at_bind);
        }
    }

    /// Groups whose holders an unbind of `bdf` must wait for (the device itself when it is a
    /// VFIO device, and its VFs when it is a PF whose driver disables them on remove).
    fn unbind_waits_for(&self, bdf: &str) -> Vec<u32> {
        let Some(pci) = self.pci.get(bdf) else {
            return Vec::new();
        };
        let mut groups = Vec::new();
        if pci.vfio_index.is_some() || pci.nvidia_current != 0 {
            groups.push(pci.group);
        }
        for vf in pci.sriov.iter().flat_map(|s| s.vfs.iter()) {
            if let Some(vf) = self.pci.get(vf) {
                if vf.vfio_index.is_some() || vf.nvidia_current != 0 {
                    groups.push(vf.group);
                }
            }
        }
        groups.extend(self.parent_mdev_groups(bdf));
        groups.retain(|g| self.group_held(*g));
        groups
    }

    /// Groups of the mdevs of parents that sit on PCI function `bdf`.
    fn parent_mdev_groups(&self, bdf: &str) -> Vec<u32> {
        self.mdevs
            .values()
            .filter(|m| {
                self.parents
                    .get(&m.parent)
                    .is_some_and(|p| p.spec.pci.as_deref() == Some(bdf))
            })
            .map(|m| m.group)
            .collect()
    }

    /// Unregisters every mdev parent on PCI function `bdf` (its driver is going away).
    fn unregister_parents_on(&mut self, bdf: &str) {
        let names: Vec<String> = self
            .parents
            .values()
            .filter(|p| p.spec.pci.as_deref() == Some(bdf))
            .map(|p| p.spec.name.clone())
            .collect();
        for name in names {
            self.unregister_parent(&name);
        }
    }

    fn unbind_now(&mut self, bdf: &str) {
        self.unregister_parents_on(bdf);
        let numvfs = self
            .pci
            .get(bdf)
            .and_then(|p| p.sriov.as_ref())
            .map_or(0, |s| s.numvfs);
        if numvfs > 0 {
            self.disable_vfs(bdf);
        }
        let Some(pci) = self.pci.get_mut(bdf) else {
            return;
        };
        let Some(driver) = pci.driver.take() else {
            return;
        };
        let dir = pci.dir.clone();
        let group = pci.group;
        let vfio_index = pci.vfio_index.take();
        pci.nvidia_current = 0;
        self.tree.remove(&join(&dir, "nvidia"));
        if let Some(index) = vfio_index {
            self.tree.remove(&join(&dir, "vfio-dev"));
            self.vfio_indexes.remove(&index);
            self.emit(
                UeventAction::Remove,
                &format!("{dir}/vfio-dev/vfio{index}"),
                "vfio-dev",
                &[],
            );
        }
        self.kill_holders_if_no_vfio(group);
        self.sync_group_node(group);
        self.tree.remove(&join(&dir, "driver"));
        self.tree
            .remove(&format!("{SYS_PCI_DRIVERS}/{driver}/{bdf}"));
        self.emit(
            UeventAction::Unbind,
            &dir,
            "pci",
            &[("PCI_SLOT_NAME", bdf.to_string())],
        );
    }

    fn kill_holders_if_no_vfio(&mut self, group: u32) {
        let still = self
            .groups
            .get(&group)
            .is_some_and(|g| g.members.iter().any(|d| self.is_vfio_device(d)));
        if !still {
            self.kill_holders(group);
        }
    }

    fn vf_address(pf: &Pci, index: u16) -> Option<PciAddress> {
        let sriov = pf.sriov.as_ref()?;
        let rid = u32::from(pf.address.routing_id())
            + u32::from(sriov.spec.offset)
            + u32::from(sriov.spec.stride) * u32::from(index);
        u16::try_from(rid)
            .ok()
            .map(|rid| PciAddress::from_routing_id(pf.address.domain, rid))
    }

    fn enable_vfs(&mut self, bdf: &str, count: u16) {
        let Some(pf) = self.pci.get(bdf) else { return };
        let Some(sriov) = pf.sriov.as_ref() else {
            return;
        };
        let vf_driver = sriov.spec.vf_driver.clone();
        let vf_device = sriov.spec.vf_device;
        let autoprobe = sriov.autoprobe;
        let pf_dir = pf.dir.clone();
        let parent_dir = pf_dir
            .rsplit_once('/')
            .map(|(d, _)| d.to_string())
            .unwrap_or_default();
        let ids = self
            .topology
            .pci_devices
            .iter()
            .find(|d| d.bdf == bdf)
            .map(|d| {
                (
                    d.vendor,
                    vf_device,
                    d.subsystem_vendor,
                    d.subsystem_device,
                    d.class,
                    d.numa_node,
                )
            })
            .unwrap_or((0, vf_device, 0, 0, 0, -1));
        let addresses: Vec<PciAddress> =
            (0..count).filter_map(|i| Self::vf_address(pf, i)).collect();
        let mut vfs = Vec::new();
        for (index, address) in addresses.into_iter().enumerate() {
            let vf_bdf = address.to_string();
            let dir = join(&parent_dir, &vf_bdf);
            let group = self.alloc_group();
            self.add_pci(
                &vf_bdf,
                Pci {
                    address,
                    dir: dir.clone(),
                    group,
                    native_driver: vf_driver.clone(),
                    driver: None,
                    driver_override: None,
                    sriov: None,
                    physfn: Some(bdf.to_string()),
                    vfio_index: None,
                    nvidia_current: 0,
                },
                ids,
            );
            self.tree
                .add_relative_link(&format!("{pf_dir}/virtfn{index}"), &dir);
            self.emit(
                UeventAction::Add,
                &dir,
                "pci",
                &[
                    ("PCI_SLOT_NAME", vf_bdf.clone()),
                    ("PCI_ID", format!("{:04X}:{:04X}", ids.0, ids.1)),
                ],
            );
            vfs.push(vf_bdf);
        }
        if let Some(sriov) = self.pci.get_mut(bdf).and_then(|p| p.sriov.as_mut()) {
            sriov.numvfs = count;
            sriov.vfs = vfs.clone();
        }
        if autoprobe {
            for vf in &vfs {
                self.probe(vf);
            }
        }
    }

    fn disable_vfs(&mut self, bdf: &str) {
        let Some(pf) = self.pci.get_mut(bdf) else {
            return;
        };
        let pf_dir = pf.dir.clone();
        let Some(sriov) = pf.sriov.as_mut() else {
            return;
        };
        let vfs = std::mem::take(&mut sriov.vfs);
        sriov.numvfs = 0;
        for (index, vf) in vfs.iter().enumerate().rev() {
            self.unbind_now(vf);
            let Some(state) = self.pci.remove(vf) else {
                continue;
            };
            self.tree.remove(&format!("{pf_dir}/virtfn{index}"));
            self.tree.remove(&join(SYS_PCI_DEVICES, vf));
            self.tree.remove(&state.dir);
            self.kill_holders(state.group);
            self.group_leave(state.group, &state.dir, vf);
            self.sync_group_node(state.group);
            self.emit(
                UeventAction::Remove,
                &state.dir,
                "pci",
                &[("PCI_SLOT_NAME", vf.clone())],
            );
        }
    }

    fn numvfs_store(&mut self, bdf: &str, data: &[u8]) -> Store {
        // sriov_numvfs_store() turns every kstrtou16() failure (overflow too) into EINVAL.
        let Ok(requested) = kstrtoul(data, 0, u64::from(u16::MAX)) else {
            return Store::Done(Err(libc::EINVAL));
        };
        let requested = requested as u16;
        let Some(pf) = self.pci.get(bdf) else {
            return Store::Done(Err(libc::ENODEV));
        };
        let Some(sriov) = pf.sriov.as_ref() else {
            return Store::Done(Err(libc::ENODEV));
        };
        if requested > sriov.spec.total_vfs {
            return Store::Done(Err(libc::ERANGE));
        }
        if requested == sriov.numvfs {
            return Store::Done(Ok(()));
        }
        let configurable = pf
            .driver
            .as_ref()
            .and_then(|d| self.drivers.get(d))
            .is_some_and(|d| d.sriov_configure);
        if !configurable {
            return Store::Done(Err(libc::ENOENT));
        }
        if requested == 0 {
            let held: Vec<u32> = sriov
                .vfs
                .iter()
                .filter_map(|vf| self.pci.get(vf))
                .map(|vf| vf.group)
                .filter(|g| self.group_held(*g))
                .collect();
            if !held.is_empty() {
                return Store::WaitThen {
                    groups: held,
                    then: Deferred::DisableVfs(bdf.to_string()),
                };
            }
            self.disable_vfs(bdf);
            return Store::Done(Ok(()));
        }
        if sriov.numvfs != 0 {
            return Store::Done(Err(libc::EBUSY));
        }
        self.enable_vfs(bdf, requested);
        Store::Done(Ok(()))
    }

    fn find_pci_by_name(&self, data: &[u8]) -> Option<String> {
        self.pci.keys().find(|bdf| sysfs_streq(data, bdf)).cloned()
    }

    fn bind_store(&mut self, driver: &str, data: &[u8]) -> Result<(), i32> {
        let Some(bdf) = self.find_pci_by_name(data) else {
            return Err(libc::ENODEV);
        };
        let Some(pci) = self.pci.get(&bdf) else {
            return Err(libc::ENODEV);
        };
        if !self.driver_matches(pci, driver) {
            return Err(libc::ENODEV);
        }
        if pci.driver.is_some() {
            return Err(libc::EBUSY);
        }
        self.bind(&bdf, driver);
        Ok(())
    }

    fn unbind_store(&mut self, driver: &str, data: &[u8]) -> Store {
        let Some(bdf) = self.find_pci_by_name(data) else {
            return Store::Done(Err(libc::ENODEV));
        };
        if self.pci.get(&bdf).and_then(|p| p.driver.as_deref()) != Some(driver) {
            return Store::Done(Err(libc::ENODEV));
        }
        let groups = self.unbind_waits_for(&bdf);
        if !groups.is_empty() {
            return Store::WaitThen {
                groups,
                then: Deferred::Unbind(bdf),
            };
        }
        self.unbind_now(&bdf);
        Store::Done(Ok(()))
    }

    fn override_store(&mut self, bdf: &str, data: &[u8]) -> Result<(), i32> {
        // driver_set_override(): PAGE_SIZE - 1 limit, cut at the first newline, empty clears.
        if data.len() >= 4095 {
            return Err(libc::EINVAL);
        }
        let text = data.split(|&b| b == 0).next().unwrap_or_default();
        let text = text.split(|&b| b == b'\n').next().unwrap_or_default();
        let Some(pci) = self.pci.get_mut(bdf) else {
            return Err(libc::ENODEV);
        };
        pci.driver_override = if text.is_empty() {
            None
        } else {
            Some(String::from_utf8_lossy(text).into_owned())
        };
        Ok(())
    }

    // ----- NVIDIA vendor-VFIO vGPU on VFs -----

    fn nvidia_pf(&self, vf: &str) -> Option<&Pci> {
        self.pci
            .get(vf)
            .and_then(|v| v.physfn.as_ref())
            .and_then(|pf| self.pci.get(pf))
    }

    fn nvidia_in_use(&self, pf: &Pci) -> BTreeMap<u32, u32> {
        let mut counts = BTreeMap::new();
        for vf in pf
            .sriov
            .iter()
            .flat_map(|s| s.vfs.iter())
            .filter_map(|v| self.pci.get(v))
        {
            if vf.nvidia_current != 0 {
                *counts.entry(vf.nvidia_current).or_insert(0) += 1;
            }
        }
        counts
    }

    fn nvidia_creatable(&self, vf: &str) -> String {
        let mut out = String::from("ID    : vGPU Name\n");
        let (Some(state), Some(pf)) = (self.pci.get(vf), self.nvidia_pf(vf)) else {
            return out;
        };
        if state.nvidia_current != 0 {
            return out;
        }
        let in_use = self.nvidia_in_use(pf);
        for vgpu in pf
            .sriov
            .iter()
            .flat_map(|s| s.spec.nvidia_vgpu_types.iter())
        {
            let other_in_use = in_use.keys().any(|&id| id != vgpu.id);
            let count = in_use.get(&vgpu.id).copied().unwrap_or(0);
            if !other_in_use && count < vgpu.max_instances {
                out.push_str(&format!("{:<5} : {}\n", vgpu.id, vgpu.name));
            }
        }
        out
    }

    fn nvidia_current_store(&mut self, vf: &str, data: &[u8]) -> Result<(), i32> {
        let requested =
            u32::try_from(kstrtoul(data, 0, u64::from(u32::MAX)).map_err(|_| libc::EINVAL)?)
                .map_err(|_| libc::EINVAL)?;
        let Some(state) = self.pci.get(vf) else {
            return Err(libc::ENODEV);
        };
        if self.group_held(state.group) {
            return Err(libc::EBUSY);
        }
        let current = state.nvidia_current;
        let group = state.group;
        if requested == 0 {
            if let Some(state) = self.pci.get_mut(vf) {
                state.nvidia_current = 0;
            }
            self.sync_group_node(group);
            return Ok(());
        }
        if current != 0 {
            return Err(libc::EBUSY);
        }
        let Some(pf) = self.nvidia_pf(vf) else {
            return Err(libc::ENODEV);
        };
        let Some(vgpu) = pf
            .sriov
            .iter()
            .flat_map(|s| s.spec.nvidia_vgpu_types.iter())
            .find(|t| t.id == requested)
        else {
            return Err(libc::ENODEV);
        };
        let in_use = self.nvidia_in_use(pf);
        if in_use.keys().any(|&id| id != requested) {
            return Err(libc::EINVAL);
        }
        if in_use.get(&requested).copied().unwrap_or(0) >= vgpu.max_instances {
            return Err(libc::ENOSPC);
        }
        if let Some(state) = self.pci.get_mut(vf) {
            state.nvidia_current = requested;
        }
        self.sync_group_node(group);
        Ok(())
    }

    // ----- holders -----

    /// Opens `/dev/vfio/<group>` as a new process: ENOENT without the node, EBUSY if held.
    pub(crate) fn open_group(&mut self, group: u32, comm: &str) -> Result<u32, i32> {
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
        self.tree.add_link(&join(&dir, "fd/3"), "/dev/vfio/vfio");
        self.tree
            .add_link(&join(&dir, "fd/4"), format!("/dev/vfio/{group}"));
        self.tree
            .add_link(&join(&dir, "fd/5"), "anon_inode:[vfio-device]");
        self.processes.insert(pid, Process { group });
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
        };
        Store::Done(result)
    }

    /// Finishes an operation once its groups are free.
    pub(crate) fn complete(&mut self, deferred: &Deferred) {
        match deferred {
            Deferred::RemoveMdev(uuid) => self.remove_mdev_now(uuid),
            Deferred::DisableVfs(bdf) => self.disable_vfs(bdf),
            Deferred::Unbind(bdf) => self.unbind_now(bdf),
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
