//! Reconcile and the state store: after a reboot, across a restart, with a parent missing.

use super::*;

#[test]
fn reconcile_after_reboot_restores_autostart_and_vfs_and_reports_the_rest() {
    let s = setup("samples");
    s.engine
        .set_num_vfs(NVME, 2, DestroyOptions::default())
        .unwrap();
    let auto = CreateRequest {
        autostart: true,
        ..mdev("mtty", "mtty-2", Some(UUID_A))
    };
    s.engine.create(auto).unwrap();
    let transient = s
        .engine
        .create(mdev("mbochs", "mbochs-small", Some(UUID_B)))
        .unwrap();
    let vf = s
        .engine
        .create(CreateRequest {
            autostart: true,
            ..CreateRequest::new(CreateTarget::Vf {
                pf: NVME.into(),
                vf: None,
            })
        })
        .unwrap();

    s.sim.reboot();
    assert!(s.sim.mdev_uuids().is_empty() && s.sim.vf_count() == 0);
    // Someone else's mdev exists after boot: listed, not touched.
    let stranger = "11111111-2222-3333-4444-555555555555";
    s.sim
        .write(
            Path::new("/sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-vga/create"),
            stranger.as_bytes(),
        )
        .unwrap();

    let engine = open(&s.sim, s.dir.path());
    let report = engine.reconcile().unwrap();
    let actions = &report.actions;
    assert!(
        actions.contains(&ReconcileAction::VfsRestored {
            pf: NVME.into(),
            num_vfs: 2
        }),
        "{actions:?}"
    );
    assert!(
        actions.contains(&ReconcileAction::Recreated {
            uuid: UUID_A.into()
        }),
        "{actions:?}"
    );
    assert!(
        actions.contains(&ReconcileAction::Recreated {
            uuid: vf.uuid.clone()
        }),
        "{actions:?}"
    );
    assert!(
        actions.contains(&ReconcileAction::Vanished {
            uuid: transient.uuid.clone(),
            forgotten: true
        }),
        "{actions:?}"
    );
    assert!(
        actions.contains(&ReconcileAction::Unknown {
            id: stranger.into(),
            parent: "mdpy".into()
        }),
        "{actions:?}"
    );
    let mut live = s.sim.mdev_uuids();
    live.sort();
    assert_eq!(live, [stranger, UUID_A]);
    assert!(engine.instance(&vf.uuid).unwrap().active);
    // A second pass has nothing left to do but list the stranger.
    let again = engine.reconcile().unwrap();
    assert_eq!(
        again.actions,
        vec![ReconcileAction::Unknown {
            id: stranger.into(),
            parent: "mdpy".into()
        }]
    );
}

#[test]
fn state_survives_restart_and_bad_state_files_are_refused() {
    let s = setup("samples");
    s.engine
        .create(CreateRequest {
            persistent: true,
            ..mdev("mtty", "mtty-2", Some(UUID_A))
        })
        .unwrap();
    s.engine
        .set_scheduling(
            UUID_A,
            Scheduling {
                weight: Some(200),
                min_share: Some(10),
                max_share: None,
            },
        )
        .unwrap();
    s.engine
        .set_parent_schedule("mtty", serde_json::json!({"policy": "weighted"}))
        .unwrap();
    let reopened = open(&s.sim, s.dir.path());
    let info = reopened.instance(UUID_A).unwrap();
    assert_eq!(
        (
            info.scheduling.weight,
            info.scheduling.min_share,
            info.persistent
        ),
        (Some(200), Some(10), true)
    );
    assert_eq!(
        reopened.parent_schedule("mtty"),
        Some(serde_json::json!({"policy": "weighted"}))
    );

    let path = s.dir.path().join("var/lib/mdev-manager/state.json");
    std::fs::write(&path, r#"{"schema_version": 99}"#).unwrap();
    let error = Engine::new(
        Arc::new(s.sim.clone()),
        Arc::new(DiskFiles::new(s.dir.path())),
        config(),
    )
    .unwrap_err();
    assert!(error.to_string().contains("99"), "{error}");
    std::fs::write(&path, "{ not json").unwrap();
    let error = Engine::new(
        Arc::new(s.sim.clone()),
        Arc::new(DiskFiles::new(s.dir.path())),
        config(),
    )
    .unwrap_err();
    assert!(error.to_string().contains("corrupt"), "{error}");
}

#[test]
fn reconcile_reports_instances_whose_parent_is_missing_and_hotplug_starts_them_later() {
    let s = setup("samples");
    for uuid in [UUID_A, UUID_B] {
        s.engine
            .create(CreateRequest {
                autostart: true,
                ..mdev("mtty", "mtty-1", Some(uuid))
            })
            .unwrap();
    }
    s.sim.reboot();
    s.sim.unload_module("mtty").unwrap();
    let engine = open(&s.sim, s.dir.path());
    let report = engine.reconcile().unwrap();
    assert_eq!(report.actions.len(), 2, "{report:?}");
    for action in &report.actions {
        let ReconcileAction::RecreateFailed { error, .. } = action else {
            panic!("{action:?}")
        };
        assert!(
            error.contains("mtty") && error.contains("did not appear"),
            "{error}"
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let thread = engine.spawn_hotplug(Box::new(SimEvents(s.sim.subscribe())), Arc::clone(&stop));
    let events = engine.subscribe();
    s.sim.load_module("mtty").unwrap();
    assert!(wait_for(
        &events,
        &EngineEvent::ParentAdded {
            parent: "mtty".into()
        }
    ));
    for _ in 0..500 {
        if s.sim.mdev_uuids().len() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut live = s.sim.mdev_uuids();
    live.sort();
    assert_eq!(live, [UUID_B, UUID_A]);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    thread.join().unwrap();
}
