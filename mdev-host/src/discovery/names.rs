//! Validated names: the only way a value from input becomes part of a host path or a sysfs
//! write. Each constructor refuses what the kernel would never produce (and anything path-like),
//! and the error names the value.

/// A name or value from input that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not a UUID in the kernel's 36-character `8-4-4-4-12` hex form.
    #[error("{value:?} is not a UUID (expected 8-4-4-4-12 hex digits)")]
    Uuid {
        /// The refused input.
        value: String,
    },
    /// Not a PCI address of the form `dddd:bb:dd.f`.
    #[error("{value:?} is not a PCI address (expected dddd:bb:dd.f)")]
    PciAddress {
        /// The refused input.
        value: String,
    },
    /// A sysfs directory name (parent, type id, attribute) that is empty, path-like or odd.
    #[error("{what} {value:?} is not a valid sysfs name (no '/', no '..', no control characters)")]
    SysfsName {
        /// What the name was meant to be ("parent", "mdev type", "attribute").
        what: &'static str,
        /// The refused input.
        value: String,
    },
    /// A value that would be written to sysfs contains a newline or NUL.
    #[error("value {value:?} for {attribute} contains a newline or NUL")]
    SysfsValue {
        /// Which attribute it was for.
        attribute: String,
        /// The refused input.
        value: String,
    },
}

impl NameError {
    /// Every name error is bad input.
    pub fn kind(&self) -> crate::error::ErrorKind {
        crate::error::ErrorKind::InvalidArgs
    }
}

/// Parses a UUID in the hyphenated 36-character form (any case), printed in lower case.
/// Braced, URN and simple forms are refused: the kernel accepts only the hyphenated form and we
/// never want two spellings of one device. The rule is [`Uuid::parse`]'s; this names the error
/// as the other name errors.
pub fn parse_uuid(value: &str) -> Result<Uuid, NameError> {
    Ok(Uuid::parse(value)?)
}

/// An mdev or domain UUID: the workspace's one definition, from `vgpu-types`.
pub use vgpu_types::Uuid;

/// A PCI function address `dddd:bb:dd.f`: the workspace's one definition, from `vgpu-types`.
pub use vgpu_types::PciAddress;

impl From<vgpu_types::UuidError> for NameError {
    fn from(error: vgpu_types::UuidError) -> Self {
        let vgpu_types::UuidError::Malformed(value) = error;
        NameError::Uuid { value }
    }
}

impl From<vgpu_types::PciAddressError> for NameError {
    fn from(error: vgpu_types::PciAddressError) -> Self {
        let value = match error {
            vgpu_types::PciAddressError::Malformed(value) => value,
            vgpu_types::PciAddressError::OutOfRange { device, function } => {
                format!("{device:#04x}.{function}")
            }
        };
        NameError::PciAddress { value }
    }
}

/// Checks a name that becomes one path component under sysfs (a parent device name, an mdev
/// type id, a vendor attribute name): non-empty, at most 255 bytes, no `/`, not `.`/`..`, no
/// control characters or spaces.
pub fn check_sysfs_name<'a>(what: &'static str, value: &'a str) -> Result<&'a str, NameError> {
    let ok = !value.is_empty()
        && value.len() <= 255
        && value != "."
        && value != ".."
        && !value
            .bytes()
            .any(|b| b == b'/' || b.is_ascii_control() || b == b' ');
    if ok {
        Ok(value)
    } else {
        Err(NameError::SysfsName {
            what,
            value: value.to_owned(),
        })
    }
}

/// Checks a vendor attribute name, which may name a file in a vendor subdirectory
/// (`nvidia/vgpu_params`): each `/`-separated part must be a valid sysfs name.
pub fn check_attribute_name(value: &str) -> Result<&str, NameError> {
    if value.is_empty()
        || value
            .split('/')
            .any(|part| check_sysfs_name("attribute", part).is_err())
    {
        return Err(NameError::SysfsName {
            what: "attribute",
            value: value.to_owned(),
        });
    }
    Ok(value)
}

/// Checks a value before it is written to a sysfs attribute: one `write(2)` of one line, so a
/// newline or NUL inside it would be a second command.
pub fn check_sysfs_value<'a>(attribute: &str, value: &'a str) -> Result<&'a str, NameError> {
    if value.bytes().any(|b| b == b'\n' || b == b'\r' || b == 0) {
        return Err(NameError::SysfsValue {
            attribute: attribute.to_owned(),
            value: value.to_owned(),
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_validated_and_normalized_to_lower_case() {
        let uuid = parse_uuid("83B8F4F2-509F-382F-3C1E-E6BFE0FA1001").unwrap();
        assert_eq!(uuid.to_string(), "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001");
        for bad in [
            "",
            "83b8f4f2509f382f3c1ee6bfe0fa1001",
            "{83b8f4f2-509f-382f-3c1e-e6bfe0fa1001}",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa100g",
            "../../../../../../../../../etc/passwd",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001\n",
        ] {
            let error = parse_uuid(bad).unwrap_err();
            assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
        }
    }

    #[test]
    fn pci_addresses_round_trip_and_refuse_garbage() {
        let address: PciAddress = "0000:3B:00.4".parse().unwrap();
        assert_eq!(address.to_string(), "0000:3b:00.4");
        for bad in [
            "",
            "3b:00.4",
            "0000:3b:00.8",
            "0000:3b:20.0",
            "0000:3b:00.4/..",
            "../x",
            "0000-3b-00.4",
        ] {
            assert!(bad.parse::<PciAddress>().is_err(), "{bad}");
        }
    }

    #[test]
    fn sysfs_names_refuse_path_like_input() {
        assert!(check_sysfs_name("mdev type", "nvidia-256").is_ok());
        for bad in ["", ".", "..", "../x", "a/b", "a\nb", "a b"] {
            let error = check_sysfs_name("mdev type", bad).unwrap_err();
            assert!(error.to_string().contains("mdev type"));
        }
        assert!(check_attribute_name("nvidia/vgpu_params").is_ok());
        assert!(check_attribute_name("nvidia/../remove").is_err());
        assert!(check_attribute_name("/remove").is_err());
    }

    #[test]
    fn sysfs_values_refuse_newlines() {
        assert!(check_sysfs_value("vgpu_params", "frame_rate_limiter=0, disable_vnc=1").is_ok());
        assert!(check_sysfs_value("vgpu_params", "a\nb").is_err());
        assert!(check_sysfs_value("vgpu_params", "a\0").is_err());
    }
}
