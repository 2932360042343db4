//! Desired host state for `apply`/`assert`: the model and this project's TOML format.
//!
//! Contract: [`parse_toml`] is pure; it refuses unknown keys and out-of-range values, and every
//! error names the file, the line and the key (the `toml` crate's spans). The plan that turns a
//! [`DesiredState`] into changes is computed by the service (`mdev_engine::apply`).

use serde::{Deserialize, Serialize};

/// Largest `count` of one `[[instances]]` entry (no GPU offers more instances).
pub const MAX_COUNT: u32 = 256;

/// What the host should run, as far as the file speaks about it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredState {
    /// Instance groups.
    pub instances: Vec<DesiredInstances>,
    /// SR-IOV VF counts.
    pub sriov: Vec<DesiredVfCount>,
}

/// `count` running instances of `profile`, on `parent` or placed anywhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredInstances {
    /// The parent (mdev parent name or PF address); `None`: placed by the service.
    pub parent: Option<String>,
    /// The profile.
    pub profile: String,
    /// How many.
    pub count: u32,
    /// Recreated at boot (implies persistent).
    pub autostart: bool,
    /// Scheduling weight (1..=10000); `None`: not managed by the file.
    pub weight: Option<u32>,
    /// Guaranteed share in percent; `None`: not managed by the file.
    pub min_share: Option<u32>,
    /// Share cap in percent; `None`: not managed by the file.
    pub max_share: Option<u32>,
}

/// A PF's VF count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredVfCount {
    /// The PF's PCI address.
    pub pf: String,
    /// `sriov_numvfs` wanted.
    pub num_vfs: u32,
}

/// A desired-state file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DesiredError {
    /// Syntax, an unknown key, a wrong type (the message has the line, column and key).
    #[error("{file}: {message}")]
    Syntax {
        /// The file name given by the caller.
        file: String,
        /// The parser's message with line and key.
        message: String,
    },
    /// A value out of range.
    #[error("{file}: line {line}: key {key}: {reason}")]
    Value {
        /// The file name given by the caller.
        file: String,
        /// 1-based line of the value.
        line: usize,
        /// The key.
        key: String,
        /// Why it is refused.
        reason: String,
    },
    /// The file names a configuration this format does not have.
    #[error("{file}: {reason}")]
    Config {
        /// The file name given by the caller.
        file: String,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    version: toml::Spanned<u32>,
    #[serde(default)]
    instances: Vec<TomlInstances>,
    #[serde(default)]
    sriov: Vec<TomlVfCount>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlInstances {
    parent: Option<String>,
    profile: toml::Spanned<String>,
    count: toml::Spanned<u32>,
    #[serde(default)]
    autostart: bool,
    weight: Option<toml::Spanned<u32>>,
    min_share: Option<toml::Spanned<u32>>,
    max_share: Option<toml::Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlVfCount {
    pf: String,
    num_vfs: toml::Spanned<u32>,
}

/// Parses this project's TOML format (see `docs/apply.md`). `file` names the document in
/// errors; `config` must be empty (a TOML file holds one configuration).
pub fn parse_toml(file: &str, text: &str, config: &str) -> Result<DesiredState, DesiredError> {
    if !config.is_empty() {
        return Err(DesiredError::Config {
            file: file.to_owned(),
            reason: format!(
                "configuration {config:?} asked for, but a TOML file holds one configuration (leave the name empty)"
            ),
        });
    }
    let parsed: TomlFile = toml::from_str(text).map_err(|error| DesiredError::Syntax {
        file: file.to_owned(),
        message: error.to_string().trim_end().to_owned(),
    })?;
    let value_error = |span: std::ops::Range<usize>, key: &str, reason: String| {
        let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
        DesiredError::Value {
            file: file.to_owned(),
            line,
            key: key.to_owned(),
            reason,
        }
    };
    if *parsed.version.get_ref() != 1 {
        return Err(value_error(
            parsed.version.span(),
            "version",
            format!(
                "version {} is not supported (1 is)",
                parsed.version.get_ref()
            ),
        ));
    }
    let mut state = DesiredState::default();
    for entry in parsed.instances {
        if entry.profile.get_ref().trim().is_empty() {
            return Err(value_error(
                entry.profile.span(),
                "instances.profile",
                "empty profile name".to_owned(),
            ));
        }
        let count = *entry.count.get_ref();
        if count == 0 || count > MAX_COUNT {
            return Err(value_error(
                entry.count.span(),
                "instances.count",
                format!("count {count} is outside 1..={MAX_COUNT}"),
            ));
        }
        let ranged = |value: &Option<toml::Spanned<u32>>,
                      key: &str,
                      range: std::ops::RangeInclusive<u32>|
         -> Result<Option<u32>, DesiredError> {
            match value {
                None => Ok(None),
                Some(spanned) if range.contains(spanned.get_ref()) => Ok(Some(*spanned.get_ref())),
                Some(spanned) => Err(value_error(
                    spanned.span(),
                    key,
                    format!(
                        "{} is outside {}..={}",
                        spanned.get_ref(),
                        range.start(),
                        range.end()
                    ),
                )),
            }
        };
        state.instances.push(DesiredInstances {
            parent: entry.parent,
            profile: entry.profile.into_inner(),
            count,
            autostart: entry.autostart,
            weight: ranged(&entry.weight, "instances.weight", 1..=10000)?,
            min_share: ranged(&entry.min_share, "instances.min_share", 0..=100)?,
            max_share: ranged(&entry.max_share, "instances.max_share", 1..=100)?,
        });
    }
    for entry in parsed.sriov {
        state.sriov.push(DesiredVfCount {
            pf: entry.pf,
            num_vfs: entry.num_vfs.into_inner(),
        });
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_parses_into_groups_and_vf_counts() {
        let text = r#"
version = 1

[[instances]]
parent = "mtty"
profile = "mtty"
count = 2
autostart = true
weight = 200

[[instances]]
profile = "T4-2Q"
count = 4

[[sriov]]
pf = "0000:41:00.0"
num_vfs = 4
"#;
        let state = parse_toml("host.toml", text, "").unwrap();
        assert_eq!(state.instances.len(), 2);
        assert_eq!(state.instances[0].parent.as_deref(), Some("mtty"));
        assert_eq!(state.instances[0].weight, Some(200));
        assert!(state.instances[0].autostart);
        assert_eq!(state.instances[1].parent, None);
        assert_eq!(state.instances[1].count, 4);
        assert_eq!(
            state.sriov,
            vec![DesiredVfCount {
                pf: "0000:41:00.0".into(),
                num_vfs: 4
            }]
        );
    }

    #[test]
    fn an_unknown_key_is_refused_naming_file_line_and_key() {
        let text =
            "version = 1\n\n[[instances]]\nprofile = \"mtty\"\ncount = 1\ncolour = \"red\"\n";
        let error = parse_toml("host.toml", text, "").unwrap_err().to_string();
        assert!(error.starts_with("host.toml: "), "{error}");
        assert!(error.contains("line 6"), "{error}");
        assert!(error.contains("colour"), "{error}");
    }

    #[test]
    fn an_out_of_range_count_names_its_line_and_key() {
        let text = "version = 1\n[[instances]]\nprofile = \"mtty\"\ncount = 0\n";
        let error = parse_toml("host.toml", text, "").unwrap_err().to_string();
        assert_eq!(
            error,
            "host.toml: line 4: key instances.count: count 0 is outside 1..=256"
        );
    }

    #[test]
    fn a_weight_out_of_range_is_refused() {
        let text = "version = 1\n[[instances]]\nprofile = \"mtty\"\ncount = 1\nweight = 0\n";
        let error = parse_toml("f", text, "").unwrap_err().to_string();
        assert_eq!(
            error,
            "f: line 5: key instances.weight: 0 is outside 1..=10000"
        );
    }

    #[test]
    fn a_missing_version_and_an_unsupported_version_are_refused() {
        let error = parse_toml("f", "[[sriov]]\npf = \"0000:41:00.0\"\nnum_vfs = 2\n", "")
            .unwrap_err()
            .to_string();
        assert!(error.contains("version"), "{error}");
        let error = parse_toml("f", "version = 2\n", "")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "f: line 1: key version: version 2 is not supported (1 is)"
        );
    }

    #[test]
    fn a_configuration_name_is_refused_for_toml() {
        let error = parse_toml("f", "version = 1\n", "a100").unwrap_err();
        assert!(matches!(error, DesiredError::Config { .. }));
    }
}
