//! The `<hostdev>` element that attaches a vGPU to a libvirt domain (libvirt
//! docs/formatdomain.rst, "Host device assignment"). Pure string building, shared with
//! `vgpuctl xml`.
//!
//! Attributes use single quotes and two-space indentation, as `virsh dumpxml` writes them, so
//! the output can be pasted into a domain or fed to `virsh attach-device` unchanged.

use uuid::Uuid;

use crate::pci::PciAddress;

/// Display options of an mdev hostdev (vfio-pci model only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MdevDisplay {
    /// `display='on'`: QEMU shows the vGPU's framebuffer (needs a VNC, SPICE or egl-headless
    /// graphics device in the domain). libvirt's default is off, so off is not written.
    pub display: bool,
    /// `ramfb='on'`: a boot display for a vGPU that is the primary display.
    pub ramfb: bool,
}

/// `<hostdev mode='subsystem' type='mdev' model='vfio-pci'>` for the mdev `uuid`.
pub fn mdev_hostdev_xml(uuid: &Uuid, options: MdevDisplay) -> String {
    let mut attributes = String::from("mode='subsystem' type='mdev' model='vfio-pci'");
    if options.display {
        attributes.push_str(" display='on'");
    }
    if options.ramfb {
        attributes.push_str(" ramfb='on'");
    }
    format!(
        "<hostdev {attributes}>\n  <source>\n    <address uuid='{}'/>\n  </source>\n</hostdev>\n",
        uuid.as_hyphenated()
    )
}

/// `<hostdev mode='subsystem' type='pci' managed='no'>` for a VF or a passed-through device.
///
/// `managed='no'` because the service, not libvirt, binds the device to vfio-pci and gives it
/// back afterwards; with `managed='yes'` libvirt would rebind it behind the service's back.
pub fn pci_hostdev_xml(address: &PciAddress) -> String {
    format!(
        "<hostdev mode='subsystem' type='pci' managed='no'>\n  <source>\n    <address domain='{:#06x}' bus='{:#04x}' slot='{:#04x}' function='{:#x}'/>\n  </source>\n</hostdev>\n",
        address.domain, address.bus, address.slot, address.function
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Compares with `tests/golden/<name>`; `UPDATE_GOLDEN=1` rewrites the file.
    fn assert_golden(name: &str, actual: &str) {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(name);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, actual).unwrap();
            return;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
                path.display()
            )
        });
        assert_eq!(actual, expected, "output differs from {}", path.display());
    }

    fn sample_uuid() -> Uuid {
        Uuid::parse_str("C2177883-F1BB-47F0-914D-32A22E3A8804").unwrap()
    }

    #[test]
    fn mdev_hostdev_plain() {
        assert_golden(
            "hostdev-mdev.xml",
            &mdev_hostdev_xml(&sample_uuid(), MdevDisplay::default()),
        );
    }

    #[test]
    fn mdev_hostdev_with_display_and_ramfb() {
        let options = MdevDisplay {
            display: true,
            ramfb: true,
        };
        assert_golden(
            "hostdev-mdev-display-ramfb.xml",
            &mdev_hostdev_xml(&sample_uuid(), options),
        );
    }

    #[test]
    fn vf_hostdev() {
        let address: PciAddress = "0000:3b:00.4".parse().unwrap();
        assert_golden("hostdev-vf.xml", &pci_hostdev_xml(&address));
    }

    #[test]
    fn generated_hostdevs_parse_back_into_the_same_devices() {
        let uuid = sample_uuid();
        let address: PciAddress = "0000:3b:01.7".parse().unwrap();
        let xml = format!(
            "<domain type='kvm'><name>g</name><uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid><devices>{}{}</devices></domain>",
            mdev_hostdev_xml(&uuid, MdevDisplay { display: true, ramfb: false }),
            pci_hostdev_xml(&address)
        );
        let plan = crate::plan::plan_from_xml(xml.as_bytes()).unwrap();
        assert_eq!(plan.devices.len(), 2);
        assert_eq!(plan.devices[0].uuid, Some(uuid));
        assert_eq!(plan.devices[1].pci_address, Some(address));
    }
}
