//! Batches: all or nothing, the intent saved first and the records once, destroy batches checked
//! before anything is removed, and reconcile finishing a batch a crash cut short.

use super::*;

#[test]
fn batch_failure_rolls_back_everything_and_names_the_step() {
    let s = setup("samples");
    let before = s.sim.tree_listing();
    s.sim
        .inject_fault(Fault::fail("/sys/class/mdev_bus/mdpy/*/create", libc::EIO));
    let error = s
        .engine
        .create_batch(vec![
            mdev("mtty", "mtty-2", None),
            mdev("mbochs", "mbochs-small", None),
            mdev("mdpy", "mdpy-vga", None),
        ])
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("request 3 of 3")
            && text.contains("mdpy-vga")
            && text.contains("rolled back"),
        "{text}"
    );
    assert_eq!(error.kind(), ErrorKind::Failed);
    let source = std::error::Error::source(&error).expect("cause");
    assert!(
        source
            .to_string()
            .contains("/sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-vga/create"),
        "{source}"
    );
    assert!(s.sim.mdev_uuids().is_empty());
    assert_eq!(
        s.sim.tree_listing(),
        before,
        "the host is as before the batch"
    );
    assert!(saved_state(&s)["instances"].as_object().unwrap().is_empty());
}

#[test]
fn rollback_failure_is_reported_with_the_device() {
    let s = setup("samples");
    s.sim
        .inject_fault(Fault::fail("/sys/class/mdev_bus/mdpy/*/create", libc::EIO));
    s.sim.inject_fault(Fault::fail("*/remove", libc::EIO));
    let error = s
        .engine
        .create_batch(vec![
            mdev("mtty", "mtty-2", Some(UUID_A)),
            mdev("mdpy", "mdpy-vga", None),
        ])
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("rollback incomplete") && text.contains(UUID_A),
        "{text}"
    );
}

#[test]
fn batch_create_saves_its_intent_first_and_its_records_once_and_destroy_batch_saves_once() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = Arc::new(RecordingFiles {
        disk: DiskFiles::new(dir.path()),
        saved: Mutex::new(Vec::new()),
    });
    let engine = Engine::new(Arc::new(sim.clone()), files.clone(), config()).unwrap();
    let requests: Vec<CreateRequest> = (0..3).map(|_| mdev("mdpy", "mdpy-vga", None)).collect();
    let created = engine.create_batch(requests).unwrap();
    let mut uuids: Vec<String> = created.iter().map(|i| i.uuid.clone()).collect();
    uuids.sort();
    let saved = lock(&files.saved).clone();
    assert_eq!(saved.len(), 2, "intent + records: {saved:#?}");
    assert_eq!(sorted_keys(&saved[0], "pending_creates"), uuids);
    assert!(sorted_keys(&saved[0], "instances").is_empty());
    assert_eq!(sorted_keys(&saved[1], "instances"), uuids);
    assert!(saved[1].get("pending_creates").is_none(), "{:#}", saved[1]);
    let mut on_host = sim.mdev_uuids();
    on_host.sort();
    assert_eq!(on_host, uuids);

    lock(&files.saved).clear();
    engine
        .destroy_batch(&uuids, DestroyOptions::default())
        .unwrap();
    let saved = lock(&files.saved).clone();
    assert_eq!(
        saved.len(),
        1,
        "transient instances need no intent: {saved:#?}"
    );
    assert!(sorted_keys(&saved[0], "instances").is_empty());
    assert!(sim.mdev_uuids().is_empty());
}

#[test]
fn failed_batch_rolls_back_and_clears_its_intent() {
    let s = setup("samples");
    // mdpy holds 4 instances: the fifth request fails, the first four are removed again.
    let requests: Vec<CreateRequest> = (0..5).map(|_| mdev("mdpy", "mdpy-vga", None)).collect();
    let error = s.engine.create_batch(requests).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NoCapacity, "{error}");
    assert!(s.sim.mdev_uuids().is_empty());
    let state = saved_state(&s);
    assert!(state.get("pending_creates").is_none(), "{state:#}");
    assert!(sorted_keys(&state, "instances").is_empty());
}

#[test]
fn destroy_batch_checks_every_uuid_before_removing_any() {
    let s = setup("samples");
    let created = s
        .engine
        .create_batch(vec![mdev("mdpy", "mdpy-vga", Some(UUID_A))])
        .unwrap();
    assert_eq!(created.len(), 1);
    let stranger = "11111111-2222-3333-4444-555555555555";
    s.sim
        .write(
            Path::new("/sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-vga/create"),
            stranger.as_bytes(),
        )
        .unwrap();
    let error = s
        .engine
        .destroy_batch(
            &[UUID_A.to_owned(), stranger.to_owned()],
            DestroyOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(error, EngineError::NotOwned { .. }), "{error}");
    let mut on_host = s.sim.mdev_uuids();
    on_host.sort();
    assert_eq!(on_host, vec![stranger.to_owned(), UUID_A.to_owned()]);
    let error = s
        .engine
        .destroy_batch(&["../x".to_owned()], DestroyOptions::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgs, "{error}");
}

#[test]
fn reconcile_finishes_batches_a_crash_interrupted() {
    let s = setup("samples");
    // An autostart instance a batch destroy was removing, and two mdevs a batch create made
    // before the crash (not yet in the state): the state as the crash left it.
    s.engine
        .create(CreateRequest {
            autostart: true,
            ..mdev("mtty", "mtty-2", Some(UUID_A))
        })
        .unwrap();
    let made = [
        "ce000000-0000-4000-8000-000000000001",
        "ce000000-0000-4000-8000-000000000002",
    ];
    for uuid in made {
        s.sim
            .write(
                Path::new("/sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-vga/create"),
                uuid.as_bytes(),
            )
            .unwrap();
    }
    // Made by someone else, and not part of any batch: must survive.
    let stranger = "11111111-2222-3333-4444-555555555555";
    s.sim
        .write(
            Path::new("/sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-vga/create"),
            stranger.as_bytes(),
        )
        .unwrap();
    let mut state = lock(&s.engine.state).clone();
    state.pending_destroys.insert(UUID_A.parse().unwrap());
    state
        .pending_creates
        .extend(made.iter().map(|u| u.parse::<state::Uuid>().unwrap()));
    // A third UUID whose create never reached the kernel.
    state
        .pending_creates
        .insert("ce000000-0000-4000-8000-000000000003".parse().unwrap());
    state::save(s.engine.files.as_ref(), &s.engine.config.state_dir, &state).unwrap();

    let engine = open(&s.sim, s.dir.path());
    let report = engine.reconcile().unwrap();
    for uuid in [UUID_A, made[0], made[1]] {
        assert!(
            report.actions.contains(&ReconcileAction::Vanished {
                uuid: uuid.to_owned(),
                forgotten: true
            }),
            "{uuid}: {:?}",
            report.actions
        );
    }
    assert!(
        !report
            .actions
            .iter()
            .any(|a| matches!(a, ReconcileAction::Recreated { .. })),
        "a destroyed autostart instance must not come back: {:?}",
        report.actions
    );
    assert_eq!(s.sim.mdev_uuids(), vec![stranger.to_owned()]);
    let saved = saved_state(&s);
    assert!(sorted_keys(&saved, "instances").is_empty(), "{saved:#}");
    assert!(saved.get("pending_creates").is_none() && saved.get("pending_destroys").is_none());
}
