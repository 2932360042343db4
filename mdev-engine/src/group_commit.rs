//! Group commit of the state file (issue 16): concurrent changes share one durable write.
//!
//! A change is made in memory under the state lock and gets a ticket (the state's change
//! count after it). The caller then waits until a write whose snapshot covers its ticket is
//! durable. One caller at a time writes: it takes a snapshot of the whole state (everything
//! changed so far, its own change and every change made while the previous write was on the
//! disk), writes it outside the state lock, and wakes every waiter; those it covered return,
//! the next uncovered one writes the next snapshot. So while one fsync is under way the
//! changes of every other caller pile up and go to disk together in the next.
//!
//! What a write is depends on the mode: in journal mode (`journal`) the snapshot is only the
//! records changed since the previous snapshot and the write one append and `fdatasync`; in
//! whole-file mode it is the whole state, saved with the store's atomic replace.
//!
//! Durability per acknowledged call is what it was: a caller returns `Ok` only after a write
//! that contains its change is on disk, and gets the write's error when the write that
//! covered it failed (its change stays in memory, as it did when each caller saved on its
//! own, and the caller undoes what it must — `commit_new` removes the device again).

use std::io;
use std::sync::{Condvar, Mutex};

use crate::lock;
use crate::state::StateError;

/// The write progress of the state file (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    progress: Mutex<Progress>,
    settled: Condvar,
}

#[derive(Debug, Default)]
struct Progress {
    /// Changes made in memory (the ticket of the latest).
    changed: u64,
    /// Every change up to this ticket is on disk.
    durable: u64,
    /// A caller is writing a snapshot now.
    writing: bool,
    /// The last write that failed: the tickets it covered (`after`, `up_to`] and its error.
    failed: Option<FailedWrite>,
    /// Writes made and changes they covered (for the figures in docs/reliability.md).
    writes: u64,
}

#[derive(Debug)]
struct FailedWrite {
    after: u64,
    up_to: u64,
    error: StateError,
}

/// Writes made and the changes they made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitStats {
    /// State writes (each one fsync of the state file).
    pub writes: u64,
    /// Changes made durable.
    pub changes: u64,
}

impl GroupCommit {
    /// Registers a change just made under the state lock (the caller holds it, so tickets
    /// follow the order of the changes); returns its ticket.
    pub(crate) fn changed(&self) -> u64 {
        let mut progress = lock(&self.progress);
        progress.changed += 1;
        progress.changed
    }

    /// The ticket of the latest change (read under the state lock with a snapshot).
    pub(crate) fn latest(&self) -> u64 {
        lock(&self.progress).changed
    }

    /// Returns once a write covering `ticket` is durable, writing it when no one else is.
    /// `snapshot` takes the state and its latest ticket (under the state lock); `write` saves
    /// a snapshot.
    pub(crate) fn wait_durable<S>(
        &self,
        ticket: u64,
        snapshot: impl Fn() -> (S, u64),
        write: impl Fn(&S) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        let mut progress = lock(&self.progress);
        loop {
            if progress.durable >= ticket {
                return Ok(());
            }
            if let Some(failed) = &progress.failed {
                if failed.after < ticket && ticket <= failed.up_to {
                    return Err(repeat(&failed.error));
                }
            }
            if progress.writing {
                progress = self
                    .settled
                    .wait(progress)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                continue;
            }
            progress.writing = true;
            drop(progress);
            let (state, covers) = snapshot();
            let written = write(&state);
            progress = lock(&self.progress);
            progress.writing = false;
            match written {
                Ok(()) => {
                    progress.writes += 1;
                    progress.durable = progress.durable.max(covers);
                }
                Err(error) => {
                    let after = progress.durable;
                    progress.failed = Some(FailedWrite {
                        after,
                        up_to: covers,
                        error,
                    });
                }
            }
            self.settled.notify_all();
        }
    }

    /// Writes made and changes made durable so far.
    pub(crate) fn stats(&self) -> CommitStats {
        let progress = lock(&self.progress);
        CommitStats {
            writes: progress.writes,
            changes: progress.durable,
        }
    }
}

/// The error of a shared write, for each caller it covered.
fn repeat(error: &StateError) -> StateError {
    match error {
        StateError::Io { op, path, source } => StateError::Io {
            op,
            path: path.clone(),
            source: io::Error::new(source.kind(), source.to_string()),
        },
        StateError::Corrupt { path, source } => StateError::Io {
            op: "write",
            path: path.clone(),
            source: io::Error::other(source.to_string()),
        },
        StateError::Journal { path, line, source } => StateError::Io {
            op: "write",
            path: path.clone(),
            source: io::Error::other(format!("line {line}: {source}")),
        },
        StateError::Schema { path, found } => StateError::Schema {
            path: path.clone(),
            found: *found,
        },
        // Only a load migrates; kept whole for completeness.
        StateError::Migration { path, .. } => StateError::Io {
            op: "write",
            path: path.clone(),
            source: io::Error::other(vgpu_types::error_chain(error)),
        },
    }
}
