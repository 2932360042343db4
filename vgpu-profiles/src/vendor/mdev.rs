//! The attributes of one mdev type directory
//! (`/sys/class/mdev_bus/<parent>/mdev_supported_types/<type-id>/`).

use super::{excerpt, parse_decimal_u32, Format, ParseError};
use serde::{Deserialize, Serialize};

/// The raw text of one type directory's attributes, as the service read them.
///
/// `name` and `description` are optional in the kernel ABI: mtty has no description and
/// GVT-g on older kernels has no `name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MdevTypeAttributes<'a> {
    /// The directory name, e.g. `nvidia-256`, `i915-GVTg_V5_4`, `mbochs-small`.
    pub type_id: &'a str,
    /// Content of `name`, if the file exists.
    pub name: Option<&'a str>,
    /// Content of `description`, if the file exists.
    pub description: Option<&'a str>,
    /// Content of `available_instances`.
    pub available_instances: &'a str,
    /// Content of `device_api`.
    pub device_api: &'a str,
}

/// One mdev type as the kernel shows it, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdevTypeInfo {
    /// The directory name, e.g. `nvidia-256`.
    pub type_id: String,
    /// The `name` attribute without its trailing newline, if the file exists.
    pub name: Option<String>,
    /// The `description` attribute without trailing whitespace; `None` when the file is
    /// absent or empty.
    pub description: Option<String>,
    /// How many more instances of this type the parent can create now.
    pub available_instances: u32,
    /// The VFIO device API, e.g. `vfio-pci`.
    pub device_api: String,
}

impl MdevTypeInfo {
    /// Validates and parses the attributes of one type directory.
    pub fn parse(attrs: &MdevTypeAttributes<'_>) -> Result<MdevTypeInfo, ParseError> {
        let type_id = parse_type_id(attrs.type_id)?;
        let name = attrs.name.map(parse_type_name).transpose()?;
        let description = attrs
            .description
            .map(str::trim_end)
            .filter(|d| !d.is_empty())
            .map(str::to_owned);
        Ok(MdevTypeInfo {
            type_id,
            name,
            description,
            available_instances: parse_available_instances(attrs.available_instances)?,
            device_api: parse_device_api(attrs.device_api)?,
        })
    }

    /// The name to show a person: the `name` attribute, else the type id (which is what
    /// the kernel itself prints when a driver gives no pretty name).
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.type_id)
    }
}

/// Validates an mdev type id (a directory name): non-empty, at most `NAME_MAX` (255) bytes,
/// no `/`, no whitespace or control characters, not `.` or `..`.
pub fn parse_type_id(text: &str) -> Result<String, ParseError> {
    // No directory entry is longer than NAME_MAX; the service refuses such names anyway, so a
    // longer one must not parse as a type (found by fuzzing).
    let valid = !text.is_empty()
        && text.len() <= 255
        && text != "."
        && text != ".."
        && !text.contains('/')
        && !text.chars().any(|c| c.is_whitespace() || c.is_control());
    if valid {
        Ok(text.to_owned())
    } else {
        Err(ParseError::InvalidValue {
            format: Format::MdevTypeId,
            key: "type id".into(),
            value: excerpt(text),
            expected: "a directory name such as `nvidia-256` (no `/`, no whitespace)",
        })
    }
}

/// Parses a type's `name` attribute: one non-empty line of printable text.
pub fn parse_type_name(text: &str) -> Result<String, ParseError> {
    let name = strip_one_newline(text).trim();
    if name.is_empty() {
        return Err(ParseError::Empty {
            format: Format::MdevTypeName,
        });
    }
    if name.chars().any(char::is_control) {
        return Err(ParseError::InvalidValue {
            format: Format::MdevTypeName,
            key: "name".into(),
            value: excerpt(name),
            expected: "one line of printable text",
        });
    }
    Ok(name.to_owned())
}

/// Parses `available_instances`: a decimal count followed by an optional newline.
pub fn parse_available_instances(text: &str) -> Result<u32, ParseError> {
    let value = text.trim();
    if value.is_empty() {
        return Err(ParseError::Empty {
            format: Format::AvailableInstances,
        });
    }
    parse_decimal_u32(value).ok_or_else(|| ParseError::InvalidValue {
        format: Format::AvailableInstances,
        key: "available_instances".into(),
        value: excerpt(value),
        expected: "a decimal count",
    })
}

/// Parses `device_api`: one token such as `vfio-pci`.
pub fn parse_device_api(text: &str) -> Result<String, ParseError> {
    let value = text.trim();
    if value.is_empty() {
        return Err(ParseError::Empty {
            format: Format::DeviceApi,
        });
    }
    if !value.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ParseError::InvalidValue {
            format: Format::DeviceApi,
            key: "device_api".into(),
            value: excerpt(value),
            expected: "one token such as `vfio-pci`",
        });
    }
    Ok(value.to_owned())
}

fn strip_one_newline(text: &str) -> &str {
    text.strip_suffix('\n').unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::parse_type_id;

    #[test]
    fn type_ids_longer_than_a_directory_name_are_refused() {
        assert!(parse_type_id(&"a".repeat(255)).is_ok());
        assert!(parse_type_id(&"a".repeat(256)).is_err());
        // 86 three-byte characters: 258 bytes, fewer than 255 characters.
        assert!(parse_type_id(&"\u{fffd}".repeat(86)).is_err());
    }
}
