//! The service as a separate process on a private system-like bus (real dbus-daemon, Debian's
//! system bus config with the project's policy), driven with `vgpuctl` and proxies.

use std::time::Duration;

use dbus_api::names::{interface, BUS_NAME, MANAGER_PATH};
use dbus_api::{path, ClientError, ErrorKind};
use e2e_tests::bus::{
    bus_with_service, created_uuids, stderr_of, vgpuctl, vgpuctl_json, wait_name_released,
};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn running_service_matches_the_published_introspection() {
    let (bus, _service) = bus_with_service();
    let connection = bus.connect().await;
    let published = dbus_api::interface_blocks(dbus_api::INTROSPECTION_XML);
    let mut seen = std::collections::BTreeSet::new();
    for object in [
        MANAGER_PATH.to_string(),
        path::parent_path("0000:4b:00.0").to_string(),
        path::mdev_type_path("0000:3b:00.0", "nvidia-231").to_string(),
        path::profile_path("nvidia-t4-2q").to_string(),
    ] {
        let proxy = zbus::fdo::IntrospectableProxy::builder(&connection)
            .destination(BUS_NAME)
            .path(object.as_str())
            .build()
            .await
            .unwrap();
        let xml = proxy.introspect().await.expect("Introspect");
        for (name, block) in dbus_api::interface_blocks(&xml) {
            if !name.starts_with("org.mdevmanager.") {
                continue;
            }
            assert_eq!(
                published.get(&name),
                Some(&block),
                "{name} on {object} differs from dbus-api/interface/org.mdevmanager.VGpu1.xml"
            );
            seen.insert(name);
        }
    }
    for name in [
        interface::MANAGER,
        interface::PARENT,
        interface::SRIOV,
        interface::MDEV_TYPE,
        interface::PROFILE,
    ] {
        assert!(
            seen.contains(name),
            "{name} was not found on the running service"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn create_list_show_destroy_with_vgpuctl_and_events_in_order() {
    let (bus, _service) = bus_with_service();

    let parents = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "parents"]));
    let t4 = parents
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "0000:3b:00.0")
        .expect("the simulated T4 is listed");
    assert_eq!(t4["vendor_id"], 0x10de);
    assert_eq!(t4["modes"], serde_json::json!(["mdev"]));
    let types = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "types", "0000:3b:00.0"]));
    let t4_2q = types
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "nvidia-231")
        .expect("T4-2Q type");
    let available_before = t4_2q["available_instances"].as_u64().unwrap();

    // Follow the signals with vgpuctl itself while creating and destroying.
    let mut events = std::process::Command::new(e2e_tests::bus::workspace_binary("vgpuctl"))
        .args(["--json", "events"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("vgpuctl events");
    // It says on stderr when its match rule is in place.
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(events.stderr.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert!(ready.starts_with("following"), "{ready}");
    let (sender, received) = std::sync::mpsc::channel::<Value>();
    let stdout = events.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { break };
            let event = serde_json::from_str(&line).expect("one JSON object per line");
            if sender.send(event).is_err() {
                break;
            }
        }
    });

    let created = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "nvidia-t4-2q", "--count", "2"],
    ));
    assert_eq!(created.len(), 2);

    let list = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    for uuid in &created {
        let record = list
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["uuid"] == uuid.as_str())
            .unwrap_or_else(|| panic!("{uuid} listed"));
        assert_eq!(record["profile"], "nvidia-t4-2q");
        assert_eq!(record["type"], "nvidia-231");
        assert_eq!(record["active"], true);
        assert_eq!(record["owner"], "created");
    }
    let shown = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "show", &created[0]]));
    assert_eq!(shown["uuid"], created[0].as_str());
    let xml = vgpuctl(&bus, None, &["xml", &created[0]]);
    let xml = String::from_utf8_lossy(&xml.stdout);
    assert!(xml.contains(&format!("<address uuid='{}'/>", created[0])));
    // libvirt's mdev hostdev has no `managed` attribute (that is for PCI hostdevs only).
    assert!(
        xml.starts_with("<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"),
        "{xml}"
    );
    let types = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "types", "0000:3b:00.0"]));
    let after = types
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "nvidia-231")
        .unwrap()["available_instances"]
        .as_u64()
        .unwrap();
    assert_eq!(after + 2, available_before, "capacity went down by two");

    let destroyed = vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &["--json", "destroy", &created[0], &created[1]],
    ));
    assert_eq!(destroyed["destroyed"].as_array().unwrap().len(), 2);
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"])),
        serde_json::json!([])
    );

    // Collect what vgpuctl events saw until both removals arrived, then stop it.
    let mut lines: Vec<Value> = Vec::new();
    let removal_seen = |lines: &[Value], uuid: &str| {
        let object = path::mdev_instance_path(uuid).to_string();
        lines
            .iter()
            .any(|e| e["event"] == "removed" && e["object"] == object.as_str())
    };
    while !created.iter().all(|u| removal_seen(&lines, u)) {
        match received.recv_timeout(Duration::from_secs(30)) {
            Ok(event) => lines.push(event),
            Err(_) => panic!("removals not announced; events so far: {lines:#?}"),
        }
    }
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe {
        libc::kill(events.id() as i32, libc::SIGTERM);
    }
    let _ = events.wait();
    let _ = reader.join();
    let position = |event: &str, uuid: &str| {
        let object = path::mdev_instance_path(uuid).to_string();
        lines
            .iter()
            .position(|e| e["event"] == event && e["object"] == object.as_str())
            .unwrap_or_else(|| panic!("no {event} for {uuid} in {lines:#?}"))
    };
    for uuid in &created {
        let added = position("added", uuid);
        let removed = position("removed", uuid);
        assert!(added < removed, "added before removed for {uuid}");
        let added_event = &lines[added];
        assert!(added_event["interfaces"]
            .as_array()
            .unwrap()
            .contains(&Value::from(interface::INSTANCE)));
    }
    // Capacity changes are announced too.
    let type_object = path::mdev_type_path("0000:3b:00.0", "nvidia-231").to_string();
    assert!(lines.iter().any(|e| e["event"] == "changed"
        && e["object"] == type_object.as_str()
        && e["properties"].get("AvailableInstances").is_some()));
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_have_typed_names_one_line_messages_and_distinct_exit_codes() {
    let (bus, _service) = bus_with_service();

    let missing = "0b7f4c6e-1a2b-4c3d-8e9f-001122334455";
    let output = vgpuctl(&bus, None, &["destroy", missing]);
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NotFound.exit_code() as i32)
    );
    assert!(
        stderr_of(&output).contains(missing),
        "{}",
        stderr_of(&output)
    );
    assert_eq!(stderr_of(&output).trim().lines().count(), 1);

    let output = vgpuctl(&bus, None, &["create", "no-such-profile"]);
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NotFound.exit_code() as i32),
        "{}",
        stderr_of(&output)
    );
    assert!(
        stderr_of(&output).contains("no-such-profile"),
        "{}",
        stderr_of(&output)
    );

    // The T4 has room for one T4-16C; a second is NoCapacity and the batch creates nothing.
    let output = vgpuctl(&bus, None, &["create", "nvidia-t4-16c", "--count", "2"]);
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NoCapacity.exit_code() as i32),
        "{}",
        stderr_of(&output)
    );
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"])),
        serde_json::json!([])
    );

    // A typed error name on the wire, not org.freedesktop.DBus.Error.Failed.
    let connection = bus.connect().await;
    let manager = dbus_api::proxy::ManagerProxy::new(&connection)
        .await
        .unwrap();
    let mut options = std::collections::HashMap::new();
    options.insert("bogus", zbus::Variant::from(1u32));
    match manager.create_instances("nvidia-t4-2q", options).await {
        Err(zbus::Error::MethodError(name, message, _)) => {
            assert_eq!(name.as_str(), "org.mdevmanager.VGpu1.Error.InvalidArgs");
            assert!(message.unwrap_or_default().contains("bogus"));
        }
        other => panic!("expected InvalidArgs, got {other:?}"),
    }
    let error = ClientError::from(
        manager
            .create_instances("no-such-profile", Default::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(error.kind(), Some(ErrorKind::NotFound));
}

#[tokio::test(flavor = "multi_thread")]
async fn sriov_job_completes_and_sigterm_stops_the_service() {
    let (bus, service) = bus_with_service();

    let output = vgpuctl(
        &bus,
        None,
        &["--json", "sriov", "0000:4b:00.0", "--vfs", "32"],
    );
    let result = vgpuctl_json(&output);
    assert_eq!(result["result"], "done", "{result}");
    assert!(result["job"]
        .as_str()
        .unwrap()
        .starts_with("/org/mdevmanager/VGpu1/jobs/"));
    let parents = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "parents"]));
    let h200 = parents
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "0000:4b:00.0")
        .unwrap();
    assert_eq!(h200["sriov"]["num_vfs"], 32);
    assert_eq!(h200["sriov"]["vfs"].as_array().unwrap().len(), 32);

    // A parent without SR-IOV is NotFound for `sriov`, naming it.
    let output = vgpuctl(&bus, None, &["sriov", "0000:3b:00.0", "--vfs", "1"]);
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NotFound.exit_code() as i32)
    );
    assert!(stderr_of(&output).contains("0000:3b:00.0"));

    let exit = service.terminate().expect("stop the service");
    assert!(
        exit.status.success(),
        "clean exit on SIGTERM: {}",
        exit.status
    );
    wait_name_released(&bus).expect("name released");
    let output = vgpuctl(&bus, None, &["list"]);
    assert_eq!(
        output.status.code(),
        Some(69),
        "service unavailable: {}",
        stderr_of(&output)
    );
}
