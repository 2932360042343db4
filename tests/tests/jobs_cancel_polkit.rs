//! Who may cancel a Job, with the real dbus-daemon, the real polkitd and the real daemon
//! (`docs/dbus-api.md`, Jobs): the uid that started the job may; anyone else needs the polkit
//! action of the job's operation (`manage-instances` for `create-instances`, `assign` for
//! `prepare-domain`), asked with detail `verb` = `cancel`.
//!
//! The polkit rule of this test grants `manage-instances` to one group only for `verb`
//! `cancel` and to another only for `verb` `create`, so a member of the first may cancel but
//! not create, and a member of the second may start a job but would be refused a cancel by
//! polkit: its own job's cancel passing (even after the rule is removed) shows the starter
//! rule, not polkit, let it through.
//!
//! Calls as another user go through `runuser`: `vgpuctl`, or this test binary itself running
//! [`cancel_as_caller`] (which prints the D-Bus error name and message of one `Job.Cancel`).
//! Needs root (it creates users and installs polkit files, removed again when it ends).

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use dbus_api::names::{action, option};
use dbus_api::proxy::{JobProxy, ManagerProxy, SriovProxy};
use dbus_api::{path, ErrorKind};
use e2e_tests::bus::{
    claim_device, install_polkit_actions, is_root, runnable_by_others, service_signals,
    start_polkitd, start_service, stderr_of, vgpuctl, vgpuctl_json, wait_for, InstalledFile,
    TestBus, TestUser,
};
use futures_util::StreamExt;
use zbus::{Connection, MessageStream, OwnedObjectPath, Variant};

const NOT_AUTHORIZED: &str = "org.mdevmanager.VGpu1.Error.NotAuthorized";
/// The H200's first VF: absent until its VFs are enabled.
const FIRST_VF: &str = "0000:4b:00.4";
/// A parent that never appears.
const ABSENT: &str = "0000:99:00.0";
/// The domain of the claim job.
const VM: &str = "vm-cancel-auth";
const VM_UUID: &str = "6f1c3a2e-0b9d-4e57-9a11-2c3d4e5f6a70";

/// Set (to the job's path) when this binary runs as [`cancel_as_caller`].
const HELPER_JOB: &str = "MDEV_E2E_CANCEL_JOB";
/// Comma-separated boolean options for the helper's `Cancel` (`name=true`).
const HELPER_OPTIONS: &str = "MDEV_E2E_CANCEL_OPTIONS";
/// The helper's output line starts with this.
const HELPER_MARK: &str = "cancel-outcome: ";

/// Not a test on its own: the tests below run this binary as another user with
/// [`HELPER_JOB`] set, and it calls `Job.Cancel` once (with the interactive-authorization
/// header flag, as every proxy sends it) and prints the outcome.
#[test]
#[ignore = "run as another user by the tests of this file"]
fn cancel_as_caller() {
    let Ok(job) = std::env::var(HELPER_JOB) else {
        eprintln!("{HELPER_JOB} is not set: nothing to do");
        return;
    };
    let options: HashMap<String, bool> = std::env::var(HELPER_OPTIONS)
        .unwrap_or_default()
        .split(',')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').expect("name=value");
            (name.to_string(), value == "true")
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let outcome = runtime.block_on(async {
        let connection = Connection::system().await.expect("connect to the bus");
        let proxy = JobProxy::builder(&connection)
            .path(job.as_str())
            .build()
            .await
            .expect("job proxy");
        let options: HashMap<&str, Variant<'_>> = options
            .iter()
            .map(|(name, value)| (name.as_str(), Variant::from(*value)))
            .collect();
        match proxy.cancel(options).await {
            Ok(()) => serde_json::json!({ "name": "ok", "message": "" }),
            Err(zbus::Error::MethodError(name, message, _)) => serde_json::json!({
                "name": name.as_str(),
                "message": message.unwrap_or_default(),
            }),
            Err(other) => serde_json::json!({ "name": "transport", "message": other.to_string() }),
        }
    });
    println!("{HELPER_MARK}{outcome}");
}

/// What a `Job.Cancel` by `user` answered: (D-Bus error name or `ok`, message).
fn cancel_as(bus: &TestBus, user: &str, job: &OwnedObjectPath, options: &str) -> (String, String) {
    let me = std::env::current_exe().expect("this test's path");
    let output = Command::new("runuser")
        .args(["-u", user, "--", "env"])
        .arg(format!("DBUS_SYSTEM_BUS_ADDRESS={}", bus.address()))
        .arg(format!("{HELPER_JOB}={}", job.as_str()))
        .arg(format!("{HELPER_OPTIONS}={options}"))
        .arg(runnable_by_others(bus, &me))
        .args(["--ignored", "--exact", "cancel_as_caller", "--nocapture"])
        .output()
        .expect("runuser");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix(HELPER_MARK))
        .unwrap_or_else(|| {
            panic!(
                "the helper as {user} printed no outcome ({}): {stdout}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let outcome: serde_json::Value = serde_json::from_str(line).expect("helper JSON");
    (
        outcome["name"].as_str().unwrap_or_default().to_string(),
        outcome["message"].as_str().unwrap_or_default().to_string(),
    )
}

/// A job's number, as `vgpuctl job cancel` takes it.
fn number(job: &OwnedObjectPath) -> &str {
    job.as_str().rsplit('/').next().unwrap_or_default()
}

/// How a job ended: `Completed` (success, message) if seen, and `JobRemoved` (result, message).
#[derive(Debug)]
struct Ending {
    completed: Option<(bool, String)>,
    removed: (String, String),
}

async fn ending(signals: &mut MessageStream, job: &OwnedObjectPath) -> Ending {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut completed = None;
    loop {
        let message = tokio::time::timeout_at(deadline, signals.next())
            .await
            .unwrap_or_else(|_| panic!("job {} did not end", job.as_str()))
            .expect("stream open")
            .expect("signal");
        let header = message.header();
        match header.member().map(|m| m.as_str()) {
            Some("Completed") if header.path().map(|p| p.as_str()) == Some(job.as_str()) => {
                completed = Some(message.body().deserialize().expect("Completed(bs)"));
            }
            Some("JobRemoved") => {
                let (path, result, text): (OwnedObjectPath, String, String) =
                    message.body().deserialize().expect("JobRemoved(oss)");
                if &path == job {
                    return Ending {
                        completed,
                        removed: (result, text),
                    };
                }
            }
            _ => {}
        }
    }
}

/// The instances as `vgpuctl --json list` (run as root) prints them.
fn list(bus: &TestBus) -> serde_json::Value {
    vgpuctl_json(&vgpuctl(bus, None, &["--json", "list"]))
}

async fn job_proxy<'a>(connection: &Connection, job: &'a OwnedObjectPath) -> JobProxy<'a> {
    JobProxy::builder(connection)
        .path(job.as_ref())
        .build()
        .await
        .expect("job proxy")
}

fn uid_of(user: &str) -> u32 {
    let output = Command::new("id").args(["-u", user]).output().expect("id");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("a uid")
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_starter_or_a_holder_of_the_operations_action_may_cancel_a_job() {
    assert!(
        is_root(),
        "this test needs root (it creates users and installs polkit files)"
    );
    let _actions = install_polkit_actions();
    let bus = TestBus::start().expect("dbus-daemon");
    let _polkitd = start_polkitd(&bus).expect("polkitd");
    let _service = start_service(&bus, &[]).expect("mdev-manager");
    let root = bus.connect().await;
    let manager = ManagerProxy::new(&root).await.unwrap();
    let mut signals = service_signals(&root).await;

    let suffix = std::process::id() % 100_000;
    let outsider = TestUser::create(&format!("mdevjco{suffix}"), None).expect("useradd");
    let cancel_group = format!("mdevgcc{suffix}");
    let canceller =
        TestUser::create(&format!("mdevjcc{suffix}"), Some(&cancel_group)).expect("useradd");
    let create_group = format!("mdevgcs{suffix}");
    let starter =
        TestUser::create(&format!("mdevjcs{suffix}"), Some(&create_group)).expect("useradd");
    let rule = format!(
        "polkit.addRule(function(action, subject) {{\n  \
         if (action.id != \"{manage}\") return polkit.Result.NOT_HANDLED;\n  \
         if (subject.isInGroup(\"{cancel_group}\") && action.lookup(\"verb\") == \"cancel\") return polkit.Result.YES;\n  \
         if (subject.isInGroup(\"{create_group}\") && action.lookup(\"verb\") == \"create\") return polkit.Result.YES;\n  \
         return polkit.Result.NOT_HANDLED;\n}});\n",
        manage = action::MANAGE_INSTANCES,
    );
    let rule = InstalledFile::install(
        format!("/etc/polkit-1/rules.d/49-mdev-job-cancel-{suffix}.rules"),
        rule.as_bytes(),
    )
    .expect("install the rule");

    // The starter's job: a create waiting for a parent that never comes. Retried until
    // polkitd has read the rule (it notices new rule files by itself).
    let start_args = [
        "--json",
        "create",
        "nvidia-t4-2q",
        "--parent",
        ABSENT,
        "--wait-for-parent",
        "600",
        "--no-wait",
    ];
    let mut started = None;
    wait_for(Duration::from_secs(30), || {
        let output = vgpuctl(&bus, Some(&starter.name), &start_args);
        if output.status.success() {
            started = Some(vgpuctl_json(&output));
            return true;
        }
        assert_eq!(
            output.status.code(),
            Some(ErrorKind::NotAuthorized.exit_code() as i32),
            "{}",
            stderr_of(&output)
        );
        false
    })
    .expect("polkitd picked up the rule: the starter may create");
    let theirs = OwnedObjectPath::try_from(
        started.unwrap()["job"]
            .as_str()
            .expect("a job path")
            .to_string(),
    )
    .unwrap();
    let their_job = job_proxy(&root, &theirs).await;
    assert_eq!(
        their_job.started_by_uid().await.unwrap(),
        uid_of(&starter.name)
    );
    assert_eq!(their_job.operation().await.unwrap(), "create-instances");

    // 1. Root's job: a create waiting for a parent that never comes.
    let before = list(&bus);
    let options = HashMap::from([
        (option::PARENT, Variant::from(ABSENT)),
        (option::WAIT_FOR_PARENT, Variant::from(600u32)),
    ]);
    let roots = manager
        .start_create_instances("nvidia-t4-2q", options)
        .await
        .expect("StartCreateInstances");
    let root_job = job_proxy(&root, &roots).await;
    assert_eq!(root_job.started_by_uid().await.unwrap(), 0);
    assert!(root_job.cancelable().await.unwrap());

    // The outsider is refused, with or without interaction allowed: NotAuthorized naming the
    // job and the action.
    for options in ["", "auth.no_user_interaction=true"] {
        let (name, message) = cancel_as(&bus, &outsider.name, &roots, options);
        assert_eq!(name, NOT_AUTHORIZED, "options {options:?}: {message}");
        assert!(message.contains(roots.as_str()), "{message}");
        assert!(message.contains(action::MANAGE_INSTANCES), "{message}");
    }
    // Through vgpuctl: exit status 5, the message on stderr.
    let output = vgpuctl(
        &bus,
        Some(&outsider.name),
        &["--no-ask", "job", "cancel", number(&roots)],
    );
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NotAuthorized.exit_code() as i32),
        "{}",
        stderr_of(&output)
    );
    assert!(
        stderr_of(&output).contains(roots.as_str()),
        "{}",
        stderr_of(&output)
    );
    assert!(
        stderr_of(&output).contains(action::MANAGE_INSTANCES),
        "{}",
        stderr_of(&output)
    );
    // 4. Cancel has no `interactive` option (interaction is the header flag, turned off with
    // `auth.no_user_interaction`): an unknown option is InvalidArgs naming it.
    let (name, message) = cancel_as(&bus, &outsider.name, &roots, "interactive=true");
    assert_eq!(
        name,
        ErrorKind::InvalidArgs.dbus_name(),
        "{name}: {message}"
    );
    assert!(message.contains("interactive"), "{message}");
    // The outsider may not cancel the non-root starter's job either.
    let (name, message) = cancel_as(&bus, &outsider.name, &theirs, "");
    assert_eq!(name, NOT_AUTHORIZED, "{message}");

    // Root's job keeps running until root cancels it.
    assert!(!root_job.finished().await.unwrap());
    let jobs = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "jobs"]));
    assert!(
        jobs.as_array()
            .unwrap()
            .iter()
            .any(|job| job["job"] == roots.as_str()),
        "{jobs}"
    );
    root_job.cancel(HashMap::new()).await.expect("root cancels");
    let ended = ending(&mut signals, &roots).await;
    assert_eq!(ended.removed.0, "cancelled", "{ended:?}");
    assert_eq!(list(&bus), before, "a cancelled job created nothing");

    // A claim of the H200's first VF waits for it; a claim's cancel needs `assign`, so neither
    // the outsider nor the member granted manage-instances may cancel it; it completes once
    // the VF appears.
    let options = HashMap::from([(option::WAIT_FOR_PARENT, Variant::from(600u32))]);
    let claim = manager
        .start_prepare_domain(VM, VM_UUID, vec![claim_device("vf", FIRST_VF)], options)
        .await
        .expect("StartPrepareDomain");
    for user in [&outsider.name, &canceller.name] {
        let (name, message) = cancel_as(&bus, user, &claim, "");
        assert_eq!(name, NOT_AUTHORIZED, "{user}: {message}");
        assert!(message.contains(claim.as_str()), "{message}");
        assert!(message.contains(action::ASSIGN), "{message}");
    }
    assert!(!job_proxy(&root, &claim).await.finished().await.unwrap());
    let sriov = SriovProxy::builder(&root)
        .path(path::parent_path("0000:4b:00.0"))
        .build()
        .await
        .unwrap();
    let enable = sriov
        .set_num_vfs(32, HashMap::new())
        .await
        .expect("SetNumVfs");
    assert_eq!(ending(&mut signals, &enable).await.removed.0, "done");
    let ended = ending(&mut signals, &claim).await;
    assert_eq!(ended.removed.0, "done", "{ended:?}");
    let claimed = list(&bus);
    let claimed = claimed.as_array().unwrap();
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(claimed[0]["pci_address"], FIRST_VF, "{claimed:?}");
    assert_eq!(claimed[0]["holder"], VM, "{claimed:?}");
    manager
        .release_domain(VM, VM_UUID, HashMap::new())
        .await
        .expect("ReleaseDomain");
    assert_eq!(list(&bus), before);

    // 2. A member of the group granted manage-instances for `cancel` may cancel root's create
    // job: it ends cancelled and creates nothing.
    let options = HashMap::from([
        (option::PARENT, Variant::from(ABSENT)),
        (option::WAIT_FOR_PARENT, Variant::from(600u32)),
    ]);
    let roots = manager
        .start_create_instances("nvidia-t4-2q", options)
        .await
        .expect("StartCreateInstances");
    // (The starter's group has no grant for `cancel`: it may not cancel root's job.)
    let (name, message) = cancel_as(&bus, &starter.name, &roots, "");
    assert_eq!(name, NOT_AUTHORIZED, "{message}");
    let (name, message) = cancel_as(&bus, &canceller.name, &roots, "");
    assert_eq!(name, "ok", "{message}");
    let ended = ending(&mut signals, &roots).await;
    assert_eq!(ended.removed.0, "cancelled", "{ended:?}");
    assert!(ended.removed.1.starts_with("Cancelled: "), "{ended:?}");
    let (success, message) = ended
        .completed
        .clone()
        .expect("Completed before JobRemoved");
    assert!(!success);
    assert!(message.starts_with("Cancelled: "), "{message}");
    assert_eq!(list(&bus), before, "a cancelled job created nothing");
    // That grant is for `cancel` only: the member may not create.
    let output = vgpuctl(
        &bus,
        Some(&canceller.name),
        &["--no-ask", "create", "nvidia-t4-2q"],
    );
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NotAuthorized.exit_code() as i32),
        "{}",
        stderr_of(&output)
    );

    // 3. The non-root starter cancels its own job through vgpuctl, although polkit refuses it
    // `manage-instances` for `cancel` (as just seen on root's job), and even once the rule
    // that let it start the job is gone. A create on the absent parent tells when polkitd has
    // dropped the rule: NotFound (no such parent) while granted, NotAuthorized after.
    let probe = || {
        vgpuctl(
            &bus,
            Some(&starter.name),
            &["--no-ask", "create", "nvidia-t4-2q", "--parent", ABSENT],
        )
    };
    let output = probe();
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NotFound.exit_code() as i32),
        "{}",
        stderr_of(&output)
    );
    drop(rule);
    wait_for(Duration::from_secs(30), || {
        probe().status.code() == Some(ErrorKind::NotAuthorized.exit_code() as i32)
    })
    .expect("polkitd dropped the rule");
    assert!(!their_job.finished().await.unwrap());
    let output = vgpuctl(
        &bus,
        Some(&starter.name),
        &["--no-ask", "--json", "job", "cancel", number(&theirs)],
    );
    let answer = vgpuctl_json(&output);
    assert_eq!(answer["job"], theirs.as_str());
    assert_eq!(answer["cancel"], "requested");
    let ended = ending(&mut signals, &theirs).await;
    assert_eq!(ended.removed.0, "cancelled", "{ended:?}");
    assert_eq!(list(&bus), before, "a cancelled job created nothing");
}
