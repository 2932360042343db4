//! Module load and unload: PCI drivers bind and unbind, mdev parents register and go.

use super::*;

impl World {
    // ----- modules -----

    pub(crate) fn module_loaded(&self, module: &str) -> Option<bool> {
        self.modules.get(module).copied()
    }

    pub(super) fn start_module(&mut self, module: &str) {
        let drivers: Vec<String> = self
            .drivers
            .values()
            .filter(|d| d.module_name() == module)
            .map(|d| d.name.clone())
            .collect();
        for driver in drivers {
            let dir = join(SYS_PCI_DRIVERS, &driver);
            self.tree.mkdir_p(&dir);
            if self.booted {
                self.emit(UeventAction::Add, &dir, "drivers", &[]);
            }
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
        // The module's own kobject appears when its init has returned.
        if self.booted {
            self.emit(
                UeventAction::Add,
                &format!("/sys/module/{module}"),
                "module",
                &[],
            );
        }
    }

    /// Every parent the machine could register now: the topology's, and one per existing VF
    /// of a PF with `vf_mdev`.
    pub(super) fn parent_specs(&self) -> Vec<MdevParentSpec> {
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
        if groups.iter().any(|g| self.device_held(*g)) {
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
            let dir = join(SYS_PCI_DRIVERS, &driver);
            self.tree.remove(&dir);
            self.emit(UeventAction::Remove, &dir, "drivers", &[]);
        }
        self.emit(
            UeventAction::Remove,
            &format!("/sys/module/{module}"),
            "module",
            &[],
        );
        self.modules.insert(module.to_string(), false);
        Ok(())
    }
}
