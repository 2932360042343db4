//! The service's state directory, learnt the way the service learns it: the `state_dir` key of
//! `/etc/mdev-manager/mdev-manager.toml` under the host root, `/var/lib/mdev-manager` without
//! it (docs/configuration.md).
//!
//! The hook puts its pending releases there and checks the service's index of domains holding
//! claims there, so it must agree with the service. It reads only this one key, and without a
//! TOML library: the hook starts on every operation of every domain and links as little as it
//! can (docs/libvirt.md, "Process start"). What it accepts is a top-level line
//! `state_dir = "..."` (a basic string, with TOML's escapes) or `state_dir = '...'` (a
//! literal string), optionally followed by a `# comment`; the key may be quoted. The service
//! refuses a file with tables or unknown keys, so a file the service runs with is a list of
//! such top-level lines. A `state_dir` value written any other way (a multi-line string) is
//! reported naming the file and the line, never guessed.

use std::path::{Component, Path, PathBuf};

/// The service's configuration file (host path; under the host root).
pub const CONFIG_PATH: &str = "/etc/mdev-manager/mdev-manager.toml";

/// The state directory when the file does not name one (host path).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/mdev-manager";

/// The configuration file could not tell the state directory.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("cannot read the service's config file {}", path.display())]
    Read {
        /// The file (under the host root).
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The `state_dir` line is not one the hook reads.
    #[error("config file {}, line {line}: state_dir: {reason}", path.display())]
    BadStateDir {
        /// The file (under the host root).
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// The service's state directory as a host path (not yet under `root`), read from the config
/// file under `root`. A missing file means the default, as for the service.
pub fn state_dir(root: &Path) -> Result<PathBuf, ConfigError> {
    let path = under_root(root, Path::new(CONFIG_PATH));
    let text = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(PathBuf::from(DEFAULT_STATE_DIR))
        }
        Err(source) => return Err(ConfigError::Read { path, source }),
    };
    let text = String::from_utf8_lossy(&text);
    match state_dir_value(&text) {
        Ok(Some(dir)) => Ok(PathBuf::from(dir)),
        Ok(None) => Ok(PathBuf::from(DEFAULT_STATE_DIR)),
        Err((line, reason)) => Err(ConfigError::BadStateDir { path, line, reason }),
    }
}

/// `host_path` under `root`, as the service resolves its host paths: every component is
/// kept below the root (`..` cannot occur: [`state_dir_value`] refuses it).
pub fn under_root(root: &Path, host_path: &Path) -> PathBuf {
    let mut out = root.to_path_buf();
    for component in host_path.components() {
        if let Component::Normal(part) = component {
            out.push(part);
        }
    }
    out
}

/// The value of the top-level `state_dir` key in `text`, or the line number (1-based) and
/// the reason it cannot be read. The last assignment would be a duplicate key, which TOML
/// and the service refuse; the first one is taken.
fn state_dir_value(text: &str) -> Result<Option<String>, (usize, &'static str)> {
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let Some(rest) = strip_key(line.trim_start()) else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix('=') else {
            return Err((number, "expected '=' after the key"));
        };
        let rest = rest.trim_start();
        let (value, after) = if rest.starts_with("\"\"\"") || rest.starts_with("'''") {
            return Err((
                number,
                "multi-line strings are not read by the hook; write the path on one line",
            ));
        } else if let Some(body) = rest.strip_prefix('"') {
            basic_string(body).ok_or((number, "unterminated or malformed \"...\" string"))?
        } else if let Some(body) = rest.strip_prefix('\'') {
            let end = body
                .find('\'')
                .ok_or((number, "unterminated '...' string"))?;
            (body[..end].to_owned(), &body[end + 1..])
        } else {
            return Err((number, "expected a quoted path"));
        };
        let after = after.trim_start();
        if !after.is_empty() && !after.starts_with('#') {
            return Err((number, "unexpected text after the value"));
        }
        if value.is_empty() {
            return Err((number, "the path is empty"));
        }
        if Path::new(&value)
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return Err((number, "the path contains '..'"));
        }
        return Ok(Some(value));
    }
    Ok(None)
}

/// The rest of `line` after a `state_dir` key (bare or quoted), or `None` for any other line.
fn strip_key(line: &str) -> Option<&str> {
    ["state_dir", "\"state_dir\"", "'state_dir'"]
        .iter()
        .find_map(|key| line.strip_prefix(key))
        .filter(|rest| rest.trim_start().starts_with('='))
}

/// A TOML basic string's body up to its closing quote, with escapes decoded, and what follows.
fn basic_string(body: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((value, &body[at + 1..])),
            '\\' => {
                let (_, escape) = chars.next()?;
                let decoded = match escape {
                    'b' => '\u{8}',
                    't' => '\t',
                    'n' => '\n',
                    'f' => '\u{c}',
                    'r' => '\r',
                    '"' => '"',
                    '\\' => '\\',
                    'u' | 'U' => {
                        let digits = if escape == 'u' { 4 } else { 8 };
                        let mut code = 0u32;
                        for _ in 0..digits {
                            code = code * 16 + chars.next()?.1.to_digit(16)?;
                        }
                        char::from_u32(code)?
                    }
                    _ => return None,
                };
                value.push(decoded);
            }
            c if c.is_control() && c != '\t' => return None,
            c => value.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_key_as_the_service_writes_it() {
        let text = "# mdev-manager\nplacement = \"spread\"\nstate_dir = \"/srv/mdev state\" # moved\nlog = 'debug'\n";
        assert_eq!(state_dir_value(text), Ok(Some("/srv/mdev state".into())));
        assert_eq!(
            state_dir_value("  'state_dir'='/a/b'"),
            Ok(Some("/a/b".into()))
        );
        assert_eq!(
            state_dir_value("state_dir = \"/a\\u0062\\\\c\""),
            Ok(Some("/ab\\c".into()))
        );
    }

    #[test]
    fn other_keys_and_comments_are_not_the_key() {
        let text = "# state_dir = \"/commented\"\nstate_dir_x = \"/no\"\nplacement = \"pack\"\n";
        assert_eq!(state_dir_value(text), Ok(None));
    }

    #[test]
    fn values_it_cannot_read_are_reported_with_their_line() {
        for (text, reason) in [
            ("\nstate_dir = \"\"\"/a\"\"\"", "multi-line"),
            ("\nstate_dir = /a", "quoted"),
            ("\nstate_dir = \"/a", "unterminated"),
            ("\nstate_dir = \"/a\" x", "after the value"),
            ("\nstate_dir = \"/a/../b\"", "'..'"),
            ("\nstate_dir = ''", "empty"),
        ] {
            let (line, message) = state_dir_value(text).unwrap_err();
            assert_eq!(line, 2, "{text}");
            assert!(message.contains(reason), "{text}: {message}");
        }
    }

    #[test]
    fn agrees_with_the_service_s_toml_parser_on_every_file_it_accepts() {
        let documents = [
            "state_dir = \"/srv/a\"",
            "state_dir=\"/srv/a\"#c",
            "  state_dir   =   '/srv/C:\\raw'   # literal",
            "\"state_dir\" = \"/srv/\\u00e9t\\u00E9\"",
            "'state_dir' = \"/srv/tab\\there\"",
            "state_dir = \"/srv/q\\\"uote\"",
            "log = \"info\"\nstate_dir = \"/x/y\"\nplacement = 'pack'",
            "placement = \"spread\"\n# state_dir = \"/no\"\n",
            "nvidia_mixed_mode = [\"0000:3b:00.0\",\n  \"0000:4b:00.0\"]\nstate_dir = '/z'",
            "",
        ];
        for document in documents {
            let table: toml::Table = toml::from_str(document).expect(document);
            let expected = table
                .get("state_dir")
                .map(|value| value.as_str().expect("a string").to_owned());
            assert_eq!(state_dir_value(document), Ok(expected), "{document}");
        }
    }

    #[test]
    fn the_packaged_file_names_no_state_dir_of_its_own() {
        let packaged =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/mdev-manager.toml");
        let text = std::fs::read_to_string(&packaged).unwrap();
        assert!(
            text.contains("# state_dir = "),
            "the key is listed, commented out"
        );
        assert_eq!(state_dir_value(&text), Ok(None));
    }

    #[test]
    fn the_file_under_the_root_decides_and_its_absence_means_the_default() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(
            state_dir(root.path()).unwrap(),
            PathBuf::from(DEFAULT_STATE_DIR)
        );
        let file = root.path().join("etc/mdev-manager/mdev-manager.toml");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "state_dir = \"/srv/vgpu\"\n").unwrap();
        assert_eq!(state_dir(root.path()).unwrap(), PathBuf::from("/srv/vgpu"));
        std::fs::write(&file, "state_dir = 7\n").unwrap();
        let message = state_dir(root.path()).unwrap_err().to_string();
        assert!(
            message.contains("mdev-manager.toml, line 1: state_dir"),
            "{message}"
        );
    }
}
