//! A VF named as the parent of a create (NVIDIA SR-IOV vGPU admins address VFs): over a real
//! bus, `vgpuctl create PROFILE --parent VF` puts the instance on that VF, a taken VF is refused
//! by name, and `--wait-for-parent` on a VF that is not enabled yet creates once it appears.

use std::process::{Command, Stdio};
use std::time::Duration;

use e2e_tests::bus::{
    created_uuids, start_service_on, stderr_of, vgpuctl, vgpuctl_json, wait_for, workspace_binary,
    TestBus,
};

const H200: &str = "0000:4b:00.0";
/// The H200's first two VFs on the `default` topology.
const FIRST_VF: &str = "0000:4b:00.4";
const SECOND_VF: &str = "0000:4b:00.5";

/// Bounds the waits below so that a regression fails instead of hanging the suite; they are
/// not timing assertions.
const BOUND: Duration = Duration::from_secs(120);

fn vf_of(bus: &TestBus, uuid: &str) -> serde_json::Value {
    let list = vgpuctl_json(&vgpuctl(bus, None, &["--json", "list"]));
    list.as_array()
        .unwrap()
        .iter()
        .find(|i| i["uuid"] == uuid)
        .unwrap_or_else(|| panic!("{uuid} not listed: {list}"))
        .clone()
}

#[test]
fn a_vf_named_as_parent_is_waited_for_and_takes_the_instance() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = start_service_on(&bus, "default", &[]).expect("service");

    // The VF does not exist yet: the create waits for it as a Job.
    let waiting = Command::new(workspace_binary("vgpuctl"))
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .args([
            "--json",
            "create",
            "nvidia-h200-35c",
            "--parent",
            SECOND_VF,
            "--wait-for-parent",
            "120",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start vgpuctl");
    wait_for(BOUND, || {
        let jobs = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "jobs"]));
        jobs.as_array().is_some_and(|jobs| !jobs.is_empty())
    })
    .expect("the create job appears");
    assert!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]))
            .as_array()
            .unwrap()
            .is_empty(),
        "nothing is created before the VF exists"
    );
    let sriov = vgpuctl(&bus, None, &["sriov", H200, "--vfs", "32"]);
    assert!(sriov.status.success(), "{}", stderr_of(&sriov));
    let created = waiting.wait_with_output().unwrap();
    assert!(created.status.success(), "{}", stderr_of(&created));
    let uuids = created_uuids(&created);
    assert_eq!(uuids.len(), 1, "{uuids:?}");
    let instance = vf_of(&bus, &uuids[0]);
    assert_eq!(instance["parent"], H200, "{instance}");
    assert_eq!(instance["pci_address"], SECOND_VF, "{instance}");

    // Taken now: refused, naming the VF, and no instance lands on the free first VF instead.
    let again = vgpuctl(
        &bus,
        None,
        &["create", "nvidia-h200-35c", "--parent", SECOND_VF],
    );
    assert_eq!(again.status.code(), Some(4), "{}", stderr_of(&again));
    assert!(
        stderr_of(&again).contains(SECOND_VF),
        "{}",
        stderr_of(&again)
    );
    let list = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");

    // The other VF by name.
    let first = vgpuctl(
        &bus,
        None,
        &["--json", "create", "nvidia-h200-35c", "--parent", FIRST_VF],
    );
    assert!(first.status.success(), "{}", stderr_of(&first));
    let first_uuid = created_uuids(&first);
    assert_eq!(vf_of(&bus, &first_uuid[0])["pci_address"], FIRST_VF);
}
