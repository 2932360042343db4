//! Mirrored mdevctl definitions: `/etc/mdevctl.d/<parent>/<uuid>` (under the host root) kept
//! in step with the engine's persistent mdev instances, in mdevctl's own format (its
//! `write_config`: pretty JSON `{"mdev_type", "start", "attrs"}`, no trailing newline), so
//! libvirt's watch on that directory and mdevctl's tools see what the service defines.
//!
//! Contract: only files the mirror wrote are ever rewritten or removed. They are listed, with
//! the bytes written, in `<state dir>/mdevctl-mirror.json`; a definition file that exists and
//! is not listed (mdevctl's own, or the admin's) is taken over only when it already holds the
//! same bytes (an imported definition), else left alone and reported. Writes are atomic
//! (`StateFiles::write_atomic`). A sync is one pass, and passes run one at a time: each holds
//! the engine's mirror lock from its read of the state to its last write, so a pass that read
//! an older state never writes after one that read a newer state. A persistence change
//! followed by a sync therefore leaves the mirror in step with the state, whatever other passes
//! run meanwhile (the service also runs them under its refresh lock). A partial sync
//! ([`Engine::sync_mdevctl_mirror_of`]) is such a pass over the named instances alone: the
//! service runs one for the instances each publication names, after one whole sync.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::state::InstanceRecord;
use crate::{lock, Engine, InstanceKind};

/// The list of files the mirror owns, in the state directory.
pub const MANIFEST: &str = "mdevctl-mirror.json";

/// What one sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorReport {
    /// Files written (new or changed), host paths.
    pub written: Vec<String>,
    /// Files removed (instance gone or no longer persistent), host paths.
    pub removed: Vec<String>,
    /// Definition files that exist with other bytes and were not written by the mirror: left
    /// alone (host paths).
    pub left_alone: Vec<String>,
    /// Files that could not be read, written or removed, each `PATH: why`.
    pub problems: Vec<String>,
}

/// mdevctl's definition file content for a type, start mode and attributes.
pub fn definition_text(type_id: &str, autostart: bool, attributes: &[(String, String)]) -> String {
    let quote = |text: &str| serde_json::Value::String(text.to_owned()).to_string();
    let start = if autostart { "auto" } else { "manual" };
    let attrs = if attributes.is_empty() {
        "[]".to_owned()
    } else {
        let items: Vec<String> = attributes
            .iter()
            .map(|(name, value)| format!("    {{\n      {}: {}\n    }}", quote(name), quote(value)))
            .collect();
        format!("[\n{}\n  ]", items.join(",\n"))
    };
    format!(
        "{{\n  \"mdev_type\": {},\n  \"start\": \"{start}\",\n  \"attrs\": {attrs}\n}}",
        quote(type_id)
    )
}

/// The mirror's list of the files it owns (host path → bytes written), as last read from or
/// written to [`MANIFEST`]; `None` until the first sync reads it. Only syncs touch it, under
/// the engine's mirror lock.
#[derive(Debug, Default)]
pub(crate) struct Owned(Option<BTreeMap<String, String>>);

impl Engine {
    /// Brings `/etc/mdevctl.d` in step with the persistent mdev instances (see the module
    /// contract): every instance, and every file the mirror owns. Never fails: what cannot be
    /// done is in the report.
    pub fn sync_mdevctl_mirror(&self) -> MirrorReport {
        self.sync_mirror(None)
    }

    /// [`Engine::sync_mdevctl_mirror`] for the instances `uuids` alone (those a change named):
    /// their definition files are written, rewritten or removed as their records now say;
    /// nothing else is read or written, so the cost follows the change, not the host. The
    /// caller runs one whole sync first (at start) so files of instances no change will name
    /// are in step too.
    pub fn sync_mdevctl_mirror_of<'a>(
        &self,
        uuids: impl IntoIterator<Item = &'a str>,
    ) -> MirrorReport {
        let only: BTreeSet<&str> = uuids.into_iter().collect();
        self.sync_mirror(Some(&only))
    }

    fn sync_mirror(&self, only: Option<&BTreeSet<&str>>) -> MirrorReport {
        let mut cached = lock(&self.mirror);
        let mut report = MirrorReport::default();
        let manifest_path = self.config.state_dir.join(MANIFEST);
        // A whole sync reads the list again (an admin may have repaired it); a partial one
        // trusts the list the last sync left.
        let known = if only.is_some() {
            cached.0.take()
        } else {
            None
        };
        let mut owned: BTreeMap<String, String> = match known {
            Some(owned) => owned,
            None => match self.files.read(&manifest_path) {
                Ok(Some(data)) => serde_json::from_slice(&data).unwrap_or_else(|error| {
                    report.problems.push(format!(
                        "{}: {error}; starting a new list",
                        manifest_path.display()
                    ));
                    BTreeMap::new()
                }),
                Ok(None) => BTreeMap::new(),
                Err(error) => {
                    report
                        .problems
                        .push(format!("{}: {error}", manifest_path.display()));
                    return report;
                }
            },
        };
        let wanted =
            |record: &&InstanceRecord| record.persistent && record.kind == InstanceKind::Mdev;
        let definition = |record: &InstanceRecord| {
            let path = self.mirror_path(&record.parent, &record.uuid.to_string());
            let text = definition_text(&record.type_id, record.autostart, &record.attributes);
            (path.display().to_string(), text)
        };
        let desired: BTreeMap<String, String> = {
            let state = lock(&self.state);
            match only {
                None => state
                    .instances
                    .values()
                    .filter(wanted)
                    .map(definition)
                    .collect(),
                Some(uuids) => uuids
                    .iter()
                    .filter_map(|uuid| state.instance(uuid))
                    .filter(wanted)
                    .map(definition)
                    .collect(),
            }
        };
        let mut changed = false;
        for (path, text) in &desired {
            if owned.get(path) == Some(text) {
                continue;
            }
            let file = Path::new(path);
            if !owned.contains_key(path) {
                match self.files.read(file) {
                    Ok(None) => {}
                    // mdevctl's own file with the same definition (an imported instance):
                    // the mirror takes it over.
                    Ok(Some(existing)) if existing == text.as_bytes() => {
                        owned.insert(path.clone(), text.clone());
                        changed = true;
                        continue;
                    }
                    Ok(Some(_)) => {
                        report.left_alone.push(path.clone());
                        continue;
                    }
                    Err(error) => {
                        report.problems.push(format!("{path}: {error}"));
                        continue;
                    }
                }
            }
            match self.files.write_atomic(file, text.as_bytes()) {
                Ok(()) => {
                    owned.insert(path.clone(), text.clone());
                    changed = true;
                    report.written.push(path.clone());
                }
                Err(error) => report.problems.push(format!("{path}: {error}")),
            }
        }
        // Files owned for instances in scope that their records no longer want (a partial
        // sync's scope: the files named after its instances, whatever their parent).
        let in_scope = |path: &str| match only {
            None => true,
            Some(uuids) => Path::new(path)
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| uuids.contains(name)),
        };
        let stale: Vec<String> = owned
            .keys()
            .filter(|path| in_scope(path) && !desired.contains_key(*path))
            .cloned()
            .collect();
        for path in stale {
            match self.files.remove(Path::new(&path)) {
                Ok(()) => {
                    owned.remove(&path);
                    changed = true;
                    report.removed.push(path);
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    owned.remove(&path);
                    changed = true;
                }
                Err(error) => report.problems.push(format!("{path}: {error}")),
            }
        }
        if changed {
            let data = serde_json::to_vec_pretty(&owned).unwrap_or_default();
            if let Err(error) = self.files.write_atomic(&manifest_path, &data) {
                report
                    .problems
                    .push(format!("{}: {error}", manifest_path.display()));
            }
        }
        cached.0 = Some(owned);
        report
    }

    fn mirror_path(&self, parent: &str, uuid: &str) -> PathBuf {
        self.config.mdevctl_dir.join(parent).join(uuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_files_have_mdevctls_bytes() {
        assert_eq!(
            definition_text("mtty-2", true, &[]),
            "{\n  \"mdev_type\": \"mtty-2\",\n  \"start\": \"auto\",\n  \"attrs\": []\n}"
        );
        assert_eq!(
            definition_text("t", false, &[("a".into(), "1".into()), ("b".into(), "x\"".into())]),
            "{\n  \"mdev_type\": \"t\",\n  \"start\": \"manual\",\n  \"attrs\": [\n    {\n      \"a\": \"1\"\n    },\n    {\n      \"b\": \"x\\\"\"\n    }\n  ]\n}"
        );
    }
}
