//! The append-only state journal (issues 15 and 16): a durable change costs one appended line
//! naming only the records it changed, not a rewrite of the whole `state.json`.
//!
//! `state.journal` lives beside `state.json`. Its first line is a header,
//! `{"generation":N}`; every further line is one [`Entry`]: the records a group of changes
//! set (whole, as they are now) or removed (`null`; `false` for a member of a pending set),
//! keyed as in [`StateFile`]. Lines are compact JSON, so a line holds no raw newline.
//!
//! Replay ([`replay`], called by `state::load` after any schema migration) applies the
//! entries in order onto `state.json`, but only when the header's generation equals the one
//! `state.json` records (`journal_generation`, absent = 0): a journal that does not match was
//! already folded into the state file. A last line without its newline is the torn tail of an
//! append a power loss or crash cut short — never acknowledged — and is dropped; a complete
//! line that does not parse is an error naming the file and the line.
//!
//! Folding ([`Journal`]) writes the whole state into `state.json` with the next generation
//! (the store's atomic replace) and then replaces the journal with a bare header of that
//! generation. A crash between the two leaves a journal of the old generation, which load
//! ignores: the state file holds all of it. The writer folds when the journal exceeds
//! [`FOLD_AT_BYTES`] or [`FOLD_AT_STATE_MULTIPLE`] × the state file (the latter once the
//! journal is past [`FOLD_FLOOR_BYTES`], so a small state is not rewritten every few
//! changes); the engine also folds at start-up. Appending costs the size of the change; the
//! fold costs the size of the state once per a multiple of it, so per change both stay flat
//! as the host grows.
//!
//! Failures: an append that fails may have left part of a line behind, so the next write is
//! a fold (which replaces the journal) rather than an append; until a fold succeeds every
//! write is a fold. A fold that fails after its change was appended durably is only logged:
//! the journal still holds everything and the next write tries again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::intents::Intent;
use crate::lock;
use crate::passthrough::GroupBinding;
use crate::state::{
    InstanceRecord, ParentName, ParentRecord, StateError, StateFile, StateFiles, Uuid,
};

/// File name of the journal inside the state directory.
pub const JOURNAL_FILE_NAME: &str = "state.journal";

/// The journal is folded once it is longer than this (bytes).
pub const FOLD_AT_BYTES: u64 = 1 << 20;

/// ... or longer than this many times the state file ...
pub const FOLD_AT_STATE_MULTIPLE: u64 = 4;

/// ... provided it is longer than this (bytes), so a small state is not folded every change.
pub const FOLD_FLOOR_BYTES: u64 = 64 << 10;

/// The journal's first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    generation: u64,
}

/// One journal line: what a group of changes set or removed (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Instance records set (`Some`) or forgotten (`None`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instances: BTreeMap<Uuid, Option<InstanceRecord>>,
    /// Parent records set or forgotten.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parents: BTreeMap<ParentName, Option<ParentRecord>>,
    /// Pass-through group bindings set or forgotten.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub passthrough: BTreeMap<Uuid, Option<GroupBinding>>,
    /// Members added to (`true`) or removed from (`false`) the pending creates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pending_creates: BTreeMap<Uuid, bool>,
    /// Members added to or removed from the pending destroys.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pending_destroys: BTreeMap<Uuid, bool>,
    /// Write-ahead intents set or cleared.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub intents: BTreeMap<String, Option<Intent>>,
}

impl Entry {
    /// What turns `old` into `new`.
    pub fn between(old: &StateFile, new: &StateFile) -> Self {
        Self {
            instances: map_changes(&old.instances, &new.instances),
            parents: map_changes(&old.parents, &new.parents),
            passthrough: map_changes(&old.passthrough, &new.passthrough),
            pending_creates: set_changes(&old.pending_creates, &new.pending_creates),
            pending_destroys: set_changes(&old.pending_destroys, &new.pending_destroys),
            intents: map_changes(&old.intents, &new.intents),
        }
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
            && self.parents.is_empty()
            && self.passthrough.is_empty()
            && self.pending_creates.is_empty()
            && self.pending_destroys.is_empty()
            && self.intents.is_empty()
    }

    /// Applies it to `state`. Every value is absolute, so applying an entry a second time
    /// changes nothing.
    pub fn apply_to(&self, state: &mut StateFile) {
        apply_map(&mut state.instances, &self.instances);
        apply_map(&mut state.parents, &self.parents);
        apply_map(&mut state.passthrough, &self.passthrough);
        apply_set(&mut state.pending_creates, &self.pending_creates);
        apply_set(&mut state.pending_destroys, &self.pending_destroys);
        apply_map(&mut state.intents, &self.intents);
    }
}

fn map_changes<K: Ord + Clone, V: PartialEq + Clone>(
    old: &BTreeMap<K, V>,
    new: &BTreeMap<K, V>,
) -> BTreeMap<K, Option<V>> {
    let mut changes = BTreeMap::new();
    for (key, value) in new {
        if old.get(key) != Some(value) {
            changes.insert(key.clone(), Some(value.clone()));
        }
    }
    for key in old.keys() {
        if !new.contains_key(key) {
            changes.insert(key.clone(), None);
        }
    }
    changes
}

fn set_changes<K: Ord + Clone>(old: &BTreeSet<K>, new: &BTreeSet<K>) -> BTreeMap<K, bool> {
    let added = new.difference(old).map(|key| (key.clone(), true));
    let removed = old.difference(new).map(|key| (key.clone(), false));
    added.chain(removed).collect()
}

fn apply_map<K: Ord + Clone, V: Clone>(map: &mut BTreeMap<K, V>, changes: &BTreeMap<K, Option<V>>) {
    for (key, value) in changes {
        match value {
            Some(value) => map.insert(key.clone(), value.clone()),
            None => map.remove(key),
        };
    }
}

fn apply_set<K: Ord + Clone>(set: &mut BTreeSet<K>, changes: &BTreeMap<K, bool>) {
    for (key, member) in changes {
        if *member {
            set.insert(key.clone());
        } else {
            set.remove(key);
        }
    }
}

/// The journal's path in `state_dir`.
pub fn journal_path(state_dir: &Path) -> PathBuf {
    state_dir.join(JOURNAL_FILE_NAME)
}

/// What [`replay`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Whether the journal file exists.
    pub exists: bool,
    /// The header's generation (`None`: no complete header line).
    pub generation: Option<u64>,
    /// Entries applied (0 when the generation did not match).
    pub entries: usize,
    /// Whether a torn last line was dropped.
    pub torn: bool,
    /// Whether the journal was ignored as already folded (its generation is not the state's).
    pub stale: bool,
    /// The journal's length in bytes.
    pub bytes: u64,
}

impl Replayed {
    /// Whether the journal holds anything beyond a header matching the state: then start-up
    /// folds it.
    pub fn needs_fold(&self) -> bool {
        self.entries > 0 || self.torn || self.stale || (self.exists && self.generation.is_none())
    }
}

/// Applies the journal in `state_dir` onto `state`, whose `state.json` recorded
/// `state_generation` (see the module documentation).
pub fn replay(
    files: &dyn StateFiles,
    state_dir: &Path,
    state_generation: u64,
    state: &mut StateFile,
) -> Result<Replayed, StateError> {
    let path = journal_path(state_dir);
    let Some(data) = files.read(&path).map_err(|source| StateError::Io {
        op: "read",
        path: path.clone(),
        source,
    })?
    else {
        return Ok(Replayed::default());
    };
    let mut replayed = Replayed {
        exists: true,
        bytes: data.len() as u64,
        ..Replayed::default()
    };
    let mut entries = Vec::new();
    for (index, line) in data.split_inclusive(|byte| *byte == b'\n').enumerate() {
        let Some(line) = line.strip_suffix(b"\n") else {
            // The last line, cut short before its newline reached the disk.
            replayed.torn = true;
            break;
        };
        let corrupt = |source| StateError::Journal {
            path: path.clone(),
            line: index + 1,
            source,
        };
        if index == 0 {
            let header: Header = serde_json::from_slice(line).map_err(corrupt)?;
            replayed.generation = Some(header.generation);
        } else {
            entries.push(serde_json::from_slice::<Entry>(line).map_err(corrupt)?);
        }
    }
    // Every line is checked before any is applied; then a stale journal changes nothing.
    if replayed.generation != Some(state_generation) {
        replayed.stale = replayed.generation.is_some();
        return Ok(replayed);
    }
    replayed.entries = entries.len();
    for entry in &entries {
        entry.apply_to(state);
    }
    Ok(replayed)
}

/// The header line of a journal of `generation`.
fn header_line(generation: u64) -> Vec<u8> {
    let mut line = serde_json::to_vec(&Header { generation }).unwrap_or_default();
    line.push(b'\n');
    line
}

/// The engine's journal writer: the state as last handed to a write (`shadow`), so that each
/// write appends only what changed since, and what is on disk.
#[derive(Debug)]
pub(crate) struct Journal {
    writer: std::sync::Mutex<Writer>,
}

#[derive(Debug)]
struct Writer {
    /// The state including every change handed to a write so far.
    shadow: StateFile,
    disk: OnDisk,
}

#[derive(Debug)]
struct OnDisk {
    /// The generation of `state.json` (and of the journal, once it has a header).
    generation: u64,
    /// Length of the journal; 0 = it has no header yet (the next append writes one).
    journal_bytes: u64,
    /// Length of `state.json` as last written (or read).
    state_bytes: u64,
    /// An append failed: the journal may end in part of a line; only a fold may write next.
    must_fold: bool,
    /// Entries in the journal since it was last folded (or opened).
    entries: u64,
}

impl Journal {
    /// The writer for a state just loaded (`state`) from a state file of `state_bytes` bytes
    /// and `generation`, whose journal `replayed` describes. Folds first when start-up should
    /// (anything beyond a matching header).
    pub(crate) fn open(
        files: &dyn StateFiles,
        state_dir: &Path,
        state: &StateFile,
        generation: u64,
        state_bytes: u64,
        replayed: Replayed,
    ) -> Result<Self, StateError> {
        let mut disk = OnDisk {
            generation,
            journal_bytes: if replayed.generation == Some(generation) {
                replayed.bytes
            } else {
                0
            },
            state_bytes,
            must_fold: false,
            entries: replayed.entries as u64,
        };
        if replayed.needs_fold() {
            // Past any stale header too, so no old journal can ever match again.
            disk.generation = generation.max(replayed.generation.unwrap_or(0));
            disk.fold(files, state_dir, state)?;
        }
        Ok(Self {
            writer: std::sync::Mutex::new(Writer {
                shadow: state.clone(),
                disk,
            }),
        })
    }

    /// The changes made since the last call, taken under the state lock (so the entry matches
    /// the ticket read with it). Only the changed records are copied.
    pub(crate) fn take_changes(&self, state: &StateFile) -> Entry {
        let mut writer = lock(&self.writer);
        let entry = Entry::between(&writer.shadow, state);
        entry.apply_to(&mut writer.shadow);
        entry
    }

    /// Makes `entry` durable (one append and `fdatasync`, or a fold), with the domain index
    /// kept in step (`domain_index::commit`). Only the group commit's one writer calls it.
    pub(crate) fn write(
        &self,
        files: &dyn StateFiles,
        state_dir: &Path,
        entry: &Entry,
    ) -> Result<(), StateError> {
        let mut writer = lock(&self.writer);
        let Writer { shadow, disk } = &mut *writer;
        let shadow: &StateFile = shadow;
        if entry.is_empty() && !disk.must_fold {
            return Ok(());
        }
        crate::domain_index::commit(files, state_dir, shadow, || {
            disk.append(files, state_dir, shadow, entry)
        })
    }

    /// Folds the journal into the state file now unless it holds nothing beyond its header (a
    /// clean stop: the next start then reads `state.json` alone and leaves it as it is).
    pub(crate) fn fold_now(
        &self,
        files: &dyn StateFiles,
        state_dir: &Path,
    ) -> Result<(), StateError> {
        let mut writer = lock(&self.writer);
        let Writer { shadow, disk } = &mut *writer;
        if disk.entries == 0 && !disk.must_fold {
            return Ok(());
        }
        disk.fold(files, state_dir, shadow)
    }

    /// Whether the next write must fold (an append failed). For tests.
    #[cfg(test)]
    pub(crate) fn must_fold(&self) -> bool {
        lock(&self.writer).disk.must_fold
    }
}

impl OnDisk {
    fn append(
        &mut self,
        files: &dyn StateFiles,
        state_dir: &Path,
        shadow: &StateFile,
        entry: &Entry,
    ) -> Result<(), StateError> {
        if self.must_fold {
            return self.fold(files, state_dir, shadow);
        }
        let path = journal_path(state_dir);
        let mut data = if self.journal_bytes == 0 {
            header_line(self.generation)
        } else {
            Vec::new()
        };
        serde_json::to_writer(&mut data, entry).map_err(|source| StateError::Journal {
            path: path.clone(),
            line: 0,
            source,
        })?;
        data.push(b'\n');
        if let Err(source) = files.append(&path, &data) {
            self.must_fold = true;
            return Err(StateError::Io {
                op: "append to",
                path,
                source,
            });
        }
        self.journal_bytes += data.len() as u64;
        self.entries += 1;
        if self.wants_fold() {
            // The change is durable already; a failed fold only leaves a longer journal.
            if let Err(error) = self.fold(files, state_dir, shadow) {
                tracing::warn!(error = %vgpu_types::error_chain(&error), "cannot fold the state journal; keeping it");
            }
        }
        Ok(())
    }

    fn wants_fold(&self) -> bool {
        self.journal_bytes > FOLD_AT_BYTES
            || (self.journal_bytes > FOLD_FLOOR_BYTES
                && self.journal_bytes > FOLD_AT_STATE_MULTIPLE * self.state_bytes)
    }

    /// Writes `state` whole with the next generation, then empties the journal (a bare header
    /// of that generation). Succeeds once the state file is written: the journal left behind
    /// is stale then; until it is replaced every write folds.
    fn fold(
        &mut self,
        files: &dyn StateFiles,
        state_dir: &Path,
        state: &StateFile,
    ) -> Result<(), StateError> {
        let generation = self.generation + 1;
        self.state_bytes = crate::state::save_generation(files, state_dir, state, generation)?;
        self.generation = generation;
        let path = journal_path(state_dir);
        let header = header_line(generation);
        match files.write_atomic(&path, &header) {
            Ok(()) => {
                self.journal_bytes = header.len() as u64;
                self.entries = 0;
                self.must_fold = false;
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot empty the state journal after a fold");
                self.must_fold = true;
            }
        }
        Ok(())
    }
}
