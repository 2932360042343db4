//! The planner on hand-made views, and apply on the simulated host.

use std::path::PathBuf;
use std::sync::Arc;

use vgpu_profiles::desired::{DesiredInstances, DesiredState, DesiredVfCount};

use super::*;
use crate::{Claim, DiskFiles, EngineConfig};
use mdev_sim::{Fault, SimHost};

fn running(uuid: &str, parent: &str, profile: &str) -> InstanceInfo {
    InstanceInfo {
        uuid: uuid.into(),
        kind: InstanceKind::Mdev,
        parent: parent.into(),
        type_id: format!("{profile}-type"),
        profile: Some(profile.into()),
        owner: Some(Owner::CreatedByUs),
        active: true,
        persistent: false,
        autostart: false,
        claim: None,
        scheduling: Scheduling::default(),
        vf: None,
        iommu_group: None,
        sysfs_path: PathBuf::new(),
    }
}

fn held(mut info: InstanceInfo, vm: &str) -> InstanceInfo {
    info.claim = Some(Claim {
        domain_name: vm.into(),
        domain_uuid: "aaaaaaaa-0000-4000-8000-000000000001".parse().unwrap(),
        transient: false,
        started_by_claim: false,
    });
    info
}

fn entry(parent: Option<&str>, profile: &str, count: u32) -> DesiredInstances {
    DesiredInstances {
        parent: parent.map(str::to_owned),
        profile: profile.into(),
        type_id: None,
        count,
        autostart: false,
        weight: None,
        min_share: None,
        max_share: None,
    }
}

fn desired(instances: Vec<DesiredInstances>) -> DesiredState {
    DesiredState {
        instances,
        ..DesiredState::default()
    }
}

#[test]
fn plan_creates_what_is_missing_and_removes_what_no_entry_wants_on_a_named_parent() {
    let host = vec![running("u1", "gpu0", "A-2Q"), running("u2", "gpu0", "A-4Q")];
    let plan = plan(
        &desired(vec![entry(Some("gpu0"), "A-2Q", 3)]),
        &host,
        &[],
        false,
    )
    .unwrap();
    assert_eq!(plan.creates.len(), 1);
    assert_eq!(plan.creates[0].count, 2);
    assert_eq!(plan.creates[0].reason, "1 of 3 running");
    assert_eq!(plan.destroys.len(), 1);
    assert_eq!(plan.destroys[0].instance.uuid, "u2");
    assert!(!plan.destroys[0].forced);
    assert!(plan.refused.is_empty());
}

#[test]
fn plan_leaves_parents_the_file_does_not_name_alone() {
    let host = vec![running("u1", "gpu1", "A-4Q")];
    let plan = plan(
        &desired(vec![entry(Some("gpu0"), "A-2Q", 1)]),
        &host,
        &[],
        false,
    )
    .unwrap();
    assert!(plan.destroys.is_empty());
    assert_eq!(plan.creates[0].count, 1);
}

#[test]
fn plan_matching_the_host_is_empty() {
    let host = vec![running("u1", "gpu0", "A-2Q"), running("u2", "gpu1", "A-2Q")];
    let plan = plan(&desired(vec![entry(None, "A-2Q", 2)]), &host, &[], false).unwrap();
    assert!(plan.is_empty(), "{}", plan.render());
    assert_eq!(plan.render(), "no changes: the host matches\n");
}

#[test]
fn plan_refuses_removing_an_instance_a_vm_holds_and_names_it() {
    let host = vec![held(running("u1", "gpu0", "A-4Q"), "vm-web")];
    let plan = plan(
        &desired(vec![entry(Some("gpu0"), "A-2Q", 1)]),
        &host,
        &[],
        false,
    )
    .unwrap();
    assert!(plan.destroys.is_empty());
    assert_eq!(plan.refused.len(), 1);
    assert_eq!(plan.refused[0].uuid, "u1");
    assert!(
        plan.refused[0].reason.contains("held by VM vm-web"),
        "{:?}",
        plan.refused
    );
    assert!(plan.render().contains("refused u1 on gpu0"));
}

#[test]
fn plan_refuses_removing_an_instance_the_service_did_not_create() {
    let mut adopted = running("u1", "gpu0", "A-4Q");
    adopted.owner = Some(Owner::Adopted);
    let mut foreign = running("u2", "gpu0", "A-4Q");
    foreign.owner = None;
    foreign.profile = None;
    let plan = plan(
        &desired(vec![entry(Some("gpu0"), "A-2Q", 1)]),
        &[adopted, foreign],
        &[],
        false,
    )
    .unwrap();
    assert_eq!(plan.refused.len(), 2);
    assert!(
        plan.refused[0].reason.contains("adopted"),
        "{:?}",
        plan.refused
    );
    assert!(
        plan.refused[1].reason.contains("found on the host"),
        "{:?}",
        plan.refused
    );
}

#[test]
fn plan_with_force_removes_held_and_foreign_instances_marked_forced() {
    let host = vec![held(running("u1", "gpu0", "A-4Q"), "vm-web")];
    let plan = plan(
        &desired(vec![entry(Some("gpu0"), "A-2Q", 1)]),
        &host,
        &[],
        true,
    )
    .unwrap();
    assert!(plan.refused.is_empty());
    assert_eq!(plan.destroys.len(), 1);
    assert!(plan.destroys[0].forced);
    assert!(plan.destroys[0].reason.contains("vm-web"));
}

#[test]
fn plan_keeps_the_held_instances_when_there_are_too_many() {
    let host = vec![
        running("u1", "gpu0", "A-2Q"),
        held(running("u2", "gpu0", "A-2Q"), "vm-db"),
    ];
    let plan = plan(
        &desired(vec![entry(Some("gpu0"), "A-2Q", 1)]),
        &host,
        &[],
        false,
    )
    .unwrap();
    assert!(plan.refused.is_empty());
    assert_eq!(plan.destroys.len(), 1);
    assert_eq!(plan.destroys[0].instance.uuid, "u1");
}

#[test]
fn plan_reweights_kept_instances_and_leaves_fields_the_file_does_not_set() {
    let mut info = running("u1", "gpu0", "A-2Q");
    info.scheduling = Scheduling {
        weight: Some(100),
        min_share: Some(10),
        max_share: None,
    };
    let mut wanted = entry(Some("gpu0"), "A-2Q", 1);
    wanted.weight = Some(300);
    wanted.autostart = true;
    let plan = plan(&desired(vec![wanted]), &[info], &[], false).unwrap();
    assert_eq!(plan.updates.len(), 1);
    let (now, to) = plan.updates[0].scheduling.unwrap();
    assert_eq!(now.weight, Some(100));
    assert_eq!(
        to,
        Scheduling {
            weight: Some(300),
            min_share: Some(10),
            max_share: None
        }
    );
    assert_eq!(
        plan.updates[0].persistence,
        Some(((false, false), (true, true)))
    );
    assert!(plan.creates.is_empty() && plan.destroys.is_empty());
}

#[test]
fn plan_changes_vf_counts_that_differ_and_refuses_an_unknown_pf() {
    let mut state = desired(Vec::new());
    state.sriov = vec![DesiredVfCount {
        pf: "0000:41:00.0".into(),
        num_vfs: 4,
    }];
    let plan = plan(&state, &[], &[("0000:41:00.0".into(), 2)], false).unwrap();
    assert_eq!(
        plan.vf_counts,
        vec![PlannedVfCount {
            pf: "0000:41:00.0".into(),
            from: 2,
            to: 4
        }]
    );
    let error = super::plan(&state, &[], &[], false).unwrap_err();
    assert_eq!(
        error.to_string(),
        "apply: 0000:41:00.0 is not an SR-IOV PF on this host"
    );
}

#[test]
fn plan_gives_a_pinned_entry_its_instances_before_a_placed_one() {
    let host = vec![running("u1", "gpu0", "A-2Q"), running("u2", "gpu1", "A-2Q")];
    let plan = plan(
        &desired(vec![entry(None, "A-2Q", 1), entry(Some("gpu0"), "A-2Q", 1)]),
        &host,
        &[],
        false,
    )
    .unwrap();
    assert!(plan.is_empty(), "{}", plan.render());
}

fn sim_engine() -> (SimHost, Arc<Engine>, tempfile::TempDir) {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(
        Engine::new(
            Arc::new(sim.clone()),
            Arc::new(DiskFiles::new(dir.path())),
            EngineConfig::default(),
        )
        .unwrap(),
    );
    (sim, engine, dir)
}

#[test]
fn apply_then_plan_again_is_empty() {
    let (_sim, engine, _dir) = sim_engine();
    let mut wanted = entry(Some("mtty"), "mtty", 2);
    wanted.weight = Some(250);
    let state = desired(vec![wanted]);
    let first = engine.plan_apply(&state, false).unwrap();
    assert_eq!(first.creates[0].count, 2);
    let report = engine.apply_plan(&first).unwrap();
    assert_eq!(report.created.len(), 2);
    for uuid in &report.created {
        assert_eq!(engine.instance(uuid).unwrap().scheduling.weight, Some(250));
    }
    let second = engine.plan_apply(&state, false).unwrap();
    assert!(second.is_empty(), "{}", second.render());
}

#[test]
fn apply_whose_create_fails_recreates_what_it_removed() {
    let (sim, engine, _dir) = sim_engine();
    engine
        .create_batch(vec![
            CreateRequest::new(CreateTarget::Profile {
                profile: "mtty-dual".into(),
                parent: Some("mtty".into()),
            });
            2
        ])
        .unwrap();
    let before: Vec<String> = sim.mdev_uuids();
    let plan = engine
        .plan_apply(&desired(vec![entry(Some("mtty"), "mtty", 2)]), false)
        .unwrap();
    assert_eq!(plan.destroys.len(), 2);
    sim.inject_fault(Fault::fail("*/mtty-1/create", libc::EIO));
    let error = engine.apply_plan(&plan).unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with("apply: creating instances failed, rolled back"),
        "{text}"
    );
    assert_eq!(sim.mdev_uuids(), before);
    for uuid in &before {
        assert_eq!(
            engine.instance(uuid).unwrap().profile.as_deref(),
            Some("mtty-dual")
        );
    }
}

#[test]
fn a_cancelled_apply_stops_before_its_creates_and_still_recreates_what_it_removed() {
    let (sim, engine, _dir) = sim_engine();
    engine
        .create_batch(vec![
            CreateRequest::new(CreateTarget::Profile {
                profile: "mtty-dual".into(),
                parent: Some("mtty".into()),
            });
            2
        ])
        .unwrap();
    let before: Vec<String> = sim.mdev_uuids();
    let plan = engine
        .plan_apply(&desired(vec![entry(Some("mtty"), "mtty", 2)]), false)
        .unwrap();
    assert_eq!(plan.destroys.len(), 2);
    // Cancelled before it starts: the removals take no cancel check, the creates do, and the
    // rollback must not be stopped by the same cancel.
    let token = crate::CancelToken::new();
    token.cancel();
    let error = engine
        .apply_plan_with(&OperationContext::cancellable(token), &plan)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Cancelled, "{error}");
    let text = error.to_string();
    assert!(
        text.starts_with("apply: creating instances failed, rolled back"),
        "{text}"
    );
    assert_eq!(sim.mdev_uuids(), before);
    for uuid in &before {
        assert_eq!(
            engine.instance(uuid).unwrap().profile.as_deref(),
            Some("mtty-dual")
        );
    }
}

#[test]
fn apply_of_a_plan_with_refusals_changes_nothing() {
    let (sim, engine, _dir) = sim_engine();
    let created = engine
        .create_batch(vec![CreateRequest::new(CreateTarget::Profile {
            profile: "mtty-dual".into(),
            parent: Some("mtty".into()),
        })])
        .unwrap();
    engine
        .claim_domain(
            &crate::DomainRef {
                name: "vm-web".into(),
                uuid: "aaaaaaaa-0000-4000-8000-000000000001".into(),
            },
            &[crate::DeviceRequest {
                kind: "mdev".into(),
                uuid: Some(created[0].uuid.clone()),
                ..Default::default()
            }],
        )
        .unwrap();
    let before = sim.mdev_uuids();
    let plan = engine
        .plan_apply(&desired(vec![entry(Some("mtty"), "mtty", 1)]), false)
        .unwrap();
    assert_eq!(plan.refused.len(), 1);
    let error = engine.apply_plan(&plan).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InUse);
    assert!(error.to_string().contains("held by VM vm-web"), "{error}");
    assert_eq!(sim.mdev_uuids(), before);
}
