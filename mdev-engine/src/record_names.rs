//! The checked names a persisted record holds besides UUIDs and PCI addresses (which are
//! `vgpu_types`): a parent's name and a type id. Each is checked once, when it is made (from a
//! request, from discovery, or when the state file is loaded), so a record can never hold a
//! name the engine would refuse to use as a sysfs path component.
//!
//! Both keep their text and dereference to `str`, so they compare with, and pass as, the
//! `&str` the host layer takes.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::PciAddress;
use mdev_host::discovery::names::{self, NameError};

/// The name of an instance's parent: an mdev parent's sysfs name (`0000:3b:00.0`, `mtty`), or
/// the PCI address of a PF (VF kinds) or of a whole GPU (pass-through).
///
/// A name that is a PCI address is kept in the kernel's lower-case form; any other must be a
/// valid sysfs name (non-empty, no `/`, not `.`/`..`, no spaces or control characters).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ParentName(String);

impl ParentName {
    /// Checks a parent name (a PCI address in any case is normalized to lower case).
    pub fn new(name: &str) -> Result<ParentName, NameError> {
        if let Ok(address) = name.parse::<PciAddress>() {
            return Ok(ParentName(address.to_string()));
        }
        names::check_sysfs_name("parent", name)?;
        Ok(ParentName(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The parent's PCI address, when its name is one.
    pub fn pci_address(&self) -> Option<PciAddress> {
        self.0.parse().ok()
    }
}

impl From<PciAddress> for ParentName {
    fn from(address: PciAddress) -> Self {
        ParentName(address.to_string())
    }
}

/// The type an instance was made with: an mdev type id (`nvidia-558`, `i915-GVTg_V5_4`), an
/// NVIDIA SR-IOV vGPU type id in decimal (`1403`), or `vfio-pci` for a VF or a pass-through
/// GPU bound to it. Always a valid sysfs name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TypeId(String);

impl TypeId {
    /// Checks a type id.
    pub fn new(id: &str) -> Result<TypeId, NameError> {
        names::check_sysfs_name("mdev type", id)?;
        Ok(TypeId(id.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The type of a VF or pass-through GPU bound to `vfio-pci`.
    pub fn vfio_pci() -> TypeId {
        TypeId(crate::lifecycle::VFIO_PCI.to_owned())
    }
}

impl From<u32> for TypeId {
    /// An NVIDIA SR-IOV vGPU type id.
    fn from(id: u32) -> Self {
        TypeId(id.to_string())
    }
}

macro_rules! text_newtype {
    ($name:ident) => {
        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = NameError;
            fn from_str(text: &str) -> Result<Self, NameError> {
                $name::new(text)
            }
        }

        impl TryFrom<String> for $name {
            type Error = NameError;
            fn try_from(text: String) -> Result<Self, NameError> {
                $name::new(&text)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = NameError;
            fn try_from(text: &str) -> Result<Self, NameError> {
                $name::new(text)
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

text_newtype!(ParentName);
text_newtype!(TypeId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_that_is_a_pci_address_is_kept_in_lower_case() {
        let name = ParentName::new("0000:3B:00.0").unwrap();
        assert_eq!(name, "0000:3b:00.0");
        assert_eq!(name.pci_address(), "0000:3b:00.0".parse().ok());
        let virtual_parent = ParentName::new("mtty").unwrap();
        assert_eq!(virtual_parent.as_str(), "mtty");
        assert_eq!(virtual_parent.pci_address(), None);
    }

    #[test]
    fn names_that_are_not_sysfs_names_are_refused_with_the_input() {
        for bad in ["", ".", "..", "a/b", "a b", "x\n"] {
            let error = ParentName::new(bad).unwrap_err();
            assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
            assert!(error.to_string().starts_with("parent"), "{error}");
            let error = TypeId::new(bad).unwrap_err();
            assert!(error.to_string().starts_with("mdev type"), "{error}");
        }
    }

    #[test]
    fn serde_is_the_text_and_checks_it() {
        let id = TypeId::from(1403);
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"1403\"");
        assert_eq!(serde_json::from_str::<TypeId>("\"1403\"").unwrap(), id);
        assert!(serde_json::from_str::<TypeId>("\"../x\"").is_err());
        assert_eq!(
            serde_json::from_str::<ParentName>("\"0000:4B:00.0\"").unwrap(),
            "0000:4b:00.0"
        );
        assert_eq!(TypeId::vfio_pci(), "vfio-pci");
    }
}
