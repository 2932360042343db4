//! The JSON device definition mdevctl reads with `--jsonfile` (libvirt sends it on stdin):
//! `{"mdev_type": "...", "start": "auto"|"manual", "attrs": [{"name": "value"}, ...]}`.

use std::path::{Path, PathBuf};

/// A definition file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    /// The file could not be read.
    #[error("Unable to read jsonfile {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a device definition.
    #[error("jsonfile {path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// A parsed definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    /// `mdev_type`.
    pub mdev_type: String,
    /// `start` is `auto`.
    pub autostart: bool,
    /// `attrs`, in order.
    pub attrs: Vec<(String, String)>,
}

impl Definition {
    /// Reads and parses `path` (`/dev/stdin` works).
    pub fn read(path: &Path) -> Result<Definition, DefinitionError> {
        let text = std::fs::read_to_string(path).map_err(|source| DefinitionError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Definition::parse(&text).map_err(|why| DefinitionError::Invalid {
            path: path.to_path_buf(),
            why,
        })
    }

    /// Parses the text of a definition; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Definition, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let object = value
            .as_object()
            .ok_or_else(|| "a device definition is a JSON object".to_string())?;
        let mdev_type = object
            .get("mdev_type")
            .and_then(|v| v.as_str())
            .ok_or_else(|| "\"mdev_type\" (a string) is missing".to_string())?
            .to_string();
        let autostart = match object.get("start").map(|v| v.as_str()) {
            None => false,
            Some(Some("auto")) => true,
            Some(Some("manual")) => false,
            Some(other) => {
                return Err(format!(
                    "\"start\" must be \"auto\" or \"manual\", not {}",
                    other.unwrap_or("a non-string")
                ))
            }
        };
        let mut attrs = Vec::new();
        if let Some(list) = object.get("attrs") {
            let list = list
                .as_array()
                .ok_or_else(|| "\"attrs\" must be an array".to_string())?;
            for item in list {
                let pair = item
                    .as_object()
                    .filter(|o| o.len() == 1)
                    .ok_or_else(|| "each attribute is an object of one key".to_string())?;
                for (name, value) in pair {
                    let value = value
                        .as_str()
                        .ok_or_else(|| format!("attribute {name}: the value must be a string"))?;
                    attrs.push((name.clone(), value.to_string()));
                }
            }
        }
        Ok(Definition {
            mdev_type,
            autostart,
            attrs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libvirts_definition_parses_with_and_without_attributes() {
        let plain = Definition::parse(r#"{"mdev_type":"mtty-2","start":"manual"}"#).unwrap();
        assert_eq!(plain.mdev_type, "mtty-2");
        assert!(!plain.autostart && plain.attrs.is_empty());
        let with = Definition::parse(
            r#"{"mdev_type":"x","start":"auto","attrs":[{"assign_adapter":"5"},{"b":"6"}]}"#,
        )
        .unwrap();
        assert!(with.autostart);
        assert_eq!(
            with.attrs,
            vec![
                ("assign_adapter".into(), "5".into()),
                ("b".into(), "6".into())
            ]
        );
    }

    #[test]
    fn malformed_definitions_say_what_is_wrong() {
        assert!(Definition::parse("[]").unwrap_err().contains("object"));
        assert!(Definition::parse("{}").unwrap_err().contains("mdev_type"));
        assert!(Definition::parse(r#"{"mdev_type":"x","start":"soon"}"#)
            .unwrap_err()
            .contains("soon"));
        assert!(
            Definition::parse(r#"{"mdev_type":"x","attrs":[{"a":"1","b":"2"}]}"#)
                .unwrap_err()
                .contains("one key")
        );
    }
}
