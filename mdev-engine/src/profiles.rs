//! Profiles as the engine uses them: the `vgpu-profiles` catalog (built-in profiles plus the
//! `*.toml` files of the profiles directory), resolved against the discovered inventory into a
//! concrete [`CreateTarget`] by `vgpu-profiles`' placement.

use std::path::Path;
use std::sync::Arc;

use vgpu_profiles::placement::{place, ExistingInstance, ParentState, PlacementOptions};
use vgpu_profiles::vendor::{Isolation, OfferedType, PciIdentity, TypeSource};
use vgpu_profiles::Catalog;

use super::{CreateTarget, EngineError, Inventory, ProfileSummary};
use crate::state::StateFiles;
use mdev_host::discovery::gpus::OtherGpu;
use mdev_host::discovery::names::PciAddress;
use mdev_host::discovery::{PciFunction, SriovPf};

/// The loaded profiles (shared, not copied, with whoever handed them to the engine).
#[derive(Debug, Default)]
pub(crate) struct ProfileSet {
    catalog: Arc<Catalog>,
}

/// What a profile resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// What to create.
    pub target: CreateTarget,
    /// The profile's default scheduling weight.
    pub default_weight: u32,
    /// The profile's compute guarantee and cap in ppm (the scheduling state's unit), if any.
    pub compute_shares: (Option<u32>, Option<u32>),
}

impl ProfileSet {
    /// Loads the built-in catalog plus the directory's `*.toml` files (sorted by name; later
    /// files override earlier ones). With `strict`, the first bad file is an error naming it;
    /// otherwise bad files are skipped with a warning so the service still starts.
    pub(crate) fn load(
        files: &dyn StateFiles,
        dir: &Path,
        strict: bool,
    ) -> Result<Self, EngineError> {
        let listing = files.list(dir).map_err(|error| EngineError::Profile {
            profile: dir.display().to_string(),
            reason: format!("cannot list the profiles directory: {error}"),
        })?;
        let mut names: Vec<String> = listing
            .into_iter()
            .filter_map(|name| name.into_string().ok())
            .filter(|name| name.ends_with(".toml") && !name.starts_with('.'))
            .collect();
        names.sort();
        let mut texts: Vec<(String, String)> = Vec::new();
        for name in names {
            let path = dir.join(&name);
            let shown = path.display().to_string();
            match files.read(&path) {
                Ok(Some(data)) => match String::from_utf8(data) {
                    Ok(text) => texts.push((shown, text)),
                    Err(_) if strict => {
                        return Err(EngineError::Profile {
                            profile: shown,
                            reason: "not UTF-8 text".into(),
                        })
                    }
                    Err(_) => {
                        tracing::warn!(file = %shown, "profile file is not UTF-8 text; skipped")
                    }
                },
                Ok(None) => {}
                Err(error) if strict => {
                    return Err(EngineError::Profile {
                        profile: shown,
                        reason: format!("cannot read: {error}"),
                    })
                }
                Err(error) => {
                    tracing::warn!(file = %shown, %error, "cannot read profile file; skipped")
                }
            }
        }
        let borrowed: Vec<(&str, &str)> = texts
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        let catalog = if strict {
            Catalog::with_overrides(&borrowed).map_err(|error| EngineError::Profile {
                profile: dir.display().to_string(),
                reason: error.to_string(),
            })?
        } else {
            let (catalog, errors) = Catalog::with_overrides_skipping_errors(&borrowed);
            for error in errors {
                tracing::warn!(%error, "profile file skipped");
            }
            catalog
        };
        Ok(Self {
            catalog: Arc::new(catalog),
        })
    }

    /// Profiles loaded beforehand (see `Engine::with_catalog`).
    pub(crate) fn from_catalog(catalog: Arc<Catalog>) -> Self {
        Self { catalog }
    }

    /// The catalog, shared.
    pub(crate) fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.catalog)
    }

    /// The profile called `name`, if any.
    pub(crate) fn get(&self, name: &str) -> Option<&vgpu_profiles::Profile> {
        self.catalog.get(name)
    }

    pub(crate) fn len(&self) -> usize {
        self.catalog.len()
    }

    pub(crate) fn summaries(&self) -> Vec<ProfileSummary> {
        self.catalog
            .iter()
            .map(|profile| ProfileSummary {
                name: profile.name.to_string(),
                description: Some(profile.description.clone()).filter(|d| !d.is_empty()),
            })
            .collect()
    }

    /// Resolves `profile` (optionally pinned to `parent`) into what to create, by placing it
    /// over every parent of the inventory (`taken_vfs` are VFs the manager already uses).
    pub(crate) fn resolve(
        &self,
        profile_name: &str,
        options: &PlacementOptions,
        inventory: &Inventory,
        taken_vfs: &[PciAddress],
        mixed_mode_parents: &[String],
    ) -> Result<Resolved, EngineError> {
        let profile =
            self.catalog
                .get(profile_name)
                .ok_or_else(|| EngineError::UnknownProfile {
                    profile: profile_name.to_owned(),
                })?;
        let mut parents = mdev_parent_states(inventory);
        // A VF named as the parent (NVIDIA SR-IOV vGPU admins address VFs): placed on its PF,
        // with that VF the only one offered. A VF that is an mdev parent itself (NVIDIA's
        // vGPU-on-VF drivers register each VF) stays the parent.
        let pinned_vf = options
            .parent
            .as_deref()
            .filter(|parent| !parents.iter().any(|p| p.address == *parent))
            .and_then(|parent| vf_named(inventory, parent, taken_vfs))
            .transpose()?;
        let pinned_options;
        let options = match &pinned_vf {
            Some((pf, _)) => {
                pinned_options = PlacementOptions {
                    parent: Some(pf.function.address.to_string()),
                    ..options.clone()
                };
                &pinned_options
            }
            None => options,
        };
        for pf in &inventory.sriov_pfs {
            let only_vf = pinned_vf
                .as_ref()
                .filter(|(pinned_pf, _)| pinned_pf.function.address == pf.function.address)
                .map(|(_, vf)| *vf);
            if let Some(state) = sriov_parent_state(pf, taken_vfs, only_vf) {
                parents.push(state);
            }
        }
        for parent in &mut parents {
            parent.nvidia_mixed_mode = mixed_mode_parents.contains(&parent.address);
        }
        if let Some(parent) = &options.parent {
            if !parents.iter().any(|p| &p.address == parent) {
                if let Some(gpu) = other_gpu(inventory, parent) {
                    return Err(EngineError::NotSupported {
                        what: format!("creating profile {profile_name} on GPU {parent}"),
                        reason: gpu.reason(),
                    });
                }
                return Err(EngineError::UnknownParent {
                    parent: parent.clone(),
                });
            }
        }
        let placement =
            place(profile, &parents, options).map_err(|error| EngineError::NoCapacity {
                what: format!("profile {profile_name}"),
                detail: with_other_gpus(error.to_string(), inventory),
            })?;
        let target = match placement.offered.source {
            TypeSource::Mdev { type_id } => CreateTarget::Mdev {
                parent: placement.parent,
                type_id,
            },
            TypeSource::NvidiaVf { type_id } => CreateTarget::NvidiaVf {
                pf: placement.parent,
                type_id,
                vf: pinned_vf.map(|(_, vf)| vf.to_string()),
            },
            TypeSource::WholeVf => CreateTarget::Vf {
                pf: placement.parent,
                vf: Some(placement.offered.id),
            },
            TypeSource::WholeDevice => {
                return Err(EngineError::NotSupported {
                    what: format!("profile {profile_name}"),
                    reason: "whole-device passthrough is not created by the manager".into(),
                })
            }
        };
        Ok(Resolved {
            target,
            default_weight: profile.default_weight().get(),
            compute_shares: (
                profile
                    .compute
                    .min_share
                    .map(|p| u32::from(p.get()) * 10_000),
                profile
                    .compute
                    .max_share
                    .map(|p| u32::from(p.get()) * 10_000),
            ),
        })
    }
}

/// The GPU at `address` that hosts no vGPU, if that is what it is.
pub(crate) fn other_gpu<'a>(inventory: &'a Inventory, address: &str) -> Option<&'a OtherGpu> {
    inventory
        .other_gpus
        .iter()
        .find(|gpu| gpu.function.address.to_string() == address)
}

/// A placement failure's detail, followed by the GPUs that host no vGPU and why (so "no
/// parent" on a host whose only GPU lacks the vGPU manager says so).
fn with_other_gpus(detail: String, inventory: &Inventory) -> String {
    let mut detail = detail;
    for gpu in &inventory.other_gpus {
        detail.push_str(&format!(
            "; GPU {} hosts no vGPU: {}",
            gpu.function.address,
            gpu.reason()
        ));
    }
    detail
}

fn numa_of(pci: Option<&PciFunction>) -> Option<u32> {
    pci.and_then(|p| p.numa_node)
        .and_then(|node| u32::try_from(node).ok())
}

fn mdev_parent_states(inventory: &Inventory) -> Vec<ParentState> {
    inventory
        .mdev_parents
        .iter()
        .map(|parent| {
            let instances = inventory
                .mdevs
                .iter()
                .filter(|m| m.parent == parent.name)
                .map(|m| ExistingInstance {
                    type_id: m.type_id.clone(),
                    type_name: parent
                        .types
                        .iter()
                        .find(|t| t.id == m.type_id)
                        .and_then(|t| t.name.clone()),
                })
                .collect();
            ParentState {
                address: parent.name.clone(),
                numa_node: numa_of(parent.pci.as_ref()),
                offered: parent
                    .types
                    .iter()
                    .filter_map(|t| t.offered.clone())
                    .collect(),
                instances,
                nvidia_mixed_mode: false,
            }
        })
        .collect()
}

/// A PF as placement sees it: NVIDIA SR-IOV vGPU types offered by its free VFs, or its free
/// VFs as whole functions (AMD MxGPU and other SR-IOV devices the profile matches).
/// When `parent` is an enabled VF of an SR-IOV PF: that PF and the VF, or why the VF can't
/// take an instance (the same rules as automatic picking, except that a VF a host driver
/// uses is the caller's to name).
fn vf_named<'a>(
    inventory: &'a Inventory,
    parent: &str,
    taken_vfs: &[PciAddress],
) -> Option<Result<(&'a SriovPf, PciAddress), EngineError>> {
    let address: PciAddress = parent.parse().ok()?;
    let (pf, vf) = inventory.sriov_pfs.iter().find_map(|pf| {
        pf.vfs
            .iter()
            .find(|vf| vf.function.address == address)
            .map(|vf| (pf, vf))
    })?;
    let taken = if taken_vfs.contains(&address) {
        Some("an instance of mdev-manager uses it".to_owned())
    } else if vf.function.driver.as_deref() == Some(crate::lifecycle::VFIO_PCI) {
        Some("it is bound to vfio-pci outside mdev-manager".to_owned())
    } else {
        vf.nvidia
            .as_ref()
            .filter(|nvidia| nvidia.current_type != 0)
            .map(|nvidia| format!("it already has NVIDIA vGPU type {}", nvidia.current_type))
    };
    Some(match taken {
        Some(reason) => Err(EngineError::NoCapacity {
            what: format!("VF {address} of {}", pf.function.address),
            detail: reason,
        }),
        None => Ok((pf, address)),
    })
}

fn sriov_parent_state(
    pf: &SriovPf,
    taken_vfs: &[PciAddress],
    only_vf: Option<PciAddress>,
) -> Option<ParentState> {
    let address = pf.function.address.to_string();
    let is_free = |vf: &&mdev_host::discovery::VirtualFunction| {
        !taken_vfs.contains(&vf.function.address)
            && vf.function.driver.as_deref() != Some(crate::lifecycle::VFIO_PCI)
            && vf.nvidia.as_ref().is_none_or(|nv| nv.current_type == 0)
    };
    let mut instances = Vec::new();
    let mut offered: Vec<OfferedType> = Vec::new();
    if pf.vfs.iter().any(|vf| vf.nvidia.is_some()) {
        for vf in &pf.vfs {
            let Some(nvidia) = &vf.nvidia else { continue };
            if nvidia.current_type != 0 {
                let name = nvidia
                    .creatable
                    .iter()
                    .find(|t| t.id == nvidia.current_type)
                    .map(|t| t.name.clone());
                instances.push(ExistingInstance {
                    type_id: nvidia.current_type.to_string(),
                    type_name: name,
                });
            }
            if !is_free(&vf) || only_vf.is_some_and(|only| only != vf.function.address) {
                continue;
            }
            for creatable in &nvidia.creatable {
                match offered
                    .iter_mut()
                    .find(|o| o.id == creatable.id.to_string())
                {
                    Some(existing) => existing.available_instances += 1,
                    None => offered.push(OfferedType::from_creatable(creatable)),
                }
            }
        }
    } else {
        // Whole VFs: each free VF is offered as itself; the profile's device match (vendor,
        // class, ...) is checked by resolution against its PCI identity.
        for vf in &pf.vfs {
            let named = only_vf == Some(vf.function.address);
            if only_vf.is_some() && !named {
                continue;
            }
            // Like automatic VF picking: a VF a host driver uses is offered only when named.
            if !is_free(&vf) || (vf.function.driver.is_some() && !named) {
                instances.push(ExistingInstance {
                    type_id: vf.function.address.to_string(),
                    type_name: None,
                });
                continue;
            }
            let identity = PciIdentity {
                address: vf.function.address.to_string(),
                vendor_id: vf.function.vendor_id.or(pf.function.vendor_id).unwrap_or(0),
                device_id: vf.function.device_id.or(pf.vf_device_id).unwrap_or(0),
                class_code: vf.function.class.or(pf.function.class).unwrap_or(0),
            };
            let name = format!("VF {} of {address}", vf.function.address);
            offered.push(OfferedType::whole_function(
                identity,
                &name,
                Isolation::WholeVf,
                None,
                true,
            ));
        }
    }
    Some(ParentState {
        address,
        numa_node: numa_of(Some(&pf.function)),
        offered,
        instances,
        nvidia_mixed_mode: false,
    })
}
