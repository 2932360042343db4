//! Reading the engine: the host's inventory and every instance (known records and unmanaged
//! mdevs) with whether it is active. Changes nothing.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::{
    lock, Engine, EngineError, InstanceInfo, InstanceKind, Inventory, MdevDevice, Scheduling,
};
use crate::lifecycle;
use crate::state::{InstanceRecord, Uuid};
use mdev_host::discovery::{self, layout, names};

/// The sysfs device path of an mdev record.
fn mdev_sysfs_path(record: &InstanceRecord) -> PathBuf {
    layout::mdev_device(&record.uuid)
}

/// The mdevs of `parents`, from their types' `devices` lists, sorted by UUID (as discovery
/// sorts them), without IOMMU group or VFIO device.
fn mdevs_of_types(parents: &[discovery::MdevParent]) -> Vec<MdevDevice> {
    let mut mdevs: Vec<MdevDevice> = parents
        .iter()
        .flat_map(|parent| {
            parent.types.iter().flat_map(move |mdev_type| {
                mdev_type.devices.iter().map(move |uuid| MdevDevice {
                    uuid: uuid.clone(),
                    parent: parent.name.clone(),
                    type_id: mdev_type.id.clone(),
                    iommu_group: None,
                    vfio_device: None,
                })
            })
        })
        .collect();
    mdevs.sort_by(|a, b| a.uuid.cmp(&b.uuid));
    mdevs
}

/// An mdev on the host the engine has no record of (`owner: None`).
fn unmanaged_info(mdev: &MdevDevice) -> InstanceInfo {
    InstanceInfo {
        uuid: mdev.uuid.clone(),
        kind: InstanceKind::Mdev,
        parent: mdev.parent.clone(),
        type_id: mdev.type_id.clone(),
        profile: None,
        owner: None,
        active: true,
        persistent: false,
        autostart: false,
        claim: None,
        scheduling: Scheduling::default(),
        vf: None,
        iommu_group: mdev.iommu_group,
        sysfs_path: Path::new(layout::MDEV_DEVICES).join(&mdev.uuid),
    }
}

impl Engine {
    /// A fresh discovery of the host.
    pub fn inventory(&self) -> Result<Inventory, EngineError> {
        Ok(discovery::discover(self.fs())?)
    }

    /// The inventory placement needs: [`Engine::inventory`] but for the mdevs, which are
    /// taken from their types' `devices` lists (read with the types anyway) instead of being
    /// read one by one, so the cost does not grow with the number of instances. The mdevs
    /// have no IOMMU group or VFIO device (placement uses neither).
    pub(crate) fn placement_inventory(&self) -> Result<Inventory, EngineError> {
        let host = self.fs();
        let mut mdev_parents = Vec::new();
        for name in discovery::list_sorted(host, Path::new(layout::MDEV_BUS_CLASS))? {
            if names::check_sysfs_name("parent", &name).is_err() {
                continue;
            }
            if let Some(parent) = discovery::read_mdev_parent(host, &name)? {
                mdev_parents.push(parent);
            }
        }
        let mut sriov_pfs = Vec::new();
        for name in discovery::list_sorted(host, Path::new(layout::PCI_DEVICES))? {
            let Ok(address) = name.parse::<names::PciAddress>() else {
                continue;
            };
            if let Some(pf) = discovery::read_sriov_pf(host, address) {
                sriov_pfs.push(pf);
            }
        }
        let other_gpus = discovery::gpus::discover_other_gpus(host, &mdev_parents, &sriov_pfs)?;
        Ok(Inventory {
            mdevs: mdevs_of_types(&mdev_parents),
            mdev_parents,
            sriov_pfs,
            other_gpus,
        })
    }

    /// The part of the host's inventory that concerns the registered mdev parent `parent`
    /// alone: that parent with its types, its mdevs (from its types' `devices`, without IOMMU
    /// groups) and, when it is an SR-IOV PF too, its SR-IOV state. Reads nothing of any other
    /// parent, so its cost does not grow with the host. `None` when `parent` is not a
    /// registered mdev parent (a VF named as the parent, a PF, an unknown name): the caller
    /// then needs the whole inventory to place or to explain.
    pub(crate) fn parent_inventory(&self, parent: &str) -> Result<Option<Inventory>, EngineError> {
        let host = self.fs();
        let Some(mdev_parent) = discovery::read_mdev_parent(host, parent)? else {
            return Ok(None);
        };
        let mdevs = mdevs_of_types(std::slice::from_ref(&mdev_parent));
        let sriov_pfs = parent
            .parse::<names::PciAddress>()
            .ok()
            .and_then(|address| discovery::read_sriov_pf(host, address))
            .into_iter()
            .collect();
        Ok(Some(Inventory {
            mdev_parents: vec![mdev_parent],
            sriov_pfs,
            mdevs,
            other_gpus: Vec::new(),
        }))
    }

    /// Every instance: known records (active or defined) and unmanaged mdevs on the host
    /// (`owner == None`), sorted by UUID.
    pub fn instances(&self) -> Result<Vec<InstanceInfo>, EngineError> {
        Ok(self.instances_in(&discovery::discover(self.fs())?))
    }

    /// [`Engine::instances`] with the unmanaged mdevs, and whether each mdev record is active
    /// and its IOMMU group, taken from `inventory` (a discovery the caller has just made)
    /// instead of a second read of the host.
    pub fn instances_in(&self, inventory: &Inventory) -> Vec<InstanceInfo> {
        let records: Vec<InstanceRecord> = lock(&self.state).instances.values().cloned().collect();
        let present: HashMap<Uuid, &MdevDevice> = inventory
            .mdevs
            .iter()
            .filter_map(|mdev| Some((Uuid::parse(&mdev.uuid).ok()?, mdev)))
            .collect();
        let mut infos: Vec<InstanceInfo> = records
            .iter()
            .map(|record| match record.kind {
                // The discovery lists exactly the mdevs whose device directory exists (what
                // `is_active` checks) with the group link `info_of` would read.
                InstanceKind::Mdev => {
                    let found = present.get(&record.uuid);
                    self.info_from(
                        record,
                        found.is_some(),
                        found.and_then(|mdev| mdev.iommu_group),
                        mdev_sysfs_path(record),
                    )
                }
                _ => self.info_of(record),
            })
            .collect();
        let known: HashSet<Uuid> = records.iter().map(|r| r.uuid).collect();
        for mdev in &inventory.mdevs {
            if Uuid::parse(&mdev.uuid).map_or(true, |uuid| !known.contains(&uuid)) {
                infos.push(unmanaged_info(mdev));
            }
        }
        infos.sort_by(|a, b| a.uuid.cmp(&b.uuid));
        infos
    }

    /// One instance by UUID.
    pub fn instance(&self, uuid: &str) -> Result<InstanceInfo, EngineError> {
        let uuid = names::parse_uuid(uuid)?;
        let key = uuid.to_string();
        if let Some(record) = lock(&self.state).instance(&key).cloned() {
            return Ok(self.info_of(&record));
        }
        discovery::read_mdev(self.fs(), &uuid)
            .map(|mdev| unmanaged_info(&mdev))
            .ok_or(EngineError::UnknownInstance { uuid: key })
    }

    /// Whether a record's device exists on the host now.
    pub(crate) fn is_active(&self, record: &InstanceRecord) -> bool {
        match record.kind {
            InstanceKind::Mdev => self.fs().exists(&mdev_sysfs_path(record)),
            InstanceKind::Vf => record.vf.is_some_and(|vf| {
                discovery::link_target_name(self.fs(), &layout::pci_device(&vf).join("driver"))
                    .as_deref()
                    == Some(lifecycle::VFIO_PCI)
            }),
            InstanceKind::NvidiaVf => record.vf.is_some_and(|vf| {
                discovery::read_nvidia_vf(self.fs(), vf)
                    .is_some_and(|nv| nv.current_type.to_string() == record.type_id)
            }),
            InstanceKind::Passthrough => self.passthrough_active(record),
        }
    }

    pub(crate) fn info_of(&self, record: &InstanceRecord) -> InstanceInfo {
        let active = self.is_active(record);
        let (sysfs_path, iommu_group) = match (record.kind, record.vf) {
            (InstanceKind::Mdev, _) => {
                let path = mdev_sysfs_path(record);
                let group = if active {
                    discovery::iommu_group_of(self.fs(), &path)
                } else {
                    None
                };
                (path, group)
            }
            (_, Some(vf)) => {
                let path = layout::pci_device(&vf);
                let group = discovery::iommu_group_of(self.fs(), &path);
                (path, group)
            }
            (_, None) => (PathBuf::new(), None),
        };
        self.info_from(record, active, iommu_group, sysfs_path)
    }

    /// The info of `record` with what was read of the host.
    fn info_from(
        &self,
        record: &InstanceRecord,
        active: bool,
        iommu_group: Option<u32>,
        sysfs_path: PathBuf,
    ) -> InstanceInfo {
        InstanceInfo {
            uuid: record.uuid.to_string(),
            kind: record.kind,
            parent: record.parent.to_string(),
            type_id: record.type_id.to_string(),
            profile: record.profile.as_ref().map(ToString::to_string),
            owner: Some(record.owner),
            active,
            persistent: record.persistent,
            autostart: record.autostart,
            claim: record.claim.clone(),
            scheduling: record.scheduling,
            vf: record.vf,
            iommu_group,
            sysfs_path,
        }
    }
}
