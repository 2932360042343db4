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
//! as NVIDIA's tool does. Supported GPUs: mdev parents themselves (time-sliced vGPU, e.g. T4,
//! V100), and NVIDIA SR-IOV vGPU GPUs with their VFs enabled (Hopper and later:
//! `creatable_vgpu_types` on each VF, the type named there). A GPU whose VFs are not enabled,
//! or whose vGPUs are mdevs on its VFs (Ampere), is refused naming it and why.
//!
//! NVIDIA SR-IOV type names: a VF lists only the types that can still be created, so a GPU
//! whose room is used up names none. The names read are kept per card model (PCI device id;
//! NVIDIA's type ids are per card model) in [`NvidiaTypeNames`], process-wide in the service,
//! so the running vGPUs of a full GPU are still recognised. A service started on a host whose
//! SR-IOV GPU is already full has not seen the names yet: the type is then reported as not
//! offered, naming the GPU.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use vgpu_profiles::desired::{DesiredInstances, DesiredState};
use vgpu_profiles::vgpu_dm::VgpuDmConfig;

use super::apply::ApplyError;
use super::{Engine, EngineError};
use mdev_host::discovery::{Inventory, PciFunction};

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
        if function.vendor_id == Some(NVIDIA_VENDOR) && is_gpu && !vfs.contains(&function.address) {
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

/// NVIDIA SR-IOV vGPU type names seen in `creatable_vgpu_types`: (card's PCI device id,
/// type id) -> name.
pub type NvidiaTypeNames = BTreeMap<(u16, u32), String>;

/// The names this service has seen (see the module header).
static SEEN_NVIDIA_TYPE_NAMES: Mutex<NvidiaTypeNames> = Mutex::new(BTreeMap::new());

/// The desired state `config` asks for on the host described by `inventory`; `names` is the
/// memory of NVIDIA SR-IOV type names, extended with the ones the inventory lists.
pub fn resolve_vgpu_dm(
    config: &VgpuDmConfig,
    inventory: &Inventory,
    names: &mut NvidiaTypeNames,
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
        let offered = offered_types(inventory, gpu, names).map_err(|why| {
            refuse(
                entry.line,
                &entry.key,
                format!("GPU {index} ({}) {why}", gpu.address),
            )
        })?;
        desired.whole_parents.push(gpu.address.clone());
        for wanted in &entry.vgpu_devices {
            let Some(type_id) = find_type(&offered, &wanted.type_name) else {
                let names: Vec<&str> = offered.iter().map(|(_, name)| name.as_str()).collect();
                return Err(refuse(
                    wanted.line,
                    &wanted.key,
                    format!(
                        "vGPU type {} is not offered by GPU {index} ({}); it offers {}",
                        wanted.type_name,
                        gpu.address,
                        names.join(", ")
                    ),
                ));
            };
            desired.instances.push(DesiredInstances {
                parent: Some(gpu.address.clone()),
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

/// The vGPU types a GPU offers as (type id, NVIDIA name): its own mdev types, or the
/// `creatable_vgpu_types` of its VFs; `Err` says why it offers none this way.
fn offered_types(
    inventory: &Inventory,
    gpu: &NvidiaGpu,
    names: &mut NvidiaTypeNames,
) -> Result<Vec<(String, String)>, String> {
    let address = gpu.address.as_str();
    let named =
        |id: String, name: Option<&str>| name.map(|name| (id, nvidia_name(name).to_owned()));
    if let Some(parent) = inventory
        .mdev_parents
        .iter()
        .find(|parent| parent.name == address)
    {
        return Ok(parent
            .types
            .iter()
            .filter_map(|offered| named(offered.id.clone(), offered.name.as_deref()))
            .collect());
    }
    let Some(pf) = inventory
        .sriov_pfs
        .iter()
        .find(|pf| pf.function.address.to_string() == address)
    else {
        return Err("offers no vGPU types (no mdev types, not an SR-IOV GPU)".to_owned());
    };
    let vf_addresses: HashSet<String> = pf
        .vfs
        .iter()
        .map(|vf| vf.function.address.to_string())
        .collect();
    if inventory
        .mdev_parents
        .iter()
        .any(|parent| vf_addresses.contains(&parent.name))
    {
        return Err("has its vGPU types on its VFs as mdev parents (Ampere SR-IOV), which vgpu-device-manager files do not cover here yet; use the TOML format with the VFs as parents".to_owned());
    }
    if pf.vfs.is_empty() {
        return Err(format!(
            "is an SR-IOV vGPU GPU whose VFs are not enabled; enable them first (vgpuctl sriov {address} --vfs {})",
            pf.total_vfs
        ));
    }
    let states: Vec<_> = pf.vfs.iter().filter_map(|vf| vf.nvidia.as_ref()).collect();
    if states.is_empty() {
        return Err("has no NVIDIA vGPU files on its VFs (nvidia/creatable_vgpu_types)".to_owned());
    }
    for creatable in states.iter().flat_map(|state| &state.creatable) {
        names.insert(
            (gpu.device_id, creatable.id),
            nvidia_name(&creatable.name).to_owned(),
        );
    }
    Ok(names
        .range((gpu.device_id, 0)..=(gpu.device_id, u32::MAX))
        .map(|((_, id), name)| (id.to_string(), name.clone()))
        .collect())
}

fn find_type(offered: &[(String, String)], type_name: &str) -> Option<String> {
    let by_name = |wanted: &str| {
        offered
            .iter()
            .find(|(_, name)| name == wanted)
            .map(|(id, _)| id.clone())
    };
    by_name(type_name).or_else(|| {
        ["MEALL", "NOME", "ME", "GFX"]
            .iter()
            .find_map(|suffix| type_name.strip_suffix(suffix))
            .and_then(by_name)
    })
}

impl Engine {
    /// The desired state of `config` on this host as the engine sees it now (see
    /// [`resolve_vgpu_dm`]).
    pub fn resolve_vgpu_dm(&self, config: &VgpuDmConfig) -> Result<DesiredState, EngineError> {
        let inventory = self.inventory()?;
        let mut names = SEEN_NVIDIA_TYPE_NAMES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(resolve_vgpu_dm(config, &inventory, &mut names)?)
    }
}

#[cfg(test)]
#[path = "apply_vgpu_dm_tests.rs"]
mod tests;
