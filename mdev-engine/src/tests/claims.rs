//! Domain claims: exclusive, all or nothing, idempotent release, transient instances made for a
//! claim.

use super::*;

#[test]
fn claims_are_exclusive_and_release_is_idempotent() {
    let s = setup("samples");
    let persistent = CreateRequest {
        persistent: true,
        ..mdev("mtty", "mtty-2", Some(UUID_A))
    };
    s.engine.create(persistent).unwrap();
    s.engine.stop(UUID_A, DestroyOptions::default()).unwrap();
    assert!(
        !s.engine.instance(UUID_A).unwrap().active,
        "stopped, still defined"
    );

    let a = domain(DOMAIN_UUID);
    let wants = [DeviceRequest {
        kind: "mdev".into(),
        uuid: Some(UUID_A.into()),
        ..DeviceRequest::default()
    }];
    let claimed = s.engine.claim_domain(&a, &wants).unwrap();
    assert!(claimed[0].active, "claim started the defined instance");
    assert_eq!(
        claimed[0].claim.as_ref().unwrap().domain_uuid.to_string(),
        DOMAIN_UUID
    );
    assert_eq!(
        s.engine.claim_domain(&a, &wants).unwrap().len(),
        1,
        "prepare again is a no-op"
    );
    assert!(s.engine.verify_domain(&a, &wants).is_empty());

    let b = domain(OTHER_DOMAIN_UUID);
    let error = s.engine.claim_domain(&b, &wants).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InUse);
    assert!(error.to_string().contains("device 1 of 1"), "{error}");
    let error = s
        .engine
        .destroy(UUID_A, DestroyOptions::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InUse);
    assert!(error.to_string().contains(&a.name), "{error}");
    let drift = s.engine.verify_domain(&b, &wants);
    assert!(
        drift
            .iter()
            .any(|line| line.contains("claimed by domain") && line.contains(&a.name)),
        "{drift:?}"
    );

    let report = s.engine.release_domain(&a).unwrap();
    assert_eq!(report.unclaimed, [UUID_A]);
    assert!(
        !s.engine.instance(UUID_A).unwrap().active,
        "release stopped what the claim started"
    );
    assert_eq!(
        s.engine.release_domain(&a).unwrap(),
        ReleaseReport::default()
    );
}

#[test]
fn a_failing_claim_leaves_nothing_behind() {
    let s = setup("samples");
    s.engine
        .set_num_vfs(NVME, 1, DestroyOptions::default())
        .unwrap();
    let vf = s.engine.inventory().unwrap().sriov_pfs[0].vfs[0]
        .function
        .address;
    let before = s.sim.tree_listing();
    let a = domain(DOMAIN_UUID);
    let wants = [
        DeviceRequest {
            kind: "vf".into(),
            pci_address: Some(vf.to_string()),
            ..DeviceRequest::default()
        },
        DeviceRequest {
            kind: "mdev".into(),
            profile: Some("no-such-profile".into()),
            ..DeviceRequest::default()
        },
    ];
    let error = s.engine.claim_domain(&a, &wants).unwrap_err();
    assert!(
        error.to_string().contains("device 2 of 2")
            && error.to_string().contains("no-such-profile"),
        "{error}"
    );
    assert_eq!(s.sim.tree_listing(), before);
    assert!(s.engine.instances().unwrap().is_empty());
}

#[test]
fn transient_vf_claims_are_destroyed_on_release_and_pending_releases_finish_on_start() {
    let s = setup("samples");
    s.engine
        .set_num_vfs(NVME, 1, DestroyOptions::default())
        .unwrap();
    let vf = s.engine.inventory().unwrap().sriov_pfs[0].vfs[0]
        .function
        .address;
    let a = domain(DOMAIN_UUID);
    let wants = [DeviceRequest {
        kind: "vf".into(),
        pci_address: Some(vf.to_string()),
        ..DeviceRequest::default()
    }];
    let claimed = s.engine.claim_domain(&a, &wants).unwrap();
    assert!(claimed[0].claim.as_ref().unwrap().transient);

    // The hook could not reach the daemon: it left a pending release.
    let pending = s.dir.path().join("var/lib/mdev-manager/pending-releases");
    std::fs::create_dir_all(&pending).unwrap();
    std::fs::write(pending.join(DOMAIN_UUID), &a.name).unwrap();
    std::fs::write(pending.join("../../etc"), "x").ok();
    let engine = open(&s.sim, s.dir.path());
    let report = engine.reconcile().unwrap();
    let done = report.actions.iter().find_map(|a| match a {
        ReconcileAction::PendingReleaseDone {
            domain_uuid,
            report,
        } if domain_uuid == DOMAIN_UUID => Some(report.clone()),
        _ => None,
    });
    assert_eq!(
        done.expect("pending release processed").destroyed,
        [claimed[0].uuid.clone()]
    );
    assert!(!pending.join(DOMAIN_UUID).exists());
    assert!(engine.instances().unwrap().is_empty());
    assert!(s
        .sim
        .read_link(Path::new(&format!("/sys/bus/pci/devices/{vf}/driver")))
        .is_err());
}

#[test]
fn claims_by_profile_create_transient_instances_with_the_requested_uuid() {
    let s = setup("samples");
    let a = domain(DOMAIN_UUID);
    let wants = [
        DeviceRequest {
            kind: "mdev".into(),
            profile: Some("mtty".into()),
            uuid: Some(UUID_A.into()),
            weight: Some(300),
            ..DeviceRequest::default()
        },
        DeviceRequest {
            kind: "mdev".into(),
            profile: Some("mdpy-hd".into()),
            ..DeviceRequest::default()
        },
    ];
    let claimed = s.engine.claim_domain(&a, &wants).unwrap();
    assert_eq!(claimed[0].uuid, UUID_A);
    assert_eq!(claimed[0].scheduling.weight, Some(300));
    assert!(claimed.iter().all(|i| i
        .claim
        .as_ref()
        .is_some_and(|c| c.transient && c.domain_uuid.to_string() == DOMAIN_UUID)));
    assert_eq!(s.sim.mdev_uuids().len(), 2);
    assert!(
        s.engine.verify_domain(&a, &wants).is_empty(),
        "{:?}",
        s.engine.verify_domain(&a, &wants)
    );
    // Someone removes one behind our back: verify reports it, never fails.
    s.sim
        .write(
            Path::new(&format!("/sys/bus/mdev/devices/{UUID_A}/remove")),
            b"1",
        )
        .unwrap();
    let drift = s.engine.verify_domain(&a, &wants);
    assert!(
        drift
            .iter()
            .any(|l| l.contains(UUID_A) && l.contains("does not exist")),
        "{drift:?}"
    );
    let report = s.engine.release_domain(&a).unwrap();
    assert_eq!(report.destroyed.len(), 2, "{report:?}");
    assert!(s.sim.mdev_uuids().is_empty());
    assert!(s.engine.instances().unwrap().is_empty());
}

#[test]
fn preparing_a_domain_twice_reuses_its_profile_instances() {
    let s = setup("samples");
    let a = domain(DOMAIN_UUID);
    let wants = [DeviceRequest {
        kind: "mdev".into(),
        profile: Some("mtty".into()),
        ..DeviceRequest::default()
    }];
    let first = s.engine.claim_domain(&a, &wants).unwrap();
    let second = s.engine.claim_domain(&a, &wants).unwrap();
    assert_eq!(first[0].uuid, second[0].uuid);
    assert_eq!(s.sim.mdev_uuids().len(), 1);
}

#[test]
fn prepare_refuses_one_instance_named_by_two_device_entries_and_changes_nothing() {
    let s = setup("samples");
    s.engine
        .create(mdev("mtty", "mtty-2", Some(UUID_A)))
        .unwrap();
    let before = saved_state(&s);
    let a = domain(DOMAIN_UUID);
    let by_uuid = |uuid: &str| DeviceRequest {
        kind: "mdev".into(),
        uuid: Some(uuid.into()),
        ..DeviceRequest::default()
    };
    // The same UUID, spelled differently the second time.
    let twice = [by_uuid(UUID_A), by_uuid(&UUID_A.to_uppercase())];
    let error = s.engine.claim_domain(&a, &twice).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgs, "{error}");
    assert!(
        error.to_string().contains(UUID_A) && error.to_string().contains("entries 1 and 2"),
        "{error}"
    );
    // A new instance asked for twice by UUID (with a profile) is refused the same way.
    let new_twice = [
        DeviceRequest {
            profile: Some("mtty".into()),
            ..by_uuid(UUID_B)
        },
        by_uuid(UUID_B),
    ];
    let error = s.engine.claim_domain(&a, &new_twice).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgs, "{error}");
    assert!(error.to_string().contains(UUID_B), "{error}");
    assert_eq!(saved_state(&s), before, "nothing changed");
    assert_eq!(s.sim.mdev_uuids(), [UUID_A]);
    assert!(s.engine.instance(UUID_A).unwrap().claim.is_none());
}

#[test]
fn re_preparing_a_held_device_refuses_weight_zero_and_keeps_the_weight() {
    let s = setup("samples");
    s.engine
        .create(mdev("mtty", "mtty-2", Some(UUID_A)))
        .unwrap();
    let a = domain(DOMAIN_UUID);
    let with_weight = |weight: u32| DeviceRequest {
        kind: "mdev".into(),
        uuid: Some(UUID_A.into()),
        weight: Some(weight),
        ..DeviceRequest::default()
    };
    s.engine.claim_domain(&a, &[with_weight(300)]).unwrap();
    let before = saved_state(&s);
    let error = s.engine.claim_domain(&a, &[with_weight(0)]).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgs, "{error}");
    assert!(error.to_string().contains("weight"), "{error}");
    assert_eq!(saved_state(&s), before, "nothing changed");
    let held = s.engine.instance(UUID_A).unwrap();
    assert_eq!(
        held.claim.map(|c| c.domain_uuid.to_string()).as_deref(),
        Some(DOMAIN_UUID)
    );
    assert_eq!(held.scheduling.weight, Some(300));
}
