//! The hostdevs `vgpuctl xml`/`vgpuctl attach` generate (dbus_api::hostdev) are read back by the
//! hook's planner as the same devices, so a domain built from them is claimed as intended.

use dbus_api::hostdev::{mdev_hostdev_xml, pci_hostdev_xml, MdevDisplay};
use libvirt_hooks::pci::PciAddress;
use vgpu_types::Uuid;

#[test]
fn generated_hostdevs_parse_back_into_the_same_devices() {
    let uuid = "c2177883-f1bb-47f0-914d-32a22e3a8804";
    let display = MdevDisplay {
        display: true,
        ramfb: false,
    };
    let xml = format!(
        "<domain type='kvm'><name>g</name><uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid><devices>{}{}</devices></domain>",
        mdev_hostdev_xml(uuid, display).unwrap(),
        pci_hostdev_xml("0000:3b:01.7").unwrap()
    );
    let plan = libvirt_hooks::plan::plan_from_xml(xml.as_bytes()).unwrap();
    assert_eq!(plan.devices.len(), 2);
    assert_eq!(plan.devices[0].uuid, Some(Uuid::parse(uuid).unwrap()));
    let address: PciAddress = "0000:3b:01.7".parse().unwrap();
    assert_eq!(plan.devices[1].pci_address, Some(address));
}
