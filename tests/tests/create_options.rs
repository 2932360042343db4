//! Create options, config keys and forced pass-through over a real bus (issues #4 and #10):
//! `vgpuctl create --placement/--numa-node/--numa-strict/--force`, `PrepareDomain` with a
//! `force` device, `Instance.GroupMembers` and `vgpuctl xml` of a two-function group, and the
//! daemon refusing a config file with bad values.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use dbus_api::names::device_key;
use dbus_api::proxy::ManagerProxy;
use dbus_api::ErrorKind;
use e2e_tests::bus::{
    created_uuids, is_root, repo_root, start_service_on, stderr_of, vgpuctl, vgpuctl_json,
    workspace_binary, Process, TestBus,
};
use serde_json::Value;
use zbus::zvariant::Variant;

/// A profile directory holding `text` as `test.toml`, inside the bus's temp directory.
fn profiles(bus: &TestBus, text: &str) -> PathBuf {
    let dir = bus.dir().join("profiles.d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("test.toml"), text).unwrap();
    dir
}

/// The parent each instance (by UUID) is on, from `vgpuctl --json list`.
fn parent_of(bus: &TestBus, uuid: &str) -> String {
    let list = vgpuctl_json(&vgpuctl(bus, None, &["--json", "list"]));
    list.as_array()
        .unwrap()
        .iter()
        .find(|i| i["uuid"] == uuid)
        .unwrap_or_else(|| panic!("{uuid} not listed: {list}"))["parent"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The `numa_node` of a parent of the `scale` topology (from `vgpuctl parents`).
fn numa_of(bus: &TestBus, parent: &str) -> i64 {
    let parents = vgpuctl_json(&vgpuctl(bus, None, &["--json", "parents"]));
    parents
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == parent)
        .unwrap_or_else(|| panic!("{parent} not listed: {parents}"))["numa_node"]
        .as_i64()
        .unwrap()
}

const SIM_SMALL: &str =
    "[[profile]]\nname = \"sim-small\"\ndescription = \"512M\"\n[profile.pin]\ntype_name = \"SIM-512M\"\n";

/// The daemon on the `scale` topology with the `sim-small` profile.
fn scale_service(bus: &TestBus) -> Process {
    let dir = profiles(bus, SIM_SMALL);
    start_service_on(bus, "scale", &["--profiles-dir", dir.to_str().unwrap()])
        .expect("mdev-manager")
}

#[test]
fn placement_spread_packs_apart_and_numa_strict_refuses_naming_the_node() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = scale_service(&bus);

    // pack (the default, and asked for): the second instance joins the first.
    let a = created_uuids(&vgpuctl(&bus, None, &["--json", "create", "sim-small"]));
    let b = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "sim-small", "--placement", "pack"],
    ));
    assert_eq!(parent_of(&bus, &a[0]), parent_of(&bus, &b[0]));
    // spread: each instance of one call goes to an idle parent of its own.
    let spread = created_uuids(&vgpuctl(
        &bus,
        None,
        &[
            "--json",
            "create",
            "sim-small",
            "--count",
            "2",
            "--placement",
            "spread",
        ],
    ));
    let spread_parents: Vec<String> = spread.iter().map(|u| parent_of(&bus, u)).collect();
    assert_ne!(spread_parents[0], spread_parents[1]);
    for parent in &spread_parents {
        assert_ne!(
            parent,
            &parent_of(&bus, &a[0]),
            "spread took the busy parent"
        );
    }

    // A strict NUMA node is honoured ...
    let on1 = created_uuids(&vgpuctl(
        &bus,
        None,
        &[
            "--json",
            "create",
            "sim-small",
            "--numa-node",
            "1",
            "--numa-strict",
        ],
    ));
    assert_eq!(numa_of(&bus, &parent_of(&bus, &on1[0])), 1);
    // ... and a node no parent is on is refused, naming it, creating nothing.
    let before = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    let output = vgpuctl(
        &bus,
        None,
        &["create", "sim-small", "--numa-node", "7", "--numa-strict"],
    );
    assert_eq!(output.status.code(), Some(4), "{}", stderr_of(&output));
    assert!(
        stderr_of(&output).contains("not the required node 7"),
        "{}",
        stderr_of(&output)
    );
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"])),
        before
    );

    // --numa-strict without a node is a usage error of vgpuctl itself.
    let output = vgpuctl(&bus, None, &["create", "sim-small", "--numa-strict"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr_of(&output));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_placement_options_are_invalid_args_naming_key_and_value() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = scale_service(&bus);
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.unwrap();
    let cases: [(&str, Variant<'_>, &str); 3] = [
        ("placement", Variant::from("scatter"), "'scatter'"),
        ("numa-node", Variant::from("1"), "numa-node"),
        ("numa-strict", Variant::from(true), "numa-node"),
    ];
    for (key, value, expected) in cases {
        let error = manager
            .create_instances("sim-small", HashMap::from([(key, value)]))
            .await
            .unwrap_err();
        let error = dbus_api::ClientError::from(error);
        assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs), "{error}");
        assert!(error.to_string().contains(key), "{error}");
        assert!(error.to_string().contains(expected), "{error}");
    }
    let error = manager
        .prepare_domain(
            "vm",
            "3d1f0c2e-5a6b-4c7d-8e9f-0a1b2c3d4e09",
            vec![HashMap::from([
                (device_key::KIND, Variant::from("mdev")),
                (device_key::PROFILE, Variant::from("sim-small")),
                (device_key::FORCE, Variant::from(true)),
            ])],
            HashMap::new(),
        )
        .await
        .unwrap_err();
    let error = dbus_api::ClientError::from(error);
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs), "{error}");
    assert!(error.to_string().contains("force"), "{error}");
    let list = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    assert_eq!(list, serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn claims_take_placement_device_keys() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = scale_service(&bus);
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.unwrap();
    let device = |placement: &'static str, node: u32| {
        HashMap::from([
            (device_key::KIND, Variant::from("mdev")),
            (device_key::PROFILE, Variant::from("sim-small")),
            (device_key::PLACEMENT, Variant::from(placement)),
            (device_key::NUMA_NODE, Variant::from(node)),
            (device_key::NUMA_STRICT, Variant::from(true)),
        ])
    };
    // A bad value names the device, the key and the value; nothing is claimed.
    let error = manager
        .prepare_domain(
            "vm",
            "3d1f0c2e-5a6b-4c7d-8e9f-0a1b2c3d4e0a",
            vec![device("spread", 1), device("wide", 1)],
            HashMap::new(),
        )
        .await
        .unwrap_err();
    let error = dbus_api::ClientError::from(error);
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs), "{error}");
    for needle in ["device #1", "placement", "'wide'"] {
        assert!(error.to_string().contains(needle), "{needle}: {error}");
    }
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"])),
        serde_json::json!([])
    );
    // Two vGPUs spread over node 1's parents: two different parents, both on node 1.
    let claimed = manager
        .prepare_domain(
            "vm",
            "3d1f0c2e-5a6b-4c7d-8e9f-0a1b2c3d4e0a",
            vec![device("spread", 1), device("spread", 1)],
            HashMap::new(),
        )
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 2);
    let list = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    let parents: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["parent"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(parents.len(), 2, "{list}");
    assert_ne!(parents[0], parents[1], "{list}");
    for parent in &parents {
        assert_eq!(numa_of(&bus, parent), 1, "{parent}");
    }
}

const NIC_GPU: &str = "0000:61:00.0";
const NIC: &str = "0000:62:00.0";

/// The pass-through topology: 0000:41:00.0 + its HDMI audio (+ a bridge) in one group;
/// 0000:61:00.0 sharing its group with the host's NIC 0000:62:00.0 (igb).
fn passthrough_topology() -> String {
    repo_root()
        .join("mdev-sim/topologies/passthrough.toml")
        .display()
        .to_string()
}

fn instance_json(bus: &TestBus, uuid: &str) -> Value {
    vgpuctl_json(&vgpuctl(bus, None, &["--json", "show", uuid]))
}

/// The daemon on the pass-through topology with the profile `t400`: the GPU whose group holds
/// the host's NIC.
fn t400_service(bus: &TestBus) -> Process {
    let dir = profiles(
        bus,
        &format!(
            "[[profile]]\nname = \"t400\"\nisolation = \"passthrough\"\n[profile.device]\npci_address = \"{NIC_GPU}\"\n"
        ),
    );
    start_service_on(
        bus,
        &passthrough_topology(),
        &["--profiles-dir", dir.to_str().unwrap()],
    )
    .expect("mdev-manager")
}

#[tokio::test(flavor = "multi_thread")]
async fn forced_passthrough_is_refused_naming_the_member_then_proceeds_with_force() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = t400_service(&bus);

    // Without force: InUse naming the member, its driver and why; nothing bound.
    let output = vgpuctl(&bus, None, &["create", "t400"]);
    assert_eq!(output.status.code(), Some(6), "{}", stderr_of(&output));
    let message = stderr_of(&output);
    for needle in [NIC, "igb", "network controller", "force"] {
        assert!(message.contains(needle), "{needle}: {message}");
    }
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"])),
        serde_json::json!([])
    );

    // A claim without force is refused the same way; with force it binds the whole group.
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.unwrap();
    let device = |force: bool| {
        HashMap::from([
            (device_key::KIND, Variant::from("passthrough")),
            (device_key::PCI_ADDRESS, Variant::from(NIC_GPU)),
            (device_key::FORCE, Variant::from(force)),
        ])
    };
    const VM: &str = "3d1f0c2e-5a6b-4c7d-8e9f-0a1b2c3d4e07";
    let error = manager
        .prepare_domain("vm", VM, vec![device(false)], HashMap::new())
        .await
        .unwrap_err();
    let error = dbus_api::ClientError::from(error);
    assert_eq!(error.kind(), Some(ErrorKind::InUse), "{error}");
    assert!(error.to_string().contains(NIC), "{error}");
    let claimed = manager
        .prepare_domain("vm", VM, vec![device(true)], HashMap::new())
        .await
        .expect("forced claim");
    assert_eq!(claimed.len(), 1);
    let list = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    let uuid = list[0]["uuid"].as_str().unwrap().to_string();
    let shown = instance_json(&bus, &uuid);
    assert_eq!(shown["kind"], "passthrough");
    assert_eq!(shown["holder"], "vm");
    assert_eq!(shown["group_members"], serde_json::json!([NIC_GPU, NIC]));
    manager
        .release_domain("vm", VM, HashMap::new())
        .await
        .expect("release");
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"])),
        serde_json::json!([])
    );

    // vgpuctl create --force: the same profile now proceeds.
    let output = vgpuctl(
        &bus,
        None,
        &["--json", "create", "t400", "--force", "--autostart"],
    );
    let uuid = created_uuids(&output).remove(0);
    let shown = instance_json(&bus, &uuid);
    assert_eq!(shown["active"], true);
    assert_eq!(shown["group_members"], serde_json::json!([NIC_GPU, NIC]));
    // The instance remembers it was forced: stopping and starting it (what reconcile does for
    // autostart after a reboot) takes the group again without being asked.
    let output = vgpuctl(&bus, None, &["stop", &uuid]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let shown = instance_json(&bus, &uuid);
    assert_eq!(shown["active"], false);
    assert_eq!(shown["group_members"], serde_json::json!([]));
    let output = vgpuctl(&bus, None, &["start", &uuid]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let shown = instance_json(&bus, &uuid);
    assert_eq!(shown["active"], true);
    assert_eq!(shown["group_members"], serde_json::json!([NIC_GPU, NIC]));
    let output = vgpuctl(&bus, None, &["destroy", &uuid]);
    assert!(output.status.success(), "{}", stderr_of(&output));
}

#[tokio::test(flavor = "multi_thread")]
async fn passthrough_xml_has_one_unmanaged_hostdev_per_bound_function() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = start_service_on(&bus, &passthrough_topology(), &[]).expect("mdev-manager");
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.unwrap();
    manager
        .prepare_domain(
            "gaming",
            "3d1f0c2e-5a6b-4c7d-8e9f-0a1b2c3d4e08",
            vec![HashMap::from([
                (device_key::KIND, Variant::from("passthrough")),
                (device_key::PCI_ADDRESS, Variant::from("0000:41:00.0")),
            ])],
            HashMap::new(),
        )
        .await
        .expect("claim the GPU");
    let list = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    let uuid = list[0]["uuid"].as_str().unwrap().to_string();
    // The GPU and its HDMI audio function; the bridge 0000:40:00.0 stays with pcieport.
    assert_eq!(
        instance_json(&bus, &uuid)["group_members"],
        serde_json::json!(["0000:41:00.0", "0000:41:00.1"])
    );
    let output = vgpuctl(&bus, None, &["xml", &uuid]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    // The same golden file as the generator's own test: one generator, one format.
    let golden = repo_root().join("dbus-api/tests/golden/hostdev-passthrough-group.xml");
    let expected = std::fs::read_to_string(&golden).unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), expected);
}

/// Runs the daemon with `config` as its config file; it must refuse to start.
fn refused_config(dir: &Path, config: &str) -> String {
    let path = dir.join("mdev-manager.toml");
    std::fs::write(&path, config).unwrap();
    let output = Command::new(workspace_binary("mdev-manager"))
        .arg("--simulate")
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--config")
        .arg(&path)
        // No bus: the config is checked before the daemon connects to one.
        .env("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/bus")
        .output()
        .expect("run mdev-manager");
    assert!(!output.status.success(), "started with {config:?}");
    let message = stderr_of(&output);
    assert!(message.contains(&path.display().to_string()), "{message}");
    message
}

#[test]
fn daemon_refuses_a_config_file_with_bad_values_naming_file_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    for (config, key, value) in [
        ("placement = \"scatter\"\n", "placement", "scatter"),
        ("numa_node = -2\n", "numa_node", "-2"),
        ("numa_strict = true\n", "numa_strict", "numa_node"),
        (
            "nvidia_mixed_mode = [\"0000:3b:00.0\", \"0000:3b:00\"]\n",
            "nvidia_mixed_mode",
            "0000:3b:00",
        ),
        ("placement = 3\n", "placement", "3"),
    ] {
        let message = refused_config(dir.path(), config);
        assert!(message.contains(key), "{config}: {message}");
        assert!(message.contains(value), "{config}: {message}");
    }
}

/// polkit: `force` is its own action. The packaged example rule (a group may manage vGPUs
/// without a password) leaves it out, so a member may create but not force; outsiders are
/// asked for an administrator for both.
#[test]
fn force_needs_its_own_polkit_action_which_the_example_group_rule_does_not_grant() {
    use e2e_tests::bus::{
        install_polkit_actions, packaging_file, start_polkitd, wait_for_manage_grant,
        InstalledFile, TestUser,
    };
    if !is_root() {
        panic!("this test needs root (it creates users and installs polkit files)");
    }
    // polkitd reads action files only at start; another test may have installed them.
    let _actions = install_polkit_actions();
    let bus = TestBus::start().expect("dbus-daemon");
    let _polkitd = start_polkitd(&bus).expect("polkitd");
    let _service = t400_service(&bus);
    let suffix = std::process::id() % 100_000;
    let group = format!("mdevfg{suffix}");
    let member = TestUser::create(&format!("mdevfm{suffix}"), Some(&group)).expect("useradd");

    // The packaged example rule, for this test's group instead of "vgpu".
    let rule = std::fs::read_to_string(packaging_file("polkit/50-mdev-manager-vgpu-group.rules"))
        .unwrap()
        .replace("isInGroup(\"vgpu\")", &format!("isInGroup(\"{group}\")"));
    assert!(
        rule.contains(&group),
        "the example rule names its group as expected"
    );
    let _rule = InstalledFile::install(
        format!("/etc/polkit-1/rules.d/49-mdev-e2e-force-{suffix}.rules"),
        rule.as_bytes(),
    )
    .expect("install the rule");
    wait_for_manage_grant(&bus, &member.name).expect("polkitd picked up the rule");
    let permissions = vgpuctl_json(&vgpuctl(
        &bus,
        Some(&member.name),
        &["--json", "permissions"],
    ));
    assert_eq!(
        permissions["org.mdevmanager.vgpu1.force"], "auth",
        "{permissions}"
    );

    // The member gets past manage-instances (the engine's InUse refusal) but not past force.
    let output = vgpuctl(&bus, Some(&member.name), &["--no-ask", "create", "t400"]);
    assert_eq!(output.status.code(), Some(6), "{}", stderr_of(&output));
    let output = vgpuctl(
        &bus,
        Some(&member.name),
        &["--no-ask", "create", "t400", "--force"],
    );
    assert_eq!(output.status.code(), Some(5), "{}", stderr_of(&output));
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"])),
        serde_json::json!([])
    );
    // root is let through.
    let created = vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "t400", "--force"],
    ));
    assert_eq!(created.as_array().unwrap().len(), 1);
}

/// The config file's keys reach the engine: `placement = "spread"` is the default of a create
/// that says nothing (and an option still wins), `nvidia_mixed_mode` lifts the one-size rule
/// on the T4 of the default topology.
#[test]
fn config_file_placement_and_mixed_mode_are_the_defaults() {
    let bus = TestBus::start().expect("dbus-daemon");
    let dir = profiles(&bus, SIM_SMALL);
    let config = bus.dir().join("mdev-manager.toml");
    std::fs::write(&config, "placement = \"spread\"\n").unwrap();
    let service = start_service_on(
        &bus,
        "scale",
        &[
            "--profiles-dir",
            dir.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
    )
    .expect("mdev-manager");
    let a = created_uuids(&vgpuctl(&bus, None, &["--json", "create", "sim-small"]));
    let b = created_uuids(&vgpuctl(&bus, None, &["--json", "create", "sim-small"]));
    assert_ne!(
        parent_of(&bus, &a[0]),
        parent_of(&bus, &b[0]),
        "spread by the config"
    );
    let c = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "sim-small", "--placement", "pack"],
    ));
    let c_parent = parent_of(&bus, &c[0]);
    assert!(
        c_parent == parent_of(&bus, &a[0]) || c_parent == parent_of(&bus, &b[0]),
        "the option packs onto a used parent: {c_parent}"
    );
    drop(service);

    // The default topology's T4 runs one vGPU size at a time unless its mixed mode is on.
    let t4 = "0000:3b:00.0";
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = start_service_on(&bus, "default", &[]).expect("mdev-manager");
    vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "nvidia-t4-2q", "--parent", t4],
    ));
    let output = vgpuctl(&bus, None, &["create", "nvidia-t4-4q", "--parent", t4]);
    assert_eq!(output.status.code(), Some(4), "{}", stderr_of(&output));
    assert!(
        stderr_of(&output).contains("T4-2Q"),
        "{}",
        stderr_of(&output)
    );
    drop(_service);

    let bus = TestBus::start().expect("dbus-daemon");
    let config = bus.dir().join("mdev-manager.toml");
    std::fs::write(&config, format!("nvidia_mixed_mode = [\"{t4}\"]\n")).unwrap();
    let _service = start_service_on(&bus, "default", &["--config", config.to_str().unwrap()])
        .expect("mdev-manager");
    vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "nvidia-t4-2q", "--parent", t4],
    ));
    let output = vgpuctl(&bus, None, &["create", "nvidia-t4-4q", "--parent", t4]);
    // Placement no longer applies the one-size rule; what is left is the parent's own
    // capacity (the simulated T4 reports no room for a 4Q next to a 2Q).
    assert!(
        output.status.success() || !stderr_of(&output).contains("T4-2Q"),
        "mixed mode lifts the one-size rule: {}",
        stderr_of(&output)
    );
}
