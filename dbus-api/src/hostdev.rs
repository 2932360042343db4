//! libvirt `<hostdev>` XML for an instance, as `vgpuctl xml` prints it.

use crate::names::instance_kind;
use crate::wire::InstanceRecord;

/// The instance cannot be expressed as a hostdev.
#[derive(Debug, thiserror::Error)]
pub enum HostdevError {
    /// A VF whose PCI address is not `DDDD:BB:SS.F`.
    #[error("instance {object}: PCI address {address:?} is not of the form DDDD:BB:SS.F")]
    BadPciAddress {
        /// The instance's object path.
        object: String,
        /// The address.
        address: String,
    },
    /// An instance kind this version does not know.
    #[error("instance {object}: kind {kind:?} has no libvirt hostdev form")]
    UnknownKind {
        /// The instance's object path.
        object: String,
        /// The kind.
        kind: String,
    },
}

/// The `<hostdev>` element to paste into a domain's `<devices>`.
///
/// An mdev is `type='mdev' model='vfio-pci'` addressed by UUID; a VF or a pass-through GPU is
/// a PCI hostdev with `managed='no'`, because the service (not libvirt) owns its driver
/// binding (for a pass-through, that of its whole IOMMU group).
pub fn hostdev_xml(instance: &InstanceRecord) -> Result<String, HostdevError> {
    match instance.kind.as_str() {
        instance_kind::MDEV => Ok(format!(
            "<hostdev mode='subsystem' type='mdev' model='vfio-pci' managed='no'>\n  \
             <source>\n    <address uuid='{}'/>\n  </source>\n</hostdev>\n",
            instance.uuid
        )),
        instance_kind::VF | instance_kind::NVIDIA_VF | instance_kind::PASSTHROUGH => {
            let bad = || HostdevError::BadPciAddress {
                object: instance.object.clone(),
                address: instance.pci_address.clone(),
            };
            let (domain, rest) = instance.pci_address.split_once(':').ok_or_else(bad)?;
            let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
            let (slot, function) = rest.split_once('.').ok_or_else(bad)?;
            let hex =
                |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
            if !(hex(domain, 4) && hex(bus, 2) && hex(slot, 2) && hex(function, 1)) {
                return Err(bad());
            }
            Ok(format!(
                "<hostdev mode='subsystem' type='pci' managed='no'>\n  <source>\n    \
                 <address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' function='0x{function}'/>\n  \
                 </source>\n</hostdev>\n"
            ))
        }
        other => Err(HostdevError::UnknownKind {
            object: instance.object.clone(),
            kind: other.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: &str, uuid: &str, pci: &str) -> InstanceRecord {
        InstanceRecord {
            object: "/o".into(),
            uuid: uuid.into(),
            kind: kind.into(),
            pci_address: pci.into(),
            parent: "0000:3b:00.0".into(),
            mdev_type: String::new(),
            profile: String::new(),
            active: true,
            persistent: false,
            autostart: false,
            owner: "created".into(),
            holder: String::new(),
            holder_uuid: String::new(),
            iommu_group: 5,
            weight: 0,
        }
    }

    #[test]
    fn mdev_and_vf_hostdevs() {
        let uuid = "0b7f4c6e-1a2b-4c3d-8e9f-001122334455";
        let xml = hostdev_xml(&record("mdev", uuid, "")).unwrap();
        assert!(xml.contains("type='mdev' model='vfio-pci'"));
        assert!(xml.contains(&format!("<address uuid='{uuid}'/>")));
        let xml = hostdev_xml(&record("vf", "", "0000:3b:01.7")).unwrap();
        assert!(xml.contains("type='pci' managed='no'"));
        assert!(xml.contains("domain='0x0000' bus='0x3b' slot='0x01' function='0x7'"));
    }

    #[test]
    fn passthrough_is_an_unmanaged_pci_hostdev_of_the_gpu() {
        let xml = hostdev_xml(&record("passthrough", "", "0000:41:00.0")).unwrap();
        assert_eq!(
            xml,
            "<hostdev mode='subsystem' type='pci' managed='no'>\n  <source>\n    \
             <address domain='0x0000' bus='0x41' slot='0x00' function='0x0'/>\n  \
             </source>\n</hostdev>\n"
        );
    }

    #[test]
    fn malformed_vf_address_and_unknown_kind_are_errors() {
        assert!(matches!(
            hostdev_xml(&record("vf", "", "3b:01.7")),
            Err(HostdevError::BadPciAddress { .. })
        ));
        assert!(matches!(
            hostdev_xml(&record("vf", "", "0000:3b:01.7'/><x")),
            Err(HostdevError::BadPciAddress { .. })
        ));
        assert!(matches!(
            hostdev_xml(&record("gpu", "", "")),
            Err(HostdevError::UnknownKind { .. })
        ));
    }
}
