//! Incremental publication: the engine's events name exactly what changed (an instance, a
//! type's capacity, a parent, the profiles); [`Service::refresh`] drains the events emitted so
//! far, re-reads only the objects they name and brings those exported objects (and their
//! parents' `Instances` lists and the parents' schedules) in line. Nothing else of the host is
//! read; a full re-read happens only at start, for a parent whose VF count changed (its VFs
//! may be parents of their own), or when the event stream was lost.
//!
//! Contract kept from the full re-read: the engine emits an event before the call that made
//! the change returns, so a method that calls `refresh` after its engine call publishes its own
//! change before it replies (the next listing and `GetManagedObjects` show it).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use dbus_api::path;
use zbus::{Connection, OwnedObjectPath};

use super::interfaces::{InstanceIface, ParentIface, ProfileIface, SriovIface, TypeIface};
use super::model::{self, InstanceData, Model, ParentData, ProfileData};
use super::{put, remove_one, ExportedObjects, Service};
use mdev_engine::schedule::ParentScheduleStatus;
use mdev_engine::{Engine, EngineError, EngineEvent, Inventory};

/// What the events since the last publication name.
#[derive(Debug, Default)]
pub(super) struct Changes {
    /// Re-read everything (the event stream was lost).
    pub rescan: bool,
    /// The profiles were reloaded.
    pub profiles: bool,
    /// Parents whose own record changed, appeared or went away.
    pub parents: BTreeSet<String>,
    /// `(parent, type)` whose capacity changed (and with it, possibly, the room left in the
    /// parent's other types).
    pub types: BTreeSet<(String, String)>,
    /// Instances added, removed or changed.
    pub instances: BTreeSet<String>,
}

impl Changes {
    /// Notes one event.
    pub fn note(&mut self, event: EngineEvent) {
        match event {
            EngineEvent::InstanceAdded { uuid }
            | EngineEvent::InstanceRemoved { uuid }
            | EngineEvent::InstanceChanged { uuid } => {
                self.instances.insert(uuid);
            }
            EngineEvent::ParentAdded { parent }
            | EngineEvent::ParentRemoved { parent }
            | EngineEvent::ParentChanged { parent } => {
                self.parents.insert(parent);
            }
            EngineEvent::TypeChanged { parent, type_id } => {
                self.types.insert((parent, type_id));
            }
            EngineEvent::ProfilesChanged => self.profiles = true,
        }
    }

    /// Whether no event named anything.
    pub fn is_empty(&self) -> bool {
        !self.rescan
            && !self.profiles
            && self.parents.is_empty()
            && self.types.is_empty()
            && self.instances.is_empty()
    }
}

/// Where an exported instance lives (what a change of it may have changed besides itself).
#[derive(Debug, Clone)]
pub(super) struct Place {
    parent: String,
    type_id: String,
    mdev: bool,
}

impl Place {
    fn of(data: &InstanceData) -> Self {
        Self {
            parent: data.parent_name.clone(),
            type_id: data.type_id.clone(),
            mdev: data.kind == dbus_api::names::instance_kind::MDEV,
        }
    }
}

/// What one publication re-read.
#[derive(Debug, Default)]
pub(super) struct Patch {
    /// A whole re-read (replaces everything else).
    pub full: Option<(Model, Inventory)>,
    /// The profiles, when reloaded.
    pub profiles: Option<HashMap<OwnedObjectPath, ProfileData>>,
    /// Re-read parents: their records (empty model: gone).
    pub parents: Vec<(String, Model)>,
    /// Re-read types: `(parent, type path, record)`.
    pub types: Vec<model::TypeData>,
    /// Re-read instances (`None`: gone), by UUID, with where they were before.
    pub instances: Vec<(String, Option<Place>, Option<InstanceData>)>,
    /// The schedules of every parent whose instances or record changed.
    pub schedules: Vec<ParentScheduleStatus>,
}

/// Reads what `changes` name (blocking). `places` says where each changed instance was;
/// `hosts` is the discovery kept per parent, updated here for what is re-read.
pub(super) fn read_patch(
    engine: &Engine,
    changes: Changes,
    places: HashMap<String, Place>,
    hosts: &mut HashMap<String, Inventory>,
) -> Result<Patch, EngineError> {
    if changes.rescan {
        return full(engine, hosts);
    }
    let mut patch = Patch::default();
    if changes.profiles {
        patch.profiles = Some(profiles_of(engine));
    }
    let mut parents = changes.parents;
    let mut types = changes.types;
    let mut scheduled: BTreeSet<String> = BTreeSet::new();
    for uuid in changes.instances {
        let old = places.get(&uuid).cloned();
        let new = model::read_instance(engine, &uuid);
        for place in old.iter().chain(new.as_ref().map(Place::of).iter()) {
            scheduled.insert(place.parent.clone());
            if place.mdev {
                types.insert((place.parent.clone(), place.type_id.clone()));
            }
        }
        patch.instances.push((uuid, old, new));
    }
    // A type whose parent or type directory is not known as it is now: its parent is re-read.
    for (parent, type_id) in &types {
        let known = hosts
            .get(parent)
            .and_then(|inventory| inventory.mdev_parents.first())
            .is_some_and(|mdev| mdev.types.iter().any(|t| &t.id == type_id));
        if !known
            || !engine
                .host()
                .exists(&mdev_host::discovery::layout::mdev_type(parent, type_id))
        {
            parents.insert(parent.clone());
        }
    }
    for parent in &parents {
        let (record, inventory) = Model::read_parent(engine, parent)?;
        let vfs = |inventory: Option<&Inventory>| {
            inventory.and_then(|i| i.sriov_pfs.first().map(|pf| pf.num_vfs))
        };
        if vfs(hosts.get(parent)) != vfs(Some(&inventory)) {
            // VFs came or went: each may be a parent (or an other GPU) of its own.
            return full(engine, hosts);
        }
        if record.parents.is_empty() {
            hosts.remove(parent);
        } else {
            hosts.insert(parent.clone(), inventory);
        }
        scheduled.insert(parent.clone());
        patch.parents.push((parent.clone(), record));
    }
    for (parent, type_id) in types {
        if parents.contains(&parent) {
            continue;
        }
        let Some(mdev) = hosts
            .get_mut(&parent)
            .and_then(|inventory| inventory.mdev_parents.first_mut())
        else {
            continue;
        };
        let host = engine.host().as_ref();
        for kept in &mut mdev.types {
            if kept.id == type_id {
                *kept = mdev_host::discovery::read_mdev_type(host, &parent, &type_id);
            } else {
                // The types of a parent share its resources (NVIDIA: one type per GPU at a
                // time), so an mdev of one type may change the room left in every other;
                // their devices are theirs alone.
                let file = mdev_host::discovery::layout::mdev_type(&parent, &kept.id)
                    .join("available_instances");
                let Some(available) = mdev_host::discovery::read_optional(host, &file)
                    .map(|text| text.trim().parse::<u32>().unwrap_or(0))
                else {
                    continue;
                };
                if available == kept.available_instances {
                    continue;
                }
                kept.available_instances = available;
            }
            patch.types.push(model::type_data(&parent, kept));
        }
    }
    for parent in scheduled {
        if let Some(inventory) = hosts.get(&parent) {
            patch
                .schedules
                .extend(engine.schedule_overview_of(inventory));
        }
    }
    Ok(patch)
}

/// The whole host, read again.
fn full(engine: &Engine, hosts: &mut HashMap<String, Inventory>) -> Result<Patch, EngineError> {
    let (model, inventory) = Model::read_with_inventory(engine)?;
    *hosts = model::split_by_parent(&inventory);
    Ok(Patch {
        full: Some((model, inventory)),
        ..Patch::default()
    })
}

/// The profile records of the profiles loaded now.
fn profiles_of(engine: &Engine) -> HashMap<OwnedObjectPath, ProfileData> {
    engine
        .profiles()
        .into_iter()
        .map(|profile| {
            (
                path::profile_path(&profile.name),
                ProfileData {
                    name: profile.name,
                    description: profile.description.unwrap_or_default(),
                },
            )
        })
        .collect()
}

/// Where each of `uuids` is exported now.
pub(super) fn places_of(
    exported: &ExportedObjects,
    uuids: &BTreeSet<String>,
) -> HashMap<String, Place> {
    uuids
        .iter()
        .filter_map(|uuid| {
            let cell = exported.instances.get(&path::mdev_instance_path(uuid))?;
            let data = cell
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Some((uuid.clone(), Place::of(&data)))
        })
        .collect()
}

impl Service {
    /// Applies a patch read by [`read_patch`] to the exported objects: gone objects first
    /// (children before parents), then parents, types and instances, so a client never sees a
    /// dangling path; each changed record in one `PropertiesChanged`.
    pub(super) async fn apply_patch(
        self: &Arc<Self>,
        connection: &Connection,
        exported: &mut ExportedObjects,
        patch: Patch,
    ) {
        if let Some((model, _)) = patch.full {
            self.apply(connection, exported, model).await;
            return;
        }
        let server = connection.object_server();
        // What the prepared listing must take over.
        let mut listed_types: Vec<OwnedObjectPath> = Vec::new();
        let mut listed_instances: Vec<OwnedObjectPath> = Vec::new();
        let parents_moved = !patch.parents.is_empty();
        if let Some(profiles) = patch.profiles {
            super::remove_gone::<ProfileIface, _>(server, &mut exported.profiles, &profiles).await;
            super::add_or_update(
                server,
                connection,
                &mut exported.profiles,
                &profiles,
                |data| ProfileIface { data },
            )
            .await;
        }
        // Parents whose `Instances` list changes with the instances.
        let mut listed: BTreeSet<String> = BTreeSet::new();
        for (uuid, old, new) in &patch.instances {
            if new.is_none() {
                let path = path::mdev_instance_path(uuid);
                remove_one::<InstanceIface, _>(server, &mut exported.instances, &path).await;
                listed_instances.push(path);
            }
            if let Some(old) = old {
                if let Some(members) = exported.instances_by_parent.get_mut(&old.parent) {
                    members.remove(uuid);
                }
                listed.insert(old.parent.clone());
            }
            if let Some(new) = new {
                exported
                    .instances_by_parent
                    .entry(new.parent_name.clone())
                    .or_default()
                    .insert(uuid.clone(), path::mdev_instance_path(uuid));
                listed.insert(new.parent_name.clone());
            }
        }
        // Gone types, SR-IOV interfaces and parents of re-read parents.
        for (name, record) in &patch.parents {
            let gone: Vec<OwnedObjectPath> = exported
                .types
                .iter()
                .filter(|(path, cell)| {
                    !record.types.contains_key(*path)
                        && cell
                            .read()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .parent_name
                            == *name
                })
                .map(|(path, _)| path.clone())
                .collect();
            for path in gone {
                remove_one::<TypeIface, _>(server, &mut exported.types, &path).await;
                listed_types.push(path);
            }
            let parent_path = path::parent_path(name);
            if !record.sriov.contains_key(&parent_path) {
                remove_one::<SriovIface, _>(server, &mut exported.sriov, &parent_path).await;
            }
            if !record.parents.contains_key(&parent_path) {
                remove_one::<ParentIface, _>(server, &mut exported.parents, &parent_path).await;
            }
        }
        // Parents: re-read ones, those whose instances changed, those whose schedule moved.
        let schedules: HashMap<&str, &ParentScheduleStatus> = patch
            .schedules
            .iter()
            .map(|status| (status.parent.as_str(), status))
            .collect();
        let mut fresh: HashMap<OwnedObjectPath, ParentData> = HashMap::new();
        for (_, record) in &patch.parents {
            fresh.extend(record.parents.clone());
        }
        let touched: BTreeSet<String> = listed
            .iter()
            .cloned()
            .chain(patch.parents.iter().map(|(name, _)| name.clone()))
            .chain(patch.schedules.iter().map(|status| status.parent.clone()))
            .collect();
        for name in &touched {
            let parent_path = path::parent_path(name);
            let base = match fresh.remove(&parent_path) {
                Some(record) => Some(record),
                None => exported.parents.get(&parent_path).map(|cell| {
                    cell.read()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone()
                }),
            };
            let Some(mut record) = base else {
                continue;
            };
            record.instances = exported
                .instances_by_parent
                .get(name)
                .map(|members| members.values().cloned().collect())
                .unwrap_or_default();
            match schedules.get(name.as_str()) {
                Some(status) => record.schedule = super::schedule::parent_data(status),
                None => {
                    if let Some(cell) = exported.parents.get(&parent_path) {
                        record.schedule = cell
                            .read()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .schedule
                            .clone();
                    }
                }
            }
            put(
                server,
                connection,
                &mut exported.parents,
                &parent_path,
                record,
                |data| ParentIface {
                    service: self.clone(),
                    data,
                },
            )
            .await;
        }
        for (_, record) in &patch.parents {
            for (path, data) in &record.sriov {
                put(
                    server,
                    connection,
                    &mut exported.sriov,
                    path,
                    data.clone(),
                    |data| SriovIface {
                        service: self.clone(),
                        data,
                    },
                )
                .await;
            }
        }
        let types = patch
            .parents
            .iter()
            .flat_map(|(_, record)| record.types.values().cloned())
            .chain(patch.types);
        for data in types {
            let type_path = path::mdev_type_path(&data.parent_name, &data.id);
            listed_types.push(type_path.clone());
            put(
                server,
                connection,
                &mut exported.types,
                &type_path,
                data,
                |data| TypeIface { data },
            )
            .await;
        }
        // Instances: the re-read ones and every sibling whose schedule moved, each with its
        // scheduling properties from its parent's schedule.
        let mut records: HashMap<OwnedObjectPath, InstanceData> = HashMap::new();
        for (uuid, _, new) in patch.instances {
            if let Some(new) = new {
                records.insert(path::mdev_instance_path(&uuid), new);
            }
        }
        for status in &patch.schedules {
            for instance in &status.instances {
                let instance_path = path::mdev_instance_path(&instance.uuid);
                let record = match records.get_mut(&instance_path) {
                    Some(record) => record,
                    None => {
                        let Some(cell) = exported.instances.get(&instance_path) else {
                            continue;
                        };
                        let current = cell
                            .read()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .clone();
                        records.entry(instance_path).or_insert(current)
                    }
                };
                (record.weight, record.schedule) = super::schedule::instance_schedule(instance);
            }
        }
        for (instance_path, data) in records {
            listed_instances.push(instance_path.clone());
            put(
                server,
                connection,
                &mut exported.instances,
                &instance_path,
                data,
                |data| InstanceIface {
                    service: self.clone(),
                    data,
                },
            )
            .await;
        }
        patch_listing(exported, &listed_types, &listed_instances, parents_moved);
    }
}

/// Brings the prepared `ListInstances`/`ListTypes` answer in line with the exported records of
/// `types` and `instances` (an entry replaced, inserted in order or dropped), instead of
/// building it again from every record at the next listing.
fn patch_listing(
    exported: &mut ExportedObjects,
    types: &[OwnedObjectPath],
    instances: &[OwnedObjectPath],
    parents_moved: bool,
) {
    let Some(prepared) = exported.listing.as_mut() else {
        return;
    };
    // A listing still being sent is left to its reader: this one is copied first.
    let listing = Arc::make_mut(prepared);
    fn read<D: Clone>(cell: &super::model::Shared<D>) -> D {
        cell.read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
    for type_path in types {
        listing.types.retain(|entry| &entry.object != type_path);
        if let Some(cell) = exported.types.get(type_path) {
            let entry = model::type_entry(type_path, &read(cell));
            let at = listing
                .types
                .partition_point(|e| (&e.parent_name, &e.id) < (&entry.parent_name, &entry.id));
            listing.types.insert(at, entry);
        }
    }
    for instance_path in instances {
        listing
            .instances
            .retain(|entry| &entry.object != instance_path);
        if let Some(cell) = exported.instances.get(instance_path) {
            let entry = model::instance_entry(instance_path, &read(cell));
            let at = listing
                .instances
                .partition_point(|e| (&e.parent_name, &e.uuid) < (&entry.parent_name, &entry.uuid));
            listing.instances.insert(at, entry);
        }
    }
    if parents_moved {
        listing.parents = exported
            .parents
            .values()
            .map(|cell| read(cell).name)
            .collect();
    }
}
