//! `Manager.ListInstances` and `Manager.ListTypes` (the one-reply listings `vgpuctl list` and
//! `vgpuctl types` use) against the ObjectManager walk, on the service as a process on a private
//! bus: same records, kept current when objects change, and `vgpuctl --json` output unchanged.

use std::collections::HashMap;

use dbus_api::names::option;
use dbus_api::proxy::{InstanceProxy, ManagerProxy};
use dbus_api::wire::{self, Snapshot};
use dbus_api::{ClientError, ErrorKind};
use e2e_tests::bus::{
    bus_with_service, created_uuids, managed_objects, vgpuctl, vgpuctl_json, TestBus,
};

/// What the ObjectManager walk (the way every client read the service before the listings)
/// yields now.
async fn walk(connection: &zbus::Connection) -> Snapshot {
    Snapshot::from_managed_objects(managed_objects(connection).await)
        .expect("every object has its properties")
}

async fn listed(
    manager: &ManagerProxy<'_>,
) -> (Vec<wire::InstanceRecord>, Vec<wire::MdevTypeRecord>) {
    let instances = manager
        .list_instances(HashMap::new())
        .await
        .expect("ListInstances");
    let types = manager.list_types(HashMap::new()).await.expect("ListTypes");
    (
        wire::instances_from_entries(instances),
        wire::types_from_entries(types),
    )
}

fn create(bus: &TestBus, args: &[&str]) -> Vec<String> {
    let mut all = vec!["--json", "create"];
    all.extend_from_slice(args);
    created_uuids(&vgpuctl(bus, None, &all))
}

/// The listings carry exactly the records of the walk, through creations, a claim, a property
/// change and a destroy (the service's prepared answer is dropped on every change).
#[tokio::test(flavor = "multi_thread")]
async fn listings_equal_the_object_manager_walk_as_objects_change() {
    let (bus, _service) = bus_with_service();
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.expect("Manager proxy");

    let (instances, types) = listed(&manager).await;
    let snapshot = walk(&connection).await;
    assert!(instances.is_empty());
    assert!(!types.is_empty(), "the simulated host has mdev types");
    assert_eq!(types, snapshot.types);

    let plain = create(&bus, &["nvidia-t4-2q", "--count", "3"]);
    let weighted = create(&bus, &["nvidia-t4-2q", "--autostart", "--weight", "200"]);
    let mut device = HashMap::new();
    device.insert("kind", zbus::Variant::from("mdev"));
    device.insert("profile", zbus::Variant::from("nvidia-t4-2q"));
    let claimed = manager
        .prepare_domain(
            "guest1",
            "6a0e1c1e-5d0b-4c8e-9a51-3f0a1b2c3d4e",
            vec![device],
            HashMap::new(),
        )
        .await
        .expect("PrepareDomain");
    assert_eq!(claimed.len(), 1);

    let (instances, types) = listed(&manager).await;
    let snapshot = walk(&connection).await;
    assert_eq!(instances.len(), 5);
    assert_eq!(instances, snapshot.instances);
    assert_eq!(types, snapshot.types);
    let record = instances
        .iter()
        .find(|i| i.uuid == weighted[0])
        .expect("the weighted instance is listed");
    assert!(record.autostart && record.persistent);
    assert_eq!(record.weight, 200);
    assert!(instances.iter().any(|i| i.holder == "guest1"));
    assert!(types.iter().any(|t| t.instances.len() == 5));

    // A property change and a destroy: the next listing shows both.
    let first = snapshot
        .instance(&plain[0])
        .expect("created instance")
        .object
        .clone();
    let proxy = |path: String| {
        InstanceProxy::builder(&connection)
            .path(path)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
    };
    proxy(first.clone())
        .await
        .expect("Instance proxy")
        .set_autostart(true, HashMap::new())
        .await
        .expect("SetAutostart");
    let second = snapshot
        .instance(&plain[1])
        .expect("created")
        .object
        .clone();
    proxy(second)
        .await
        .expect("Instance proxy")
        .destroy(HashMap::new())
        .await
        .expect("Destroy");

    let (instances, types) = listed(&manager).await;
    let snapshot = walk(&connection).await;
    assert_eq!(instances.len(), 4);
    assert!(!instances.iter().any(|i| i.uuid == plain[1]));
    assert!(
        instances
            .iter()
            .find(|i| i.object == first)
            .expect("still listed")
            .autostart
    );
    assert_eq!(instances, snapshot.instances);
    assert_eq!(types, snapshot.types);
}

/// `ListTypes` with `parent`: that parent's types (any case); an unknown parent is NotFound
/// naming it; unknown options are InvalidArgs naming the key.
#[tokio::test(flavor = "multi_thread")]
async fn list_types_parent_option_and_bad_arguments() {
    let (bus, _service) = bus_with_service();
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.expect("Manager proxy");
    let snapshot = walk(&connection).await;
    let parent = snapshot
        .parents
        .iter()
        .find(|p| !p.types.is_empty())
        .expect("a parent with mdev types");

    let mut options = HashMap::new();
    options.insert(
        option::PARENT,
        zbus::Variant::from(parent.name.to_ascii_uppercase()),
    );
    let types = wire::types_from_entries(manager.list_types(options).await.expect("ListTypes"));
    let expected: Vec<_> = snapshot
        .types
        .iter()
        .filter(|t| t.parent == parent.name)
        .cloned()
        .collect();
    assert_eq!(types, expected);

    let mut options = HashMap::new();
    options.insert(option::PARENT, zbus::Variant::from("0000:ff:1f.7"));
    let error = ClientError::from(manager.list_types(options).await.unwrap_err());
    assert_eq!(error.kind(), Some(ErrorKind::NotFound));
    assert!(error.to_string().contains("0000:ff:1f.7"), "{error}");

    let mut options = HashMap::new();
    options.insert("bogus", zbus::Variant::from(1u32));
    let error = ClientError::from(manager.list_instances(options).await.unwrap_err());
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs));
    assert!(error.to_string().contains("bogus"), "{error}");
}

/// `vgpuctl --json list` and `vgpuctl --json types [PARENT]` print exactly what they printed
/// when built from the walk (the documented format), and an unknown parent still exits with
/// NotFound naming it.
#[tokio::test(flavor = "multi_thread")]
async fn vgpuctl_json_output_is_the_walks_records() {
    let (bus, _service) = bus_with_service();
    create(&bus, &["nvidia-t4-2q", "--count", "2"]);
    create(&bus, &["nvidia-t4-2q", "--autostart", "--weight", "300"]);
    let connection = bus.connect().await;
    let snapshot = walk(&connection).await;

    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"])),
        serde_json::to_value(&snapshot.instances).unwrap()
    );
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "types"])),
        serde_json::to_value(&snapshot.types).unwrap()
    );
    let parent = &snapshot.types[0].parent;
    let expected: Vec<_> = snapshot
        .types
        .iter()
        .filter(|t| &t.parent == parent)
        .collect();
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "types", parent])),
        serde_json::to_value(&expected).unwrap()
    );
    // The field names are the documented ones.
    let listed = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    let first = listed[0].as_object().expect("an object per instance");
    for key in ["object", "uuid", "parent", "type", "active", "weight"] {
        assert!(first.contains_key(key), "missing {key}: {first:?}");
    }

    let output = vgpuctl(&bus, None, &["types", "0000:ff:1f.7"]);
    assert_eq!(
        output.status.code(),
        Some(ErrorKind::NotFound.exit_code() as i32)
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("0000:ff:1f.7"));
}
