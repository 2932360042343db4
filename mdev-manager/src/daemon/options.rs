//! Strict parsing of the trailing `options a{sv}`: every key a method does not know is
//! `InvalidArgs`, so a typo never silently changes what a call does.

use std::collections::HashMap;

use dbus_api::names::{option, placement};
use dbus_api::BusError;
use zbus::OwnedVariant;

use mdev_engine::{PlacementPolicy, PlacementRequest};

/// The options of one call, after checking every key against what the method accepts.
#[derive(Debug)]
pub struct CallOptions {
    method: &'static str,
    values: HashMap<String, OwnedVariant>,
}

impl CallOptions {
    /// Checks `values` for `method`, which accepts `allowed` plus `auth.no_user_interaction`.
    pub fn parse(
        method: &'static str,
        values: HashMap<String, OwnedVariant>,
        allowed: &[&str],
    ) -> Result<Self, BusError> {
        let mut unknown: Vec<&str> = values
            .keys()
            .map(String::as_str)
            .filter(|key| *key != option::NO_USER_INTERACTION && !allowed.contains(key))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            let accepted = if allowed.is_empty() {
                format!("only {}", option::NO_USER_INTERACTION)
            } else {
                format!("{} and {}", allowed.join(", "), option::NO_USER_INTERACTION)
            };
            return Err(BusError::InvalidArgs(format!(
                "{method}: unknown option {} (accepted: {accepted})",
                unknown.join(", ")
            )));
        }
        Ok(Self { method, values })
    }

    fn typed<T: TryFrom<OwnedVariant>>(
        &self,
        key: &str,
        signature: &str,
    ) -> Result<Option<T>, BusError> {
        let Some(value) = self.values.get(key) else {
            return Ok(None);
        };
        value
            .try_clone()
            .ok()
            .and_then(|v| T::try_from(v).ok())
            .map(Some)
            .ok_or_else(|| {
                BusError::InvalidArgs(format!(
                    "{}: option {key} must have type '{signature}'",
                    self.method
                ))
            })
    }

    /// A string option.
    pub fn string(&self, key: &str) -> Result<Option<String>, BusError> {
        self.typed(key, "s")
    }

    /// A boolean option.
    pub fn boolean(&self, key: &str) -> Result<Option<bool>, BusError> {
        self.typed(key, "b")
    }

    /// An unsigned option.
    pub fn unsigned(&self, key: &str) -> Result<Option<u32>, BusError> {
        self.typed(key, "u")
    }

    /// `auth.no_user_interaction`.
    pub fn no_user_interaction(&self) -> Result<bool, BusError> {
        Ok(self.boolean(option::NO_USER_INTERACTION)?.unwrap_or(false))
    }

    /// The placement options `placement s` (`pack` | `spread`), `numa-node u` and
    /// `numa-strict b`; unset ones stay unset (the service's configured defaults apply).
    /// `numa-strict` needs `numa-node`: strict about no node would mean nothing.
    pub fn placement(&self) -> Result<PlacementRequest, BusError> {
        let policy = self
            .string(option::PLACEMENT)?
            .map(|value| {
                parse_policy(&value).ok_or_else(|| {
                    BusError::InvalidArgs(format!(
                        "{}: option {} is '{value}'; expected {} or {}",
                        self.method,
                        option::PLACEMENT,
                        placement::PACK,
                        placement::SPREAD
                    ))
                })
            })
            .transpose()?;
        let numa_node = self.unsigned(option::NUMA_NODE)?;
        let numa_strict = self.boolean(option::NUMA_STRICT)?;
        if numa_strict.is_some() && numa_node.is_none() {
            return Err(BusError::InvalidArgs(format!(
                "{}: option {} needs option {} (the node to be strict about)",
                self.method,
                option::NUMA_STRICT,
                option::NUMA_NODE
            )));
        }
        Ok(PlacementRequest {
            policy,
            numa_node,
            numa_strict: numa_strict.unwrap_or(false),
        })
    }
}

/// `pack` or `spread` (the option's and the config key's values), exactly as written.
pub fn parse_policy(value: &str) -> Option<PlacementPolicy> {
    match value {
        placement::PACK => Some(PlacementPolicy::Pack),
        placement::SPREAD => Some(PlacementPolicy::Spread),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::Variant;

    fn opts(pairs: &[(&str, Variant<'static>)]) -> HashMap<String, OwnedVariant> {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    OwnedVariant::try_from(v.try_clone().unwrap()).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn unknown_keys_are_invalid_args_naming_the_key_and_method() {
        let error = CallOptions::parse(
            "Destroy",
            opts(&[("forse", Variant::from(true))]),
            &["force"],
        )
        .unwrap_err();
        assert_eq!(error.kind(), dbus_api::ErrorKind::InvalidArgs);
        assert!(error.message().contains("Destroy"), "{}", error.message());
        assert!(error.message().contains("forse"), "{}", error.message());
    }

    #[test]
    fn wrong_types_are_invalid_args_and_right_types_parse() {
        let parsed = CallOptions::parse(
            "CreateInstances",
            opts(&[
                ("count", Variant::from(3u32)),
                ("parent", Variant::from("0000:3b:00.0")),
                (option::NO_USER_INTERACTION, Variant::from(true)),
            ]),
            &["count", "parent"],
        )
        .unwrap();
        assert_eq!(parsed.unsigned("count").unwrap(), Some(3));
        assert_eq!(
            parsed.string("parent").unwrap().as_deref(),
            Some("0000:3b:00.0")
        );
        assert!(parsed.no_user_interaction().unwrap());
        assert_eq!(parsed.string("uuid").unwrap(), None);
        let error = parsed.string("count").unwrap_err();
        assert!(error.message().contains("'s'"), "{}", error.message());
    }

    const PLACEMENT_KEYS: [&str; 3] = [option::PLACEMENT, option::NUMA_NODE, option::NUMA_STRICT];

    fn placement_of(pairs: &[(&str, Variant<'static>)]) -> Result<PlacementRequest, BusError> {
        CallOptions::parse("CreateInstances", opts(pairs), &PLACEMENT_KEYS)?.placement()
    }

    #[test]
    fn placement_options_parse_into_a_request() {
        assert_eq!(placement_of(&[]).unwrap(), PlacementRequest::default());
        let spread = placement_of(&[
            ("placement", Variant::from("spread")),
            ("numa-node", Variant::from(1u32)),
            ("numa-strict", Variant::from(true)),
        ])
        .unwrap();
        assert_eq!(
            spread,
            PlacementRequest {
                policy: Some(PlacementPolicy::Spread),
                numa_node: Some(1),
                numa_strict: true,
            }
        );
        let pack = placement_of(&[
            ("placement", Variant::from("pack")),
            ("numa-node", Variant::from(0u32)),
        ])
        .unwrap();
        assert_eq!(pack.policy, Some(PlacementPolicy::Pack));
        assert_eq!(pack.numa_node, Some(0));
        assert!(!pack.numa_strict);
    }

    #[test]
    fn bad_placement_options_name_the_key_and_value() {
        for value in ["Spread", "spred", "", "pack "] {
            let error = placement_of(&[("placement", Variant::from(value))]).unwrap_err();
            assert_eq!(error.kind(), dbus_api::ErrorKind::InvalidArgs);
            let message = error.message();
            assert!(message.contains("placement"), "{message}");
            assert!(message.contains(&format!("'{value}'")), "{message}");
            assert!(message.contains("pack or spread"), "{message}");
        }
        let error = placement_of(&[("numa-strict", Variant::from(true))]).unwrap_err();
        assert_eq!(error.kind(), dbus_api::ErrorKind::InvalidArgs);
        assert!(
            error.message().contains("numa-strict"),
            "{}",
            error.message()
        );
        assert!(error.message().contains("numa-node"), "{}", error.message());
        // A signed or string node is a type error naming the key, not a silent default.
        for value in [Variant::from(-1i32), Variant::from("1")] {
            let error = placement_of(&[("numa-node", value)]).unwrap_err();
            assert!(error.message().contains("numa-node"), "{}", error.message());
            assert!(error.message().contains("'u'"), "{}", error.message());
        }
        let error = placement_of(&[("numa-strict", Variant::from("yes"))]).unwrap_err();
        assert!(error.message().contains("'b'"), "{}", error.message());
    }
}
