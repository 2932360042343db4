//! mdev-engine: the one public surface the daemon calls (see `docs/engine-api.md`).
//!
//! It is synchronous and `Send + Sync`: the daemon calls it from `spawn_blocking`. Operations on
//! one parent are serialized by a per-parent lock; different parents proceed in parallel.
//! Every change to what the manager owns is written to the state store before the call returns.
//! An operation that can wait, write or be cancelled takes an [`OperationContext`] (the plain
//! methods use the default one); nothing depends on the calling thread.
//!
//! This file holds the [`Engine`] struct, its constructor and the helpers every operation
//! family shares (the state save, the parent locks). Each family owns its own file:
//! [`types`](self::types) and [`error`](self::error) the API's data, `create`, `remove`,
//! `start`, `records`, `sriov`, `claims`, `passthrough`, `apply`, `readiness` (waits for a
//! parent), `cancel` and `context` (the operation context), `events`, `queries`,
//! `profile_queries`.

#![deny(missing_docs)]

pub mod apply;
pub mod apply_vgpu_dm;
mod autostart;
mod cancel;
mod claims;
mod context;
mod create;
mod error;
mod events;
mod group_commit;
mod instance_locks;
pub mod intents;
pub mod journal;
mod mdev_attrs;
pub mod nvidia_sriov;
pub mod nvidia_telemetry;
pub mod passthrough;
mod profile_queries;
mod profiles;
mod queries;
mod readiness;
mod record_names;
mod records;
mod remove;
mod sriov;
mod sriov_rules;
mod start;
mod types;

pub mod domain_index;
pub mod hotplug;
pub mod import;
pub mod lifecycle;
pub mod mdevctl_mirror;
pub mod reconcile;
pub mod schedule;
pub mod state;
mod state_migration;

use std::collections::{HashMap, HashSet};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, RwLock};

pub use self::cancel::CancelToken;
pub use self::context::OperationContext;
pub use self::error::EngineError;
pub use self::events::{EngineEvent, EventSubscription};
pub use self::group_commit::CommitStats;
pub use self::mdev_attrs::MdevDefinition;
pub use self::types::{
    CreateRequest, CreateTarget, DestroyOptions, DeviceRequest, DomainRef, EngineConfig,
    ImportReport, InstanceInfo, PlacementPolicy, PlacementRequest, ProfileFit, ProfileSummary,
    ReconcileAction, ReconcileReport, ReleaseReport,
};
pub use crate::reconcile::Reconciled;
pub use crate::state::{
    Claim, DiskFiles, InstanceKind, Owner, ParentName, Scheduling, StateFiles, TypeId,
};
pub use mdev_host::discovery::names::{NameError, PciAddress};
pub use mdev_host::discovery::{
    Inventory, MdevDevice, MdevParent, MdevType, NvidiaVfState, SriovPf, VirtualFunction,
};
pub use mdev_host::error::ErrorKind;
pub use mdev_host::events::{HostEvent, HostEventAction, HostEvents};
pub use mdev_host::holders::Holder;
pub use vgpu_profiles::Catalog;
pub use vgpu_types::Uuid;

use self::create::check_scheduling;
use self::error::rollback_note;
use crate::lifecycle::{BoundedWriter, Host};
use crate::state::{InstanceRecord, StateFile};
use mdev_host::HostFs;

/// A fresh random (version 4) UUID for an instance created without one.
pub(crate) fn new_uuid() -> Uuid {
    Uuid::from_bytes(uuid::Uuid::new_v4().into_bytes())
}

/// The engine. Cheap to share (`Arc<Engine>`); every method takes `&self`.
#[derive(Debug)]
pub struct Engine {
    pub(crate) host: Host,
    pub(crate) files: Arc<dyn StateFiles>,
    pub(crate) config: EngineConfig,
    pub(crate) state: Mutex<StateFile>,
    parent_locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// UUIDs being created right now (not yet in the state), so two requests cannot take one.
    reserved: Mutex<HashSet<String>>,
    /// Instances an operation is checking and changing right now (see `instance_locks`).
    pub(crate) instance_locks: instance_locks::InstanceLocks,
    subscribers: Mutex<Vec<mpsc::Sender<EngineEvent>>>,
    pub(crate) profiles: RwLock<profiles::ProfileSet>,
    /// How many events have been emitted (see [`Engine::event_generation`]).
    generation: std::sync::atomic::AtomicU64,
    /// The last `nvidia-smi vgpu -q` answer (see `nvidia_telemetry`).
    telemetry_cache: nvidia_telemetry::TelemetryCache,
    /// Concurrent state changes share one durable write (see `group_commit`).
    commits: group_commit::GroupCommit,
    /// The journal writer in journal mode ([`EngineConfig::state_journal`]); `None` in
    /// whole-file mode.
    journal: Option<journal::Journal>,
    /// Held for a whole `/etc/mdevctl.d` sync, its read of the state to its last write (see
    /// `mdevctl_mirror`), so an older pass never writes over a newer one; holds the mirror's
    /// list of owned files once read, so a sync of a few instances does not re-read it.
    pub(crate) mirror: Mutex<mdevctl_mirror::Owned>,
    /// The domain index as last written (see `domain_index`).
    domain_index: domain_index::DomainIndex,
}

/// Locks a mutex, taking the data even if a panicking thread poisoned it: every critical
/// section leaves the data consistent before anything that can panic.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Engine {
    /// Opens the engine: loads the state store and the profiles. Does not touch devices (call
    /// [`Engine::reconcile`] for that).
    pub fn new(
        host: Arc<dyn HostFs>,
        files: Arc<dyn StateFiles>,
        config: EngineConfig,
    ) -> Result<Self, EngineError> {
        Self::open(host, files, config, None)
    }

    /// Opens the engine with profiles loaded beforehand ([`Engine::load_catalog`], or any
    /// [`Catalog`]) instead of loading them: for a process that opens many engines over the
    /// same profiles (the model-based fuzz target opens one per input and after every
    /// simulated crash). The catalog is shared, not copied. Everything else is as
    /// [`Engine::new`]; [`Engine::reload_profiles`] still re-reads the profiles directory.
    pub fn with_catalog(
        host: Arc<dyn HostFs>,
        files: Arc<dyn StateFiles>,
        config: EngineConfig,
        catalog: Arc<Catalog>,
    ) -> Result<Self, EngineError> {
        Self::open(host, files, config, Some(catalog))
    }

    /// The profiles [`Engine::new`] would load through `files`: the built-in catalog plus
    /// `config.profiles_dir`'s `*.toml` files (a bad file is skipped with a warning). Only an
    /// unreadable directory is an error.
    pub fn load_catalog(
        files: &dyn StateFiles,
        config: &EngineConfig,
    ) -> Result<Arc<Catalog>, EngineError> {
        let loaded = profiles::ProfileSet::load(files, &config.profiles_dir, false)?;
        Ok(loaded.catalog())
    }

    fn open(
        host: Arc<dyn HostFs>,
        files: Arc<dyn StateFiles>,
        config: EngineConfig,
        catalog: Option<Arc<Catalog>>,
    ) -> Result<Self, EngineError> {
        let loaded = state::load_detailed(files.as_ref(), &config.state_dir)?;
        let journal = open_journal(files.as_ref(), &config, &loaded)?;
        let state = loaded.state;
        domain_index::rebuild(files.as_ref(), &config.state_dir, &state)?;
        let profiles = match catalog {
            Some(catalog) => profiles::ProfileSet::from_catalog(catalog),
            None => profiles::ProfileSet::load(files.as_ref(), &config.profiles_dir, false)?,
        };
        let writer = if config.inline_host_writes {
            BoundedWriter::inline(Arc::clone(&host))
        } else {
            BoundedWriter::new(Arc::clone(&host), config.write_timeout)
        };
        Ok(Self {
            host: Host {
                fs: host,
                writer,
                echoes: Default::default(),
            },
            files,
            config,
            state: Mutex::new(state),
            parent_locks: Mutex::new(HashMap::new()),
            reserved: Mutex::new(HashSet::new()),
            instance_locks: instance_locks::InstanceLocks::default(),
            subscribers: Mutex::new(Vec::new()),
            profiles: RwLock::new(profiles),
            generation: std::sync::atomic::AtomicU64::new(0),
            telemetry_cache: Default::default(),
            commits: Default::default(),
            journal,
            mirror: Mutex::new(mdevctl_mirror::Owned::default()),
            domain_index: Default::default(),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The host the engine works on.
    pub fn host(&self) -> &Arc<dyn HostFs> {
        &self.host.fs
    }

    pub(crate) fn fs(&self) -> &dyn HostFs {
        self.host.fs.as_ref()
    }

    /// State writes made so far and the changes they made durable (group commit: fewer
    /// writes than changes when calls overlap).
    pub fn state_commits(&self) -> CommitStats {
        self.commits.stats()
    }

    /// Folds the state journal into `state.json` (journal mode; nothing to do in whole-file
    /// mode or when the journal holds no change), so that a stopped service leaves its whole
    /// state in `state.json`. For a clean stop; every acknowledged change is durable without it.
    pub fn fold_state_journal(&self) -> Result<(), EngineError> {
        match &self.journal {
            Some(journal) => Ok(journal.fold_now(self.files.as_ref(), &self.config.state_dir)?),
            None => Ok(()),
        }
    }

    /// How many sysfs writes are still blocked in the kernel after timing out.
    pub fn stuck_writes(&self) -> usize {
        self.host.writer.stuck()
    }

    // ---- internals shared with claims, reconcile, hotplug and import ----

    pub(crate) fn parent_lock(&self, parent: &str) -> Arc<Mutex<()>> {
        Arc::clone(
            lock(&self.parent_locks)
                .entry(parent.to_owned())
                .or_default(),
        )
    }

    /// Applies a change to the state and returns once it is saved atomically and durably.
    pub(crate) fn update_state<R>(
        &self,
        change: impl FnOnce(&mut StateFile) -> R,
    ) -> Result<R, EngineError> {
        // Changed in memory under the lock; written by one group commit with every change
        // made meanwhile (`group_commit`), outside the lock.
        let (result, ticket) = {
            let mut state = lock(&self.state);
            let result = change(&mut state);
            (result, self.commits.changed())
        };
        let (files, state_dir) = (self.files.as_ref(), &self.config.state_dir);
        if let Some(journal) = &self.journal {
            // Only what changed since the previous write is copied and appended.
            self.commits.wait_durable(
                ticket,
                || {
                    let state = lock(&self.state);
                    (journal.take_changes(&state), self.commits.latest())
                },
                |entry| journal.write(files, state_dir, entry),
            )?;
            return Ok(result);
        }
        self.commits.wait_durable(
            ticket,
            || {
                let state = lock(&self.state);
                (state.clone(), self.commits.latest())
            },
            |snapshot| {
                self.domain_index.commit(files, state_dir, snapshot, || {
                    state::save(files, state_dir, snapshot)
                })
            },
        )?;
        Ok(result)
    }

    pub(crate) fn record(&self, key: &str) -> Result<InstanceRecord, EngineError> {
        lock(&self.state)
            .instance(key)
            .cloned()
            .ok_or_else(|| EngineError::UnknownInstance {
                uuid: key.to_owned(),
            })
    }
}

/// The journal writer in journal mode (folding at start-up whatever the journal holds); in
/// whole-file mode the journal, if one is left from journal mode, is folded into `state.json`
/// and removed, since whole-file saves do not advance its generation.
fn open_journal(
    files: &dyn StateFiles,
    config: &EngineConfig,
    loaded: &state::Loaded,
) -> Result<Option<journal::Journal>, EngineError> {
    let state_dir = &config.state_dir;
    if config.state_journal {
        return Ok(Some(journal::Journal::open(
            files,
            state_dir,
            &loaded.state,
            loaded.generation,
            loaded.state_bytes,
            loaded.journal,
        )?));
    }
    if loaded.journal.exists {
        state::save(files, state_dir, &loaded.state)?;
        let path = journal::journal_path(state_dir);
        files
            .remove(&path)
            .map_err(|source| state::StateError::Io {
                op: "remove",
                path,
                source,
            })?;
    }
    Ok(None)
}

/// The error for a VF-kind record that names no VF (a damaged state file).
fn missing_vf(record: &InstanceRecord) -> EngineError {
    EngineError::InvalidArgument {
        what: "instance record",
        value: record.uuid.to_string(),
        reason: format!("a {} instance without a VF address", record.kind),
    }
}

/// The error for touching an instance `claim` holds (names the instance and the domain).
pub(crate) fn claimed(uuid: &str, claim: &Claim) -> EngineError {
    EngineError::Claimed {
        uuid: uuid.to_owned(),
        domain_name: claim.domain_name.clone(),
        domain_uuid: claim.domain_uuid.to_string(),
    }
}

#[cfg(test)]
mod group_commit_tests;
#[cfg(test)]
mod intents_tests;
#[cfg(test)]
mod journal_tests;
#[cfg(test)]
mod nvidia_sriov_tests;
#[cfg(test)]
mod nvidia_telemetry_tests;
#[cfg(test)]
mod other_gpu_tests;
#[cfg(test)]
mod race_tests;
#[cfg(test)]
mod state_migration_tests;
#[cfg(test)]
mod stop_rule_tests;
#[cfg(test)]
mod tests;
