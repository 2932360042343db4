//! NVIDIA vgpu-device-manager files through `vgpuctl apply`/`assert` end to end: the real
//! service code on a real dbus-daemon and the simulated `t4-pair` host (two T4s, the node of
//! NVIDIA's README), with NVIDIA's own `examples/config-t4.yaml` as the file. A configuration
//! applies and then asserts, another one asserts as different, a dry run changes nothing, a
//! create failing in the middle leaves the host as before (removed vGPUs come back with their
//! UUIDs), an instance a VM holds is never removed, and a bad file names file, line and key.

mod common;

use std::path::PathBuf;

use e2e_tests::bus::{stderr_of, vgpuctl};
use mdev_engine::{CreateRequest, CreateTarget, DeviceRequest, DomainRef};
use mdev_sim::Fault;

const FIRST_T4: &str = "0000:3b:00.0";
const SECOND_T4: &str = "0000:af:00.0";

type Setup = common::ServedSim;

async fn setup() -> Setup {
    common::serve_sim("t4-pair").await
}

/// NVIDIA's example file, as shipped in its repository (see the fixtures' README).
fn config_t4() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../vgpu-profiles/fixtures/vgpu-device-manager/config-t4.yaml")
        .to_str()
        .expect("utf-8 path")
        .to_owned()
}

impl Setup {
    fn file(&self, name: &str, text: &str) -> String {
        let path = self.state.path().join(name);
        std::fs::write(&path, text).expect("write the file");
        path.to_str().expect("utf-8 path").to_owned()
    }

    async fn vgpuctl(&self, args: &[&str]) -> std::process::Output {
        tokio::task::block_in_place(|| vgpuctl(&self.bus, None, args))
    }

    /// (parent, type id, uuid) of every running instance, sorted.
    fn on_host(&self) -> Vec<(String, String, String)> {
        let mut found: Vec<(String, String, String)> = self
            .engine
            .instances()
            .expect("instances")
            .into_iter()
            .filter(|info| info.active)
            .map(|info| (info.parent, info.type_id, info.uuid))
            .collect();
        found.sort();
        found
    }

    fn count(&self, parent: &str, type_id: &str) -> usize {
        self.on_host()
            .iter()
            .filter(|(on, id, _)| on == parent && id == type_id)
            .count()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn nvidias_example_applies_then_asserts_and_another_configuration_asserts_as_different() {
    let s = setup().await;
    let file = config_t4();

    let applied = s.vgpuctl(&["apply", "-f", &file, "-c", "T4-small"]).await;
    assert!(applied.status.success(), "{}", stderr_of(&applied));
    let out = text(&applied.stdout);
    assert!(
        out.contains("create 16 x T4-1Q (nvidia-230) on 0000:3b:00.0: 0 of 16 running"),
        "{out}"
    );
    assert!(
        out.contains("create 8 x T4-2Q (nvidia-231) on 0000:af:00.0: 0 of 8 running"),
        "{out}"
    );
    assert!(out.contains("applied: 24 created"), "{out}");
    assert_eq!(s.count(FIRST_T4, "nvidia-230"), 16);
    assert_eq!(s.count(SECOND_T4, "nvidia-231"), 8);

    let asserted = s.vgpuctl(&["assert", "-f", &file, "-c", "T4-small"]).await;
    assert!(asserted.status.success(), "{}", stderr_of(&asserted));
    assert_eq!(text(&asserted.stdout), "no changes: the host matches\n");

    let other = s.vgpuctl(&["assert", "-f", &file, "-c", "T4-large"]).await;
    assert_eq!(other.status.code(), Some(1), "{}", stderr_of(&other));
    let difference = stderr_of(&other);
    assert!(
        difference.contains("create 2 x T4-8Q (nvidia-233) on 0000:3b:00.0"),
        "{difference}"
    );

    let again = s.vgpuctl(&["apply", "-f", &file, "-c", "T4-small"]).await;
    assert!(again.status.success(), "{}", stderr_of(&again));
    assert_eq!(text(&again.stdout), "no changes: the host matches\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_prints_the_plan_and_changes_nothing() {
    let s = setup().await;
    let output = s
        .vgpuctl(&["apply", "--dry-run", "-f", &config_t4(), "-c", "T4-large"])
        .await;
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(
        text(&output.stdout),
        "create 2 x T4-8Q (nvidia-233) on 0000:3b:00.0: 0 of 2 running\n\
         create 1 x T4-16Q (nvidia-234) on 0000:af:00.0: 0 of 1 running\n"
    );
    assert!(s.on_host().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_failing_in_the_middle_leaves_the_host_as_before() {
    let s = setup().await;
    let file = config_t4();
    let first = s.vgpuctl(&["apply", "-f", &file, "-c", "T4-4Q"]).await;
    assert!(first.status.success(), "{}", stderr_of(&first));
    let before = s.on_host();
    assert_eq!(before.len(), 8);

    // T4-medium: 4 x T4-4Q stay on GPU 0, GPU 1's 4 x T4-4Q go for 2 x T4-8Q, whose create fails.
    s.sim
        .inject_fault(Fault::fail("*/nvidia-233/create", libc::EIO));
    let output = s.vgpuctl(&["apply", "-f", &file, "-c", "T4-medium"]).await;
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
    assert_eq!(
        s.on_host(),
        before,
        "the removed vGPUs are back with their UUIDs"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_refuses_to_remove_a_vgpu_a_vm_holds() {
    let s = setup().await;
    let held = s
        .engine
        .create_batch(vec![CreateRequest::new(CreateTarget::Mdev {
            parent: SECOND_T4.into(),
            type_id: "nvidia-230".into(),
        })])
        .expect("create")
        .remove(0)
        .uuid;
    s.engine
        .claim_domain(
            &DomainRef {
                name: "vm-cad".into(),
                uuid: "6f1c3a2e-0b9d-4e57-9a11-2c3d4e5f6a7b".into(),
            },
            &[DeviceRequest {
                kind: "mdev".into(),
                uuid: Some(held.clone()),
                ..Default::default()
            }],
        )
        .expect("claim");
    let before = s.on_host();
    let output = s
        .vgpuctl(&["apply", "-f", &config_t4(), "-c", "T4-large"])
        .await;
    assert!(!output.status.success(), "apply removed a held vGPU");
    let error = stderr_of(&output);
    assert!(error.contains(&held), "{error}");
    assert!(error.contains("held by VM vm-cad"), "{error}");
    assert_eq!(s.on_host(), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_file_or_a_missing_configuration_name_is_refused_naming_it() {
    let s = setup().await;
    let file = s.file(
        "bad.yaml",
        "version: v1\nvgpu-configs:\n  one:\n  - devices: all\n    vgpu-devices:\n      T4-1Q: 4\n    mig-devices: {}\n",
    );
    let output = s.vgpuctl(&["apply", "-f", &file]).await;
    assert_eq!(output.status.code(), Some(8), "{}", stderr_of(&output));
    let error = stderr_of(&output);
    assert!(
        error.contains("bad.yaml: line 7: key vgpu-configs.one[0].mig-devices: unexpected field"),
        "{error}"
    );

    let output = s.vgpuctl(&["apply", "-f", &config_t4()]).await;
    assert!(!output.status.success());
    let error = stderr_of(&output);
    assert!(
        error.contains("config-t4.yaml: the file has 8 configurations"),
        "{error}"
    );

    // `--format toml` reads it as TOML, which it is not.
    let output = s
        .vgpuctl(&[
            "apply",
            "--format",
            "toml",
            "-f",
            &config_t4(),
            "-c",
            "T4-1Q",
        ])
        .await;
    assert!(!output.status.success());
    assert!(
        stderr_of(&output).contains("config-t4.yaml"),
        "{}",
        stderr_of(&output)
    );
    assert!(s.on_host().is_empty());
}
