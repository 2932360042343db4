//! Import of mdevctl definitions (`/etc/mdevctl.d/<parent>/<uuid>`, JSON with `mdev_type`,
//! `start` (`auto`|`manual`) and an ordered `attrs` array of single-key objects) as adopted,
//! persistent instances, so users can migrate from mdevctl.

use std::path::Path;

use serde::Deserialize;

use crate::state::{InstanceRecord, ParentName, TypeId};
use crate::{
    lock, Engine, EngineError, EngineEvent, ImportReport, InstanceKind, Owner, Scheduling,
};
use mdev_host::discovery::names;

/// One mdevctl definition file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MdevctlDefinition {
    /// The mdev type id.
    pub mdev_type: String,
    /// `auto` or `manual`.
    pub start: String,
    /// Attributes, in order, each a single-key object with a string value.
    #[serde(default)]
    pub attrs: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// Why a definition file cannot be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Not the JSON mdevctl writes.
    #[error("{path} is not an mdevctl definition")]
    Json {
        /// The file.
        path: String,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// A field has a value mdevctl would not accept (or we must not write).
    #[error("{path}: {problem}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
}

impl ImportError {
    /// Every import error is bad input.
    pub fn kind(&self) -> crate::ErrorKind {
        crate::ErrorKind::InvalidArgs
    }
}

/// A definition as the engine records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedDefinition {
    /// The mdev type id.
    pub type_id: String,
    /// `start: auto`.
    pub autostart: bool,
    /// Attributes in order.
    pub attributes: Vec<(String, String)>,
}

/// Parses one definition file's content.
pub fn parse_definition(path: &str, data: &[u8]) -> Result<ImportedDefinition, ImportError> {
    let definition: MdevctlDefinition =
        serde_json::from_slice(data).map_err(|source| ImportError::Json {
            path: path.to_owned(),
            source,
        })?;
    let invalid = |problem: String| ImportError::Invalid {
        path: path.to_owned(),
        problem,
    };
    names::check_sysfs_name("mdev type", &definition.mdev_type)
        .map_err(|e| invalid(e.to_string()))?;
    let autostart = match definition.start.as_str() {
        "auto" => true,
        "manual" => false,
        other => {
            return Err(invalid(format!(
                "start is {other:?}, expected \"auto\" or \"manual\""
            )))
        }
    };
    let mut attributes = Vec::new();
    for entry in &definition.attrs {
        let mut pairs = entry.iter();
        let (Some((name, value)), None) = (pairs.next(), pairs.next()) else {
            return Err(invalid(format!(
                "attribute entry {entry:?} must have exactly one key"
            )));
        };
        let Some(value) = value.as_str() else {
            return Err(invalid(format!(
                "attribute {name} has a non-string value {value}"
            )));
        };
        names::check_attribute_name(name).map_err(|e| invalid(e.to_string()))?;
        names::check_sysfs_value(name, value).map_err(|e| invalid(e.to_string()))?;
        attributes.push((name.clone(), value.to_owned()));
    }
    Ok(ImportedDefinition {
        type_id: definition.mdev_type,
        autostart,
        attributes,
    })
}

/// What the insert of an imported definition found.
enum Taken {
    /// Inserted.
    Imported,
    /// The state knows the UUID (defined under another parent, or created meanwhile).
    Known,
    /// A create holds the UUID's reservation.
    BeingCreated,
}

impl Engine {
    /// Imports mdevctl definitions (`/etc/mdevctl.d/<parent>/<uuid>`) as adopted persistent
    /// instances. Known UUIDs are skipped; bad files are reported, not fatal.
    pub fn import_mdevctl(&self) -> Result<ImportReport, EngineError> {
        self.import_definitions(false)
    }

    /// What [`Engine::import_mdevctl`] would do now, changing nothing: the same report, with
    /// `imported` the UUIDs it would import.
    pub fn preview_mdevctl_import(&self) -> Result<ImportReport, EngineError> {
        self.import_definitions(true)
    }

    fn import_definitions(&self, dry_run: bool) -> Result<ImportReport, EngineError> {
        let root = self.config.mdevctl_dir.clone();
        let mut report = ImportReport::default();
        let mut parents: Vec<String> = self
            .files
            .list(&root)
            .map_err(|source| crate::state::StateError::Io {
                op: "list",
                path: root.clone(),
                source,
            })?
            .into_iter()
            .map(|name| name.to_string_lossy().into_owned())
            .collect();
        parents.sort();
        for parent in parents {
            if names::check_sysfs_name("parent", &parent).is_err() || parent == "scripts.d" {
                continue;
            }
            let dir = root.join(&parent);
            let mut entries: Vec<String> = match self.files.list(&dir) {
                Ok(entries) => entries
                    .into_iter()
                    .map(|n| n.to_string_lossy().into_owned())
                    .collect(),
                Err(error) => {
                    report.problems.push(format!("{}: {error}", dir.display()));
                    continue;
                }
            };
            entries.sort();
            for entry in entries {
                self.import_one(&dir, &parent, &entry, dry_run, &mut report);
            }
        }
        Ok(report)
    }

    fn import_one(
        &self,
        dir: &Path,
        parent: &str,
        entry: &str,
        dry_run: bool,
        report: &mut ImportReport,
    ) {
        let path = dir.join(entry);
        let shown = path.display().to_string();
        let Ok(uuid) = names::parse_uuid(entry) else {
            report
                .problems
                .push(format!("{shown}: file name is not a UUID"));
            return;
        };
        let key = uuid.to_string();
        if lock(&self.state).has_instance(&key) {
            report.skipped.push(key);
            return;
        }
        let data = match self.files.read(&path) {
            Ok(Some(data)) => data,
            Ok(None) => return,
            Err(error) => {
                report.problems.push(format!("{shown}: {error}"));
                return;
            }
        };
        let ImportedDefinition {
            type_id,
            autostart,
            attributes,
        } = match parse_definition(&shown, &data) {
            Ok(parsed) => parsed,
            Err(error) => {
                report.problems.push(error.to_string());
                return;
            }
        };
        let checked = ParentName::new(parent).and_then(|p| Ok((p, TypeId::new(&type_id)?)));
        let (parent, type_id) = match checked {
            Ok(checked) => checked,
            Err(error) => {
                report.problems.push(format!("{shown}: {error}"));
                return;
            }
        };
        let record = InstanceRecord {
            uuid,
            kind: InstanceKind::Mdev,
            parent,
            type_id,
            profile: None,
            owner: Owner::Adopted,
            autostart,
            persistent: true,
            claim: None,
            scheduling: Scheduling::default(),
            attributes,
            vf: None,
            previous_driver: None,
            force: false,
        };
        if dry_run {
            if report.imported.contains(&key) {
                report.problems.push(format!(
                    "{shown}: UUID {key} is already defined under another parent"
                ));
            } else {
                report.imported.push(key);
            }
            return;
        }
        // The same UUID may be defined under several parents (mdevctl allows it); the first
        // (sorted) wins and the others are reported. A UUID a create has reserved (its device
        // is being made right now) is the create's: checked and inserted under the state lock,
        // which the create holds when it reserves, so the two never both take one UUID.
        let inserted = self.update_state(|state| {
            if state.has_instance(&key) {
                Taken::Known
            } else if lock(&self.reserved).contains(&key) {
                Taken::BeingCreated
            } else {
                state.insert_instance(record);
                Taken::Imported
            }
        });
        match inserted {
            Ok(Taken::Imported) => {
                report.imported.push(key.clone());
                self.emit(EngineEvent::InstanceAdded { uuid: key });
            }
            Ok(Taken::Known) if report.imported.contains(&key) => report.problems.push(format!(
                "{shown}: UUID {key} is already defined under another parent"
            )),
            // Created (or imported by another call) since the check above: known, skipped.
            Ok(Taken::Known) => report.skipped.push(key),
            Ok(Taken::BeingCreated) => report.problems.push(format!(
                "{shown}: UUID {key} is being created by another request; not imported"
            )),
            Err(error) => report.problems.push(format!("{shown}: {error}")),
        }
    }
}
