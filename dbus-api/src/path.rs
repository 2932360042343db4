//! Object paths of the service's objects, built from each object's key.
//!
//! The daemon never parses a path back into a host name: it looks objects up in its own map.
//! Clients should read the key property (`PciAddress`, `Uuid`, `Name`) instead of decoding paths;
//! [`unescape_label`] exists for tools and tests.
//!
//! | object | path |
//! |---|---|
//! | parent | `/org/mdevmanager/VGpu1/parents/pci_0000_3b_00_0` |
//! | mdev type | `/org/mdevmanager/VGpu1/parents/pci_0000_3b_00_0/types/nvidia_2d558` |
//! | instance (mdev or VF) | `/org/mdevmanager/VGpu1/instances/_<uuid with '-' as '_'>` |
//! | profile | `/org/mdevmanager/VGpu1/profiles/<escaped name>` |
//! | job | `/org/mdevmanager/VGpu1/jobs/<n>` |

use crate::names::ROOT_PATH;
use zbus::OwnedObjectPath;

/// Escapes any string into one object path element, reversibly: ASCII letters and digits stay
/// (a leading digit is escaped), every other byte becomes `_xx` (two lower-case hex digits), and
/// the empty string becomes `_`. This is systemd's `bus_label_escape`.
pub fn escape_label(text: &str) -> String {
    if text.is_empty() {
        return "_".to_string();
    }
    let mut out = String::with_capacity(text.len() * 3);
    for (index, byte) in text.bytes().enumerate() {
        if byte.is_ascii_alphabetic() || (byte.is_ascii_digit() && index > 0) {
            out.push(char::from(byte));
        } else {
            out.push('_');
            out.push_str(&format!("{byte:02x}"));
        }
    }
    out
}

/// Reverses [`escape_label`]; `None` when `label` is not an escaped label.
pub fn unescape_label(label: &str) -> Option<String> {
    if label == "_" {
        return Some(String::new());
    }
    let bytes = label.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'_' {
            let hex = label.get(index + 1..index + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The path element for a PCI address: `0000:3b:00.0` → `pci_0000_3b_00_0` (libvirt's node-device
/// naming). Anything not shaped like a PCI address falls back to [`escape_label`] so the result is
/// always a valid path element.
pub fn pci_label(address: &str) -> String {
    let well_formed = address.len() == 12
        && address.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b':',
            10 => b == b'.',
            _ => b.is_ascii_hexdigit(),
        });
    if well_formed {
        format!("pci_{}", address.replace([':', '.'], "_"))
    } else {
        escape_label(address)
    }
}

/// The path element for an mdev UUID: `_` followed by the UUID with `-` as `_`. Input that is
/// not plain hex and dashes falls back to [`escape_label`].
pub fn uuid_label(uuid: &str) -> String {
    if !uuid.is_empty() && uuid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        format!("_{}", uuid.replace('-', "_"))
    } else {
        escape_label(uuid)
    }
}

fn path(text: String) -> OwnedObjectPath {
    // Every element above is built from [A-Za-z0-9_] only, so the path is always valid.
    OwnedObjectPath::try_from(text).expect("object path built from escaped elements")
}

/// Path of a parent device.
pub fn parent_path(pci_address: &str) -> OwnedObjectPath {
    path(format!("{ROOT_PATH}/parents/{}", pci_label(pci_address)))
}

/// Path of an mdev type on a parent.
pub fn mdev_type_path(parent_pci_address: &str, type_id: &str) -> OwnedObjectPath {
    path(format!(
        "{ROOT_PATH}/parents/{}/types/{}",
        pci_label(parent_pci_address),
        escape_label(type_id)
    ))
}

/// Path of a mediated-device instance.
pub fn mdev_instance_path(uuid: &str) -> OwnedObjectPath {
    path(format!("{ROOT_PATH}/instances/{}", uuid_label(uuid)))
}

/// Path of a virtual-function instance.
pub fn vf_instance_path(pci_address: &str) -> OwnedObjectPath {
    path(format!("{ROOT_PATH}/instances/{}", pci_label(pci_address)))
}

/// Path of a profile.
pub fn profile_path(name: &str) -> OwnedObjectPath {
    path(format!("{ROOT_PATH}/profiles/{}", escape_label(name)))
}

/// Path of a job.
pub fn job_path(id: u64) -> OwnedObjectPath {
    path(format!("{ROOT_PATH}/jobs/{id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_are_valid_path_elements() {
        for text in [
            "",
            "a",
            "1g.10gb",
            "nvidia-558",
            "GRID A100-4C",
            "ü/x",
            "_",
            "0",
        ] {
            let label = escape_label(text);
            assert!(
                label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                "{label}"
            );
            assert!(!label.as_bytes()[0].is_ascii_digit(), "{label}");
            assert_eq!(unescape_label(&label).as_deref(), Some(text));
        }
        assert_eq!(escape_label("nvidia-558"), "nvidia_2d558");
        assert_eq!(unescape_label("_zz"), None);
        assert_eq!(unescape_label("a_4"), None);
    }

    #[test]
    fn readable_forms_for_pci_addresses_and_uuids() {
        assert_eq!(
            parent_path("0000:3b:00.0").as_str(),
            "/org/mdevmanager/VGpu1/parents/pci_0000_3b_00_0"
        );
        assert_eq!(
            mdev_instance_path("0b7f4c6e-1a2b-4c3d-8e9f-001122334455").as_str(),
            "/org/mdevmanager/VGpu1/instances/_0b7f4c6e_1a2b_4c3d_8e9f_001122334455"
        );
        assert_eq!(
            vf_instance_path("0000:3b:00.4").as_str(),
            "/org/mdevmanager/VGpu1/instances/pci_0000_3b_00_4"
        );
        assert_eq!(
            mdev_type_path("0000:3b:00.0", "nvidia-558").as_str(),
            "/org/mdevmanager/VGpu1/parents/pci_0000_3b_00_0/types/nvidia_2d558"
        );
        // Malformed keys still give valid paths rather than panicking.
        assert!(parent_path("../../etc")
            .as_str()
            .starts_with("/org/mdevmanager/VGpu1/parents/_"));
        assert!(mdev_instance_path("not a uuid")
            .as_str()
            .contains("/instances/not_20a_20uuid"));
        assert_eq!(job_path(7).as_str(), "/org/mdevmanager/VGpu1/jobs/7");
    }
}
