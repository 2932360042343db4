//! What the service exports, computed from the engine: one record per object, with the
//! property values the D-Bus interfaces serve. Comparing two models gives the objects to add,
//! remove and the properties that changed.
//!
//! [`InstanceData`] is not a second instance record: the one record is the engine's persisted
//! `mdev_engine::state::InstanceRecord` (seen through `InstanceInfo`, which adds what the host
//! shows now). `InstanceData` is that record as the `Instance` interface's property values
//! (strings and sentinels where D-Bus has no option type, the parent's object path, the
//! scheduling properties computed from the parent's schedule), and the `ListInstances` entry
//! (`dbus_api::wire::InstanceEntry`) is made from it field for field ([`instance_entry`]).

use std::collections::{BTreeSet, HashMap};

use dbus_api::path;
use zbus::{OwnedObjectPath, Variant};

use mdev_engine::{Engine, EngineError, InstanceInfo, Inventory, ProfileSummary};

/// A record shared between the service (which replaces it when the host changes) and the
/// interface object serving it.
pub type Shared<T> = std::sync::Arc<std::sync::RwLock<T>>;

/// A record whose fields are the properties of one interface.
pub trait Properties: Clone + PartialEq + Send + Sync + 'static {
    /// `(name, value)` of every property, in introspection order.
    fn properties(&self) -> Vec<(&'static str, Variant<'static>)>;
}

fn paths(list: &[OwnedObjectPath]) -> Variant<'static> {
    Variant::from(
        list.iter()
            .map(|p| p.clone().into_inner())
            .collect::<Vec<_>>(),
    )
}

/// A parent device (mdev parent or SR-IOV PF).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParentData {
    /// sysfs name (the key).
    pub name: String,
    /// PCI address, empty for a non-PCI parent.
    pub pci_address: String,
    /// PCI vendor id (0 when not PCI).
    pub vendor_id: u16,
    /// PCI device id.
    pub device_id: u16,
    /// Bound driver.
    pub driver: String,
    /// NUMA node (-1 unknown).
    pub numa_node: i32,
    /// `mdev`, `sriov`; `passthrough` alone for a GPU that hosts no vGPU but can be passed
    /// through whole; empty for one the service can do nothing with.
    pub modes: Vec<String>,
    /// Why no vGPU can be made on it (empty when one can).
    pub reason: String,
    /// Type objects.
    pub types: Vec<OwnedObjectPath>,
    /// Instance objects.
    pub instances: Vec<OwnedObjectPath>,
    /// Scheduling properties.
    pub schedule: super::schedule::ParentScheduleData,
}

impl Properties for ParentData {
    fn properties(&self) -> Vec<(&'static str, Variant<'static>)> {
        let mut properties = vec![
            ("Name", Variant::from(self.name.clone())),
            ("PciAddress", Variant::from(self.pci_address.clone())),
            ("VendorId", Variant::from(self.vendor_id)),
            ("DeviceId", Variant::from(self.device_id)),
            ("Driver", Variant::from(self.driver.clone())),
            ("NumaNode", Variant::from(self.numa_node)),
            ("Modes", Variant::from(self.modes.clone())),
            ("Reason", Variant::from(self.reason.clone())),
            ("Types", paths(&self.types)),
            ("Instances", paths(&self.instances)),
        ];
        properties.extend(self.schedule.properties());
        properties
    }
}

/// SR-IOV state of a PF.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SriovData {
    /// PF address.
    pub pf: String,
    /// `sriov_totalvfs`.
    pub total_vfs: u32,
    /// `sriov_numvfs`.
    pub num_vfs: u32,
    /// Enabled VF addresses.
    pub vfs: Vec<String>,
}

impl Properties for SriovData {
    fn properties(&self) -> Vec<(&'static str, Variant<'static>)> {
        vec![
            ("TotalVfs", Variant::from(self.total_vfs)),
            ("NumVfs", Variant::from(self.num_vfs)),
            ("Vfs", Variant::from(self.vfs.clone())),
        ]
    }
}

/// An mdev type of a parent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypeData {
    /// Type id.
    pub id: String,
    /// `name`.
    pub name: String,
    /// `description`.
    pub description: String,
    /// `device_api`.
    pub device_api: String,
    /// Parent object.
    pub parent: OwnedObjectPath,
    /// Parent sysfs name.
    pub parent_name: String,
    /// `available_instances`.
    pub available_instances: u32,
    /// Instance objects of this type.
    pub instances: Vec<OwnedObjectPath>,
}

impl Properties for TypeData {
    fn properties(&self) -> Vec<(&'static str, Variant<'static>)> {
        vec![
            ("Id", Variant::from(self.id.clone())),
            ("Name", Variant::from(self.name.clone())),
            ("Description", Variant::from(self.description.clone())),
            ("DeviceApi", Variant::from(self.device_api.clone())),
            ("Parent", Variant::from(self.parent.clone().into_inner())),
            ("ParentName", Variant::from(self.parent_name.clone())),
            (
                "AvailableInstances",
                Variant::from(self.available_instances),
            ),
            ("Instances", paths(&self.instances)),
        ]
    }
}

/// An instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceData {
    /// UUID (the key).
    pub uuid: String,
    /// `mdev`, `vf`, `nvidia-vf` or `passthrough` (`dbus_api::names::instance_kind`).
    pub kind: String,
    /// VF address for VF kinds; the GPU's for a pass-through.
    pub pci_address: String,
    /// Parent object.
    pub parent: OwnedObjectPath,
    /// Parent sysfs name.
    pub parent_name: String,
    /// Type id.
    pub type_id: String,
    /// Profile.
    pub profile: String,
    /// Exists now.
    pub active: bool,
    /// Definition kept.
    pub persistent: bool,
    /// Created at start.
    pub autostart: bool,
    /// `created`, `adopted` or empty (not managed).
    pub owner: String,
    /// Holder domain name.
    pub holder: String,
    /// Holder domain UUID.
    pub holder_uuid: String,
    /// IOMMU group or -1.
    pub iommu_group: i32,
    /// Scheduling weight, 0 when unset.
    pub weight: u32,
    /// Pass-through: the members of the GPU's IOMMU group the service bound to `vfio-pci`
    /// (the GPU and its card's other functions, never bridges), by address; empty otherwise.
    pub group_members: Vec<String>,
    /// The other scheduling properties.
    pub schedule: super::schedule::InstanceScheduleData,
}

impl Properties for InstanceData {
    fn properties(&self) -> Vec<(&'static str, Variant<'static>)> {
        vec![
            ("Uuid", Variant::from(self.uuid.clone())),
            ("Kind", Variant::from(self.kind.clone())),
            ("PciAddress", Variant::from(self.pci_address.clone())),
            ("Parent", Variant::from(self.parent.clone().into_inner())),
            ("ParentName", Variant::from(self.parent_name.clone())),
            ("Type", Variant::from(self.type_id.clone())),
            ("Profile", Variant::from(self.profile.clone())),
            ("Active", Variant::from(self.active)),
            ("Persistent", Variant::from(self.persistent)),
            ("Autostart", Variant::from(self.autostart)),
            ("Owner", Variant::from(self.owner.clone())),
            ("Holder", Variant::from(self.holder.clone())),
            ("HolderUuid", Variant::from(self.holder_uuid.clone())),
            ("IommuGroup", Variant::from(self.iommu_group)),
            ("Weight", Variant::from(self.weight)),
            ("GroupMembers", Variant::from(self.group_members.clone())),
        ]
        .into_iter()
        .chain(self.schedule.properties())
        .collect()
    }
}

/// A profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileData {
    /// Name (the key).
    pub name: String,
    /// Description.
    pub description: String,
}

impl Properties for ProfileData {
    fn properties(&self) -> Vec<(&'static str, Variant<'static>)> {
        vec![
            ("Name", Variant::from(self.name.clone())),
            ("Description", Variant::from(self.description.clone())),
        ]
    }
}

/// Every exported object, by path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Model {
    /// Parents.
    pub parents: HashMap<OwnedObjectPath, ParentData>,
    /// The SR-IOV interface of parents that are PFs.
    pub sriov: HashMap<OwnedObjectPath, SriovData>,
    /// mdev types.
    pub types: HashMap<OwnedObjectPath, TypeData>,
    /// Instances.
    pub instances: HashMap<OwnedObjectPath, InstanceData>,
    /// Profiles.
    pub profiles: HashMap<OwnedObjectPath, ProfileData>,
}

impl Model {
    /// Reads the engine (blocking: call from `spawn_blocking`).
    pub fn read(engine: &Engine) -> Result<Self, EngineError> {
        Ok(Self::read_in(engine, &engine.inventory()?))
    }

    /// [`Model::read`] on a discovery the caller has just made (the start-up reconcile's).
    pub fn read_in(engine: &Engine, inventory: &Inventory) -> Self {
        let instances = engine.instances_in(inventory);
        let profiles = engine.profiles();
        let mut model = Self::build(inventory, &instances, &profiles);
        super::schedule::fill(&mut model, engine, inventory);
        fill_group_members(&mut model, engine);
        fill_missing_sriov_manage(&mut model, engine, inventory);
        model
    }

    /// [`Model::read_in`] that also returns the discovery it was built from (the daemon keeps
    /// it per parent, [`split_by_parent`]).
    pub fn read_with_inventory(engine: &Engine) -> Result<(Self, Inventory), EngineError> {
        let inventory = engine.inventory()?;
        Ok((Self::read_in(engine, &inventory), inventory))
    }

    /// One parent read from the host alone: a model holding only its records (the parent, its
    /// SR-IOV interface, its types; the parent's `Instances` and scheduling left empty for
    /// the caller) and the discovery of it; both empty when the parent is gone. No other
    /// device is read.
    pub fn read_parent(engine: &Engine, name: &str) -> Result<(Self, Inventory), EngineError> {
        let host = engine.host().as_ref();
        let mut inventory = Inventory::default();
        if let Some(parent) =
            mdev_host::discovery::read_mdev_parent(host, name).map_err(EngineError::Discovery)?
        {
            inventory.mdev_parents.push(parent);
        }
        if let Ok(address) = name.parse::<mdev_host::discovery::names::PciAddress>() {
            if let Some(pf) = mdev_host::discovery::read_sriov_pf(host, address) {
                inventory.sriov_pfs.push(pf);
            }
            if inventory.mdev_parents.is_empty() && inventory.sriov_pfs.is_empty() {
                if let Some(gpu) = mdev_host::discovery::gpus::read_other_gpu(host, address) {
                    inventory.other_gpus.push(gpu);
                }
            }
        }
        let mut model = Self::build(&inventory, &[], &[]);
        fill_missing_sriov_manage(&mut model, engine, &inventory);
        Ok((model, inventory))
    }

    /// Builds the model from engine answers.
    pub fn build(
        inventory: &Inventory,
        instances: &[InstanceInfo],
        profiles: &[ProfileSummary],
    ) -> Self {
        let mut model = Model::default();
        // Each parent's instance objects, in the instances' order (one pass, not one per parent).
        let mut instances_of: HashMap<&str, Vec<OwnedObjectPath>> = HashMap::new();
        for info in instances {
            instances_of
                .entry(info.parent.as_str())
                .or_default()
                .push(path::mdev_instance_path(&info.uuid));
        }
        let mut names: BTreeSet<String> = BTreeSet::new();
        names.extend(inventory.mdev_parents.iter().map(|p| p.name.clone()));
        names.extend(
            inventory
                .sriov_pfs
                .iter()
                .map(|p| p.function.address.to_string()),
        );

        names.extend(
            inventory
                .other_gpus
                .iter()
                .map(|gpu| gpu.function.address.to_string()),
        );

        for name in &names {
            let mdev = inventory.mdev_parents.iter().find(|p| &p.name == name);
            let other_gpu = inventory
                .other_gpus
                .iter()
                .find(|gpu| &gpu.function.address.to_string() == name);
            let pf = inventory
                .sriov_pfs
                .iter()
                .find(|p| &p.function.address.to_string() == name);
            let function = mdev
                .and_then(|m| m.pci.as_ref())
                .or(pf.map(|p| &p.function))
                .or(other_gpu.map(|gpu| &gpu.function));
            let parent_path = path::parent_path(name);
            let mut modes = Vec::new();
            if mdev.is_some() {
                modes.push("mdev".to_string());
            }
            if pf.is_some() {
                modes.push("sriov".to_string());
            }
            if other_gpu.is_some_and(|gpu| gpu.passthrough) {
                modes.push("passthrough".to_string());
            }
            let mut type_paths = Vec::new();
            for mdev_type in mdev.map(|m| m.types.as_slice()).unwrap_or_default() {
                let type_path = path::mdev_type_path(name, &mdev_type.id);
                type_paths.push(type_path.clone());
                model.types.insert(type_path, type_data(name, mdev_type));
            }
            let instance_paths = instances_of.remove(name.as_str()).unwrap_or_default();
            model.parents.insert(
                parent_path.clone(),
                ParentData {
                    name: name.clone(),
                    pci_address: function.map(|f| f.address.to_string()).unwrap_or_default(),
                    vendor_id: function.and_then(|f| f.vendor_id).unwrap_or(0),
                    device_id: function.and_then(|f| f.device_id).unwrap_or(0),
                    driver: function.and_then(|f| f.driver.clone()).unwrap_or_default(),
                    numa_node: function.and_then(|f| f.numa_node).unwrap_or(-1),
                    modes,
                    reason: other_gpu.map(|gpu| gpu.reason()).unwrap_or_default(),
                    types: type_paths,
                    instances: instance_paths,
                    schedule: Default::default(),
                },
            );
            if let Some(pf) = pf {
                model.sriov.insert(
                    parent_path,
                    SriovData {
                        pf: name.clone(),
                        total_vfs: pf.total_vfs,
                        num_vfs: pf.num_vfs,
                        vfs: pf
                            .vfs
                            .iter()
                            .map(|vf| vf.function.address.to_string())
                            .collect(),
                    },
                );
            }
        }

        for info in instances {
            model
                .instances
                .insert(path::mdev_instance_path(&info.uuid), instance_data(info));
        }
        for profile in profiles {
            model.profiles.insert(
                path::profile_path(&profile.name),
                ProfileData {
                    name: profile.name.clone(),
                    description: profile.description.clone().unwrap_or_default(),
                },
            );
        }
        model
    }
}

/// The `Reason` of an NVIDIA PF without VFs on a host without `sriov-manage`: its VFs (and so
/// its vGPUs) cannot be made, although the kernel shows its SR-IOV capability.
fn fill_missing_sriov_manage(model: &mut Model, engine: &Engine, inventory: &Inventory) {
    let tool = &engine.config().nvidia_sriov_manage;
    let mut installed = None;
    for pf in &inventory.sriov_pfs {
        if !mdev_engine::nvidia_sriov::is_nvidia_pf(pf) || pf.num_vfs > 0 {
            continue;
        }
        if !*installed.get_or_insert_with(|| engine.host().commands().installed(tool)) {
            let name = pf.function.address.to_string();
            if let Some(parent) = model.parents.get_mut(&path::parent_path(&name)) {
                parent.reason = format!(
                    "{} is not installed, so no VFs and no vGPU (it ships with {})",
                    tool.display(),
                    mdev_engine::nvidia_sriov::SRIOV_MANAGE_PACKAGE
                );
            }
        }
    }
}

/// A discovery cut into one inventory per parent (each with that parent's mdev parent, PF or
/// other-GPU entry, and no mdevs): what the daemon keeps so one parent's change re-reads that
/// parent alone.
pub fn split_by_parent(inventory: &Inventory) -> HashMap<String, Inventory> {
    let mut parts: HashMap<String, Inventory> = HashMap::new();
    for parent in &inventory.mdev_parents {
        parts
            .entry(parent.name.clone())
            .or_default()
            .mdev_parents
            .push(parent.clone());
    }
    for pf in &inventory.sriov_pfs {
        parts
            .entry(pf.function.address.to_string())
            .or_default()
            .sriov_pfs
            .push(pf.clone());
    }
    for gpu in &inventory.other_gpus {
        parts
            .entry(gpu.function.address.to_string())
            .or_default()
            .other_gpus
            .push(gpu.clone());
    }
    parts
}

/// The record of one instance read from the engine: `None` when it is gone. Its scheduling
/// properties come from its parent's schedule ([`super::schedule::instance_schedule`]).
pub fn read_instance(engine: &Engine, uuid: &str) -> Option<InstanceData> {
    let info = engine.instance(uuid).ok()?;
    let mut data = instance_data(&info);
    if data.kind == dbus_api::names::instance_kind::PASSTHROUGH {
        let mut members: Vec<_> = engine
            .passthrough_binding(&data.uuid)
            .map(|binding| binding.members.iter().map(|m| m.address).collect())
            .unwrap_or_default();
        members.sort();
        data.group_members = members.iter().map(ToString::to_string).collect();
    }
    Some(data)
}

/// The `TypeData` of one mdev type as discovery read it (its `Instances` from its devices).
pub fn type_data(parent: &str, mdev_type: &mdev_host::discovery::MdevType) -> TypeData {
    TypeData {
        id: mdev_type.id.clone(),
        name: mdev_type.name.clone().unwrap_or_default(),
        description: mdev_type.description.clone().unwrap_or_default(),
        device_api: mdev_type.device_api.clone().unwrap_or_default(),
        parent: path::parent_path(parent),
        parent_name: parent.to_owned(),
        available_instances: mdev_type.available_instances,
        instances: mdev_type
            .devices
            .iter()
            .map(|uuid| path::mdev_instance_path(uuid))
            .collect(),
    }
}

/// `GroupMembers` of the pass-through instances, from their group bindings (sorted by address,
/// so the GPU's function 0 comes first).
fn fill_group_members(model: &mut Model, engine: &Engine) {
    for data in model.instances.values_mut() {
        if data.kind != dbus_api::names::instance_kind::PASSTHROUGH {
            continue;
        }
        let mut members: Vec<_> = engine
            .passthrough_binding(&data.uuid)
            .map(|binding| binding.members.iter().map(|m| m.address).collect())
            .unwrap_or_default();
        members.sort();
        data.group_members = members.iter().map(ToString::to_string).collect();
    }
}

fn instance_data(info: &InstanceInfo) -> InstanceData {
    use mdev_engine::Owner;
    InstanceData {
        uuid: info.uuid.clone(),
        kind: dbus_api::names::instance_kind::name(info.kind).to_owned(),
        pci_address: info.vf.map(|a| a.to_string()).unwrap_or_default(),
        parent: path::parent_path(&info.parent),
        parent_name: info.parent.clone(),
        type_id: info.type_id.clone(),
        profile: info.profile.clone().unwrap_or_default(),
        active: info.active,
        persistent: info.persistent,
        autostart: info.autostart,
        owner: match info.owner {
            Some(Owner::CreatedByUs) => "created",
            Some(Owner::Adopted) => "adopted",
            None => "",
        }
        .to_string(),
        holder: info
            .claim
            .as_ref()
            .map(|c| c.domain_name.clone())
            .unwrap_or_default(),
        holder_uuid: info
            .claim
            .as_ref()
            .map(|c| c.domain_uuid.to_string())
            .unwrap_or_default(),
        iommu_group: info
            .iommu_group
            .and_then(|g| i32::try_from(g).ok())
            .unwrap_or(-1),
        weight: info.scheduling.weight.unwrap_or(0),
        group_members: Vec::new(),
        schedule: Default::default(),
    }
}

/// The replies of `Manager.ListInstances` and `Manager.ListTypes`: built once from the exported
/// records (no engine call) and dropped whenever the exported objects change, so repeated
/// listings of an unchanged host cost one clone of a prepared answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Every instance, sorted by parent then UUID.
    pub instances: Vec<dbus_api::wire::InstanceEntry>,
    /// Every mdev type, sorted by parent then id.
    pub types: Vec<dbus_api::wire::TypeEntry>,
    /// The parents' names (for the `parent` option of `ListTypes`).
    pub parents: BTreeSet<String>,
}

impl Listing {
    /// The listing of these entries, sorted as the fields say.
    pub fn new(
        parents: BTreeSet<String>,
        mut types: Vec<dbus_api::wire::TypeEntry>,
        mut instances: Vec<dbus_api::wire::InstanceEntry>,
    ) -> Self {
        types.sort_by(|a, b| (&a.parent_name, &a.id).cmp(&(&b.parent_name, &b.id)));
        instances.sort_by(|a, b| (&a.parent_name, &a.uuid).cmp(&(&b.parent_name, &b.uuid)));
        Listing {
            instances,
            types,
            parents,
        }
    }
}

/// The `ListTypes` entry of an exported type.
pub fn type_entry(path: &OwnedObjectPath, data: &TypeData) -> dbus_api::wire::TypeEntry {
    dbus_api::wire::TypeEntry {
        object: path.clone(),
        id: data.id.clone(),
        name: data.name.clone(),
        description: data.description.clone(),
        device_api: data.device_api.clone(),
        parent_name: data.parent_name.clone(),
        available_instances: data.available_instances,
        instances: data.instances.clone(),
    }
}

/// The `ListInstances` entry of an exported instance.
pub fn instance_entry(
    path: &OwnedObjectPath,
    data: &InstanceData,
) -> dbus_api::wire::InstanceEntry {
    dbus_api::wire::InstanceEntry {
        object: path.clone(),
        uuid: data.uuid.clone(),
        kind: data.kind.clone(),
        pci_address: data.pci_address.clone(),
        parent_name: data.parent_name.clone(),
        mdev_type: data.type_id.clone(),
        profile: data.profile.clone(),
        active: data.active,
        persistent: data.persistent,
        autostart: data.autostart,
        owner: data.owner.clone(),
        holder: data.holder.clone(),
        holder_uuid: data.holder_uuid.clone(),
        iommu_group: data.iommu_group,
        weight: data.weight,
        group_members: data.group_members.clone(),
    }
}

/// The properties of `new` that differ from `old`.
pub fn changed_properties<P: Properties>(
    old: &P,
    new: &P,
) -> Vec<(&'static str, Variant<'static>)> {
    old.properties()
        .into_iter()
        .zip(new.properties())
        .filter(|((_, a), (_, b))| a != b)
        .map(|(_, new)| new)
        .collect()
}
