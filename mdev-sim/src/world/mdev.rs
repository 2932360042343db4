//! mdev parents, their types' capacity, and instances (`drivers/vfio/mdev`).

use super::*;

impl World {
    // ----- mdev parents -----

    pub(super) fn parent_dir(&self, spec: &MdevParentSpec) -> Option<String> {
        match (&spec.virtual_device, &spec.pci) {
            (Some(path), _) => Some(format!("/sys/devices/virtual/{path}")),
            (None, Some(bdf)) => self.pci.get(bdf).map(|p| p.dir.clone()),
            (None, None) => None,
        }
    }

    pub(super) fn register_parent(&mut self, spec: MdevParentSpec) {
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
        // The order of a sample driver's module init: mdev_register_driver() (`drivers`),
        // class_create() (`class`), device_register() (the parent), mdev_register_parent()
        // (`change` with MDEV_STATE=registered); a GPU parent only sees the last two.
        let driver_dir = join(SYS_MDEV_DRIVERS, &spec.mdev_driver);
        if self.tree.get(&driver_dir).is_none() {
            self.tree.mkdir_p(&driver_dir);
            self.emit(UeventAction::Add, &driver_dir, "drivers", &[]);
        }
        let subsystem = parent_subsystem(&spec);
        if spec.virtual_device.is_some() {
            let class_dir = format!("/sys/class/{subsystem}");
            if self.tree.get(&class_dir).is_none() {
                self.tree.mkdir_p(&class_dir);
                self.emit(UeventAction::Add, &class_dir, "class", &[]);
            }
            self.tree.mkdir_p(&dir);
            self.tree
                .add_relative_link(&join(&dir, "subsystem"), &class_dir);
            self.tree
                .add_relative_link(&join(&class_dir, &spec.name), &dir);
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
        let properties = self.device_properties(&dir);
        let mut properties: Vec<(&str, String)> =
            properties.iter().map(|(k, v)| (*k, v.clone())).collect();
        properties.push(("MDEV_STATE", "registered".to_string()));
        self.emit(UeventAction::Change, &dir, &subsystem, &properties);
        self.parents.insert(spec.name.clone(), Parent { spec, dir });
    }

    /// `mdev_unregister_parent()` and the module exit around it: the `mdev_bus` link goes,
    /// every instance is removed, the types go, `change` with MDEV_STATE=unregistered; then a
    /// virtual parent's device, the mdev driver (when no other parent uses it) and the class.
    pub(super) fn unregister_parent(&mut self, name: &str) {
        let Some(parent) = self.parents.get(name) else {
            return;
        };
        let (spec, dir) = (parent.spec.clone(), parent.dir.clone());
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
        self.tree.remove(&join(&dir, "mdev_supported_types"));
        let subsystem = parent_subsystem(&spec);
        let properties = self.device_properties(&dir);
        let mut properties: Vec<(&str, String)> =
            properties.iter().map(|(k, v)| (*k, v.clone())).collect();
        properties.push(("MDEV_STATE", "unregistered".to_string()));
        self.emit(UeventAction::Change, &dir, &subsystem, &properties);
        self.parents.remove(name);
        if spec.virtual_device.is_some() {
            self.tree.remove(&dir);
            self.tree.remove(&format!("/sys/class/{subsystem}/{name}"));
            if let Some((upper, _)) = dir.rsplit_once('/') {
                self.tree.prune_empty(upper, "/sys/devices/virtual");
            }
            self.emit(UeventAction::Remove, &dir, &subsystem, &[]);
        }
        let driver_in_use = self
            .parents
            .values()
            .any(|p| p.spec.mdev_driver == spec.mdev_driver);
        if !driver_in_use {
            let driver_dir = join(SYS_MDEV_DRIVERS, &spec.mdev_driver);
            self.tree.remove(&driver_dir);
            self.emit(UeventAction::Remove, &driver_dir, "drivers", &[]);
        }
        if spec.virtual_device.is_some() {
            let class_dir = format!("/sys/class/{subsystem}");
            let empty = matches!(self.tree.get(&class_dir), Some(Node::Dir(children)) if children.is_empty());
            if empty {
                self.tree.remove(&class_dir);
                self.emit(UeventAction::Remove, &class_dir, "class", &[]);
            }
        }
    }

    pub(super) fn parent_spec(&self, parent: &str) -> Option<&MdevParentSpec> {
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
        // The type ids of the parent's own mdevs.
        let mine = || {
            self.mdevs_by_parent
                .get(parent)
                .into_iter()
                .flat_map(|mdevs| mdevs.values().map(String::as_str))
        };
        match spec.capacity {
            CapacityKind::MaxInstances => {
                let max = u64::from(spec.max_instances.unwrap_or(0));
                max.saturating_sub(mine().count() as u64)
            }
            CapacityKind::Homogeneous => {
                let wanted = homogeneous_group(spec, type_id);
                if mine().any(|mine| homogeneous_group(spec, mine) != wanted) {
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
                let mut per_type: BTreeMap<&str, u64> = BTreeMap::new();
                for mine in mine() {
                    *per_type.entry(mine).or_default() += 1;
                }
                let mut used: BTreeMap<&str, u64> = BTreeMap::new();
                for (type_id, count) in per_type {
                    if let Some(t) = spec.types.iter().find(|t| t.id == type_id) {
                        for (resource, cost) in &t.cost {
                            *used.entry(resource.as_str()).or_default() += cost * count;
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

    pub(super) fn create_mdev(
        &mut self,
        parent: &str,
        type_id: &str,
        data: &[u8],
    ) -> Result<(), i32> {
        let uuid = parse_create_uuid(data)?;
        if self.mdevs.contains_key(&uuid) {
            return Err(libc::EEXIST);
        }
        // What the rest needs from the parent's spec, taken out once (not a clone of the whole
        // spec, with every type, per create).
        let Some(spec) = self.parent_spec(parent) else {
            return Err(libc::ENODEV);
        };
        let exhausted = Topology::exhausted_errno(spec);
        let capacity = spec.capacity;
        let full_type = format!("{}-{type_id}", spec.type_prefix);
        let mdev_driver = spec.mdev_driver.clone();
        let instance_attributes = spec.instance_attributes.clone();
        let constants: Vec<(String, String)> = spec
            .instance_constants
            .iter()
            .chain(
                spec.types
                    .iter()
                    .find(|t| t.id == type_id)
                    .into_iter()
                    .flat_map(|t| t.instance_constants.iter()),
            )
            .map(|(attribute, value)| (attribute.clone(), value.replace("{uuid}", &uuid)))
            .collect();
        let available = self.available(parent, type_id);
        if capacity == CapacityKind::MaxInstances && available == 0 {
            return Err(exhausted);
        }
        let Some(parent_dir) = self.parents.get(parent).map(|p| p.dir.clone()) else {
            return Err(libc::ENODEV);
        };
        let dir = join(&parent_dir, &uuid);
        if available == 0 {
            // device_add() already ran when the driver's probe refuses: udev sees the device
            // come and go.
            self.emit(UeventAction::Add, &dir, "mdev", &[]);
            self.emit(UeventAction::Remove, &dir, "mdev", &[]);
            return Err(exhausted);
        }
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
        for attribute in &instance_attributes {
            self.tree
                .add_file(&join(&dir, attribute), Attr::Stored(String::new()));
        }
        for (attribute, value) in constants {
            self.tree
                .add_file(&join(&dir, &attribute), Attr::Const(value));
        }
        self.tree
            .add_relative_link(&join(SYS_MDEV_DEVICES, &uuid), &dir);
        self.tree.add_relative_link(
            &format!("{parent_dir}/mdev_supported_types/{full_type}/devices/{uuid}"),
            &dir,
        );
        self.emit(UeventAction::Add, &dir, "mdev", &[]);
        self.mdevs_by_parent
            .entry(parent.to_string())
            .or_default()
            .insert(uuid.clone(), type_id.to_string());
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
        // vfio_register_emulated_iommu_dev(): the group's node first, then vfio-dev.
        self.sync_group_node(group);
        self.emit(UeventAction::Add, &vfio_dev, "vfio-dev", &[]);
        self.tree
            .add_relative_link(&join(&dir, "driver"), &join(SYS_MDEV_DRIVERS, &mdev_driver));
        self.tree
            .add_relative_link(&format!("{SYS_MDEV_DRIVERS}/{mdev_driver}/{uuid}"), &dir);
        self.emit(UeventAction::Bind, &dir, "mdev", &[("DRIVER", mdev_driver)]);
        Ok(())
    }

    pub(super) fn remove_store(&mut self, uuid: &str, data: &[u8]) -> Store {
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
        if self.device_held(group) {
            self.unlink_mdev_before_release(uuid);
            return Store::WaitThen {
                groups: vec![group],
                locks: vec![uuid.to_string()],
                then: Deferred::RemoveMdev(uuid.to_string()),
            };
        }
        self.remove_mdev_now(uuid);
        Store::Done(Ok(()))
    }

    /// What `mdev_device_remove_common()` takes away before the vendor `remove()` waits for
    /// the holder: the `mdev_type` and type `devices/` links (`mdev_remove_sysfs_files`),
    /// the device's attributes and vendor groups (`device_del` → `device_remove_attrs`,
    /// `device_remove`), the bus and `subsystem` links (`bus_remove_device`) and the driver
    /// links (`driver_sysfs_remove`). The directory, its `iommu_group` link and
    /// `vfio-dev/` stay until the release.
    fn unlink_mdev_before_release(&mut self, uuid: &str) {
        let Some(mdev) = self.mdevs.get(uuid) else {
            return;
        };
        let dir = mdev.dir.clone();
        let Some(parent) = self.parents.get(&mdev.parent) else {
            return;
        };
        let full_type = format!("{}-{}", parent.spec.type_prefix, mdev.type_id);
        let mut gone = vec![
            join(&dir, "mdev_type"),
            format!(
                "{}/mdev_supported_types/{full_type}/devices/{uuid}",
                parent.dir
            ),
            join(&dir, "subsystem"),
            join(SYS_MDEV_DEVICES, uuid),
            join(&dir, "driver"),
            format!("{SYS_MDEV_DRIVERS}/{}/{uuid}", parent.spec.mdev_driver),
        ];
        let type_constants = parent
            .spec
            .types
            .iter()
            .find(|t| t.id == mdev.type_id)
            .map(|t| t.instance_constants.clone())
            .unwrap_or_default();
        for attribute in parent
            .spec
            .instance_attributes
            .iter()
            .chain(parent.spec.instance_constants.keys())
            .chain(type_constants.keys())
        {
            // Vendor attributes live in named groups (`vendor/`, `nvidia/`): the group goes.
            let top = attribute.split('/').next().unwrap_or(attribute);
            gone.push(join(&dir, top));
        }
        for path in gone {
            self.tree.remove(&path);
        }
    }

    pub(super) fn remove_mdev_now(&mut self, uuid: &str) {
        let Some(mdev) = self.mdevs.remove(uuid) else {
            return;
        };
        if let Some(uuids) = self.mdevs_by_parent.get_mut(&mdev.parent) {
            uuids.remove(uuid);
            if uuids.is_empty() {
                self.mdevs_by_parent.remove(&mdev.parent);
            }
        }
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
        self.free_vfio_index(mdev.vfio_index);
        self.emit(UeventAction::Remove, &vfio_dev, "vfio-dev", &[]);
        self.kill_holders(mdev.group);
        self.group_leave(mdev.group, &mdev.dir, uuid);
        self.sync_group_node(mdev.group);
        self.emit(UeventAction::Unbind, &mdev.dir, "mdev", &[]);
        self.tree
            .remove(&format!("{SYS_MDEV_DRIVERS}/{driver}/{uuid}"));
        self.tree.remove(&join(SYS_MDEV_DEVICES, uuid));
        self.tree.remove(&format!(
            "{parent_dir}/mdev_supported_types/{full_type}/devices/{uuid}"
        ));
        self.tree.remove(&mdev.dir);
        self.emit(UeventAction::Remove, &mdev.dir, "mdev", &[]);
    }

    /// A holder of a group that is going away entirely (reboot of a device, rmmod) loses it.
    pub(super) fn kill_holders(&mut self, group: u32) {
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
}

/// The subsystem of a parent's uevents: a sample driver's class, or `pci` for a GPU.
fn parent_subsystem(spec: &MdevParentSpec) -> String {
    match &spec.virtual_device {
        Some(path) => path.split('/').next().unwrap_or("virtual").to_string(),
        None => "pci".to_string(),
    }
}
