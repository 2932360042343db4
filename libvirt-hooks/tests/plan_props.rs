//! Properties of the claim-plan parser on arbitrary input (issue #9 will fuzz
//! `plan_from_xml` further): it never panics, and what it accepts is consistent.

use libvirt_hooks::plan::{plan_from_xml, DeviceKind};
use proptest::prelude::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/domains")
        .join(name);
    std::fs::read(path).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_give_a_plan_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = plan_from_xml(&bytes);
    }

    #[test]
    fn mutated_real_domains_give_a_plan_or_an_error(
        which in 0usize..4,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let name = ["metadata-several.xml", "metadata-virsh-set.xml", "vf-hostdev.xml", "passthrough.xml"][which];
        let mut xml = fixture(name);
        for (at, byte) in edits {
            let index = at.index(xml.len());
            xml[index] = byte;
        }
        if let Ok(plan) = plan_from_xml(&xml) {
            // Whatever is accepted is well-formed: mdevs carry a UUID, PCI kinds an address.
            for device in &plan.devices {
                match device.kind {
                    DeviceKind::Mdev => prop_assert!(device.uuid.is_some() && device.pci_address.is_none()),
                    DeviceKind::Vf | DeviceKind::Passthrough => {
                        prop_assert!(device.pci_address.is_some() && device.uuid.is_none())
                    }
                }
            }
        }
    }
}
