//! The hook binary run exactly as libvirt runs it (argv + domain XML on stdin) against the
//! `mdev-manager` daemon on the simulated host, over a real dbus-daemon configured like the
//! system bus with the project's policy.

mod common;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use common::{run_hook_on, start_daemon, stderr_of};
use e2e_tests::bus::{created_uuids, vgpuctl, wait_for, wait_name_released, Process, TestBus};
use serde_json::Value;

/// One test's world: a bus, a host root and the daemon on the default simulated host.
struct World {
    daemon: Option<Process>,
    root: tempfile::TempDir,
    bus: TestBus,
}

impl World {
    fn start() -> Self {
        let bus = TestBus::start().expect("dbus-daemon");
        let root = tempfile::tempdir().unwrap();
        let daemon = Some(start_daemon(&bus, root.path(), "default"));
        Self { daemon, root, bus }
    }

    /// Stops the daemon (SIGTERM and wait, so the name is gone when this returns).
    fn stop_daemon(&mut self) {
        let daemon = self.daemon.take().expect("running");
        daemon.terminate().expect("stop mdev-manager");
        wait_name_released(&self.bus).expect("the bus name is released");
    }

    fn hook(&self, domain: &str, operation: &str, sub: &str, xml: &str) -> Output {
        self.hook_with_timeout(domain, operation, sub, xml, "30")
    }

    fn hook_with_timeout(
        &self,
        domain: &str,
        operation: &str,
        sub: &str,
        xml: &str,
        timeout_secs: &str,
    ) -> Output {
        run_hook_on(
            &self.bus,
            self.root.path(),
            [domain, operation, sub, "-"],
            xml,
            timeout_secs,
        )
    }

    /// Sends `signal` to the daemon (SIGSTOP/SIGCONT to make it hang and resume).
    fn signal_daemon(&self, signal: i32) {
        self.daemon.as_ref().expect("running").signal(signal);
    }

    /// `vgpuctl --json list`.
    fn instances(&self) -> Vec<Value> {
        common::instances(&self.bus)
    }

    fn instance(&self, uuid: &str) -> Option<Value> {
        self.instances().into_iter().find(|i| i["uuid"] == uuid)
    }

    fn pending_dir(&self) -> PathBuf {
        self.root
            .path()
            .join("var/lib/mdev-manager/pending-releases")
    }
}

/// A domain whose metadata asks for `vgpus` (profile, uuid) and whose devices attach them.
fn domain(name: &str, uuid: &str, vgpus: &[(&str, &str)]) -> String {
    let entries: String = vgpus
        .iter()
        .map(|(profile, mdev)| format!("      <vgpu:vgpu profile='{profile}' uuid='{mdev}'/>\n"))
        .collect();
    let hostdevs: String = vgpus
        .iter()
        .map(|(_, mdev)| {
            format!(
                "    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n      <source>\n        <address uuid='{mdev}'/>\n      </source>\n    </hostdev>\n"
            )
        })
        .collect();
    format!(
        "<domain type='kvm'>\n  <name>{name}</name>\n  <uuid>{uuid}</uuid>\n  <metadata>\n    <vgpu:vgpus xmlns:vgpu=\"{ns}\">\n{entries}    </vgpu:vgpus>\n  </metadata>\n  <memory unit='KiB'>1048576</memory>\n  <devices>\n{hostdevs}  </devices>\n</domain>\n",
        ns = libvirt_hooks::NAMESPACE
    )
}

const VM_A: &str = "11111111-2222-4333-8444-555555555555";
const VM_B: &str = "99999999-2222-4333-8444-555555555555";
const MDEV_1: &str = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee";

#[test]
fn prepare_creates_reconnect_verifies_migrate_reclaims_release_destroys() {
    let world = World::start();
    let xml = domain("vm-a", VM_A, &[("nvidia-t4-2q", MDEV_1)]);

    let output = world.hook("vm-a", "prepare", "begin", &xml);
    assert!(output.status.success(), "prepare: {}", stderr_of(&output));
    let instance = world
        .instance(MDEV_1)
        .expect("prepare created the instance the XML names");
    assert_eq!(instance["profile"], "nvidia-t4-2q");
    assert_eq!(instance["holder"], "vm-a");
    assert_eq!(instance["active"], true);

    let output = world.hook("vm-a", "reconnect", "begin", &xml);
    assert!(output.status.success());
    assert!(
        output.stderr.is_empty(),
        "no drift expected: {}",
        stderr_of(&output)
    );

    // Claims are idempotent, so migrate (then prepare) on the same host succeed, and the
    // filter prints the XML unchanged.
    let output = world.hook("vm-a", "migrate", "begin", &xml);
    assert!(output.status.success(), "migrate: {}", stderr_of(&output));
    assert_eq!(String::from_utf8(output.stdout).unwrap(), xml);
    assert_eq!(world.instances().len(), 1);

    let output = world.hook("vm-a", "release", "end", &xml);
    assert!(output.status.success(), "release: {}", stderr_of(&output));
    assert!(
        world.instance(MDEV_1).is_none(),
        "release destroyed the transient instance"
    );
    assert!(
        !world.pending_dir().exists(),
        "nothing recorded while the service is up"
    );
}

#[test]
fn a_second_domain_cannot_take_a_claimed_instance() {
    let world = World::start();
    let first = domain("vm-a", VM_A, &[("nvidia-t4-2q", MDEV_1)]);
    let output = world.hook("vm-a", "prepare", "begin", &first);
    assert!(output.status.success(), "{}", stderr_of(&output));

    let second = domain("vm-b", VM_B, &[("nvidia-t4-2q", MDEV_1)]);
    let output = world.hook("vm-b", "prepare", "begin", &second);
    assert_eq!(output.status.code(), Some(1));
    let stderr = stderr_of(&output);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for needle in [
        "vm-b",
        MDEV_1,
        "nvidia-t4-2q",
        "in use by another domain",
        "vm-a",
    ] {
        assert!(stderr.contains(needle), "{needle} missing from {stderr}");
    }
    assert_eq!(
        world.instance(MDEV_1).unwrap()["holder"],
        "vm-a",
        "the holder is unchanged"
    );

    // vm-b's release must not free vm-a's instance.
    let output = world.hook("vm-b", "release", "end", &second);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(world.instance(MDEV_1).unwrap()["holder"], "vm-a");
}

#[test]
fn prepare_without_capacity_fails_with_the_reason_and_leaves_nothing_behind() {
    let world = World::start();
    // The simulated T4 has room for 8 T4-2Q instances; ask for 9 in one domain.
    let uuids: Vec<String> = (1..=9)
        .map(|i| format!("c0000000-bbbb-4ccc-8ddd-{i:012}"))
        .collect();
    let vgpus: Vec<(&str, &str)> = uuids.iter().map(|u| ("nvidia-t4-2q", u.as_str())).collect();
    let xml = domain("vm-big", VM_A, &vgpus);
    let output = world.hook("vm-big", "prepare", "begin", &xml);
    assert_eq!(output.status.code(), Some(1), "{}", stderr_of(&output));
    let stderr = stderr_of(&output);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for needle in ["vm-big", "no capacity on any GPU", "nvidia-t4-2q"] {
        assert!(stderr.contains(needle), "{needle} missing from {stderr}");
    }
    // The service replies before its object tree has caught up with the rollback (seen: six
    // rolled-back instances still listed right after the error), so wait for it to settle.
    let settled = wait_for(Duration::from_secs(10), || world.instances().is_empty());
    assert_eq!(
        settled.map_err(|_| world.instances()),
        Ok(()),
        "the claim was rolled back"
    );
}

#[test]
fn bare_hostdevs_claim_service_instances_and_leave_foreign_ones_alone() {
    let world = World::start();
    let ours = created_uuids(&vgpuctl(
        &world.bus,
        None,
        &["--json", "create", "nvidia-t4-2q"],
    ))
    .remove(0);
    let foreign = "3eb9d718-0b31-11ee-91aa-2b17f51ee12d";
    let xml = format!(
        "<domain type='kvm'><name>vm-ref</name><uuid>{VM_A}</uuid><devices>\
         <hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{ours}'/></source></hostdev>\
         <hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{foreign}'/></source></hostdev>\
         </devices></domain>"
    );
    let output = world.hook("vm-ref", "prepare", "begin", &xml);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(world.instance(&ours).unwrap()["holder"], "vm-ref");
    assert!(
        world.instance(foreign).is_none(),
        "an mdev the service does not manage is not created"
    );

    let output = world.hook("vm-ref", "release", "end", &xml);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let after = world
        .instance(&ours)
        .expect("a claimed-only instance is not destroyed by release");
    assert_eq!(after["holder"], "");
}

#[test]
fn release_with_the_daemon_down_is_recorded_and_finished_when_it_starts() {
    let mut world = World::start();
    let xml = domain("vm-a", VM_A, &[("nvidia-t4-2q", MDEV_1)]);
    let output = world.hook("vm-a", "prepare", "begin", &xml);
    assert!(output.status.success(), "{}", stderr_of(&output));

    world.stop_daemon();
    let output = world.hook("vm-a", "release", "end", &xml);
    assert!(
        output.status.success(),
        "release must not fail: {}",
        stderr_of(&output)
    );
    assert!(
        stderr_of(&output).contains("not running"),
        "{}",
        stderr_of(&output)
    );
    let record = world.pending_dir().join(VM_A);
    assert_eq!(std::fs::read_to_string(&record).unwrap(), "vm-a");

    world.daemon = Some(start_daemon(&world.bus, world.root.path(), "default"));
    wait_for(Duration::from_secs(10), || !record.exists())
        .expect("the daemon finished the pending release and deleted its record");
    assert!(
        world.instances().iter().all(|i| i["holder"] != "vm-a"),
        "vm-a holds nothing after the release"
    );
}

#[test]
fn a_stuck_service_times_out_and_the_release_is_still_recorded() {
    let world = World::start();
    let xml = domain("vm-a", VM_A, &[("nvidia-t4-2q", MDEV_1)]);
    world.signal_daemon(libc::SIGSTOP);

    let output = world.hook_with_timeout("vm-a", "prepare", "begin", &xml, "2");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr_of(&output).contains("did not answer within 2 s"),
        "{}",
        stderr_of(&output)
    );

    let output = world.hook_with_timeout("vm-a", "release", "end", &xml, "2");
    // A stuck service is worth a line in libvirt's log, but the release is not lost.
    assert_eq!(output.status.code(), Some(1), "{}", stderr_of(&output));
    assert!(
        stderr_of(&output).contains("release recorded"),
        "{}",
        stderr_of(&output)
    );
    assert!(world.pending_dir().join(VM_A).exists());

    let output = world.hook_with_timeout("vm-a", "reconnect", "begin", &xml, "2");
    assert!(output.status.success(), "reconnect never fails");
    world.signal_daemon(libc::SIGCONT);
}

/// The free capacity of the simulated T4 (`available_instances` summed over its types).
fn t4_capacity(world: &World) -> u64 {
    let output = vgpuctl(&world.bus, None, &["--json", "types", "0000:3b:00.0"]);
    e2e_tests::bus::vgpuctl_json(&output)
        .as_array()
        .expect("an array of types")
        .iter()
        .map(|t| t["available_instances"].as_u64().expect("a count"))
        .sum()
}

/// The domain `vm-a` as it looks after its vGPU was hot-unplugged: no metadata, no hostdev.
fn unplugged(uuid: &str) -> String {
    format!(
        "<domain type='kvm'>\n  <name>vm-a</name>\n  <uuid>{uuid}</uuid>\n  <memory unit='KiB'>1048576</memory>\n  <devices>\n    <disk type='file' device='disk'/>\n  </devices>\n</domain>\n"
    )
}

#[test]
fn release_goes_by_the_domain_uuid_when_the_xml_no_longer_names_the_vgpu() {
    let world = World::start();
    let free = t4_capacity(&world);
    let xml = domain("vm-a", VM_A, &[("nvidia-t4-2q", MDEV_1)]);
    let output = world.hook("vm-a", "prepare", "begin", &xml);
    assert!(output.status.success(), "prepare: {}", stderr_of(&output));
    assert_eq!(world.instance(MDEV_1).unwrap()["holder"], "vm-a");
    assert!(t4_capacity(&world) < free, "the claim takes capacity");

    // The vGPU was hot-unplugged: the XML libvirt passes at release names none.
    let output = world.hook("vm-a", "release", "end", &unplugged(VM_A));
    assert!(output.status.success(), "release: {}", stderr_of(&output));
    assert!(
        world.instance(MDEV_1).is_none(),
        "the transient instance was released and destroyed"
    );
    assert_eq!(t4_capacity(&world), free, "the capacity is back");
    assert!(
        !world
            .root
            .path()
            .join("var/lib/mdev-manager/domains")
            .join(VM_A)
            .exists(),
        "the domain left the service's index"
    );
}

#[test]
fn release_of_a_domain_holding_nothing_never_asks_the_service() {
    let world = World::start();
    // Another domain holds a vGPU, so the index exists and is not empty.
    let xml = domain("vm-a", VM_A, &[("nvidia-t4-2q", MDEV_1)]);
    let output = world.hook("vm-a", "prepare", "begin", &xml);
    assert!(output.status.success(), "prepare: {}", stderr_of(&output));
    assert!(world
        .root
        .path()
        .join("var/lib/mdev-manager/domains")
        .join(VM_A)
        .exists());

    // A stopped service would make any call time out (exit 1, a pending record): the release
    // of a domain without vGPUs that the index does not list must not make one.
    world.signal_daemon(libc::SIGSTOP);
    let output = world.hook_with_timeout("vm-b", "release", "end", &unplugged(VM_B), "2");
    let stderr = stderr_of(&output);
    world.signal_daemon(libc::SIGCONT);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    assert!(!world.pending_dir().exists(), "nothing recorded");
}

#[test]
fn release_of_an_unplugged_domain_with_the_daemon_down_is_recorded_by_its_uuid() {
    let mut world = World::start();
    let xml = domain("vm-a", VM_A, &[("nvidia-t4-2q", MDEV_1)]);
    let output = world.hook("vm-a", "prepare", "begin", &xml);
    assert!(output.status.success(), "prepare: {}", stderr_of(&output));

    world.stop_daemon();
    let output = world.hook("vm-a", "release", "end", &unplugged(VM_A));
    assert!(output.status.success(), "{}", stderr_of(&output));
    let record = world.pending_dir().join(VM_A);
    assert_eq!(std::fs::read_to_string(&record).unwrap(), "vm-a");

    world.daemon = Some(start_daemon(&world.bus, world.root.path(), "default"));
    wait_for(Duration::from_secs(10), || !record.exists())
        .expect("the daemon finished the pending release");
    assert!(world.instance(MDEV_1).is_none());
}

#[test]
fn release_with_the_daemon_down_lands_in_the_state_dir_of_the_config_file() {
    let bus = TestBus::start().expect("dbus-daemon");
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("etc/mdev-manager/mdev-manager.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        &config,
        "# moved off /var/lib\nstate_dir = \"/srv/vgpu-state\"  # where the service keeps state\n",
    )
    .unwrap();
    let state_dir = root.path().join("srv/vgpu-state");
    let daemon = common::start_daemon_configured(&bus, root.path());
    let xml = domain("vm-a", VM_A, &[("nvidia-t4-2q", MDEV_1)]);
    let output = run_hook_on(
        &bus,
        root.path(),
        ["vm-a", "prepare", "begin", "-"],
        &xml,
        "30",
    );
    assert!(output.status.success(), "prepare: {}", stderr_of(&output));
    // With the state journal (the daemon's default) a change may be only in `state.journal`
    // until the next fold into `state.json`.
    assert!(
        state_dir.join("state.json").exists() || state_dir.join("state.journal").exists(),
        "the daemon keeps its state where the config says"
    );

    daemon.terminate().expect("stop mdev-manager");
    wait_name_released(&bus).expect("the bus name is released");
    let output = run_hook_on(
        &bus,
        root.path(),
        ["vm-a", "release", "end", "-"],
        &xml,
        "30",
    );
    assert!(output.status.success(), "release: {}", stderr_of(&output));
    let record = state_dir.join("pending-releases").join(VM_A);
    assert_eq!(
        std::fs::read_to_string(&record).ok().as_deref(),
        Some("vm-a"),
        "the record is in the configured state directory; files: {:?}",
        e2e_tests::bus::files_under(root.path())
    );
    assert!(!root.path().join("var/lib/mdev-manager").exists());

    let _daemon = common::start_daemon_configured(&bus, root.path());
    wait_for(Duration::from_secs(10), || !record.exists())
        .expect("the daemon finished the pending release and deleted its record");
    let held: Vec<Value> = common::instances(&bus)
        .into_iter()
        .filter(|i| i["holder"] == "vm-a")
        .collect();
    assert!(held.is_empty(), "vm-a holds nothing: {held:?}");
}
