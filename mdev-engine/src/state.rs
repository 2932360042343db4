//! Persistence: the desired state (`/var/lib/mdev-manager/state.json` under the root),
//! schema-versioned and written atomically (temp file, fsync, rename, fsync dir).
//!
//! [`InstanceRecord`] is *the* record of an instance: the one the engine keeps, saves and
//! reasons about. Its fields are typed ([`Uuid`], [`PciAddress`], [`ParentName`], [`TypeId`],
//! [`ProfileName`]), so a state that loads holds only names the engine would take from a
//! caller. The other instance structs are views of it, each for a reason the record cannot
//! serve: `InstanceInfo` (engine API) joins it with what the host shows now (active, IOMMU
//! group, sysfs path) and also describes instances the manager does not manage; the daemon's
//! `InstanceData` is the `Instance` D-Bus object's properties; `dbus_api::wire::InstanceEntry`
//! is those properties in the fixed `ListInstances` signature, and `wire::InstanceRecord` the
//! client's owned copy with the field names `vgpuctl --json` documents.
//!
//! Schema history: 1 held the same shape with unchecked strings; 2 (this build) is typed. A
//! schema-1 file is migrated on [`load`] (`state_migration`), its original bytes kept beside it
//! as [`STATE_V1_BACKUP_NAME`], and the next save writes schema 2. A newer schema is refused.
//!
//! In journal mode (`EngineConfig::state_journal`) changes are appended to `state.journal`
//! beside the state file (`crate::journal`); [`load`] replays it onto `state.json`, and
//! `state.json` records the journal generation it folded (`journal_generation`).
//!
//! Regular files (the state, pending releases, mdevctl definitions, profiles) go through the
//! small [`StateFiles`] trait rather than [`mdev_host::HostFs`]: they are not kernel files,
//! and a test can put a lossy implementation behind it to simulate power loss.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use mdev_host::discovery::names::PciAddress;

pub use crate::record_names::{ParentName, TypeId};
pub use crate::state_migration::MigrationError;
pub use vgpu_profiles::ProfileName;
pub use vgpu_types::Uuid;

/// The schema version this build writes (and reads; older versions are migrated on load).
pub const STATE_SCHEMA_VERSION: u32 = 2;

/// The oldest schema version [`load`] migrates.
pub const OLDEST_MIGRATED_SCHEMA_VERSION: u32 = 1;

/// The name (inside the state directory) under which [`load`] keeps the bytes of a schema-1
/// state file it migrated: the way back to a schema-1 build, by hand.
pub const STATE_V1_BACKUP_NAME: &str = "state.json.v1";

/// File name of the state store inside the state directory.
pub const STATE_FILE_NAME: &str = "state.json";

/// Directory (inside the state directory) where the hook leaves releases it could not deliver.
pub const PENDING_RELEASES_DIR: &str = "pending-releases";

/// What [`DiskFiles::write_atomic`] puts between a file's name and the writer's pid to name
/// its temporary file (`state.json.tmp.1234`).
const TEMP_INFIX: &str = ".tmp.";

/// The files of the state directory's top level that only the daemon writes. Their temporary
/// files (`<name>.tmp.<pid>`) are the daemon's alone, so [`remove_stale_temp_files`] may
/// remove them; the hook's files (under [`PENDING_RELEASES_DIR`]) are never touched.
pub const DAEMON_WRITTEN_FILES: &[&str] = &[
    STATE_FILE_NAME,
    STATE_V1_BACKUP_NAME,
    crate::journal::JOURNAL_FILE_NAME,
];

pub use vgpu_types::InstanceKind;

/// Why the manager may remove an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Owner {
    /// The manager created it.
    CreatedByUs,
    /// It existed before (or came from mdevctl) and a caller adopted it explicitly.
    Adopted,
}

/// The domain holding an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// libvirt domain name.
    pub domain_name: String,
    /// libvirt domain UUID.
    pub domain_uuid: Uuid,
    /// Whether the instance was created for this claim and is destroyed on release.
    pub transient: bool,
    /// Whether the claim started a defined (inactive) persistent instance, which release stops
    /// again unless it is autostart.
    #[serde(default)]
    pub started_by_claim: bool,
}

/// Per-instance scheduling fields (interpreted by `vgpu-sched`; stored here untouched).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scheduling {
    /// Proportional weight (1..=10000), if set.
    pub weight: Option<u32>,
    /// Guaranteed share, if set.
    pub min_share: Option<u32>,
    /// Cap, if set.
    pub max_share: Option<u32>,
}

/// One instance the manager knows about (created or adopted, live or only defined).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// The instance's UUID. For a VF or pass-through instance it is the handle the manager
    /// gave it.
    pub uuid: Uuid,
    /// Device kind.
    pub kind: InstanceKind,
    /// Parent: mdev parent name for mdevs, the PF address for VF kinds, the GPU's address for
    /// a pass-through.
    pub parent: ParentName,
    /// mdev type id, or the NVIDIA vGPU type id (decimal) for `nvidia-vf`, or `vfio-pci` for VFs
    /// and pass-through GPUs.
    pub type_id: TypeId,
    /// The profile it was made from, if any.
    pub profile: Option<ProfileName>,
    /// Ownership.
    pub owner: Owner,
    /// Recreated on start / after reboot.
    pub autostart: bool,
    /// Kept as a definition when stopped (otherwise forgotten when it goes away).
    pub persistent: bool,
    /// The domain holding it, if claimed.
    pub claim: Option<Claim>,
    /// Scheduling fields.
    #[serde(flatten)]
    pub scheduling: Scheduling,
    /// Vendor attributes written in order after creation (`name`, `value`).
    #[serde(default)]
    pub attributes: Vec<(String, String)>,
    /// The VF address for VF kinds; the GPU's for a pass-through.
    #[serde(default)]
    pub vf: Option<PciAddress>,
    /// The driver a VF was bound to before we took it (given back on release).
    #[serde(default)]
    pub previous_driver: Option<String>,
    /// Pass-through: its IOMMU group was taken with `force` (a member serves the host or is
    /// not a function of the GPU), so starting it again (reconcile, `start`, a claim) takes it
    /// the same way. Written only when set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

/// Per-parent desired state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ParentRecord {
    /// Scheduling policy (opaque to the engine; `vgpu-sched` gives it meaning).
    #[serde(default)]
    pub schedule: Option<serde_json::Value>,
    /// For an SR-IOV PF: the VF count the manager set (restored after a reboot).
    #[serde(default)]
    pub num_vfs: Option<u32>,
}

/// The whole state file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateFile {
    /// Schema version ([`STATE_SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// Instances by UUID.
    #[serde(default)]
    pub instances: BTreeMap<Uuid, InstanceRecord>,
    /// Parents by name (mdev parent name or PF address).
    #[serde(default)]
    pub parents: BTreeMap<ParentName, ParentRecord>,
    /// Group bindings of pass-through instances, by instance UUID.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub passthrough: BTreeMap<Uuid, crate::passthrough::GroupBinding>,
    /// UUIDs a batch create is making right now (saved before its first sysfs write, cleared
    /// with the batch's one save of its records). After a crash, reconcile removes whatever
    /// of them exists: the batch never reported success.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub pending_creates: BTreeSet<Uuid>,
    /// UUIDs a batch destroy is removing right now (saved before its first sysfs write when a
    /// persistent instance is among them). After a crash, reconcile finishes them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub pending_destroys: BTreeSet<Uuid>,
    /// Write-ahead intents: what a host write is about to make, saved before it, by instance
    /// UUID (or PF address for a VF count; both in lower case). After a crash reconcile undoes
    /// each (see `engine::intents`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub intents: BTreeMap<String, crate::intents::Intent>,
}

impl Default for StateFile {
    fn default() -> Self {
        Self {
            schema_version: STATE_SCHEMA_VERSION,
            instances: BTreeMap::new(),
            parents: BTreeMap::new(),
            passthrough: BTreeMap::new(),
            pending_creates: BTreeSet::new(),
            pending_destroys: BTreeSet::new(),
            intents: BTreeMap::new(),
        }
    }
}

/// What names an instance for a look-up in a [`StateFile`]: its [`Uuid`], or its UUID as text
/// (any case; text that is not a UUID names nothing).
pub trait InstanceKey {
    /// The UUID, if this names one.
    fn instance_uuid(&self) -> Option<Uuid>;
}

impl InstanceKey for Uuid {
    fn instance_uuid(&self) -> Option<Uuid> {
        Some(*self)
    }
}

impl InstanceKey for str {
    fn instance_uuid(&self) -> Option<Uuid> {
        Uuid::parse(self).ok()
    }
}

impl InstanceKey for String {
    fn instance_uuid(&self) -> Option<Uuid> {
        Uuid::parse(self).ok()
    }
}

impl<T: InstanceKey + ?Sized> InstanceKey for &T {
    fn instance_uuid(&self) -> Option<Uuid> {
        (**self).instance_uuid()
    }
}

impl StateFile {
    /// The record of an instance.
    pub fn instance(&self, key: &(impl InstanceKey + ?Sized)) -> Option<&InstanceRecord> {
        self.instances.get(&key.instance_uuid()?)
    }

    /// The record of an instance, to change.
    pub fn instance_mut(
        &mut self,
        key: &(impl InstanceKey + ?Sized),
    ) -> Option<&mut InstanceRecord> {
        self.instances.get_mut(&key.instance_uuid()?)
    }

    /// Whether an instance has a record.
    pub fn has_instance(&self, key: &(impl InstanceKey + ?Sized)) -> bool {
        self.instance(key).is_some()
    }

    /// Forgets an instance's record, returning it.
    pub fn remove_instance(&mut self, key: &(impl InstanceKey + ?Sized)) -> Option<InstanceRecord> {
        self.instances.remove(&key.instance_uuid()?)
    }

    /// Records an instance under its UUID.
    pub fn insert_instance(&mut self, record: InstanceRecord) -> Option<InstanceRecord> {
        self.instances.insert(record.uuid, record)
    }
}

/// Failures of the state store.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading or writing a state file failed.
    #[error("cannot {op} {path}")]
    Io {
        /// `read`, `write`, `list` or `remove`.
        op: &'static str,
        /// The host path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The state file is not valid JSON of the expected shape.
    #[error("state file {path} is corrupt")]
    Corrupt {
        /// The host path.
        path: PathBuf,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// The state file was written by a newer (or unknown) schema.
    #[error(
        "state file {path} has schema version {found}, this build reads {OLDEST_MIGRATED_SCHEMA_VERSION} to {STATE_SCHEMA_VERSION}"
    )]
    Schema {
        /// The host path.
        path: PathBuf,
        /// The version found.
        found: u32,
    },
    /// A complete line of the state journal is not a journal line (the torn last line a power
    /// loss leaves is dropped, not refused). Line 0 names an entry that could not be encoded.
    #[error("state journal {path} is corrupt at line {line}")]
    Journal {
        /// The host path of the journal.
        path: PathBuf,
        /// The line (1 = the header).
        line: usize,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// A state file of an older schema holds a value today's typed record refuses (the error
    /// names the record, e.g. the instance's UUID, and the field). Nothing was changed.
    #[error("state file {path} (schema version {from}) cannot be migrated to version {STATE_SCHEMA_VERSION}")]
    Migration {
        /// The host path.
        path: PathBuf,
        /// The file's schema version.
        from: u32,
        /// The record and field.
        #[source]
        source: MigrationError,
    },
}

impl StateError {
    /// The error class.
    pub fn kind(&self) -> crate::ErrorKind {
        crate::ErrorKind::Failed
    }
}

/// Regular-file operations under the host root (state, pending releases, mdevctl definitions,
/// profiles). Paths are host-absolute, like [`mdev_host::HostFs`].
pub trait StateFiles: Send + Sync + fmt::Debug {
    /// Reads a file; `Ok(None)` when it does not exist.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// Replaces a file atomically and durably (temp file, fsync, rename, fsync directory),
    /// creating its directory if needed.
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()>;
    /// Appends `data` to a file durably (write, then `fdatasync`; a file it creates also gets
    /// its directory entry synced), creating the file and its directory if needed. A crash
    /// before it returns may leave any prefix of `data` at the end of the file.
    fn append(&self, path: &Path, data: &[u8]) -> io::Result<()>;
    /// Lists a directory; empty when it does not exist.
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// Removes a file; succeeds when it is already gone.
    fn remove(&self, path: &Path) -> io::Result<()>;
}

/// [`StateFiles`] on the real file system, re-rooted under `root` like [`mdev_host::RealFs`].
#[derive(Debug, Clone)]
pub struct DiskFiles {
    root: PathBuf,
}

impl DiskFiles {
    /// Files under `root` (`/` on a real host).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn resolve(&self, path: &Path) -> io::Result<PathBuf> {
        mdev_host::resolve_under(&self.root, path)
    }
}

impl StateFiles for DiskFiles {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.resolve(path)?) {
            Ok(data) => Ok(Some(data)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let target = self.resolve(path)?;
        let dir = target.parent().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "state path has no directory")
        })?;
        std::fs::create_dir_all(dir)?;
        let mut temp_name = target.file_name().unwrap_or_default().to_owned();
        temp_name.push(format!("{TEMP_INFIX}{}", std::process::id()));
        let temp = dir.join(temp_name);
        let result = (|| {
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(data)?;
            file.sync_all()?;
            std::fs::rename(&temp, &target)?;
            // The rename is durable only once the directory entry is.
            std::fs::File::open(dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        result
    }

    fn append(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let target = self.resolve(path)?;
        let open = |create: bool| {
            std::fs::OpenOptions::new()
                .append(true)
                .create(create)
                .open(&target)
        };
        let (mut file, created) = match open(false) {
            Ok(file) => (file, false),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                let dir = target.parent().ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "state path has no directory")
                })?;
                std::fs::create_dir_all(dir)?;
                (open(true)?, true)
            }
            Err(error) => return Err(error),
        };
        file.write_all(data)?;
        // The data (and the length) only: no metadata a reader needs is otherwise touched.
        file.sync_data()?;
        if created {
            // A new file survives a power loss only once its directory entry is durable.
            if let Some(dir) = target.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        match std::fs::read_dir(self.resolve(dir)?) {
            Ok(entries) => entries.map(|entry| entry.map(|e| e.file_name())).collect(),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        match std::fs::remove_file(self.resolve(path)?) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }
}

/// Loads the state from `state_dir`: `state.json` (a missing file is an empty state; an older
/// schema is migrated), then the journal replayed onto it (`journal`).
pub fn load(files: &dyn StateFiles, state_dir: &Path) -> Result<StateFile, StateError> {
    Ok(load_detailed(files, state_dir)?.state)
}

/// What [`load_detailed`] read.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The state, journal applied.
    pub state: StateFile,
    /// The journal generation `state.json` records (0 when absent).
    pub generation: u64,
    /// Length of `state.json` (0 when missing).
    pub state_bytes: u64,
    /// What the journal held.
    pub journal: crate::journal::Replayed,
}

/// [`load`], also telling what it found on disk.
pub fn load_detailed(files: &dyn StateFiles, state_dir: &Path) -> Result<Loaded, StateError> {
    let (mut state, generation, state_bytes) = load_state_file(files, state_dir)?;
    let journal = crate::journal::replay(files, state_dir, generation, &mut state)?;
    Ok(Loaded {
        state,
        generation,
        state_bytes,
        journal,
    })
}

/// `state.json` alone: the state, its journal generation and its length.
fn load_state_file(
    files: &dyn StateFiles,
    state_dir: &Path,
) -> Result<(StateFile, u64, u64), StateError> {
    let path = state_dir.join(STATE_FILE_NAME);
    let Some(data) = files.read(&path).map_err(|source| StateError::Io {
        op: "read",
        path: path.clone(),
        source,
    })?
    else {
        return Ok((StateFile::default(), 0, 0));
    };
    #[derive(Deserialize)]
    struct Version {
        schema_version: u32,
        #[serde(default)]
        journal_generation: u64,
    }
    let version: Version = serde_json::from_slice(&data).map_err(|source| StateError::Corrupt {
        path: path.clone(),
        source,
    })?;
    let (generation, bytes) = (version.journal_generation, data.len() as u64);
    match version.schema_version {
        STATE_SCHEMA_VERSION => serde_json::from_slice(&data)
            .map(|state| (state, generation, bytes))
            .map_err(|source| StateError::Corrupt { path, source }),
        1 => {
            let value: serde_json::Value =
                serde_json::from_slice(&data).map_err(|source| StateError::Corrupt {
                    path: path.clone(),
                    source,
                })?;
            let state = crate::state_migration::from_v1(&value).map_err(|source| {
                StateError::Migration {
                    path: path.clone(),
                    from: 1,
                    source,
                }
            })?;
            // Kept until the next schema-1 migration replaces it; the state file itself turns
            // into schema 2 on the next save.
            let backup = state_dir.join(STATE_V1_BACKUP_NAME);
            files
                .write_atomic(&backup, &data)
                .map_err(|source| StateError::Io {
                    op: "write",
                    path: backup,
                    source,
                })?;
            Ok((state, generation, bytes))
        }
        found => Err(StateError::Schema { path, found }),
    }
}

/// Writes the state file into `state_dir` atomically (whole-file mode: no journal
/// generation, so a journal of generation 0 would still apply — the engine removes the
/// journal before it saves this way).
pub fn save(files: &dyn StateFiles, state_dir: &Path, state: &StateFile) -> Result<(), StateError> {
    write_state(files, state_dir, state).map(|_| ())
}

/// Writes the state file recording journal `generation` (a fold, `journal`); returns its
/// length.
pub(crate) fn save_generation(
    files: &dyn StateFiles,
    state_dir: &Path,
    state: &StateFile,
    generation: u64,
) -> Result<u64, StateError> {
    #[derive(Serialize)]
    struct WithGeneration<'a> {
        #[serde(flatten)]
        state: &'a StateFile,
        journal_generation: u64,
    }
    write_state(
        files,
        state_dir,
        &WithGeneration {
            state,
            journal_generation: generation,
        },
    )
}

fn write_state(
    files: &dyn StateFiles,
    state_dir: &Path,
    state: &impl Serialize,
) -> Result<u64, StateError> {
    let path = state_dir.join(STATE_FILE_NAME);
    let mut data = serde_json::to_vec_pretty(state).map_err(|source| StateError::Corrupt {
        path: path.clone(),
        source,
    })?;
    data.push(b'\n');
    files
        .write_atomic(&path, &data)
        .map_err(|source| StateError::Io {
            op: "write",
            path,
            source,
        })?;
    Ok(data.len() as u64)
}

/// Removes the temporary files a writer killed inside [`StateFiles::write_atomic`] left in
/// `state_dir` (`state.json.tmp.<pid>`; see [`DAEMON_WRITTEN_FILES`]) and returns their
/// paths. Call it only while holding the state directory's lock
/// ([`crate::daemon::single_instance::StateDirLock`]): then no live writer's file is among them.
pub fn remove_stale_temp_files(
    files: &dyn StateFiles,
    state_dir: &Path,
) -> Result<Vec<PathBuf>, StateError> {
    let names = files.list(state_dir).map_err(|source| StateError::Io {
        op: "list",
        path: state_dir.to_path_buf(),
        source,
    })?;
    let mut removed = Vec::new();
    for name in names {
        let Some(name) = name.to_str() else { continue };
        if !is_temp_file_of_daemon_file(name) {
            continue;
        }
        let path = state_dir.join(name);
        files.remove(&path).map_err(|source| StateError::Io {
            op: "remove",
            path: path.clone(),
            source,
        })?;
        removed.push(path);
    }
    removed.sort();
    Ok(removed)
}

/// Whether `name` is `<one of DAEMON_WRITTEN_FILES>.tmp.<digits>`.
fn is_temp_file_of_daemon_file(name: &str) -> bool {
    DAEMON_WRITTEN_FILES.iter().any(|file| {
        name.strip_prefix(file)
            .and_then(|rest| rest.strip_prefix(TEMP_INFIX))
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_temp_files_of_the_state_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let files = DiskFiles::new(dir.path());
        let state_dir = Path::new("/var/lib/mdev-manager");
        let mut state = StateFile::default();
        state.parents.insert(
            ParentName::new("0000:4b:00.0").unwrap(),
            ParentRecord {
                schedule: None,
                num_vfs: Some(2),
            },
        );
        save(&files, state_dir, &state).unwrap();
        let real_dir = dir.path().join("var/lib/mdev-manager");
        for name in ["state.json.tmp.41", "state.json.tmp.1234567"] {
            std::fs::write(real_dir.join(name), b"{\"schema_ver").unwrap();
        }
        // Not temporary files of the daemon's: kept.
        let kept = [
            "state.json.tmp.",
            "state.json.tmp.12x",
            "notes.tmp.12",
            "mdev-manager.lock",
        ];
        for name in kept {
            std::fs::write(real_dir.join(name), b"x").unwrap();
        }
        std::fs::create_dir_all(real_dir.join(PENDING_RELEASES_DIR)).unwrap();
        std::fs::write(
            real_dir
                .join(PENDING_RELEASES_DIR)
                .join("state.json.tmp.77"),
            b"x",
        )
        .unwrap();

        let removed = remove_stale_temp_files(&files, state_dir).unwrap();
        assert_eq!(
            removed,
            [
                state_dir.join("state.json.tmp.1234567"),
                state_dir.join("state.json.tmp.41")
            ]
        );
        let mut left: Vec<_> = std::fs::read_dir(&real_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected: Vec<String> = kept.iter().map(|n| n.to_string()).collect();
        expected.push(PENDING_RELEASES_DIR.into());
        expected.push(STATE_FILE_NAME.into());
        expected.sort();
        assert_eq!(left, expected);
        assert!(real_dir
            .join(PENDING_RELEASES_DIR)
            .join("state.json.tmp.77")
            .exists());
        assert_eq!(load(&files, state_dir).unwrap(), state);
        assert!(remove_stale_temp_files(&files, state_dir)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn save_then_load_round_trips_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let files = DiskFiles::new(dir.path());
        let state_dir = Path::new("/var/lib/mdev-manager");
        assert_eq!(
            load(&files, state_dir).unwrap(),
            StateFile::default(),
            "missing file = empty state"
        );
        let mut state = StateFile::default();
        state.parents.insert(
            ParentName::new("0000:4b:00.0").unwrap(),
            ParentRecord {
                schedule: None,
                num_vfs: Some(4),
            },
        );
        save(&files, state_dir, &state).unwrap();
        assert_eq!(load(&files, state_dir).unwrap(), state);
        let names: Vec<_> = std::fs::read_dir(dir.path().join("var/lib/mdev-manager"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [OsString::from(STATE_FILE_NAME)]);
    }

    #[test]
    fn disk_files_refuse_paths_leaving_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let files = DiskFiles::new(dir.path());
        assert!(files
            .write_atomic(Path::new("/var/../../etc/passwd"), b"x")
            .is_err());
        assert!(files.read(Path::new("/../x")).is_err());
        assert_eq!(
            files.list(Path::new("/nonexistent")).unwrap(),
            Vec::<OsString>::new()
        );
        files.remove(Path::new("/nonexistent/file")).unwrap();
    }
}
