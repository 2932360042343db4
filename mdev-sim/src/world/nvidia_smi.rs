//! What NVIDIA's `nvidia-smi vgpu -q` prints on the simulated host: per NVIDIA GPU bound to
//! `nvidia`, its vGPUs (mdevs of NVIDIA types on the GPU or its VFs, VFs with a
//! `current_vgpu_type`), in the real tool's layout (`GPU <8-digit domain bus id>` at column
//! 0, the GPU's fields at 4 spaces, each vGPU's at 8, sections' at 12; values aligned at
//! column 46), as the captures in `../shared/fixtures/real-world/nvidia-sriov.md` show it.
//!
//! The simulated host runs no guests, so the values no kernel double knows read as an idle,
//! unstarted guest: `VM UUID`/`VM Name` `N/A`, 0 MiB framebuffer used, 0 % utilization,
//! `Unlicensed (Unrestricted)`. The vGPU ID (a driver handle on a real host) is made from the
//! vGPU's place so that it is stable between calls.

use std::fmt::Write as _;

use super::*;

/// NVIDIA's PCI vendor id.
const NVIDIA: u16 = 0x10de;

/// One line `    <key><padding>: <value>`, the value at column 46 as nvidia-smi aligns it.
fn field(out: &mut String, indent: usize, key: &str, value: &str) {
    let width = 42usize.saturating_sub(indent);
    let _ = writeln!(out, "{:indent$}{key:<width$}: {value}", "");
}

/// A vGPU as the simulated nvidia-smi lists it.
struct SmiVgpu {
    name: String,
    type_id: u32,
    mdev_uuid: Option<String>,
}

impl World {
    /// The output of `nvidia-smi vgpu -q` on this host.
    pub(crate) fn nvidia_smi_vgpu_query(&self) -> String {
        let gpus: Vec<&Pci> = self
            .pci
            .values()
            .filter(|pci| {
                pci.ids.0 == NVIDIA
                    && pci.ids.4 >> 16 == 0x03
                    && pci.physfn.is_none()
                    && pci.driver.as_deref() == Some("nvidia")
            })
            .collect();
        let mut out = String::from("\n==============NVSMI LOG==============\n\n");
        field(&mut out, 0, "Timestamp", "Tue Dec  1 00:00:00 2026");
        field(&mut out, 0, "Driver Version", "570.124.03");
        out.push('\n');
        field(&mut out, 0, "Attached GPUs", &gpus.len().to_string());
        for (gpu_index, gpu) in gpus.iter().enumerate() {
            let vgpus = self.smi_vgpus(gpu);
            let address = &gpu.address;
            let _ = writeln!(
                out,
                "GPU {:08X}:{:02X}:{:02X}.{:X}",
                address.domain(),
                address.bus(),
                address.device(),
                address.function()
            );
            field(&mut out, 4, "Active vGPUs", &vgpus.len().to_string());
            for (index, vgpu) in vgpus.iter().enumerate() {
                let id = 3_251_634_000u64 + gpu_index as u64 * 1000 + index as u64;
                field(&mut out, 4, "vGPU ID", &id.to_string());
                field(&mut out, 8, "VM UUID", "N/A");
                field(&mut out, 8, "VM Name", "N/A");
                field(&mut out, 8, "vGPU Name", &vgpu.name);
                field(&mut out, 8, "vGPU Type", &vgpu.type_id.to_string());
                if let Some(uuid) = &vgpu.mdev_uuid {
                    field(&mut out, 8, "MDEV UUID", uuid);
                }
                field(&mut out, 8, "Guest Driver Version", "N/A");
                field(&mut out, 8, "License Status", "Unlicensed (Unrestricted)");
                field(&mut out, 8, "Frame Rate Limit", "N/A");
                let _ = writeln!(out, "        FB Memory Usage");
                field(&mut out, 12, "Total", "N/A");
                field(&mut out, 12, "Used", "0 MiB");
                field(&mut out, 12, "Free", "N/A");
                let _ = writeln!(out, "        Utilization");
                field(&mut out, 12, "GPU", "0 %");
                field(&mut out, 12, "Memory", "0 %");
                field(&mut out, 12, "Encoder", "0 %");
                field(&mut out, 12, "Decoder", "0 %");
            }
            out.push('\n');
        }
        out
    }

    /// The vGPUs of one GPU: its mdevs and its VFs' mdevs of NVIDIA types, then its VFs with a
    /// vGPU type set, each in address/UUID order.
    fn smi_vgpus(&self, gpu: &Pci) -> Vec<SmiVgpu> {
        let vfs: Vec<&String> = gpu.sriov.iter().flat_map(|s| s.vfs.iter()).collect();
        let gpu_name = gpu.address.to_string();
        let mut vgpus = Vec::new();
        for (uuid, mdev) in &self.mdevs {
            if mdev.parent != gpu_name && !vfs.iter().any(|vf| **vf == mdev.parent) {
                continue;
            }
            // Only NVIDIA's types (`nvidia-<id>`) are vGPUs nvidia-smi knows.
            let Some(spec) = self
                .parents
                .get(&mdev.parent)
                .map(|parent| &parent.spec)
                .filter(|spec| spec.type_prefix == "nvidia")
            else {
                continue;
            };
            let Ok(type_id) = mdev.type_id.parse() else {
                continue;
            };
            let name = spec
                .types
                .iter()
                .find(|t| t.id == mdev.type_id)
                .and_then(|t| t.name.clone())
                .unwrap_or_else(|| format!("nvidia-{}", mdev.type_id));
            vgpus.push(SmiVgpu {
                name,
                type_id,
                mdev_uuid: Some(uuid.clone()),
            });
        }
        for vf in vfs {
            let Some(state) = self.pci.get(vf) else {
                continue;
            };
            if state.nvidia_current == 0 {
                continue;
            }
            let name = gpu
                .sriov
                .iter()
                .flat_map(|s| s.spec.nvidia_vgpu_types.iter())
                .find(|t| t.id == state.nvidia_current)
                .map_or_else(|| state.nvidia_current.to_string(), |t| t.name.clone());
            vgpus.push(SmiVgpu {
                name,
                type_id: state.nvidia_current,
                mdev_uuid: None,
            });
        }
        vgpus
    }
}
