//! Whole-GPU pass-through through the whole chain: the hook binary run as libvirt runs it,
//! over a real dbus-daemon, against the `mdev-manager` daemon on the simulated host of
//! `mdev-sim/topologies/passthrough.toml` (a GPU with its HDMI audio function in one IOMMU
//! group), then `vgpuctl list` / `vgpuctl xml`.

mod common;

use std::path::Path;
use std::process::Output;

use common::{instances, run_hook_on, stderr_of};
use e2e_tests::bus::{repo_root, vgpuctl, Process, TestBus};

const GPU: &str = "0000:41:00.0";
const VM_A: &str = "3d1f0c2e-5a6b-4c7d-8e9f-0a1b2c3d4e01";
const VM_B: &str = "3d1f0c2e-5a6b-4c7d-8e9f-0a1b2c3d4e02";

/// The daemon on the pass-through topology.
fn start_daemon(bus: &TestBus, root: &Path) -> Process {
    let topology = repo_root().join("mdev-sim/topologies/passthrough.toml");
    common::start_daemon(bus, root, topology.to_str().expect("utf-8 path"))
}

/// A domain asking for the GPU by address, attached as an unmanaged PCI hostdev.
fn domain(name: &str, uuid: &str) -> String {
    format!(
        "<domain type='kvm'>\n  <name>{name}</name>\n  <uuid>{uuid}</uuid>\n  <metadata>\n    \
         <vgpu:vgpus xmlns:vgpu=\"{ns}\">\n      <vgpu:vgpu kind='passthrough' pci_address='{GPU}'/>\n    \
         </vgpu:vgpus>\n  </metadata>\n  <devices>\n    <hostdev mode='subsystem' type='pci' managed='no'>\n      \
         <source>\n        <address domain='0x0000' bus='0x41' slot='0x00' function='0x0'/>\n      \
         </source>\n    </hostdev>\n  </devices>\n</domain>\n",
        ns = libvirt_hooks::NAMESPACE
    )
}

fn hook(bus: &TestBus, root: &Path, name: &str, operation: &str, sub: &str, xml: &str) -> Output {
    run_hook_on(bus, root, [name, operation, sub, "-"], xml, "30")
}

#[test]
fn the_hook_binds_the_gpu_group_at_prepare_refuses_a_second_domain_and_returns_it_at_release() {
    let bus = TestBus::start().expect("dbus-daemon");
    let root = tempfile::tempdir().unwrap();
    let _daemon = start_daemon(&bus, root.path());

    let vm_a = domain("vm-a", VM_A);
    let output = hook(&bus, root.path(), "vm-a", "prepare", "begin", &vm_a);
    assert!(output.status.success(), "prepare: {}", stderr_of(&output));
    let list = instances(&bus);
    assert_eq!(list.len(), 1, "{list:?}");
    let instance = &list[0];
    assert_eq!(instance["kind"], "passthrough");
    assert_eq!(instance["holder"], "vm-a");
    assert_eq!(instance["active"], true);
    let uuid = instance["uuid"].as_str().expect("uuid").to_owned();

    let output = vgpuctl(&bus, None, &["xml", &uuid]);
    assert!(
        output.status.success(),
        "vgpuctl xml: {}",
        stderr_of(&output)
    );
    // One unmanaged hostdev per bound function: the GPU and its HDMI audio, not the bridge
    // (the generator's golden file, dbus-api/tests/golden).
    let golden = repo_root().join("dbus-api/tests/golden/hostdev-passthrough-group.xml");
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        std::fs::read_to_string(golden).unwrap()
    );

    let vm_b = domain("vm-b", VM_B);
    let output = hook(&bus, root.path(), "vm-b", "prepare", "begin", &vm_b);
    assert_eq!(output.status.code(), Some(1), "{}", stderr_of(&output));
    let stderr = stderr_of(&output);
    assert!(
        stderr.contains("vm-a") || stderr.contains(&uuid),
        "{stderr}"
    );
    assert_eq!(
        instances(&bus)[0]["holder"],
        "vm-a",
        "the refusal changed nothing"
    );

    let output = hook(&bus, root.path(), "vm-a", "release", "end", &vm_a);
    assert!(output.status.success(), "release: {}", stderr_of(&output));
    assert!(instances(&bus).is_empty(), "release returned the GPU");

    let output = hook(&bus, root.path(), "vm-b", "prepare", "begin", &vm_b);
    assert!(
        output.status.success(),
        "vm-b after release: {}",
        stderr_of(&output)
    );
    assert_eq!(instances(&bus)[0]["holder"], "vm-b");
}

/// A domain asking for the T400 that shares its IOMMU group with the host's NIC.
fn nic_group_domain(name: &str, uuid: &str, force: Option<&str>) -> String {
    let force = force.map(|f| format!(" force='{f}'")).unwrap_or_default();
    format!(
        "<domain type='kvm'>\n  <name>{name}</name>\n  <uuid>{uuid}</uuid>\n  <metadata>\n    \
         <vgpu:vgpus xmlns:vgpu=\"{ns}\">\n      <vgpu:vgpu kind='passthrough' pci_address='0000:61:00.0'{force}/>\n    \
         </vgpu:vgpus>\n  </metadata>\n  <devices>\n    <hostdev mode='subsystem' type='pci' managed='no'>\n      \
         <source>\n        <address domain='0x0000' bus='0x61' slot='0x00' function='0x0'/>\n      \
         </source>\n    </hostdev>\n  </devices>\n</domain>\n",
        ns = libvirt_hooks::NAMESPACE
    )
}

#[test]
fn metadata_force_takes_a_group_with_a_host_nic_that_is_refused_without_it() {
    let bus = TestBus::start().expect("dbus-daemon");
    let root = tempfile::tempdir().unwrap();
    let _daemon = start_daemon(&bus, root.path());

    // Without force: the hook fails the start, naming the NIC, its driver and why.
    for force in [None, Some("no")] {
        let xml = nic_group_domain("vm-nic", VM_A, force);
        let output = hook(&bus, root.path(), "vm-nic", "prepare", "begin", &xml);
        assert_eq!(output.status.code(), Some(1), "{}", stderr_of(&output));
        let stderr = stderr_of(&output);
        for needle in ["0000:62:00.0", "igb", "network controller"] {
            assert!(stderr.contains(needle), "{needle}: {stderr}");
        }
        assert!(instances(&bus).is_empty(), "a refusal binds nothing");
    }

    // force='yes': the GPU and the NIC go to vfio-pci; the guest gets both.
    let xml = nic_group_domain("vm-nic", VM_A, Some("yes"));
    let output = hook(&bus, root.path(), "vm-nic", "prepare", "begin", &xml);
    assert!(output.status.success(), "prepare: {}", stderr_of(&output));
    let list = instances(&bus);
    assert_eq!(list.len(), 1, "{list:?}");
    let uuid = list[0]["uuid"].as_str().unwrap().to_owned();
    let output = vgpuctl(&bus, None, &["xml", &uuid]);
    let xml_out = String::from_utf8(output.stdout).unwrap();
    assert_eq!(xml_out.matches("managed='no'").count(), 2, "{xml_out}");
    assert!(
        xml_out.contains("bus='0x62' slot='0x00' function='0x0'"),
        "{xml_out}"
    );

    let output = hook(&bus, root.path(), "vm-nic", "release", "end", &xml);
    assert!(output.status.success(), "release: {}", stderr_of(&output));
    assert!(instances(&bus).is_empty(), "release returned the group");
}
