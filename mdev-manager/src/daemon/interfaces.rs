//! The D-Bus interface objects. Each method is thin: authorize, parse options, one engine call
//! (on the blocking pool), map the error, refresh the exported objects before replying (so a
//! caller that sees the reply has already been sent the `InterfacesAdded`/`Removed` signals).

use std::collections::HashMap;
use std::sync::Arc;

use dbus_api::names::{action, device_key, option};
use dbus_api::BusError;
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::{interface, Connection, ObjectPath, OwnedObjectPath, OwnedVariant};

use super::auth::AuthRequest;
use super::model::{InstanceData, ParentData, ProfileData, Shared, SriovData, TypeData};
use super::options::CallOptions;
use super::{JobOutcome, JobSpec, Service};
use mdev_engine::{
    CancelToken, CreateRequest, CreateTarget, DestroyOptions, DeviceRequest, DomainRef,
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
                let options = CallOptions::parse("Rescan", options, &[])?;
                let request =
                    AuthRequest::new(action::RELOAD, &header, options.no_user_interaction()?)
                        .detail("verb", "rescan");
                self.service.authorizer.check(request).await?;
                self.service.reconcile(connection).await?;
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
                let options = CallOptions::parse("ImportMdevctl", options, &[option::DRY_RUN])?;
                let dry_run = options.boolean(option::DRY_RUN)?.unwrap_or(false);
                if !dry_run {
                    let request = AuthRequest::new(
                        action::MANAGE_PERSISTENT,
                        &header,
                        options.no_user_interaction()?,
                    )
                    .detail("verb", "import-mdevctl");
                    self.service.authorizer.check(request).await?;
                }
                let report = self
                    .service
                    .call(move |engine| {
                        if dry_run {
                            engine.preview_mdevctl_import()
                        } else {
                            engine.import_mdevctl()
                        }
                    })
                    .await?;
                if !dry_run {
                    self.service.refresh(connection).await;
                }
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
                let options = CallOptions::parse("ReloadProfiles", options, &[])?;
                let request =
                    AuthRequest::new(action::RELOAD, &header, options.no_user_interaction()?)
                        .detail("verb", "reload-profiles");
                self.service.authorizer.check(request).await?;
                self.service.call(|engine| engine.reload_profiles()).await?;
                self.service.refresh(connection).await;
                Ok(())
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
                let (requests, _) = self
                    .create_requests("CreateInstances", &profile, options, &header, &[])
                    .await?;
                let created = self
                    .service
                    .call(move |engine| engine.create_batch(requests))
                    .await?;
                self.service.refresh(connection).await;
                Ok(created
                    .iter()
                    .map(|info| dbus_api::path::mdev_instance_path(&info.uuid))
                    .collect())
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
                let options = CallOptions::parse("DestroyInstances", options, &[option::FORCE])?;
                let force = options.boolean(option::FORCE)?.unwrap_or(false);
                if uuids.is_empty() {
                    return Err(BusError::InvalidArgs(
                        "DestroyInstances: no UUIDs given".to_string(),
                    ));
                }
                let request = AuthRequest::new(
                    action::MANAGE_INSTANCES,
                    &header,
                    options.no_user_interaction()?,
                )
                .detail("verb", "destroy")
                .detail("uuid", uuids.join(","))
                .detail("count", uuids.len().to_string());
                self.service.authorizer.check(request).await?;
                let destroyed = self
                    .service
                    .call(move |engine| engine.destroy_batch(&uuids, DestroyOptions { force }))
                    .await;
                // Refreshed also after a failure part-way: what was removed before it is gone.
                self.service.refresh(connection).await;
                destroyed
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
                let (devices, _) = self
                    .prepare_requests(
                        "PrepareDomain",
                        &domain_name,
                        devices,
                        options,
                        &header,
                        &[],
                    )
                    .await?;
                let domain = DomainRef {
                    name: domain_name,
                    uuid: domain_uuid,
                };
                let claimed = self
                    .service
                    .call(move |engine| engine.claim_domain(&domain, &devices))
                    .await?;
                self.service.refresh(connection).await;
                Ok(claimed
                    .iter()
                    .map(|info| dbus_api::path::mdev_instance_path(&info.uuid))
                    .collect())
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
                let options = CallOptions::parse("ReleaseDomain", options, &[])?;
                let request =
                    AuthRequest::new(action::ASSIGN, &header, options.no_user_interaction()?)
                        .detail("verb", "release")
                        .detail("domain", domain_name.clone());
                self.service.authorizer.check(request).await?;
                let domain = DomainRef {
                    name: domain_name,
                    uuid: domain_uuid,
                };
                let report = self
                    .service
                    .call(move |engine| engine.release_domain(&domain))
                    .await?;
                for problem in &report.problems {
                    tracing::warn!(%problem, "release left a problem");
                }
                self.service.refresh(connection).await;
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
    ) -> Result<String, BusError> {
        self.service
            .metered("Probe", async {
                let options = CallOptions::parse("Probe", options, &[])?;
                let parsed: vfio_probe::Target =
                    target.parse().map_err(|e: vfio_probe::TargetError| {
                        BusError::InvalidArgs(format!("Probe: {e}"))
                    })?;
                // Opening a VFIO group or device is privileged and can disturb a device in use.
                let request = AuthRequest::new(
                    action::MANAGE_INSTANCES,
                    &header,
                    options.no_user_interaction()?,
                )
                .detail("verb", "probe")
                .detail("target", target.clone());
                self.service.authorizer.check(request).await?;
                let Some(root) = self.service.probe_root() else {
                    return Err(BusError::NotSupported(
                        "probe needs a real host: the service runs on the simulated host"
                            .to_string(),
                    ));
                };
                let probe_options = vfio_probe::ProbeOptions {
                    sysfs_root: root.to_path_buf(),
                    ..vfio_probe::ProbeOptions::default()
                };
                // The probe does ioctls and maps memory: keep it off the async workers.
                let report =
                    tokio::task::spawn_blocking(move || vfio_probe::probe(&parsed, &probe_options))
                        .await
                        .map_err(|e| {
                            BusError::Failed(format!(
                                "Probe of {target}: the probe task ended: {e}"
                            ))
                        })?;
                serde_json::to_string(&report).map_err(|e| {
                    BusError::Failed(format!("Probe of {target}: cannot encode the report: {e}"))
                })
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
                CallOptions::parse("VerifyDomain", options, &[])?;
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
                CallOptions::parse("ListInstances", options, &[])?;
                Ok(self.service.listing().await.instances.clone())
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
                CallOptions::parse("FitProfiles", options, &[])?;
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
                CallOptions::parse("GetVgpuTelemetry", options, &[])?;
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
                let options = CallOptions::parse("ListTypes", options, &[option::PARENT])?;
                let parent = options.string(option::PARENT)?;
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
                const METHOD: &str = "StartCreateInstances";
                let (requests, options) = self
                    .create_requests(
                        METHOD,
                        &profile,
                        options,
                        &header,
                        &[option::WAIT_FOR_PARENT],
                    )
                    .await?;
                let wait = wait_for_parent(METHOD, &options)?;
                let parent = options.string(option::PARENT)?;
                let mut objects = vec![dbus_api::path::profile_path(&profile)];
                let mut details = vec![("profile", profile.clone())];
                if let Some(parent) = parent {
                    objects.push(dbus_api::path::parent_path(&parent));
                    details.push(("parent", parent));
                }
                let spec = JobSpec {
                    operation: "create-instances",
                    objects,
                    started_by_uid: self.service.caller_uid(connection, &header).await,
                    cancel_action: Some(action::MANAGE_INSTANCES),
                    details,
                };
                self.service
                    .start_job(connection, spec, move |engine, ctx| {
                        let created = match wait {
                            Some(timeout) => engine.wait_for_parent_then(ctx, timeout, |ctx| {
                                engine.create_batch_with(ctx, requests.clone())
                            }),
                            None => engine.create_batch_with(ctx, requests),
                        }?;
                        Ok(instances_outcome("created", &created))
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
                const METHOD: &str = "StartPrepareDomain";
                let (devices, options) = self
                    .prepare_requests(
                        METHOD,
                        &domain_name,
                        devices,
                        options,
                        &header,
                        &[option::WAIT_FOR_PARENT],
                    )
                    .await?;
                let wait = wait_for_parent(METHOD, &options)?;
                let spec = JobSpec {
                    operation: "prepare-domain",
                    objects: Vec::new(),
                    started_by_uid: self.service.caller_uid(connection, &header).await,
                    cancel_action: Some(action::ASSIGN),
                    details: vec![("domain", domain_name.clone())],
                };
                let domain = DomainRef {
                    name: domain_name,
                    uuid: domain_uuid,
                };
                self.service
                    .start_job(connection, spec, move |engine, ctx| {
                        let claimed = match wait {
                            Some(timeout) => engine.wait_for_parent_then(ctx, timeout, |ctx| {
                                engine.claim_domain_with(ctx, &domain, &devices)
                            }),
                            None => engine.claim_domain_with(ctx, &domain, &devices),
                        }?;
                        Ok(instances_outcome(
                            &format!("domain {} holds", domain.name),
                            &claimed,
                        ))
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
                let options = CallOptions::parse("StartReleaseDomain", options, &[])?;
                let request =
                    AuthRequest::new(action::ASSIGN, &header, options.no_user_interaction()?)
                        .detail("verb", "release")
                        .detail("domain", domain_name.clone());
                self.service.authorizer.check(request).await?;
                let spec = JobSpec {
                    operation: "release-domain",
                    objects: Vec::new(),
                    started_by_uid: self.service.caller_uid(connection, &header).await,
                    cancel_action: None,
                    details: Vec::new(),
                };
                let domain = DomainRef {
                    name: domain_name,
                    uuid: domain_uuid,
                };
                self.service
                    .start_job(connection, spec, move |engine, _ctx| {
                        let report = engine.release_domain(&domain)?;
                        let mut message = format!(
                            "released domain {}: {} destroyed, {} unclaimed",
                            domain.name,
                            report.destroyed.len(),
                            report.unclaimed.len()
                        );
                        for problem in &report.problems {
                            tracing::warn!(%problem, "release left a problem");
                            message.push_str("; ");
                            message.push_str(problem);
                        }
                        Ok(JobOutcome::message(message))
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
                request.authorize(&self.service, &header).await?;
                let spec = JobSpec {
                    operation: "apply",
                    objects: Vec::new(),
                    started_by_uid: self.service.caller_uid(connection, &header).await,
                    cancel_action: Some(action::MANAGE_INSTANCES),
                    details: vec![("file", request.file_name.clone())],
                };
                self.service
                    .start_job(connection, spec, move |engine, ctx| {
                        request.run(engine, ctx)
                    })
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

impl ManagerIface {
    /// What `CreateInstances` (and `StartCreateInstances`, which also accepts `extra` options)
    /// would create, after checking the options and asking polkit. Returns the parsed options
    /// too, for the `extra` keys.
    async fn create_requests(
        &self,
        method: &'static str,
        profile: &str,
        options: HashMap<String, OwnedVariant>,
        header: &Header<'_>,
        extra: &[&'static str],
    ) -> Result<(Vec<CreateRequest>, CallOptions), BusError> {
        let mut allowed = vec![
            option::PARENT,
            option::UUID,
            option::COUNT,
            option::AUTOSTART,
            option::WEIGHT,
            option::PLACEMENT,
            option::NUMA_NODE,
            option::NUMA_STRICT,
            option::FORCE,
            option::TYPE,
            option::PERSISTENT,
        ];
        allowed.extend_from_slice(extra);
        let options = CallOptions::parse(method, options, &allowed)?;
        let parent = options.string(option::PARENT)?;
        let mdev_type = options.string(option::TYPE)?;
        if mdev_type.is_some() && (!profile.is_empty() || parent.is_none()) {
            return Err(BusError::InvalidArgs(format!(
                "{method}: option type needs option parent and an empty profile (got profile {profile:?})"
            )));
        }
        let placement = options.placement()?;
        let force = options.boolean(option::FORCE)?.unwrap_or(false);
        let uuid = options.string(option::UUID)?;
        let count = options.unsigned(option::COUNT)?.unwrap_or(1);
        let autostart = options.boolean(option::AUTOSTART)?.unwrap_or(false);
        let weight = options.unsigned(option::WEIGHT)?;
        let persistent = options.boolean(option::PERSISTENT)?.unwrap_or(autostart);
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
        if count > 1 && uuid.is_some() {
            return Err(BusError::InvalidArgs(format!(
                "{method}: option uuid names one instance but count is {count}"
            )));
        }
        let no_interaction = options.no_user_interaction()?;
        let mut request = AuthRequest::new(action::MANAGE_INSTANCES, header, no_interaction)
            .detail("verb", "create")
            .detail("profile", profile.to_owned());
        if let Some(parent) = &parent {
            request = request.detail("parent", parent.clone());
        }
        self.service.authorizer.check(request).await?;
        if persistent {
            let request = AuthRequest::new(action::MANAGE_PERSISTENT, header, no_interaction)
                .detail("verb", "create-autostart")
                .detail("profile", profile.to_owned());
            self.service.authorizer.check(request).await?;
        }
        if force {
            let request = AuthRequest::new(action::FORCE, header, no_interaction)
                .detail("verb", "create-force")
                .detail("profile", profile.to_owned());
            self.service.authorizer.check(request).await?;
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
                request.uuid = uuid.clone();
                request.autostart = autostart;
                request.persistent = persistent;
                request.scheduling.weight = weight;
                request.placement = placement;
                request.force = force;
                request
            })
            .collect();
        Ok((requests, options))
    }
}

impl ManagerIface {
    /// The devices of `PrepareDomain` (and `StartPrepareDomain`, which also accepts `extra`
    /// options), after checking the options and asking polkit.
    async fn prepare_requests(
        &self,
        method: &'static str,
        domain_name: &str,
        devices: Vec<HashMap<String, OwnedVariant>>,
        options: HashMap<String, OwnedVariant>,
        header: &Header<'_>,
        extra: &[&'static str],
    ) -> Result<(Vec<DeviceRequest>, CallOptions), BusError> {
        let options = CallOptions::parse(method, options, extra)?;
        let devices = parse_devices(method, devices)?;
        let no_interaction = options.no_user_interaction()?;
        let request = AuthRequest::new(action::ASSIGN, header, no_interaction)
            .detail("verb", "prepare")
            .detail("domain", domain_name.to_owned());
        self.service.authorizer.check(request).await?;
        if devices.iter().any(|device| device.force) {
            let request = AuthRequest::new(action::FORCE, header, no_interaction)
                .detail("verb", "prepare-force")
                .detail("domain", domain_name.to_owned());
            self.service.authorizer.check(request).await?;
        }
        Ok((devices, options))
    }
}

/// Longest `wait-for-parent` accepted, in seconds.
const MAX_WAIT_FOR_PARENT: u32 = 3600;

/// The `wait-for-parent u` option (seconds, 1..=3600) as a duration.
fn wait_for_parent(
    method: &str,
    options: &CallOptions,
) -> Result<Option<std::time::Duration>, BusError> {
    match options.unsigned(option::WAIT_FOR_PARENT)? {
        None => Ok(None),
        Some(seconds @ 1..=MAX_WAIT_FOR_PARENT) => {
            Ok(Some(std::time::Duration::from_secs(seconds.into())))
        }
        Some(seconds) => Err(BusError::InvalidArgs(format!(
            "{method}: option {} is {seconds} seconds; expected 1..={MAX_WAIT_FOR_PARENT}",
            option::WAIT_FOR_PARENT
        ))),
    }
}

/// A job's outcome listing instances: `<verb> <uuid>, <uuid>` and their paths.
fn instances_outcome(verb: &str, instances: &[mdev_engine::InstanceInfo]) -> JobOutcome {
    let uuids: Vec<&str> = instances.iter().map(|info| info.uuid.as_str()).collect();
    JobOutcome {
        message: format!("{verb} {}", uuids.join(", ")),
        objects: uuids
            .iter()
            .map(|uuid| dbus_api::path::mdev_instance_path(uuid))
            .collect(),
    }
}

fn parse_devices(
    method: &'static str,
    devices: Vec<HashMap<String, OwnedVariant>>,
) -> Result<Vec<DeviceRequest>, BusError> {
    const KEYS: [&str; 10] = [
        device_key::KIND,
        device_key::UUID,
        device_key::PROFILE,
        device_key::PARENT,
        device_key::WEIGHT,
        device_key::PCI_ADDRESS,
        device_key::FORCE,
        device_key::PLACEMENT,
        device_key::NUMA_NODE,
        device_key::NUMA_STRICT,
    ];
    devices
        .into_iter()
        .enumerate()
        .map(|(index, dict)| {
            let context = if method == "PrepareDomain" {
                "PrepareDomain device"
            } else {
                "VerifyDomain device"
            };
            let fields = CallOptions::parse(context, dict, &KEYS)
                .map_err(|e| BusError::InvalidArgs(format!("device #{index}: {}", e.message())))?;
            let kind = fields.string(device_key::KIND)?.ok_or_else(|| {
                BusError::InvalidArgs(format!("{method}: device #{index} has no kind"))
            })?;
            let force = fields.boolean(device_key::FORCE)?.unwrap_or(false);
            if force && kind != dbus_api::names::instance_kind::PASSTHROUGH {
                return Err(BusError::InvalidArgs(format!(
                    "{method}: device #{index} (kind {kind}) has force, which only a passthrough device takes"
                )));
            }
            Ok(DeviceRequest {
                kind,
                uuid: fields.string(device_key::UUID)?,
                profile: fields.string(device_key::PROFILE)?,
                parent: fields.string(device_key::PARENT)?,
                weight: fields.unsigned(device_key::WEIGHT)?,
                pci_address: fields.string(device_key::PCI_ADDRESS)?,
                force,
                placement: fields
                    .placement()
                    .map_err(|e| BusError::InvalidArgs(format!("device #{index}: {}", e.message())))?,
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
                let options = CallOptions::parse("SetNumVfs", options, &[option::FORCE])?;
                let force = options.boolean(option::FORCE)?.unwrap_or(false);
                if count > self.data().total_vfs {
                    return Err(BusError::InvalidArgs(format!(
                        "SetNumVfs: {count} VFs requested but PF {} supports at most {}",
                        self.data().pf,
                        self.data().total_vfs
                    )));
                }
                let request = AuthRequest::new(
                    action::CONFIGURE_SRIOV,
                    &header,
                    options.no_user_interaction()?,
                )
                .detail("verb", "set-num-vfs")
                .detail("parent", self.data().pf.clone())
                .detail("count", count.to_string());
                self.service.authorizer.check(request).await?;
                let uid = self.service.caller_uid(connection, &header).await;
                let pf = self.data().pf.clone();
                let objects = vec![dbus_api::path::parent_path(&pf)];
                let spec = JobSpec {
                    operation: "sriov-set-numvfs",
                    objects,
                    started_by_uid: uid,
                    // One sysfs write: nothing to stop between steps.
                    cancel_action: None,
                    details: Vec::new(),
                };
                self.service
                    .start_job(connection, spec, move |engine, _ctx| {
                        let vfs = engine.set_num_vfs(&pf, count, DestroyOptions { force })?;
                        Ok(JobOutcome::message(format!(
                            "PF {pf} now has {} VFs",
                            vfs.len()
                        )))
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
    fn request(
        &self,
        action: &'static str,
        verb: &str,
        header: &Header<'_>,
        no_ui: bool,
    ) -> AuthRequest {
        AuthRequest::new(action, header, no_ui)
            .detail("verb", verb)
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
                let options = CallOptions::parse("Destroy", options, &[option::FORCE])?;
                let force = options.boolean(option::FORCE)?.unwrap_or(false);
                let request = self.request(
                    action::MANAGE_INSTANCES,
                    "destroy",
                    &header,
                    options.no_user_interaction()?,
                );
                self.service.authorizer.check(request).await?;
                let uuid = self.data().uuid.clone();
                self.service
                    .call(move |engine| engine.destroy(&uuid, DestroyOptions { force }))
                    .await?;
                self.service.refresh(connection).await;
                Ok(())
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
                let options = CallOptions::parse("StartDestroy", options, &[option::FORCE])?;
                let force = options.boolean(option::FORCE)?.unwrap_or(false);
                let request = self.request(
                    action::MANAGE_INSTANCES,
                    "destroy",
                    &header,
                    options.no_user_interaction()?,
                );
                self.service.authorizer.check(request).await?;
                let uuid = self.data().uuid.clone();
                let spec = JobSpec {
                    operation: "destroy-instance",
                    objects: vec![dbus_api::path::mdev_instance_path(&uuid)],
                    started_by_uid: self.service.caller_uid(connection, &header).await,
                    cancel_action: None,
                    details: Vec::new(),
                };
                self.service
                    .start_job(connection, spec, move |engine, _ctx| {
                        engine.destroy(&uuid, DestroyOptions { force })?;
                        Ok(JobOutcome::message(format!("destroyed {uuid}")))
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
                let options = CallOptions::parse("Start", options, &[])?;
                let request = self.request(
                    action::MANAGE_INSTANCES,
                    "start",
                    &header,
                    options.no_user_interaction()?,
                );
                self.service.authorizer.check(request).await?;
                let uuid = self.data().uuid.clone();
                self.service.call(move |engine| engine.start(&uuid)).await?;
                self.service.refresh(connection).await;
                Ok(())
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
        self.service.metered("Stop", async {
            let options = CallOptions::parse("Stop", options, &[option::FORCE])?;
            let force = options.boolean(option::FORCE)?.unwrap_or(false);
            let request = self.request(
                action::MANAGE_INSTANCES,
                "stop",
                &header,
                options.no_user_interaction()?,
            );
            self.service.authorizer.check(request).await?;
            let uuid = self.data().uuid.clone();
            // Asked of the engine, not of this object's cached properties, which may lag a
            // SetAutostart/SetPersistent that has just returned.
            let lookup = uuid.clone();
            let current = self
                .service
                .call(move |engine| engine.instance(&lookup))
                .await?;
            if !current.persistent {
                return Err(BusError::NotSupported(format!(
                    "instance {uuid} is transient: Stop keeps a definition it does not have; destroy it instead"
                )));
            }
            self.service
                .call(move |engine| engine.stop(&uuid, DestroyOptions { force }))
                .await?;
            self.service.refresh(connection).await;
            Ok(())
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
                let options =
                    CallOptions::parse("SetAutostart", options, &[option::PERSISTENT])?;
                let persistent_option = options.boolean(option::PERSISTENT)?;
                if autostart && persistent_option == Some(false) {
                    return Err(BusError::InvalidArgs(format!(
                        "SetAutostart: instance {}: autostart needs a definition (option persistent false)",
                        self.data().uuid
                    )));
                }
                let request = self.request(
                    action::MANAGE_PERSISTENT,
                    "set-autostart",
                    &header,
                    options.no_user_interaction()?,
                );
                self.service.authorizer.check(request).await?;
                let uuid = self.data().uuid.clone();
        let persistent = persistent_option.unwrap_or(autostart || self.data().persistent);
                self.service
                    .call(move |engine| engine.set_persistence(&uuid, persistent, autostart))
                    .await?;
                self.service.refresh(connection).await;
                Ok(())
            })
            .await
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
                let options = CallOptions::parse("Cancel", options, &[])?;
                let no_interaction = options.no_user_interaction()?;
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
