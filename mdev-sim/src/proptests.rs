//! Random operation sequences on the samples host: capacity is never overcommitted, every
//! instance has its own group and device node, and undoing everything gives back exactly the
//! tree the host booted with (nothing leaks).

use std::collections::BTreeSet;
use std::path::Path;

use proptest::prelude::*;

use super::*;

const PF: &str = "/sys/bus/pci/devices/0000:01:00.0";
const TYPES: [(&str, &str); 8] = [
    ("mtty", "mtty-1"),
    ("mtty", "mtty-2"),
    ("mbochs", "mbochs-small"),
    ("mbochs", "mbochs-medium"),
    ("mbochs", "mbochs-large"),
    ("mdpy", "mdpy-vga"),
    ("mdpy", "mdpy-xga"),
    ("mdpy", "mdpy-hd"),
];

#[derive(Debug, Clone)]
enum Op {
    Create { type_index: usize, uuid: u8 },
    Remove { uuid: u8 },
    NumVfs(u8),
    BindVf(u8),
    HoldAny,
    ReleaseAll,
    Reload(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..TYPES.len(), 0u8..24).prop_map(|(type_index, uuid)| Op::Create { type_index, uuid }),
        3 => (0u8..24).prop_map(|uuid| Op::Remove { uuid }),
        1 => (0u8..6).prop_map(Op::NumVfs),
        1 => (0u8..4).prop_map(Op::BindVf),
        1 => Just(Op::HoldAny),
        1 => Just(Op::ReleaseAll),
        1 => (0usize..3).prop_map(Op::Reload),
    ]
}

fn uuid(n: u8) -> String {
    format!("ab000000-0000-0000-0000-{n:012x}")
}

fn p(text: &str) -> &Path {
    Path::new(text)
}

fn cost(type_id: &str) -> (&'static str, u64) {
    match type_id {
        "mtty-1" => ("mtty", 1),
        "mtty-2" => ("mtty", 2),
        "mbochs-small" => ("mbochs", 4),
        "mbochs-medium" => ("mbochs", 16),
        "mbochs-large" => ("mbochs", 64),
        _ => ("mdpy", 1),
    }
}

/// Capacity and group invariants, checked through the file seam only.
fn check_invariants(host: &SimHost) {
    let mut used = std::collections::BTreeMap::<&str, u64>::new();
    let mut groups = BTreeSet::new();
    for name in host.list(p("/sys/bus/mdev/devices")).unwrap() {
        let dev = format!("/sys/bus/mdev/devices/{}", name.to_string_lossy());
        let mdev_type = host.read_link(p(&format!("{dev}/mdev_type"))).unwrap();
        let (parent, amount) = cost(mdev_type.file_name().unwrap().to_str().unwrap());
        *used.entry(parent).or_default() += amount;
        let group = host.read_link(p(&format!("{dev}/iommu_group"))).unwrap();
        let group = group.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            host.exists(p(&format!("/dev/vfio/{group}"))),
            "{dev}: no /dev/vfio/{group}"
        );
        assert!(groups.insert(group.clone()), "group {group} shared");
    }
    let limits = [("mtty", 24u64), ("mbochs", 64), ("mdpy", 4)];
    for (parent, limit) in limits {
        let taken = used.get(parent).copied().unwrap_or(0);
        assert!(taken <= limit, "{parent} overcommitted: {taken} > {limit}");
        for (owner, type_id) in TYPES.iter().filter(|(owner, _)| *owner == parent) {
            let path = format!(
                "/sys/class/mdev_bus/{owner}/mdev_supported_types/{type_id}/available_instances"
            );
            let Ok(text) = host.read(p(&path)) else {
                continue;
            };
            let available: u64 = text.trim().parse().unwrap();
            let (_, each) = cost(type_id);
            assert_eq!(available, (limit - taken) / each, "{type_id}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_invariants_and_leak_nothing(ops in proptest::collection::vec(op(), 1..40)) {
        let host = SimHost::builtin("samples").unwrap();
        let boot = host.tree_listing();
        let mut holders: Vec<SimHolder> = Vec::new();
        let modules = ["mtty", "mbochs", "mdpy"];
        for op in ops {
            match op {
                Op::Create { type_index, uuid: n } => {
                    let (parent, type_id) = TYPES[type_index];
                    let _ = host.write(p(&format!("/sys/class/mdev_bus/{parent}/mdev_supported_types/{type_id}/create")), uuid(n).as_bytes());
                }
                Op::Remove { uuid: n } => {
                    let device = format!("/sys/bus/mdev/devices/{}", uuid(n));
                    let held = host.read_link(p(&format!("{device}/iommu_group"))).ok().and_then(|g| g.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse::<u32>().ok())).is_some_and(|g| holders.iter().any(|h| h.group() == g));
                    // A held device's remove would block this thread: only remove free ones.
                    if !held {
                        let _ = host.write(p(&format!("{device}/remove")), b"1");
                    }
                }
                Op::NumVfs(count) => {
                    let vf_held = holders.iter().any(|h| {
                        host.list(p("/sys/bus/pci/devices")).unwrap().iter().any(|bdf| {
                            let bdf = bdf.to_string_lossy();
                            bdf != "0000:01:00.0" && host.read_link(p(&format!("/sys/bus/pci/devices/{bdf}/iommu_group"))).ok().and_then(|g| g.file_name().map(|n| n.to_string_lossy() == h.group().to_string())).unwrap_or(false)
                        })
                    });
                    if !(count == 0 && vf_held) {
                        let _ = host.write(p(&format!("{PF}/sriov_numvfs")), count.to_string().as_bytes());
                    }
                }
                Op::BindVf(index) => {
                    if let Ok(vf) = host.read_link(p(&format!("{PF}/virtfn{index}"))) {
                        let bdf = vf.file_name().unwrap().to_string_lossy().into_owned();
                        let _ = host.write(p(&format!("/sys/bus/pci/devices/{bdf}/driver_override")), b"vfio-pci");
                        let _ = host.write(p("/sys/bus/pci/drivers_probe"), bdf.as_bytes());
                    }
                }
                Op::HoldAny => {
                    let nodes = host.list(p("/dev/vfio")).unwrap();
                    for node in nodes {
                        if let Ok(group) = node.to_string_lossy().parse::<u32>() {
                            if let Ok(holder) = host.open_vfio_group(group, "qemu") {
                                holders.push(holder);
                                break;
                            }
                        }
                    }
                }
                Op::ReleaseAll => holders.clear(),
                Op::Reload(index) => {
                    if host.unload_module(modules[index]).is_ok() {
                        host.load_module(modules[index]).unwrap();
                    }
                }
            }
            check_invariants(&host);
        }
        // Undo everything: the host must be back to its boot tree.
        holders.clear();
        for name in host.list(p("/sys/bus/mdev/devices")).unwrap() {
            host.write(p(&format!("/sys/bus/mdev/devices/{}/remove", name.to_string_lossy())), b"1").unwrap();
        }
        host.write(p(&format!("{PF}/sriov_numvfs")), b"0").unwrap();
        host.write(p(&format!("{PF}/sriov_drivers_autoprobe")), b"1").unwrap();
        prop_assert_eq!(host.tree_listing(), boot);
    }
}
