//! PCI functions, driver binding (`drivers/base/bus.c`, `driver_override`) and SR-IOV
//! (`drivers/pci/iov.c`).

use super::*;

impl World {
    // ----- PCI -----

    pub(super) fn add_pci(&mut self, bdf: &str, pci: Pci, ids: (u16, u16, u16, u16, u32, i32)) {
        let (vendor, device, subsystem_vendor, subsystem_device, class, numa) = ids;
        let mut pci = pci;
        pci.ids = (vendor, device, subsystem_vendor, subsystem_device, class);
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
        if self.topology.iommu {
            self.tree.add_relative_link(
                &join(&dir, "iommu_group"),
                &format!("{SYS_GROUPS}/{}", pci.group),
            );
        }
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
        if self.topology.iommu {
            self.group_join(group, &dir, bdf);
        }
    }

    pub(super) fn driver_loaded(&self, driver: &str) -> bool {
        self.drivers
            .get(driver)
            .is_some_and(|d| self.modules.get(d.module_name()) == Some(&true))
    }

    /// Whether the driver's probe accepts a device: `vfio-pci` refuses every device on a host
    /// without an IOMMU (`vfio_pci_core_register_device` finds no group: EINVAL), unless the
    /// unsafe no-IOMMU mode is on, which the simulated host does not model.
    pub(super) fn probe_succeeds(&self, driver: &str) -> bool {
        self.topology.iommu || !self.drivers.get(driver).is_some_and(|d| d.vfio)
    }

    /// `pci_match_device` with `driver_override`: only the named driver when set, else the
    /// driver whose id table matches (the device's native driver).
    pub(super) fn driver_matches(&self, pci: &Pci, driver: &str) -> bool {
        match &pci.driver_override {
            Some(name) => name == driver,
            None => pci.native_driver.as_deref() == Some(driver),
        }
    }

    /// `device_attach`: the first loaded driver that matches binds.
    pub(super) fn probe(&mut self, bdf: &str) {
        let Some(pci) = self.pci.get(bdf) else { return };
        if pci.driver.is_some() {
            return;
        }
        let candidate = self
            .drivers
            .keys()
            .find(|d| {
                self.driver_loaded(d) && self.driver_matches(pci, d) && self.probe_succeeds(d)
            })
            .cloned();
        if let Some(driver) = candidate {
            self.bind(bdf, &driver);
        }
    }

    pub(super) fn bind(&mut self, bdf: &str, driver: &str) {
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
            // vfio_register_group_dev(): the group's node first, then vfio-dev.
            self.sync_group_node(group);
            self.emit(UeventAction::Add, &vfio_dev, "vfio-dev", &[]);
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
        let properties = self.device_properties(&dir);
        self.emit(UeventAction::Bind, &dir, "pci", &properties);
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
        self.gim_bound(bdf, driver);
    }

    /// Groups whose holders an unbind of `bdf` must wait for (the device itself when it is a
    /// VFIO device, and its VFs when it is a PF whose driver disables them on remove).
    pub(super) fn unbind_waits_for(&self, bdf: &str) -> Vec<u32> {
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
        groups.retain(|g| self.device_held(*g));
        groups
    }

    /// Groups of the mdevs of parents that sit on PCI function `bdf`.
    pub(super) fn parent_mdev_groups(&self, bdf: &str) -> Vec<u32> {
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
    pub(super) fn unregister_parents_on(&mut self, bdf: &str) {
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

    pub(super) fn unbind_now(&mut self, bdf: &str) {
        self.unregister_parents_on(bdf);
        self.gim_unbound(bdf);
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
            self.free_vfio_index(index);
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
        let properties = self.device_properties(&dir);
        self.emit(UeventAction::Unbind, &dir, "pci", &properties);
    }

    pub(super) fn kill_holders_if_no_vfio(&mut self, group: u32) {
        let still = self
            .groups
            .get(&group)
            .is_some_and(|g| g.members.iter().any(|d| self.is_vfio_device(d)));
        if !still {
            self.kill_holders(group);
        }
    }

    pub(super) fn vf_address(pf: &Pci, index: u16) -> Option<PciAddress> {
        let sriov = pf.sriov.as_ref()?;
        let rid = u32::from(pf.address.routing_id())
            + u32::from(sriov.spec.offset)
            + u32::from(sriov.spec.stride) * u32::from(index);
        u16::try_from(rid)
            .ok()
            .map(|rid| PciAddress::from_routing_id(pf.address.domain(), rid))
    }

    pub(super) fn enable_vfs(&mut self, bdf: &str, count: u16) {
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
                    ids: (0, 0, 0, 0, 0),
                },
                ids,
            );
            self.tree
                .add_relative_link(&format!("{pf_dir}/virtfn{index}"), &dir);
            // pci_iov_add_virtfn(): `add`, then `change` once the virtfn/physfn links
            // exist, then pci_bus_add_device() probes it (when autoprobe is on).
            let properties = self.device_properties(&dir);
            self.emit(UeventAction::Add, &dir, "pci", &properties);
            self.emit(UeventAction::Change, &dir, "pci", &properties);
            if let Some(sriov) = self.pci.get_mut(bdf).and_then(|p| p.sriov.as_mut()) {
                sriov.vfs.push(vf_bdf.clone());
            }
            if autoprobe {
                self.probe(&vf_bdf);
            }
        }
        if let Some(sriov) = self.pci.get_mut(bdf).and_then(|p| p.sriov.as_mut()) {
            sriov.numvfs = count;
        }
        // sriov_enable() ends with a `change` on the PF.
        let properties = self.device_properties(&pf_dir);
        self.emit(UeventAction::Change, &pf_dir, "pci", &properties);
    }

    /// Disables every VF now (holders lose their devices); for paths that refused or
    /// already waited for holders.
    pub(super) fn disable_vfs(&mut self, bdf: &str) {
        let vfs = self
            .pci
            .get(bdf)
            .and_then(|p| p.sriov.as_ref())
            .map(|s| s.vfs.clone())
            .unwrap_or_default();
        for vf in vfs {
            self.remove_vf(bdf, &vf);
        }
        if let Some(sriov) = self.pci.get_mut(bdf).and_then(|p| p.sriov.as_mut()) {
            sriov.numvfs = 0;
        }
    }

    /// `sriov_disable()`: removes VFs in index order (`pci_iov_remove_virtfn`). At a VF whose
    /// VFIO device is held, its `virtfn` and `physfn` links are already gone and the removal
    /// waits, with the PF and its VFs locked; `sriov_numvfs` keeps its old value until the
    /// end.
    pub(super) fn disable_vfs_step(&mut self, pf: &str) -> Store {
        loop {
            let Some(sriov) = self.pci.get(pf).and_then(|p| p.sriov.as_ref()) else {
                return Store::Done(Err(libc::ENODEV));
            };
            let all = sriov.vfs.clone();
            let Some(vf) = all.first().cloned() else {
                if let Some(sriov) = self.pci.get_mut(pf).and_then(|p| p.sriov.as_mut()) {
                    sriov.numvfs = 0;
                }
                return Store::Done(Ok(()));
            };
            let Some(state) = self.pci.get(&vf) else {
                if let Some(sriov) = self.pci.get_mut(pf).and_then(|p| p.sriov.as_mut()) {
                    sriov.vfs.retain(|v| *v != vf);
                }
                continue;
            };
            let (group, dir) = (state.group, state.dir.clone());
            if self.device_held(group) {
                if let Some(index) = self.vf_index(pf, &vf) {
                    let pf_dir = self.pci.get(pf).map(|p| p.dir.clone()).unwrap_or_default();
                    self.tree.remove(&format!("{pf_dir}/virtfn{index}"));
                }
                self.tree.remove(&join(&dir, "physfn"));
                self.unlink_driver_before_release(&vf);
                let mut locks = vec![pf.to_string()];
                locks.extend(all);
                return Store::WaitThen {
                    groups: vec![group],
                    locks,
                    then: Deferred::DisableVfs(pf.to_string()),
                };
            }
            self.remove_vf(pf, &vf);
        }
    }

    /// `driver_sysfs_remove()`: the `driver` links go before the driver's `remove()` runs
    /// (and waits for a holder); the device stays bound until it returns.
    fn unlink_driver_before_release(&mut self, bdf: &str) {
        let Some(pci) = self.pci.get(bdf) else {
            return;
        };
        let dir = pci.dir.clone();
        if let Some(driver) = pci.driver.clone() {
            self.tree.remove(&join(&dir, "driver"));
            self.tree
                .remove(&format!("{SYS_PCI_DRIVERS}/{driver}/{bdf}"));
        }
    }

    /// The `virtfn` index of a VF, from the routing ids.
    fn vf_index(&self, pf: &str, vf: &str) -> Option<u16> {
        let pf_state = self.pci.get(pf)?;
        let spec = &pf_state.sriov.as_ref()?.spec;
        let vf_state = self.pci.get(vf)?;
        let distance = vf_state
            .address
            .routing_id()
            .checked_sub(pf_state.address.routing_id())?
            .checked_sub(spec.offset)?;
        if spec.stride == 0 {
            return Some(0);
        }
        Some(distance / spec.stride)
    }

    /// `pci_iov_remove_virtfn()` for one VF: links, driver, device, group, uevent.
    fn remove_vf(&mut self, pf: &str, vf: &str) {
        let index = self.vf_index(pf, vf);
        let pf_dir = self.pci.get(pf).map(|p| p.dir.clone()).unwrap_or_default();
        if let Some(index) = index {
            self.tree.remove(&format!("{pf_dir}/virtfn{index}"));
        }
        self.unbind_now(vf);
        if let Some(sriov) = self.pci.get_mut(pf).and_then(|p| p.sriov.as_mut()) {
            sriov.vfs.retain(|v| v != vf);
        }
        let properties = self
            .pci
            .get(vf)
            .map(|state| self.device_properties(&state.dir))
            .unwrap_or_default();
        let Some(state) = self.pci.remove(vf) else {
            return;
        };
        self.tree.remove(&join(SYS_PCI_DEVICES, vf));
        self.tree.remove(&state.dir);
        self.kill_holders(state.group);
        self.group_leave(state.group, &state.dir, vf);
        self.sync_group_node(state.group);
        self.emit(UeventAction::Remove, &state.dir, "pci", &properties);
    }

    pub(super) fn numvfs_store(&mut self, bdf: &str, data: &[u8]) -> Store {
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
            return self.disable_vfs_step(bdf);
        }
        if sriov.numvfs != 0 {
            return Store::Done(Err(libc::EBUSY));
        }
        self.enable_vfs(bdf, requested);
        Store::Done(Ok(()))
    }

    pub(super) fn find_pci_by_name(&self, data: &[u8]) -> Option<String> {
        self.pci.keys().find(|bdf| sysfs_streq(data, bdf)).cloned()
    }

    pub(super) fn bind_store(&mut self, driver: &str, data: &[u8]) -> Result<(), i32> {
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
        if !self.probe_succeeds(driver) {
            return Err(libc::EINVAL);
        }
        self.bind(&bdf, driver);
        Ok(())
    }

    pub(super) fn unbind_store(&mut self, driver: &str, data: &[u8]) -> Store {
        let Some(bdf) = self.find_pci_by_name(data) else {
            return Store::Done(Err(libc::ENODEV));
        };
        if self.pci.get(&bdf).and_then(|p| p.driver.as_deref()) != Some(driver) {
            return Store::Done(Err(libc::ENODEV));
        }
        let groups = self.unbind_waits_for(&bdf);
        if !groups.is_empty() {
            self.unlink_driver_before_release(&bdf);
            let mut locks = vec![bdf.clone()];
            locks.extend(
                self.pci
                    .get(&bdf)
                    .and_then(|p| p.sriov.as_ref())
                    .map(|s| s.vfs.clone())
                    .unwrap_or_default(),
            );
            return Store::WaitThen {
                groups,
                locks,
                then: Deferred::Unbind(bdf),
            };
        }
        self.unbind_now(&bdf);
        Store::Done(Ok(()))
    }

    pub(super) fn override_store(&mut self, bdf: &str, data: &[u8]) -> Result<(), i32> {
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
}
