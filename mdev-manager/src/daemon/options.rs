//! Strict parsing of the trailing `options a{sv}`: every key a method does not know is
//! `InvalidArgs`, so a typo never silently changes what a call does.

use std::collections::HashMap;

use dbus_api::names::option;
use dbus_api::BusError;
use zbus::OwnedVariant;

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
}
