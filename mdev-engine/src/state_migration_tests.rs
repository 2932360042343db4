//! The state file's schema migration, tested on a fixture the previous schema's code wrote
//! (`tests/fixtures/state-v1.json`): the scenario below drives the engine on a simulated host
//! into a state with every kind of record the file holds, and the fixture is what that code
//! saved. The same scenario rebuilds the host for the tests that reconcile after a migration.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use mdev_host::HostFs;
use mdev_sim::SimHost;

/// Where the fixtures live (relative to the crate).
const FIXTURE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

const T4: &str = "0000:3b:00.0";
const H200: &str = "0000:4b:00.0";
const AMD: &str = "0000:0c:00.0";
const INTEL: &str = "0000:00:02.0";
const RX6800: &str = "0000:41:00.0";
const T400: &str = "0000:61:00.0";

/// Autostart mdev on the T4 with a vendor attribute and scheduling fields.
const MDEV_AUTOSTART: &str = "5a0c1c7e-0001-4a1b-9c2d-3e4f5a6b7c01";
/// Persistent mdev on the Intel GPU, stopped: a definition only.
const MDEV_DEFINED: &str = "5a0c1c7e-0002-4a1b-9c2d-3e4f5a6b7c02";
/// Persistent mdev on the Intel GPU, stopped, then started by a domain's claim.
const MDEV_CLAIM_STARTED: &str = "5a0c1c7e-0003-4a1b-9c2d-3e4f5a6b7c03";
/// An mdev made behind the manager's back (upper case, as a tool might write it), adopted.
const MDEV_ADOPTED: &str = "5A0C1C7E-0004-4A1B-9C2D-3E4F5A6B7C04";
/// Persistent VF of the AMD MxGPU, from a profile.
const VF_PROFILE: &str = "5a0c1c7e-0005-4a1b-9c2d-3e4f5a6b7c05";
/// Autostart NVIDIA vGPU on an H200 VF, explicit type.
const NVIDIA_VF_AUTOSTART: &str = "5a0c1c7e-0006-4a1b-9c2d-3e4f5a6b7c06";
/// Transient NVIDIA vGPU from a profile.
const NVIDIA_VF_PROFILE: &str = "5a0c1c7e-0007-4a1b-9c2d-3e4f5a6b7c07";
/// Transient pass-through created by a domain's claim.
const PASSTHROUGH_CLAIMED: &str = "5a0c1c7e-0008-4a1b-9c2d-3e4f5a6b7c08";
/// Autostart pass-through taken with `force` (its group holds the host's NIC).
const PASSTHROUGH_FORCED: &str = "5a0c1c7e-0009-4a1b-9c2d-3e4f5a6b7c09";

const DOMAIN_A: &str = "c0ffee00-aaaa-4bbb-8ccc-000000000001";
const DOMAIN_B: &str = "c0ffee00-aaaa-4bbb-8ccc-000000000002";

/// The pass-through devices of `topologies/passthrough.toml`, added to the default host (IOMMU
/// groups chosen clear of the default host's).
const PASSTHROUGH_DEVICES: &str = r#"
[[pci_driver]]
name = "amdgpu"

[[pci_driver]]
name = "snd_hda_intel"

[[pci_driver]]
name = "pcieport"

[[pci_driver]]
name = "nouveau"

[[pci_driver]]
name = "igb"

[[pci_device]]
bdf = "0000:40:00.0"
vendor = 0x1002
device = 0x1478
class = 0x060400
iommu_group = 82
driver = "pcieport"

[[pci_device]]
bdf = "0000:41:00.0"
bridge = "0000:40:00.0"
vendor = 0x1002
device = 0x73bf
subsystem_vendor = 0x1002
subsystem_device = 0x0e3a
class = 0x030000
numa_node = 0
iommu_group = 82
driver = "amdgpu"

[[pci_device]]
bdf = "0000:41:00.1"
bridge = "0000:40:00.0"
vendor = 0x1002
device = 0xab28
subsystem_vendor = 0x1002
subsystem_device = 0xab28
class = 0x040300
numa_node = 0
iommu_group = 82
driver = "snd_hda_intel"

[[pci_device]]
bdf = "0000:61:00.0"
vendor = 0x10de
device = 0x1ff2
class = 0x030000
iommu_group = 85
driver = "nouveau"

[[pci_device]]
bdf = "0000:62:00.0"
vendor = 0x8086
device = 0x1539
class = 0x020000
iommu_group = 85
driver = "igb"
"#;

/// The host of the fixture: the embedded default host (T4 mdev vGPU, H200 SR-IOV vGPU, AMD
/// MxGPU, Intel GVT-g) plus the pass-through host's GPUs.
fn fixture_host() -> SimHost {
    let default = SimHost::builtin_topology_text("default").expect("default topology");
    SimHost::from_topology_str(&format!("{default}\n{PASSTHROUGH_DEVICES}")).unwrap()
}

fn open(sim: &SimHost, root: &Path) -> Arc<Engine> {
    Arc::new(
        Engine::new(
            Arc::new(sim.clone()),
            Arc::new(DiskFiles::new(root)),
            EngineConfig {
                readiness_timeout: Duration::from_secs(10),
                poll_interval: Duration::from_millis(10),
                write_timeout: Duration::from_secs(10),
                ..EngineConfig::default()
            },
        )
        .unwrap(),
    )
}

fn with_uuid(uuid: &str, target: CreateTarget) -> CreateRequest {
    CreateRequest {
        uuid: Some(uuid.to_owned()),
        ..CreateRequest::new(target)
    }
}

fn mdev(uuid: &str, parent: &str, type_id: &str) -> CreateRequest {
    with_uuid(
        uuid,
        CreateTarget::Mdev {
            parent: parent.into(),
            type_id: type_id.into(),
        },
    )
}

fn profile(uuid: &str, name: &str, parent: &str) -> CreateRequest {
    with_uuid(
        uuid,
        CreateTarget::Profile {
            profile: name.into(),
            parent: Some(parent.into()),
        },
    )
}

/// Drives the engine into a state holding every kind of record the state file has: mdev, VF,
/// NVIDIA VF and pass-through instances (persistent, transient, autostart, stopped
/// definitions, adopted, claimed, started by a claim, forced), vendor attributes, scheduling
/// fields, parent schedules (a typed policy and a raw value) and a VF count.
fn drive_rich_state(sim: &SimHost, engine: &Engine) {
    // Parent schedules first: NVIDIA refuses a policy change while vGPUs run.
    engine
        .set_parent_policy(
            T4,
            crate::schedule::ParentScheduleChange {
                policy: Some(vgpu_sched::Policy::EqualShare),
                period_us: None,
                time_slice_us: Some(2_000),
            },
        )
        .unwrap();
    engine
        .set_parent_schedule(INTEL, serde_json::json!({"policy": "fixed-share"}))
        .unwrap();

    engine
        .create(CreateRequest {
            autostart: true,
            attributes: vec![("nvidia/vgpu_params".into(), "frame_rate_limiter=0".into())],
            scheduling: Scheduling {
                weight: Some(200),
                min_share: Some(10),
                max_share: Some(50),
            },
            ..mdev(MDEV_AUTOSTART, T4, "nvidia-223")
        })
        .unwrap();

    for uuid in [MDEV_DEFINED, MDEV_CLAIM_STARTED] {
        engine
            .create(CreateRequest {
                persistent: true,
                scheduling: Scheduling {
                    weight: Some(50),
                    ..Scheduling::default()
                },
                ..mdev(uuid, INTEL, "i915-GVTg_V5_8")
            })
            .unwrap();
        engine.stop(uuid, DestroyOptions::default()).unwrap();
    }

    // An mdev the manager did not make, adopted and made persistent.
    sim.write(
        Path::new(&format!(
            "/sys/class/mdev_bus/{INTEL}/mdev_supported_types/i915-GVTg_V5_4/create"
        )),
        MDEV_ADOPTED.to_ascii_lowercase().as_bytes(),
    )
    .unwrap();
    engine.adopt(MDEV_ADOPTED).unwrap();
    engine.set_persistence(MDEV_ADOPTED, true, false).unwrap();

    engine
        .create(CreateRequest {
            persistent: true,
            ..profile(VF_PROFILE, "amd-mxgpu-vf", AMD)
        })
        .unwrap();

    engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap();
    engine
        .create(CreateRequest {
            autostart: true,
            ..with_uuid(
                NVIDIA_VF_AUTOSTART,
                CreateTarget::NvidiaVf {
                    pf: H200.into(),
                    type_id: 1407,
                    vf: None,
                },
            )
        })
        .unwrap();
    engine
        .create(profile(NVIDIA_VF_PROFILE, "nvidia-h200-35c", H200))
        .unwrap();

    engine
        .create(CreateRequest {
            autostart: true,
            force: true,
            ..with_uuid(
                PASSTHROUGH_FORCED,
                CreateTarget::Passthrough {
                    gpu: T400.into(),
                    force: true,
                },
            )
        })
        .unwrap();

    engine
        .claim_domain(
            &DomainRef {
                name: "vm-alpha".into(),
                uuid: DOMAIN_A.into(),
            },
            &[
                DeviceRequest {
                    kind: "mdev".into(),
                    uuid: Some(MDEV_CLAIM_STARTED.into()),
                    ..DeviceRequest::default()
                },
                DeviceRequest {
                    kind: "passthrough".into(),
                    uuid: Some(PASSTHROUGH_CLAIMED.into()),
                    pci_address: Some(RX6800.into()),
                    weight: Some(300),
                    ..DeviceRequest::default()
                },
            ],
        )
        .unwrap();
    engine
        .claim_domain(
            &DomainRef {
                name: "vm-beta".into(),
                uuid: DOMAIN_B.into(),
            },
            &[DeviceRequest {
                kind: "mdev".into(),
                uuid: Some(MDEV_AUTOSTART.into()),
                ..DeviceRequest::default()
            }],
        )
        .unwrap();
}

/// What a reconcile reports on the fixture's host: the stopped definition, kept.
fn only_the_stopped_definition() -> ReconcileAction {
    ReconcileAction::Vanished {
        uuid: MDEV_DEFINED.into(),
        forgotten: false,
    }
}

fn state_path(root: &Path) -> std::path::PathBuf {
    root.join("var/lib/mdev-manager")
        .join(crate::state::STATE_FILE_NAME)
}

/// The scenario reaches every kind of record. (The schema-1 code wrote
/// `tests/fixtures/state-v1.json` from it, see the fixture's README; today's code no longer
/// writes that file.)
#[test]
fn the_rich_scenario_saves_every_kind_of_record() {
    let sim = fixture_host();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path());
    drive_rich_state(&sim, &engine);
    let text = std::fs::read_to_string(state_path(dir.path())).unwrap();
    let saved: serde_json::Value = serde_json::from_str(&text).unwrap();
    let kinds: std::collections::BTreeSet<&str> = saved["instances"]
        .as_object()
        .unwrap()
        .values()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["mdev", "nvidia-vf", "passthrough", "vf"]
    );
    assert_eq!(saved["instances"].as_object().unwrap().len(), 9);
    assert_eq!(saved["passthrough"].as_object().unwrap().len(), 2);
    assert_eq!(saved["parents"][H200]["num_vfs"], 32);
    // Nothing for a reconcile to do on the host that wrote it (the stopped definition is
    // reported, as every pass reports it, and kept).
    let report = engine.reconcile().unwrap();
    assert_eq!(
        report.actions,
        [only_the_stopped_definition()],
        "{report:?}"
    );
}

/// The fixture the schema-1 code wrote.
fn fixture_v1() -> Vec<u8> {
    std::fs::read(Path::new(FIXTURE_DIR).join("state-v1.json")).unwrap()
}

/// A state directory under `root` holding `data` as its state file.
fn put_state(root: &Path, data: &[u8]) {
    let path = state_path(root);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

fn state_dir() -> std::path::PathBuf {
    EngineConfig::default().state_dir
}

fn uuid(text: &str) -> crate::state::Uuid {
    text.parse().unwrap()
}

#[test]
fn the_schema_1_fixture_migrates_to_the_state_todays_code_makes_of_the_same_scenario() {
    // Today's code on the same host and calls: its state is what the migration must give.
    let sim = fixture_host();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path());
    drive_rich_state(&sim, &engine);
    let expected = lock(&engine.state).clone();
    drop(engine);

    let migrated_dir = tempfile::tempdir().unwrap();
    put_state(migrated_dir.path(), &fixture_v1());
    let files = DiskFiles::new(migrated_dir.path());
    let migrated = state::load(&files, &state_dir()).unwrap();
    assert_eq!(migrated, expected);
    assert_eq!(migrated.schema_version, state::STATE_SCHEMA_VERSION);
    assert_eq!(state::STATE_SCHEMA_VERSION, 2);

    // The typed fields hold what the schema-1 strings said.
    let adopted = migrated
        .instance(&MDEV_ADOPTED.to_ascii_lowercase())
        .unwrap();
    assert_eq!(adopted.uuid.to_string(), MDEV_ADOPTED.to_ascii_lowercase());
    assert_eq!(adopted.owner, Owner::Adopted);
    assert_eq!(
        (adopted.parent.as_str(), adopted.type_id.as_str()),
        (INTEL, "i915-GVTg_V5_4")
    );
    let autostart = migrated.instance(MDEV_AUTOSTART).unwrap();
    assert_eq!(
        autostart.attributes,
        [(
            "nvidia/vgpu_params".to_owned(),
            "frame_rate_limiter=0".to_owned()
        )]
    );
    assert_eq!(
        autostart.scheduling,
        Scheduling {
            weight: Some(200),
            min_share: Some(10),
            max_share: Some(50)
        }
    );
    let claim = autostart.claim.as_ref().unwrap();
    assert_eq!(
        (claim.domain_uuid, claim.transient),
        (uuid(DOMAIN_B), false)
    );
    let started = migrated.instance(MDEV_CLAIM_STARTED).unwrap();
    assert!(started.claim.as_ref().unwrap().started_by_claim);
    let vgpu = migrated.instance(NVIDIA_VF_PROFILE).unwrap();
    assert_eq!(vgpu.kind, InstanceKind::NvidiaVf);
    assert_eq!(vgpu.parent.pci_address(), H200.parse().ok());
    assert_eq!(
        vgpu.profile.as_ref().map(|p| p.as_str()),
        Some("nvidia-h200-35c")
    );
    let vf = migrated.instance(VF_PROFILE).unwrap();
    assert_eq!(
        (vf.kind, vf.type_id.as_str()),
        (InstanceKind::Vf, "vfio-pci")
    );
    assert!(vf.vf.is_some());
    let forced = migrated.instance(PASSTHROUGH_FORCED).unwrap();
    assert!(forced.force && forced.autostart);
    assert_eq!(forced.vf, T400.parse().ok());
    let binding = &migrated.passthrough[&uuid(PASSTHROUGH_CLAIMED)];
    assert_eq!(binding.gpu, RX6800.parse().unwrap());
    assert_eq!(binding.phase, crate::passthrough::BindPhase::Bound);
    assert_eq!(migrated.parents[H200].num_vfs, Some(32));
    assert_eq!(
        migrated.parents[INTEL].schedule,
        Some(serde_json::json!({"policy": "fixed-share"}))
    );
    assert!(migrated.parents[T4].schedule.is_some());
    assert_eq!(migrated.instances.len(), 9);
}

#[test]
fn a_migrated_state_is_written_as_schema_2_on_the_next_save_and_the_schema_1_bytes_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    put_state(dir.path(), &fixture_v1());
    let files = DiskFiles::new(dir.path());
    let migrated = state::load(&files, &state_dir()).unwrap();
    let backup = state_path(dir.path()).with_file_name(state::STATE_V1_BACKUP_NAME);
    assert_eq!(std::fs::read(&backup).unwrap(), fixture_v1());
    // Loading alone does not rewrite the state file.
    assert_eq!(std::fs::read(state_path(dir.path())).unwrap(), fixture_v1());

    state::save(&files, &state_dir(), &migrated).unwrap();
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state_path(dir.path())).unwrap()).unwrap();
    assert_eq!(saved["schema_version"], 2);
    let reloaded = state::load(&files, &state_dir()).unwrap();
    assert_eq!(reloaded, migrated, "schema 2 round-trips");
    // Schema 2 keeps schema 1's shape: the same JSON but for the version.
    let mut v1: serde_json::Value = serde_json::from_slice(&fixture_v1()).unwrap();
    v1["schema_version"] = serde_json::json!(2);
    assert_eq!(saved, v1);
    // A schema-2 load leaves the backup as it was.
    std::fs::remove_file(&backup).unwrap();
    state::load(&files, &state_dir()).unwrap();
    assert!(!backup.exists());
}

#[test]
fn reconcile_after_the_migration_changes_nothing_on_the_host_that_wrote_the_state() {
    let sim = fixture_host();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path());
    drive_rich_state(&sim, &engine);
    let instances_before = engine.instances().unwrap();
    let state_before = lock(&engine.state).clone();
    drop(engine);
    let host_before = sim.tree_listing();

    // The daemon restarts on the upgraded build with the state the schema-1 build wrote.
    put_state(dir.path(), &fixture_v1());
    let engine = open(&sim, dir.path());
    let report = engine.reconcile().unwrap();
    assert_eq!(
        report.actions,
        [only_the_stopped_definition()],
        "{report:?}"
    );
    assert_eq!(sim.tree_listing(), host_before, "the host is untouched");
    assert_eq!(engine.instances().unwrap(), instances_before);
    assert_eq!(
        *lock(&engine.state),
        state_before,
        "the records are unchanged"
    );
}

/// The fixture with one field of one record replaced.
fn corrupted(record: &str, field: &str, value: serde_json::Value) -> Vec<u8> {
    let mut state: serde_json::Value = serde_json::from_slice(&fixture_v1()).unwrap();
    let object = state["instances"][record].as_object_mut().unwrap();
    match field.split_once('.') {
        Some((outer, inner)) => {
            object.get_mut(outer).unwrap()[inner] = value;
        }
        None => {
            object.insert(field.to_owned(), value);
        }
    }
    serde_json::to_vec_pretty(&state).unwrap()
}

#[test]
fn a_corrupt_schema_1_field_is_refused_naming_the_instance_and_the_field_and_changes_nothing() {
    let cases = [
        (MDEV_AUTOSTART, "parent", serde_json::json!("../../etc")),
        (MDEV_AUTOSTART, "type_id", serde_json::json!("")),
        (MDEV_DEFINED, "uuid", serde_json::json!("not-a-uuid")),
        (MDEV_DEFINED, "uuid", serde_json::json!(MDEV_AUTOSTART)),
        (
            MDEV_CLAIM_STARTED,
            "claim.domain_uuid",
            serde_json::json!("vm-alpha"),
        ),
        (VF_PROFILE, "vf", serde_json::json!("0000:0c:02")),
        (VF_PROFILE, "kind", serde_json::json!("gpu")),
        (
            NVIDIA_VF_PROFILE,
            "profile",
            serde_json::json!("Not A Profile"),
        ),
        (NVIDIA_VF_AUTOSTART, "weight", serde_json::json!(0)),
        (NVIDIA_VF_AUTOSTART, "autostart", serde_json::json!("yes")),
        (PASSTHROUGH_FORCED, "owner", serde_json::json!("somebody")),
    ];
    for (record, field, value) in cases {
        let dir = tempfile::tempdir().unwrap();
        let data = corrupted(record, field, value.clone());
        put_state(dir.path(), &data);
        let sim = fixture_host();
        let error = Engine::new(
            Arc::new(sim.clone()),
            Arc::new(DiskFiles::new(dir.path())),
            EngineConfig::default(),
        )
        .unwrap_err();
        let text = vgpu_types::error_chain(&error);
        assert!(
            text.contains(&format!("instance {record}"))
                && text.contains(&format!("field \"{field}\""))
                && text.contains("state.json")
                && text.contains("schema version 1"),
            "{field} = {value}: {text}"
        );
        assert_eq!(error.kind(), ErrorKind::Failed, "{text}");
        assert_eq!(
            std::fs::read(state_path(dir.path())).unwrap(),
            data,
            "the file is left as it was"
        );
        assert!(
            !state_path(dir.path())
                .with_file_name(state::STATE_V1_BACKUP_NAME)
                .exists(),
            "no backup of a file that was not migrated"
        );
    }
}

#[test]
fn a_schema_1_record_with_its_optional_fields_left_out_takes_their_defaults() {
    // Written by an early schema-1 build: no attributes, vf, previous_driver, force,
    // started_by_claim or scheduling keys.
    let text = format!(
        r#"{{"schema_version": 1, "instances": {{"{MDEV_DEFINED}": {{
            "uuid": "{MDEV_DEFINED}", "kind": "mdev", "parent": "mtty", "type_id": "mtty-1",
            "profile": null, "owner": "created-by-us", "autostart": false, "persistent": true,
            "claim": {{"domain_name": "vm", "domain_uuid": "{}", "transient": false}}
        }}}}}}"#,
        DOMAIN_A.to_ascii_uppercase()
    );
    let dir = tempfile::tempdir().unwrap();
    put_state(dir.path(), text.as_bytes());
    let state = state::load(&DiskFiles::new(dir.path()), &state_dir()).unwrap();
    let record = state.instance(MDEV_DEFINED).unwrap();
    assert_eq!(record.scheduling, Scheduling::default());
    assert!(record.attributes.is_empty() && record.vf.is_none() && !record.force);
    let claim = record.claim.as_ref().unwrap();
    assert!(!claim.started_by_claim);
    assert_eq!(claim.domain_uuid.to_string(), DOMAIN_A, "lower-cased");
    assert!(state.parents.is_empty() && state.passthrough.is_empty());
}

#[test]
fn schema_1_write_ahead_records_migrate_with_their_keys_checked() {
    // What a schema-1 build left when it crashed inside a batch and inside a VF count change.
    let pending = MDEV_DEFINED.to_ascii_uppercase();
    let good = format!(
        r#"{{"schema_version": 1,
            "pending_creates": ["{pending}"], "pending_destroys": ["{MDEV_AUTOSTART}"],
            "intents": {{
                "{VF_PROFILE}": {{"making": "instance", "kind": "vf", "parent": "{AMD}",
                                  "type_id": "vfio-pci", "vf": "0000:0c:02.0"}},
                "0000:4B:00.0": {{"making": "vf_count", "from": 0, "to": 32}}
            }}}}"#
    );
    let dir = tempfile::tempdir().unwrap();
    put_state(dir.path(), good.as_bytes());
    let state = state::load(&DiskFiles::new(dir.path()), &state_dir()).unwrap();
    assert_eq!(
        state
            .pending_creates
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [MDEV_DEFINED]
    );
    assert!(state.pending_destroys.contains(&uuid(MDEV_AUTOSTART)));
    assert_eq!(
        state.intents.keys().cloned().collect::<Vec<_>>(),
        [H200.to_owned(), VF_PROFILE.to_owned()],
        "keys in their lower-case form"
    );
    match &state.intents[VF_PROFILE] {
        crate::intents::Intent::Instance {
            parent, type_id, ..
        } => {
            assert_eq!((parent.as_str(), type_id.as_str()), (AMD, "vfio-pci"));
        }
        other => panic!("{other:?}"),
    }

    for (bad, record, field) in [
        (
            good.replace(&pending, "not-a-uuid"),
            "pending create not-a-uuid",
            "(key)",
        ),
        (
            good.replace("\"parent\": \"0000:0c:00.0\"", "\"parent\": \"a/b\""),
            "intent",
            "(intent)",
        ),
        (
            good.replace("0000:4B:00.0", "pf-zero"),
            "intent pf-zero",
            "(key)",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        put_state(dir.path(), bad.as_bytes());
        let error = state::load(&DiskFiles::new(dir.path()), &state_dir()).unwrap_err();
        let text = vgpu_types::error_chain(&error);
        assert!(
            text.contains(record) && text.contains(&format!("field \"{field}\"")),
            "{text}"
        );
    }
}
