//! A [`StateFiles`] layer that models a page cache: what was written reaches the disk only
//! once the write is complete and synced; a power cut drops everything else.
//!
//! The layer sits above [`DiskFiles`] (so the bytes really go through the store's file code)
//! and remembers, per path, the last *durable* content: the content of the last
//! `write_atomic` that returned. When armed, the `n`-th `write_atomic` from now models a crash
//! after the data was written but before the fsync: the new data is in the file (the process
//! would see it) and then the machine dies ([`PowerLossFiles::power_cut`]) before the call
//! returns. What the disk holds afterwards depends on how the write was done:
//!
//! * [`UnsyncedWrite::Atomic`]: the store's temp-file + fsync + rename protocol; an unsynced
//!   temp file is lost and the rename never happened, so the old file survives whole;
//! * [`UnsyncedWrite::InPlace`]: what a store writing the file in place would leave (a torn
//!   prefix of the new content) — the negative control showing the check can fail.
//!
//! An `append` (the state journal's write) counts as a write too; cut before its
//! `fdatasync`, it leaves the durable content followed by the first half of the appended
//! bytes (a torn last line), whatever the mode.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

use mdev_engine::state::{DiskFiles, StateFiles};

/// How the interrupted write was being made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsyncedWrite {
    /// Temp file, fsync, rename, fsync of the directory (what the store does).
    Atomic,
    /// Truncate and rewrite the file itself (what the store must not do).
    InPlace,
}

/// The panic payload of the simulated crash, so tests can tell it from a real panic.
#[derive(Debug)]
pub struct PowerCut;

/// See the module documentation.
#[derive(Debug)]
pub struct PowerLossFiles {
    root: PathBuf,
    disk: DiskFiles,
    /// Last durable content per host path (`None`: the file did not exist).
    durable: Mutex<HashMap<PathBuf, Option<Vec<u8>>>>,
    /// Writes left before the crash; 0 = not armed.
    crash_in: AtomicU32,
    mode: Mutex<UnsyncedWrite>,
    dead: AtomicBool,
}

impl PowerLossFiles {
    /// Files under `root`, like [`DiskFiles::new`].
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Self {
            disk: DiskFiles::new(&root),
            root,
            durable: Mutex::new(HashMap::new()),
            crash_in: AtomicU32::new(0),
            mode: Mutex::new(UnsyncedWrite::Atomic),
            dead: AtomicBool::new(false),
        }
    }

    /// The `n`-th `write_atomic` or `append` from now (1 = the next) is cut by a power loss before its
    /// fsync; the call then unwinds with a [`PowerCut`] panic, as the process would die.
    pub fn arm(&self, n: u32, mode: UnsyncedWrite) {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
        self.crash_in.store(n, Ordering::SeqCst);
    }

    /// Whether the power was cut.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    fn real_path(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }

    /// Remembers the content of `path` before its first change, so an unsynced change can be
    /// undone on a power cut.
    fn remember_durable(&self, path: &Path) -> io::Result<()> {
        let mut durable = self.durable.lock().unwrap_or_else(|e| e.into_inner());
        if !durable.contains_key(path) {
            let before = self.disk.read(path)?;
            durable.insert(path.to_path_buf(), before);
        }
        Ok(())
    }

    fn cut(&self, path: &Path, data: &[u8]) -> ! {
        self.dead.store(true, Ordering::SeqCst);
        let mode = *self.mode.lock().unwrap_or_else(|e| e.into_inner());
        let before = self
            .durable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .cloned()
            .flatten();
        let real = self.real_path(path);
        match mode {
            UnsyncedWrite::Atomic => {
                // The page cache held the new temp file; nothing of it reached the disk and
                // the rename never ran: the durable file is the previous one.
                match before {
                    Some(old) => {
                        let _ = std::fs::write(&real, old);
                    }
                    None => {
                        let _ = std::fs::remove_file(&real);
                    }
                }
            }
            UnsyncedWrite::InPlace => {
                // The file was truncated and rewritten; the disk got the truncation and part
                // of the data.
                let _ = std::fs::write(&real, &data[..data.len() / 2]);
            }
        }
        std::panic::panic_any(PowerCut)
    }

    fn cut_append(&self, path: &Path, data: &[u8]) -> ! {
        self.dead.store(true, Ordering::SeqCst);
        let mut torn = self
            .durable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .cloned()
            .flatten()
            .unwrap_or_default();
        torn.extend_from_slice(&data[..data.len() / 2]);
        let _ = std::fs::write(self.real_path(path), torn);
        std::panic::panic_any(PowerCut)
    }

    /// Counts a write toward an armed crash; true when this one is cut.
    fn is_cut_now(&self) -> bool {
        let left = self.crash_in.load(Ordering::SeqCst);
        if left > 0 {
            self.crash_in.store(left - 1, Ordering::SeqCst);
        }
        left == 1
    }

    fn refuse_if_dead(&self) -> io::Result<()> {
        if self.is_dead() {
            Err(io::Error::from_raw_os_error(libc::EIO))
        } else {
            Ok(())
        }
    }
}

impl StateFiles for PowerLossFiles {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        self.refuse_if_dead()?;
        self.disk.read(path)
    }

    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.refuse_if_dead()?;
        self.remember_durable(path)?;
        let left = self.crash_in.load(Ordering::SeqCst);
        if left > 0 {
            self.crash_in.store(left - 1, Ordering::SeqCst);
            if left == 1 {
                // The data is written (the process sees it) but not yet synced.
                let _ = std::fs::write(self.real_path(path), data);
                self.cut(path, data);
            }
        }
        self.disk.write_atomic(path, data)?;
        self.durable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_path_buf(), Some(data.to_vec()));
        Ok(())
    }

    fn append(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.refuse_if_dead()?;
        self.remember_durable(path)?;
        if self.is_cut_now() {
            // The bytes are in the page cache (the process sees them), not yet synced.
            let _ = self.disk.append(path, data);
            self.cut_append(path, data);
        }
        self.disk.append(path, data)?;
        let mut durable = self.durable.lock().unwrap_or_else(|e| e.into_inner());
        durable
            .entry(path.to_path_buf())
            .or_default()
            .get_or_insert_with(Vec::new)
            .extend_from_slice(data);
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        self.refuse_if_dead()?;
        self.disk.list(dir)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.refuse_if_dead()?;
        self.remember_durable(path)?;
        self.disk.remove(path)?;
        self.durable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_path_buf(), None);
        Ok(())
    }
}
