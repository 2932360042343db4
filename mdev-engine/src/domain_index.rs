//! The index of domains that hold claims: one empty file per domain UUID,
//! `<state dir>/domains/<domain uuid>`, for the libvirt hook to read without the bus.
//!
//! The hook runs at `release` of every domain on the host. A domain whose XML no longer names
//! a vGPU (one was hot-unplugged) may still hold claims, so the hook cannot go by the XML; it
//! asks the service to release every domain this index lists (docs/libvirt.md, "Fast path").
//!
//! Contract: a domain that holds a claim in the saved state always has its file. The commit
//! ([`commit`], the one place state is saved) adds the files of newly holding domains
//! *before* the state is written and removes the files of domains that hold nothing *after*
//! it is, so a crash between the two leaves only stale files, each costing the hook one
//! needless `ReleaseDomain`. [`rebuild`] makes the index exact again at start. Files are made
//! with the state store's atomic, durable write; names are canonical lower-case UUIDs (a
//! claim's domain UUID is a typed UUID in the record, so every holder gets its file).
//!
//! Failures are state-store failures ([`StateError`]): the index is part of what a commit
//! makes durable.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::state::{StateError, StateFile, StateFiles};

/// Directory of the index inside the state directory (the hook's
/// `libvirt_hooks::domain_index::DOMAIN_INDEX_DIR`).
pub const DOMAIN_INDEX_DIR: &str = "domains";

/// The domains holding at least one claim in `state`, as their index file names.
pub fn holding_domains(state: &StateFile) -> BTreeSet<String> {
    state
        .instances
        .values()
        .filter_map(|record| record.claim.as_ref())
        .map(|claim| claim.domain_uuid.to_string())
        .collect()
}

/// Saves `state` with `save` and brings the index in line with it, in the order that keeps
/// the contract: new files first, then the state, then the removals.
pub fn commit(
    files: &dyn StateFiles,
    state_dir: &Path,
    state: &StateFile,
    save: impl FnOnce() -> Result<(), StateError>,
) -> Result<(), StateError> {
    let listed = listed(files, state_dir)?;
    commit_over(files, state_dir, state, listed, save).map(drop)
}

/// [`commit`] over the names `listed` in the index now; returns what it lists afterwards
/// (the holders, and any stale name whose removal failed, to be tried again).
fn commit_over(
    files: &dyn StateFiles,
    state_dir: &Path,
    state: &StateFile,
    listed: BTreeSet<String>,
    save: impl FnOnce() -> Result<(), StateError>,
) -> Result<BTreeSet<String>, StateError> {
    let holding = holding_domains(state);
    if holding == listed {
        // No claim changed hands: the index is left alone.
        save()?;
        return Ok(listed);
    }
    add(files, state_dir, holding.difference(&listed))?;
    save()?;
    let kept = remove(files, state_dir, listed.difference(&holding));
    Ok(holding.into_iter().chain(kept).collect())
}

/// Makes the index list exactly the domains holding claims in `state` (at start, before the
/// service answers anyone), whatever a crash or an older version left there.
pub fn rebuild(
    files: &dyn StateFiles,
    state_dir: &Path,
    state: &StateFile,
) -> Result<(), StateError> {
    commit(files, state_dir, state, || Ok(()))
}

/// The index as the engine keeps it: what the directory lists, known in memory after the first
/// commit, so a commit reads nothing of it and writes it only when the set of holding domains
/// changes. Only the engine writes the index (the hook reads it), so the memory stays true;
/// after a failed commit the directory is listed again.
#[derive(Debug, Default)]
pub(crate) struct DomainIndex {
    listed: std::sync::Mutex<Option<BTreeSet<String>>>,
}

impl DomainIndex {
    /// [`commit`], using and keeping the known listing.
    pub(crate) fn commit(
        &self,
        files: &dyn StateFiles,
        state_dir: &Path,
        state: &StateFile,
        save: impl FnOnce() -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        let mut known = crate::lock(&self.listed);
        let listed = match known.take() {
            Some(listed) => listed,
            None => listed(files, state_dir)?,
        };
        *known = Some(commit_over(files, state_dir, state, listed, save)?);
        Ok(())
    }
}

fn index_dir(state_dir: &Path) -> PathBuf {
    state_dir.join(DOMAIN_INDEX_DIR)
}

/// The names in the index directory (anything: stale temporary files included).
fn listed(files: &dyn StateFiles, state_dir: &Path) -> Result<BTreeSet<String>, StateError> {
    let dir = index_dir(state_dir);
    let names = files.list(&dir).map_err(|source| StateError::Io {
        op: "list",
        path: dir.clone(),
        source,
    })?;
    Ok(names
        .into_iter()
        .map(|name| name.to_string_lossy().into_owned())
        .collect())
}

fn add<'a>(
    files: &dyn StateFiles,
    state_dir: &Path,
    domains: impl Iterator<Item = &'a String>,
) -> Result<(), StateError> {
    for domain in domains {
        let path = index_dir(state_dir).join(domain);
        files
            .write_atomic(&path, b"")
            .map_err(|source| StateError::Io {
                op: "write",
                path,
                source,
            })?;
    }
    Ok(())
}

/// Removes stale names; returns those it could not remove. The state is saved by then, so a
/// failure is only logged: a stale file costs the hook one needless call, and the next commit
/// or start tries again.
fn remove<'a>(
    files: &dyn StateFiles,
    state_dir: &Path,
    names: impl Iterator<Item = &'a String>,
) -> Vec<String> {
    let mut kept = Vec::new();
    for name in names {
        let path = index_dir(state_dir).join(name);
        match files.remove(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot remove a stale domain index entry");
                kept.push(name.clone());
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Claim, DiskFiles, InstanceKind, InstanceRecord, Owner};

    const DOMAIN_A: &str = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0";
    const DOMAIN_B: &str = "99999999-2222-4333-8444-555555555555";

    fn claimed(uuid: &str, domain_uuid: Option<&str>) -> InstanceRecord {
        InstanceRecord {
            uuid: uuid.parse().unwrap(),
            kind: InstanceKind::Mdev,
            parent: "mtty".parse().unwrap(),
            type_id: "mtty-2".parse().unwrap(),
            profile: None,
            owner: Owner::CreatedByUs,
            autostart: false,
            persistent: false,
            claim: domain_uuid.map(|domain_uuid| Claim {
                domain_name: "vm".to_owned(),
                domain_uuid: domain_uuid.parse().unwrap(),
                transient: true,
                started_by_claim: false,
            }),
            scheduling: Default::default(),
            attributes: Vec::new(),
            vf: None,
            previous_driver: None,
            force: false,
        }
    }

    fn state(records: &[InstanceRecord]) -> StateFile {
        let mut state = StateFile::default();
        for record in records {
            state.insert_instance(record.clone());
        }
        state
    }

    fn names(root: &Path) -> Vec<String> {
        let mut names: Vec<String> = match std::fs::read_dir(root.join("state/domains")) {
            Ok(entries) => entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        names
    }

    #[test]
    fn lists_each_holding_domain_once_and_no_other() {
        let root = tempfile::tempdir().unwrap();
        let files = DiskFiles::new(root.path());
        let dir = Path::new("/state");
        let held = state(&[
            claimed("aaaaaaaa-0000-4000-8000-000000000001", Some(DOMAIN_A)),
            claimed("aaaaaaaa-0000-4000-8000-000000000002", Some(DOMAIN_A)),
            claimed("aaaaaaaa-0000-4000-8000-000000000003", None),
        ]);
        commit(&files, dir, &held, || Ok(())).unwrap();
        assert_eq!(names(root.path()), vec![DOMAIN_A.to_owned()]);

        let moved = state(&[claimed(
            "aaaaaaaa-0000-4000-8000-000000000001",
            Some(&DOMAIN_B.to_uppercase()),
        )]);
        commit(&files, dir, &moved, || Ok(())).unwrap();
        assert_eq!(names(root.path()), vec![DOMAIN_B.to_owned()]);

        commit(&files, dir, &state(&[]), || Ok(())).unwrap();
        assert!(names(root.path()).is_empty());
    }

    #[test]
    fn a_new_holder_is_listed_before_the_state_is_saved_and_a_former_one_after() {
        let root = tempfile::tempdir().unwrap();
        let files = DiskFiles::new(root.path());
        let dir = Path::new("/state");
        let first = state(&[claimed(
            "aaaaaaaa-0000-4000-8000-000000000001",
            Some(DOMAIN_A),
        )]);
        commit(&files, dir, &first, || {
            assert_eq!(names(root.path()), vec![DOMAIN_A.to_owned()]);
            Ok(())
        })
        .unwrap();
        let second = state(&[claimed(
            "aaaaaaaa-0000-4000-8000-000000000001",
            Some(DOMAIN_B),
        )]);
        commit(&files, dir, &second, || {
            assert_eq!(
                names(root.path()),
                vec![DOMAIN_A.to_owned(), DOMAIN_B.to_owned()]
            );
            Ok(())
        })
        .unwrap();
        assert_eq!(names(root.path()), vec![DOMAIN_B.to_owned()]);
    }

    #[test]
    fn a_failed_save_keeps_the_former_holders_listed() {
        let root = tempfile::tempdir().unwrap();
        let files = DiskFiles::new(root.path());
        let dir = Path::new("/state");
        let held = state(&[claimed(
            "aaaaaaaa-0000-4000-8000-000000000001",
            Some(DOMAIN_A),
        )]);
        commit(&files, dir, &held, || Ok(())).unwrap();
        let error = commit(&files, dir, &state(&[]), || {
            Err(StateError::Io {
                op: "write",
                path: "/state/state.json".into(),
                source: std::io::Error::other("disk full"),
            })
        });
        assert!(error.is_err());
        assert_eq!(names(root.path()), vec![DOMAIN_A.to_owned()]);
    }

    #[test]
    fn the_engine_rebuilds_the_index_from_its_state_when_it_opens() {
        use std::sync::Arc;
        let root = tempfile::tempdir().unwrap();
        let files = DiskFiles::new(root.path());
        let config = crate::EngineConfig::default();
        let held = state(&[claimed(
            "aaaaaaaa-0000-4000-8000-000000000001",
            Some(DOMAIN_A),
        )]);
        // A state saved without the index (an older version), and a stale entry.
        crate::state::save(&files, &config.state_dir, &held).unwrap();
        let index = root.path().join("var/lib/mdev-manager/domains");
        std::fs::create_dir_all(&index).unwrap();
        std::fs::write(index.join(DOMAIN_B), "").unwrap();
        let sim = mdev_sim::SimHost::builtin("samples").unwrap();
        crate::Engine::new(Arc::new(sim), Arc::new(files), config).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&index)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec![DOMAIN_A.to_owned()]);
    }

    #[test]
    fn rebuild_removes_whatever_is_not_a_holding_domain() {
        let root = tempfile::tempdir().unwrap();
        let files = DiskFiles::new(root.path());
        let index = root.path().join("state/domains");
        std::fs::create_dir_all(&index).unwrap();
        std::fs::write(index.join(DOMAIN_B), "").unwrap();
        std::fs::write(index.join(format!("{DOMAIN_A}.tmp.123")), "").unwrap();
        let held = state(&[claimed(
            "aaaaaaaa-0000-4000-8000-000000000001",
            Some(DOMAIN_A),
        )]);
        rebuild(&files, Path::new("/state"), &held).unwrap();
        assert_eq!(names(root.path()), vec![DOMAIN_A.to_owned()]);
    }
}
