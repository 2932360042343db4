//! Long operations as Jobs, over a real bus with the service as a separate process on the
//! simulated host: a VF bind and a whole-GPU pass-through bind complete as jobs (and their
//! release returns the devices), a claim waiting for its VF completes once SR-IOV enables it,
//! a wait that runs out is `TimedOut` naming the parent, and `vgpuctl` waits for jobs, prints
//! them with `--no-wait`, lists them and refuses bad job names.

use std::collections::HashMap;

use dbus_api::names::{interface, option, BUS_NAME};
use dbus_api::proxy::{InstanceProxy, ManagerProxy, SriovProxy};
use dbus_api::{path, ErrorKind};
use e2e_tests::bus::{
    bus_with_service, claim_device, managed_objects, repo_root, service_signals, start_service_on,
    vgpuctl, vgpuctl_json, TestBus,
};
use futures_util::StreamExt;
use zbus::{Connection, MessageStream, OwnedObjectPath, OwnedVariant, Variant};

const DOMAIN_UUID: &str = "6f1c3a2e-0b9d-4e57-9a11-2c3d4e5f6a7b";

/// What the service announced about one job, in order.
#[derive(Debug, Default)]
struct JobSignals {
    /// `Manager.JobNew` operation.
    operation: Option<String>,
    /// `Job.Completed`.
    completed: Option<(bool, String)>,
    /// `Job.ResultObjects` from the final `PropertiesChanged`.
    result_objects: Vec<String>,
    /// `Job.ErrorName` from it.
    error_name: Option<String>,
    /// `Manager.JobRemoved` (result, message).
    removed: (String, String),
}

async fn wait_job(signals: &mut MessageStream, job: &OwnedObjectPath) -> JobSignals {
    let mut seen = JobSignals::default();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let message = tokio::time::timeout_at(deadline, signals.next())
            .await
            .expect("the job ends")
            .expect("signal stream open")
            .expect("signal");
        let header = message.header();
        let member = header.member().map(|m| m.to_string()).unwrap_or_default();
        let on_job = header.path().map(|p| p.as_str()) == Some(job.as_str());
        match member.as_str() {
            "JobNew" => {
                let (path, operation): (OwnedObjectPath, String) =
                    message.body().deserialize().unwrap();
                if &path == job {
                    seen.operation = Some(operation);
                }
            }
            "Completed" if on_job => {
                seen.completed = Some(message.body().deserialize().unwrap());
            }
            "PropertiesChanged" if on_job => {
                let (_, changed, _): (String, HashMap<String, OwnedVariant>, Vec<String>) =
                    message.body().deserialize().unwrap();
                if let Some(objects) = changed.get("ResultObjects") {
                    let objects: Vec<OwnedObjectPath> =
                        objects.try_clone().unwrap().try_into().unwrap();
                    seen.result_objects = objects.iter().map(|o| o.to_string()).collect();
                }
                if let Some(name) = changed.get("ErrorName") {
                    seen.error_name = Some(name.try_clone().unwrap().try_into().unwrap());
                }
            }
            "JobRemoved" => {
                let (path, result, text): (OwnedObjectPath, String, String) =
                    message.body().deserialize().unwrap();
                if &path == job {
                    seen.removed = (result, text);
                    return seen;
                }
            }
            _ => {}
        }
    }
}

/// `(kind, pci_address, holder)` of every instance the service exports.
async fn instances(connection: &Connection) -> Vec<(String, String, String)> {
    let objects = managed_objects(connection).await;
    let mut found = Vec::new();
    for interfaces in objects.values() {
        let Some((_, props)) = interfaces
            .iter()
            .find(|(name, _)| name.as_str() == interface::INSTANCE)
        else {
            continue;
        };
        let text = |key: &str| -> String {
            props
                .get(key)
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| String::try_from(v).ok())
                .unwrap_or_default()
        };
        found.push((text("Kind"), text("PciAddress"), text("Holder")));
    }
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn vf_bind_and_release_run_as_jobs() {
    let (bus, _service) = bus_with_service();
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.unwrap();
    let mut signals = service_signals(&connection).await;

    // The S7150's GIM driver enabled 4 VFs at load; claim the first one for a VM.
    let job = manager
        .start_prepare_domain(
            "vm-jobs",
            DOMAIN_UUID,
            vec![claim_device("vf", "0000:0c:02.0")],
            HashMap::new(),
        )
        .await
        .expect("StartPrepareDomain");
    assert!(job.as_str().starts_with("/org/mdevmanager/VGpu1/jobs/"));
    let seen = wait_job(&mut signals, &job).await;
    assert_eq!(seen.operation.as_deref(), Some("prepare-domain"));
    assert_eq!(seen.removed.0, "done", "{seen:?}");
    // Unchanged (empty) on success, so not in the final PropertiesChanged.
    assert_eq!(seen.error_name, None);
    let (success, message) = seen.completed.clone().expect("Completed signal");
    assert!(success, "{message}");
    assert!(message.starts_with("domain vm-jobs holds "), "{message}");
    assert_eq!(seen.result_objects.len(), 1, "{seen:?}");
    let held = instances(&connection).await;
    assert_eq!(
        held,
        vec![("vf".into(), "0000:0c:02.0".into(), "vm-jobs".into())]
    );
    // The published instance is the one the job reports.
    assert!(seen.result_objects[0].starts_with("/org/mdevmanager/VGpu1/instances/_"));

    // Release as a job: the VF goes back and the instance away.
    let job = manager
        .start_release_domain("vm-jobs", DOMAIN_UUID, HashMap::new())
        .await
        .expect("StartReleaseDomain");
    let seen = wait_job(&mut signals, &job).await;
    assert_eq!(seen.operation.as_deref(), Some("release-domain"));
    assert_eq!(seen.removed.0, "done", "{seen:?}");
    assert!(seen.removed.1.contains("1 destroyed"), "{}", seen.removed.1);
    assert!(instances(&connection).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn passthrough_bind_runs_as_a_job_and_failures_carry_their_kind() {
    let bus = TestBus::start().expect("dbus-daemon");
    let topology = repo_root().join("mdev-sim/topologies/passthrough.toml");
    let topology = topology.to_str().expect("utf-8 path");
    let _service = start_service_on(&bus, topology, &[]).expect("mdev-manager");
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.unwrap();
    let mut signals = service_signals(&connection).await;

    let job = manager
        .start_prepare_domain(
            "vm-gpu",
            DOMAIN_UUID,
            vec![claim_device("passthrough", "0000:41:00.0")],
            HashMap::new(),
        )
        .await
        .expect("StartPrepareDomain");
    let seen = wait_job(&mut signals, &job).await;
    assert_eq!(seen.removed.0, "done", "{seen:?}");
    assert_eq!(seen.completed.as_ref().map(|c| c.0), Some(true));
    assert_eq!(
        instances(&connection).await,
        vec![("passthrough".into(), "0000:41:00.0".into(), "vm-gpu".into())]
    );
    assert_eq!(seen.result_objects.len(), 1, "{seen:?}");
    let gpu_instance = seen.result_objects[0].clone();

    // The T400 shares its group with the host's NIC: the job fails with the synchronous
    // path's error kind (InUse), naming the member, and binds nothing.
    let job = manager
        .start_prepare_domain(
            "vm-other",
            "6f1c3a2e-0b9d-4e57-9a11-2c3d4e5f6a7c",
            vec![claim_device("passthrough", "0000:61:00.0")],
            HashMap::new(),
        )
        .await
        .expect("StartPrepareDomain");
    let seen = wait_job(&mut signals, &job).await;
    assert_eq!(seen.removed.0, "failed", "{seen:?}");
    let (success, message) = seen.completed.clone().expect("Completed");
    assert!(!success);
    assert!(message.starts_with("InUse: "), "{message}");
    assert_eq!(
        seen.error_name.as_deref(),
        Some("org.mdevmanager.VGpu1.Error.InUse")
    );
    assert!(message.contains("0000:62:00.0"), "{message}");
    assert_eq!(seen.removed.1, message);
    assert_eq!(instances(&connection).await.len(), 1);

    // Giving the group back as a job: a claimed instance needs force, as for Destroy.
    let instance = InstanceProxy::builder(&connection)
        .path(gpu_instance.as_str())
        .build()
        .await
        .unwrap();
    let job = instance
        .start_destroy(HashMap::new())
        .await
        .expect("StartDestroy");
    let seen = wait_job(&mut signals, &job).await;
    assert_eq!(seen.operation.as_deref(), Some("destroy-instance"));
    assert_eq!(seen.removed.0, "failed", "{seen:?}");
    assert!(seen.removed.1.starts_with("InUse: "), "{}", seen.removed.1);
    let job = instance
        .start_destroy(HashMap::from([(option::FORCE, Variant::from(true))]))
        .await
        .expect("StartDestroy");
    let seen = wait_job(&mut signals, &job).await;
    assert_eq!(seen.removed.0, "done", "{seen:?}");
    assert!(instances(&connection).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_waiting_for_its_vf_completes_once_sriov_enables_it_or_times_out() {
    let (bus, _service) = bus_with_service();
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.unwrap();
    let mut signals = service_signals(&connection).await;

    // The H200's VFs are not enabled yet: the first one (offset 4) does not exist.
    let options = HashMap::from([(option::WAIT_FOR_PARENT, Variant::from(60u32))]);
    let waiting = manager
        .start_prepare_domain(
            "vm-wait",
            DOMAIN_UUID,
            vec![claim_device("vf", "0000:4b:00.4")],
            options,
        )
        .await
        .expect("StartPrepareDomain");
    let sriov = SriovProxy::builder(&connection)
        .path(path::parent_path("0000:4b:00.0"))
        .build()
        .await
        .unwrap();
    let enable = sriov
        .set_num_vfs(32, HashMap::new())
        .await
        .expect("SetNumVfs");
    // Both jobs end; the claim's only after the VF appeared.
    let mut results = HashMap::new();
    while results.len() < 2 {
        let message = signals.next().await.unwrap().unwrap();
        if message.header().member().map(|m| m.as_str()) != Some("JobRemoved") {
            continue;
        }
        let (path, result, text): (OwnedObjectPath, String, String) =
            message.body().deserialize().unwrap();
        results.insert(path, (result, text));
    }
    assert_eq!(results[&enable].0, "done", "{results:?}");
    assert_eq!(results[&waiting].0, "done", "{results:?}");
    assert_eq!(
        instances(&connection).await,
        vec![("vf".into(), "0000:4b:00.4".into(), "vm-wait".into())]
    );

    // A VF that never comes: TimedOut naming it, nothing claimed.
    let options = HashMap::from([(option::WAIT_FOR_PARENT, Variant::from(1u32))]);
    let job = manager
        .start_prepare_domain(
            "vm-never",
            "6f1c3a2e-0b9d-4e57-9a11-2c3d4e5f6a7d",
            vec![claim_device("vf", "0000:4b:05.0")],
            options,
        )
        .await
        .expect("StartPrepareDomain");
    let seen = wait_job(&mut signals, &job).await;
    assert_eq!(seen.removed.0, "failed", "{seen:?}");
    assert!(
        seen.removed
            .1
            .starts_with("TimedOut: parent 0000:4b:05.0 did not appear within 1s"),
        "{}",
        seen.removed.1
    );
    assert_eq!(instances(&connection).await.len(), 1);

    // Out of range: refused before any job starts.
    let options = HashMap::from([(option::WAIT_FOR_PARENT, Variant::from(0u32))]);
    let error = manager
        .start_create_instances("nvidia-t4-2q", options)
        .await
        .expect_err("wait-for-parent 0");
    let error = dbus_api::ClientError::from(error);
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs), "{error}");
    assert!(error.to_string().contains("wait-for-parent"), "{error}");
}

#[test]
fn vgpuctl_waits_for_create_jobs_prints_them_with_no_wait_and_lists_jobs() {
    let (bus, _service) = bus_with_service();

    // Waits for the job and prints the instances like a plain create.
    let created = vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &[
            "--json",
            "create",
            "nvidia-t4-2q",
            "--count",
            "2",
            "--wait-for-parent",
            "5",
        ],
    ));
    let created = created.as_array().expect("array of instances");
    assert_eq!(created.len(), 2, "{created:?}");
    assert!(created.iter().all(|i| i["profile"] == "nvidia-t4-2q"));

    // A failed job exits with its kind's status and message.
    let output = vgpuctl(
        &bus,
        None,
        &["create", "no-such-profile", "--wait-for-parent", "5"],
    );
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NotFound.exit_code() as i32)
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("no-such-profile"));

    // --no-wait prints the job's path at once.
    let started = vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "nvidia-t4-2q", "--no-wait"],
    ));
    assert!(started["job"]
        .as_str()
        .is_some_and(|job| job.starts_with("/org/mdevmanager/VGpu1/jobs/")));

    // `jobs` lists what runs (an array, possibly empty by now).
    let jobs = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "jobs"]));
    assert!(jobs.is_array(), "{jobs}");

    // Cancelling a job that has ended, or one named wrongly.
    let output = vgpuctl(&bus, None, &["job", "cancel", "999"]);
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NotFound.exit_code() as i32),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = vgpuctl(&bus, None, &["job", "cancel", "/org/elsewhere/1"]);
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::InvalidArgs.exit_code() as i32)
    );
}

#[test]
fn sigterm_cancels_a_job_waiting_for_a_parent_instead_of_waiting_it_out() {
    let (bus, service) = bus_with_service();
    let started = vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &[
            "--json",
            "create",
            "nvidia-t4-2q",
            "--parent",
            "0000:99:00.0",
            "--wait-for-parent",
            "3600",
            "--no-wait",
        ],
    ));
    assert!(started["job"].is_string(), "{started}");
    let jobs = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "jobs"]));
    assert_eq!(jobs.as_array().map(Vec::len), Some(1), "{jobs}");
    assert_eq!(jobs[0]["job"], started["job"]);
    assert_eq!(jobs[0]["operation"], "create-instances");
    assert_eq!(jobs[0]["cancelable"], true);
    assert_eq!(jobs[0]["started_by_uid"], 0);

    // The running Job object matches the published introspection.
    let job = started["job"].as_str().unwrap().to_owned();
    let xml = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let connection = bus.connect().await;
            zbus::fdo::IntrospectableProxy::builder(&connection)
                .destination(BUS_NAME)
                .path(job.as_str())
                .build()
                .await
                .unwrap()
                .introspect()
                .await
                .expect("Introspect the job")
        });
    let published = dbus_api::interface_blocks(dbus_api::INTROSPECTION_XML);
    let running = dbus_api::interface_blocks(&xml);
    assert_eq!(running.get(interface::JOB), published.get(interface::JOB));
    assert!(running.contains_key(interface::JOB), "{xml}");

    // Bounded only so a regression fails instead of hanging the suite for an hour.
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(service.terminate());
    });
    let exit = receiver
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the service exits without waiting out the job")
        .expect("stop the service");
    assert!(exit.status.success(), "{}", exit.status);
}
