//! Events and hotplug: host changes update the engine and start autostart instances; the engine's
//! own changes are announced once.

use super::*;

#[test]
fn hotplug_events_update_the_model_and_start_autostart_instances() {
    let s = setup("samples");
    s.engine
        .create(CreateRequest {
            autostart: true,
            ..mdev("mtty", "mtty-2", Some(UUID_A))
        })
        .unwrap();
    let transient = s
        .engine
        .create(mdev("mtty", "mtty-1", Some(UUID_B)))
        .unwrap();
    let events = s.engine.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = s
        .engine
        .spawn_hotplug(Box::new(SimEvents(s.sim.subscribe())), Arc::clone(&stop));

    s.sim.unload_module("mtty").unwrap();
    assert!(wait_for_all(
        &events,
        &[
            EngineEvent::ParentRemoved {
                parent: "mtty".into()
            },
            EngineEvent::InstanceRemoved {
                uuid: transient.uuid.clone()
            },
        ]
    ));
    s.sim.load_module("mtty").unwrap();
    assert!(wait_for_all(
        &events,
        &[
            EngineEvent::ParentAdded {
                parent: "mtty".into()
            },
            EngineEvent::InstanceChanged {
                uuid: UUID_A.into()
            },
        ]
    ));
    assert_eq!(
        s.sim.mdev_uuids(),
        [UUID_A],
        "the autostart instance came back, the transient one is forgotten"
    );
    assert!(s.engine.instance(UUID_B).unwrap_err().kind() == ErrorKind::NotFound);

    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    thread.join().unwrap();
}

#[test]
fn own_changes_are_announced_once_while_outside_changes_still_come_through_hotplug() {
    let s = setup("samples");
    let events = s.engine.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = s
        .engine
        .spawn_hotplug(Box::new(SimEvents(s.sim.subscribe())), Arc::clone(&stop));

    s.engine
        .create(mdev("mtty", "mtty-1", Some(UUID_A)))
        .unwrap();
    s.engine.destroy(UUID_A, DestroyOptions::default()).unwrap();
    // Someone else's mdev, made and removed outside the service. The hotplug thread handles
    // uevents in order, so once its removal is seen, every echo of ours was handled too.
    let stranger = "11111111-2222-3333-4444-555555555555";
    s.sim
        .write(
            Path::new("/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create"),
            stranger.as_bytes(),
        )
        .unwrap();
    s.sim
        .write(
            &Path::new("/sys/bus/mdev/devices")
                .join(stranger)
                .join("remove"),
            b"1",
        )
        .unwrap();
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let stranger_removed = EngineEvent::InstanceRemoved {
        uuid: stranger.into(),
    };
    while !seen.contains(&stranger_removed) && std::time::Instant::now() < deadline {
        if let Some(event) = events.recv_timeout(Duration::from_millis(50)) {
            seen.push(event);
        }
    }
    let count = |wanted: EngineEvent| seen.iter().filter(|e| **e == wanted).count();
    for uuid in [UUID_A, stranger] {
        assert_eq!(
            count(EngineEvent::InstanceAdded { uuid: uuid.into() }),
            1,
            "{uuid}: {seen:?}"
        );
        assert_eq!(
            count(EngineEvent::InstanceRemoved { uuid: uuid.into() }),
            1,
            "{uuid}: {seen:?}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    thread.join().unwrap();
}
