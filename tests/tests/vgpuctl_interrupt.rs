//! Ctrl-C (or SIGTERM) while `vgpuctl` waits for a Job it started, over a real bus: the Job is
//! cancelled (exit 12, nothing created, not even when the awaited parent appears afterwards);
//! a Job that cannot be cancelled (an SR-IOV change) is said to be so and keeps running, and a
//! second Ctrl-C stops the waiting at once. Also `vgpuctl destroy --no-wait`, which starts destroy
//! Jobs and prints their paths.
//!
//! The create and destroy tests run the service as its own process on the simulated host; the
//! SR-IOV test runs it in this process so that it can hold the `sriov_numvfs` write mid-way.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dbus_api::names::{interface, BUS_NAME, ROOT_PATH};
use dbus_api::ErrorKind;
use e2e_tests::bus::{
    repo_root, service_signals, start_service, start_service_on, vgpuctl, vgpuctl_json, wait_for,
    workspace_binary, TestBus,
};
use e2e_tests::in_process::InProcessService;
use futures_util::StreamExt;
use mdev_engine::EngineConfig;
use mdev_sim::Fault;
use zbus::{Connection, MessageStream, OwnedObjectPath};

/// The NVIDIA A2 of the `ampere` topology: its VFs register as mdev parents once SR-IOV is
/// enabled on the PF, so the first one (offset 4) is a parent that appears later.
const A2: &str = "0000:08:00.0";
const A2_VF: &str = "0000:08:00.4";
/// A profile for the A2's VF types (the built-in catalog has none).
const A2_PROFILE: &str = "nvidia-a2-1q";
const A2_PROFILE_TOML: &str = r#"
[[profile]]
name = "nvidia-a2-1q"
description = "A2 virtual workstation, 1 GiB (A2-1Q)"
vendor = "nvidia"
framebuffer = "1GiB"
isolation = "time-sliced"
[profile.pin]
name_pattern = "A2-1Q"
"#;
/// The H200 of the default topology (its VF changes run as non-cancelable jobs).
const H200: &str = "0000:4b:00.0";

/// Bounds the waits below so that a regression fails instead of hanging the suite; they are
/// not timing assertions.
const BOUND: Duration = Duration::from_secs(120);

/// `vgpuctl ARGS` started against the test bus, its output captured.
fn spawn_vgpuctl(bus: &TestBus, args: &[&str]) -> Child {
    Command::new(workspace_binary("vgpuctl"))
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start vgpuctl")
}

fn send(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(rc, 0, "kill({}, {signal})", child.id());
}

/// Waits (bounded) for a child's exit and its output.
async fn finished(child: Child) -> Output {
    tokio::time::timeout(
        BOUND,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("vgpuctl exits")
    .expect("join")
    .expect("wait for vgpuctl")
}

/// The running jobs the service exports: (path, operation).
async fn running_jobs(connection: &Connection) -> Vec<(String, String)> {
    let objects = zbus::fdo::ObjectManagerProxy::builder(connection)
        .destination(BUS_NAME)
        .path(ROOT_PATH)
        .build()
        .await
        .unwrap()
        .get_managed_objects()
        .await
        .unwrap();
    objects
        .iter()
        .filter_map(|(path, interfaces)| {
            let (_, props) = interfaces
                .iter()
                .find(|(name, _)| name.as_str() == interface::JOB)?;
            let operation = props
                .get("Operation")
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| String::try_from(v).ok())
                .unwrap_or_default();
            Some((path.to_string(), operation))
        })
        .collect()
}

/// Polls the ObjectManager until a job of `operation` runs; returns its path.
async fn job_appears(connection: &Connection, operation: &str) -> OwnedObjectPath {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        if let Some((path, _)) = running_jobs(connection)
            .await
            .into_iter()
            .find(|(_, op)| op == operation)
        {
            return OwnedObjectPath::try_from(path).unwrap();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {operation} job appeared"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `Manager.JobRemoved` for `job`: (result, message).
async fn removed(signals: &mut MessageStream, job: &str) -> (String, String) {
    removed_all(signals, &[job]).await.remove(job).unwrap()
}

/// `Manager.JobRemoved` of each of `jobs`, in whatever order they end: path -> (result,
/// message).
async fn removed_all(
    signals: &mut MessageStream,
    jobs: &[&str],
) -> HashMap<String, (String, String)> {
    let deadline = tokio::time::Instant::now() + BOUND;
    let mut ended = HashMap::new();
    while ended.len() < jobs.len() {
        let message = tokio::time::timeout_at(deadline, signals.next())
            .await
            .unwrap_or_else(|_| panic!("the jobs end; ended so far: {ended:?}"))
            .expect("stream open")
            .expect("signal");
        if message.header().member().map(|m| m.as_str()) != Some("JobRemoved") {
            continue;
        }
        let (path, result, text): (OwnedObjectPath, String, String) =
            message.body().deserialize().unwrap();
        if jobs.contains(&path.as_str()) {
            ended.insert(path.to_string(), (result, text));
        }
    }
    ended
}

fn instances(bus: &TestBus) -> Vec<serde_json::Value> {
    vgpuctl_json(&vgpuctl(bus, None, &["--json", "list"]))
        .as_array()
        .cloned()
        .expect("list is an array")
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_cancels_the_create_job_vgpuctl_waits_for() {
    let bus = TestBus::start().expect("dbus-daemon");
    let profiles = bus.dir().join("profiles.d");
    std::fs::create_dir(&profiles).unwrap();
    std::fs::write(profiles.join("a2.toml"), A2_PROFILE_TOML).unwrap();
    let _service = start_service_on(
        &bus,
        &repo_root()
            .join("mdev-sim/topologies/ampere.toml")
            .to_string_lossy(),
        &["--profiles-dir", profiles.to_str().unwrap()],
    )
    .expect("mdev-manager");
    let connection = bus.connect().await;
    let mut signals = service_signals(&connection).await;
    assert!(instances(&bus).is_empty());

    // The VF does not exist until SR-IOV is enabled: the job waits for it.
    let child = spawn_vgpuctl(
        &bus,
        &[
            "create",
            A2_PROFILE,
            "--parent",
            A2_VF,
            "--wait-for-parent",
            "600",
        ],
    );
    let job = job_appears(&connection, "create-instances").await;
    send(&child, libc::SIGINT);
    let output = finished(child).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::Cancelled.exit_code() as i32),
        "{stderr}"
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(&format!(
            "job {} cancelled: nothing was created",
            job.as_str()
        )),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "no UUID printed");

    // The service ended the job as cancelled, and it is gone.
    let (result, message) = removed(&mut signals, job.as_str()).await;
    assert_eq!(result, "cancelled", "{message}");
    assert!(message.starts_with("Cancelled: "), "{message}");
    assert!(
        running_jobs(&connection).await.is_empty(),
        "the job is no longer exported"
    );
    assert!(instances(&bus).is_empty(), "nothing created");
    // Not read from here on: sriov-manage makes all 16 VFs, each an mdev parent with 15 types,
    // and the unread signals would fill the stream's queue and stall this connection's replies.
    drop(signals);

    // The parent appears now (hot-added by enabling SR-IOV): still nothing is created for the
    // abandoned request...
    let enabled = vgpuctl(&bus, None, &["sriov", A2, "--vfs", "16"]);
    assert!(
        enabled.status.success(),
        "{}",
        String::from_utf8_lossy(&enabled.stderr)
    );
    let parents = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "parents"]));
    assert!(
        parents
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == A2_VF),
        "{parents}"
    );
    assert!(running_jobs(&connection).await.is_empty());
    assert!(instances(&bus).is_empty(), "nothing created after hot-add");
    // ...although the same request would now succeed: the only instance is the one asked now.
    let created = vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &["--json", "create", A2_PROFILE, "--parent", A2_VF],
    ));
    let listed = instances(&bus);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["uuid"], created[0]["uuid"]);
    assert_eq!(listed[0]["parent"], A2_VF);
}

/// SIGTERM (a service manager or `timeout` stopping vgpuctl) cancels the job the same way.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_cancels_the_job_too() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = start_service(&bus, &[]).expect("mdev-manager");
    let connection = bus.connect().await;
    let mut signals = service_signals(&connection).await;

    // A parent that never appears; --json changes nothing about the cancel.
    let child = spawn_vgpuctl(
        &bus,
        &[
            "--json",
            "create",
            "nvidia-t4-2q",
            "--parent",
            "0000:99:00.0",
            "--wait-for-parent",
            "3600",
        ],
    );
    let job = job_appears(&connection, "create-instances").await;
    send(&child, libc::SIGTERM);
    let output = finished(child).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::Cancelled.exit_code() as i32),
        "{stderr}"
    );
    assert!(stderr.contains("SIGTERM: cancelling job"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "job {} cancelled: nothing was created",
            job.as_str()
        )),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "no JSON for a cancelled create");
    let (result, message) = removed(&mut signals, job.as_str()).await;
    assert_eq!(result, "cancelled", "{message}");
    assert!(instances(&bus).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn destroy_no_wait_prints_the_jobs_and_the_instances_go() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = start_service(&bus, &[]).expect("mdev-manager");
    let connection = bus.connect().await;
    let mut signals = service_signals(&connection).await;

    let created = vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "nvidia-t4-2q", "--count", "3"],
    ));
    let uuids: Vec<String> = created
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["uuid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(uuids.len(), 3);

    // An unknown UUID among them: refused before any job starts, nothing destroyed.
    let output = vgpuctl(
        &bus,
        None,
        &[
            "destroy",
            "--no-wait",
            &uuids[0],
            "00000000-0000-4000-8000-000000000000",
        ],
    );
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NotFound.exit_code() as i32)
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("00000000-0000-4000-8000-000000000000")
    );
    assert!(output.stdout.is_empty());
    assert_eq!(instances(&bus).len(), 3);

    // JSON: one job per instance, named with its UUID.
    let started = vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &["--json", "destroy", "--no-wait", &uuids[0], &uuids[1]],
    ));
    let jobs = started["jobs"].as_array().expect("jobs array");
    assert_eq!(jobs.len(), 2, "{started}");
    let mut paths = Vec::new();
    for (entry, uuid) in jobs.iter().zip(&uuids) {
        assert_eq!(entry["uuid"], uuid.as_str(), "{started}");
        let job = entry["job"].as_str().expect("job path");
        assert!(job.starts_with("/org/mdevmanager/VGpu1/jobs/"), "{job}");
        paths.push(job);
    }
    assert_ne!(paths[0], paths[1], "a job per instance");
    for (job, (result, message)) in removed_all(&mut signals, &paths).await {
        assert_eq!(result, "done", "{job}: {message}");
    }
    let left = instances(&bus);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["uuid"], uuids[2].as_str());

    // Human output: the job's path alone on a line, like `create --no-wait`.
    let output = vgpuctl(&bus, None, &["destroy", "--no-wait", &uuids[2]]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let job = stdout.trim();
    assert!(
        job.starts_with("/org/mdevmanager/VGpu1/jobs/") && !job.contains('\n'),
        "{stdout}"
    );
    let (result, message) = removed(&mut signals, job).await;
    assert_eq!(result, "done", "{message}");
    assert!(instances(&bus).is_empty());
}

/// vgpuctl's stderr, line by line, as it prints them.
fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("stderr piped");
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// Waits (bounded) for a stderr line containing `text`; returns every line read so far.
fn line_containing(lines: &mpsc::Receiver<String>, seen: &mut Vec<String>, text: &str) {
    while !seen.iter().any(|l| l.contains(text)) {
        match lines.recv_timeout(BOUND) {
            Ok(line) => seen.push(line),
            Err(e) => panic!("no stderr line with {text:?} ({e}); saw {seen:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_on_a_job_that_cannot_be_cancelled_says_so_and_a_second_stops_waiting() {
    let config = EngineConfig {
        poll_interval: Duration::from_millis(20),
        // The test holds the sriov_numvfs write for as long as it needs.
        write_timeout: Duration::from_secs(3600),
        ..EngineConfig::default()
    };
    let host = InProcessService::start(
        &repo_root().join("mdev-sim/topologies/default.toml"),
        config,
    )
    .await;
    let mut signals = service_signals(&host.client).await;
    // The VF change's one kernel write blocks until the test lets it go.
    let fault = host
        .sim
        .inject_fault(Fault::block("*/sriov_numvfs").times(1));

    let mut child = spawn_vgpuctl(&host.bus, &["sriov", H200, "--vfs", "32"]);
    let lines = stderr_lines(&mut child);
    let job = job_appears(&host.client, "sriov-set-numvfs").await;
    let sim = host.sim.clone();
    tokio::task::spawn_blocking(move || wait_for(BOUND, || !sim.blocked_writes().is_empty()))
        .await
        .unwrap()
        .expect("the job reaches the blocked write");

    // First Ctrl-C: the cancel is refused (not cancelable); vgpuctl says so and keeps waiting.
    send(&child, libc::SIGINT);
    let mut seen = Vec::new();
    let lines = tokio::task::spawn_blocking(move || {
        line_containing(&lines, &mut seen, "cannot be cancelled");
        (lines, seen)
    })
    .await
    .unwrap();
    assert!(
        matches!(child.try_wait(), Ok(None)),
        "vgpuctl still waits after the first Ctrl-C"
    );
    assert!(
        running_jobs(&host.client)
            .await
            .iter()
            .any(|(path, _)| path == job.as_str()),
        "the job still runs"
    );

    // Second Ctrl-C: vgpuctl stops waiting at once and says so; the job runs on.
    send(&child, libc::SIGINT);
    let status = tokio::task::spawn_blocking(move || {
        let status = child.wait();
        let (lines, mut seen) = lines;
        // The reader thread ends at EOF once vgpuctl has exited.
        seen.extend(lines.iter());
        (status, seen)
    });
    let (status, seen) = tokio::time::timeout(BOUND, status)
        .await
        .expect("vgpuctl exits")
        .unwrap();
    assert_eq!(status.unwrap().code(), Some(130), "{seen:?}");
    let last = seen.last().cloned().unwrap_or_default();
    assert!(
        last.contains(&format!("stopped waiting for job {}", job.as_str())),
        "{seen:?}"
    );
    assert!(
        running_jobs(&host.client)
            .await
            .iter()
            .any(|(path, _)| path == job.as_str()),
        "the job still runs after vgpuctl left"
    );

    // Let the write go: the job completes on its own.
    host.sim.release_fault(fault);
    let (result, message) = removed(&mut signals, job.as_str()).await;
    assert_eq!(result, "done", "{message}");
    let parents = vgpuctl_json(&vgpuctl(&host.bus, None, &["--json", "parents"]));
    let pf = parents
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == H200)
        .cloned()
        .expect("the H200");
    assert_eq!(pf["sriov"]["num_vfs"], 32, "{pf}");
}
