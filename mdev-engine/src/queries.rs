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
