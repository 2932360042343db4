//! `Job.Cancel` over a real bus: the service runs in this process (on the private system-like
//! bus, with the production polkit authorizer) so the test can hold a sysfs write of the
//! simulated host mid-bind. A cancelled pass-through bind gives the group back to its drivers
//! and creates nothing; a cancelled wait for a parent claims nothing; a user who did not start
//! the job (and has no polkit grant) is refused with NotAuthorized and the job keeps running.
//!
//! Needs root (it creates a user); polkitd is not started, so only root passes polkit checks.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use dbus_api::names::option;
use dbus_api::proxy::{JobProxy, ManagerProxy};
use dbus_api::ErrorKind;
use e2e_tests::bus::{
    claim_device, repo_root, service_signals, vgpuctl, vgpuctl_json, wait_for, TestUser,
};
use e2e_tests::in_process::InProcessService;
use futures_util::StreamExt;
use mdev_engine::EngineConfig;
use mdev_sim::{Fault, SimHost};
use zbus::{MessageStream, OwnedObjectPath, Variant};

const GPU: &str = "0000:41:00.0";
const AUDIO: &str = "0000:41:00.1";
const DOMAIN_UUID: &str = "6f1c3a2e-0b9d-4e57-9a11-2c3d4e5f6a7b";

/// The service in this process on the pass-through or default topology.
async fn start(topology: &Path) -> InProcessService {
    let config = EngineConfig {
        poll_interval: Duration::from_millis(20),
        ..EngineConfig::default()
    };
    InProcessService::start(topology, config).await
}

fn driver(sim: &SimHost, address: &str) -> Option<String> {
    use mdev_host::HostFs;
    let link = Path::new("/sys/bus/pci/devices")
        .join(address)
        .join("driver");
    sim.read_link(&link)
        .ok()
        .and_then(|target| target.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// `Manager.JobRemoved` for `job`: (result, message).
async fn removed(signals: &mut MessageStream, job: &OwnedObjectPath) -> (String, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let message = tokio::time::timeout_at(deadline, signals.next())
            .await
            .expect("the job ends")
            .expect("stream open")
            .expect("signal");
        if message.header().member().map(|m| m.as_str()) != Some("JobRemoved") {
            continue;
        }
        let (path, result, text): (OwnedObjectPath, String, String) =
            message.body().deserialize().unwrap();
        if &path == job {
            return (result, text);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_passthrough_bind_rolls_back_and_only_its_starter_may_cancel() {
    let host = start(&repo_root().join("mdev-sim/topologies/passthrough.toml")).await;
    let manager = ManagerProxy::new(&host.client).await.unwrap();
    let mut signals = service_signals(&host.client).await;
    // The audio function is bound first; its probe write blocks until the fault is released.
    let fault = host
        .sim
        .inject_fault(Fault::block("/sys/bus/pci/drivers_probe").times(1));

    let job = manager
        .start_prepare_domain(
            "vm-cancel",
            DOMAIN_UUID,
            vec![claim_device("passthrough", GPU)],
            HashMap::new(),
        )
        .await
        .expect("StartPrepareDomain");
    let sim = host.sim.clone();
    tokio::task::spawn_blocking(move || {
        wait_for(Duration::from_secs(30), || !sim.blocked_writes().is_empty())
    })
    .await
    .unwrap()
    .expect("the bind reaches the blocked write");

    let proxy = JobProxy::builder(&host.client)
        .path(job.clone())
        .build()
        .await
        .unwrap();
    assert!(proxy.cancelable().await.unwrap());
    assert_eq!(proxy.operation().await.unwrap(), "prepare-domain");
    assert_eq!(proxy.started_by_uid().await.unwrap(), 0);

    // Someone else, without a polkit grant (no polkitd: only root passes), is refused.
    let suffix = std::process::id() % 100_000;
    let outsider = TestUser::create(&format!("mdevjob{suffix}"), None).expect("useradd");
    let id = job.as_str().rsplit('/').next().unwrap().to_owned();
    let bus = &host.bus;
    // The harness's vgpuctl blocks: run it where blocking is allowed.
    let output = tokio::task::block_in_place(|| {
        vgpuctl(
            bus,
            Some(&outsider.name),
            &["--no-ask", "job", "cancel", &id],
        )
    });
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NotAuthorized.exit_code() as i32),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !proxy.finished().await.unwrap(),
        "refused cancel left the job running"
    );

    // The starter (root) cancels; the blocked write is let go; the next member's bind is not
    // taken and the audio function returns to its driver.
    proxy.cancel(HashMap::new()).await.expect("Cancel");
    host.sim.release_fault(fault);
    let (result, message) = removed(&mut signals, &job).await;
    assert_eq!(result, "cancelled", "{message}");
    assert!(message.starts_with("Cancelled: "), "{message}");
    assert!(
        message.contains(&format!("cancelled before binding {GPU}")),
        "{message}"
    );
    assert_eq!(driver(&host.sim, AUDIO).as_deref(), Some("snd_hda_intel"));
    assert_eq!(driver(&host.sim, GPU).as_deref(), Some("amdgpu"));
    let list = vgpuctl_json(&vgpuctl(bus, None, &["--json", "list"]));
    assert_eq!(list, serde_json::json!([]), "nothing created");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_wait_for_a_parent_claims_nothing_and_release_jobs_are_not_cancelable() {
    let host = start(&repo_root().join("mdev-sim/topologies/default.toml")).await;
    let manager = ManagerProxy::new(&host.client).await.unwrap();
    let mut signals = service_signals(&host.client).await;

    let options = HashMap::from([(option::WAIT_FOR_PARENT, Variant::from(600u32))]);
    let job = manager
        .start_prepare_domain(
            "vm-wait",
            DOMAIN_UUID,
            vec![claim_device("vf", "0000:4b:00.4")],
            options,
        )
        .await
        .expect("StartPrepareDomain");
    // Through vgpuctl, by number.
    let id = job.as_str().rsplit('/').next().unwrap().to_owned();
    let bus = &host.bus;
    let output = vgpuctl(bus, None, &["--json", "job", "cancel", &id]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (result, message) = removed(&mut signals, &job).await;
    assert_eq!(result, "cancelled", "{message}");
    assert!(
        message.contains("cancelled before parent 0000:4b:00.4 appeared")
            || message.contains("cancelled before claiming vf PCI 0000:4b:00.4")
            || message.contains("cancelled before starting"),
        "{message}"
    );
    let list = vgpuctl_json(&vgpuctl(bus, None, &["--json", "list"]));
    assert_eq!(list, serde_json::json!([]), "nothing claimed");

    // A release runs to its end: its job says so, and Cancel is NotSupported.
    let job = manager
        .start_release_domain("vm-wait", DOMAIN_UUID, HashMap::new())
        .await
        .expect("StartReleaseDomain");
    let proxy = JobProxy::builder(&host.client)
        .path(job.clone())
        .build()
        .await
        .unwrap();
    match proxy.cancel(HashMap::new()).await {
        Ok(()) => panic!("a release job cannot be cancelled"),
        Err(error) => {
            let error = dbus_api::ClientError::from(error);
            // NotSupported, or gone already (UnknownObject) if the release was quicker.
            assert!(
                error.kind() == Some(ErrorKind::NotSupported)
                    || error.to_string().contains("UnknownObject"),
                "{error}"
            );
        }
    }
    let (result, _) = removed(&mut signals, &job).await;
    assert_eq!(result, "done");
}
