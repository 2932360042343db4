//! The business rule of `Engine::stop`: only an instance with a definition can be stopped; a
//! transient one (or a device the service does not manage) is refused and left as it was.

use std::sync::Arc;

use super::*;
use mdev_sim::SimHost;

const UUID: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa5001";

fn engine_on(sim: &SimHost, root: &std::path::Path) -> Engine {
    Engine::new(
        Arc::new(sim.clone()),
        Arc::new(DiskFiles::new(root)),
        EngineConfig::default(),
    )
    .unwrap()
}

fn mtty(persistent: bool) -> CreateRequest {
    CreateRequest {
        uuid: Some(UUID.to_owned()),
        persistent,
        ..CreateRequest::new(CreateTarget::Mdev {
            parent: "mtty".into(),
            type_id: "mtty-2".into(),
        })
    }
}

#[test]
fn stop_of_a_transient_instance_is_not_supported_and_keeps_it_running() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_on(&sim, dir.path());
    engine.create(mtty(false)).unwrap();

    let error = engine
        .stop(UUID, DestroyOptions { force: true })
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotSupported, "{error}");
    let message = error.to_string();
    assert!(message.contains(UUID), "{message}");
    assert!(message.contains("transient"), "{message}");
    let instance = engine.instance(UUID).expect("still managed");
    assert!(instance.active, "the device is still there");

    // Destroy is the way to remove it.
    engine.destroy(UUID, DestroyOptions::default()).unwrap();
    assert!(engine.instance(UUID).is_err());
}

#[test]
fn stop_of_a_persistent_instance_keeps_its_definition() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_on(&sim, dir.path());
    engine.create(mtty(true)).unwrap();
    engine.stop(UUID, DestroyOptions::default()).unwrap();
    let instance = engine.instance(UUID).expect("still defined");
    assert!(!instance.active);
    assert!(instance.persistent);
}
