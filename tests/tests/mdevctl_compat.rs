//! `mdev-manager-mdevctl` (the mdevctl-compatible command) as a process against the service on
//! a private bus: what libvirt runs (`list --dumpjson [--defined]`, `start --uuid=U`,
//! `stop -u U`, `modify --uuid U --auto|--manual`, the `modify ... --help` probe, `undefine`)
//! reaches the service's instances, and listings print mdevctl 1.4's formats of the service's
//! state. The formats themselves are unit-tested in the crate (`format.rs`).

use std::io::Write;
use std::process::{Command, Output, Stdio};

use e2e_tests::bus::{
    bus_with_service, created_uuids, package_binary, vgpuctl, vgpuctl_json, TestBus,
};

/// Runs the compatible command with `args` (and `stdin` on its standard input).
fn mdevctl(bus: &TestBus, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(package_binary("mdevctl-compat", "mdev-manager-mdevctl"))
        .args(args)
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mdev-manager-mdevctl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child
        .wait_with_output()
        .expect("wait for mdev-manager-mdevctl")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "mdevctl failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

/// The service's record of `uuid` from `vgpuctl --json list`, `None` when it is gone.
fn record(bus: &TestBus, uuid: &str) -> Option<serde_json::Value> {
    let list = vgpuctl_json(&vgpuctl(bus, None, &["--json", "list"]));
    list.as_array()
        .expect("vgpuctl list is an array")
        .iter()
        .find(|i| i["uuid"] == uuid)
        .cloned()
}

fn missing_uuid() -> &'static str {
    "00000000-0000-4000-8000-000000000001"
}

fn field(record: &serde_json::Value, key: &str) -> String {
    record[key].as_str().unwrap_or_default().to_string()
}

#[test]
fn listings_print_the_services_instances_in_mdevctl_formats() {
    let (bus, _service) = bus_with_service();
    let transient =
        created_uuids(&vgpuctl(&bus, None, &["--json", "create", "nvidia-t4-2q"])).remove(0);
    let defined = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "--autostart", "nvidia-t4-2q"],
    ))
    .remove(0);
    let t = record(&bus, &transient).expect("transient instance listed");
    let d = record(&bus, &defined).expect("defined instance listed");
    let (t_parent, t_type) = (field(&t, "parent"), field(&t, "type"));
    let (d_parent, d_type) = (field(&d, "parent"), field(&d, "type"));

    let active = stdout(&mdevctl(&bus, &["list"], ""));
    assert!(
        active.contains(&format!("{transient} {t_parent} {t_type} manual\n")),
        "{active}"
    );
    assert!(
        active.contains(&format!("{defined} {d_parent} {d_type} auto (defined)\n")),
        "{active}"
    );

    let definitions = stdout(&mdevctl(&bus, &["list", "--defined"], ""));
    assert_eq!(
        definitions,
        format!("{defined} {d_parent} {d_type} auto (active)\n")
    );

    // libvirt's listing: one outer object of parents, each an array of {uuid: config}.
    let json = stdout(&mdevctl(&bus, &["list", "--dumpjson"], ""));
    assert!(!json.ends_with('\n'), "mdevctl prints no trailing newline");
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("list --dumpjson is JSON");
    let outer = parsed.as_array().expect("an array");
    assert_eq!(outer.len(), 1, "exactly one outer object: {json}");
    let config = outer[0][&d_parent]
        .as_array()
        .expect("the parent's array")
        .iter()
        .find_map(|child| child.get(&defined))
        .unwrap_or_else(|| panic!("{defined} under {d_parent}: {json}"));
    assert_eq!(config["mdev_type"], d_type.as_str());
    assert_eq!(config["start"], "auto");

    // One device by UUID prints its bare definition, keys in mdevctl's order.
    let single = stdout(&mdevctl(
        &bus,
        &[
            "list",
            "--dumpjson",
            "--defined",
            &format!("--uuid={defined}"),
        ],
        "",
    ));
    assert_eq!(
        single,
        format!("{{\n  \"mdev_type\": \"{d_type}\",\n  \"start\": \"auto\",\n  \"attrs\": []\n}}")
    );
    let nothing = stdout(&mdevctl(
        &bus,
        &["list", "--dumpjson", "--defined", "-u", &transient],
        "",
    ));
    assert_eq!(nothing, "[]");

    // Types: the parent's section lists the instances' type.
    let types = stdout(&mdevctl(&bus, &["types", "--parent", &d_parent], ""));
    assert!(types.starts_with(&format!("{d_parent}\n")), "{types}");
    assert!(
        types.contains(&format!("\n  {d_type}\n    Available instances: ")),
        "{types}"
    );
    let types_json: serde_json::Value =
        serde_json::from_str(&stdout(&mdevctl(&bus, &["types", "--dumpjson"], ""))).unwrap();
    assert!(types_json[0][&d_parent].is_array(), "{types_json}");
    assert_eq!(
        stdout(&mdevctl(&bus, &["types", "--parent=no-such-parent"], "")),
        ""
    );
}

#[test]
fn libvirts_lifecycle_commands_change_the_services_instances() {
    let (bus, _service) = bus_with_service();
    let defined = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "--autostart", "nvidia-t4-2q"],
    ))
    .remove(0);
    let transient =
        created_uuids(&vgpuctl(&bus, None, &["--json", "create", "nvidia-t4-2q"])).remove(0);
    let parent = field(&record(&bus, &defined).unwrap(), "parent");
    let mdev_type = field(&record(&bus, &defined).unwrap(), "type");

    // nodedev-update's probe must exit 0.
    let probe = mdevctl(
        &bus,
        &["modify", "--defined", "--live", "--jsonfile", "b", "--help"],
        "",
    );
    assert!(probe.status.success(), "{probe:?}");

    // nodedev-destroy: stop keeps the definition.
    stdout(&mdevctl(&bus, &["stop", "-u", &defined], ""));
    let stopped = record(&bus, &defined).expect("definition kept");
    assert_eq!(stopped["active"], false);
    assert_eq!(stopped["persistent"], true);

    // nodedev-autostart --disable, then nodedev-start.
    stdout(&mdevctl(
        &bus,
        &["modify", "--uuid", &defined, "--manual"],
        "",
    ));
    assert_eq!(record(&bus, &defined).unwrap()["autostart"], false);
    stdout(&mdevctl(&bus, &["start", &format!("--uuid={defined}")], ""));
    assert_eq!(record(&bus, &defined).unwrap()["active"], true);

    // nodedev-update of the definition through stdin: same type, start auto.
    let update = format!(r#"{{"mdev_type":"{mdev_type}","start":"auto"}}"#);
    stdout(&mdevctl(
        &bus,
        &[
            "modify",
            &format!("--parent={parent}"),
            "--jsonfile=/dev/stdin",
            &format!("--uuid={defined}"),
            "--defined",
        ],
        &update,
    ));
    assert_eq!(record(&bus, &defined).unwrap()["autostart"], true);

    // define of a running transient device gives it a definition.
    stdout(&mdevctl(&bus, &["define", "--uuid", &transient], ""));
    assert_eq!(record(&bus, &transient).unwrap()["persistent"], true);

    // undefine of a running device drops only the definition (it keeps running, transient);
    // of a stopped one, forgets the instance.
    stdout(&mdevctl(
        &bus,
        &["undefine", &format!("--uuid={transient}")],
        "",
    ));
    let undefined = record(&bus, &transient).expect("the running device stays");
    assert_eq!(undefined["persistent"], false);
    assert_eq!(undefined["active"], true);
    stdout(&mdevctl(&bus, &["stop", &format!("--uuid={defined}")], ""));
    stdout(&mdevctl(
        &bus,
        &["undefine", &format!("--uuid={defined}")],
        "",
    ));
    assert!(
        record(&bus, &defined).is_none(),
        "undefined instance still listed"
    );
    let again = mdevctl(&bus, &["undefine", &format!("--uuid={defined}")], "");
    assert_eq!(again.status.code(), Some(1), "{again:?}");

    // Unknown devices: exit 1, the device named.
    let missing = missing_uuid();
    for args in [
        vec!["stop".to_string(), format!("--uuid={missing}")],
        vec!["start".to_string(), format!("--uuid={missing}")],
        vec![
            "modify".to_string(),
            format!("--uuid={missing}"),
            "--auto".to_string(),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = mdevctl(&bus, &args, "");
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains(missing),
            "{args:?}: {output:?}"
        );
    }
    // A usage error exits 2, as mdevctl's.
    assert_eq!(mdevctl(&bus, &["stop"], "").status.code(), Some(2));

    // nodedev-create: a transient device from libvirt's JSON on stdin; its UUID on stdout.
    let create = mdevctl(
        &bus,
        &[
            "start",
            &format!("--parent={parent}"),
            "--jsonfile=/dev/stdin",
        ],
        &update,
    );
    let created = stdout(&create).trim().to_string();
    let made = record(&bus, &created).expect("the created device is the service's instance");
    assert_eq!(field(&made, "type"), mdev_type);
    assert_eq!(field(&made, "parent"), parent);
    assert_eq!(made["active"], true);
    assert_eq!(made["persistent"], false);

    // nodedev-define with a UUID: a stopped definition, nothing printed.
    let chosen = "5a1c0de0-0000-4000-8000-00000000d0fe";
    let define = mdevctl(
        &bus,
        &[
            "define",
            &format!("--parent={parent}"),
            "--jsonfile=/dev/stdin",
            &format!("--uuid={chosen}"),
        ],
        &format!(r#"{{"mdev_type":"{mdev_type}","start":"manual"}}"#),
    );
    assert_eq!(stdout(&define), "");
    let defined_new = record(&bus, chosen).expect("defined instance");
    assert_eq!(defined_new["persistent"], true);
    assert_eq!(defined_new["active"], false);
    assert_eq!(defined_new["autostart"], false);
    let listed = stdout(&mdevctl(&bus, &["list", "--defined", "-u", chosen], ""));
    assert_eq!(listed, format!("{chosen} {parent} {mdev_type} manual\n"));

    // An unknown type: the service's refusal, exit 1, nothing printed.
    let bad = mdevctl(&bus, &["start", "-p", &parent, "-t", "no-such-type"], "");
    assert_eq!(bad.status.code(), Some(1));
    assert!(bad.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("no-such-type"),
        "{bad:?}"
    );

    // stop of a transient device removes it.
    let other =
        created_uuids(&vgpuctl(&bus, None, &["--json", "create", "nvidia-t4-2q"])).remove(0);
    stdout(&mdevctl(&bus, &["stop", "-u", &other], ""));
    assert!(record(&bus, &other).is_none());
}

#[test]
fn start_parent_mdevs_starts_the_parents_stopped_autostart_definitions() {
    let (bus, _service) = bus_with_service();
    let defined = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "--autostart", "nvidia-t4-2q"],
    ))
    .remove(0);
    let parent = field(&record(&bus, &defined).unwrap(), "parent");
    stdout(&mdevctl(&bus, &["stop", "-u", &defined], ""));
    assert_eq!(record(&bus, &defined).unwrap()["active"], false);
    stdout(&mdevctl(&bus, &["start-parent-mdevs", "0000:ff:1f.7"], ""));
    assert_eq!(
        record(&bus, &defined).unwrap()["active"],
        false,
        "another parent's call"
    );
    stdout(&mdevctl(&bus, &["start-parent-mdevs", &parent], ""));
    assert_eq!(record(&bus, &defined).unwrap()["active"], true);
}

/// `list --defined --dumpjson -u U`: the definition as mdevctl prints it.
fn definition_json(bus: &TestBus, uuid: &str) -> serde_json::Value {
    let text = stdout(&mdevctl(
        bus,
        &["list", "--defined", "--dumpjson", "-u", uuid],
        "",
    ));
    serde_json::from_str(&text).expect("a definition object")
}

#[test]
fn define_records_a_stopped_definition_without_taking_room_on_the_parent() {
    let (bus, _service) = bus_with_service();
    let first =
        created_uuids(&vgpuctl(&bus, None, &["--json", "create", "nvidia-t4-2q"])).remove(0);
    let parent = field(&record(&bus, &first).unwrap(), "parent");
    let mdev_type = field(&record(&bus, &first).unwrap(), "type");
    // Fill the type on that parent.
    let available = |bus: &TestBus| -> u64 {
        let text = stdout(&mdevctl(
            bus,
            &["types", "--parent", &parent, "--dumpjson"],
            "",
        ));
        let types: serde_json::Value = serde_json::from_str(&text).expect("types JSON");
        types[0][&parent]
            .as_array()
            .expect("the parent's types")
            .iter()
            .find_map(|t| t.get(&mdev_type))
            .and_then(|t| t["available_instances"].as_u64())
            .expect("the type is listed")
    };
    let left = available(&bus);
    if left > 0 {
        let count = left.to_string();
        let fill = vgpuctl(
            &bus,
            None,
            &[
                "create",
                "nvidia-t4-2q",
                "--parent",
                &parent,
                "--count",
                &count,
            ],
        );
        assert!(fill.status.success(), "{fill:?}");
    }
    assert_eq!(available(&bus), 0);
    let before = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]))
        .as_array()
        .unwrap()
        .len();

    let chosen = "5a1c0de0-0000-4000-8000-00000000def1";
    let define = mdevctl(
        &bus,
        &[
            "define",
            "--parent",
            &parent,
            "--jsonfile",
            "/dev/stdin",
            "-u",
            chosen,
        ],
        &format!(
            r#"{{"mdev_type":"{mdev_type}","start":"auto","attrs":[{{"nvidia/vgpu_params":"frame_rate_limiter=0"}}]}}"#
        ),
    );
    assert_eq!(stdout(&define), "");
    let defined = record(&bus, chosen).expect("the definition is the service's instance");
    assert_eq!(defined["active"], false);
    assert_eq!(defined["persistent"], true);
    assert_eq!(defined["autostart"], true);
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]))
            .as_array()
            .unwrap()
            .len(),
        before + 1
    );
    assert_eq!(
        definition_json(&bus, chosen),
        serde_json::json!({"mdev_type": mdev_type, "start": "auto",
            "attrs": [{"nvidia/vgpu_params": "frame_rate_limiter=0"}]})
    );
    // Starting it needs the room the define did not take: the service says why.
    let start = mdevctl(&bus, &["start", "-u", chosen], "");
    assert_eq!(start.status.code(), Some(1), "{start:?}");
    assert_eq!(record(&bus, chosen).unwrap()["active"], false);
}

#[test]
fn attributes_are_added_deleted_and_listed_as_mdevctl_does() {
    let (bus, _service) = bus_with_service();
    let uuid = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "--autostart", "nvidia-t4-2q"],
    ))
    .remove(0);
    let parent = field(&record(&bus, &uuid).unwrap(), "parent");
    let mdev_type = field(&record(&bus, &uuid).unwrap(), "type");
    let modify = |extra: &[&str]| {
        let mut args = vec!["modify", "-u", uuid.as_str()];
        args.extend_from_slice(extra);
        mdevctl(&bus, &args, "")
    };
    stdout(&modify(&[
        "--addattr",
        "nvidia/vgpu_params",
        "--value",
        "a=1",
    ]));
    stdout(&modify(&[
        "--addattr=vendor/mode",
        "--value=fast",
        "--index=0",
    ]));
    assert_eq!(
        definition_json(&bus, &uuid)["attrs"],
        serde_json::json!([{"vendor/mode": "fast"}, {"nvidia/vgpu_params": "a=1"}])
    );
    // The definition's listing shows them; the running device's does not (mdevctl shows
    // those only from a callout script).
    let running = stdout(&mdevctl(&bus, &["list", "--verbose", "-u", &uuid], ""));
    assert_eq!(
        running,
        format!("{uuid} {parent} {mdev_type} auto (defined)\n")
    );
    let verbose = stdout(&mdevctl(
        &bus,
        &["list", "--defined", "--verbose", "-u", &uuid],
        "",
    ));
    assert_eq!(
        verbose,
        format!(
            "{uuid} {parent} {mdev_type} auto (active)\n  Attrs:\n    @{{0}}: {{\"vendor/mode\":\"fast\"}}\n    @{{1}}: {{\"nvidia/vgpu_params\":\"a=1\"}}\n"
        )
    );
    // A bad index: exit 1, the list in the message, nothing changed.
    let bad = modify(&["--delattr", "--index", "2"]);
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("Attribute index 2 is invalid"),
        "{bad:?}"
    );
    // A name the service refuses (a path out of the device): its message names it.
    let escape = modify(&["--addattr", "../remove", "--value", "1"]);
    assert_eq!(escape.status.code(), Some(1), "{escape:?}");
    assert!(
        String::from_utf8_lossy(&escape.stderr).contains("../remove"),
        "{escape:?}"
    );
    assert_eq!(
        definition_json(&bus, &uuid)["attrs"],
        serde_json::json!([{"vendor/mode": "fast"}, {"nvidia/vgpu_params": "a=1"}])
    );
    stdout(&modify(&["--delattr", "--index", "0"]));
    stdout(&modify(&["--delattr"]));
    assert_eq!(definition_json(&bus, &uuid)["attrs"], serde_json::json!([]));
    // Attributes belong to definitions: a transient device has none to change.
    let transient =
        created_uuids(&vgpuctl(&bus, None, &["--json", "create", "nvidia-t4-2q"])).remove(0);
    let refused = mdevctl(
        &bus,
        &["modify", "-u", &transient, "--addattr", "a", "--value", "1"],
        "",
    );
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains(&transient),
        "{refused:?}"
    );
}
