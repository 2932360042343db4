//! Authorization table: every mutating D-Bus method, called by root, by an unprivileged user
//! and by a member of a group a polkit rule grants the actions to, with the real dbus-daemon,
//! the real polkitd and the real daemon. The expected outcome per caller is the table below;
//! a method added to the service but missing here fails the test.
//!
//! Reuses the D-Bus helper's harness (`e2e_tests::bus`) and its `mdev-e2e-client` binary,
//! which calls each mutating method once and prints method → outcome. Needs root (it creates
//! users and installs polkit files, removed again when it ends).

use std::collections::BTreeMap;
use std::time::Duration;

use dbus_api::path;
use e2e_tests::bus::{
    call_everything, group_rule, install_polkit_actions, is_root, package_binary, repo_root,
    start_polkitd, start_service, vgpuctl, wait_for, wait_for_manage_grant, InstalledFile, TestBus,
    TestUser,
};

const REFUSED: &str = "org.mdevmanager.VGpu1.Error.NotAuthorized";

/// Allowed: anything but NotAuthorized (the call may still fail on its merits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Allowed,
    Refused,
}
use Expect::{Allowed, Refused};

/// method, polkit action, root, unprivileged user, member of the granted group
const TABLE: [(&str, &str, Expect, Expect, Expect); 20] = [
    ("Manager.Rescan", "reload", Allowed, Refused, Allowed),
    (
        "Manager.ReloadProfiles",
        "reload",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Manager.CreateInstances",
        "manage-instances",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Manager.StartCreateInstances",
        "manage-instances",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Manager.DestroyInstances",
        "manage-instances",
        Allowed,
        Refused,
        Allowed,
    ),
    ("Manager.PrepareDomain", "assign", Allowed, Refused, Allowed),
    (
        "Manager.StartPrepareDomain",
        "assign",
        Allowed,
        Refused,
        Allowed,
    ),
    ("Manager.ReleaseDomain", "assign", Allowed, Refused, Allowed),
    (
        "Manager.StartReleaseDomain",
        "assign",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Manager.ImportMdevctl",
        "manage-persistent",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Manager.StartApply",
        "manage-instances",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Sriov.SetNumVfs",
        "configure-sriov",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Parent.SetSchedulerPolicy",
        "set-weights",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Instance.SetSchedule",
        "set-weights",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Instance.Stop",
        "manage-instances",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Instance.Start",
        "manage-instances",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Instance.SetAutostart",
        "manage-persistent",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Instance.SetAttributes",
        "manage-persistent",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Instance.Destroy",
        "manage-instances",
        Allowed,
        Refused,
        Allowed,
    ),
    (
        "Instance.StartDestroy",
        "manage-instances",
        Allowed,
        Refused,
        Allowed,
    ),
];

/// Methods called on an object the test makes for each caller rather than by the client:
/// `Job.Cancel` of a create job root started (waiting for a parent that never comes), so the
/// action is the operation's (`manage-instances`) and only root is the starter. Same columns
/// as [`TABLE`]; `tests/tests/jobs_cancel_polkit.rs` covers a non-root starter.
const ON_A_ROOT_JOB: [(&str, &str, Expect, Expect, Expect); 1] =
    [("Job.Cancel", "manage-instances", Allowed, Refused, Allowed)];

/// Methods of the published interface that change nothing and so need no action: never in
/// [`TABLE`].
const NOT_IN_TABLE: [&str; 9] = [
    "Manager.GetPermissions",
    "Manager.GetOperationStats",
    "Manager.Probe",
    "Manager.VerifyDomain",
    "Manager.ListInstances",
    "Manager.ListInstanceAttributes",
    "Manager.ListTypes",
    "Manager.FitProfiles",
    "Manager.GetVgpuTelemetry",
];

/// `Interface.Method` for every method of the published introspection XML.
fn published_methods() -> Vec<String> {
    let xml =
        std::fs::read_to_string(repo_root().join("dbus-api/interface/org.mdevmanager.VGpu1.xml"))
            .expect("the published interface XML");
    let mut methods = Vec::new();
    let mut interface = "";
    for line in xml.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("<interface name=\"") {
            let name = rest.split('"').next().unwrap_or_default();
            interface = name.rsplit('.').next().unwrap_or_default();
        } else if let Some(rest) = line.strip_prefix("<method name=\"") {
            let name = rest.split('"').next().unwrap_or_default();
            methods.push(format!("{interface}.{name}"));
        }
    }
    methods.sort();
    methods
}

#[test]
fn the_table_covers_every_published_method() {
    let mut covered: Vec<String> = TABLE
        .iter()
        .chain(&ON_A_ROOT_JOB)
        .map(|row| row.0)
        .chain(NOT_IN_TABLE)
        .map(str::to_owned)
        .collect();
    covered.sort();
    assert_eq!(
        published_methods(),
        covered,
        "a method of the published interface is neither in the authorization table nor listed as needing no action"
    );
}

/// A persistent instance, so that Stop leaves an object for Start to act on.
fn create_instance(bus: &TestBus) -> String {
    let output = vgpuctl(
        bus,
        None,
        &["--json", "create", "nvidia-t4-2q", "--autostart"],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let created: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let uuid = created[0]["uuid"].as_str().expect("uuid").to_string();
    path::mdev_instance_path(&uuid).to_string()
}

/// The exit status `vgpuctl` gives a NotAuthorized error.
fn refused_exit() -> Option<i32> {
    Some(i32::from(dbus_api::ErrorKind::NotAuthorized.exit_code()))
}

/// [`ON_A_ROOT_JOB`] for one caller: root starts a create job waiting for a parent that never
/// comes, `user` (root when `None`) asks `vgpuctl --no-ask job cancel` to stop it, and the job
/// must end cancelled when allowed and keep running when refused (root cancels it then).
fn check_cancel(bus: &TestBus, caller: &str, user: Option<&str>, expect: Expect) {
    let started = vgpuctl(
        bus,
        None,
        &[
            "--json",
            "create",
            "nvidia-t4-2q",
            "--parent",
            "0000:99:00.0",
            "--wait-for-parent",
            "600",
            "--no-wait",
        ],
    );
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let started: serde_json::Value = serde_json::from_slice(&started.stdout).expect("JSON");
    let job = started["job"].as_str().expect("a job path").to_string();
    let number = job.rsplit('/').next().unwrap_or_default();
    let output = vgpuctl(bus, user, &["--no-ask", "job", "cancel", number]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let row = &ON_A_ROOT_JOB[0];
    println!(
        "{caller:>10} {:<26} {:<18} exit {:?} {}",
        row.0,
        row.1,
        output.status.code(),
        stderr.trim()
    );
    let running = |bus: &TestBus| {
        let jobs = vgpuctl(bus, None, &["--json", "jobs"]).stdout;
        let jobs: serde_json::Value = serde_json::from_slice(&jobs).expect("jobs JSON");
        jobs.as_array()
            .is_some_and(|jobs| jobs.iter().any(|j| j["job"] == job.as_str()))
    };
    match expect {
        Allowed => {
            assert!(output.status.success(), "{caller} {}: {stderr}", row.0);
            wait_for(Duration::from_secs(30), || !running(bus))
                .unwrap_or_else(|_| panic!("{caller}: the cancelled job {job} still runs"));
        }
        Refused => {
            assert_eq!(
                output.status.code(),
                refused_exit(),
                "{caller} {}: {stderr}",
                row.0
            );
            assert!(stderr.contains(&job), "{stderr}");
            assert!(running(bus), "{caller}: a refused cancel stopped {job}");
            let output = vgpuctl(bus, None, &["job", "cancel", number]);
            assert!(output.status.success(), "root cancels {job}");
            wait_for(Duration::from_secs(30), || !running(bus))
                .unwrap_or_else(|_| panic!("root's cancel of {job} did not end it"));
        }
    }
}

fn check_row(caller: &str, results: &BTreeMap<String, String>, column: impl Fn(usize) -> Expect) {
    let listed: Vec<&str> = TABLE.iter().map(|row| row.0).collect();
    let called: Vec<&str> = results.keys().map(String::as_str).collect();
    assert_eq!(
        called,
        {
            let mut sorted = listed.clone();
            sorted.sort_unstable();
            sorted
        },
        "the table and the client disagree on the mutating methods"
    );
    for (index, row) in TABLE.iter().enumerate() {
        let outcome = &results[row.0];
        println!("{caller:>10} {:<26} {:<18} {outcome}", row.0, row.1);
        assert!(
            !outcome.starts_with("transport"),
            "{caller} {}: {outcome}",
            row.0
        );
        match column(index) {
            Refused => assert_eq!(outcome, REFUSED, "{caller} {}", row.0),
            Allowed => assert_ne!(outcome, REFUSED, "{caller} {}", row.0),
        }
    }
}

#[test]
fn every_mutating_method_per_caller_matches_the_table() {
    assert!(
        is_root(),
        "needs root: creates users, installs polkit files"
    );
    let _actions = install_polkit_actions();
    let client = package_binary("e2e-tests", "mdev-e2e-client");
    let bus = TestBus::start().expect("dbus-daemon");
    let _polkitd = start_polkitd(&bus).expect("polkitd");
    let _service = start_service(&bus, &[]).expect("mdev-manager");
    let h200 = path::parent_path("0000:4b:00.0").to_string();

    let suffix = std::process::id() % 100_000;
    let outsider = TestUser::create(&format!("relout{suffix}"), None).expect("useradd");
    let group = format!("relgrp{suffix}");
    let member = TestUser::create(&format!("relin{suffix}"), Some(&group)).expect("useradd");
    let _rule = InstalledFile::install(
        format!("/etc/polkit-1/rules.d/49-mdev-reliability-{suffix}.rules"),
        group_rule(&group).as_bytes(),
    )
    .expect("install the rule");
    wait_for_manage_grant(&bus, &member.name).expect("polkitd picked up the rule");

    // The unprivileged user first, on an instance root made: nothing may change.
    let instances = [create_instance(&bus), create_instance(&bus)];
    let instance = [instances[0].as_str(), instances[1].as_str()];
    let before = vgpuctl(&bus, None, &["--json", "list"]).stdout;
    let results = call_everything(
        &bus,
        &client,
        Some(&outsider.name),
        &[instance[0], &h200, instance[1]],
    );
    check_row("user", &results, |i| TABLE[i].3);
    check_cancel(&bus, "user", Some(&outsider.name), ON_A_ROOT_JOB[0].3);
    assert_eq!(
        vgpuctl(&bus, None, &["--json", "list"]).stdout,
        before,
        "a refused call changed something"
    );

    let instances = [create_instance(&bus), create_instance(&bus)];
    let instance = [instances[0].as_str(), instances[1].as_str()];
    let results = call_everything(
        &bus,
        &client,
        Some(&member.name),
        &[instance[0], &h200, instance[1]],
    );
    check_row("group", &results, |i| TABLE[i].4);
    check_cancel(&bus, "group", Some(&member.name), ON_A_ROOT_JOB[0].4);

    let instances = [create_instance(&bus), create_instance(&bus)];
    let instance = [instances[0].as_str(), instances[1].as_str()];
    let results = call_everything(&bus, &client, None, &[instance[0], &h200, instance[1]]);
    check_row("root", &results, |i| TABLE[i].2);
    check_cancel(&bus, "root", None, ON_A_ROOT_JOB[0].2);
}
