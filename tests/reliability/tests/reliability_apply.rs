//! Declarative apply/assert end to end: `vgpuctl apply`/`assert` against the real service
//! code on a real dbus-daemon and the simulated `samples` host (the service runs in this
//! process, so the test can inject faults and claim instances): apply then assert passes, a
//! second apply is a no-op plan, a create failing in the middle leaves the host as before, and
//! an instance a VM holds is never removed without force.

mod common;

use std::path::PathBuf;

use e2e_tests::bus::{stderr_of, vgpuctl, workspace_binary};
use mdev_engine::{CreateRequest, CreateTarget, DeviceRequest, DomainRef};
use mdev_sim::Fault;

type Setup = common::ServedSim;

async fn setup() -> Setup {
    common::serve_sim("samples").await
}

impl Setup {
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.state.path().join(name);
        std::fs::write(&path, text).expect("write the file");
        path
    }

    /// `vgpuctl ARGS` on a blocking thread (the service answers on this runtime).
    async fn vgpuctl(&self, args: &[&str]) -> std::process::Output {
        tokio::task::block_in_place(|| vgpuctl(&self.bus, None, args))
    }

    fn profiles_on_host(&self) -> Vec<(String, Option<String>)> {
        let mut found: Vec<(String, Option<String>)> = self
            .engine
            .instances()
            .expect("instances")
            .into_iter()
            .filter(|info| info.active)
            .map(|info| (info.uuid, info.profile))
            .collect();
        found.sort();
        found
    }

    fn create(&self, profile: &str, parent: &str, count: usize) -> Vec<String> {
        let request = CreateRequest::new(CreateTarget::Profile {
            profile: profile.into(),
            parent: Some(parent.into()),
        });
        self.engine
            .create_batch(vec![request; count])
            .expect("create")
            .into_iter()
            .map(|info| info.uuid)
            .collect()
    }
}

const TWO_MTTY: &str = r#"
version = 1

[[instances]]
parent = "mtty"
profile = "mtty"
count = 2
weight = 300
"#;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_makes_the_host_match_then_assert_passes_and_a_second_apply_is_a_no_op() {
    let s = setup().await;
    let file = s.file("host.toml", TWO_MTTY);
    let file = file.to_str().unwrap();

    let before = s.vgpuctl(&["assert", "-f", file]).await;
    assert!(!before.status.success(), "assert before apply passed");
    assert!(
        stderr_of(&before).contains("create 2 x mtty on mtty"),
        "{}",
        stderr_of(&before)
    );

    let applied = s.vgpuctl(&["apply", "-f", file]).await;
    assert!(applied.status.success(), "{}", stderr_of(&applied));
    let out = text(&applied.stdout);
    assert!(
        out.contains("create 2 x mtty on mtty: 0 of 2 running"),
        "{out}"
    );
    assert!(out.contains("applied: 2 created"), "{out}");
    let on_host = s.profiles_on_host();
    assert_eq!(on_host.len(), 2, "{on_host:?}");
    for (uuid, profile) in &on_host {
        assert_eq!(profile.as_deref(), Some("mtty"));
        let info = s.engine.instance(uuid).expect("instance");
        assert_eq!(info.scheduling.weight, Some(300));
    }

    let asserted = s.vgpuctl(&["assert", "-f", file]).await;
    assert!(asserted.status.success(), "{}", stderr_of(&asserted));
    assert_eq!(text(&asserted.stdout), "no changes: the host matches\n");

    let again = s.vgpuctl(&["apply", "-f", file]).await;
    assert!(again.status.success(), "{}", stderr_of(&again));
    assert_eq!(text(&again.stdout), "no changes: the host matches\n");
    assert_eq!(s.profiles_on_host(), on_host);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_prints_the_plan_and_changes_nothing() {
    let s = setup().await;
    let file = s.file("host.toml", TWO_MTTY);
    let output = s
        .vgpuctl(&["apply", "--dry-run", "-f", file.to_str().unwrap()])
        .await;
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(
        text(&output.stdout),
        "create 2 x mtty on mtty: 0 of 2 running\n"
    );
    assert!(s.profiles_on_host().is_empty());
}

/// `assert` prints the difference one change per line under its `vgpuctl: Failed: ...` line,
/// the very lines `apply --dry-run` prints as the plan; it exits 1 and changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn assert_prints_each_difference_on_its_own_line_as_the_dry_run_prints_the_plan() {
    let s = setup().await;
    let surplus = s.create("mtty-dual", "mtty", 2);
    let before = s.profiles_on_host();
    let file = s.file("host.toml", TWO_MTTY);
    let file = file.to_str().unwrap();

    let planned = s.vgpuctl(&["apply", "--dry-run", "-f", file]).await;
    assert!(planned.status.success(), "{}", stderr_of(&planned));
    let plan = text(&planned.stdout);
    let plan: Vec<&str> = plan.lines().collect();
    assert_eq!(plan.len(), 3, "two destroys and a create: {plan:?}");

    let asserted = s.vgpuctl(&["assert", "-f", file]).await;
    assert_eq!(asserted.status.code(), Some(1), "{}", stderr_of(&asserted));
    assert!(asserted.stdout.is_empty(), "{}", text(&asserted.stdout));
    let error = stderr_of(&asserted);
    let mut lines = error.lines();
    assert_eq!(
        lines.next(),
        Some("vgpuctl: Failed: the host differs from the desired state:"),
        "{error}"
    );
    assert_eq!(lines.collect::<Vec<_>>(), plan, "{error}");
    for uuid in &surplus {
        assert!(
            plan.iter()
                .any(|line| line.starts_with("destroy ") && line.contains(uuid.as_str())),
            "{plan:?}"
        );
    }
    assert!(
        plan.contains(&"create 2 x mtty on mtty: 0 of 2 running"),
        "{plan:?}"
    );
    assert_eq!(s.profiles_on_host(), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_failing_in_the_middle_leaves_the_host_as_before() {
    let s = setup().await;
    s.create("mtty-dual", "mtty", 2);
    let before = s.profiles_on_host();
    let before_mdevs = s.sim.mdev_uuids();
    // The mbochs create comes first and succeeds, the mtty one after it fails.
    let file = s.file(
        "host.toml",
        r#"
version = 1

[[instances]]
parent = "mbochs"
profile = "mbochs-small"
count = 1

[[instances]]
parent = "mtty"
profile = "mtty"
count = 2
"#,
    );
    s.sim
        .inject_fault(Fault::fail("*/mtty-1/create", libc::EIO));
    let output = s.vgpuctl(&["apply", "-f", file.to_str().unwrap()]).await;
    assert!(
        !output.status.success(),
        "apply with a failing create succeeded"
    );
    let error = stderr_of(&output);
    assert!(
        error.contains("creating instances failed, rolled back"),
        "{error}"
    );
    assert!(
        text(&output.stdout).contains("destroy "),
        "the plan was not printed"
    );
    assert_eq!(s.profiles_on_host(), before);
    assert_eq!(s.sim.mdev_uuids(), before_mdevs);
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_refuses_to_remove_an_instance_a_vm_holds() {
    let s = setup().await;
    let held = s.create("mtty-dual", "mtty", 1).remove(0);
    s.engine
        .claim_domain(
            &DomainRef {
                name: "vm-web".into(),
                uuid: "6f1c3a2e-0b9d-4e57-9a11-2c3d4e5f6a7b".into(),
            },
            &[DeviceRequest {
                kind: "mdev".into(),
                uuid: Some(held.clone()),
                ..Default::default()
            }],
        )
        .expect("claim");
    let before = s.profiles_on_host();
    let file = s.file(
        "host.toml",
        "version = 1\n[[instances]]\nparent = \"mtty\"\nprofile = \"mtty\"\ncount = 1\n",
    );
    let output = s.vgpuctl(&["apply", "-f", file.to_str().unwrap()]).await;
    assert!(!output.status.success(), "apply removed a held instance");
    let error = stderr_of(&output);
    assert!(error.contains(&held), "{error}");
    assert!(error.contains("held by VM vm-web"), "{error}");
    assert_eq!(s.profiles_on_host(), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_file_is_refused_naming_file_line_and_key() {
    let s = setup().await;
    let file = s.file(
        "bad.toml",
        "version = 1\n[[instances]]\nprofile = \"mtty\"\ncount = 1\nwieght = 5\n",
    );
    let output = s.vgpuctl(&["apply", "-f", file.to_str().unwrap()]).await;
    assert!(!output.status.success());
    let error = stderr_of(&output);
    assert!(error.contains("bad.toml"), "{error}");
    assert!(error.contains("line 5"), "{error}");
    assert!(error.contains("wieght"), "{error}");
    assert!(s.profiles_on_host().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_on_standard_input_is_read_with_dash() {
    use std::io::Write as _;
    let s = setup().await;
    let output = tokio::task::block_in_place(|| {
        let mut child = std::process::Command::new(workspace_binary("vgpuctl"))
            .args(["apply", "-f", "-"])
            .env("DBUS_SYSTEM_BUS_ADDRESS", s.bus.address())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("vgpuctl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(TWO_MTTY.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("vgpuctl output")
    });
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert!(text(&output.stdout).contains("applied: 2 created"));
    assert_eq!(s.profiles_on_host().len(), 2);
}
