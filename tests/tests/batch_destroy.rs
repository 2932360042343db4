//! `Manager.DestroyInstances` over a real bus: several instances in one call (one signal per
//! instance), all-or-nothing checking (an unknown UUID destroys nothing and is named), and
//! `vgpuctl destroy` with several UUIDs going through it.

use std::collections::{BTreeSet, HashMap};

use dbus_api::names::interface;
use dbus_api::proxy::ManagerProxy;
use dbus_api::{path, ClientError, ErrorKind};
use e2e_tests::bus::{bus_with_service, object_manager, vgpuctl, vgpuctl_json, Process, TestBus};
use futures_util::StreamExt;
use zbus::fdo::ObjectManagerProxy;

/// The service on a private bus, with a client's `Manager` and `ObjectManager` proxies.
async fn service_and_proxies() -> (
    TestBus,
    Process,
    ManagerProxy<'static>,
    ObjectManagerProxy<'static>,
) {
    let (bus, service) = bus_with_service();
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.expect("Manager proxy");
    let objects = object_manager(&connection).await;
    (bus, service, manager, objects)
}

/// The UUIDs of every exported Instance object.
async fn instance_uuids(objects: &ObjectManagerProxy<'_>) -> BTreeSet<String> {
    objects
        .get_managed_objects()
        .await
        .expect("GetManagedObjects")
        .into_values()
        .filter_map(|interfaces| {
            let properties = interfaces.get(interface::INSTANCE)?;
            let uuid = properties.get("Uuid")?;
            String::try_from(uuid.clone()).ok()
        })
        .collect()
}

async fn create(manager: &ManagerProxy<'_>, count: u32) -> Vec<String> {
    let mut options = HashMap::new();
    options.insert("count", zbus::zvariant::Variant::from(count));
    let paths = manager
        .create_instances("nvidia-t4-2q", options)
        .await
        .expect("CreateInstances");
    assert_eq!(paths.len(), count as usize);
    let all = e2e_tests::bus::managed_objects(manager.inner().connection()).await;
    paths
        .iter()
        .map(|p| {
            let properties = &all[p][interface::INSTANCE];
            String::try_from(properties["Uuid"].clone()).expect("Uuid is a string")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn destroy_instances_removes_each_once_and_announces_each_once() {
    let (_bus, _service, manager, objects) = service_and_proxies().await;
    let created = create(&manager, 3).await;
    let kept = create(&manager, 1).await;

    let mut removed = objects
        .receive_interfaces_removed()
        .await
        .expect("subscribe to InterfacesRemoved");
    let uuids: Vec<&str> = created.iter().map(String::as_str).collect();
    manager
        .destroy_instances(&uuids, HashMap::new())
        .await
        .expect("DestroyInstances");
    // Every signal the service sent before answering this later call has arrived by now (one
    // sender's messages keep their order), so what is queued is everything it announced.
    let left = instance_uuids(&objects).await;
    let mut announced: Vec<String> = Vec::new();
    while let Some(Some(signal)) = futures_util::FutureExt::now_or_never(removed.next()) {
        let args = signal.args().expect("InterfacesRemoved arguments");
        if args
            .interfaces()
            .iter()
            .any(|name| name.as_str() == interface::INSTANCE)
        {
            announced.push(args.object_path().to_string());
        }
    }
    announced.sort();
    let mut expected: Vec<String> = created
        .iter()
        .map(|uuid| path::mdev_instance_path(uuid).to_string())
        .collect();
    expected.sort();
    assert_eq!(
        announced, expected,
        "one InterfacesRemoved per destroyed instance"
    );
    assert_eq!(left, kept.iter().cloned().collect::<BTreeSet<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn destroy_instances_with_an_unknown_uuid_names_it_and_destroys_nothing() {
    let (_bus, _service, manager, objects) = service_and_proxies().await;
    let created = create(&manager, 2).await;

    let unknown = "6b0c1e7a-0000-4000-8000-00000000beef";
    let uuids = [created[0].as_str(), unknown, created[1].as_str()];
    let error = ClientError::from(
        manager
            .destroy_instances(&uuids, HashMap::new())
            .await
            .expect_err("an unknown UUID fails the batch"),
    );
    assert_eq!(error.kind(), Some(ErrorKind::NotFound), "{error}");
    assert!(error.to_string().contains(unknown), "{error}");
    assert_eq!(
        instance_uuids(&objects).await,
        created.iter().cloned().collect::<BTreeSet<_>>(),
        "nothing was destroyed"
    );

    // A UUID named twice is refused the same way, naming it.
    let twice = [created[0].as_str(), created[0].as_str()];
    let error = ClientError::from(
        manager
            .destroy_instances(&twice, HashMap::new())
            .await
            .expect_err("a repeated UUID fails the batch"),
    );
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs), "{error}");
    assert!(error.to_string().contains(&created[0]), "{error}");
    assert_eq!(instance_uuids(&objects).await.len(), 2);

    // And an empty list is not a silent no-op.
    let error = ClientError::from(
        manager
            .destroy_instances(&[], HashMap::new())
            .await
            .expect_err("no UUIDs"),
    );
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn vgpuctl_destroy_of_several_uuids_destroys_them_all() {
    let (bus, _service, manager, objects) = service_and_proxies().await;
    let created = create(&manager, 3).await;

    let mut args = vec!["--json", "destroy"];
    args.extend(created[..2].iter().map(String::as_str));
    let printed = vgpuctl_json(&vgpuctl(&bus, None, &args));
    assert_eq!(
        printed["destroyed"],
        serde_json::json!([created[0], created[1]])
    );
    assert_eq!(
        instance_uuids(&objects).await,
        BTreeSet::from([created[2].clone()])
    );
}
