//! Plain records of the service's objects, read from their D-Bus properties.
//!
//! These are what `vgpuctl --json` prints, so their field names are a stable, documented format
//! (docs/vgpuctl.md): fields are only ever added.
//!
//! One record per concept, as far as the wire allows. An instance's one record is the engine's
//! persisted `mdev_engine::state::InstanceRecord`; on the bus it is the `Instance` interface's
//! properties, and [`InstanceEntry`] is exactly those properties in `ListInstances`' fixed
//! signature `(ossssssbbbsssiuas)` (the daemon builds both from one `InstanceData`). The
//! client keeps one more, [`InstanceRecord`], because the wire cannot carry what it holds:
//! the object path as an owned string, and the field names `vgpuctl --json` documents
//! (`parent`, `type`), which differ from the entry's property names and may not change. It is
//! made from an entry (or from the properties, the same values) field for field, nothing added.
//! `Kind` carries every [`vgpu_types::InstanceKind`] (`names::instance_kind`), pass-through
//! included.

use crate::names::interface;
use crate::proxy::PropertyMap;
use serde::Serialize;
use std::collections::HashMap;
use zbus::{OwnedObjectPath, OwnedVariant};

/// A property was missing or had the wrong type.
#[derive(Debug, thiserror::Error)]
#[error("object {path}: property {interface}.{property} is missing or has the wrong type")]
pub struct PropertyError {
    /// The object.
    pub path: String,
    /// The interface.
    pub interface: &'static str,
    /// The property.
    pub property: &'static str,
}

struct Props<'a> {
    path: &'a str,
    interface: &'static str,
    map: &'a PropertyMap,
}

impl<'a> Props<'a> {
    fn get<T>(&self, property: &'static str) -> Result<T, PropertyError>
    where
        T: TryFrom<OwnedVariant>,
    {
        self.map
            .get(property)
            .and_then(|value| value.try_clone().ok())
            .and_then(|value| T::try_from(value).ok())
            .ok_or_else(|| PropertyError {
                path: self.path.to_string(),
                interface: self.interface,
                property,
            })
    }

    /// A property newer services publish: absent is its default, a wrong type an error.
    fn get_or_default<T>(&self, property: &'static str) -> Result<T, PropertyError>
    where
        T: TryFrom<OwnedVariant> + Default,
    {
        if self.map.contains_key(property) {
            self.get(property)
        } else {
            Ok(T::default())
        }
    }

    fn paths(&self, property: &'static str) -> Result<Vec<String>, PropertyError> {
        Ok(path_strings(self.get(property)?))
    }
}

fn path_strings(paths: Vec<OwnedObjectPath>) -> Vec<String> {
    paths.into_iter().map(|p| p.as_str().to_string()).collect()
}

/// [`Snapshot`] order of types: parent, then id.
fn sort_types(types: &mut [MdevTypeRecord]) {
    types.sort_by(|a, b| (&a.parent, &a.id).cmp(&(&b.parent, &b.id)));
}

/// [`Snapshot`] order of instances: parent, then UUID.
fn sort_instances(instances: &mut [InstanceRecord]) {
    instances.sort_by(|a, b| (&a.parent, &a.uuid).cmp(&(&b.parent, &b.uuid)));
}

/// A parent device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParentRecord {
    /// Object path.
    pub object: String,
    /// sysfs name (the key): the PCI address, or e.g. `mtty`.
    pub name: String,
    /// PCI address, empty for a non-PCI parent.
    pub pci_address: String,
    /// PCI vendor id.
    pub vendor_id: u16,
    /// PCI device id.
    pub device_id: u16,
    /// Bound driver.
    pub driver: String,
    /// NUMA node, -1 unknown.
    pub numa_node: i32,
    /// `mdev`, `sriov`; `passthrough` alone for a GPU that hosts no vGPU but can be passed
    /// through whole; empty when the service can do nothing with it.
    pub modes: Vec<String>,
    /// Why no vGPU can be made on it; empty when one can (and from services before it).
    pub reason: String,
    /// mdev type objects.
    pub types: Vec<String>,
    /// Instance objects.
    pub instances: Vec<String>,
    /// SR-IOV state, when the parent has SR-IOV.
    pub sriov: Option<SriovRecord>,
}

/// SR-IOV state of a parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SriovRecord {
    /// `sriov_totalvfs`.
    pub total_vfs: u32,
    /// `sriov_numvfs`.
    pub num_vfs: u32,
    /// VF PCI addresses.
    pub vfs: Vec<String>,
}

impl ParentRecord {
    /// Reads a parent from an object's interfaces.
    pub fn from_interfaces(
        path: &str,
        interfaces: &HashMap<String, PropertyMap>,
    ) -> Result<Self, PropertyError> {
        let empty = PropertyMap::new();
        let p = Props {
            path,
            interface: interface::PARENT,
            map: interfaces.get(interface::PARENT).unwrap_or(&empty),
        };
        let sriov = match interfaces.get(interface::SRIOV) {
            Some(map) => {
                let s = Props {
                    path,
                    interface: interface::SRIOV,
                    map,
                };
                Some(SriovRecord {
                    total_vfs: s.get("TotalVfs")?,
                    num_vfs: s.get("NumVfs")?,
                    vfs: s.get("Vfs")?,
                })
            }
            None => None,
        };
        Ok(ParentRecord {
            object: path.to_string(),
            name: p.get("Name")?,
            pci_address: p.get("PciAddress")?,
            vendor_id: p.get("VendorId")?,
            device_id: p.get("DeviceId")?,
            driver: p.get("Driver")?,
            numa_node: p.get("NumaNode")?,
            modes: p.get("Modes")?,
            reason: p.get_or_default("Reason")?,
            types: p.paths("Types")?,
            instances: p.paths("Instances")?,
            sriov,
        })
    }
}

/// An mdev type of a parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MdevTypeRecord {
    /// Object path.
    pub object: String,
    /// Type id (`nvidia-558`).
    pub id: String,
    /// `name` attribute.
    pub name: String,
    /// `description` attribute.
    pub description: String,
    /// `device_api` attribute.
    pub device_api: String,
    /// Parent sysfs name.
    pub parent: String,
    /// `available_instances`.
    pub available_instances: u32,
    /// Instance objects of this type.
    pub instances: Vec<String>,
}

impl MdevTypeRecord {
    /// Reads a type from its `MdevType` properties.
    pub fn from_properties(path: &str, map: &PropertyMap) -> Result<Self, PropertyError> {
        let p = Props {
            path,
            interface: interface::MDEV_TYPE,
            map,
        };
        Ok(MdevTypeRecord {
            object: path.to_string(),
            id: p.get("Id")?,
            name: p.get("Name")?,
            description: p.get("Description")?,
            device_api: p.get("DeviceApi")?,
            parent: p.get("ParentName")?,
            available_instances: p.get("AvailableInstances")?,
            instances: p.paths("Instances")?,
        })
    }
}

/// An instance (mdev or VF).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceRecord {
    /// Object path.
    pub object: String,
    /// UUID (the key).
    pub uuid: String,
    /// `mdev`, `vf`, `nvidia-vf` or `passthrough` ([`crate::names::instance_kind`]; a newer
    /// service may send a kind this build does not know: [`InstanceRecord::instance_kind`]).
    pub kind: String,
    /// VF PCI address, or the GPU's for a pass-through (empty for an mdev).
    pub pci_address: String,
    /// Parent sysfs name.
    pub parent: String,
    /// mdev type id.
    #[serde(rename = "type")]
    pub mdev_type: String,
    /// Profile name, empty if unknown.
    pub profile: String,
    /// Exists in the kernel now.
    pub active: bool,
    /// Definition kept when the device goes away.
    pub persistent: bool,
    /// Created when the service starts.
    pub autostart: bool,
    /// `created`, `adopted`, or empty (not managed by the service).
    pub owner: String,
    /// Holding domain's name, empty if free.
    pub holder: String,
    /// Holding domain's UUID, empty if free.
    pub holder_uuid: String,
    /// IOMMU group, -1 if unknown.
    pub iommu_group: i32,
    /// Scheduling weight, 0 when unset.
    pub weight: u32,
    /// Pass-through: the functions of the GPU's IOMMU group the service bound to `vfio-pci`
    /// (GPU first, no bridges); empty for the other kinds, and from a service older than the
    /// `GroupMembers` property.
    pub group_members: Vec<String>,
}

impl InstanceRecord {
    /// The instance's kind, when this build knows it.
    pub fn instance_kind(&self) -> Option<vgpu_types::InstanceKind> {
        crate::names::instance_kind::parse(&self.kind)
    }

    /// Reads an instance from its `Instance` properties.
    pub fn from_properties(path: &str, map: &PropertyMap) -> Result<Self, PropertyError> {
        let p = Props {
            path,
            interface: interface::INSTANCE,
            map,
        };
        Ok(InstanceRecord {
            object: path.to_string(),
            uuid: p.get("Uuid")?,
            kind: p.get("Kind")?,
            pci_address: p.get("PciAddress")?,
            parent: p.get("ParentName")?,
            mdev_type: p.get("Type")?,
            profile: p.get("Profile")?,
            active: p.get("Active")?,
            persistent: p.get("Persistent")?,
            autostart: p.get("Autostart")?,
            owner: p.get("Owner")?,
            holder: p.get("Holder")?,
            holder_uuid: p.get("HolderUuid")?,
            iommu_group: p.get("IommuGroup")?,
            weight: p.get("Weight")?,
            group_members: p.get_or_default("GroupMembers")?,
        })
    }
}

/// A catalog profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileRecord {
    /// Object path.
    pub object: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
}

impl ProfileRecord {
    /// Reads a profile from its `Profile` properties.
    pub fn from_properties(path: &str, map: &PropertyMap) -> Result<Self, PropertyError> {
        let p = Props {
            path,
            interface: interface::PROFILE,
            map,
        };
        Ok(ProfileRecord {
            object: path.to_string(),
            name: p.get("Name")?,
            description: p.get("Description")?,
        })
    }
}

/// Everything the service exports, read with one `GetManagedObjects` call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Parents, sorted by PCI address.
    pub parents: Vec<ParentRecord>,
    /// mdev types, sorted by parent then id.
    pub types: Vec<MdevTypeRecord>,
    /// Instances, sorted by parent then key.
    pub instances: Vec<InstanceRecord>,
    /// Profiles, sorted by name.
    pub profiles: Vec<ProfileRecord>,
}

impl Snapshot {
    /// Builds the snapshot from a `GetManagedObjects` reply.
    pub fn from_managed_objects(objects: zbus::fdo::ManagedObjects) -> Result<Self, PropertyError> {
        let mut snapshot = Snapshot::default();
        for (path, interfaces) in objects {
            let interfaces: HashMap<String, PropertyMap> = interfaces
                .into_iter()
                .map(|(name, props)| (name.as_str().to_string(), props))
                .collect();
            let path = path.as_str();
            if interfaces.contains_key(interface::PARENT) {
                snapshot
                    .parents
                    .push(ParentRecord::from_interfaces(path, &interfaces)?);
            }
            if let Some(map) = interfaces.get(interface::MDEV_TYPE) {
                snapshot
                    .types
                    .push(MdevTypeRecord::from_properties(path, map)?);
            }
            if let Some(map) = interfaces.get(interface::INSTANCE) {
                snapshot
                    .instances
                    .push(InstanceRecord::from_properties(path, map)?);
            }
            if let Some(map) = interfaces.get(interface::PROFILE) {
                snapshot
                    .profiles
                    .push(ProfileRecord::from_properties(path, map)?);
            }
        }
        snapshot.parents.sort_by(|a, b| a.name.cmp(&b.name));
        sort_types(&mut snapshot.types);
        sort_instances(&mut snapshot.instances);
        snapshot.profiles.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(snapshot)
    }

    /// The instance whose UUID (any case) or VF PCI address is `key`.
    pub fn instance(&self, key: &str) -> Option<&InstanceRecord> {
        find_instance(&self.instances, key)
    }

    /// The parent whose name (PCI address or sysfs name) is `name`.
    pub fn parent(&self, name: &str) -> Option<&ParentRecord> {
        let name = name.to_ascii_lowercase();
        self.parents
            .iter()
            .find(|p| p.name.to_ascii_lowercase() == name)
    }
}

/// One instance as `Manager.ListInstances` sends it, D-Bus signature `(ossssssbbbsssiuas)`:
/// the `Instance` properties of one object in introspection order, behind its path. The
/// service answers from the records it exports, so this is exactly what `GetManagedObjects`
/// holds for the object.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, zbus::Type)]
pub struct InstanceEntry {
    /// Object path.
    pub object: OwnedObjectPath,
    /// `Uuid`.
    pub uuid: String,
    /// `Kind`: every [`vgpu_types::InstanceKind`] ([`crate::names::instance_kind::name`]).
    pub kind: String,
    /// `PciAddress`.
    pub pci_address: String,
    /// `ParentName`.
    pub parent_name: String,
    /// `Type`.
    pub mdev_type: String,
    /// `Profile`.
    pub profile: String,
    /// `Active`.
    pub active: bool,
    /// `Persistent`.
    pub persistent: bool,
    /// `Autostart`.
    pub autostart: bool,
    /// `Owner`.
    pub owner: String,
    /// `Holder`.
    pub holder: String,
    /// `HolderUuid`.
    pub holder_uuid: String,
    /// `IommuGroup`.
    pub iommu_group: i32,
    /// `Weight`.
    pub weight: u32,
    /// `GroupMembers` (pass-through instances; empty otherwise).
    pub group_members: Vec<String>,
}

impl From<InstanceEntry> for InstanceRecord {
    fn from(entry: InstanceEntry) -> Self {
        InstanceRecord {
            object: entry.object.as_str().to_string(),
            uuid: entry.uuid,
            kind: entry.kind,
            pci_address: entry.pci_address,
            parent: entry.parent_name,
            mdev_type: entry.mdev_type,
            profile: entry.profile,
            active: entry.active,
            persistent: entry.persistent,
            autostart: entry.autostart,
            owner: entry.owner,
            holder: entry.holder,
            holder_uuid: entry.holder_uuid,
            iommu_group: entry.iommu_group,
            weight: entry.weight,
            group_members: entry.group_members,
        }
    }
}

/// One mdev type as `Manager.ListTypes` sends it, D-Bus signature `(osssssuao)`: the
/// `MdevType` properties of one object (without the parent's path, which `ParentName` keys).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, zbus::Type)]
pub struct TypeEntry {
    /// Object path.
    pub object: OwnedObjectPath,
    /// `Id`.
    pub id: String,
    /// `Name`.
    pub name: String,
    /// `Description`.
    pub description: String,
    /// `DeviceApi`.
    pub device_api: String,
    /// `ParentName`.
    pub parent_name: String,
    /// `AvailableInstances`.
    pub available_instances: u32,
    /// `Instances`.
    pub instances: Vec<OwnedObjectPath>,
}

impl From<TypeEntry> for MdevTypeRecord {
    fn from(entry: TypeEntry) -> Self {
        MdevTypeRecord {
            object: entry.object.as_str().to_string(),
            id: entry.id,
            name: entry.name,
            description: entry.description,
            device_api: entry.device_api,
            parent: entry.parent_name,
            available_instances: entry.available_instances,
            instances: path_strings(entry.instances),
        }
    }
}

/// Whether one profile fits the host now, as `Manager.FitProfiles` sends it, D-Bus signature
/// `(sbs)`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, zbus::Type)]
pub struct ProfileFitEntry {
    /// Profile name.
    pub name: String,
    /// Whether one instance of it would be placed now.
    pub fits: bool,
    /// Where it would go, or why it cannot go anywhere (every parent's reason, then the GPUs
    /// that host no vGPU and why).
    pub detail: String,
}

/// One vGPU as NVIDIA's `nvidia-smi vgpu -q` reports it, as `Manager.GetVgpuTelemetry` sends
/// it, D-Bus signature `(stssssxxiis)`. Empty strings and `-1` stand for what the tool does
/// not report (`N/A`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, zbus::Type)]
pub struct VgpuTelemetryEntry {
    /// The physical GPU's PCI address (`0000:4b:00.0`).
    pub gpu: String,
    /// The driver's vGPU id.
    pub vgpu_id: u64,
    /// UUID of the service's instance this vGPU is; empty when none matches.
    pub instance: String,
    /// The VM's UUID (the libvirt domain UUID).
    pub vm_uuid: String,
    /// The VM's name.
    pub vm_name: String,
    /// The vGPU type's name.
    pub vgpu_name: String,
    /// Framebuffer used, MiB (`-1`: not reported).
    pub fb_used_mib: i64,
    /// Framebuffer size, MiB (`-1`: not reported).
    pub fb_total_mib: i64,
    /// GPU utilization, percent (`-1`: not reported, e.g. MIG-backed vGPUs).
    pub gpu_utilization_percent: i32,
    /// Memory utilization, percent (`-1`: not reported).
    pub memory_utilization_percent: i32,
    /// Licence state as printed (`Licensed (Expiry: ...)`); empty when not reported.
    pub license_status: String,
}

/// The instance whose UUID (any case) or VF PCI address is `key`.
pub fn find_instance<'a>(instances: &'a [InstanceRecord], key: &str) -> Option<&'a InstanceRecord> {
    let key = key.to_ascii_lowercase();
    instances
        .iter()
        .find(|i| i.uuid == key || (!i.pci_address.is_empty() && i.pci_address == key))
}

/// Instances from a `Manager.ListInstances` reply, in [`Snapshot`] order (parent, then UUID).
pub fn instances_from_entries(entries: Vec<InstanceEntry>) -> Vec<InstanceRecord> {
    let mut records: Vec<InstanceRecord> = entries.into_iter().map(Into::into).collect();
    sort_instances(&mut records);
    records
}

/// Types from a `Manager.ListTypes` reply, in [`Snapshot`] order (parent, then id).
pub fn types_from_entries(entries: Vec<TypeEntry>) -> Vec<MdevTypeRecord> {
    let mut records: Vec<MdevTypeRecord> = entries.into_iter().map(Into::into).collect();
    sort_types(&mut records);
    records
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::instance_kind;

    fn entry(kind: &str, pci_address: &str, group_members: &[&str]) -> InstanceEntry {
        InstanceEntry {
            object: OwnedObjectPath::try_from("/org/mdevmanager/VGpu1/instance/x").unwrap(),
            uuid: "5a0c1c7e-0008-4a1b-9c2d-3e4f5a6b7c08".into(),
            kind: kind.into(),
            pci_address: pci_address.into(),
            parent_name: pci_address.into(),
            mdev_type: "vfio-pci".into(),
            profile: String::new(),
            active: true,
            persistent: false,
            autostart: false,
            owner: "created".into(),
            holder: "vm-alpha".into(),
            holder_uuid: "c0ffee00-aaaa-4bbb-8ccc-000000000001".into(),
            iommu_group: 82,
            weight: 300,
            group_members: group_members.iter().map(|m| m.to_string()).collect(),
        }
    }

    #[test]
    fn every_instance_kind_reaches_the_client_record_pass_through_included() {
        for kind in instance_kind::ALL {
            let record = InstanceRecord::from(entry(instance_kind::name(kind), "", &[]));
            assert_eq!(record.instance_kind(), Some(kind));
        }
        let gpu = InstanceRecord::from(entry(
            instance_kind::PASSTHROUGH,
            "0000:41:00.0",
            &["0000:41:00.0", "0000:41:00.1"],
        ));
        assert_eq!(
            gpu.instance_kind(),
            Some(vgpu_types::InstanceKind::Passthrough)
        );
        assert_eq!(gpu.group_members, ["0000:41:00.0", "0000:41:00.1"]);
        assert_eq!(
            (gpu.pci_address.as_str(), gpu.parent.as_str()),
            ("0000:41:00.0", "0000:41:00.0")
        );
        // A kind from a newer service is kept as sent, not refused.
        let newer = InstanceRecord::from(entry("npu", "", &[]));
        assert_eq!((newer.kind.as_str(), newer.instance_kind()), ("npu", None));
    }

    #[test]
    fn the_json_names_of_an_instance_record_stay_those_vgpuctl_documents() {
        let record = InstanceRecord::from(entry(instance_kind::PASSTHROUGH, "0000:41:00.0", &[]));
        let json = serde_json::to_value(&record).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "active",
                "autostart",
                "group_members",
                "holder",
                "holder_uuid",
                "iommu_group",
                "kind",
                "object",
                "owner",
                "parent",
                "pci_address",
                "persistent",
                "profile",
                "type",
                "uuid",
                "weight"
            ]
        );
        assert_eq!(json["kind"], "passthrough");
    }
}
