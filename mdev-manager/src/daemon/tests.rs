//! Interface objects over a peer-to-peer connection (a socket pair, no bus): the service on
//! the simulated host, driven through the client proxies of `dbus-api`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dbus_api::names::{interface, option, BUS_NAME, ROOT_PATH};
use dbus_api::proxy::{InstanceProxy, ManagerProxy, SriovProxy};
use dbus_api::{path, ClientError, ErrorKind};
use futures_util::StreamExt;
use zbus::{Connection, Variant};

use super::auth::{AllowAll, Authorizer, DenyAll};
use super::{introspection_xml, Service};
use dbus_api::interface_blocks;
use mdev_engine::{CreateRequest, CreateTarget, DiskFiles, Engine, EngineConfig};
use mdev_sim::SimHost;

struct Fixture {
    _state: tempfile::TempDir,
    engine: Arc<Engine>,
    service: Arc<Service>,
    client: Connection,
    _server: Connection,
}

async fn fixture(authorizer: Arc<dyn Authorizer>) -> Fixture {
    fixture_on("default", authorizer).await
}

async fn fixture_on(topology: &str, authorizer: Arc<dyn Authorizer>) -> Fixture {
    fixture_with(topology, EngineConfig::default(), authorizer).await
}

async fn fixture_with(
    topology: &str,
    config: EngineConfig,
    authorizer: Arc<dyn Authorizer>,
) -> Fixture {
    let state = tempfile::tempdir().expect("temp dir");
    let host = SimHost::builtin(topology).expect("built-in topology");
    let engine = Arc::new(
        Engine::new(
            Arc::new(host),
            Arc::new(DiskFiles::new(state.path())),
            config,
        )
        .expect("engine"),
    );
    let service = Service::new(
        engine.clone(),
        authorizer,
        vec!["mdev".into(), "simulated".into()],
    );
    let (server_socket, client_socket) =
        std::os::unix::net::UnixStream::pair().expect("socket pair");
    let guid = zbus::Guid::generate();
    let server_builder = zbus::connection::Builder::unix_stream(server_socket)
        .server(guid)
        .p2p();
    let client_builder = zbus::connection::Builder::unix_stream(client_socket).p2p();
    let (server, client) =
        tokio::join!(service.serve(server_builder, false), client_builder.build());
    Fixture {
        _state: state,
        engine,
        service,
        client: client.expect("client connection"),
        _server: server.expect("service on the socket"),
    }
}

async fn managed_objects(client: &Connection) -> zbus::fdo::ManagedObjects {
    zbus::fdo::ObjectManagerProxy::builder(client)
        .destination(BUS_NAME)
        .path(ROOT_PATH)
        .build()
        .await
        .expect("object manager proxy")
        .get_managed_objects()
        .await
        .expect("GetManagedObjects")
}

fn create_mdev(engine: &Engine) -> String {
    engine
        .create(CreateRequest::new(CreateTarget::Mdev {
            parent: "0000:3b:00.0".into(),
            type_id: "nvidia-231".into(),
        }))
        .expect("create on the simulated T4")
        .uuid
}

#[tokio::test]
async fn published_introspection() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let generated = introspection_xml(&fixture.service);
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../dbus-api/interface/org.mdevmanager.VGpu1.xml");
    if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        std::fs::write(&file, &generated).expect("write the published XML");
    }
    let published = std::fs::read_to_string(&file).expect("published XML");
    assert_eq!(
        interface_blocks(&published),
        interface_blocks(&generated),
        "dbus-api/interface/org.mdevmanager.VGpu1.xml is stale: UPDATE_GOLDEN=1 cargo test -p mdev-manager published_introspection"
    );
    let blocks = interface_blocks(&generated);
    for name in [
        interface::MANAGER,
        interface::PARENT,
        interface::SRIOV,
        interface::MDEV_TYPE,
        interface::INSTANCE,
        interface::PROFILE,
        interface::JOB,
    ] {
        assert!(
            blocks.contains_key(name),
            "{name} missing from the introspection"
        );
    }
}

#[tokio::test]
async fn every_object_carries_its_key_and_the_manager_answers() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let manager = ManagerProxy::builder(&fixture.client)
        .build()
        .await
        .expect("proxy");
    assert_eq!(manager.version().await.unwrap(), env!("CARGO_PKG_VERSION"));
    assert!(manager
        .features()
        .await
        .unwrap()
        .contains(&"simulated".to_string()));

    let objects = managed_objects(&fixture.client).await;
    let t4 = path::parent_path("0000:3b:00.0");
    let parent = &objects[&t4];
    let props = &parent[interface::PARENT];
    assert_eq!(
        String::try_from(props["Name"].try_clone().unwrap()).unwrap(),
        "0000:3b:00.0"
    );
    assert_eq!(
        u16::try_from(props["VendorId"].try_clone().unwrap()).unwrap(),
        0x10de
    );
    let type_path = path::mdev_type_path("0000:3b:00.0", "nvidia-231");
    let type_props = &objects[&type_path][interface::MDEV_TYPE];
    assert_eq!(
        String::try_from(type_props["Id"].try_clone().unwrap()).unwrap(),
        "nvidia-231"
    );
    assert_eq!(
        String::try_from(type_props["ParentName"].try_clone().unwrap()).unwrap(),
        "0000:3b:00.0"
    );
    // The H200 is an SR-IOV PF: it has the Sriov interface too.
    let h200 = &objects[&path::parent_path("0000:4b:00.0")];
    assert!(h200.contains_key(interface::SRIOV));
    assert!(!objects[&t4].contains_key(interface::SRIOV));
}

#[tokio::test]
async fn changes_made_outside_the_api_are_announced_and_destroy_removes_the_object() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let object_manager = zbus::fdo::ObjectManagerProxy::builder(&fixture.client)
        .destination(BUS_NAME)
        .path(ROOT_PATH)
        .build()
        .await
        .unwrap();
    let mut added = object_manager.receive_interfaces_added().await.unwrap();
    let mut removed = object_manager.receive_interfaces_removed().await.unwrap();

    // Created through the engine directly, as udev or reconcile would report it.
    let engine = fixture.engine.clone();
    let uuid = tokio::task::spawn_blocking(move || create_mdev(&engine))
        .await
        .unwrap();
    let instance_path = path::mdev_instance_path(&uuid);
    let signal = tokio::time::timeout(Duration::from_secs(10), added.next())
        .await
        .expect("InterfacesAdded in time")
        .expect("stream open");
    let args = signal.args().unwrap();
    assert_eq!(args.object_path().as_str(), instance_path.as_str());
    assert!(args
        .interfaces_and_properties()
        .contains_key(interface::INSTANCE));

    let instance = InstanceProxy::builder(&fixture.client)
        .path(instance_path.clone())
        .build()
        .await
        .unwrap();
    assert_eq!(instance.uuid().await.unwrap(), uuid);
    assert_eq!(instance.kind().await.unwrap(), "mdev");
    assert_eq!(instance.mdev_type().await.unwrap(), "nvidia-231");
    assert!(instance.active().await.unwrap());

    instance.destroy(HashMap::new()).await.expect("Destroy");
    let signal = tokio::time::timeout(Duration::from_secs(10), removed.next())
        .await
        .expect("InterfacesRemoved in time")
        .expect("stream open");
    assert_eq!(
        signal.args().unwrap().object_path().as_str(),
        instance_path.as_str()
    );
    assert!(!managed_objects(&fixture.client)
        .await
        .contains_key(&instance_path));
    assert!(fixture
        .engine
        .instances()
        .unwrap()
        .iter()
        .all(|i| i.uuid != uuid));
}

#[tokio::test]
async fn refused_calls_are_not_authorized_and_change_nothing() {
    let fixture = fixture(Arc::new(DenyAll)).await;
    let engine = fixture.engine.clone();
    let uuid = tokio::task::spawn_blocking(move || create_mdev(&engine))
        .await
        .unwrap();
    // Wait until the service has exported it.
    let instance_path = path::mdev_instance_path(&uuid);
    for _ in 0..200 {
        if managed_objects(&fixture.client)
            .await
            .contains_key(&instance_path)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let instance = InstanceProxy::builder(&fixture.client)
        .path(instance_path)
        .build()
        .await
        .unwrap();
    let error = ClientError::from(instance.destroy(HashMap::new()).await.unwrap_err());
    assert_eq!(error.kind(), Some(ErrorKind::NotAuthorized), "{error}");
    assert!(
        error.to_string().contains(&uuid),
        "message names the instance: {error}"
    );
    assert!(
        fixture.engine.instance(&uuid).unwrap().active,
        "still there"
    );

    let manager = ManagerProxy::builder(&fixture.client)
        .build()
        .await
        .unwrap();
    let error = ClientError::from(
        manager
            .create_instances("nvidia-t4-2q", HashMap::new())
            .await
            .unwrap_err(),
    );
    assert_eq!(error.kind(), Some(ErrorKind::NotAuthorized), "{error}");
    let permissions = manager.get_permissions().await.unwrap();
    assert!(permissions.values().all(|p| p == "no"), "{permissions:?}");
}

#[tokio::test]
async fn bad_options_are_invalid_args_naming_the_key() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let manager = ManagerProxy::builder(&fixture.client)
        .build()
        .await
        .unwrap();
    let mut options = HashMap::new();
    options.insert("colour", Variant::from("blue"));
    let error = ClientError::from(
        manager
            .create_instances("nvidia-t4-2q", options)
            .await
            .unwrap_err(),
    );
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs));
    assert!(error.to_string().contains("colour"), "{error}");

    let mut options = HashMap::new();
    options.insert(option::COUNT, Variant::from("three"));
    let error = ClientError::from(
        manager
            .create_instances("nvidia-t4-2q", options)
            .await
            .unwrap_err(),
    );
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs));

    let mut options = HashMap::new();
    options.insert(option::COUNT, Variant::from(2u32));
    options.insert(
        option::UUID,
        Variant::from("0b7f4c6e-1a2b-4c3d-8e9f-001122334455"),
    );
    let error = ClientError::from(
        manager
            .create_instances("nvidia-t4-2q", options)
            .await
            .unwrap_err(),
    );
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs));
    assert!(
        fixture.engine.instances().unwrap().is_empty(),
        "nothing was created"
    );
}

#[tokio::test]
async fn set_num_vfs_returns_a_job_whose_completion_is_signalled() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let manager = ManagerProxy::builder(&fixture.client)
        .build()
        .await
        .unwrap();
    let mut job_new = manager.receive_job_new().await.unwrap();
    let mut job_removed = manager.receive_job_removed().await.unwrap();
    let sriov = SriovProxy::builder(&fixture.client)
        .path(path::parent_path("0000:4b:00.0"))
        .build()
        .await
        .unwrap();
    // NVIDIA's sriov-manage enables every VF of the H200 (32) or none.
    let job = sriov
        .set_num_vfs(32, HashMap::new())
        .await
        .expect("SetNumVfs");
    assert!(
        job.as_str().starts_with("/org/mdevmanager/VGpu1/jobs/"),
        "{job:?}"
    );
    let new = tokio::time::timeout(Duration::from_secs(10), job_new.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(new.args().unwrap().job.as_str(), job.as_str());
    assert_eq!(new.args().unwrap().operation, "sriov-set-numvfs");
    let done = tokio::time::timeout(Duration::from_secs(30), job_removed.next())
        .await
        .unwrap()
        .unwrap();
    let args = done.args().unwrap();
    assert_eq!(args.job.as_str(), job.as_str());
    assert_eq!(args.result, "done", "{}", args.message);
    assert_eq!(sriov.num_vfs().await.unwrap(), 32);
    assert_eq!(sriov.vfs().await.unwrap().len(), 32);

    // More VFs than the PF has is refused before any job starts.
    let error = ClientError::from(sriov.set_num_vfs(1000, HashMap::new()).await.unwrap_err());
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs));
    assert!(error.to_string().contains("0000:4b:00.0"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_destroys_while_events_refresh_do_not_deadlock() {
    // Each Destroy refreshes while its own object is mid-call, and the engine's events refresh
    // at the same time; records must be replaced without the object server's interface lock.
    let fixture = fixture(Arc::new(AllowAll)).await;
    let engine = fixture.engine.clone();
    let uuids: Vec<String> =
        tokio::task::spawn_blocking(move || (0..4).map(|_| create_mdev(&engine)).collect())
            .await
            .unwrap();
    for _ in 0..200 {
        let objects = managed_objects(&fixture.client).await;
        if uuids
            .iter()
            .all(|u| objects.contains_key(&path::mdev_instance_path(u)))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let calls = uuids.iter().map(|uuid| {
        let client = fixture.client.clone();
        let path = path::mdev_instance_path(uuid);
        async move {
            let instance = InstanceProxy::builder(&client).path(path).build().await?;
            instance.destroy(HashMap::new()).await
        }
    });
    let results = tokio::time::timeout(
        Duration::from_secs(60),
        futures_util::future::join_all(calls),
    )
    .await
    .expect("every Destroy answered");
    for result in results {
        result.expect("Destroy");
    }
    assert!(fixture.engine.instances().unwrap().is_empty());
}

#[tokio::test]
async fn stop_refuses_a_transient_instance_and_stops_a_persistent_one() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let engine = fixture.engine.clone();
    let uuid = tokio::task::spawn_blocking(move || create_mdev(&engine))
        .await
        .unwrap();
    let instance_path = path::mdev_instance_path(&uuid);
    for _ in 0..200 {
        if managed_objects(&fixture.client)
            .await
            .contains_key(&instance_path)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let instance = InstanceProxy::builder(&fixture.client)
        .path(instance_path)
        .build()
        .await
        .unwrap();

    let error = ClientError::from(instance.stop(HashMap::new()).await.unwrap_err());
    assert_eq!(error.kind(), Some(ErrorKind::NotSupported), "{error}");
    assert!(
        error.to_string().contains(&uuid),
        "names the instance: {error}"
    );
    assert!(error.to_string().contains("transient"), "{error}");
    assert!(
        fixture.engine.instance(&uuid).unwrap().active,
        "a refused Stop leaves the instance running"
    );

    // Made persistent behind the object's back (its cached properties may still say
    // transient): the same call keeps the definition and removes only the device.
    fixture
        .engine
        .set_persistence(&uuid, true, false)
        .expect("persistent");
    instance.stop(HashMap::new()).await.expect("Stop");
    let stopped = fixture.engine.instance(&uuid).expect("definition kept");
    assert!(stopped.persistent);
    assert!(!stopped.active);
}

/// `Probe` on the simulated host is NotSupported saying why; a malformed target is InvalidArgs
/// naming the text (checked before anything else, so also on the simulated host).
#[tokio::test]
async fn probe_on_the_simulated_host() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let manager = ManagerProxy::builder(&fixture.client)
        .build()
        .await
        .unwrap();
    let error = ClientError::from(
        manager
            .probe("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001", HashMap::new())
            .await
            .unwrap_err(),
    );
    assert_eq!(error.kind(), Some(ErrorKind::NotSupported), "{error}");
    assert!(error.to_string().contains("simulated host"), "{error}");

    let error = ClientError::from(
        manager
            .probe("not-a-target", HashMap::new())
            .await
            .unwrap_err(),
    );
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs), "{error}");
    assert!(error.to_string().contains("not-a-target"), "{error}");

    let mut options = HashMap::new();
    options.insert("colour", Variant::from("blue"));
    let error = ClientError::from(manager.probe("0000:3b:00.4", options).await.unwrap_err());
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs), "{error}");
    assert!(error.to_string().contains("colour"), "{error}");
}

/// With a host root, `Probe` runs the real probe there and returns its report: a device that
/// is not in that sysfs fails the first step, in the report rather than as an error.
#[tokio::test]
async fn probe_reports_a_missing_device_as_a_failed_step() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let root = tempfile::tempdir().expect("temp dir");
    fixture.service.enable_probe(root.path().to_path_buf());
    let manager = ManagerProxy::builder(&fixture.client)
        .build()
        .await
        .unwrap();
    let json = manager
        .probe("0000:3b:00.4", HashMap::new())
        .await
        .expect("Probe returns a report");
    let report: serde_json::Value = serde_json::from_str(&json).expect("JSON report");
    assert_eq!(report["ok"], false, "{report}");
    let steps = report["steps"].as_array().expect("steps");
    assert!(!steps.is_empty(), "{report}");
    assert!(
        steps.iter().any(|step| step["status"] == "failed"),
        "{report}"
    );
}

/// `Probe` opens VFIO devices: it asks for the manage-instances action.
#[tokio::test]
async fn probe_needs_authorization() {
    let fixture = fixture(Arc::new(DenyAll)).await;
    fixture.service.enable_probe(std::path::PathBuf::from("/"));
    let manager = ManagerProxy::builder(&fixture.client)
        .build()
        .await
        .unwrap();
    let error = ClientError::from(
        manager
            .probe("0000:3b:00.4", HashMap::new())
            .await
            .unwrap_err(),
    );
    assert_eq!(error.kind(), Some(ErrorKind::NotAuthorized), "{error}");
}

/// On the real H200 host (`h200-real`) the GPU that hosts no vGPU is still a parent, with
/// why; a create aimed at it fails `NotSupported` naming it; `FitProfiles` says why nothing
/// fits.
#[tokio::test]
async fn a_gpu_without_vgpu_support_is_a_parent_with_its_reason() {
    let fixture = fixture_on("h200-real", Arc::new(AllowAll)).await;
    let objects = managed_objects(&fixture.client).await;
    let snapshot = dbus_api::wire::Snapshot::from_managed_objects(objects).expect("snapshot");
    assert_eq!(snapshot.parents.len(), 1, "{:?}", snapshot.parents);
    let gpu = &snapshot.parents[0];
    assert_eq!(
        (
            gpu.name.as_str(),
            gpu.vendor_id,
            gpu.device_id,
            gpu.driver.as_str()
        ),
        ("0000:00:06.0", 0x10de, 0x2335, "nvidia")
    );
    assert!(gpu.modes.is_empty(), "{:?}", gpu.modes);
    assert_eq!(
        gpu.reason,
        "nvidia driver without vGPU support loaded (no mdev types, no SR-IOV VFs); \
         IOMMU off: no IOMMU group, so no pass-through"
    );

    let manager = ManagerProxy::new(&fixture.client).await.expect("proxy");
    let mut options = HashMap::new();
    options.insert(option::PARENT, Variant::from("0000:00:06.0"));
    let error = manager
        .create_instances("nvidia-h200-35c", options)
        .await
        .expect_err("no vGPU on this GPU");
    let error = ClientError::from(error);
    assert_eq!(error.kind(), Some(ErrorKind::NotSupported), "{error}");
    assert!(error.to_string().contains("0000:00:06.0"), "{error}");
    assert!(error.to_string().contains("IOMMU off"), "{error}");

    let fits = manager
        .fit_profiles(HashMap::new())
        .await
        .expect("FitProfiles");
    assert!(!fits.is_empty());
    assert!(fits.iter().all(|f| !f.fits), "{fits:?}");
    let h200 = fits
        .iter()
        .find(|f| f.name == "nvidia-h200-35c")
        .expect("profile");
    assert!(
        h200.detail.contains("nvidia driver without vGPU support"),
        "{h200:?}"
    );
}

/// Usable parents carry an empty `Reason`.
#[tokio::test]
async fn usable_parents_have_no_reason() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let objects = managed_objects(&fixture.client).await;
    let snapshot = dbus_api::wire::Snapshot::from_managed_objects(objects).expect("snapshot");
    assert!(!snapshot.parents.is_empty());
    for parent in &snapshot.parents {
        assert_eq!(parent.reason, "", "{parent:?}");
        assert!(!parent.modes.is_empty(), "{parent:?}");
    }
}

/// An NVIDIA PF whose VFs cannot be made (no `sriov-manage` on the host) says so.
#[tokio::test]
async fn an_nvidia_pf_without_sriov_manage_has_the_missing_tool_as_its_reason() {
    let config = EngineConfig {
        nvidia_sriov_manage: "/opt/nvidia/sriov-manage".into(),
        ..EngineConfig::default()
    };
    let fixture = fixture_with("default", config, Arc::new(AllowAll)).await;
    let objects = managed_objects(&fixture.client).await;
    let snapshot = dbus_api::wire::Snapshot::from_managed_objects(objects).expect("snapshot");
    let h200 = snapshot.parent("0000:4b:00.0").expect("the H200");
    assert!(
        h200.reason
            .starts_with("/opt/nvidia/sriov-manage is not installed, so no VFs and no vGPU"),
        "{h200:?}"
    );
    assert!(h200.reason.contains("NVIDIA vGPU manager"), "{h200:?}");
    // The AMD PF next to it is not NVIDIA's: no reason.
    assert_eq!(
        snapshot.parent("0000:0c:00.0").expect("the S7150").reason,
        ""
    );
}

/// Asserts that every object a fresh whole-host read computes is exported with exactly its
/// properties, and nothing else is: what incremental publication must converge on.
async fn assert_published_matches_a_full_read(fixture: &Fixture, after: &str) {
    use super::model::{Model, Properties};
    let engine = fixture.engine.clone();
    let model = tokio::task::spawn_blocking(move || Model::read(&engine))
        .await
        .expect("read task")
        .expect("full read");
    let objects = managed_objects(&fixture.client).await;
    fn check<P: Properties>(
        objects: &zbus::fdo::ManagedObjects,
        records: &HashMap<zbus::OwnedObjectPath, P>,
        iface: &str,
        after: &str,
    ) {
        let exported: std::collections::BTreeSet<String> = objects
            .iter()
            .filter(|(_, ifaces)| ifaces.keys().any(|name| name.as_str() == iface))
            .map(|(path, _)| path.to_string())
            .collect();
        let expected: std::collections::BTreeSet<String> =
            records.keys().map(|path| path.to_string()).collect();
        assert_eq!(exported, expected, "{iface} objects after {after}");
        for (path, record) in records {
            let (_, ifaces) = objects
                .iter()
                .find(|(exported, _)| exported.as_str() == path.as_str())
                .expect("object exported");
            let (_, properties) = ifaces
                .iter()
                .find(|(name, _)| name.as_str() == iface)
                .expect("interface exported");
            for (name, value) in record.properties() {
                let got = properties
                    .get(name)
                    .unwrap_or_else(|| panic!("{path} has no {name} after {after}"));
                let got: &Variant<'_> = got;
                assert_eq!(got, &value, "{path} {iface}.{name} after {after}");
            }
        }
    }
    check(&objects, &model.parents, interface::PARENT, after);
    check(&objects, &model.sriov, interface::SRIOV, after);
    check(&objects, &model.types, interface::MDEV_TYPE, after);
    check(&objects, &model.instances, interface::INSTANCE, after);
    check(&objects, &model.profiles, interface::PROFILE, after);
    // The listings too (prepared by the call before, so patched since).
    let expected = super::model::Listing::new(
        Default::default(),
        model
            .types
            .iter()
            .map(|(path, data)| super::model::type_entry(path, data))
            .collect(),
        model
            .instances
            .iter()
            .map(|(path, data)| super::model::instance_entry(path, data))
            .collect(),
    );
    let manager = ManagerProxy::new(&fixture.client).await.expect("manager");
    let listed = manager.list_instances(HashMap::new()).await.expect("list");
    assert_eq!(listed, expected.instances, "ListInstances after {after}");
    let listed = manager.list_types(HashMap::new()).await.expect("types");
    assert_eq!(listed, expected.types, "ListTypes after {after}");
}

#[tokio::test]
async fn each_reply_comes_after_its_change_is_published_as_a_full_read_would_show_it() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let manager = ManagerProxy::new(&fixture.client).await.expect("manager");
    assert_published_matches_a_full_read(&fixture, "start").await;
    let mut options = HashMap::new();
    options.insert(option::COUNT, Variant::from(3u32));
    let created = manager
        .create_instances("nvidia-t4-2q", options)
        .await
        .expect("CreateInstances");
    assert_eq!(created.len(), 3);
    assert_published_matches_a_full_read(&fixture, "CreateInstances of 3").await;
    let listed = manager.list_instances(HashMap::new()).await.expect("list");
    for path in &created {
        assert!(
            listed.iter().any(|entry| &entry.object == path),
            "{path} is in the listing right after the reply"
        );
    }
    let instance = InstanceProxy::builder(&fixture.client)
        .path(created[0].clone())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .expect("instance proxy");
    fixture
        .client
        .call_method(
            None::<&str>,
            created[0].as_str(),
            Some(interface::INSTANCE),
            "SetSchedule",
            &(300u32, 0u32, 0u32, HashMap::<&str, Variant<'_>>::new()),
        )
        .await
        .expect("SetSchedule");
    assert_published_matches_a_full_read(&fixture, "SetSchedule").await;
    instance.destroy(HashMap::new()).await.expect("Destroy");
    assert_published_matches_a_full_read(&fixture, "Destroy").await;
    let listed = manager.list_instances(HashMap::new()).await.expect("list");
    assert!(
        !listed.iter().any(|entry| entry.object == created[0]),
        "the destroyed instance left the listing before the reply"
    );
    // A change of the engine alone (no method call) reaches the bus by its events.
    let uuid = create_mdev(&fixture.engine);
    let wanted = path::mdev_instance_path(&uuid);
    let mut published = false;
    for _ in 0..200 {
        if managed_objects(&fixture.client)
            .await
            .keys()
            .any(|exported| exported.as_str() == wanted.as_str())
        {
            published = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(published, "{uuid} made by the engine alone was published");
    assert_published_matches_a_full_read(&fixture, "a create outside the API").await;
}

/// The engine's VF-count rule answers `SetNumVfs` before a Job starts: too many VFs is
/// InvalidArgs naming the PF and its limit, no Job, nothing enabled; the call is counted under
/// its own name with that error.
#[tokio::test]
async fn set_num_vfs_over_the_total_is_refused_before_a_job_and_counted() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let pf = "0000:4b:00.0";
    let sriov = SriovProxy::builder(&fixture.client)
        .path(path::parent_path(pf))
        .build()
        .await
        .unwrap();
    let total = sriov.total_vfs().await.unwrap();
    let error = ClientError::from(
        sriov
            .set_num_vfs(total + 1, HashMap::new())
            .await
            .unwrap_err(),
    );
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs), "{error}");
    assert!(error.to_string().contains(pf), "{error}");
    assert!(error.to_string().contains(&total.to_string()), "{error}");
    assert_eq!(sriov.num_vfs().await.unwrap(), 0, "nothing enabled");

    let manager = ManagerProxy::builder(&fixture.client)
        .build()
        .await
        .unwrap();
    let stats = manager.get_operation_stats().await.unwrap();
    assert_eq!(stats.jobs_running, 0);
    assert!(
        stats
            .errors
            .iter()
            .any(|e| e.operation == "SetNumVfs" && e.error.contains("InvalidArgs")),
        "{:?}",
        stats.errors
    );
}

/// Every option set refuses a key it does not name, as InvalidArgs naming the key and the
/// method, before polkit is asked (DenyAll would answer NotAuthorized) and with nothing done.
#[tokio::test]
async fn unknown_option_keys_are_invalid_args_naming_key_and_method() {
    let fixture = fixture(Arc::new(DenyAll)).await;
    let manager = ManagerProxy::builder(&fixture.client)
        .build()
        .await
        .unwrap();
    let typo = || HashMap::from([("forse", Variant::from(true))]);
    let errors = [
        (
            "CreateInstances",
            manager.create_instances("t4-2q", typo()).await.unwrap_err(),
        ),
        (
            "DestroyInstances",
            manager.destroy_instances(&["x"], typo()).await.unwrap_err(),
        ),
        ("Rescan", manager.rescan(typo()).await.unwrap_err()),
        (
            "ImportMdevctl",
            manager.import_mdevctl(typo()).await.unwrap_err(),
        ),
    ];
    for (method, error) in errors {
        let error = ClientError::from(error);
        assert_eq!(
            error.kind(),
            Some(ErrorKind::InvalidArgs),
            "{method}: {error}"
        );
        assert!(error.to_string().contains("forse"), "{error}");
        assert!(error.to_string().contains(method), "{error}");
    }
    // A wrong type names the key too.
    let error = ClientError::from(
        manager
            .create_instances("t4-2q", HashMap::from([("count", Variant::from("2"))]))
            .await
            .unwrap_err(),
    );
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs), "{error}");
    assert!(error.to_string().contains("count"), "{error}");
    // `wait-for-parent` belongs to the Job twin only.
    let error = ClientError::from(
        manager
            .create_instances(
                "t4-2q",
                HashMap::from([(option::WAIT_FOR_PARENT, Variant::from(5u32))]),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(error.kind(), Some(ErrorKind::InvalidArgs), "{error}");
    assert!(error.to_string().contains("wait-for-parent"), "{error}");
    assert!(fixture.engine.instances().unwrap().is_empty());
}

/// `GetMetricsSnapshot` carries what a `GetManagedObjects` walk would give the exporter: every
/// parent, type and instance, each instance's shares and whether a VM holds it.
#[tokio::test]
async fn the_metrics_snapshot_matches_the_exported_objects() {
    let fixture = fixture(Arc::new(AllowAll)).await;
    let engine = fixture.engine.clone();
    let (held, idle) =
        tokio::task::spawn_blocking(move || (create_mdev(&engine), create_mdev(&engine)))
            .await
            .unwrap();
    fixture
        .engine
        .claim_domain(
            &mdev_engine::DomainRef {
                name: "vm-metrics".into(),
                uuid: "6f1c3a2e-0b9d-4e57-9a11-2c3d4e5f6a7b".into(),
            },
            &[mdev_engine::DeviceRequest {
                kind: "mdev".into(),
                uuid: Some(held.clone()),
                ..Default::default()
            }],
        )
        .expect("claim");
    // The claim went to the engine directly: publish its events as a call's reply would.
    fixture.service.refresh(&fixture._server).await;
    let manager = ManagerProxy::new(&fixture.client).await.expect("proxy");
    let snapshot = manager
        .get_metrics_snapshot()
        .await
        .expect("GetMetricsSnapshot");
    let objects = managed_objects(&fixture.client).await;
    let mut shares: HashMap<String, (u32, u32)> = HashMap::new();
    for interfaces in objects.values() {
        if let Some(map) = interfaces
            .iter()
            .find(|(name, _)| name.as_str() == interface::INSTANCE)
            .map(|(_, map)| map)
        {
            let get = |key: &str| u32::try_from(map[key].try_clone().unwrap()).unwrap();
            let uuid = String::try_from(map["Uuid"].try_clone().unwrap()).unwrap();
            shares.insert(uuid, (get("RequestedShare"), get("EffectiveShare")));
        }
    }
    let walked = dbus_api::wire::Snapshot::from_managed_objects(objects).expect("snapshot");
    assert_eq!(snapshot.version, env!("CARGO_PKG_VERSION"));
    let parents: Vec<&str> = snapshot.parents.iter().map(|p| p.name.as_str()).collect();
    let mut walked_parents: Vec<&str> = walked.parents.iter().map(|p| p.name.as_str()).collect();
    walked_parents.sort();
    assert_eq!(parents, walked_parents);
    assert_eq!(snapshot.types.len(), walked.types.len());
    assert_eq!(snapshot.instances.len(), 2);
    for instance in &snapshot.instances {
        let expected = shares[&instance.uuid];
        assert_eq!(
            (instance.requested_share_ppm, instance.effective_share_ppm),
            expected,
            "{}",
            instance.uuid
        );
        assert_eq!(instance.held, instance.uuid == held, "{}", instance.uuid);
        assert_eq!(instance.parent, "0000:3b:00.0");
        assert_eq!(instance.mdev_type, "nvidia-231");
        assert!(instance.active);
    }
    assert!(snapshot.instances.iter().any(|i| i.uuid == idle));
    assert!(
        shares.values().any(|(requested, _)| *requested > 0),
        "the shares are not all zero: {shares:?}"
    );
}

/// The engine and the bus speak one error classification: an engine failure's kind is the
/// kind of the D-Bus error it becomes, whose name is `org.mdevmanager.VGpu1.Error.<Kind>`.
#[test]
fn every_class_maps_to_the_dbus_error_of_its_name() {
    let same_type = |kind: mdev_engine::ErrorKind| -> dbus_api::ErrorKind { kind };
    for kind in mdev_engine::ErrorKind::ALL {
        let bus = dbus_api::BusError::new(same_type(kind), "m");
        assert_eq!(bus.kind(), kind);
        assert_eq!(
            zbus::DBusError::name(&bus).to_string(),
            format!("org.mdevmanager.VGpu1.Error.{}", kind.name())
        );
        assert_eq!(
            bus.kind().dbus_name(),
            zbus::DBusError::name(&bus).to_string()
        );
    }
    let error = mdev_engine::EngineError::UnknownInstance {
        uuid: "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001".into(),
    };
    assert_eq!(crate::daemon::bus_error(&error).kind(), error.kind());
}
