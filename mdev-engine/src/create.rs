//! Creating instances: one, or a batch all or nothing (rolled back on a failure or a cancel),
//! placing profiles on parents, and recording each new instance before the call returns (a
//! batch saves its records once, at its end: [`super::context::Durability`]).

use super::{
    context, lock, profiles, Claim, CreateRequest, CreateTarget, Engine, EngineError, EngineEvent,
    ErrorKind, InstanceInfo, InstanceKind, Inventory, MdevDevice, OperationContext, Owner,
    PciAddress, PlacementRequest, Scheduling,
};
use crate::intents;
use crate::state::{InstanceRecord, ParentName, ProfileName, TypeId, Uuid};
use mdev_host::discovery::{self, layout, names};

/// How often a profile is placed again when its chosen parent filled up meanwhile.
const PLACEMENT_ATTEMPTS: u32 = 3;

/// Releases a UUID reservation when the creating call ends, however it ends.
pub(super) struct Reservation<'a> {
    pub(super) engine: &'a Engine,
    pub(super) uuid: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        lock(&self.engine.reserved).remove(&self.uuid);
    }
}

/// Refuses a weight outside 1..=10000 (shares are checked by the scheduler).
pub(super) fn check_scheduling(scheduling: &Scheduling) -> Result<(), EngineError> {
    if let Some(weight) = scheduling.weight {
        if !(1..=10_000).contains(&weight) {
            return Err(EngineError::InvalidArgument {
                what: "weight",
                value: weight.to_string(),
                reason: "must be 1..=10000".into(),
            });
        }
    }
    Ok(())
}

/// The parent and type a resolved target records, checked as [`Engine::create`] checks them
/// (a profile target has been resolved before a record is made).
fn target_names(target: &CreateTarget) -> Result<(ParentName, TypeId), EngineError> {
    match target {
        CreateTarget::Mdev { parent, type_id } => {
            Ok((ParentName::new(parent)?, TypeId::new(type_id)?))
        }
        CreateTarget::Vf { pf, .. } => Ok((pf.parse::<PciAddress>()?.into(), TypeId::vfio_pci())),
        CreateTarget::NvidiaVf { pf, type_id, .. } => {
            Ok((pf.parse::<PciAddress>()?.into(), TypeId::from(*type_id)))
        }
        CreateTarget::Passthrough { gpu, .. } => {
            Ok((gpu.parse::<PciAddress>()?.into(), TypeId::vfio_pci()))
        }
        CreateTarget::Profile { profile, .. } => Err(EngineError::Profile {
            profile: profile.clone(),
            reason: "resolves to another profile, which is not allowed".into(),
        }),
    }
}

/// A create target as error messages name it.
pub(super) fn describe_target(target: &CreateTarget) -> String {
    match target {
        CreateTarget::Mdev { parent, type_id } => format!("mdev type {type_id} on {parent}"),
        CreateTarget::Profile {
            profile,
            parent: Some(parent),
        } => format!("profile {profile} on {parent}"),
        CreateTarget::Profile {
            profile,
            parent: None,
        } => format!("profile {profile}"),
        CreateTarget::Vf { pf, vf: Some(vf) } => format!("VF {vf} of {pf}"),
        CreateTarget::Vf { pf, vf: None } => format!("a VF of {pf}"),
        CreateTarget::NvidiaVf {
            pf,
            type_id,
            vf: None,
        } => format!("NVIDIA vGPU type {type_id} on {pf}"),
        CreateTarget::NvidiaVf {
            pf,
            type_id,
            vf: Some(vf),
        } => format!("NVIDIA vGPU type {type_id} on VF {vf} of {pf}"),
        CreateTarget::Passthrough { gpu, .. } => format!("pass-through of GPU {gpu}"),
    }
}

impl Engine {
    /// Creates one instance (see [`Engine::create_batch`]) with the default context.
    pub fn create(&self, request: CreateRequest) -> Result<InstanceInfo, EngineError> {
        self.create_with(&OperationContext::default(), request)
    }

    /// [`Engine::create`] with `ctx` (its waits for the parent end by `ctx`'s deadline; a
    /// cancel before the VF bind stops it).
    pub fn create_with(
        &self,
        ctx: &OperationContext,
        request: CreateRequest,
    ) -> Result<InstanceInfo, EngineError> {
        let record = self.create_one(ctx, &request, None)?;
        Ok(self.info_of(&record))
    }

    /// Creates every instance or none: a failure part-way rolls back what the batch did and
    /// returns [`EngineError::Batch`] naming the step and its cause.
    ///
    /// A batch of more than one saves the state twice however long it is: its UUIDs as
    /// `pending_creates` before the first sysfs write, then every record at once. A crash in
    /// between leaves devices the state does not list yet; [`Engine::reconcile`] removes them.
    ///
    /// Runs with the default context (see [`Engine::create_batch_with`]).
    pub fn create_batch(
        &self,
        requests: Vec<CreateRequest>,
    ) -> Result<Vec<InstanceInfo>, EngineError> {
        self.create_batch_with(&OperationContext::default(), requests)
    }

    /// [`Engine::create_batch`] with `ctx`: cancelling its token stops the batch before the
    /// next request (and once more after the last), rolling back everything it created.
    pub fn create_batch_with(
        &self,
        ctx: &OperationContext,
        mut requests: Vec<CreateRequest>,
    ) -> Result<Vec<InstanceInfo>, EngineError> {
        let total = requests.len();
        if total <= 1 {
            return self.create_batch_steps(ctx, &requests);
        }
        // Every UUID is fixed up front so the intent can name it.
        for request in &mut requests {
            if request.uuid.is_none() {
                request.uuid = Some(crate::new_uuid().to_string());
            }
        }
        // Only UUIDs free now: a crash must never make reconcile remove an instance that was
        // already there (a taken UUID fails its step anyway).
        let intent: Vec<Uuid> = {
            let state = lock(&self.state);
            requests
                .iter()
                .filter_map(|r| names::parse_uuid(r.uuid.as_deref()?).ok())
                .filter(|uuid| !self.fs().exists(&layout::mdev_device(uuid)))
                .filter(|uuid| !state.has_instance(uuid))
                .collect()
        };
        self.update_state(|state| state.pending_creates.extend(intent.iter().copied()))?;
        let outcome = self.create_batch_steps(&ctx.in_batch(), &requests);
        let saved = self.update_state(|state| {
            for uuid in &intent {
                state.pending_creates.remove(uuid);
            }
        });
        match (outcome, saved) {
            (Ok(infos), Ok(())) => Ok(infos),
            (Err(error), _) => Err(error),
            (Ok(infos), Err(error)) => {
                // Nothing may exist that the durable state does not know: undo the batch.
                let created: Vec<InstanceRecord> = infos
                    .iter()
                    .filter_map(|info| lock(&self.state).instance(&info.uuid).cloned())
                    .collect();
                let rollback_failures = self.roll_back(&created);
                Err(EngineError::Batch {
                    step: format!("recording the batch of {total} instances"),
                    source: Box::new(error),
                    rollback_failures,
                })
            }
        }
    }

    fn create_batch_steps(
        &self,
        ctx: &OperationContext,
        requests: &[CreateRequest],
    ) -> Result<Vec<InstanceInfo>, EngineError> {
        let total = requests.len();
        let mut done: Vec<InstanceRecord> = Vec::new();
        // One discovery for the whole batch: each step's placement sees it updated with what the
        // steps before it created (re-reading only the parent that changed).
        let mut placement_view = None;
        for (index, request) in requests.iter().enumerate() {
            let created = ctx
                .check(|| format!("creating {}", describe_target(&request.target)))
                .and_then(|()| self.create_one_placed(ctx, request, None, &mut placement_view));
            match created {
                Ok(record) => done.push(record),
                Err(error) => {
                    let rollback_failures = self.roll_back(&done);
                    return Err(EngineError::Batch {
                        step: format!(
                            "request {} of {total} ({})",
                            index + 1,
                            describe_target(&request.target)
                        ),
                        source: Box::new(error),
                        rollback_failures,
                    });
                }
            }
        }
        // A cancel that came during the last step still undoes the whole batch.
        if let Err(error) = ctx.check(|| "finishing the batch".to_owned()) {
            let rollback_failures = self.roll_back(&done);
            return Err(EngineError::Batch {
                step: format!("creating {total} instance(s)"),
                source: Box::new(error),
                rollback_failures,
            });
        }
        Ok(done.iter().map(|record| self.info_of(record)).collect())
    }

    /// Creates one instance. `claim` is recorded with it when given.
    pub(crate) fn create_one(
        &self,
        ctx: &OperationContext,
        request: &CreateRequest,
        claim: Option<Claim>,
    ) -> Result<InstanceRecord, EngineError> {
        self.create_one_placed(ctx, request, claim, &mut None)
    }

    /// [`Engine::create_one`] placing a profile on `view`, the host as a batch's earlier steps
    /// left it (discovered when `None`, then kept up to date with what this step creates).
    fn create_one_placed(
        &self,
        ctx: &OperationContext,
        request: &CreateRequest,
        claim: Option<Claim>,
        view: &mut Option<Inventory>,
    ) -> Result<InstanceRecord, EngineError> {
        let uuid = match &request.uuid {
            Some(text) => names::parse_uuid(text)?,
            None => crate::new_uuid(),
        };
        let key = uuid.to_string();
        for (name, value) in &request.attributes {
            names::check_attribute_name(name)?;
            names::check_sysfs_value(name, value)?;
        }
        check_scheduling(&request.scheduling)?;
        let _reservation = {
            let state = lock(&self.state);
            let mut reserved = lock(&self.reserved);
            if state.has_instance(&key) || !reserved.insert(key.clone()) {
                return Err(EngineError::AlreadyExists { uuid: key });
            }
            Reservation {
                engine: self,
                uuid: key.clone(),
            }
        };
        // A placement is computed before the parent's lock is taken; if another request took
        // the capacity meanwhile, place again (a pinned parent has nowhere else to go).
        let attempts = match &request.target {
            CreateTarget::Profile { parent: None, .. } => PLACEMENT_ATTEMPTS,
            _ => 1,
        };
        let mut attempt = 1;
        loop {
            let mut scheduling = request.scheduling;
            let (target, profile) = match &request.target {
                CreateTarget::Profile { profile, parent } => {
                    if view.is_none() {
                        *view = Some(self.inventory()?);
                    }
                    let inventory = view.as_ref().ok_or_else(|| EngineError::InvalidArgument {
                        what: "placement",
                        value: profile.clone(),
                        reason: "no host view to place on".into(),
                    })?;
                    let resolved = self.resolve_profile(
                        profile,
                        parent.as_deref(),
                        request.placement,
                        inventory,
                    )?;
                    scheduling.weight = scheduling.weight.or(Some(resolved.default_weight));
                    scheduling.min_share = scheduling.min_share.or(resolved.compute_shares.0);
                    scheduling.max_share = scheduling.max_share.or(resolved.compute_shares.1);
                    let name = ProfileName::new(profile).map_err(|error| {
                        EngineError::InvalidArgument {
                            what: "profile",
                            value: profile.clone(),
                            reason: error.to_string(),
                        }
                    })?;
                    (resolved.target, Some(name))
                }
                other => (other.clone(), None),
            };
            let target = match target {
                CreateTarget::Passthrough { gpu, force } => CreateTarget::Passthrough {
                    gpu,
                    force: force || request.force,
                },
                other => other,
            };
            // The kind, parent and type are the target's; `create_target` sets them again from
            // what it checked and chose.
            let (parent, type_id) = target_names(&target)?;
            let record = InstanceRecord {
                uuid,
                kind: InstanceKind::Mdev,
                parent,
                type_id,
                profile,
                owner: Owner::CreatedByUs,
                autostart: request.autostart,
                persistent: request.persistent || request.autostart,
                claim: claim.clone(),
                scheduling,
                attributes: request.attributes.clone(),
                vf: None,
                previous_driver: None,
                force: matches!(target, CreateTarget::Passthrough { force: true, .. }),
            };
            let created = self.create_target(ctx, &target, &uuid, record, &request.attributes);
            self.update_placement_view(view, &target, &created);
            match created {
                Err(error) if error.kind() == ErrorKind::NoCapacity && attempt < attempts => {
                    attempt += 1
                }
                other => return other,
            }
        }
    }

    /// Creates the device of a resolved target and records it (the reservation of `uuid` is
    /// held by the caller).
    fn create_target(
        &self,
        ctx: &OperationContext,
        target: &CreateTarget,
        uuid: &crate::Uuid,
        mut record: InstanceRecord,
        attributes: &[(String, String)],
    ) -> Result<InstanceRecord, EngineError> {
        let key = uuid.to_string();
        match target {
            CreateTarget::Mdev { parent, type_id } => {
                let parent_name = ParentName::new(parent)?;
                let type_name = TypeId::new(type_id)?;
                self.wait_for_path(ctx, parent, &layout::mdev_parent(parent), None)?;
                let parent_lock = self.parent_lock(parent);
                let _serialized = lock(&parent_lock);
                self.admit_at_create(parent, &key, &record.scheduling)?;
                if self.fs().exists(&layout::mdev_device(uuid)) {
                    return Err(EngineError::AlreadyExists { uuid: key });
                }
                self.check_capacity(parent, type_id)?;
                self.write_ahead(
                    &key,
                    intents::Intent::mdev(parent_name.clone(), type_name.clone()),
                )?;
                let written = self.host.create_mdev(parent, type_id, uuid, attributes);
                self.settle_intent(&key, written)?;
                record.parent = parent_name;
                record.type_id = type_name;
                self.commit_new(ctx, &record)?;
            }
            CreateTarget::Vf { pf, vf } => {
                if !attributes.is_empty() {
                    return Err(EngineError::InvalidArgument {
                        what: "attributes",
                        value: format!("{attributes:?}"),
                        reason: "a VF bound to vfio-pci takes no vendor attributes".into(),
                    });
                }
                let pf: PciAddress = pf.parse()?;
                let wanted: Option<PciAddress> = vf.as_deref().map(str::parse).transpose()?;
                self.wait_for_path(ctx, &pf.to_string(), &layout::pci_device(&pf), None)?;
                let parent_lock = self.parent_lock(&pf.to_string());
                let _serialized = lock(&parent_lock);
                self.admit_at_create(&pf.to_string(), &key, &record.scheduling)?;
                let chosen = self.pick_free_vf(pf, wanted)?;
                ctx.check(|| format!("binding VF {chosen} to vfio-pci"))?;
                record.kind = InstanceKind::Vf;
                record.parent = pf.into();
                record.type_id = TypeId::vfio_pci();
                record.vf = Some(chosen);
                let driver = discovery::link_target_name(
                    self.fs(),
                    &layout::pci_device(&chosen).join("driver"),
                );
                let intent =
                    intents::Intent::vf(InstanceKind::Vf, pf, TypeId::vfio_pci(), chosen, driver);
                self.write_ahead(&key, intent)?;
                let bound = self.host.bind_vfio(chosen);
                record.previous_driver = self.settle_intent(&key, bound)?;
                self.commit_new(ctx, &record)?;
            }
            CreateTarget::NvidiaVf { pf, type_id, vf } => {
                let pf: PciAddress = pf.parse()?;
                let wanted: Option<PciAddress> = vf.as_deref().map(str::parse).transpose()?;
                self.wait_for_path(ctx, &pf.to_string(), &layout::pci_device(&pf), None)?;
                let parent_lock = self.parent_lock(&pf.to_string());
                let _serialized = lock(&parent_lock);
                self.admit_at_create(&pf.to_string(), &key, &record.scheduling)?;
                let vf = self.pick_nvidia_vf(pf, *type_id, wanted, None)?;
                if let Some(wanted) = wanted.filter(|wanted| *wanted != vf) {
                    return Err(EngineError::NoCapacity {
                        what: format!("NVIDIA vGPU type {type_id} on VF {wanted}"),
                        detail: format!(
                            "VF {wanted} of {pf} is taken or does not list type {type_id} in creatable_vgpu_types"
                        ),
                    });
                }
                let intent = intents::Intent::vf(
                    InstanceKind::NvidiaVf,
                    pf,
                    TypeId::from(*type_id),
                    vf,
                    None,
                );
                self.write_ahead(&key, intent)?;
                let written = self.host.set_nvidia_vgpu(vf, *type_id);
                self.settle_intent(&key, written)?;
                record.kind = InstanceKind::NvidiaVf;
                record.parent = pf.into();
                record.type_id = TypeId::from(*type_id);
                record.vf = Some(vf);
                if let Err(error) = self.write_vf_attributes(vf, attributes) {
                    let rollback = self
                        .host
                        .clear_nvidia_vgpu(vf)
                        .err()
                        .map(|e| format!("clearing vGPU on VF {vf}: {e}"));
                    return self.settle_intent(
                        &key,
                        Err(EngineError::Batch {
                            step: format!("writing attributes of NVIDIA vGPU {key} on VF {vf}"),
                            source: Box::new(error),
                            rollback_failures: rollback.into_iter().collect(),
                        }),
                    );
                }
                self.commit_new(ctx, &record)?;
            }
            CreateTarget::Passthrough { gpu, force } => {
                if !attributes.is_empty() {
                    return Err(EngineError::InvalidArgument {
                        what: "attributes",
                        value: format!("{attributes:?}"),
                        reason: "a pass-through GPU takes no vendor attributes".into(),
                    });
                }
                let gpu: PciAddress = gpu.parse()?;
                let parent_lock = self.parent_lock(&gpu.to_string());
                let _serialized = lock(&parent_lock);
                self.bind_passthrough(ctx, &mut record, gpu, *force)?;
            }
            CreateTarget::Profile { profile, .. } => {
                return Err(EngineError::Profile {
                    profile: profile.clone(),
                    reason: "resolves to another profile, which is not allowed".into(),
                });
            }
        }
        self.emit(EngineEvent::InstanceAdded { uuid: key });
        self.emit_capacity_change(&record);
        self.after_vf_change(&record, false);
        Ok(record)
    }

    fn write_vf_attributes(
        &self,
        vf: PciAddress,
        attributes: &[(String, String)],
    ) -> Result<(), EngineError> {
        for (name, value) in attributes {
            self.host
                .write(&layout::pci_device(&vf).join(name), value)?;
        }
        Ok(())
    }

    /// Records a new instance. If the state cannot be saved the device is removed again, so
    /// nothing exists that the state does not know.
    fn commit_new(
        &self,
        ctx: &OperationContext,
        record: &InstanceRecord,
    ) -> Result<(), EngineError> {
        // Inside a batch an mdev is recorded in memory only: its UUID is in the saved
        // `pending_creates`, which lets reconcile find it after a crash, and the batch saves
        // every record at its end. VF kinds cannot be found by UUID, so they save now.
        if record.kind == InstanceKind::Mdev
            && ctx.durability() == context::Durability::DeferredToBatchEnd
        {
            lock(&self.state).insert_instance(record.clone());
            return Ok(());
        }
        let key = record.uuid.to_string();
        let intent = lock(&self.state).intents.get(&key).cloned();
        let saved = self.update_state(|state| {
            state.insert_instance(record.clone());
            Self::intent_done(state, &key);
        });
        if let Err(error) = saved {
            lock(&self.state).remove_instance(&record.uuid);
            let rollback = self
                .remove_device(record)
                .err()
                .map(|e| format!("removing {} {}: {e}", record.kind, record.uuid));
            if let (Some(intent), Some(_)) = (intent, &rollback) {
                // The device stays: so does the intent that proves it is ours.
                lock(&self.state).intents.insert(key, intent);
            }
            return Err(EngineError::Batch {
                step: format!("recording {} {}", record.kind, record.uuid),
                source: Box::new(error),
                rollback_failures: rollback.into_iter().collect(),
            });
        }
        Ok(())
    }

    /// Refuses an mdev create on a type with no room (checked under the parent lock, so
    /// concurrent creates cannot both see the last instance).
    pub(super) fn check_capacity(&self, parent: &str, type_id: &str) -> Result<(), EngineError> {
        let dir = layout::mdev_type(parent, type_id);
        let path = dir.join("available_instances");
        // One read; only a failed one looks at whether the type is there at all.
        let text = self.fs().read(&path).map_err(|source| {
            if self.fs().exists(&dir) {
                EngineError::Sysfs {
                    op: "read",
                    path: path.clone(),
                    source,
                }
            } else {
                EngineError::UnknownType {
                    parent: parent.to_owned(),
                    type_id: type_id.to_owned(),
                }
            }
        })?;
        let available: u32 = text.trim().parse().map_err(|_| EngineError::Sysfs {
            op: "read",
            path: path.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a count: {text:?}"),
            ),
        })?;
        if available == 0 {
            return Err(EngineError::NoCapacity {
                what: format!("type {type_id} on {parent}"),
                detail: "available_instances is 0".into(),
            });
        }
        Ok(())
    }

    /// Brings a batch's host view in line after one create: the `available_instances` of the
    /// mdev's parent's types are read again (a create on one type can move them all) and the
    /// new mdev is listed; any other outcome (a VF bound, a failure that may mean another
    /// caller took the room) drops the view, so the next step discovers afresh.
    fn update_placement_view(
        &self,
        view: &mut Option<Inventory>,
        target: &CreateTarget,
        created: &Result<InstanceRecord, EngineError>,
    ) {
        let (Some(inventory), CreateTarget::Mdev { parent, .. }, Ok(record)) =
            (view.as_mut(), target, created)
        else {
            *view = None;
            return;
        };
        let Some(cached) = inventory
            .mdev_parents
            .iter_mut()
            .find(|p| &p.name == parent)
        else {
            *view = None;
            return;
        };
        for mdev_type in &mut cached.types {
            let path = layout::mdev_type(parent, &mdev_type.id).join("available_instances");
            let Some(available) = self
                .fs()
                .read(&path)
                .ok()
                .and_then(|text| text.trim().parse::<u32>().ok())
            else {
                *view = None;
                return;
            };
            mdev_type.available_instances = available;
            if let Some(offered) = &mut mdev_type.offered {
                offered.available_instances = available;
            }
            if mdev_type.id == record.type_id {
                mdev_type.devices.push(record.uuid.to_string());
            }
        }
        inventory.mdevs.push(MdevDevice {
            uuid: record.uuid.to_string(),
            parent: record.parent.to_string(),
            type_id: record.type_id.to_string(),
            iommu_group: None,
            vfio_device: None,
        });
    }

    pub(super) fn resolve_profile(
        &self,
        profile: &str,
        parent: Option<&str>,
        placement: PlacementRequest,
        inventory: &Inventory,
    ) -> Result<profiles::Resolved, EngineError> {
        if let Some(parent) = parent {
            names::check_sysfs_name("parent", parent)?;
        }
        let taken: Vec<PciAddress> = lock(&self.state)
            .instances
            .values()
            .filter_map(|r| r.vf)
            .collect();
        let profiles = self
            .profiles
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(found) = profiles.get(profile) {
            if let Some(target) = self.resolve_passthrough_profile(found, parent)? {
                return Ok(profiles::Resolved {
                    target,
                    default_weight: found.default_weight().get(),
                    compute_shares: (None, None),
                });
            }
        }
        let options = placement.or(self.config.placement).options(parent);
        profiles.resolve(
            profile,
            &options,
            inventory,
            &taken,
            &self.config.nvidia_mixed_mode_parents,
        )
    }
}
