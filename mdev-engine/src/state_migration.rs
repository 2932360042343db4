//! Reading a state file of an older schema into today's record ([`crate::state::load`] calls
//! it; the file is written back in today's schema by the next save).
//!
//! Schema 1 (every release before the typed record) wrote the same JSON shape as schema 2 but
//! kept UUIDs, parent names, type ids and profile names as unchecked strings, in whatever case
//! they arrived. Schema 2 holds them typed ([`vgpu_types::Uuid`], [`crate::PciAddress`],
//! [`ParentName`], [`TypeId`], [`ProfileName`]), so a loaded state can only hold names the
//! engine would accept from a caller. The migration reads the schema-1 file field by field, so
//! a value the typed record refuses is reported with the record and the field it is in (an
//! instance by its UUID), and nothing is changed: the daemon does not start on a state it
//! cannot read faithfully. UUIDs and PCI addresses are normalized to lower case.
//!
//! The schema-1 shape is frozen here (field names, defaults, the flattened scheduling
//! fields), independent of today's types, so a later change of the record does not change
//! what a schema-1 file means.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::intents::Intent;
use crate::passthrough::GroupBinding;
use crate::record_names::{ParentName, TypeId};
use crate::state::{Claim, InstanceRecord, ParentRecord, Scheduling, StateFile};
use crate::PciAddress;
use vgpu_profiles::ProfileName;
use vgpu_types::Uuid;

/// A field of an older schema's file that today's record cannot hold.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// A field is missing, of the wrong JSON type, or a value the typed record refuses.
    #[error("{record} {key}: field {field:?} {problem}")]
    Field {
        /// What holds the field: `instance`, `parent`, `pass-through binding`, `pending
        /// create`, `pending destroy`, `intent`, or `state` for the top level.
        record: &'static str,
        /// The record's key as the file spells it (an instance's UUID, a parent's name).
        key: String,
        /// The field (`claim.domain_uuid` for a field of a nested object).
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

/// Where a field is, for its error.
#[derive(Clone, Copy)]
struct At<'a> {
    record: &'static str,
    key: &'a str,
}

impl At<'_> {
    fn error(self, field: &'static str, problem: impl Into<String>) -> MigrationError {
        MigrationError::Field {
            record: self.record,
            key: self.key.to_owned(),
            field,
            problem: problem.into(),
        }
    }

    /// A required field.
    fn required<T: DeserializeOwned>(
        self,
        object: &Map<String, Value>,
        field: &'static str,
    ) -> Result<T, MigrationError> {
        match object.get(field) {
            None => Err(self.error(field, "is missing")),
            Some(value) => self.parse(field, value),
        }
    }

    /// A field that may be absent or `null`.
    fn optional<T: DeserializeOwned>(
        self,
        object: &Map<String, Value>,
        field: &'static str,
    ) -> Result<Option<T>, MigrationError> {
        match object.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => self.parse(field, value).map(Some),
        }
    }

    fn parse<T: DeserializeOwned>(
        self,
        field: &'static str,
        value: &Value,
    ) -> Result<T, MigrationError> {
        T::deserialize(value).map_err(|error| self.error(field, format!("({value}): {error}")))
    }

    fn object<'v>(
        self,
        field: &'static str,
        value: &'v Value,
    ) -> Result<&'v Map<String, Value>, MigrationError> {
        value
            .as_object()
            .ok_or_else(|| self.error(field, format!("is not an object: {value}")))
    }
}

/// The members of a top-level map, or nothing when it is absent (schema 1 defaulted them all).
fn top_map<'v>(
    top: &'v Map<String, Value>,
    field: &'static str,
) -> Result<Option<&'v Map<String, Value>>, MigrationError> {
    let at = At {
        record: "state",
        key: "",
    };
    match top.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => at.object(field, value).map(Some),
    }
}

/// Reads a schema-1 state file (already parsed as JSON) into today's record.
pub fn from_v1(file: &Value) -> Result<StateFile, MigrationError> {
    let at = At {
        record: "state",
        key: "",
    };
    let top = at.object("(top level)", file)?;
    let mut state = StateFile::default();
    if let Some(instances) = top_map(top, "instances")? {
        for (key, value) in instances {
            let record = instance_v1(key, value)?;
            state.instances.insert(record.uuid, record);
        }
    }
    if let Some(parents) = top_map(top, "parents")? {
        for (key, value) in parents {
            let at = At {
                record: "parent",
                key,
            };
            let name = ParentName::new(key).map_err(|e| at.error("(name)", e.to_string()))?;
            let object = at.object("(record)", value)?;
            let record = ParentRecord {
                schedule: at.optional(object, "schedule")?,
                num_vfs: at.optional(object, "num_vfs")?,
            };
            state.parents.insert(name, record);
        }
    }
    if let Some(bindings) = top_map(top, "passthrough")? {
        for (key, value) in bindings {
            let at = At {
                record: "pass-through binding",
                key,
            };
            let uuid = key_uuid(at, key)?;
            let binding: GroupBinding = at.parse("(binding)", value)?;
            state.passthrough.insert(uuid, binding);
        }
    }
    state.pending_creates = uuid_set(top, "pending_creates", "pending create")?;
    state.pending_destroys = uuid_set(top, "pending_destroys", "pending destroy")?;
    if let Some(intents) = top_map(top, "intents")? {
        for (key, value) in intents {
            let at = At {
                record: "intent",
                key,
            };
            let intent: Intent = at.parse("(intent)", value)?;
            // An instance's intent is keyed by its UUID, a VF count's by the PF's address.
            let key = match intent {
                Intent::Instance { .. } => key_uuid(at, key)?.to_string(),
                Intent::VfCount { .. } => key
                    .parse::<PciAddress>()
                    .map_err(|e| at.error("(key)", e.to_string()))?
                    .to_string(),
            };
            state.intents.insert(key, intent);
        }
    }
    Ok(state)
}

fn key_uuid(at: At<'_>, key: &str) -> Result<Uuid, MigrationError> {
    Uuid::parse(key).map_err(|e| at.error("(key)", e.to_string()))
}

fn uuid_set(
    top: &Map<String, Value>,
    field: &'static str,
    record: &'static str,
) -> Result<BTreeSet<Uuid>, MigrationError> {
    let at = At {
        record: "state",
        key: "",
    };
    let texts: Vec<String> = at.optional(top, field)?.unwrap_or_default();
    texts
        .iter()
        .map(|text| key_uuid(At { record, key: text }, text))
        .collect()
}

/// One schema-1 instance: every field of the schema-1 `InstanceRecord`, with its defaults.
fn instance_v1(key: &str, value: &Value) -> Result<InstanceRecord, MigrationError> {
    let at = At {
        record: "instance",
        key,
    };
    let key_uuid = key_uuid(at, key)?;
    let object = at.object("(record)", value)?;
    let uuid: Uuid = at.required(object, "uuid")?;
    if uuid != key_uuid {
        return Err(at.error("uuid", format!("{uuid} differs from the record's key")));
    }
    let parent: String = at.required(object, "parent")?;
    let parent = ParentName::new(&parent).map_err(|e| at.error("parent", e.to_string()))?;
    let type_id: String = at.required(object, "type_id")?;
    let type_id = TypeId::new(&type_id).map_err(|e| at.error("type_id", e.to_string()))?;
    let profile: Option<String> = at.optional(object, "profile")?;
    let profile = profile
        .map(|name| ProfileName::new(&name))
        .transpose()
        .map_err(|e| at.error("profile", e.to_string()))?;
    let claim = match object.get("claim") {
        None | Some(Value::Null) => None,
        Some(value) => {
            let claim = at.object("claim", value)?;
            // Errors name the nested field as `claim.<field>`.
            let inner = |error: MigrationError| match error {
                MigrationError::Field {
                    record,
                    key,
                    field,
                    problem,
                } => MigrationError::Field {
                    record,
                    key,
                    field: match field {
                        "domain_name" => "claim.domain_name",
                        "domain_uuid" => "claim.domain_uuid",
                        "transient" => "claim.transient",
                        "started_by_claim" => "claim.started_by_claim",
                        other => other,
                    },
                    problem,
                },
            };
            let domain_uuid: String = at.required(claim, "domain_uuid").map_err(inner)?;
            Some(Claim {
                domain_name: at.required(claim, "domain_name").map_err(inner)?,
                domain_uuid: Uuid::parse(&domain_uuid)
                    .map_err(|e| at.error("claim.domain_uuid", e.to_string()))?,
                transient: at.required(claim, "transient").map_err(inner)?,
                started_by_claim: at
                    .optional(claim, "started_by_claim")
                    .map_err(inner)?
                    .unwrap_or(false),
            })
        }
    };
    let scheduling = Scheduling {
        weight: at.optional(object, "weight")?,
        min_share: at.optional(object, "min_share")?,
        max_share: at.optional(object, "max_share")?,
    };
    if let Some(weight) = scheduling.weight {
        if !(1..=10_000).contains(&weight) {
            return Err(at.error("weight", format!("{weight} is not in 1..=10000")));
        }
    }
    Ok(InstanceRecord {
        uuid,
        kind: at.required(object, "kind")?,
        parent,
        type_id,
        profile,
        owner: at.required(object, "owner")?,
        autostart: at.required(object, "autostart")?,
        persistent: at.required(object, "persistent")?,
        claim,
        scheduling,
        attributes: at.optional(object, "attributes")?.unwrap_or_default(),
        vf: at.optional(object, "vf")?,
        previous_driver: at.optional(object, "previous_driver")?,
        force: at.optional(object, "force")?.unwrap_or(false),
    })
}
