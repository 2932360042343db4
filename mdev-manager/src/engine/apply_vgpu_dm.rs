//! NVIDIA vgpu-device-manager configurations on this host: a [`VgpuDmConfig`] resolved
//! into the [`DesiredState`] the plan works on.
//!
//! Contract: [`resolve_vgpu_dm`] is pure (configuration + inventory). The host's NVIDIA GPUs
//! are counted as NVIDIA's tools count them: NVIDIA (`0x10de`) display or 3D controllers that
//! are not VFs, in PCI address order; an entry matches the GPUs its `device-filter` (if any)
//! and `devices` select, and a GPU matched by several entries takes the last one (NVIDIA's
//! tool applies the entries in turn, each clearing the GPU). Each matched GPU is described
//! whole, like a parent named in a TOML file: its running instances that the entry does not
//! want are removed (the plan refuses held and foreign ones). A vGPU type name (`T4-1Q`) is
//! the mdev type of the GPU whose `name` is that name after the driver's `GRID `/`NVIDIA `
//! prefix; a MIG attribute suffix (`GFX`, `ME`, ...) is dropped when only the bare name exists,
//! as NVIDIA's tool does. Supported GPUs are the ones that are mdev parents themselves
//! (time-sliced vGPU, e.g. T4, V100); a GPU whose vGPUs live on its VFs is refused naming it.

use std::collections::{BTreeMap, HashSet};

use vgpu_profiles::desired::{DesiredInstances, DesiredState};
use vgpu_profiles::vgpu_dm::VgpuDmConfig;

use super::apply::ApplyError;
use super::{Engine, EngineError};
use crate::discovery::{Inventory, MdevParent, PciFunction};

const NVIDIA_VENDOR: u16 = 0x10de;

/// One NVIDIA GPU as NVIDIA's tools index it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaGpu {
    /// Index in PCI address order (`devices: [i]`).
    pub index: u32,
    /// Its address.
    pub address: String,
    /// PCI device id.
    pub device_id: u16,
}

/// The host's NVIDIA GPUs in NVIDIA's order: display (0x0300) or 3D (0x0302) controllers of
/// vendor 0x10de that are not VFs, sorted by PCI address.
pub fn nvidia_gpus(inventory: &Inventory) -> Vec<NvidiaGpu> {
    let vfs: HashSet<_> = inventory
        .sriov_pfs
        .iter()
        .flat_map(|pf| pf.vfs.iter().map(|vf| vf.function.address))
        .collect();
    let functions = inventory
        .mdev_parents
        .iter()
        .filter_map(|parent| parent.pci.as_ref())
        .chain(inventory.sriov_pfs.iter().map(|pf| &pf.function))
        .chain(inventory.other_gpus.iter().map(|gpu| &gpu.function));
    let mut found: BTreeMap<_, &PciFunction> = BTreeMap::new();
    for function in functions {
        let is_gpu = function
            .class
            .is_some_and(|class| matches!(class >> 8, 0x0300 | 0x0302));
        if function.vendor_id == Some(NVIDIA_VENDOR) && is_gpu && !vfs.contains(&function.address)
        {
            found.entry(function.address).or_insert(function);
        }
    }
    found
        .values()
        .enumerate()
        .map(|(index, function)| NvidiaGpu {
            index: index as u32,
            address: function.address.to_string(),
            device_id: function.device_id.unwrap_or(0),
        })
        .collect()
}

/// The desired state `config` asks for on the host described by `inventory`.
pub fn resolve_vgpu_dm(
    config: &VgpuDmConfig,
    inventory: &Inventory,
) -> Result<DesiredState, ApplyError> {
    let gpus = nvidia_gpus(inventory);
    // GPU index -> the entry that describes it (the last matching one).
    let mut chosen: BTreeMap<u32, usize> = BTreeMap::new();
    for (position, entry) in config.entries.iter().enumerate() {
        for gpu in &gpus {
            let filtered = entry.device_filter.is_empty()
                || entry
                    .device_filter
                    .iter()
                    .any(|filter| filter.matches(NVIDIA_VENDOR, gpu.device_id));
            if filtered && entry.devices.selects(gpu.index) {
                chosen.insert(gpu.index, position);
            }
        }
    }
    let mut desired = DesiredState::default();
    for (index, position) in chosen {
        let gpu = &gpus[index as usize];
        let entry = &config.entries[position];
        let refuse = |line: usize, key: &str, reason: String| ApplyError::VgpuDm {
            file: config.file.clone(),
            line,
            key: key.to_owned(),
            reason,
        };
        let Some(parent) = inventory
            .mdev_parents
            .iter()
            .find(|parent| parent.name == gpu.address)
        else {
            return Err(refuse(
                entry.line,
                &entry.key,
                format!(
                    "GPU {index} ({}) offers no mdev vGPU types itself (its vGPUs, if any, are on its VFs); vgpu-device-manager files are supported for GPUs that are mdev parents, use the TOML format for this one",
                    gpu.address
                ),
            ));
        };
        desired.whole_parents.push(parent.name.clone());
        for wanted in &entry.vgpu_devices {
            let Some(type_id) = find_type(parent, &wanted.type_name) else {
                return Err(refuse(
                    wanted.line,
                    &wanted.key,
                    format!(
                        "vGPU type {} is not offered by GPU {index} ({}); it offers {}",
                        wanted.type_name,
                        gpu.address,
                        offered_names(parent)
                    ),
                ));
            };
            desired.instances.push(DesiredInstances {
                parent: Some(parent.name.clone()),
                profile: wanted.type_name.clone(),
                type_id: Some(type_id),
                count: wanted.count,
                autostart: false,
                weight: None,
                min_share: None,
                max_share: None,
            });
        }
    }
    Ok(desired)
}

/// The NVIDIA name of a type (`GRID T4-1Q` -> `T4-1Q`).
fn nvidia_name(name: &str) -> &str {
    let name = name.trim();
    name.strip_prefix("GRID ")
        .or_else(|| name.strip_prefix("NVIDIA "))
        .unwrap_or(name)
}

fn find_type(parent: &MdevParent, type_name: &str) -> Option<String> {
    let by_name = |wanted: &str| {
        parent
            .types
            .iter()
            .find(|offered| offered.name.as_deref().map(nvidia_name) == Some(wanted))
            .map(|offered| offered.id.clone())
    };
    by_name(type_name).or_else(|| {
        ["MEALL", "NOME", "ME", "GFX"]
            .iter()
            .find_map(|suffix| type_name.strip_suffix(suffix))
            .and_then(by_name)
    })
}

fn offered_names(parent: &MdevParent) -> String {
    let names: Vec<&str> = parent
        .types
        .iter()
        .filter_map(|offered| offered.name.as_deref().map(nvidia_name))
        .collect();
    if names.is_empty() {
        "no named types".to_owned()
    } else {
        names.join(", ")
    }
}

impl Engine {
    /// The desired state of `config` on this host as the engine sees it now (see
    /// [`resolve_vgpu_dm`]).
    pub fn resolve_vgpu_dm(&self, config: &VgpuDmConfig) -> Result<DesiredState, EngineError> {
        let inventory = self.inventory()?;
        Ok(resolve_vgpu_dm(config, &inventory)?)
    }
}

#[cfg(test)]
#[path = "apply_vgpu_dm_tests.rs"]
mod tests;
