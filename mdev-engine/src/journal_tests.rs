//! The state journal (`engine::journal`): what is replayed is what the engine holds, a torn
//! tail is dropped, a corrupt line is refused by name, folding keeps the content, a failed
//! append is never appended after, and a migrated schema-1 state takes its journal.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::journal::{Entry, Journal, JOURNAL_FILE_NAME};
use crate::state::{DiskFiles, InstanceRecord, ParentRecord, StateError, StateFile};
use mdev_sim::SimHost;

const UUID_A: &str = "11111111-2222-4333-8444-000000000001";
const UUID_B: &str = "11111111-2222-4333-8444-000000000002";
const UUID_C: &str = "11111111-2222-4333-8444-000000000003";
const DOMAIN: &str = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0";

fn state_dir() -> PathBuf {
    PathBuf::from("/var/lib/mdev-manager")
}

fn journal_config() -> EngineConfig {
    EngineConfig {
        readiness_timeout: Duration::from_millis(300),
        write_timeout: Duration::from_secs(5),
        state_journal: true,
        ..EngineConfig::default()
    }
}

fn open(sim: &SimHost, files: Arc<dyn StateFiles>) -> Engine {
    Engine::new(Arc::new(sim.clone()), files, journal_config()).unwrap()
}

fn mdev(uuid: &str, type_id: &str, persistent: bool) -> CreateRequest {
    CreateRequest {
        uuid: Some(uuid.into()),
        persistent,
        autostart: persistent,
        ..CreateRequest::new(CreateTarget::Mdev {
            parent: "mtty".into(),
            type_id: type_id.into(),
        })
    }
}

fn real(root: &Path, name: &str) -> PathBuf {
    root.join("var/lib/mdev-manager").join(name)
}

fn journal_lines(root: &Path) -> Vec<String> {
    std::fs::read_to_string(real(root, JOURNAL_FILE_NAME))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// An instance record with `attribute` as the value of its one vendor attribute.
fn record(uuid: &str, attribute: &str) -> InstanceRecord {
    InstanceRecord {
        uuid: uuid.parse().unwrap(),
        kind: InstanceKind::Mdev,
        parent: "mtty".parse().unwrap(),
        type_id: "mtty-1".parse().unwrap(),
        profile: None,
        owner: Owner::CreatedByUs,
        autostart: false,
        persistent: true,
        claim: None,
        scheduling: Default::default(),
        attributes: vec![("note".into(), attribute.into())],
        vf: None,
        previous_driver: None,
        force: false,
    }
}

/// A journal of generation 0 with `entries`, each a complete line, then `tail` unterminated.
fn write_journal(root: &Path, entries: &[Entry], tail: &str) {
    let mut text = String::from("{\"generation\":0}\n");
    for entry in entries {
        text.push_str(&serde_json::to_string(entry).unwrap());
        text.push('\n');
    }
    text.push_str(tail);
    std::fs::create_dir_all(real(root, "")).unwrap();
    std::fs::write(real(root, JOURNAL_FILE_NAME), text).unwrap();
}

fn adds(uuid: &str) -> Entry {
    let mut entry = Entry::default();
    entry
        .instances
        .insert(uuid.parse().unwrap(), Some(record(uuid, "x")));
    entry
}

#[test]
fn replaying_the_journal_gives_exactly_the_state_the_engine_built_in_memory() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files: Arc<dyn StateFiles> = Arc::new(DiskFiles::new(dir.path()));
    let engine = open(&sim, Arc::clone(&files));
    engine.create(mdev(UUID_A, "mtty-1", true)).unwrap();
    engine.create(mdev(UUID_B, "mtty-2", false)).unwrap();
    engine.create(mdev(UUID_C, "mtty-1", true)).unwrap();
    engine
        .claim_domain(
            &DomainRef {
                name: "vm".into(),
                uuid: DOMAIN.into(),
            },
            &[DeviceRequest {
                kind: "mdev".into(),
                uuid: Some(UUID_A.into()),
                ..DeviceRequest::default()
            }],
        )
        .unwrap();
    engine
        .set_parent_schedule("mtty", serde_json::json!({"policy": "weighted"}))
        .unwrap();
    engine.set_autostart(UUID_C, false, None).unwrap();
    engine.destroy(UUID_B, DestroyOptions::default()).unwrap();

    let in_memory = lock(&engine.state).clone();
    let loaded = state::load_detailed(files.as_ref(), &state_dir()).unwrap();
    assert_eq!(loaded.state, in_memory);
    assert!(
        loaded.journal.entries >= 7,
        "every change was an appended entry: {:?}",
        loaded.journal
    );
    assert!(
        !real(dir.path(), "state.json").exists(),
        "no whole-file write happened: the journal alone holds the state"
    );
    assert_eq!(
        state::load(files.as_ref(), &state_dir()).unwrap(),
        in_memory
    );
    // Each line names only what it changed: the destroy's line names UUID_B alone.
    let last = journal_lines(dir.path()).pop().unwrap();
    assert!(
        last.contains(UUID_B) && !last.contains(UUID_A) && !last.contains(UUID_C),
        "{last}"
    );
}

#[test]
fn a_torn_last_line_is_dropped_and_the_lines_before_it_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let files = DiskFiles::new(dir.path());
    let whole = serde_json::to_string(&adds(UUID_B)).unwrap();
    write_journal(dir.path(), &[adds(UUID_A)], &whole[..whole.len() / 2]);

    let loaded = state::load_detailed(&files, &state_dir()).unwrap();
    let uuids: Vec<String> = loaded
        .state
        .instances
        .keys()
        .map(ToString::to_string)
        .collect();
    assert_eq!(uuids, [UUID_A]);
    assert!(loaded.journal.torn);
    assert_eq!(loaded.journal.entries, 1);

    // Even a torn line that would parse (only its newline missing) was never acknowledged.
    write_journal(dir.path(), &[adds(UUID_A)], &whole);
    let state = state::load(&files, &state_dir()).unwrap();
    assert!(!state.has_instance(UUID_B));
}

#[test]
fn a_corrupt_line_in_the_middle_is_refused_naming_the_file_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let files = DiskFiles::new(dir.path());
    write_journal(dir.path(), &[adds(UUID_A)], "");
    let mut text = std::fs::read_to_string(real(dir.path(), JOURNAL_FILE_NAME)).unwrap();
    text.push_str("{\"instances\": garbage\n");
    text.push_str(&serde_json::to_string(&adds(UUID_B)).unwrap());
    text.push('\n');
    std::fs::write(real(dir.path(), JOURNAL_FILE_NAME), &text).unwrap();

    let error = state::load(&files, &state_dir()).unwrap_err();
    assert!(
        matches!(error, StateError::Journal { line: 3, .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("/var/lib/mdev-manager/state.journal") && message.contains("line 3"),
        "{message}"
    );
    let sim = SimHost::builtin("samples").unwrap();
    assert!(
        Engine::new(Arc::new(sim), Arc::new(files), journal_config()).is_err(),
        "the engine refuses a corrupt journal rather than start without its changes"
    );
    assert_eq!(
        std::fs::read_to_string(real(dir.path(), JOURNAL_FILE_NAME)).unwrap(),
        text,
        "a refused journal is left as it was"
    );
}

#[test]
fn start_up_folds_the_journal_into_the_state_file_keeping_the_content() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files: Arc<dyn StateFiles> = Arc::new(DiskFiles::new(dir.path()));
    let engine = open(&sim, Arc::clone(&files));
    engine.create(mdev(UUID_A, "mtty-1", true)).unwrap();
    engine.create(mdev(UUID_B, "mtty-2", true)).unwrap();
    let before = lock(&engine.state).clone();
    drop(engine);
    assert!(journal_lines(dir.path()).len() > 2);

    let reopened = open(&sim, Arc::clone(&files));
    assert_eq!(*lock(&reopened.state), before);
    assert_eq!(
        journal_lines(dir.path()),
        ["{\"generation\":1}"],
        "folded: a bare header of the next generation"
    );
    let text = std::fs::read_to_string(real(dir.path(), "state.json")).unwrap();
    assert!(text.contains(UUID_A) && text.contains(UUID_B), "{text}");
    assert_eq!(state::load(files.as_ref(), &state_dir()).unwrap(), before);

    // Later changes append to the new generation and replay onto the folded file.
    reopened.destroy(UUID_A, DestroyOptions::default()).unwrap();
    let loaded = state::load_detailed(files.as_ref(), &state_dir()).unwrap();
    assert_eq!(loaded.generation, 1);
    assert_eq!(loaded.state, *lock(&reopened.state));
    assert!(!loaded.state.has_instance(UUID_A));
}

#[test]
fn the_writer_folds_a_journal_grown_past_four_times_the_state_and_keeps_the_content() {
    let dir = tempfile::tempdir().unwrap();
    let files = DiskFiles::new(dir.path());
    let journal = Journal::open(
        &files,
        &state_dir(),
        &StateFile::default(),
        0,
        0,
        Default::default(),
    )
    .unwrap();
    let mut state = StateFile::default();
    let mut folded = false;
    for round in 0..40 {
        // One ~20 KiB record rewritten each round: the state stays ~20 KiB, the journal grows.
        let attribute = format!("{round}").repeat(20 * 1024 / (round.to_string().len()));
        state.insert_instance(record(UUID_A, &attribute));
        let entry = journal.take_changes(&state);
        journal.write(&files, &state_dir(), &entry).unwrap();
        let journal_len = std::fs::metadata(real(dir.path(), JOURNAL_FILE_NAME))
            .unwrap()
            .len();
        folded |= journal_len < 100;
        assert!(
            journal_len <= crate::journal::FOLD_FLOOR_BYTES.max(4 * 21 * 1024) + 21 * 1024,
            "round {round}: the journal stays bounded ({journal_len} bytes)"
        );
        assert_eq!(state::load(&files, &state_dir()).unwrap(), state);
    }
    assert!(folded, "the journal was folded at least once");
    let loaded = state::load_detailed(&files, &state_dir()).unwrap();
    assert!(loaded.generation >= 1);
    assert_eq!(loaded.state, state);
}

/// Disk files whose appends, once armed, write half their data and fail (a full disk).
#[derive(Debug)]
struct TearingFiles {
    inner: DiskFiles,
    fail_appends: AtomicBool,
}

impl StateFiles for TearingFiles {
    fn read(&self, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
        self.inner.read(path)
    }
    fn write_atomic(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        self.inner.write_atomic(path, data)
    }
    fn append(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        if self.fail_appends.load(Ordering::SeqCst) {
            self.inner.append(path, &data[..data.len() / 2])?;
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.inner.append(path, data)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        self.inner.list(dir)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove(path)
    }
}

#[test]
fn a_failed_append_fails_its_call_and_the_next_write_folds_instead_of_appending_after_it() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = Arc::new(TearingFiles {
        inner: DiskFiles::new(dir.path()),
        fail_appends: AtomicBool::new(false),
    });
    let engine = open(&sim, Arc::clone(&files) as Arc<dyn StateFiles>);
    engine.create(mdev(UUID_A, "mtty-1", true)).unwrap();
    files.fail_appends.store(true, Ordering::SeqCst);
    let error = engine
        .set_parent_schedule("mtty", serde_json::json!({"policy": "weighted"}))
        .unwrap_err();
    let message = vgpu_types::error_chain(&error);
    assert!(message.contains("state.journal"), "{message}");
    assert!(engine.journal.as_ref().unwrap().must_fold());
    files.fail_appends.store(false, Ordering::SeqCst);

    engine.create(mdev(UUID_B, "mtty-2", true)).unwrap();
    assert!(!engine.journal.as_ref().unwrap().must_fold());
    let lines = journal_lines(dir.path());
    assert_eq!(
        lines[0], "{\"generation\":1}",
        "the fragment was replaced (a fold), not appended after: {lines:#?}"
    );
    let loaded = state::load(files.as_ref(), &state_dir()).unwrap();
    assert_eq!(loaded, *lock(&engine.state));
    assert!(loaded.has_instance(UUID_A) && loaded.has_instance(UUID_B));
}

#[test]
fn a_migrated_schema_1_state_takes_its_journal_on_top_of_the_migration() {
    let dir = tempfile::tempdir().unwrap();
    let files = DiskFiles::new(dir.path());
    let v1 =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state-v1.json"))
            .unwrap();
    std::fs::create_dir_all(real(dir.path(), "")).unwrap();
    std::fs::write(real(dir.path(), "state.json"), &v1).unwrap();
    let migrated = state::load(&files, &state_dir()).unwrap();
    let first = *migrated.instances.keys().next().unwrap();

    let mut entry = Entry::default();
    entry.instances.insert(first, None);
    entry.parents.insert(
        "mtty".parse().unwrap(),
        Some(ParentRecord {
            schedule: Some(serde_json::json!({"policy": "equal"})),
            num_vfs: None,
        }),
    );
    write_journal(dir.path(), &[entry.clone()], "");

    let loaded = state::load(&files, &state_dir()).unwrap();
    let mut expected = migrated.clone();
    entry.apply_to(&mut expected);
    assert_eq!(loaded, expected);
    assert!(!loaded.has_instance(&first));
    assert!(real(dir.path(), state::STATE_V1_BACKUP_NAME).exists());

    // The engine folds it at start-up into a schema-2 file; nothing is lost.
    let sim = SimHost::builtin("samples").unwrap();
    let engine = Engine::new(Arc::new(sim), Arc::new(files), journal_config()).unwrap();
    assert_eq!(*lock(&engine.state), expected);
    let text = std::fs::read_to_string(real(dir.path(), "state.json")).unwrap();
    assert!(text.contains("\"schema_version\": 2"), "{text}");
    assert_eq!(journal_lines(dir.path()), ["{\"generation\":1}"]);
}

#[test]
fn whole_file_mode_folds_a_journal_it_finds_and_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    write_journal(dir.path(), &[adds(UUID_A)], "");
    let sim = SimHost::builtin("samples").unwrap();
    let files = Arc::new(DiskFiles::new(dir.path()));
    let engine = Engine::new(
        Arc::new(sim),
        files.clone(),
        EngineConfig {
            state_journal: false,
            ..journal_config()
        },
    )
    .unwrap();
    assert!(lock(&engine.state).has_instance(UUID_A));
    assert!(!real(dir.path(), JOURNAL_FILE_NAME).exists());
    let text = std::fs::read_to_string(real(dir.path(), "state.json")).unwrap();
    assert!(text.contains(UUID_A), "{text}");
}

#[test]
fn a_clean_stop_folds_the_journal_and_the_next_start_leaves_the_state_file_as_it_is() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files: Arc<dyn StateFiles> = Arc::new(DiskFiles::new(dir.path()));
    let engine = open(&sim, Arc::clone(&files));
    engine.create(mdev(UUID_A, "mtty-1", true)).unwrap();
    let before = lock(&engine.state).clone();
    engine.fold_state_journal().unwrap();
    assert_eq!(journal_lines(dir.path()), ["{\"generation\":1}"]);
    let bytes = std::fs::read(real(dir.path(), "state.json")).unwrap();
    // Nothing changed since: a second fold writes nothing.
    engine.fold_state_journal().unwrap();
    drop(engine);

    let reopened = open(&sim, Arc::clone(&files));
    assert_eq!(*lock(&reopened.state), before);
    assert_eq!(
        std::fs::read(real(dir.path(), "state.json")).unwrap(),
        bytes
    );
    assert_eq!(journal_lines(dir.path()), ["{\"generation\":1}"]);
}
