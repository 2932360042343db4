//! The VF-count rule of `Engine::set_num_vfs`, one function used by the change itself (under
//! the parent lock) and by the daemon before it starts a `SetNumVfs` Job, so a caller asking
//! for more VFs than the PF has hears it at once, from the host's `sriov_totalvfs` rather than
//! a published copy.

use super::{Engine, EngineError, PciAddress};
use mdev_host::discovery;

/// `InvalidArgs` naming the PF and its limit when `num_vfs` is more than it supports.
pub(super) fn refuse_vf_count_over(
    address: PciAddress,
    total_vfs: u32,
    num_vfs: u32,
) -> Result<(), EngineError> {
    if num_vfs > total_vfs {
        return Err(EngineError::InvalidArgument {
            what: "VF count",
            value: num_vfs.to_string(),
            reason: format!("{address} supports at most {total_vfs} VFs"),
        });
    }
    Ok(())
}

impl Engine {
    /// Whether `pf` can take `num_vfs` VFs (nothing is changed). A PF that is not there or not
    /// SR-IOV capable passes: `set_num_vfs` names that problem itself.
    pub fn check_vf_count(&self, pf: &str, num_vfs: u32) -> Result<(), EngineError> {
        let address: PciAddress = pf.parse()?;
        match discovery::read_sriov_pf(self.fs(), address) {
            Some(pf) => refuse_vf_count_over(address, pf.total_vfs, num_vfs),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::*;
    use mdev_sim::SimHost;

    /// The SR-IOV NVMe PF of the `samples` topology.
    const PF: &str = "0000:01:00.0";

    #[test]
    fn a_vf_count_over_the_pfs_total_is_refused_naming_the_pf_and_changes_nothing() {
        let sim = SimHost::builtin("samples").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::new(
            Arc::new(sim),
            Arc::new(DiskFiles::new(dir.path())),
            EngineConfig::default(),
        )
        .unwrap();
        let total = mdev_host::discovery::read_sriov_pf(engine.fs(), PF.parse().unwrap())
            .expect("an SR-IOV PF")
            .total_vfs;
        engine.check_vf_count(PF, total).unwrap();
        for error in [
            engine.check_vf_count(PF, total + 1).unwrap_err(),
            engine
                .set_num_vfs(PF, total + 1, DestroyOptions::default())
                .unwrap_err(),
        ] {
            assert_eq!(error.kind(), ErrorKind::InvalidArgs, "{error}");
            assert!(error.to_string().contains(PF), "{error}");
            assert!(error.to_string().contains(&total.to_string()), "{error}");
        }
        let pf = mdev_host::discovery::read_sriov_pf(engine.fs(), PF.parse().unwrap()).unwrap();
        assert_eq!(pf.num_vfs, 0, "nothing enabled");
    }
}
