//! VF changes on NVIDIA GPUs. NVIDIA's vGPU guide allows them only through its `sriov-manage`
//! tool (`-e <domain:bus:slot.fn>` enables every VF the GPU has, `-d` disables them), never
//! a raw `sriov_numvfs` write; other PFs keep `sriov_numvfs` ([`crate::lifecycle`]).
//!
//! Contract: on a PF with NVIDIA's vendor id bound to `nvidia`, the only VF counts are `0` and
//! `sriov_totalvfs` (what `-e` makes); the tool runs through the host-command seam
//! ([`mdev_host::command`]) with the engine's vendor-command timeout and the call's cancel
//! token; a missing tool is refused naming it and the package that ships it; afterwards the
//! count is read back, so a tool that exits 0 without doing it is an error too.

use std::path::Path;

use super::{Engine, EngineError, OperationContext};
use crate::lifecycle::NVIDIA_DRIVER;
use mdev_host::command::{run_checked, CommandOutput, RunLimits};
use mdev_host::discovery::{self, names::PciAddress, SriovPf};

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: u16 = 0x10de;

/// Where NVIDIA's vGPU manager installs `sriov-manage` (the default of
/// [`super::EngineConfig::nvidia_sriov_manage`]).
pub const SRIOV_MANAGE_PATH: &str = "/usr/lib/nvidia/sriov-manage";

/// What ships `sriov-manage`, named when it is missing.
pub const SRIOV_MANAGE_PACKAGE: &str = "the NVIDIA vGPU manager, NVIDIA's vGPU host driver \
     package for KVM (nvidia-vgpu-ubuntu-<release>_amd64.deb, or \
     NVIDIA-Linux-x86_64-<release>-vgpu-kvm.run)";

/// Whether a PF's VFs are NVIDIA's to manage: NVIDIA's vendor id and the `nvidia` driver bound
/// (the same card bound to `vfio-pci` is a plain PF).
pub fn is_nvidia_pf(pf: &SriovPf) -> bool {
    pf.function.vendor_id == Some(NVIDIA_VENDOR)
        && pf.function.driver.as_deref() == Some(NVIDIA_DRIVER)
}

impl Engine {
    /// Sets an NVIDIA PF's VFs to `num_vfs` (0 or all) with `sriov-manage`. The caller holds
    /// the PF's lock and has checked that no instance is on a VF (or forced past it).
    pub(crate) fn set_nvidia_vfs(
        &self,
        ctx: &OperationContext,
        pf: &SriovPf,
        num_vfs: u32,
    ) -> Result<(), EngineError> {
        let address = pf.function.address;
        let tool = self.config.nvidia_sriov_manage.clone();
        if num_vfs != 0 && num_vfs != pf.total_vfs {
            return Err(EngineError::InvalidArgument {
                what: "VF count",
                value: num_vfs.to_string(),
                reason: format!(
                    "NVIDIA GPU {address} changes VFs only through {} (-e enables all {} of its \
                     VFs, -d none); ask for {} or 0",
                    tool.display(),
                    pf.total_vfs,
                    pf.total_vfs
                ),
            });
        }
        if !self.fs().commands().installed(&tool) {
            return Err(EngineError::NotSupported {
                what: format!("changing the VFs of NVIDIA GPU {address}"),
                reason: format!(
                    "{} is not installed (NVIDIA allows VF changes only through it); it ships \
                     with {SRIOV_MANAGE_PACKAGE}",
                    tool.display()
                ),
            });
        }
        if pf.num_vfs > 0 {
            // The kernel would block disabling a VF a process holds.
            for vf in &pf.vfs {
                self.host.check_pci_not_held(vf.function.address)?;
            }
            ctx.check(|| format!("disabling the VFs of {address}"))?;
            self.sriov_manage(ctx, &tool, "-d", address)?;
        }
        if num_vfs > 0 {
            ctx.check(|| format!("enabling the VFs of {address}"))?;
            self.sriov_manage(ctx, &tool, "-e", address)?;
        }
        let now = discovery::read_sriov_pf(self.fs(), address).map_or(0, |pf| pf.num_vfs);
        if now != num_vfs {
            return Err(EngineError::VendorTool {
                command: format!("{} {address}", tool.display()),
                problem: format!("it succeeded, but {address} has {now} VFs, not {num_vfs}"),
            });
        }
        Ok(())
    }

    fn sriov_manage(
        &self,
        ctx: &OperationContext,
        tool: &Path,
        flag: &str,
        address: PciAddress,
    ) -> Result<CommandOutput, EngineError> {
        let cancelled = || ctx.is_cancelled();
        let limits = RunLimits {
            timeout: self.config.vendor_command_timeout,
            cancelled: &cancelled,
        };
        let args = [flag.to_owned(), address.to_string()];
        let output = run_checked(self.fs().commands(), tool, &args, &limits)?;
        tracing::info!(pf = %address, command = %format!("{} {flag} {address}", tool.display()), output = %output.summary(), "ran sriov-manage");
        Ok(output)
    }
}
