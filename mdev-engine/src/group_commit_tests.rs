//! Group commit (`engine::group_commit`): concurrent changes share state writes, and each
//! call still returns only once its change is on disk (or with the error of the write that
//! covered it).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use super::*;
use mdev_sim::SimHost;

/// State files on disk whose state-file writes take `delay` (a slow fsync) and are counted;
/// `fail` makes them fail.
#[derive(Debug)]
struct SlowFiles {
    inner: DiskFiles,
    delay: Duration,
    state_writes: AtomicU32,
    fail: AtomicBool,
}

impl StateFiles for SlowFiles {
    fn read(&self, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
        self.inner.read(path)
    }
    fn write_atomic(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        if path.ends_with(state::STATE_FILE_NAME) {
            std::thread::sleep(self.delay);
            if self.fail.load(Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.state_writes.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.write_atomic(path, data)
    }
    fn append(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        if path.ends_with(crate::journal::JOURNAL_FILE_NAME) {
            std::thread::sleep(self.delay);
            if self.fail.load(Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.state_writes.fetch_add(1, Ordering::SeqCst);
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

fn setup(delay: Duration) -> (SimHost, Arc<Engine>, Arc<SlowFiles>, tempfile::TempDir) {
    let sim = SimHost::builtin("scale").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = Arc::new(SlowFiles {
        inner: DiskFiles::new(dir.path()),
        delay,
        state_writes: AtomicU32::new(0),
        fail: AtomicBool::new(false),
    });
    let config = EngineConfig {
        readiness_timeout: Duration::from_secs(10),
        write_timeout: Duration::from_secs(10),
        ..EngineConfig::default()
    };
    let engine = Arc::new(
        Engine::new(
            Arc::new(sim.clone()),
            Arc::clone(&files) as Arc<dyn StateFiles>,
            config,
        )
        .unwrap(),
    );
    (sim, engine, files, dir)
}

/// A free mdev type of the `scale` topology per thread: the first parent with capacity.
fn mdev_target(engine: &Engine, index: usize) -> CreateTarget {
    let parents: Vec<MdevParent> = engine.inventory().unwrap().mdev_parents;
    let parent = &parents[index % parents.len()];
    let mdev_type = parent
        .types
        .iter()
        .max_by_key(|t| t.available_instances)
        .unwrap();
    CreateTarget::Mdev {
        parent: parent.name.clone(),
        type_id: mdev_type.id.clone(),
    }
}

fn on_disk(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("var/lib/mdev-manager/state.json")).unwrap_or_default()
}

#[test]
fn concurrent_creates_share_state_writes_and_each_returns_after_its_change_is_on_disk() {
    let threads = 16;
    let (_sim, engine, files, dir) = setup(Duration::from_millis(30));
    let barrier = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|index| {
            let engine = Arc::clone(&engine);
            let barrier = Arc::clone(&barrier);
            let target = mdev_target(&engine, index);
            let root = dir.path().to_path_buf();
            std::thread::spawn(move || {
                barrier.wait();
                let info = engine.create(CreateRequest::new(target)).unwrap();
                // Acknowledged: the state on disk holds it already.
                let saved = on_disk(&root);
                assert!(
                    saved.contains(&info.uuid),
                    "{} acknowledged before it was on disk",
                    info.uuid
                );
                info.uuid
            })
        })
        .collect();
    let uuids: Vec<String> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let writes = files.state_writes.load(Ordering::SeqCst);
    // Without group commit every create pays its own write: `threads` writes.
    assert!(
        (writes as usize) < threads,
        "{writes} state writes for {threads} concurrent creates"
    );
    let stats = engine.state_commits();
    assert_eq!(stats.writes, u64::from(writes));
    let saved = on_disk(dir.path());
    for uuid in &uuids {
        assert!(saved.contains(uuid.as_str()), "{uuid} missing on disk");
    }
}

#[test]
fn a_shared_write_that_fails_fails_every_call_it_covered_and_nothing_is_left() {
    let threads = 8;
    let (sim, engine, files, dir) = setup(Duration::from_millis(30));
    files.fail.store(true, Ordering::SeqCst);
    let barrier = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|index| {
            let engine = Arc::clone(&engine);
            let barrier = Arc::clone(&barrier);
            let target = mdev_target(&engine, index);
            std::thread::spawn(move || {
                barrier.wait();
                engine.create(CreateRequest::new(target))
            })
        })
        .collect();
    for worker in workers {
        let error = worker.join().unwrap().unwrap_err();
        assert!(
            error.to_string().contains("state.json") || format!("{error:?}").contains("state.json"),
            "{error:?}"
        );
    }
    assert!(
        sim.mdev_uuids().is_empty(),
        "a create whose save failed left its device"
    );
    assert!(!on_disk(dir.path()).contains("\"type_id\""));
    // The disk is back: the next create is saved as usual.
    files.fail.store(false, Ordering::SeqCst);
    let info = engine
        .create(CreateRequest::new(mdev_target(&engine, 0)))
        .unwrap();
    assert!(on_disk(dir.path()).contains(&info.uuid));
}
