//! Reconcile on start: bring the host in line with the desired state and report every action.
//!
//! Order: pending releases first (they free devices), then VF counts (VF-based instances need
//! their VFs), then instances: recreate autostart ones, record vanished ones, list unknown ones
//! without touching them.

use std::collections::HashSet;
use std::path::Path;

use crate::{
    lock, DestroyOptions, DomainRef, Engine, EngineError, EngineEvent, OperationContext,
    ReconcileAction, ReconcileReport,
};
use mdev_host::discovery::{self, names, names::PciAddress, Inventory};

/// A reconcile pass and the host as it left it.
#[derive(Debug)]
pub struct Reconciled {
    /// What the pass did.
    pub report: ReconcileReport,
    /// A discovery made after the last change to devices, so a caller publishing the host
    /// needs no second one.
    pub inventory: Inventory,
    /// [`Engine::event_generation`] noted before that discovery: every event up to it is
    /// reflected in `inventory` and the state.
    pub generation: u64,
}
use crate::state::{InstanceRecord, Uuid, PENDING_RELEASES_DIR};

/// At most this many parents get their autostart instances started at once by a reconcile.
const RECONCILE_WORKERS: usize = 4;

impl Engine {
    /// Brings the host in line with the desired state (see [`ReconcileReport`]).
    pub fn reconcile(&self) -> Result<ReconcileReport, EngineError> {
        self.reconcile_and_discover().map(|done| done.report)
    }

    /// [`Engine::reconcile`], also handing back the one discovery the pass makes after its
    /// last device change (the daemon publishes it instead of discovering again).
    pub fn reconcile_and_discover(&self) -> Result<Reconciled, EngineError> {
        let mut report = ReconcileReport::default();
        // Unacknowledged writes first: what they made is not ours to keep (`intents`).
        self.finish_intents(&mut report);
        self.finish_interrupted_batches(&mut report)?;
        self.process_pending_releases(&mut report);
        self.restore_vf_counts(&mut report);
        // Before instances: a half-bound pass-through group goes back whole first.
        self.reconcile_passthrough();
        self.reconcile_instances(&mut report)?;
        let generation = self.event_generation();
        let inventory = discovery::discover(self.fs())?;
        let known: HashSet<Uuid> = lock(&self.state).instances.keys().copied().collect();
        for mdev in &inventory.mdevs {
            if Uuid::parse(&mdev.uuid).map_or(true, |uuid| !known.contains(&uuid)) {
                report.actions.push(ReconcileAction::Unknown {
                    id: mdev.uuid.clone(),
                    parent: mdev.parent.clone(),
                });
            }
        }
        // Weights and policies last: GIM's slices need the VFs recreated above.
        for line in self.apply_schedules_in(&inventory) {
            tracing::info!(target: "reconcile", "schedule: {line}");
        }
        Ok(Reconciled {
            report,
            inventory,
            generation,
        })
    }

    /// A batch create or destroy the service did not finish (it crashed between its intent and
    /// its final save): what a create made is removed (the batch never reported success), and
    /// a destroy is completed. Each is reported as vanished and forgotten.
    fn finish_interrupted_batches(&self, report: &mut ReconcileReport) -> Result<(), EngineError> {
        let interrupted: Vec<Uuid> = {
            let state = lock(&self.state);
            state
                .pending_creates
                .iter()
                .chain(&state.pending_destroys)
                .copied()
                .collect()
        };
        if interrupted.is_empty() {
            return Ok(());
        }
        let mut finished = Vec::new();
        for key in &interrupted {
            let uuid = *key;
            let record = lock(&self.state).instance(key).cloned();
            let removed = match &record {
                Some(record) => {
                    let parent_lock = self.parent_lock(&record.parent);
                    let _serialized = lock(&parent_lock);
                    self.remove_device(record)
                }
                // A created mdev the crash kept out of the state: found by its UUID.
                None => match discovery::read_mdev(self.fs(), &uuid) {
                    Some(mdev) => {
                        let parent_lock = self.parent_lock(&mdev.parent);
                        let _serialized = lock(&parent_lock);
                        self.host.remove_mdev(&uuid)
                    }
                    None => Ok(()),
                },
            };
            match removed {
                Ok(()) => {
                    finished.push(*key);
                    report.actions.push(ReconcileAction::Vanished {
                        uuid: key.to_string(),
                        forgotten: true,
                    });
                }
                // Kept pending: the next pass tries again.
                Err(error) => report.actions.push(ReconcileAction::RecreateFailed {
                    uuid: key.to_string(),
                    error: format!("finishing an interrupted batch: {error}"),
                }),
            }
        }
        self.update_state(|state| {
            for key in &finished {
                state.remove_instance(key);
                state.pending_creates.remove(key);
                state.pending_destroys.remove(key);
            }
        })?;
        for key in finished {
            self.emit(EngineEvent::InstanceRemoved {
                uuid: key.to_string(),
            });
        }
        Ok(())
    }

    fn process_pending_releases(&self, report: &mut ReconcileReport) {
        let dir = self.config.state_dir.join(PENDING_RELEASES_DIR);
        let files = match self.files.list(&dir) {
            Ok(files) => files,
            Err(error) => {
                report.actions.push(ReconcileAction::PendingReleaseFailed {
                    file: dir.display().to_string(),
                    error: format!("cannot list: {error}"),
                });
                return;
            }
        };
        let mut names_sorted: Vec<String> = files
            .into_iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        names_sorted.sort();
        for file in names_sorted {
            match self.finish_pending_release(&dir, &file) {
                Ok(action) => report.actions.push(action),
                Err(error) => report
                    .actions
                    .push(ReconcileAction::PendingReleaseFailed { file, error }),
            }
        }
    }

    fn finish_pending_release(&self, dir: &Path, file: &str) -> Result<ReconcileAction, String> {
        // The file name must be a domain UUID; anything else was not written by the hook and
        // is left alone (never used to build a path beyond this directory listing).
        let uuid = names::parse_uuid(file).map_err(|e| e.to_string())?;
        let path = dir.join(file);
        let name = self
            .files
            .read(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .map(|data| String::from_utf8_lossy(&data).trim().to_owned())
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| uuid.to_string());
        let domain = DomainRef {
            name,
            uuid: uuid.to_string(),
        };
        let release = self.release_domain(&domain).map_err(|e| e.to_string())?;
        if release.problems.is_empty() {
            self.files
                .remove(&path)
                .map_err(|e| format!("released, but cannot delete {}: {e}", path.display()))?;
            Ok(ReconcileAction::PendingReleaseDone {
                domain_uuid: uuid.to_string(),
                report: release,
            })
        } else {
            // Keep the file so the next start tries again.
            Err(format!(
                "release of domain {} incomplete: {}",
                domain.name,
                release.problems.join("; ")
            ))
        }
    }

    fn restore_vf_counts(&self, report: &mut ReconcileReport) {
        let wanted: Vec<(String, u32)> = lock(&self.state)
            .parents
            .iter()
            .filter_map(|(name, parent)| Some((name.to_string(), parent.num_vfs?)))
            .collect();
        for (pf, num_vfs) in wanted {
            let result = self.restore_vf_count(&pf, num_vfs);
            match result {
                Ok(true) => {
                    report.actions.push(ReconcileAction::VfsRestored {
                        pf: pf.clone(),
                        num_vfs,
                    });
                    self.emit(EngineEvent::ParentChanged { parent: pf });
                }
                Ok(false) => {}
                Err(error) => report.actions.push(ReconcileAction::VfsRestoreFailed {
                    pf,
                    error: error.to_string(),
                }),
            }
        }
    }

    /// Gives `pf` its recorded VF count again (VFs are gone after a reboot or a driver
    /// reload; on an NVIDIA GPU through `sriov-manage`, see [`crate::nvidia_sriov`]).
    /// `Ok(false)` when it already has it.
    pub(crate) fn restore_vf_count(&self, pf: &str, num_vfs: u32) -> Result<bool, EngineError> {
        let address: PciAddress = pf.parse()?;
        self.wait_for_path(
            &OperationContext::default(),
            pf,
            &mdev_host::discovery::layout::pci_device(&address),
            None,
        )?;
        let current = discovery::read_sriov_pf(self.fs(), address).map(|p| p.num_vfs);
        if current == Some(num_vfs) {
            return Ok(false);
        }
        let parent_lock = self.parent_lock(pf);
        let _serialized = lock(&parent_lock);
        // Forced past records that name current VFs: a count that differs from the
        // recorded one means every VF was re-made since (the kernel only changes a
        // non-zero count through 0), so no record's device survives. Refusing here
        // left the host on the other count until a later pass found the records gone
        // and changed it then (seen in the crash torture). A VF held by a process is
        // still refused, forced or not.
        self.set_num_vfs_locked(
            &OperationContext::default(),
            address,
            num_vfs,
            DestroyOptions { force: true },
            false,
        )?;
        Ok(true)
    }

    fn reconcile_instances(&self, report: &mut ReconcileReport) -> Result<(), EngineError> {
        let records: Vec<InstanceRecord> = lock(&self.state).instances.values().cloned().collect();
        // Records of instances gone while we were not looking, saved once after the loop (a
        // crash before that save only means the next pass finds them gone again).
        let mut vanished: Vec<(Uuid, bool)> = Vec::new();
        // What each record's pass did, in record order (the report keeps that order).
        let mut actions: Vec<Option<ReconcileAction>> = Vec::with_capacity(records.len());
        // Autostart records to start, by parent: indexes into `records`, in record order.
        let mut to_start: Vec<(&str, Vec<usize>)> = Vec::new();
        for (index, record) in records.iter().enumerate() {
            actions.push(None);
            if self.is_active(record) {
                continue;
            }
            if record.autostart {
                match to_start
                    .iter_mut()
                    .find(|(parent, _)| *parent == record.parent)
                {
                    Some((_, indexes)) => indexes.push(index),
                    None => to_start.push((record.parent.as_str(), vec![index])),
                }
                continue;
            }
            // Gone while we were not looking. A transient instance (and any claim on it) is
            // forgotten; a persistent one stays defined, unclaimed.
            let forgotten = !record.persistent;
            vanished.push((record.uuid, forgotten));
            actions[index] = Some(ReconcileAction::Vanished {
                uuid: record.uuid.to_string(),
                forgotten,
            });
        }
        for (index, action) in self.start_by_parent(&records, &to_start) {
            actions[index] = Some(action);
        }
        report.actions.extend(actions.into_iter().flatten());
        if !vanished.is_empty() {
            self.update_state(|state| {
                for (uuid, forgotten) in &vanished {
                    if *forgotten {
                        state.remove_instance(uuid);
                    } else if let Some(kept) = state.instance_mut(uuid) {
                        kept.claim = None;
                    }
                }
            })?;
        }
        for (uuid, forgotten) in vanished {
            let uuid = uuid.to_string();
            self.emit(if forgotten {
                EngineEvent::InstanceRemoved { uuid }
            } else {
                EngineEvent::InstanceChanged { uuid }
            });
        }
        Ok(())
    }

    /// Starts the autostart records of `groups` (indexes into `records`, by parent). Parents
    /// are independent (each has its own lock), so several are worked on at once; one
    /// parent's records go in order. A parent that did not come up in time is waited for once
    /// per pass, not once per instance: its autostart instances start when it registers
    /// (hotplug). Returns each started record's action.
    fn start_by_parent(
        &self,
        records: &[InstanceRecord],
        groups: &[(&str, Vec<usize>)],
    ) -> Vec<(usize, ReconcileAction)> {
        let start_group = |indexes: &[usize]| {
            let mut not_ready: Option<String> = None;
            let mut done = Vec::with_capacity(indexes.len());
            for &index in indexes {
                let record = &records[index];
                if let Some(error) = &not_ready {
                    done.push((
                        index,
                        ReconcileAction::RecreateFailed {
                            uuid: record.uuid.to_string(),
                            error: error.clone(),
                        },
                    ));
                    continue;
                }
                // Found inactive by the pass above: started without checking again.
                let action = match self.start_inactive_record(&OperationContext::default(), record)
                {
                    Ok(_) => ReconcileAction::Recreated {
                        uuid: record.uuid.to_string(),
                    },
                    // Started meanwhile by a concurrent call (a `Start` during a reconcile the
                    // API asked for): what a check made now would have found, as before.
                    Err(_) if self.is_active(record) => ReconcileAction::Recreated {
                        uuid: record.uuid.to_string(),
                    },
                    Err(error) => {
                        if matches!(error, EngineError::ParentNotReady { .. }) {
                            not_ready = Some(error.to_string());
                        }
                        ReconcileAction::RecreateFailed {
                            uuid: record.uuid.to_string(),
                            error: error.to_string(),
                        }
                    }
                };
                done.push((index, action));
            }
            done
        };
        let workers = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(RECONCILE_WORKERS)
            .min(groups.len());
        if workers <= 1 {
            return groups
                .iter()
                .flat_map(|(_, indexes)| start_group(indexes))
                .collect();
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let group = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some((_, indexes)) = groups.get(group) else {
                                return done;
                            };
                            done.extend(start_group(indexes));
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|handle| {
                    // A panic in a start is the engine's bug: passed on as it is.
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::state::DiskFiles;
    use crate::{CreateRequest, CreateTarget, EngineConfig, InstanceInfo};
    use mdev_sim::SimHost;

    fn open(sim: &SimHost, root: &Path) -> Arc<Engine> {
        let config = EngineConfig {
            // The unloaded parent is waited for this long (a bound, not a measured time).
            readiness_timeout: Duration::from_millis(300),
            poll_interval: Duration::from_millis(10),
            ..EngineConfig::default()
        };
        Arc::new(
            Engine::new(
                Arc::new(sim.clone()),
                Arc::new(DiskFiles::new(root)),
                config,
            )
            .unwrap(),
        )
    }

    fn autostart(parent: &str, type_id: &str) -> CreateRequest {
        CreateRequest {
            autostart: true,
            ..CreateRequest::new(CreateTarget::Mdev {
                parent: parent.into(),
                type_id: type_id.into(),
            })
        }
    }

    /// A record the pass found inactive but that a concurrent call started before the pass
    /// got to it is reported recreated (as a check made then would have found it), not as
    /// a failed create of a device that exists.
    #[test]
    fn a_record_started_meanwhile_counts_as_recreated() {
        let sim = SimHost::builtin("samples").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = open(&sim, dir.path());
        let uuid = engine.create(autostart("mtty", "mtty-1")).unwrap().uuid;
        let record = lock(&engine.state).instance(&uuid).cloned().unwrap();
        // As if the pass had found it inactive: the device exists when the start runs.
        let done = engine.start_by_parent(std::slice::from_ref(&record), &[("mtty", vec![0])]);
        assert_eq!(done.len(), 1);
        assert!(
            matches!(&done[0].1, ReconcileAction::Recreated { uuid: done } if *done == uuid),
            "{done:?}"
        );
        assert_eq!(sim.mdev_uuids(), [uuid]);
    }

    /// The published view takes each mdev record's active state and IOMMU group from the
    /// discovery instead of reading the host per record: it must give what reading per record
    /// gives, for inactive records (after a reboot), recreated ones and an unmanaged mdev.
    #[test]
    fn instances_from_the_discovery_match_reading_each_record() {
        let sim = SimHost::builtin("samples").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = open(&sim, dir.path());
        engine.create(autostart("mtty", "mtty-1")).unwrap();
        engine.create(autostart("mdpy", "mdpy-vga")).unwrap();
        engine
            .create(CreateRequest {
                persistent: true,
                ..CreateRequest::new(CreateTarget::Mdev {
                    parent: "mbochs".into(),
                    type_id: "mbochs-small".into(),
                })
            })
            .unwrap();
        drop(engine);
        sim.reboot();
        // Made outside the service: listed, never managed.
        let unmanaged = "83b8f4f2-509f-382f-3c1e-e6bfe0fa10ff";
        mdev_host::HostFs::write(
            &sim,
            Path::new("/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/create"),
            unmanaged.as_bytes(),
        )
        .unwrap();
        let engine = open(&sim, dir.path());
        let per_record = |engine: &Engine| -> Vec<InstanceInfo> {
            let mut infos: Vec<InstanceInfo> = lock(&engine.state)
                .instances
                .values()
                .map(|record| engine.info_of(record))
                .collect();
            infos.extend(engine.instance(unmanaged));
            infos.sort_by(|a, b| a.uuid.cmp(&b.uuid));
            infos
        };
        let before = engine.instances_in(&engine.inventory().unwrap());
        assert_eq!(before, per_record(&engine));
        assert_eq!(before.iter().filter(|info| info.active).count(), 1);
        assert!(before
            .iter()
            .filter(|info| !info.active)
            .all(|info| info.iommu_group.is_none()));
        let done = engine.reconcile_and_discover().unwrap();
        let after = engine.instances_in(&done.inventory);
        assert_eq!(after, per_record(&engine));
        let autostarted: Vec<&InstanceInfo> = after.iter().filter(|i| i.autostart).collect();
        assert_eq!(autostarted.len(), 2);
        assert!(autostarted
            .iter()
            .all(|info| info.active && info.iommu_group.is_some()));
    }

    /// Parents are started concurrently: every parent's instances come back, the parent that
    /// is missing fails each of its own (and only those), and the report lists the instances
    /// in the state's order, each once.
    #[test]
    fn parents_start_concurrently_and_the_report_keeps_the_state_order() {
        let sim = SimHost::builtin("samples").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = open(&sim, dir.path());
        let mut on_mtty = Vec::new();
        for _ in 0..2 {
            on_mtty.push(engine.create(autostart("mtty", "mtty-1")).unwrap().uuid);
        }
        let mut present = Vec::new();
        for _ in 0..2 {
            present.push(engine.create(autostart("mdpy", "mdpy-vga")).unwrap().uuid);
        }
        present.push(
            engine
                .create(autostart("mbochs", "mbochs-small"))
                .unwrap()
                .uuid,
        );
        let transient = engine
            .create(CreateRequest::new(CreateTarget::Mdev {
                parent: "mdpy".into(),
                type_id: "mdpy-vga".into(),
            }))
            .unwrap()
            .uuid;
        drop(engine);

        sim.reboot();
        sim.unload_module("mtty").unwrap();
        let engine = open(&sim, dir.path());
        let order: Vec<String> = lock(&engine.state)
            .instances
            .keys()
            .map(ToString::to_string)
            .collect();
        let report = engine.reconcile().unwrap();
        let reported: Vec<&str> = report
            .actions
            .iter()
            .map(|action| match action {
                ReconcileAction::Recreated { uuid }
                | ReconcileAction::RecreateFailed { uuid, .. }
                | ReconcileAction::Vanished { uuid, .. } => uuid.as_str(),
                other => panic!("unexpected action {other:?}"),
            })
            .collect();
        assert_eq!(reported, order, "{report:?}");
        for action in &report.actions {
            match action {
                ReconcileAction::Recreated { uuid } => assert!(present.contains(uuid), "{uuid}"),
                ReconcileAction::RecreateFailed { uuid, error } => {
                    assert!(on_mtty.contains(uuid), "{uuid}: {error}");
                    assert!(
                        error.contains("mtty") && error.contains("did not appear"),
                        "{error}"
                    );
                }
                ReconcileAction::Vanished { uuid, forgotten } => {
                    assert_eq!(uuid, &transient);
                    assert!(forgotten);
                }
                other => panic!("unexpected action {other:?}"),
            }
        }
        let mut live = sim.mdev_uuids();
        live.sort();
        present.sort();
        assert_eq!(live, present);
    }
}
