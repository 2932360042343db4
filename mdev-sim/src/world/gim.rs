//! AMD GIM's per-VF time slice file, `/sys/kernel/debug/gim/<bdf>/asymmetric_timeslice`: present
//! while a PF is bound to `gim`, write-only, taking `"vf_idx,timeslice_us"` (100 µs..=1 s in
//! steps of 100 µs) or `"0"` to reset every VF to the default 6 ms. As GIM does, a slice is
//! refused when the GPU has a single VF, when the index is not an enabled VF, and when the slices
//! would over-commit the budget of `VFs × 6000 µs` (GIM's `amdgv_gpumon.c` admission check).
//! Facts from the project's reference notes (interfaces.md, section 5.2); the errno of every
//! refusal is EINVAL, as GIM's debugfs store returns for bad input.

use std::collections::BTreeMap;

use super::{Attr, World};
use crate::tree::Node;
use crate::SimHost;

/// The driver whose PFs get the file.
const GIM: &str = "gim";
/// `DEFAULT_GFX_TIME_SLICE` in µs.
const DEFAULT_SLICE_US: u32 = 6_000;

/// Host path of a PF's file.
pub(crate) fn timeslice_path(pf: &str) -> String {
    format!("/sys/kernel/debug/gim/{pf}/asymmetric_timeslice")
}

impl World {
    /// A PF was bound to `driver`: GIM adds its debugfs directory.
    pub(super) fn gim_bound(&mut self, pf: &str, driver: &str) {
        if driver == GIM {
            self.tree.add_file(
                &timeslice_path(pf),
                Attr::GimTimeslice {
                    pf: pf.to_string(),
                    slices: BTreeMap::new(),
                },
            );
        }
    }

    /// A PF lost its driver: GIM's directory goes with it.
    pub(super) fn gim_unbound(&mut self, pf: &str) {
        self.tree.remove(&format!("/sys/kernel/debug/gim/{pf}"));
    }

    /// The store of `asymmetric_timeslice` at canonical `path`.
    pub(super) fn gim_timeslice_store(
        &mut self,
        path: &str,
        pf: &str,
        data: &[u8],
    ) -> Result<(), i32> {
        let text = std::str::from_utf8(data).map_err(|_| libc::EINVAL)?.trim();
        let vfs = self
            .pci
            .get(pf)
            .and_then(|p| p.sriov.as_ref())
            .map_or(0, |s| u32::try_from(s.vfs.len()).unwrap_or(u32::MAX));
        let Some(Node::File(Attr::GimTimeslice { slices, .. })) = self.tree.get_mut(path) else {
            return Err(libc::ENOENT);
        };
        if text == "0" {
            slices.clear();
            return Ok(());
        }
        let (index, us) = text.split_once(',').ok_or(libc::EINVAL)?;
        let index: u32 = index.trim().parse().map_err(|_| libc::EINVAL)?;
        let us: u32 = us.trim().parse().map_err(|_| libc::EINVAL)?;
        if vfs < 2 || index >= vfs || !(100..=1_000_000).contains(&us) || us % 100 != 0 {
            return Err(libc::EINVAL);
        }
        let total: u64 = (0..vfs)
            .map(|vf| {
                u64::from(if vf == index {
                    us
                } else {
                    slices.get(&vf).copied().unwrap_or(DEFAULT_SLICE_US)
                })
            })
            .sum();
        if total > u64::from(vfs) * u64::from(DEFAULT_SLICE_US) {
            return Err(libc::EINVAL);
        }
        slices.insert(index, us);
        Ok(())
    }
}

impl SimHost {
    /// The per-VF time slices GIM holds for a PF (VF index → µs; VFs at the default are
    /// absent), `None` when the PF has no GIM debugfs file. For tests: the file is write-only.
    pub fn gim_time_slices(&self, pf: &str) -> Option<BTreeMap<u32, u32>> {
        match self.lock().tree.get(&timeslice_path(pf)) {
            Some(Node::File(Attr::GimTimeslice { slices, .. })) => Some(slices.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::SimHost;
    use mdev_host::HostFs;

    const AMD: &str = "0000:0c:00.0";

    fn write(host: &SimHost, data: &str) -> Result<(), i32> {
        host.write(Path::new(&super::timeslice_path(AMD)), data.as_bytes())
            .map_err(|e| e.raw_os_error().unwrap_or(0))
    }

    #[test]
    fn slices_are_checked_against_the_budget_and_reset_by_zero() {
        let host = SimHost::builtin("default").unwrap();
        // Four VFs at bind: a budget of 24 ms.
        write(&host, "0,3000").unwrap();
        write(&host, "1,9000").unwrap();
        assert_eq!(write(&host, "2,9000"), Err(libc::EINVAL), "27 ms > 24 ms");
        for bad in ["4,6000", "0,6050", "0,50", "0,2000000", "x", "0;6000"] {
            assert_eq!(write(&host, bad), Err(libc::EINVAL), "{bad}");
        }
        let slices = host.gim_time_slices(AMD).unwrap();
        assert_eq!(
            slices.into_iter().collect::<Vec<_>>(),
            [(0, 3000), (1, 9000)]
        );
        assert_eq!(
            host.read(Path::new(&super::timeslice_path(AMD)))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EINVAL),
            "write-only"
        );
        write(&host, "0\n").unwrap();
        assert!(host.gim_time_slices(AMD).unwrap().is_empty());
    }

    #[test]
    fn the_file_exists_only_while_gim_is_bound_and_a_reboot_resets_it() {
        let host = SimHost::builtin("default").unwrap();
        write(&host, "0,3000").unwrap();
        host.reboot();
        assert!(host.gim_time_slices(AMD).unwrap().is_empty());
        host.unload_module("gim").unwrap();
        assert_eq!(host.gim_time_slices(AMD), None);
        assert!(
            !host.exists(Path::new("/sys/kernel/debug/gim"))
                || host
                    .list(Path::new("/sys/kernel/debug/gim"))
                    .unwrap()
                    .is_empty()
        );
        host.load_module("gim").unwrap();
        assert_eq!(host.gim_time_slices(AMD), Some(Default::default()));
    }
}
