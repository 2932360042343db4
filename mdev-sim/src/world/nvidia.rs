//! NVIDIA vendor-VFIO vGPU on SR-IOV VFs (`nvidia/creatable_vgpu_types`, `current_vgpu_type`).

use super::*;

impl World {
    // ----- NVIDIA vendor-VFIO vGPU on VFs -----

    pub(super) fn nvidia_pf(&self, vf: &str) -> Option<&Pci> {
        self.pci
            .get(vf)
            .and_then(|v| v.physfn.as_ref())
            .and_then(|pf| self.pci.get(pf))
    }

    pub(super) fn nvidia_in_use(&self, pf: &Pci) -> BTreeMap<u32, u32> {
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

    pub(super) fn nvidia_creatable(&self, vf: &str) -> String {
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

    pub(super) fn nvidia_current_store(&mut self, vf: &str, data: &[u8]) -> Result<(), i32> {
        let requested =
            u32::try_from(kstrtoul(data, 0, u64::from(u32::MAX)).map_err(|_| libc::EINVAL)?)
                .map_err(|_| libc::EINVAL)?;
        let Some(state) = self.pci.get(vf) else {
            return Err(libc::ENODEV);
        };
        if self.device_held(state.group) {
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
}
