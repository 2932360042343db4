//! The D-Bus service: exports the engine's parents, types, instances and profiles as objects
//! under `/org/mdevmanager/VGpu1` (an ObjectManager), serves the mutating methods behind polkit,
//! and republishes whatever changes, whether the change came through the API or from the host
//! (udev, reconcile).
//!
//! Entry points: [`Service::new`] + [`Service::serve`] on any connection builder (a bus or a
//! peer-to-peer socket); `main.rs` wires the command line onto them.

pub mod action;
pub mod apply;
pub mod auth;
pub mod host_events;
pub mod interfaces;
pub mod metrics;
pub mod metrics_snapshot;
pub mod model;
pub mod options;
mod publish;
pub mod schedule;
pub mod single_instance;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dbus_api::names::{BUS_NAME, MANAGER_PATH, ROOT_PATH};
use dbus_api::{BusError, ErrorKind};
use zbus::message::Header;
use zbus::names::InterfaceName;
use zbus::object_server::{Interface, SignalEmitter};
use zbus::{Connection, ObjectServer, OwnedObjectPath};

use auth::Authorizer;
pub use host_events::host_events;
use interfaces::{
    InstanceIface, JobData, JobIface, ManagerIface, ParentIface, ProfileIface, SriovIface,
    TypeIface,
};
use mdev_engine::{
    CancelToken, Engine, EngineError, EventSubscription, Inventory, OperationContext,
    ReconcileAction, ReconcileReport,
};
use model::{changed_properties, Model, Properties, Shared};

/// A daemon failure outside any one method call (setting up the bus, first read of the host).
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Connecting to the bus, registering objects or taking the name failed.
    #[error("cannot serve {BUS_NAME} on the bus")]
    Bus(#[source] zbus::Error),
    /// The engine refused to start.
    #[error("the engine failed while starting the service")]
    Engine(#[source] EngineError),
    /// The engine task panicked.
    #[error("the engine task died while starting the service")]
    Join(#[source] tokio::task::JoinError),
    /// Another service owns the bus name (or the bus would only queue the request).
    #[error("cannot take the bus name")]
    Name(#[source] single_instance::SingleInstanceError),
}

/// Maps an engine failure onto the typed D-Bus error of its kind (the engine and the bus speak
/// the one `vgpu_types::ErrorKind`); the message is the whole cause chain on one line.
pub fn bus_error(error: &EngineError) -> BusError {
    BusError::new(error.kind(), error_chain(error))
}

pub use vgpu_types::error_chain;

/// One line per reconcile action, for the `ReconcileReport` property and the log.
pub fn describe_reconcile(report: &ReconcileReport) -> Vec<String> {
    report
        .actions
        .iter()
        .map(|action| match action {
            ReconcileAction::Recreated { uuid } => format!("recreated autostart instance {uuid}"),
            ReconcileAction::RecreateFailed { uuid, error } => {
                format!("could not recreate autostart instance {uuid}: {error}")
            }
            ReconcileAction::VfsRestored { pf, num_vfs } => {
                format!("restored {num_vfs} VFs on PF {pf}")
            }
            ReconcileAction::VfsRestoreFailed { pf, error } => {
                format!("could not restore the VFs of PF {pf}: {error}")
            }
            ReconcileAction::Vanished {
                uuid,
                forgotten: true,
            } => {
                format!("transient instance {uuid} is gone; forgotten")
            }
            ReconcileAction::Vanished {
                uuid,
                forgotten: false,
            } => {
                format!("persistent instance {uuid} is gone; kept as a stopped definition")
            }
            ReconcileAction::Unknown { id, parent } => {
                format!("instance {id} on {parent} is not managed by this service; left alone")
            }
            ReconcileAction::PendingReleaseDone {
                domain_uuid,
                report,
            } => format!(
                "finished the pending release of domain {domain_uuid} ({} destroyed, {} unclaimed)",
                report.destroyed.len(),
                report.unclaimed.len()
            ),
            ReconcileAction::PendingReleaseFailed { file, error } => {
                format!("could not finish pending release {file}: {error}")
            }
            ReconcileAction::IntentUndone { id, what } => {
                format!("undid an unacknowledged change of {id}: {what}")
            }
            ReconcileAction::IntentUndoFailed { id, error } => {
                format!("could not undo the unacknowledged change of {id}: {error}")
            }
        })
        .collect()
}

/// The service: shared by every interface object.
#[derive(Debug)]
pub struct Service {
    engine: Arc<Engine>,
    authorizer: Arc<dyn Authorizer>,
    features: Vec<String>,
    reconcile_lines: Mutex<Vec<String>>,
    exported: tokio::sync::Mutex<ExportedObjects>,
    /// The engine events not yet published ([`Service::refresh`] drains them under the
    /// `exported` lock); set once the first read of the host is exported.
    changes: Mutex<Option<EventSubscription>>,
    /// Set when a publication failed after draining its events: the next one re-reads all.
    rescan: std::sync::atomic::AtomicBool,
    /// The discovery of each parent as last read (only touched under the `exported` lock).
    hosts: Mutex<HashMap<String, Inventory>>,
    /// Engine calls running now ([`Service::call`]); the event follower waits for them to end
    /// (each is followed by its method's refresh) instead of reading the host half-way.
    in_flight: std::sync::atomic::AtomicUsize,
    /// Woken when `in_flight` drops to 0.
    idle: tokio::sync::Notify,
    next_job: AtomicU64,
    /// The cancel tokens of the jobs running now, by job number.
    running_jobs: Mutex<HashMap<u64, CancelToken>>,
    /// The host root `Manager.Probe` resolves sysfs under; unset on the simulated host, whose
    /// devices have no VFIO nodes to open.
    probe_root: std::sync::OnceLock<std::path::PathBuf>,
    /// Latency and failures of every operation served ([`Service::metered`], jobs).
    metrics: metrics::OperationMetrics,
    /// Whether each refresh brings `/etc/mdevctl.d` in step with the persistent instances
    /// (`mdev_engine::mdevctl_mirror`); off until [`Service::enable_mdevctl_mirror`].
    mirror_mdevctl: std::sync::atomic::AtomicBool,
    /// Set once a whole mirror sync has run; later refreshes sync only the instances they
    /// publish.
    mirror_synced: std::sync::atomic::AtomicBool,
}

/// What a refresh does to the mdevctl mirror.
enum Mirror {
    Off,
    All,
    Only(Vec<String>),
}

impl Service {
    /// A service over `engine`, asking `authorizer`. `features` is published as
    /// `Manager.Features`.
    pub fn new(
        engine: Arc<Engine>,
        authorizer: Arc<dyn Authorizer>,
        features: Vec<String>,
    ) -> Arc<Self> {
        Arc::new(Self {
            engine,
            authorizer,
            features,
            reconcile_lines: Mutex::new(Vec::new()),
            exported: tokio::sync::Mutex::new(ExportedObjects::default()),
            changes: Mutex::new(None),
            rescan: std::sync::atomic::AtomicBool::new(false),
            hosts: Mutex::new(HashMap::new()),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            idle: tokio::sync::Notify::new(),
            next_job: AtomicU64::new(1),
            running_jobs: Mutex::new(HashMap::new()),
            probe_root: std::sync::OnceLock::new(),
            metrics: metrics::OperationMetrics::default(),
            mirror_mdevctl: std::sync::atomic::AtomicBool::new(false),
            mirror_synced: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Lets `Manager.Probe` run the VFIO probe with sysfs under `root` (the root the real host
    /// is opened at). Without it the service is on the simulated host and `Probe` is
    /// NotSupported. Only the first call counts: the host does not change while serving.
    pub fn enable_probe(&self, root: std::path::PathBuf) {
        let _ = self.probe_root.set(root);
    }

    /// Keeps mdevctl's definition files in step with the persistent instances from now on:
    /// the first refresh runs a whole sync, every later one that publishes instances syncs
    /// those instances alone, under the refresh lock (`mdev_engine::mdevctl_mirror`).
    pub fn enable_mdevctl_mirror(&self) {
        self.mirror_mdevctl.store(true, Ordering::SeqCst);
    }

    fn probe_root(&self) -> Option<&std::path::Path> {
        self.probe_root.get().map(std::path::PathBuf::as_path)
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    fn reconcile_lines(&self) -> Vec<String> {
        self.reconcile_lines
            .lock()
            .map(|lines| lines.clone())
            .unwrap_or_default()
    }

    /// Registers every object on `builder`'s connection *before* it takes the bus name (when it
    /// asks for one), then follows engine events. `reconcile` runs the engine's reconcile first
    /// and publishes its report.
    pub async fn serve(
        self: &Arc<Self>,
        builder: zbus::connection::Builder<'_>,
        reconcile: bool,
    ) -> Result<Connection, DaemonError> {
        // Subscribe before the first read so no change between the two is missed: `changes`
        // collects what to publish, `doorbell` wakes the follower.
        let changes = self.engine.subscribe();
        let doorbell = self.engine.subscribe();
        let engine = self.engine.clone();
        // The reconcile's own discovery (made after its last change) is what gets published:
        // one read of the host at start, not two. The events the read covers are dropped.
        let read = tokio::task::spawn_blocking(move || {
            if reconcile {
                let done = engine.reconcile_and_discover()?;
                while changes.try_recv().is_some() {}
                let model = Model::read_in(&engine, &done.inventory);
                Ok((Some(done.report), model, done.inventory, changes))
            } else {
                while changes.try_recv().is_some() {}
                Model::read_with_inventory(&engine)
                    .map(|(model, inventory)| (None, model, inventory, changes))
            }
        });
        // The bus connection is made while the host is read (on a blocking thread). It owns no
        // well-known name until `request_name`, after every object is exported, so no client
        // addresses the half-built tree.
        let connect = builder
            .serve_at(
                MANAGER_PATH,
                ManagerIface {
                    service: self.clone(),
                },
            )
            .build();
        let (read, connection) = tokio::join!(read, connect);
        let (report, model, inventory, changes) = read
            .map_err(DaemonError::Join)?
            .map_err(DaemonError::Engine)?;
        let connection = connection.map_err(DaemonError::Bus)?;
        if let Some(report) = &report {
            self.publish_reconcile(report);
        }
        {
            let mut exported = self.exported.lock().await;
            *lock_std(&self.hosts) = model::split_by_parent(&inventory);
            *lock_std(&self.changes) = Some(changes);
            self.apply(&connection, &mut exported, model).await;
        }
        // The ObjectManager goes on last: adding it announces every object already there.
        connection
            .object_server()
            .at(ROOT_PATH, zbus::fdo::ObjectManager)
            .await
            .map_err(DaemonError::Bus)?;
        self.follow_events(connection.clone(), doorbell);
        Ok(connection)
    }

    /// Takes the well-known name (after [`Service::serve`] registered the objects): never
    /// from another owner, never queued, never offered for replacement
    /// ([`single_instance::take_bus_name`]).
    pub async fn request_name(connection: &Connection) -> Result<(), DaemonError> {
        single_instance::take_bus_name(connection)
            .await
            .map_err(DaemonError::Name)
    }

    fn publish_reconcile(&self, report: &ReconcileReport) {
        let lines = describe_reconcile(report);
        for line in &lines {
            tracing::info!(target: "reconcile", "{line}");
        }
        if let Ok(mut current) = self.reconcile_lines.lock() {
            *current = lines;
        }
    }

    /// Publishes the report of a reconcile the caller ran (`Rescan`): `ReconcileReport` and
    /// its `PropertiesChanged`.
    pub async fn announce_reconcile(
        self: &Arc<Self>,
        connection: &Connection,
        report: &ReconcileReport,
    ) {
        self.publish_reconcile(report);
        if let Ok(emitter) = SignalEmitter::new(connection, MANAGER_PATH) {
            let _ = ManagerIface::reconcile_report_changed_emit(self, &emitter).await;
        }
    }

    /// Runs `f` on the engine on the blocking pool and maps its error.
    pub async fn call<T, F>(&self, f: F) -> Result<T, BusError>
    where
        F: FnOnce(&Engine) -> Result<T, EngineError> + Send + 'static,
        T: Send + 'static,
    {
        let engine = self.engine.clone();
        let _in_flight = InFlight::enter(self);
        match tokio::task::spawn_blocking(move || f(&engine)).await {
            Ok(result) => result.map_err(|e| bus_error(&e)),
            Err(join) => Err(BusError::Failed(format!("engine call failed: {join}"))),
        }
    }

    /// Runs the body of the D-Bus method `operation` and records its duration and, when it
    /// fails, its error name ([`metrics`]): the one place methods are counted.
    pub async fn metered<T>(
        &self,
        operation: &'static str,
        body: impl std::future::Future<Output = Result<T, BusError>>,
    ) -> Result<T, BusError> {
        let started = std::time::Instant::now();
        let result = body.await;
        let error = result.as_ref().err().map(BusError::kind);
        self.metrics.record(operation, started.elapsed(), error);
        result
    }

    /// The operation counters and the number of running jobs (`Manager.GetOperationStats`).
    pub fn operation_stats(&self) -> dbus_api::operation_stats::OperationStats {
        let jobs_running = self
            .running_jobs
            .lock()
            .map(|running| running.len())
            .unwrap_or_default();
        self.metrics
            .snapshot(u32::try_from(jobs_running).unwrap_or(u32::MAX))
    }

    /// Waits until no engine call runs (at most `bound`: a steady stream of calls must not
    /// keep host changes from being published).
    async fn wait_idle(&self, bound: std::time::Duration) {
        let idle = async {
            loop {
                let notified = self.idle.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.in_flight.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(bound, idle).await;
    }

    /// uid of the caller of `header`, `u32::MAX` when unknown (peer-to-peer).
    pub async fn caller_uid(&self, connection: &Connection, header: &Header<'_>) -> u32 {
        let Some(sender) = header.sender() else {
            return u32::MAX;
        };
        if let Some(uid) = self.authorizer.caller_uid(sender.as_str()).await {
            return uid;
        }
        let Ok(dbus) = zbus::fdo::DBusProxy::new(connection).await else {
            return u32::MAX;
        };
        dbus.get_connection_unix_user(sender.clone().into())
            .await
            .unwrap_or(u32::MAX)
    }

    /// Publishes every change the engine announced so far: re-reads only the objects its
    /// events name and brings those exported objects in line: new objects are added
    /// (`InterfacesAdded`), gone ones removed (`InterfacesRemoved`), changed properties
    /// announced (`PropertiesChanged`) ([`publish`]). A method calls it after its engine call,
    /// so its reply comes after its change is on the bus. Failures are logged and the next
    /// refresh re-reads the whole host.
    pub async fn refresh(self: &Arc<Self>, connection: &Connection) {
        // Held across the read so concurrent refreshes apply in order.
        let mut exported = self.exported.lock().await;
        let changes = self.take_changes();
        if changes.is_empty() {
            return;
        }
        let places = publish::places_of(&exported, &changes.instances);
        let service = self.clone();
        // The mirror follows the instances: a change that names none leaves it alone, and one
        // that names some syncs those alone, but for the first sync (and after a lost event
        // stream), which covers every instance.
        let mirror = match self.mirror_mdevctl.load(Ordering::SeqCst) {
            false => Mirror::Off,
            true if changes.rescan || !self.mirror_synced.swap(true, Ordering::SeqCst) => {
                Mirror::All
            }
            true if changes.instances.is_empty() => Mirror::Off,
            true => Mirror::Only(changes.instances.iter().cloned().collect()),
        };
        let read = move || {
            let engine = &service.engine;
            let report = match mirror {
                Mirror::Off => None,
                Mirror::All => Some(engine.sync_mdevctl_mirror()),
                Mirror::Only(uuids) => {
                    Some(engine.sync_mdevctl_mirror_of(uuids.iter().map(String::as_str)))
                }
            };
            if let Some(report) = report {
                for problem in &report.problems {
                    tracing::warn!(problem = %problem, "mdevctl definition mirror");
                }
                for path in &report.left_alone {
                    tracing::debug!(path = %path, "mdevctl definition not ours: left alone");
                }
            }
            let mut hosts = lock_std(&service.hosts);
            publish::read_patch(engine, changes, places, &mut hosts)
        };
        match tokio::task::spawn_blocking(read).await {
            Ok(Ok(patch)) => self.apply_patch(connection, &mut exported, patch).await,
            Ok(Err(error)) => {
                self.rescan.store(true, Ordering::SeqCst);
                tracing::error!(error = %error_chain(&error), "cannot read the host")
            }
            Err(join) => {
                self.rescan.store(true, Ordering::SeqCst);
                tracing::error!(error = %join, "host read panicked")
            }
        }
    }

    /// The changes announced since the last call (caller holds the `exported` lock).
    fn take_changes(&self) -> publish::Changes {
        let mut changes = publish::Changes {
            rescan: self.rescan.swap(false, Ordering::SeqCst),
            ..publish::Changes::default()
        };
        if let Some(events) = lock_std(&self.changes).as_ref() {
            while let Some(event) = events.try_recv() {
                changes.note(event);
            }
        }
        changes
    }

    /// The `ListInstances`/`ListTypes` answer for the objects exported now: the prepared one, or
    /// built from the exported records (no engine call). Waits for a refresh in progress, so a
    /// caller that saw a change's reply lists the change.
    pub async fn listing(&self) -> Arc<model::Listing> {
        let mut exported = self.exported.lock().await;
        if let Some(listing) = &exported.listing {
            return listing.clone();
        }
        fn read<D>(cell: &Shared<D>) -> std::sync::RwLockReadGuard<'_, D> {
            cell.read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
        let listing = Arc::new(model::Listing::new(
            exported
                .parents
                .values()
                .map(|cell| read(cell).name.clone())
                .collect(),
            exported
                .types
                .iter()
                .map(|(path, cell)| model::type_entry(path, &read(cell)))
                .collect(),
            exported
                .instances
                .iter()
                .map(|(path, cell)| model::instance_entry(path, &read(cell)))
                .collect(),
        ));
        exported.listing = Some(listing.clone());
        listing
    }

    async fn apply(
        self: &Arc<Self>,
        connection: &Connection,
        exported: &mut ExportedObjects,
        new: Model,
    ) {
        let server = connection.object_server();
        exported.listing = None;
        exported.instances_by_parent.clear();
        for (path, data) in &new.instances {
            exported
                .instances_by_parent
                .entry(data.parent_name.clone())
                .or_default()
                .insert(data.uuid.clone(), path.clone());
        }
        // Objects that went away first, children before their parents; then new and changed
        // ones, parents before their children, so a client never sees a dangling path.
        remove_gone::<InstanceIface, _>(server, &mut exported.instances, &new.instances).await;
        remove_gone::<TypeIface, _>(server, &mut exported.types, &new.types).await;
        remove_gone::<SriovIface, _>(server, &mut exported.sriov, &new.sriov).await;
        remove_gone::<ParentIface, _>(server, &mut exported.parents, &new.parents).await;
        remove_gone::<ProfileIface, _>(server, &mut exported.profiles, &new.profiles).await;
        add_or_update(
            server,
            connection,
            &mut exported.profiles,
            &new.profiles,
            |data| ProfileIface { data },
        )
        .await;
        add_or_update(
            server,
            connection,
            &mut exported.parents,
            &new.parents,
            |data| ParentIface {
                service: self.clone(),
                data,
            },
        )
        .await;
        add_or_update(
            server,
            connection,
            &mut exported.sriov,
            &new.sriov,
            |data| SriovIface {
                service: self.clone(),
                data,
            },
        )
        .await;
        add_or_update(
            server,
            connection,
            &mut exported.types,
            &new.types,
            |data| TypeIface { data },
        )
        .await;
        add_or_update(
            server,
            connection,
            &mut exported.instances,
            &new.instances,
            |data| InstanceIface {
                service: self.clone(),
                data,
            },
        )
        .await;
    }

    /// Publishes host changes no method call publishes (hotplug, foreign mdevs, jobs'
    /// progress): a thread waits on `doorbell` and wakes a task that runs [`Service::refresh`]
    /// (which drains the events themselves from its own subscription).
    fn follow_events(self: &Arc<Self>, connection: Connection, doorbell: EventSubscription) {
        let wake = Arc::new(tokio::sync::Notify::new());
        let ring = wake.clone();
        // The subscription blocks, so it gets a thread; it ends when the engine drops the
        // channel.
        std::thread::Builder::new()
            .name("engine-events".into())
            .spawn(move || {
                while let Some(event) = doorbell.recv() {
                    tracing::debug!(?event, "engine event");
                    // A burst (a batch emits two events per instance) rings once.
                    while doorbell.try_recv().is_some() {}
                    ring.notify_one();
                }
            })
            .map_err(|e| tracing::error!(error = %e, "cannot start the event thread"))
            .ok();
        let service = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                wake.notified().await;
                let Some(service) = service.upgrade() else {
                    return;
                };
                // A call still running (a batch emits events per instance) publishes its own
                // change when it ends: wait for it rather than publish half of it.
                service.wait_idle(IDLE_WAIT).await;
                service.refresh(&connection).await;
            }
        });
    }

    /// Starts a job running `work` on the engine: exports the Job object, announces it with
    /// `JobNew`, and when `work` finishes sets its result, emits `Job.Completed` and
    /// `Manager.JobRemoved`, refreshes the objects and removes the Job. `work` gets the job's
    /// operation context, holding its cancel token (`Job.Cancel` sets it), and passes it to its
    /// engine calls (the `*_with` methods, [`Engine::wait_for_parent_then`]).
    pub async fn start_job<F>(
        self: &Arc<Self>,
        connection: &Connection,
        spec: JobSpec,
        work: F,
    ) -> Result<OwnedObjectPath, BusError>
    where
        F: FnOnce(&Engine, &OperationContext) -> Result<JobOutcome, BusError> + Send + 'static,
    {
        let id = self.next_job.fetch_add(1, Ordering::Relaxed);
        let path = dbus_api::path::job_path(id);
        let operation = spec.operation;
        let token = CancelToken::new();
        let context = OperationContext::cancellable(token.clone());
        let job = JobIface {
            service: self.clone(),
            control: interfaces::JobControl {
                token: token.clone(),
                cancel_action: spec.cancel_action,
                details: spec.details,
            },
            data: JobData {
                operation: operation.to_string(),
                objects: spec.objects,
                started_by_uid: spec.started_by_uid,
                cancelable: spec.cancel_action.is_some(),
                ..JobData::default()
            },
        };
        let server = connection.object_server();
        server
            .at(&path, job)
            .await
            .map_err(|e| BusError::Failed(format!("cannot export job {path}: {e}")))?;
        if let Ok(emitter) = SignalEmitter::new(connection, MANAGER_PATH) {
            let _ = ManagerIface::job_new(&emitter, path.as_ref(), operation).await;
        }
        if let Ok(mut running) = self.running_jobs.lock() {
            running.insert(id, token.clone());
        }
        let service = self.clone();
        let connection = connection.clone();
        let job_path = path.clone();
        tokio::spawn(async move {
            // Not through `Service::call`: a job may run for long (a wait for a parent), and
            // host changes meanwhile must be published at once, not after it.
            let engine = service.engine.clone();
            let started = std::time::Instant::now();
            let outcome = match tokio::task::spawn_blocking(move || work(&engine, &context)).await {
                Ok(result) => result,
                Err(join) => Err(BusError::Failed(format!("job {operation} ended: {join}"))),
            };
            service.metrics.record(
                &format!("job:{operation}"),
                started.elapsed(),
                outcome.as_ref().err().map(BusError::kind),
            );
            if let Ok(mut running) = service.running_jobs.lock() {
                running.remove(&id);
            }
            let (success, error_kind, message, results) = match outcome {
                Ok(outcome) => (true, None, outcome.message, outcome.objects),
                Err(error) => (
                    false,
                    Some(error.kind()),
                    format!("{}: {}", error.kind(), error.message()),
                    Vec::new(),
                ),
            };
            let cancelled = error_kind == Some(ErrorKind::Cancelled);
            tracing::info!(job = %job_path, operation, success, %message, "job finished");
            // The objects the job made exist on the bus before anyone hears it finished.
            service.publish(&connection).await;
            let server = connection.object_server();
            if let Ok(job) = server.interface::<_, JobIface>(&job_path).await {
                let old = job.get().await.data.clone();
                let new = JobData {
                    finished: true,
                    success,
                    message: message.clone(),
                    result_objects: results,
                    error_name: error_kind.map(ErrorKind::dbus_name).unwrap_or_default(),
                    ..old.clone()
                };
                job.get_mut().await.data = new.clone();
                emit_changed::<JobIface, _>(&connection, &job_path, &old, &new).await;
                let _ = JobIface::completed(job.signal_emitter(), success, &message).await;
            }
            if let Ok(emitter) = SignalEmitter::new(&connection, MANAGER_PATH) {
                let result = match (success, cancelled) {
                    (true, _) => "done",
                    (false, true) => "cancelled",
                    (false, false) => "failed",
                };
                let _ =
                    ManagerIface::job_removed(&emitter, job_path.as_ref(), result, &message).await;
            }
            let _ = server.remove::<JobIface, _>(&job_path).await;
        });
        Ok(path)
    }

    /// Cancels every running job (at shutdown: a job waiting for a parent would otherwise keep
    /// the process alive until its wait ends). Each stops at its next check and rolls back.
    /// Returns how many were asked.
    pub fn cancel_all_jobs(&self) -> usize {
        let Ok(running) = self.running_jobs.lock() else {
            return 0;
        };
        for token in running.values() {
            token.cancel();
        }
        running.len()
    }
}

/// What a job is, for [`Service::start_job`].
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// `Job.Operation` (`sriov-set-numvfs`, `create-instances`, ...).
    pub operation: &'static str,
    /// `Job.Objects`: what it acts on.
    pub objects: Vec<OwnedObjectPath>,
    /// `Job.StartedByUid`.
    pub started_by_uid: u32,
    /// The polkit action a caller other than the starter needs for `Job.Cancel`; `None`: the
    /// job cannot be cancelled (`Cancelable` false).
    pub cancel_action: Option<&'static str>,
    /// polkit details for that check (`profile`, `parent`, `domain`, ...).
    pub details: Vec<(&'static str, String)>,
}

/// What a successful job reports.
#[derive(Debug, Clone, Default)]
pub struct JobOutcome {
    /// `Job.Message` and the `Completed`/`JobRemoved` message.
    pub message: String,
    /// `Job.ResultObjects`: the objects it made (created or claimed instances).
    pub objects: Vec<OwnedObjectPath>,
}

impl JobOutcome {
    /// An outcome with a message and no objects.
    pub fn message(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            objects: Vec::new(),
        }
    }
}

impl ManagerIface {
    async fn reconcile_report_changed_emit(
        service: &Arc<Service>,
        emitter: &SignalEmitter<'_>,
    ) -> zbus::Result<()> {
        let mut changed = std::collections::HashMap::new();
        changed.insert(
            "ReconcileReport",
            zbus::Variant::from(service.reconcile_lines()),
        );
        zbus::fdo::Properties::properties_changed(
            emitter,
            InterfaceName::from_static_str_unchecked(dbus_api::names::interface::MANAGER),
            changed,
            std::borrow::Cow::Borrowed(&[]),
        )
        .await
    }
}

impl Properties for JobData {
    fn properties(&self) -> Vec<(&'static str, zbus::Variant<'static>)> {
        vec![
            (
                "ResultObjects",
                zbus::Variant::from(self.result_objects.clone()),
            ),
            ("Finished", zbus::Variant::from(self.finished)),
            ("Success", zbus::Variant::from(self.success)),
            ("Message", zbus::Variant::from(self.message.clone())),
            ("ErrorName", zbus::Variant::from(self.error_name.clone())),
        ]
    }
}

/// The introspection XML of every interface the service implements, as published in
/// `dbus-api/interface/org.mdevmanager.VGpu1.xml`.
pub fn introspection_xml(service: &Arc<Service>) -> String {
    let mut xml = String::from(
        "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \
         \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n\
         <!-- The interfaces of org.mdevmanager.VGpu1 (generated from the service: \
         UPDATE_GOLDEN=1 cargo test -p mdev-manager published_introspection). -->\n<node>\n",
    );
    let mut write = |iface: &dyn Interface| iface.introspect_to_writer(&mut xml, 1);
    write(&ManagerIface {
        service: service.clone(),
    });
    write(&ParentIface {
        service: service.clone(),
        data: Default::default(),
    });
    write(&SriovIface {
        service: service.clone(),
        data: Default::default(),
    });
    write(&TypeIface {
        data: Default::default(),
    });
    write(&InstanceIface {
        service: service.clone(),
        data: Default::default(),
    });
    write(&ProfileIface {
        data: Default::default(),
    });
    write(&JobIface {
        service: service.clone(),
        control: Default::default(),
        data: Default::default(),
    });
    xml.push_str("</node>\n");
    xml
}

/// How long the event follower waits for running engine calls before refreshing anyway.
const IDLE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Counts an engine call in [`Service::in_flight`] while it runs.
struct InFlight<'a> {
    service: &'a Service,
}

impl<'a> InFlight<'a> {
    fn enter(service: &'a Service) -> Self {
        service.in_flight.fetch_add(1, Ordering::SeqCst);
        Self { service }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.service.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.service.idle.notify_waiters();
        }
    }
}

/// The records of the exported objects, shared with their interface objects.
#[derive(Debug, Default)]
struct ExportedObjects {
    parents: HashMap<OwnedObjectPath, Shared<model::ParentData>>,
    sriov: HashMap<OwnedObjectPath, Shared<model::SriovData>>,
    types: HashMap<OwnedObjectPath, Shared<model::TypeData>>,
    instances: HashMap<OwnedObjectPath, Shared<model::InstanceData>>,
    profiles: HashMap<OwnedObjectPath, Shared<model::ProfileData>>,
    /// Each parent's exported instances, by UUID (its `Instances` property, in order).
    instances_by_parent: HashMap<String, BTreeMap<String, OwnedObjectPath>>,
    /// The prepared `ListInstances`/`ListTypes` answer; `apply` drops it on every change.
    listing: Option<Arc<model::Listing>>,
}

async fn emit_changed<I: Interface, P: Properties>(
    connection: &Connection,
    path: &OwnedObjectPath,
    old: &P,
    new: &P,
) {
    let changed = changed_properties(old, new);
    if changed.is_empty() {
        return;
    }
    let Ok(emitter) = SignalEmitter::new(connection, path.as_ref()) else {
        return;
    };
    let changed: std::collections::HashMap<&str, zbus::Variant<'_>> = changed.into_iter().collect();
    if let Err(error) = zbus::fdo::Properties::properties_changed(
        &emitter,
        I::name(),
        changed,
        std::borrow::Cow::Borrowed(&[]),
    )
    .await
    {
        tracing::warn!(%path, %error, "cannot emit PropertiesChanged");
    }
}

/// Removes the objects of one kind that are not in `desired` (`InterfacesRemoved`).
async fn remove_gone<I, D>(
    server: &ObjectServer,
    current: &mut HashMap<OwnedObjectPath, Shared<D>>,
    desired: &HashMap<OwnedObjectPath, D>,
) where
    I: Interface,
{
    let gone: Vec<OwnedObjectPath> = current
        .keys()
        .filter(|path| !desired.contains_key(*path))
        .cloned()
        .collect();
    for path in gone {
        if let Err(error) = server.remove::<I, _>(&path).await {
            tracing::warn!(%path, %error, "cannot remove object");
        }
        current.remove(&path);
    }
}

/// Exports new objects of one kind (`InterfacesAdded`) and replaces changed records
/// (`PropertiesChanged`) ([`put`]).
async fn add_or_update<I, D, F>(
    server: &ObjectServer,
    connection: &Connection,
    current: &mut HashMap<OwnedObjectPath, Shared<D>>,
    desired: &HashMap<OwnedObjectPath, D>,
    make: F,
) where
    I: Interface,
    D: Properties,
    F: Fn(Shared<D>) -> I,
{
    for (path, data) in desired {
        put(server, connection, current, path, data.clone(), &make).await;
    }
}

/// Exports the object at `path` (`InterfacesAdded`) or replaces its record, announcing the
/// properties that changed (`PropertiesChanged`). Records are replaced in their shared cells
/// rather than through the object server's interface lock: a method of the same object (a
/// `Destroy` that refreshes before replying) holds that lock while this runs.
async fn put<I, D, F>(
    server: &ObjectServer,
    connection: &Connection,
    current: &mut HashMap<OwnedObjectPath, Shared<D>>,
    path: &OwnedObjectPath,
    data: D,
    make: F,
) where
    I: Interface,
    D: Properties,
    F: Fn(Shared<D>) -> I,
{
    match current.get(path) {
        None => {
            let cell = Arc::new(std::sync::RwLock::new(data));
            if let Err(error) = server.at(path, make(cell.clone())).await {
                tracing::warn!(%path, %error, "cannot export object");
                return;
            }
            current.insert(path.clone(), cell);
        }
        Some(cell) => {
            let old = {
                let mut record = cell
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if *record == data {
                    return;
                }
                std::mem::replace(&mut *record, data.clone())
            };
            emit_changed::<I, _>(connection, path, &old, &data).await;
        }
    }
}

/// Removes the object at `path` if it is exported (`InterfacesRemoved`).
async fn remove_one<I, D>(
    server: &ObjectServer,
    current: &mut HashMap<OwnedObjectPath, Shared<D>>,
    path: &OwnedObjectPath,
) where
    I: Interface,
{
    if current.remove(path).is_some() {
        if let Err(error) = server.remove::<I, _>(path).await {
            tracing::warn!(%path, %error, "cannot remove object");
        }
    }
}

/// Locks a std mutex, taking over a poisoned one (its data is replaced whole, never left
/// half-written).
fn lock_std<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
