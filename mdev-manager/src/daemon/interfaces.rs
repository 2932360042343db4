//! The D-Bus interface objects. Each mutating method parses its typed options into an
//! [`Action`] (polkit questions + engine work) and hands it to [`Service::perform`] or, for a
//! `Start*` twin, [`Service::perform_as_job`] (see `action.rs`: authorize, run on the blocking
//! pool, publish, reply). Every method is counted under its own name by `Service::metered`.

use std::collections::HashMap;
use std::sync::Arc;

use dbus_api::names::action;
use dbus_api::BusError;
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::{interface, Connection, ObjectPath, OwnedObjectPath, OwnedVariant};

use dbus_api::options::{
    from_dict, AutostartOptions, CreateOptions, DeviceSpec, ForceOptions, ImportOptions,
    ListTypesOptions, NoOptions, PrepareOptions,
};

use super::action::Action;
use super::auth::AuthRequest;
use super::model::{InstanceData, ParentData, ProfileData, Shared, SriovData, TypeData};
use super::{JobOutcome, JobSpec, Service};
use mdev_engine::{
    CancelToken, CreateRequest, CreateTarget, DestroyOptions, DeviceRequest, DomainRef,
    InstanceInfo,
};

/// Largest `count` accepted by `CreateInstances` (no GPU offers more instances).
const MAX_COUNT: u32 = 256;

/// `org.mdevmanager.VGpu1.Manager`.
#[derive(Debug)]
pub struct ManagerIface {
    pub(super) service: Arc<Service>,
}

#[interface(name = "org.mdevmanager.VGpu1.Manager")]
impl ManagerIface {
    /// The service version.
    #[zbus(property(emits_changed_signal = "const"))]
    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    /// What this service instance supports: `mdev`, `sriov`, `persistence`, `claims`, and
    /// `simulated` when it runs on the simulated host.
    #[zbus(property(emits_changed_signal = "const"))]
    fn features(&self) -> Vec<String> {
        self.service.features.clone()
    }

    /// The outcome of the last reconcile (at start or `Rescan`), one line per action.
    #[zbus(property)]
    fn reconcile_report(&self) -> Vec<String> {
        self.service.reconcile_lines()
    }

    /// Latency histograms and error counts of the operations served since the service started,
    /// and the number of running jobs (what a Prometheus exporter publishes). Read-only: no
    /// polkit check, like the properties.
    #[zbus(out_args("stats"))]
    async fn get_operation_stats(&self) -> dbus_api::operation_stats::OperationStats {
        self.service.operation_stats()
    }

    /// For each polkit action, `yes`, `auth` or `no` for the caller.
    #[zbus(out_args("permissions"))]
    async fn get_permissions(&self, #[zbus(header)] header: Header<'_>) -> HashMap<String, String> {
        let mut permissions = HashMap::new();
        for id in action::ALL {
            let request = AuthRequest::new(id, &header, true);
            let answer = self.service.authorizer.permission(request).await;
            permissions.insert(id.to_string(), answer.as_str().to_string());
        }
        permissions
    }

    /// Rediscovers the host, reconciles it with the stored state and republishes every object.
    async fn rescan(
        &self,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("Rescan", async {
                let options: NoOptions = from_dict("Rescan", options)?;
                let action = Action::new(|engine, _| engine.reconcile()).authorized_by(ask(
                    action::RELOAD,
                    &header,
                    options.no_user_interaction,
                    "rescan",
                ));
                let report = self.service.perform(connection, action).await?;
                self.service.announce_reconcile(connection, &report).await;
                Ok(())
            })
            .await
    }

    /// Brings mdevctl's definitions (`/etc/mdevctl.d/<parent>/<uuid>`) under management as
    /// adopted, persistent instances (a running device stays as it is). Returns the UUIDs
    /// imported, those skipped because the service already manages them, and the files that
    /// cannot be imported, each with why. Option `dry-run b`: the same report, nothing changed
    /// (no authorization needed); otherwise action `manage-persistent`.
    #[zbus(out_args("imported", "skipped", "problems"))]
    async fn import_mdevctl(
        &self,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(Vec<String>, Vec<String>, Vec<String>), BusError> {
        self.service
            .metered("ImportMdevctl", async {
                let options: ImportOptions = from_dict("ImportMdevctl", options)?;
                let action = if options.dry_run.unwrap_or(false) {
                    Action::new(|engine, _| engine.preview_mdevctl_import()).changing_nothing()
                } else {
                    Action::new(|engine, _| engine.import_mdevctl()).authorized_by(ask(
                        action::MANAGE_PERSISTENT,
                        &header,
                        options.no_user_interaction,
                        "import-mdevctl",
                    ))
                };
                let report = self.service.perform(connection, action).await?;
                Ok((report.imported, report.skipped, report.problems))
            })
            .await
    }

    /// Re-reads the profile files.
    async fn reload_profiles(
        &self,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("ReloadProfiles", async {
                let options: NoOptions = from_dict("ReloadProfiles", options)?;
                let action = Action::new(|engine, _| engine.reload_profiles().map(drop))
                    .authorized_by(ask(
                        action::RELOAD,
                        &header,
                        options.no_user_interaction,
                        "reload-profiles",
                    ));
                self.service.perform(connection, action).await
            })
            .await
    }

    /// Creates `count` instances of `profile` (all or nothing). Options: `parent s`, `uuid s`
    /// (only with count 1), `count u`, `autostart b`, `weight u`, `placement s` (`pack` |
    /// `spread`), `numa-node u`, `numa-strict b`, `force b` (a pass-through profile takes its
    /// GPU's IOMMU group although a member serves the host; polkit action `force`).
    #[zbus(out_args("instances"))]
    async fn create_instances(
        &self,
        profile: String,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<Vec<OwnedObjectPath>, BusError> {
        self.service
            .metered("CreateInstances", async {
                let (action, _) =
                    create_action("CreateInstances", &profile, options, &header, false)?;
                let created = self.service.perform(connection, action).await?;
                Ok(instance_paths(&created))
            })
            .await
    }

    /// Destroys several instances with one state save. Every UUID is checked before anything
    /// is removed: one that is unknown, claimed or not the service's (without `force b`) fails
    /// the call naming it and nothing is destroyed. Polkit action as `Instance.Destroy`.
    async fn destroy_instances(
        &self,
        uuids: Vec<String>,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("DestroyInstances", async {
                let options: ForceOptions = from_dict("DestroyInstances", options)?;
                if uuids.is_empty() {
                    return Err(BusError::InvalidArgs(
                        "DestroyInstances: no UUIDs given".to_string(),
                    ));
                }
                let request = ask(
                    action::MANAGE_INSTANCES,
                    &header,
                    options.no_user_interaction,
                    "destroy",
                )
                .detail("uuid", uuids.join(","))
                .detail("count", uuids.len().to_string());
                let force = options.force.unwrap_or(false);
                let action = Action::new(move |engine, _| {
                    engine.destroy_batch(&uuids, DestroyOptions { force })
                })
                .authorized_by(request)
                // What was removed before a failure part-way is gone.
                .published_even_on_failure();
                self.service.perform(connection, action).await
            })
            .await
    }

    /// Claims every device `devices` describes for the domain, all or nothing.
    #[zbus(out_args("instances"))]
    async fn prepare_domain(
        &self,
        domain_name: String,
        domain_uuid: String,
        devices: Vec<HashMap<String, OwnedVariant>>,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<Vec<OwnedObjectPath>, BusError> {
        self.service
            .metered("PrepareDomain", async {
                let domain = DomainRef {
                    name: domain_name,
                    uuid: domain_uuid,
                };
                let action =
                    prepare_action("PrepareDomain", domain, devices, options, &header, false)?;
                let claimed = self.service.perform(connection, action).await?;
                Ok(instance_paths(&claimed))
            })
            .await
    }

    /// Releases the domain's claims: destroys its transient instances, unclaims persistent
    /// ones. Idempotent.
    async fn release_domain(
        &self,
        domain_name: String,
        domain_uuid: String,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("ReleaseDomain", async {
                let domain = DomainRef {
                    name: domain_name,
                    uuid: domain_uuid,
                };
                let action = release_action("ReleaseDomain", domain, options, &header)?;
                self.service.perform(connection, action).await?;
                Ok(())
            })
            .await
    }

    /// Runs the VFIO preflight probe (vfio-probe) on `target`, an mdev UUID or the PCI address
    /// of a VF or pass-through device, the way a VMM opens it; returns the report as JSON
    /// (`ok`, `steps`, ...). A failed step is in the report, not an error. NotSupported when
    /// the service runs on the simulated host (it has no VFIO devices).
    #[zbus(out_args("report"))]
    async fn probe(
        &self,
        target: String,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<String, BusError> {
        self.service
            .metered("Probe", async {
                let options: NoOptions = from_dict("Probe", options)?;
                let parsed: vfio_probe::Target =
                    target.parse().map_err(|e: vfio_probe::TargetError| {
                        BusError::InvalidArgs(format!("Probe: {e}"))
                    })?;
                // Opening a VFIO group or device is privileged and can disturb a device in use.
                let request = ask(
                    action::MANAGE_INSTANCES,
                    &header,
                    options.no_user_interaction,
                    "probe",
                )
                .detail("target", target.clone());
                let root = self.service.probe_root().map(std::path::Path::to_path_buf);
                // The probe does ioctls and maps memory: on the blocking pool like engine work.
                let action = Action::new(move |_, _| {
                    let Some(sysfs_root) = root else {
                        return Err(BusError::NotSupported(
                            "probe needs a real host: the service runs on the simulated host"
                                .to_string(),
                        ));
                    };
                    let probe_options = vfio_probe::ProbeOptions {
                        sysfs_root,
                        ..vfio_probe::ProbeOptions::default()
                    };
                    let report = vfio_probe::probe(&parsed, &probe_options);
                    serde_json::to_string(&report).map_err(|e| {
                        BusError::Failed(format!(
                            "Probe of {target}: cannot encode the report: {e}"
                        ))
                    })
                })
                .authorized_by(request)
                .changing_nothing();
                self.service.perform(connection, action).await
            })
            .await
    }

    /// Lines describing how the host differs from what the domain should hold; empty when in
    /// line. Never fails for drift.
    #[zbus(out_args("drift"))]
    async fn verify_domain(
        &self,
        domain_name: String,
        domain_uuid: String,
        devices: Vec<HashMap<String, OwnedVariant>>,
        options: HashMap<String, OwnedVariant>,
    ) -> Result<Vec<String>, BusError> {
        self.service
            .metered("VerifyDomain", async {
                from_dict::<NoOptions>("VerifyDomain", options)?;
                let devices = parse_devices("VerifyDomain", devices)?;
                let domain = DomainRef {
                    name: domain_name,
                    uuid: domain_uuid,
                };
                self.service
                    .call(move |engine| Ok(engine.verify_domain(&domain, &devices)))
                    .await
            })
            .await
    }

    /// Every instance in one reply, read from the exported objects (what `GetManagedObjects`
    /// holds, without the walk); sorted by parent then UUID. No options yet.
    #[zbus(out_args("instances"))]
    async fn list_instances(
        &self,
        options: HashMap<String, OwnedVariant>,
    ) -> Result<Vec<dbus_api::wire::InstanceEntry>, BusError> {
        self.service
            .metered("ListInstances", async {
                from_dict::<NoOptions>("ListInstances", options)?;
                Ok(self.service.listing().await.instances.clone())
            })
            .await
    }

    /// The vendor attributes of every instance that has any: (UUID, ordered `(name, value)`),
    /// sorted by UUID (what the mdevctl-compatible command lists as `attrs`). No options yet.
    #[zbus(out_args("attributes"))]
    async fn list_instance_attributes(
        &self,
        options: HashMap<String, OwnedVariant>,
    ) -> Result<Vec<(String, Vec<(String, String)>)>, BusError> {
        self.service
            .metered("ListInstanceAttributes", async {
                from_dict::<NoOptions>("ListInstanceAttributes", options)?;
                self.service
                    .call(|engine| Ok::<_, mdev_engine::EngineError>(engine.instance_attributes()))
                    .await
            })
            .await
    }

    /// Every profile, sorted by name, with whether one instance of it would be placed on the
    /// host now and where, or why not (every parent's reason, then the GPUs that host no vGPU
    /// and why). Creates nothing. No options yet.
    #[zbus(out_args("profiles"))]
    async fn fit_profiles(
        &self,
        options: HashMap<String, OwnedVariant>,
    ) -> Result<Vec<dbus_api::wire::ProfileFitEntry>, BusError> {
        self.service
            .metered("FitProfiles", async {
                from_dict::<NoOptions>("FitProfiles", options)?;
                let fits = self.service.call(|engine| engine.profile_fit()).await?;
                Ok(fits
                    .into_iter()
                    .map(|fit| dbus_api::wire::ProfileFitEntry {
                        name: fit.name,
                        fits: fit.fits,
                        detail: fit.detail,
                    })
                    .collect())
            })
            .await
    }

    /// Every vGPU NVIDIA's `nvidia-smi vgpu -q` reports, by GPU: the VM it serves, framebuffer
    /// used, utilization and licence state, with the service's instance it is (empty when none
    /// matches). Read on demand and kept 2 s (no polling). `NotSupported` naming the tool where
    /// `nvidia-smi` is not installed. No options yet.
    #[zbus(out_args("vgpus"))]
    async fn get_vgpu_telemetry(
        &self,
        options: HashMap<String, OwnedVariant>,
    ) -> Result<Vec<dbus_api::wire::VgpuTelemetryEntry>, BusError> {
        self.service
            .metered("GetVgpuTelemetry", async {
                from_dict::<NoOptions>("GetVgpuTelemetry", options)?;
                let rows = self.service.call(|engine| engine.vgpu_telemetry()).await?;
                Ok(rows.into_iter().map(telemetry_entry).collect())
            })
            .await
    }

    /// Every mdev type in one reply, sorted by parent then id; option `parent s` keeps one
    /// parent's types (`NotFound` when there is no such parent).
    #[zbus(out_args("types"))]
    async fn list_types(
        &self,
        options: HashMap<String, OwnedVariant>,
    ) -> Result<Vec<dbus_api::wire::TypeEntry>, BusError> {
        self.service
            .metered("ListTypes", async {
                let options: ListTypesOptions = from_dict("ListTypes", options)?;
                let parent = options.parent;
                let listing = self.service.listing().await;
                let Some(parent) = parent else {
                    return Ok(listing.types.clone());
                };
                let Some(name) = listing
                    .parents
                    .iter()
                    .find(|name| name.eq_ignore_ascii_case(&parent))
                else {
                    return Err(BusError::NotFound(format!("ListTypes: no parent {parent}")));
                };
                Ok(listing
                    .types
                    .iter()
                    .filter(|t| &t.parent_name == name)
                    .cloned()
                    .collect())
            })
            .await
    }

    /// `CreateInstances` as a Job: returns the Job at once; `Job.ResultObjects` lists the
    /// instances once it succeeds. Same options, plus `wait-for-parent u` (seconds, 1..=3600):
    /// while the parent is not there yet (VFs being enabled, a driver loading), wait for it
    /// and create once it appears, or fail with `TimedOut` naming the parent. Cancelable.
    #[zbus(out_args("job"))]
    async fn start_create_instances(
        &self,
        profile: String,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<OwnedObjectPath, BusError> {
        self.service
            .metered("StartCreateInstances", async {
                let (action, parent) =
                    create_action("StartCreateInstances", &profile, options, &header, true)?;
                let mut objects = vec![dbus_api::path::profile_path(&profile)];
                let mut details = vec![("profile", profile.clone())];
                if let Some(parent) = parent {
                    objects.push(dbus_api::path::parent_path(&parent));
                    details.push(("parent", parent));
                }
                let job = job_spec("create-instances", objects, Some(action::MANAGE_INSTANCES))
                    .with_details(details);
                self.service
                    .perform_as_job(connection, &header, action, job, |created| {
                        instances_outcome("created", &created)
                    })
                    .await
            })
            .await
    }

    /// `PrepareDomain` as a Job (for claims that bind VFs or whole GPUs to `vfio-pci`, or wait
    /// for a parent): returns the Job at once; `Job.ResultObjects` lists the claimed instances.
    /// Option `wait-for-parent u` as for `StartCreateInstances`. Cancelable: a cancelled claim
    /// is undone (devices back on their drivers, nothing created).
    #[zbus(out_args("job"))]
    async fn start_prepare_domain(
        &self,
        domain_name: String,
        domain_uuid: String,
        devices: Vec<HashMap<String, OwnedVariant>>,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<OwnedObjectPath, BusError> {
        self.service
            .metered("StartPrepareDomain", async {
                let holds = format!("domain {domain_name} holds");
                let job = job_spec("prepare-domain", Vec::new(), Some(action::ASSIGN))
                    .with_details(vec![("domain", domain_name.clone())]);
                let domain = DomainRef {
                    name: domain_name,
                    uuid: domain_uuid,
                };
                let action = prepare_action(
                    "StartPrepareDomain",
                    domain,
                    devices,
                    options,
                    &header,
                    true,
                )?;
                self.service
                    .perform_as_job(connection, &header, action, job, move |claimed| {
                        instances_outcome(&holds, &claimed)
                    })
                    .await
            })
            .await
    }

    /// `ReleaseDomain` as a Job (giving VFs and whole GPUs back to their drivers can take a
    /// while): returns the Job at once. Not cancelable: a release runs to its end.
    #[zbus(out_args("job"))]
    async fn start_release_domain(
        &self,
        domain_name: String,
        domain_uuid: String,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<OwnedObjectPath, BusError> {
        self.service
            .metered("StartReleaseDomain", async {
                let name = domain_name.clone();
                let domain = DomainRef {
                    name: domain_name,
                    uuid: domain_uuid,
                };
                let action = release_action("StartReleaseDomain", domain, options, &header)?;
                let job = job_spec("release-domain", Vec::new(), None);
                self.service
                    .perform_as_job(connection, &header, action, job, move |report| {
                        let mut message = format!(
                            "released domain {name}: {} destroyed, {} unclaimed",
                            report.destroyed.len(),
                            report.unclaimed.len()
                        );
                        for problem in &report.problems {
                            message.push_str("; ");
                            message.push_str(problem);
                        }
                        JobOutcome::message(message)
                    })
                    .await
            })
            .await
    }

    /// Declarative apply as a Job: `document` in `format` (`toml`; see docs/apply.md) is
    /// parsed, planned against the host and applied all or nothing; the Job's message is the
    /// plan. Options: `dry-run b` (plan only), `assert b` (plan only; the Job fails with the
    /// difference unless the host matches), `force b` (remove instances a VM holds or the
    /// service did not create), `file-name s` (for error messages). Polkit: manage-instances,
    /// plus manage-persistent for autostart entries and force for `force`. Cancelable.
    #[zbus(out_args("job"))]
    async fn start_apply(
        &self,
        document: String,
        format: String,
        config_name: String,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<OwnedObjectPath, BusError> {
        self.service
            .metered("StartApply", async {
                let request =
                    super::apply::ApplyCall::parse(&document, &format, &config_name, options)?;
                let job = job_spec("apply", Vec::new(), Some(action::MANAGE_INSTANCES))
                    .with_details(vec![("file", request.file_name.clone())]);
                let action = request.into_action(&header);
                self.service
                    .perform_as_job(connection, &header, action, job, |outcome| outcome)
                    .await
            })
            .await
    }

    /// A job started.
    #[zbus(signal)]
    pub(super) async fn job_new(
        emitter: &SignalEmitter<'_>,
        job: ObjectPath<'_>,
        operation: &str,
    ) -> zbus::Result<()>;

    /// A job finished: `result` is `done` or `failed`.
    #[zbus(signal)]
    pub(super) async fn job_removed(
        emitter: &SignalEmitter<'_>,
        job: ObjectPath<'_>,
        result: &str,
        message: &str,
    ) -> zbus::Result<()>;
}

/// A polkit question for the sender of `header` with detail `verb`; `no_user_interaction` is
/// the caller's `auth.no_user_interaction`.
fn ask(
    action: &'static str,
    header: &Header<'_>,
    no_user_interaction: Option<bool>,
    verb: &str,
) -> AuthRequest {
    AuthRequest::new(action, header, no_user_interaction.unwrap_or(false)).detail("verb", verb)
}

/// A Job's description; `started_by_uid` is filled in by [`Service::perform_as_job`].
fn job_spec(
    operation: &'static str,
    objects: Vec<OwnedObjectPath>,
    cancel_action: Option<&'static str>,
) -> JobSpec {
    JobSpec {
        operation,
        objects,
        started_by_uid: u32::MAX,
        cancel_action,
        details: Vec::new(),
    }
}

impl JobSpec {
    /// Adds the polkit details of a `Cancel` by another caller.
    fn with_details(mut self, details: Vec<(&'static str, String)>) -> Self {
        self.details = details;
        self
    }
}

/// `CreateInstances` and its Job twin (`job`: `wait-for-parent` accepted): the requests, the
/// polkit questions (manage-instances; manage-persistent for a definition; force for
/// `force`) and the work. Returns the `parent` option too (the Job names it).
fn create_action(
    method: &'static str,
    profile: &str,
    options: HashMap<String, OwnedVariant>,
    header: &Header<'_>,
    job: bool,
) -> Result<(Action<Vec<InstanceInfo>>, Option<String>), BusError> {
    let options: CreateOptions = from_dict(method, options)?;
    let wait = super::options::wait_for_parent(method, options.wait_for_parent, job)?;
    let parent = options.parent.clone();
    let mdev_type = options.mdev_type.clone();
    if mdev_type.is_some() && (!profile.is_empty() || parent.is_none()) {
        return Err(BusError::InvalidArgs(format!(
            "{method}: option type needs option parent and an empty profile (got profile {profile:?})"
        )));
    }
    let placement = super::options::placement(
        method,
        options.placement.as_deref(),
        options.numa_node,
        options.numa_strict,
    )?;
    let force = options.force.unwrap_or(false);
    let count = options.count.unwrap_or(1);
    let autostart = options.autostart.unwrap_or(false);
    let persistent = options.persistent.unwrap_or(autostart);
    let attributes = options.attributes.clone().unwrap_or_default();
    if !attributes.is_empty() && mdev_type.is_none() {
        return Err(BusError::InvalidArgs(format!(
            "{method}: option attributes needs option type (an mdev of that type; profile {profile:?})"
        )));
    }
    if autostart && !persistent {
        return Err(BusError::InvalidArgs(format!(
            "{method}: autostart needs a definition (option persistent false)"
        )));
    }
    if count == 0 || count > MAX_COUNT {
        return Err(BusError::InvalidArgs(format!(
            "{method}: count {count} for profile {profile} is outside 1..={MAX_COUNT}"
        )));
    }
    if count > 1 && options.uuid.is_some() {
        return Err(BusError::InvalidArgs(format!(
            "{method}: option uuid names one instance but count is {count}"
        )));
    }
    let no_ui = options.no_user_interaction;
    let mut create = ask(action::MANAGE_INSTANCES, header, no_ui, "create")
        .detail("profile", profile.to_owned());
    if let Some(parent) = &parent {
        create = create.detail("parent", parent.clone());
    }
    let requests: Vec<CreateRequest> = (0..count)
        .map(|_| {
            let target = match (&mdev_type, &parent) {
                (Some(type_id), Some(parent)) => CreateTarget::Mdev {
                    parent: parent.clone(),
                    type_id: type_id.clone(),
                },
                _ => CreateTarget::Profile {
                    profile: profile.to_owned(),
                    parent: parent.clone(),
                },
            };
            let mut request = CreateRequest::new(target);
            request.uuid = options.uuid.clone();
            request.autostart = autostart;
            request.persistent = persistent;
            request.attributes = attributes.clone();
            request.scheduling.weight = options.weight;
            request.placement = placement;
            request.force = force;
            request
        })
        .collect();
    let definition = match options.start {
        Some(false) => Some(definition_only(method, &requests)?),
        _ => None,
    };
    let action = Action::new(move |engine, ctx| match (definition, wait) {
        (Some(definition), _) => engine.define_mdev(definition).map(|info| vec![info]),
        (None, Some(timeout)) => engine.wait_for_parent_then(ctx, timeout, |ctx| {
            engine.create_batch_with(ctx, requests.clone())
        }),
        (None, None) => engine.create_batch_with(ctx, requests),
    })
    .authorized_by(create)
    .authorized_by_if(persistent, || {
        ask(action::MANAGE_PERSISTENT, header, no_ui, "create-autostart")
            .detail("profile", profile.to_owned())
    })
    .authorized_by_if(force, || {
        ask(action::FORCE, header, no_ui, "create-force").detail("profile", profile.to_owned())
    });
    Ok((action, parent))
}

/// `PrepareDomain` and its Job twin (`job`: `wait-for-parent` accepted): the devices, the
/// polkit questions (assign; force when a device asks for it) and the claim.
fn prepare_action(
    method: &'static str,
    domain: DomainRef,
    devices: Vec<HashMap<String, OwnedVariant>>,
    options: HashMap<String, OwnedVariant>,
    header: &Header<'_>,
    job: bool,
) -> Result<Action<Vec<InstanceInfo>>, BusError> {
    let options: PrepareOptions = from_dict(method, options)?;
    let wait = super::options::wait_for_parent(method, options.wait_for_parent, job)?;
    let devices = parse_devices(method, devices)?;
    let no_ui = options.no_user_interaction;
    let assign =
        ask(action::ASSIGN, header, no_ui, "prepare").detail("domain", domain.name.clone());
    let force =
        ask(action::FORCE, header, no_ui, "prepare-force").detail("domain", domain.name.clone());
    let forced = devices.iter().any(|device| device.force);
    Ok(Action::new(move |engine, ctx| match wait {
        Some(timeout) => engine.wait_for_parent_then(ctx, timeout, |ctx| {
            engine.claim_domain_with(ctx, &domain, &devices)
        }),
        None => engine.claim_domain_with(ctx, &domain, &devices),
    })
    .authorized_by(assign)
    .authorized_by_if(forced, || force))
}

/// `ReleaseDomain` and its Job twin: action assign, then the release (its problems logged).
fn release_action(
    method: &'static str,
    domain: DomainRef,
    options: HashMap<String, OwnedVariant>,
    header: &Header<'_>,
) -> Result<Action<mdev_engine::ReleaseReport>, BusError> {
    let options: NoOptions = from_dict(method, options)?;
    let request = ask(
        action::ASSIGN,
        header,
        options.no_user_interaction,
        "release",
    )
    .detail("domain", domain.name.clone());
    Ok(Action::new(move |engine, _| {
        let report = engine.release_domain(&domain)?;
        for problem in &report.problems {
            tracing::warn!(%problem, "release left a problem");
        }
        Ok::<_, mdev_engine::EngineError>(report)
    })
    .authorized_by(request))
}

/// The one mdev definition a `CreateInstances` with `start false` records: option `type`
/// (with `parent`), `persistent` or `autostart`, one instance.
fn definition_only(
    method: &str,
    requests: &[CreateRequest],
) -> Result<mdev_engine::MdevDefinition, BusError> {
    let [request] = requests else {
        return Err(BusError::InvalidArgs(format!(
            "{method}: option start false defines one instance (count 1)"
        )));
    };
    let CreateTarget::Mdev { parent, type_id } = &request.target else {
        return Err(BusError::InvalidArgs(format!(
            "{method}: option start false needs options type and parent (an mdev definition)"
        )));
    };
    if !request.persistent {
        return Err(BusError::InvalidArgs(format!(
            "{method}: option start false needs persistent or autostart (a definition of type {type_id} on {parent})"
        )));
    }
    Ok(mdev_engine::MdevDefinition {
        parent: parent.clone(),
        type_id: type_id.clone(),
        uuid: request.uuid.clone(),
        autostart: request.autostart,
        attributes: request.attributes.clone(),
    })
}

/// The object paths of `instances`, for a reply.
fn instance_paths(instances: &[InstanceInfo]) -> Vec<OwnedObjectPath> {
    instances
        .iter()
        .map(|info| dbus_api::path::mdev_instance_path(&info.uuid))
        .collect()
}

/// A job's outcome listing instances: `<verb> <uuid>, <uuid>` and their paths.
fn instances_outcome(verb: &str, instances: &[InstanceInfo]) -> JobOutcome {
    let uuids: Vec<&str> = instances.iter().map(|info| info.uuid.as_str()).collect();
    JobOutcome {
        message: format!("{verb} {}", uuids.join(", ")),
        objects: instance_paths(instances),
    }
}

/// The device dicts of `PrepareDomain` / `VerifyDomain` as engine requests.
fn parse_devices(
    method: &'static str,
    devices: Vec<HashMap<String, OwnedVariant>>,
) -> Result<Vec<DeviceRequest>, BusError> {
    devices
        .into_iter()
        .enumerate()
        .map(|(index, dict)| {
            let context = format!("{method} device #{index}");
            let device: DeviceSpec = from_dict(&context, dict)?;
            let kind = device.kind.ok_or_else(|| {
                BusError::InvalidArgs(format!("{method}: device #{index} has no kind"))
            })?;
            let force = device.force.unwrap_or(false);
            if force && kind != dbus_api::names::instance_kind::PASSTHROUGH {
                return Err(BusError::InvalidArgs(format!(
                    "{method}: device #{index} (kind {kind}) has force, which only a passthrough device takes"
                )));
            }
            let placement = super::options::placement(
                &context,
                device.placement.as_deref(),
                device.numa_node,
                device.numa_strict,
            )?;
            Ok(DeviceRequest {
                kind,
                uuid: device.uuid,
                profile: device.profile,
                parent: device.parent,
                weight: device.weight,
                pci_address: device.pci_address,
                force,
                placement,
            })
        })
        .collect()
}

macro_rules! data_accessor {
    ($iface:ty, $data:ty) => {
        impl $iface {
            /// The current record. The lock is never held across an `await`: the service
            /// updates records while methods of the same object may be running.
            fn data(&self) -> std::sync::RwLockReadGuard<'_, $data> {
                self.data
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            }
        }
    };
}
data_accessor!(ParentIface, ParentData);
data_accessor!(SriovIface, SriovData);
data_accessor!(TypeIface, TypeData);
data_accessor!(InstanceIface, InstanceData);
data_accessor!(ProfileIface, ProfileData);

/// `org.mdevmanager.VGpu1.Parent`.
#[derive(Debug)]
pub struct ParentIface {
    pub(super) service: Arc<Service>,
    pub(super) data: Shared<ParentData>,
}

#[interface(name = "org.mdevmanager.VGpu1.Parent")]
impl ParentIface {
    /// The parent's sysfs name: its PCI address, or e.g. `mtty` for a non-PCI parent. The key.
    #[zbus(property(emits_changed_signal = "const"))]
    fn name(&self) -> String {
        self.data().name.clone()
    }
    /// PCI address, empty for a non-PCI parent.
    #[zbus(property(emits_changed_signal = "const"))]
    fn pci_address(&self) -> String {
        self.data().pci_address.clone()
    }
    /// PCI vendor id (0 for a non-PCI parent).
    #[zbus(property(emits_changed_signal = "const"))]
    fn vendor_id(&self) -> u16 {
        self.data().vendor_id
    }
    /// PCI device id.
    #[zbus(property(emits_changed_signal = "const"))]
    fn device_id(&self) -> u16 {
        self.data().device_id
    }
    /// The bound driver, empty if none.
    #[zbus(property)]
    fn driver(&self) -> String {
        self.data().driver.clone()
    }
    /// NUMA node, -1 when the platform does not say.
    #[zbus(property)]
    fn numa_node(&self) -> i32 {
        self.data().numa_node
    }
    /// How it can be used: `mdev`, `sriov`; `passthrough` alone for a GPU that hosts no vGPU
    /// but can be passed through whole; empty when the service can do nothing with it.
    #[zbus(property)]
    fn modes(&self) -> Vec<String> {
        self.data().modes.clone()
    }
    /// Why no vGPU can be made on it (`nvidia driver without vGPU support loaded (no mdev
    /// types, no SR-IOV VFs); IOMMU off: no IOMMU group, so no pass-through`); empty when one
    /// can.
    #[zbus(property)]
    fn reason(&self) -> String {
        self.data().reason.clone()
    }
    /// Its mdev type objects.
    #[zbus(property)]
    fn types(&self) -> Vec<OwnedObjectPath> {
        self.data().types.clone()
    }
    /// The instance objects on it.
    #[zbus(property)]
    fn instances(&self) -> Vec<OwnedObjectPath> {
        self.data().instances.clone()
    }
    /// Scheduling policy: `best-effort`, `equal-share`, `fixed-share` or `weighted`.
    #[zbus(property)]
    fn policy(&self) -> String {
        self.data().schedule.policy.clone()
    }
    /// Scheduling period in µs: every instance gets its share of each period.
    #[zbus(property)]
    fn period_us(&self) -> u32 {
        self.data().schedule.period_us
    }
    /// Longest run before a switch in µs, 0 for the backend's default.
    #[zbus(property)]
    fn time_slice_us(&self) -> u32 {
        self.data().schedule.time_slice_us
    }
    /// The scheduler behind it: `software`, `nvidia`, `amd-gim` or `intel-gvt`.
    #[zbus(property)]
    fn scheduler_backend(&self) -> String {
        self.data().schedule.backend.clone()
    }
    /// What the backend enforces: `weight`, `min`, `max`, `runtime-change`, `requires-idle-gpu`.
    #[zbus(property)]
    fn scheduler_capabilities(&self) -> Vec<String> {
        self.data().schedule.capabilities.clone()
    }
    /// What applying the settings needs (e.g. a driver reload), or why they are not applied.
    #[zbus(property)]
    fn scheduler_note(&self) -> String {
        self.data().schedule.note.clone()
    }

    /// Sets the scheduling policy (empty keeps it) and options `period u` (µs) and `slice u`
    /// (µs, 0 = the backend's default). NVIDIA refuses a change while vGPUs exist (`Busy`).
    async fn set_scheduler_policy(
        &self,
        policy: String,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("SetSchedulerPolicy", async {
                let parent = self.data().name.clone();
                super::schedule::set_scheduler_policy(
                    &self.service,
                    connection,
                    &header,
                    parent,
                    policy,
                    options,
                )
                .await
            })
            .await
    }
}

/// `org.mdevmanager.VGpu1.Sriov`.
#[derive(Debug)]
pub struct SriovIface {
    pub(super) service: Arc<Service>,
    pub(super) data: Shared<SriovData>,
}

#[interface(name = "org.mdevmanager.VGpu1.Sriov")]
impl SriovIface {
    /// `sriov_totalvfs`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn total_vfs(&self) -> u32 {
        self.data().total_vfs
    }
    /// `sriov_numvfs`.
    #[zbus(property)]
    fn num_vfs(&self) -> u32 {
        self.data().num_vfs
    }
    /// PCI addresses of the enabled VFs.
    #[zbus(property)]
    fn vfs(&self) -> Vec<String> {
        self.data().vfs.clone()
    }

    /// Sets the number of VFs. Returns a Job at once; `Manager.JobRemoved` (and
    /// `Job.Completed`) tell the outcome. Option `force b` also removes VFs in use by
    /// instances the service did not create.
    #[zbus(out_args("job"))]
    async fn set_num_vfs(
        &self,
        count: u32,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<OwnedObjectPath, BusError> {
        self.service
            .metered("SetNumVfs", async {
                let options: ForceOptions = from_dict("SetNumVfs", options)?;
                let pf = self.data().pf.clone();
                let request = ask(
                    action::CONFIGURE_SRIOV,
                    &header,
                    options.no_user_interaction,
                    "set-num-vfs",
                )
                .detail("parent", pf.clone())
                .detail("count", count.to_string());
                let force = options.force.unwrap_or(false);
                // One sysfs write: nothing to stop between steps.
                let job = job_spec(
                    "sriov-set-numvfs",
                    vec![dbus_api::path::parent_path(&pf)],
                    None,
                );
                let checked = pf.clone();
                let action = Action::new({
                    let pf = pf.clone();
                    move |engine, _| engine.set_num_vfs(&pf, count, DestroyOptions { force })
                })
                .authorized_by(request)
                .checked_first(move |engine| engine.check_vf_count(&checked, count));
                self.service
                    .perform_as_job(connection, &header, action, job, move |vfs| {
                        JobOutcome::message(format!("PF {pf} now has {} VFs", vfs.len()))
                    })
                    .await
            })
            .await
    }
}

/// `org.mdevmanager.VGpu1.MdevType`.
#[derive(Debug)]
pub struct TypeIface {
    pub(super) data: Shared<TypeData>,
}

#[interface(name = "org.mdevmanager.VGpu1.MdevType")]
impl TypeIface {
    /// The type id (`nvidia-558`); unique per parent.
    #[zbus(property(emits_changed_signal = "const"))]
    fn id(&self) -> String {
        self.data().id.clone()
    }
    /// The `name` attribute.
    #[zbus(property(emits_changed_signal = "const"))]
    fn name(&self) -> String {
        self.data().name.clone()
    }
    /// The `description` attribute.
    #[zbus(property(emits_changed_signal = "const"))]
    fn description(&self) -> String {
        self.data().description.clone()
    }
    /// The `device_api` attribute (`vfio-pci`).
    #[zbus(property(emits_changed_signal = "const"))]
    fn device_api(&self) -> String {
        self.data().device_api.clone()
    }
    /// The parent object.
    #[zbus(property(emits_changed_signal = "const"))]
    fn parent(&self) -> OwnedObjectPath {
        self.data().parent.clone()
    }
    /// The parent's sysfs name.
    #[zbus(property(emits_changed_signal = "const"))]
    fn parent_name(&self) -> String {
        self.data().parent_name.clone()
    }
    /// `available_instances` now.
    #[zbus(property)]
    fn available_instances(&self) -> u32 {
        self.data().available_instances
    }
    /// The instances of this type.
    #[zbus(property)]
    fn instances(&self) -> Vec<OwnedObjectPath> {
        self.data().instances.clone()
    }
}

/// `org.mdevmanager.VGpu1.Instance`.
#[derive(Debug)]
pub struct InstanceIface {
    pub(super) service: Arc<Service>,
    pub(super) data: Shared<InstanceData>,
}

impl InstanceIface {
    /// A polkit question about this instance (its UUID, parent and profile as details).
    fn request(
        &self,
        action: &'static str,
        verb: &str,
        header: &Header<'_>,
        no_user_interaction: Option<bool>,
    ) -> AuthRequest {
        ask(action, header, no_user_interaction, verb)
            .detail("uuid", self.data().uuid.clone())
            .detail("parent", self.data().parent_name.clone())
            .detail("profile", self.data().profile.clone())
    }
}

#[interface(name = "org.mdevmanager.VGpu1.Instance")]
impl InstanceIface {
    /// The UUID, the key (for VF kinds the handle the service gave the VF).
    #[zbus(property(emits_changed_signal = "const"))]
    fn uuid(&self) -> String {
        self.data().uuid.clone()
    }
    /// `mdev`, `vf` or `nvidia-vf`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn kind(&self) -> String {
        self.data().kind.clone()
    }
    /// The VF's PCI address for VF kinds, empty for an mdev.
    #[zbus(property)]
    fn pci_address(&self) -> String {
        self.data().pci_address.clone()
    }
    /// The parent object.
    #[zbus(property(emits_changed_signal = "const"))]
    fn parent(&self) -> OwnedObjectPath {
        self.data().parent.clone()
    }
    /// The parent's sysfs name.
    #[zbus(property(emits_changed_signal = "const"))]
    fn parent_name(&self) -> String {
        self.data().parent_name.clone()
    }
    /// The mdev type id (or NVIDIA type id, or `vfio-pci` for a plain VF).
    #[zbus(property, name = "Type")]
    fn type_id(&self) -> String {
        self.data().type_id.clone()
    }
    /// The profile it came from, empty when unknown.
    #[zbus(property)]
    fn profile(&self) -> String {
        self.data().profile.clone()
    }
    /// Whether the device exists now.
    #[zbus(property)]
    fn active(&self) -> bool {
        self.data().active
    }
    /// Whether the definition is kept when the device goes away.
    #[zbus(property)]
    fn persistent(&self) -> bool {
        self.data().persistent
    }
    /// Whether it is created when the service starts.
    #[zbus(property)]
    fn autostart(&self) -> bool {
        self.data().autostart
    }
    /// `created` (by the service), `adopted`, or empty for a device the service does not manage.
    #[zbus(property)]
    fn owner(&self) -> String {
        self.data().owner.clone()
    }
    /// Name of the domain holding it, empty if free.
    #[zbus(property)]
    fn holder(&self) -> String {
        self.data().holder.clone()
    }
    /// UUID of the domain holding it, empty if free.
    #[zbus(property)]
    fn holder_uuid(&self) -> String {
        self.data().holder_uuid.clone()
    }
    /// IOMMU group, -1 when inactive or unknown.
    #[zbus(property)]
    fn iommu_group(&self) -> i32 {
        self.data().iommu_group
    }
    /// Pass-through: the members of the GPU's IOMMU group the service bound to `vfio-pci`
    /// (the GPU and its card's other functions, not bridges), sorted by address; empty for the
    /// other kinds and while no group is bound.
    #[zbus(property)]
    fn group_members(&self) -> Vec<String> {
        self.data().group_members.clone()
    }
    /// Scheduling weight, 0 when unset.
    #[zbus(property)]
    fn weight(&self) -> u32 {
        self.data().weight
    }
    /// Guarantee in ppm of the GPU (1% = 10000), 0 when none.
    #[zbus(property)]
    fn min_share(&self) -> u32 {
        self.data().schedule.min_share
    }
    /// Cap in ppm, 0 when none.
    #[zbus(property)]
    fn max_share(&self) -> u32 {
        self.data().schedule.max_share
    }
    /// The plan's share for it in ppm (0 when not running).
    #[zbus(property)]
    fn requested_share(&self) -> u32 {
        self.data().schedule.requested_share
    }
    /// The share the backend will give it, ppm.
    #[zbus(property)]
    fn effective_share(&self) -> u32 {
        self.data().schedule.effective_share
    }
    /// GPU time per scheduling period in µs (AMD GIM: the VF's time slice).
    #[zbus(property)]
    fn time_slice_us(&self) -> u32 {
        self.data().schedule.time_slice_us
    }
    /// Whether the backend holds it to the requested share.
    #[zbus(property)]
    fn enforced(&self) -> bool {
        self.data().schedule.enforced
    }
    /// Why it is not enforced, or how it is.
    #[zbus(property)]
    fn scheduling_note(&self) -> String {
        self.data().schedule.note.clone()
    }

    /// Sets its weight (1..=10000), guarantee and cap (ppm of the GPU, 0 = none), after
    /// admission control on its parent (guarantees total at most 100%: `NoCapacity`).
    async fn set_schedule(
        &self,
        weight: u32,
        min_share: u32,
        max_share: u32,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("SetSchedule", async {
                let request = super::schedule::SetSchedule {
                    uuid: self.data().uuid.clone(),
                    parent: self.data().parent_name.clone(),
                    weight,
                    min_share,
                    max_share,
                };
                super::schedule::set_schedule(&self.service, connection, &header, request, options)
                    .await
            })
            .await
    }

    /// Removes the device and forgets the instance. Option `force b`: also when a domain holds
    /// it or the service did not create it.
    async fn destroy(
        &self,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("Destroy", async {
                let action = self.destroy_action("Destroy", options, &header)?;
                self.service.perform(connection, action).await
            })
            .await
    }

    /// `Destroy` as a Job (giving a VF or a whole GPU's IOMMU group back to its original
    /// drivers can take a while): returns the Job at once. Same option and authorization as
    /// `Destroy`, checked before the job starts. Not cancelable: a removal is not undone.
    #[zbus(out_args("job"))]
    async fn start_destroy(
        &self,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<OwnedObjectPath, BusError> {
        self.service
            .metered("StartDestroy", async {
                let action = self.destroy_action("StartDestroy", options, &header)?;
                let uuid = self.data().uuid.clone();
                let job = job_spec(
                    "destroy-instance",
                    vec![dbus_api::path::mdev_instance_path(&uuid)],
                    None,
                );
                self.service
                    .perform_as_job(connection, &header, action, job, move |()| {
                        JobOutcome::message(format!("destroyed {uuid}"))
                    })
                    .await
            })
            .await
    }

    /// Creates the device of a persistent, inactive instance.
    async fn start(
        &self,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("Start", async {
                let options: NoOptions = from_dict("Start", options)?;
                let request = self.request(
                    action::MANAGE_INSTANCES,
                    "start",
                    &header,
                    options.no_user_interaction,
                );
                let uuid = self.data().uuid.clone();
                let action = Action::new(move |engine, _| engine.start(&uuid).map(drop))
                    .authorized_by(request);
                self.service.perform(connection, action).await
            })
            .await
    }

    /// Removes the device of a persistent instance, keeping its definition. Option `force b`:
    /// also when a domain holds it. A transient instance has no definition to keep, so `Stop`
    /// would silently be `Destroy`: it is refused with `NotSupported` instead.
    async fn stop(
        &self,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("Stop", async {
                let options: ForceOptions = from_dict("Stop", options)?;
                let request = self.request(
                    action::MANAGE_INSTANCES,
                    "stop",
                    &header,
                    options.no_user_interaction,
                );
                let uuid = self.data().uuid.clone();
                let force = options.force.unwrap_or(false);
                let action =
                    Action::new(move |engine, _| engine.stop(&uuid, DestroyOptions { force }))
                        .authorized_by(request);
                self.service.perform(connection, action).await
            })
            .await
    }

    /// Sets autostart; turning it on also makes the instance persistent. Option `persistent b`
    /// keeps or drops the definition explicitly (`false` with autostart on is `InvalidArgs`).
    async fn set_autostart(
        &self,
        autostart: bool,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("SetAutostart", async {
                let options: AutostartOptions = from_dict("SetAutostart", options)?;
                let request = self.request(
                    action::MANAGE_PERSISTENT,
                    "set-autostart",
                    &header,
                    options.no_user_interaction,
                );
                let uuid = self.data().uuid.clone();
                let persistent = options.persistent;
                let action = Action::new(move |engine, _| {
                    engine.set_autostart(&uuid, autostart, persistent).map(drop)
                })
                .authorized_by(request);
                self.service.perform(connection, action).await
            })
            .await
    }

    /// Replaces the ordered vendor attributes of a persistent mdev instance (mdevctl's
    /// `modify --addattr/--delattr`). They are written the next time the device is created;
    /// a running device is not touched. Polkit action `manage-persistent`.
    async fn set_attributes(
        &self,
        attributes: Vec<(String, String)>,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("SetAttributes", async {
                let options: NoOptions = from_dict("SetAttributes", options)?;
                let request = self.request(
                    action::MANAGE_PERSISTENT,
                    "set-attributes",
                    &header,
                    options.no_user_interaction,
                );
                let uuid = self.data().uuid.clone();
                let action = Action::new(move |engine, _| {
                    engine.set_attributes(&uuid, attributes).map(drop)
                })
                .authorized_by(request);
                self.service.perform(connection, action).await
            })
            .await
    }
}

impl InstanceIface {
    /// `Destroy` and its Job twin: action manage-instances, then the removal.
    fn destroy_action(
        &self,
        method: &'static str,
        options: HashMap<String, OwnedVariant>,
        header: &Header<'_>,
    ) -> Result<Action<()>, BusError> {
        let options: ForceOptions = from_dict(method, options)?;
        let request = self.request(
            action::MANAGE_INSTANCES,
            "destroy",
            header,
            options.no_user_interaction,
        );
        let uuid = self.data().uuid.clone();
        let force = options.force.unwrap_or(false);
        Ok(
            Action::new(move |engine, _| engine.destroy(&uuid, DestroyOptions { force }))
                .authorized_by(request),
        )
    }
}

/// `org.mdevmanager.VGpu1.Profile`.
#[derive(Debug)]
pub struct ProfileIface {
    pub(super) data: Shared<ProfileData>,
}

#[interface(name = "org.mdevmanager.VGpu1.Profile")]
impl ProfileIface {
    /// The profile name, the key (what `CreateInstances` takes).
    #[zbus(property)]
    fn name(&self) -> String {
        self.data().name.clone()
    }
    /// Its description, empty if none.
    #[zbus(property)]
    fn description(&self) -> String {
        self.data().description.clone()
    }
}

/// The state of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobData {
    /// What it does.
    pub operation: String,
    /// Objects it acts on.
    pub objects: Vec<OwnedObjectPath>,
    /// Caller's uid (`u32::MAX` when unknown).
    pub started_by_uid: u32,
    /// Whether `Cancel` can stop it.
    pub cancelable: bool,
    /// Objects it made (created or claimed instances), once finished successfully.
    pub result_objects: Vec<OwnedObjectPath>,
    /// Finished yet.
    pub finished: bool,
    /// Succeeded.
    pub success: bool,
    /// Outcome message.
    pub message: String,
    /// The D-Bus error name the synchronous method would have returned, on failure.
    pub error_name: String,
}

/// How a job is cancelled and who may.
#[derive(Debug, Clone, Default)]
pub struct JobControl {
    /// Set by `Cancel`; the job's engine call checks it.
    pub token: CancelToken,
    /// The polkit action another caller than the starter needs; `None`: not cancelable.
    pub cancel_action: Option<&'static str>,
    /// polkit details for that check besides `verb`, which is `cancel` (`profile`, `parent`,
    /// `domain`).
    pub details: Vec<(&'static str, String)>,
}

/// `org.mdevmanager.VGpu1.Job`.
#[derive(Debug)]
pub struct JobIface {
    pub(super) service: Arc<Service>,
    pub(super) control: JobControl,
    pub(super) data: JobData,
}

#[interface(name = "org.mdevmanager.VGpu1.Job")]
impl JobIface {
    /// What it does: `sriov-set-numvfs`, `create-instances`, `prepare-domain`,
    /// `release-domain`, `destroy-instance`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn operation(&self) -> String {
        self.data.operation.clone()
    }
    /// The objects it acts on.
    #[zbus(property(emits_changed_signal = "const"))]
    fn objects(&self) -> Vec<OwnedObjectPath> {
        self.data.objects.clone()
    }
    /// uid of the caller that started it (4294967295 when unknown).
    #[zbus(property(emits_changed_signal = "const"))]
    fn started_by_uid(&self) -> u32 {
        self.data.started_by_uid
    }
    /// Whether `Cancel` can stop it (udisks' `Cancelable`).
    #[zbus(property(emits_changed_signal = "const"))]
    fn cancelable(&self) -> bool {
        self.data.cancelable
    }
    /// The objects it made (the instances created or claimed), set when it succeeds.
    #[zbus(property)]
    fn result_objects(&self) -> Vec<OwnedObjectPath> {
        self.data.result_objects.clone()
    }
    /// Whether it has finished.
    #[zbus(property)]
    fn finished(&self) -> bool {
        self.data.finished
    }
    /// Whether it succeeded (once finished).
    #[zbus(property)]
    fn success(&self) -> bool {
        self.data.success
    }
    /// The outcome message (once finished).
    #[zbus(property)]
    fn message(&self) -> String {
        self.data.message.clone()
    }
    /// On failure, the error the synchronous method would have returned
    /// (`org.mdevmanager.VGpu1.Error.InUse`, `...Error.Cancelled`); empty otherwise.
    #[zbus(property)]
    fn error_name(&self) -> String {
        self.data.error_name.clone()
    }

    /// Asks the job to stop at its next step; what it did so far is undone, and it completes
    /// with `Completed(false, "Cancelled: ...")` and `JobRemoved` result `cancelled`. A job past
    /// its last step completes normally. The caller that started the job may cancel it;
    /// anyone else needs the polkit action of the operation. `NotSupported` for a job that
    /// cannot be cancelled (`Cancelable` false) or has finished.
    async fn cancel(
        &self,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &Connection,
    ) -> Result<(), BusError> {
        self.service
            .metered("Cancel", async {
                let options: NoOptions = from_dict("Cancel", options)?;
                let no_interaction = options.no_user_interaction.unwrap_or(false);
                let what = format!(
                    "job {} ({})",
                    header.path().map(|p| p.as_str()).unwrap_or("?"),
                    self.data.operation
                );
                let Some(action) = self.control.cancel_action else {
                    return Err(BusError::NotSupported(format!(
                        "{what} cannot be cancelled"
                    )));
                };
                if self.data.finished {
                    return Err(BusError::NotSupported(format!(
                        "{what} has already finished"
                    )));
                }
                let uid = self.service.caller_uid(connection, &header).await;
                if uid == u32::MAX || uid != self.data.started_by_uid {
                    let mut request =
                        AuthRequest::new(action, &header, no_interaction).detail("verb", "cancel");
                    for (key, value) in &self.control.details {
                        request = request.detail(key, value.clone());
                    }
                    // The refusal names the job: the action's own message names only its target.
                    self.service
                        .authorizer
                        .check(request)
                        .await
                        .map_err(|error| match error {
                            BusError::NotAuthorized(why) => BusError::NotAuthorized(format!(
                                "cannot cancel {what}, started by uid {}: {why}",
                                self.data.started_by_uid
                            )),
                            other => other,
                        })?;
                }
                tracing::info!(job = %what, uid, "cancel requested");
                self.control.token.cancel();
                Ok(())
            })
            .await
    }

    /// Emitted once, when the job finishes, just before the object is removed.
    #[zbus(signal)]
    pub(super) async fn completed(
        emitter: &SignalEmitter<'_>,
        success: bool,
        message: &str,
    ) -> zbus::Result<()>;
}

/// A telemetry row as the bus sends it: `N/A` as an empty string or `-1`.
fn telemetry_entry(
    row: mdev_engine::nvidia_telemetry::VgpuTelemetry,
) -> dbus_api::wire::VgpuTelemetryEntry {
    let mib = |value: Option<u64>| value.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
    let percent = |value: Option<u32>| value.map_or(-1, |v| i32::try_from(v).unwrap_or(i32::MAX));
    dbus_api::wire::VgpuTelemetryEntry {
        gpu: row.gpu,
        vgpu_id: row.vgpu_id,
        instance: row.instance.unwrap_or_default(),
        vm_uuid: row.vm_uuid.unwrap_or_default(),
        vm_name: row.vm_name.unwrap_or_default(),
        vgpu_name: row.vgpu_name.unwrap_or_default(),
        fb_used_mib: mib(row.fb_used_mib),
        fb_total_mib: mib(row.fb_total_mib),
        gpu_utilization_percent: percent(row.gpu_utilization_percent),
        memory_utilization_percent: percent(row.memory_utilization_percent),
        license_status: row.license_status.unwrap_or_default(),
    }
}
