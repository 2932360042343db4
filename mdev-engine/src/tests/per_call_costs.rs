//! What one call reads and writes besides its own change: a create pinned to a parent and a
//! schedule change read that parent alone, the domain index is written only when a claim
//! changes, and a partial mdevctl mirror sync touches only the instances it names.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;

use super::*;

const T4_B: &str = "0000:af:00.0";

/// The simulated host, noting every path read, listed or tested.
#[derive(Debug)]
struct WatchedHost {
    sim: SimHost,
    touched: Mutex<Vec<PathBuf>>,
}

impl WatchedHost {
    fn note(&self, path: &Path) {
        lock(&self.touched).push(path.to_owned());
    }

    /// Forgets what was touched so far.
    fn clear(&self) {
        lock(&self.touched).clear();
    }

    /// The touched paths that name `part` (a parent's address).
    fn touched_naming(&self, part: &str) -> Vec<PathBuf> {
        lock(&self.touched)
            .iter()
            .filter(|path| path.to_string_lossy().contains(part))
            .cloned()
            .collect()
    }
}

impl HostFs for WatchedHost {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        self.note(path);
        self.sim.read(path)
    }
    fn write(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        self.note(path);
        self.sim.write(path, data)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<OsString>> {
        self.note(dir);
        self.sim.list(dir)
    }
    fn read_link(&self, path: &Path) -> std::io::Result<PathBuf> {
        self.note(path);
        self.sim.read_link(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.note(path);
        self.sim.exists(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.note(path);
        self.sim.is_dir(path)
    }
    fn commands(&self) -> &dyn mdev_host::HostCommands {
        self.sim.commands()
    }
}

/// An engine on the two-T4 host, watched.
fn watched_t4_pair() -> (Arc<WatchedHost>, Arc<Engine>, tempfile::TempDir) {
    let host = Arc::new(WatchedHost {
        sim: SimHost::builtin("t4-pair").unwrap(),
        touched: Mutex::new(Vec::new()),
    });
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(
        Engine::new(host.clone(), Arc::new(DiskFiles::new(dir.path())), config()).unwrap(),
    );
    (host, engine, dir)
}

#[test]
fn a_create_pinned_to_a_parent_reads_no_other_parent() {
    let (host, engine, _dir) = watched_t4_pair();
    host.clear();
    let created = engine.create(profile_on("nvidia-t4-2q", T4)).unwrap();
    assert_eq!(created.parent, T4);
    assert!(
        host.touched_naming(T4_B).is_empty(),
        "the create read the other GPU: {:?}",
        host.touched_naming(T4_B)
    );
    assert!(!host.touched_naming(T4).is_empty(), "the watch sees reads");
    // An unpinned create still places over every parent.
    host.clear();
    engine.create(profile("nvidia-t4-2q")).unwrap();
    assert!(!host.touched_naming(T4_B).is_empty());
}

#[test]
fn a_pinned_create_that_does_not_fit_is_refused_as_with_the_whole_host_in_view() {
    let (_host, engine, _dir) = watched_t4_pair();
    // The T4 takes one vGPU size at a time: a 2Q makes a 4Q impossible on it.
    engine.create(profile_on("nvidia-t4-2q", T4)).unwrap();
    let pinned = engine.create(profile_on("nvidia-t4-4q", T4)).unwrap_err();
    assert_eq!(pinned.kind(), ErrorKind::NoCapacity, "{pinned}");
    assert!(pinned.to_string().contains("T4-2Q"), "{pinned}");
    // The other GPU still takes it: the refusal was about the pinned one alone.
    let other = engine.create(profile_on("nvidia-t4-4q", T4_B)).unwrap();
    assert_eq!(other.parent, T4_B);
    // A batch pinned first to one parent, then placed anywhere, places the second on the
    // whole host (the first step's view of one parent does not serve it).
    let infos = engine
        .create_batch(vec![
            profile_on("nvidia-t4-2q", T4),
            profile("nvidia-t4-4q"),
        ])
        .unwrap();
    assert_eq!(infos[0].parent, T4);
    assert_eq!(infos[1].parent, T4_B);
}

#[test]
fn a_schedule_change_reads_only_the_instances_parent() {
    let (host, engine, _dir) = watched_t4_pair();
    let created = engine.create(profile_on("nvidia-t4-2q", T4)).unwrap();
    host.clear();
    let status = engine
        .set_instance_schedule(&created.uuid, 200, 0, 0)
        .unwrap();
    assert_eq!(status.stored.weight, Some(200));
    assert!(
        host.touched_naming(T4_B).is_empty(),
        "{:?}",
        host.touched_naming(T4_B)
    );
    host.clear();
    let parent = engine.parent_schedule_status(T4).unwrap();
    assert_eq!(parent.instances.len(), 1);
    assert!(host.touched_naming(T4_B).is_empty());
    let error = engine.parent_schedule_status("0000:99:00.0").unwrap_err();
    assert!(error.to_string().contains("0000:99:00.0"), "{error}");
}

/// State files on disk that count what is done in the domain index directory.
#[derive(Debug)]
struct IndexWatch {
    disk: DiskFiles,
    /// Lists of the index directory.
    lists: std::sync::atomic::AtomicUsize,
    /// Files written or removed in it.
    changes: std::sync::atomic::AtomicUsize,
}

impl IndexWatch {
    fn in_index(path: &Path) -> bool {
        path.components()
            .any(|part| part.as_os_str() == crate::domain_index::DOMAIN_INDEX_DIR)
    }
    fn counts(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::SeqCst;
        (self.lists.load(SeqCst), self.changes.load(SeqCst))
    }
}

impl StateFiles for IndexWatch {
    fn read(&self, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
        self.disk.read(path)
    }
    fn write_atomic(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        if Self::in_index(path) {
            self.changes
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        self.disk.write_atomic(path, data)
    }
    fn append(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        if Self::in_index(path) {
            self.changes
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        self.disk.append(path, data)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<OsString>> {
        if Self::in_index(dir) {
            self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        self.disk.list(dir)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        if Self::in_index(path) {
            self.changes
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        self.disk.remove(path)
    }
}

#[test]
fn the_domain_index_is_written_only_when_a_claim_changes() {
    let sim = SimHost::builtin("samples").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = Arc::new(IndexWatch {
        disk: DiskFiles::new(dir.path()),
        lists: Default::default(),
        changes: Default::default(),
    });
    let engine = Engine::new(Arc::new(sim), files.clone(), config()).unwrap();
    let index = dir.path().join("var/lib/mdev-manager/domains");
    let (lists_at_start, _) = files.counts();
    let persistent = CreateRequest {
        persistent: true,
        ..mdev("mtty", "mtty-2", Some(UUID_A))
    };
    engine.create(persistent).unwrap();
    engine.create(mdev("mtty", "mtty-2", Some(UUID_B))).unwrap();
    engine.destroy(UUID_B, DestroyOptions::default()).unwrap();
    let (lists, changes) = files.counts();
    assert_eq!(changes, 0, "no claim changed, yet the index was written");
    assert!(
        lists <= lists_at_start + 1,
        "the index was listed {} times for 3 changes",
        lists - lists_at_start
    );

    let a = domain(DOMAIN_UUID);
    let wants = [DeviceRequest {
        kind: "mdev".into(),
        uuid: Some(UUID_A.into()),
        ..DeviceRequest::default()
    }];
    engine.claim_domain(&a, &wants).unwrap();
    assert!(index.join(DOMAIN_UUID).exists(), "the holder is listed");
    let (_, after_claim) = files.counts();
    assert_eq!(after_claim, 1);
    engine.release_domain(&a).unwrap();
    assert!(
        !index.join(DOMAIN_UUID).exists(),
        "the former holder is gone"
    );
    let (lists_now, changes_now) = files.counts();
    assert_eq!(changes_now, 2);
    assert_eq!(lists_now, lists, "the index is known, not listed again");
}

#[test]
fn a_partial_mirror_sync_writes_only_the_instances_it_names() {
    let s = setup("samples");
    let persistent = |uuid: &str| CreateRequest {
        persistent: true,
        ..mdev("mtty", "mtty-2", Some(uuid))
    };
    s.engine.create(persistent(UUID_A)).unwrap();
    let first = s.engine.sync_mdevctl_mirror();
    assert_eq!(first.written.len(), 1, "{first:?}");
    let file_a = s.dir.path().join("etc/mdevctl.d/mtty").join(UUID_A);
    let file_b = s.dir.path().join("etc/mdevctl.d/mtty").join(UUID_B);
    // What the report and the list name: host paths.
    let host_path = |uuid: &str| format!("/etc/mdevctl.d/mtty/{uuid}");
    // A's definition changed behind the mirror's back: only a sync naming A (or a whole one)
    // may put it right.
    std::fs::write(&file_a, "changed by hand").unwrap();

    s.engine.create(persistent(UUID_B)).unwrap();
    let partial = s.engine.sync_mdevctl_mirror_of([UUID_B]);
    assert_eq!(partial.written, [host_path(UUID_B)]);
    assert!(partial.removed.is_empty() && partial.problems.is_empty());
    assert_eq!(std::fs::read_to_string(&file_a).unwrap(), "changed by hand");

    // Nothing changed for B: nothing is written.
    let again = s.engine.sync_mdevctl_mirror_of([UUID_B]);
    assert!(again.written.is_empty(), "{again:?}");

    s.engine.destroy(UUID_B, DestroyOptions::default()).unwrap();
    let removed = s.engine.sync_mdevctl_mirror_of([UUID_B]);
    assert_eq!(removed.removed, [host_path(UUID_B)]);
    assert!(!file_b.exists());
    assert!(file_a.exists(), "A's file is not B's to remove");

    let manifest: std::collections::BTreeMap<String, String> = serde_json::from_slice(
        &std::fs::read(
            s.dir
                .path()
                .join("var/lib/mdev-manager")
                .join(crate::mdevctl_mirror::MANIFEST),
        )
        .unwrap(),
    )
    .unwrap();
    let listed: BTreeSet<String> = manifest.into_keys().collect();
    assert_eq!(
        listed,
        BTreeSet::from([host_path(UUID_A)]),
        "the list keeps A and drops B"
    );
}
