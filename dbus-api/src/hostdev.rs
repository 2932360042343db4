//! The libvirt `<hostdev>` element that attaches a vGPU to a domain (libvirt
//! docs/formatdomain.rst, "Host device assignment"). Pure string building; the one generator
//! behind `vgpuctl xml`, `vgpuctl attach` and the hook's tests.
//!
//! Attributes use single quotes and two-space indentation, as `virsh dumpxml` writes them, so
//! the output can be pasted into a domain or fed to `virsh attach-device` unchanged.

use crate::names::instance_kind;
use crate::wire::InstanceRecord;

/// A string that is not a PCI address `DDDD:BB:SS.F`.
#[derive(Debug, thiserror::Error)]
#[error("PCI address {address:?} is not of the form DDDD:BB:SS.F")]
pub struct BadPciAddress {
    /// The string as given.
    pub address: String,
}

/// An mdev UUID that is not of the form `8-4-4-4-12` hex digits.
#[derive(Debug, thiserror::Error)]
#[error("{uuid:?} is not a UUID (8-4-4-4-12 hex digits)")]
pub struct BadUuid {
    /// The string as given.
    pub uuid: String,
}

/// The instance cannot be expressed as a hostdev.
#[derive(Debug, thiserror::Error)]
pub enum HostdevError {
    /// A VF or pass-through GPU whose PCI address is malformed.
    #[error("instance {object}")]
    BadPciAddress {
        /// The instance's object path.
        object: String,
        /// What is wrong with the address.
        #[source]
        source: BadPciAddress,
    },
    /// An mdev whose UUID is malformed.
    #[error("instance {object}")]
    BadUuid {
        /// The instance's object path.
        object: String,
        /// What is wrong with the UUID.
        #[source]
        source: BadUuid,
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
///
/// No `managed` attribute: libvirt defines it for PCI hostdevs only; an mdev has no driver
/// binding for libvirt to manage (libvirt's own examples write none). The UUID is written in
/// lower case, as libvirt and sysfs spell it.
pub fn mdev_hostdev_xml(uuid: &str, options: MdevDisplay) -> Result<String, BadUuid> {
    let uuid = canonical_uuid(uuid)?;
    let mut attributes = String::from("mode='subsystem' type='mdev' model='vfio-pci'");
    if options.display {
        attributes.push_str(" display='on'");
    }
    if options.ramfb {
        attributes.push_str(" ramfb='on'");
    }
    Ok(format!(
        "<hostdev {attributes}>\n  <source>\n    <address uuid='{uuid}'/>\n  </source>\n</hostdev>\n"
    ))
}

/// `<hostdev mode='subsystem' type='pci' managed='no'>` for a VF or a passed-through device at
/// `address` (`DDDD:BB:SS.F`; the domain may have more than four digits on VMD hosts).
///
/// `managed='no'` because the service, not libvirt, binds the device to vfio-pci and gives it
/// back afterwards; with `managed='yes'` libvirt would rebind it behind the service's back.
pub fn pci_hostdev_xml(address: &str) -> Result<String, BadPciAddress> {
    let parsed = vgpu_types::PciAddress::parse(address).map_err(|_| BadPciAddress {
        address: address.to_string(),
    })?;
    let (domain, bus, slot, function) = (
        parsed.domain(),
        parsed.bus(),
        parsed.device(),
        parsed.function(),
    );
    Ok(format!(
        "<hostdev mode='subsystem' type='pci' managed='no'>\n  <source>\n    <address domain='{domain:#06x}' bus='{bus:#04x}' slot='{slot:#04x}' function='{function:#x}'/>\n  </source>\n</hostdev>\n"
    ))
}

/// The `<hostdev>` elements for an instance the service reports, one per device the guest
/// gets: an mdev by UUID; a VF as an unmanaged PCI hostdev; a pass-through as one unmanaged PCI
/// hostdev per function of the GPU's IOMMU group the service bound (`GroupMembers`: the GPU
/// and e.g. its HDMI audio function, never bridges; just the GPU when the list is empty, as
/// from an older service). `display` applies to mdevs only. `virsh attach-device` and
/// `detach-device` take one element at a time.
pub fn hostdev_elements(
    instance: &InstanceRecord,
    display: MdevDisplay,
) -> Result<Vec<String>, HostdevError> {
    let pci = |address: &str| {
        pci_hostdev_xml(address).map_err(|source| HostdevError::BadPciAddress {
            object: instance.object.clone(),
            source,
        })
    };
    match instance.kind.as_str() {
        instance_kind::MDEV => mdev_hostdev_xml(&instance.uuid, display)
            .map(|xml| vec![xml])
            .map_err(|source| HostdevError::BadUuid {
                object: instance.object.clone(),
                source,
            }),
        instance_kind::VF | instance_kind::NVIDIA_VF => Ok(vec![pci(&instance.pci_address)?]),
        instance_kind::PASSTHROUGH if instance.group_members.is_empty() => {
            Ok(vec![pci(&instance.pci_address)?])
        }
        instance_kind::PASSTHROUGH => instance
            .group_members
            .iter()
            .map(|address| pci(address))
            .collect(),
        other => Err(HostdevError::UnknownKind {
            object: instance.object.clone(),
            kind: other.to_string(),
        }),
    }
}

/// [`hostdev_elements`] as one text, the elements one after the other (what `vgpuctl xml`
/// prints, to paste into a domain's `<devices>`).
pub fn hostdev_xml(
    instance: &InstanceRecord,
    display: MdevDisplay,
) -> Result<String, HostdevError> {
    Ok(hostdev_elements(instance, display)?.concat())
}

/// PCI vendor ID of NVIDIA, whose vGPU manager identifies a guest by the VM's UUID.
pub const NVIDIA_VENDOR_ID: u16 = 0x10de;

/// What a plain QEMU command line (no libvirt) needs to get an instance.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QemuArgs {
    /// The arguments, e.g. `["-device", "vfio-pci,sysfsdev=/sys/bus/mdev/devices/<uuid>"]`.
    pub args: Vec<String>,
    /// NVIDIA vGPU: QEMU must also get `-uuid <vm uuid>`, because the host's vGPU manager reads
    /// the VM's UUID (libvirt passes the domain's UUID itself).
    pub needs_vm_uuid: bool,
}

/// `-device vfio-pci,...` for an instance: an mdev by its sysfs device directory, a VF or a
/// pass-through GPU by its PCI address (a pass-through: one `-device` per bound function of its
/// IOMMU group, `GroupMembers`). `parent_vendor` is the parent's PCI vendor ID when
/// known (it decides [`QemuArgs::needs_vm_uuid`] for mdevs and VFs of an NVIDIA GPU).
pub fn qemu_args(
    instance: &InstanceRecord,
    parent_vendor: Option<u16>,
) -> Result<QemuArgs, HostdevError> {
    let nvidia = parent_vendor == Some(NVIDIA_VENDOR_ID);
    let (devices, needs_vm_uuid) = match instance.kind.as_str() {
        instance_kind::MDEV => {
            let uuid = canonical_uuid(&instance.uuid).map_err(|source| HostdevError::BadUuid {
                object: instance.object.clone(),
                source,
            })?;
            (
                vec![format!("vfio-pci,sysfsdev=/sys/bus/mdev/devices/{uuid}")],
                nvidia,
            )
        }
        instance_kind::VF | instance_kind::NVIDIA_VF | instance_kind::PASSTHROUGH => {
            let bad = |source| HostdevError::BadPciAddress {
                object: instance.object.clone(),
                source,
            };
            let addresses = if instance.kind == instance_kind::PASSTHROUGH
                && !instance.group_members.is_empty()
            {
                instance.group_members.as_slice()
            } else {
                std::slice::from_ref(&instance.pci_address)
            };
            let devices = addresses
                .iter()
                .map(|address| {
                    let parsed = vgpu_types::PciAddress::parse(address).map_err(|_| {
                        bad(BadPciAddress {
                            address: address.clone(),
                        })
                    })?;
                    Ok(format!("vfio-pci,host={parsed}"))
                })
                .collect::<Result<Vec<_>, HostdevError>>()?;
            // A whole GPU passed through runs NVIDIA's ordinary guest driver, no vGPU manager.
            let vgpu = instance.kind == instance_kind::NVIDIA_VF
                || (nvidia && instance.kind == instance_kind::VF);
            (devices, vgpu)
        }
        other => {
            return Err(HostdevError::UnknownKind {
                object: instance.object.clone(),
                kind: other.to_string(),
            })
        }
    };
    Ok(QemuArgs {
        args: devices
            .into_iter()
            .flat_map(|device| ["-device".to_string(), device])
            .collect(),
        needs_vm_uuid,
    })
}

/// Lower-cases a UUID after checking its 8-4-4-4-12 shape, so nothing else reaches the XML.
fn canonical_uuid(uuid: &str) -> Result<String, BadUuid> {
    vgpu_types::Uuid::parse(uuid)
        .map(|parsed| parsed.to_string())
        .map_err(|_| BadUuid {
            uuid: uuid.to_string(),
        })
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
        if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
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

    const SAMPLE_UUID: &str = "C2177883-F1BB-47F0-914D-32A22E3A8804";

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
            group_members: Vec::new(),
        }
    }

    #[test]
    fn mdev_hostdev_plain_has_no_managed_attribute() {
        let xml = mdev_hostdev_xml(SAMPLE_UUID, MdevDisplay::default()).unwrap();
        assert!(!xml.contains("managed"), "{xml}");
        assert_golden("hostdev-mdev.xml", &xml);
    }

    #[test]
    fn mdev_hostdev_with_display_and_ramfb() {
        let options = MdevDisplay {
            display: true,
            ramfb: true,
        };
        assert_golden(
            "hostdev-mdev-display-ramfb.xml",
            &mdev_hostdev_xml(SAMPLE_UUID, options).unwrap(),
        );
    }

    #[test]
    fn vf_hostdev() {
        assert_golden("hostdev-vf.xml", &pci_hostdev_xml("0000:3b:00.4").unwrap());
    }

    #[test]
    fn instance_records_pick_the_hostdev_of_their_kind() {
        let display = MdevDisplay::default();
        let mdev = hostdev_xml(&record("mdev", SAMPLE_UUID, ""), display).unwrap();
        assert_eq!(mdev, mdev_hostdev_xml(SAMPLE_UUID, display).unwrap());
        let vf = hostdev_xml(&record("vf", "", "0000:3b:00.4"), display).unwrap();
        assert_eq!(vf, pci_hostdev_xml("0000:3b:00.4").unwrap());
        let passthrough = hostdev_xml(&record("passthrough", "", "0000:41:00.0"), display).unwrap();
        assert!(passthrough.contains("domain='0x0000' bus='0x41' slot='0x00' function='0x0'"));
        assert!(passthrough.contains("type='pci' managed='no'"));
    }

    #[test]
    fn passthrough_gives_one_unmanaged_hostdev_per_bound_function() {
        let mut gpu = record("passthrough", "", "0000:41:00.0");
        gpu.group_members = vec!["0000:41:00.0".into(), "0000:41:00.1".into()];
        let elements = hostdev_elements(&gpu, MdevDisplay::default()).unwrap();
        assert_eq!(elements.len(), 2);
        for element in &elements {
            assert!(element.starts_with("<hostdev mode='subsystem' type='pci' managed='no'>"));
            assert_eq!(element.matches("<hostdev").count(), 1, "{element}");
        }
        assert!(elements[1].contains("bus='0x41' slot='0x00' function='0x1'"));
        let xml = hostdev_xml(&gpu, MdevDisplay::default()).unwrap();
        assert_eq!(xml, elements.concat());
        assert!(!xml.contains("managed='yes'"));
        assert_golden("hostdev-passthrough-group.xml", &xml);

        // A member list that is not addresses is refused naming the object and the value.
        gpu.group_members.push("0000:41:00.1'/><x".into());
        let error = hostdev_xml(&gpu, MdevDisplay::default()).unwrap_err();
        let HostdevError::BadPciAddress { object, source } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(object, "/o");
        assert_eq!(source.address, "0000:41:00.1'/><x");
    }

    #[test]
    fn qemu_args_per_kind() {
        let mdev = qemu_args(&record("mdev", SAMPLE_UUID, ""), Some(NVIDIA_VENDOR_ID)).unwrap();
        assert_eq!(
            mdev.args,
            [
                "-device",
                "vfio-pci,sysfsdev=/sys/bus/mdev/devices/c2177883-f1bb-47f0-914d-32a22e3a8804"
            ]
        );
        assert!(mdev.needs_vm_uuid, "NVIDIA mdev needs -uuid");
        let intel = qemu_args(&record("mdev", SAMPLE_UUID, ""), Some(0x8086)).unwrap();
        assert!(!intel.needs_vm_uuid);
        let vf = qemu_args(&record("nvidia-vf", "", "0000:3B:00.4"), None).unwrap();
        assert_eq!(vf.args, ["-device", "vfio-pci,host=0000:3b:00.4"]);
        assert!(vf.needs_vm_uuid);
        let gpu = qemu_args(
            &record("passthrough", "", "0000:41:00.0"),
            Some(NVIDIA_VENDOR_ID),
        )
        .unwrap();
        assert_eq!(gpu.args, ["-device", "vfio-pci,host=0000:41:00.0"]);
        assert!(!gpu.needs_vm_uuid, "a whole GPU has no vGPU manager");
        let mut group = record("passthrough", "", "0000:41:00.0");
        group.group_members = vec!["0000:41:00.0".into(), "0000:41:00.1".into()];
        assert_eq!(
            qemu_args(&group, None).unwrap().args,
            [
                "-device",
                "vfio-pci,host=0000:41:00.0",
                "-device",
                "vfio-pci,host=0000:41:00.1"
            ]
        );
        assert!(matches!(
            qemu_args(&record("vf", "", "0000:3b:00.4,x=1"), None),
            Err(HostdevError::BadPciAddress { .. })
        ));
    }

    #[test]
    fn vmd_domain_and_upper_case_digits_are_normalized() {
        let xml = pci_hostdev_xml("10000:E1:1F.7").unwrap();
        assert!(xml.contains("domain='0x10000' bus='0xe1' slot='0x1f' function='0x7'"));
    }

    #[test]
    fn malformed_input_is_refused_and_named() {
        for address in [
            "3b:01.7",
            "0000:3b:01.7'/><x",
            "0000:3b:20.0",
            "0000:3b:01.8",
            "",
        ] {
            let error = pci_hostdev_xml(address).unwrap_err();
            assert_eq!(error.address, address);
        }
        let error = mdev_hostdev_xml("c2177883'/><x", MdevDisplay::default()).unwrap_err();
        assert!(error.to_string().contains("c2177883'/><x"));
        assert!(matches!(
            hostdev_xml(&record("vf", "", "3b:01.7"), MdevDisplay::default()),
            Err(HostdevError::BadPciAddress { .. })
        ));
        assert!(matches!(
            hostdev_xml(&record("mdev", "zz", ""), MdevDisplay::default()),
            Err(HostdevError::BadUuid { .. })
        ));
        assert!(matches!(
            hostdev_xml(&record("gpu", "", ""), MdevDisplay::default()),
            Err(HostdevError::UnknownKind { .. })
        ));
    }
}
