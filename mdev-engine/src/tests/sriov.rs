//! SR-IOV: VF counts, VF instances bound to vfio-pci and given back, NVIDIA vGPUs on VFs, and
//! what a forced VF change does to instances.

use super::*;

#[test]
fn sriov_vfs_enable_bind_to_vfio_pci_and_give_back() {
    let s = setup("samples");
    let vfs = s
        .engine
        .set_num_vfs(NVME, 2, DestroyOptions::default())
        .unwrap();
    assert_eq!(vfs.len(), 2);
    let pf_dir = format!("/sys/bus/pci/devices/{NVME}");
    assert_eq!(
        s.sim
            .read(Path::new(&format!("{pf_dir}/sriov_drivers_autoprobe")))
            .unwrap()
            .trim(),
        "0"
    );
    // Changing a non-zero count goes through 0 (the kernel answers EBUSY otherwise).
    assert_eq!(
        s.engine
            .set_num_vfs(NVME, 3, DestroyOptions::default())
            .unwrap()
            .len(),
        3
    );

    let info = s
        .engine
        .create(CreateRequest::new(CreateTarget::Vf {
            pf: NVME.into(),
            vf: None,
        }))
        .unwrap();
    let vf = info.vf.unwrap();
    assert_eq!(
        (info.kind, info.active, info.type_id.as_str()),
        (InstanceKind::Vf, true, "vfio-pci")
    );
    let driver = s
        .sim
        .read_link(Path::new(&format!("/sys/bus/pci/devices/{vf}/driver")))
        .unwrap();
    assert!(driver.ends_with("vfio-pci"), "{driver:?}");
    // A VF carrying an instance keeps the VF count from changing.
    let error = s
        .engine
        .set_num_vfs(NVME, 1, DestroyOptions::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InUse);
    assert!(error.to_string().contains(&info.uuid), "{error}");

    s.engine
        .destroy(&info.uuid, DestroyOptions::default())
        .unwrap();
    assert!(
        s.sim
            .read_link(Path::new(&format!("/sys/bus/pci/devices/{vf}/driver")))
            .is_err(),
        "unbound again"
    );
    let override_now = s
        .sim
        .read(Path::new(&format!(
            "/sys/bus/pci/devices/{vf}/driver_override"
        )))
        .unwrap();
    assert_eq!(override_now.trim(), "(null)");
    s.engine
        .set_num_vfs(NVME, 0, DestroyOptions::default())
        .unwrap();
    assert_eq!(s.sim.vf_count(), 0);
}

#[test]
fn held_vfs_block_disabling() {
    let s = setup("samples");
    s.engine
        .set_num_vfs(NVME, 1, DestroyOptions::default())
        .unwrap();
    let info = s
        .engine
        .create(CreateRequest::new(CreateTarget::Vf {
            pf: NVME.into(),
            vf: None,
        }))
        .unwrap();
    let _holder = s.sim.hold_device(&info.sysfs_path, "qemu-kvm").unwrap();
    let error = s
        .engine
        .set_num_vfs(NVME, 0, DestroyOptions { force: true })
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InUse);
    assert!(error.to_string().contains("qemu-kvm"), "{error}");
    assert_eq!(s.sim.vf_count(), 1);
}

/// A forced VF-count change that crashed after the kernel took the new count but before the
/// state was saved: the state still names the old count and a record on a VF that was re-made.
/// One reconcile settles it (the recorded count comes back, the autostart VF is bound again);
/// a second changes nothing. Found by the crash torture, where the first pass was refused
/// ("carries an instance") and a later pass changed the count.
#[test]
fn reconcile_settles_a_vf_count_change_cut_short_in_one_pass() {
    let s = setup("samples");
    s.engine
        .set_num_vfs(NVME, 2, DestroyOptions::default())
        .unwrap();
    let info = s
        .engine
        .create(CreateRequest {
            autostart: true,
            ..CreateRequest::new(CreateTarget::Vf {
                pf: NVME.into(),
                vf: None,
            })
        })
        .unwrap();
    // The crashed change's host writes (the engine's state save never happened).
    let numvfs = Path::new("/sys/bus/pci/devices/0000:01:00.0/sriov_numvfs");
    s.sim.write(numvfs, b"0").unwrap();
    s.sim.write(numvfs, b"4").unwrap();
    assert_eq!(s.sim.vf_count(), 4);

    let engine = open(&s.sim, s.dir.path());
    let report = engine.reconcile().unwrap();
    assert_eq!(
        report.actions,
        vec![
            ReconcileAction::VfsRestored {
                pf: NVME.into(),
                num_vfs: 2
            },
            ReconcileAction::Recreated {
                uuid: info.uuid.clone()
            },
        ]
    );
    assert_eq!(s.sim.vf_count(), 2);
    assert!(engine.instance(&info.uuid).unwrap().active);

    let again = open(&s.sim, s.dir.path()).reconcile().unwrap();
    assert!(again.actions.is_empty(), "{:?}", again.actions);
    assert_eq!(s.sim.vf_count(), 2);
}

#[test]
fn nvidia_sriov_vgpu_takes_a_free_vf_and_clears_it() {
    let s = setup("default");
    s.engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap();
    let first = s
        .engine
        .create(CreateRequest::new(CreateTarget::NvidiaVf {
            pf: H200.into(),
            type_id: 1408,
            vf: None,
        }))
        .unwrap();
    let second = s
        .engine
        .create(CreateRequest::new(CreateTarget::NvidiaVf {
            pf: H200.into(),
            type_id: 1408,
            vf: None,
        }))
        .unwrap();
    assert_ne!(first.vf, second.vf);
    let current = |vf: PciAddress| {
        s.sim
            .read(Path::new(&format!(
                "/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"
            )))
            .unwrap()
    };
    assert_eq!(current(first.vf.unwrap()).trim(), "1408");
    let error = s
        .engine
        .create(CreateRequest::new(CreateTarget::NvidiaVf {
            pf: H200.into(),
            type_id: 1408,
            vf: None,
        }))
        .unwrap_err();
    // H200X-70C: two per GPU, so the third finds no VF that lists it.
    assert_eq!(error.kind(), ErrorKind::NoCapacity, "{error}");
    s.engine
        .destroy(&first.uuid, DestroyOptions::default())
        .unwrap();
    assert_eq!(current(first.vf.unwrap()).trim(), "0");
}

#[test]
fn forcing_vfs_away_forgets_their_transient_instances() {
    let s = setup("samples");
    s.engine
        .set_num_vfs(NVME, 2, DestroyOptions::default())
        .unwrap();
    let transient = s
        .engine
        .create(CreateRequest::new(CreateTarget::Vf {
            pf: NVME.into(),
            vf: None,
        }))
        .unwrap();
    let kept = s
        .engine
        .create(CreateRequest {
            persistent: true,
            ..CreateRequest::new(CreateTarget::Vf {
                pf: NVME.into(),
                vf: None,
            })
        })
        .unwrap();
    s.engine
        .set_num_vfs(NVME, 0, DestroyOptions { force: true })
        .unwrap();
    assert_eq!(s.sim.vf_count(), 0);
    assert_eq!(
        s.engine.instance(&transient.uuid).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(!s.engine.instance(&kept.uuid).unwrap().active);
    // Enabling again and starting the definition binds its VF back.
    s.engine
        .set_num_vfs(NVME, 2, DestroyOptions::default())
        .unwrap();
    assert!(s.engine.start(&kept.uuid).unwrap().active);
}

#[test]
fn vfs_a_host_driver_uses_are_only_taken_when_named() {
    let s = setup("default");
    s.engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap();
    let vf = s
        .engine
        .inventory()
        .unwrap()
        .sriov_pfs
        .iter()
        .find(|p| p.function.address.to_string() == H200)
        .unwrap()
        .vfs[0]
        .function
        .clone();
    assert_eq!(vf.driver.as_deref(), Some("nvidia"));
    let error = s
        .engine
        .create(CreateRequest::new(CreateTarget::Vf {
            pf: H200.into(),
            vf: None,
        }))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NoCapacity, "{error}");
    let named = CreateRequest::new(CreateTarget::Vf {
        pf: H200.into(),
        vf: Some(vf.address.to_string()),
    });
    let info = s.engine.create(named).unwrap();
    assert!(info.active);
    s.engine
        .destroy(&info.uuid, DestroyOptions::default())
        .unwrap();
    let driver = s
        .sim
        .read_link(Path::new(&format!(
            "/sys/bus/pci/devices/{}/driver",
            vf.address
        )))
        .unwrap();
    assert!(
        driver.ends_with("nvidia"),
        "given back to its previous driver: {driver:?}"
    );
}

#[test]
fn nvidia_sriov_vgpus_come_back_after_a_reboot() {
    let s = setup("default");
    s.engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap();
    let request = CreateRequest {
        autostart: true,
        ..CreateRequest::new(CreateTarget::NvidiaVf {
            pf: H200.into(),
            type_id: 1405,
            vf: None,
        })
    };
    let info = s.engine.create(request).unwrap();
    s.sim.reboot();
    let engine = open(&s.sim, s.dir.path());
    let report = engine.reconcile().unwrap();
    assert_eq!(
        report.actions,
        vec![
            ReconcileAction::VfsRestored {
                pf: H200.into(),
                num_vfs: 32
            },
            ReconcileAction::Recreated {
                uuid: info.uuid.clone()
            },
        ]
    );
    let back = engine.instance(&info.uuid).unwrap();
    assert!(back.active);
    let vf = back.vf.unwrap();
    let current = s
        .sim
        .read(Path::new(&format!(
            "/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"
        )))
        .unwrap();
    assert_eq!(current.trim(), "1405");
}

#[test]
fn a_vf_taken_and_given_back_is_announced_once_not_again_by_its_bind_uevents() {
    let s = setup("samples");
    s.engine
        .set_num_vfs(NVME, 2, DestroyOptions::default())
        .unwrap();
    let events = s.engine.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = s
        .engine
        .spawn_hotplug(Box::new(SimEvents(s.sim.subscribe())), Arc::clone(&stop));

    let info = s
        .engine
        .create(CreateRequest::new(CreateTarget::Vf {
            pf: NVME.into(),
            vf: None,
        }))
        .unwrap();
    s.engine
        .destroy(&info.uuid, DestroyOptions::default())
        .unwrap();
    // An mdev made and removed outside the service after ours: the hotplug thread handles
    // uevents in order, so once its removal is seen every echo of the VF's binds was handled.
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
    let stranger_removed = EngineEvent::InstanceRemoved {
        uuid: stranger.into(),
    };
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !seen.contains(&stranger_removed) && std::time::Instant::now() < deadline {
        if let Some(event) = events.recv_timeout(Duration::from_millis(50)) {
            seen.push(event);
        }
    }
    assert!(seen.contains(&stranger_removed), "{seen:?}");
    let count = |wanted: EngineEvent| seen.iter().filter(|e| **e == wanted).count();
    let uuid = info.uuid.clone();
    assert_eq!(
        count(EngineEvent::InstanceAdded { uuid: uuid.clone() }),
        1,
        "{seen:?}"
    );
    assert_eq!(
        count(EngineEvent::InstanceChanged { uuid: uuid.clone() }),
        0,
        "the VF's bind/unbind uevents repeat nothing: {seen:?}"
    );
    assert_eq!(count(EngineEvent::InstanceRemoved { uuid }), 1, "{seen:?}");
    // One ParentChanged for the create and one for the destroy, none from the uevents.
    assert_eq!(
        count(EngineEvent::ParentChanged {
            parent: NVME.into()
        }),
        2,
        "{seen:?}"
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    thread.join().unwrap();
}
