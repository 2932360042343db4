//! Discovery on every simulated topology against golden files (`UPDATE_GOLDEN=1` rewrites
//! them), and on a hand-made temp tree.

use std::path::{Path, PathBuf};

use super::*;
use crate::host::RealFs;
use crate::sim::SimHost;

fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/discovery/golden")
        .join(format!("{name}.json"))
}

fn check_golden(name: &str, inventory: &Inventory) {
    let actual = serde_json::to_string_pretty(inventory).unwrap() + "\n";
    let path = golden_path(name);
    if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert!(
        actual == expected,
        "discovery of topology {name} differs from {}; rerun with UPDATE_GOLDEN=1 if intended",
        path.display()
    );
}

#[test]
fn golden_default_topology() {
    let host = SimHost::builtin("default").unwrap();
    let inventory = discover(&host).unwrap();
    let t4 = inventory
        .mdev_parents
        .iter()
        .find(|p| p.name == "0000:3b:00.0")
        .expect("T4 parent");
    let t4_2q = t4
        .types
        .iter()
        .find(|t| t.id == "nvidia-231")
        .expect("T4-2Q type");
    assert_eq!(t4_2q.name.as_deref(), Some("GRID T4-2Q"));
    assert_eq!(t4_2q.available_instances, 8);
    assert!(
        t4_2q
            .offered
            .as_ref()
            .is_some_and(|o| o.max_instances == Some(8)),
        "{t4_2q:?}"
    );
    let h200 = inventory
        .sriov_pfs
        .iter()
        .find(|p| p.function.address.to_string() == "0000:4b:00.0")
        .expect("H200");
    assert_eq!(
        (h200.total_vfs, h200.function.vendor_id),
        (32, Some(0x10de))
    );
    check_golden("default", &inventory);
}

#[test]
fn golden_samples_topology() {
    let host = SimHost::builtin("samples").unwrap();
    let inventory = discover(&host).unwrap();
    let names: Vec<&str> = inventory
        .mdev_parents
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["mbochs", "mdpy", "mtty"]);
    let mtty = &inventory.mdev_parents[2];
    assert_eq!(
        mtty.types
            .iter()
            .map(|t| (t.id.as_str(), t.available_instances))
            .collect::<Vec<_>>(),
        [("mtty-1", 24), ("mtty-2", 12)]
    );
    assert_eq!(mtty.types[0].description, None, "mtty has no description");
    check_golden("samples", &inventory);
}

#[test]
fn golden_scale_topology() {
    let host = SimHost::builtin("scale").unwrap();
    check_golden("scale", &discover(&host).unwrap());
}

#[test]
fn discovery_sees_created_mdevs_with_parent_type_and_group() {
    let host = SimHost::builtin("samples").unwrap();
    let uuid = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
    host.write(
        Path::new("/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/create"),
        uuid.as_bytes(),
    )
    .unwrap();
    let inventory = discover(&host).unwrap();
    assert_eq!(inventory.mdevs.len(), 1);
    let mdev = &inventory.mdevs[0];
    assert_eq!(
        (
            mdev.uuid.as_str(),
            mdev.parent.as_str(),
            mdev.type_id.as_str()
        ),
        (uuid, "mtty", "mtty-2")
    );
    assert!(mdev.iommu_group.is_some());
    let mtty = inventory
        .mdev_parents
        .iter()
        .find(|p| p.name == "mtty")
        .unwrap();
    assert_eq!(mtty.types[1].devices, [uuid]);
    assert_eq!(mtty.types[1].available_instances, 11);
}

#[test]
fn discovery_on_an_empty_tree_is_empty_and_on_a_temp_tree_reads_nvidia_vfs() {
    let dir = tempfile::tempdir().unwrap();
    let host = RealFs::new(dir.path());
    assert_eq!(discover(&host).unwrap(), Inventory::default());

    // A PF with one VF carrying NVIDIA's vendor files (content verbatim from the harvester
    // fixture quoted in /work/shared/fixtures/real-world/nvidia-sriov.md, trimmed to 2 rows).
    let root = dir.path();
    let pf = root.join("sys/bus/pci/devices/0000:26:00.0");
    let vf = root.join("sys/bus/pci/devices/0000:26:00.4");
    std::fs::create_dir_all(&pf).unwrap();
    std::fs::create_dir_all(vf.join("nvidia")).unwrap();
    for (file, text) in [
        ("sriov_totalvfs", "32\n"),
        ("sriov_numvfs", "1\n"),
        ("vendor", "0x10de\n"),
        ("sriov_drivers_autoprobe", "0\n"),
    ] {
        std::fs::write(pf.join(file), text).unwrap();
    }
    std::os::unix::fs::symlink("../0000:26:00.4", pf.join("virtfn0")).unwrap();
    std::fs::write(
        vf.join("nvidia/creatable_vgpu_types"),
        "ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n1146  : NVIDIA L40S-2B\n",
    )
    .unwrap();
    std::fs::write(vf.join("nvidia/current_vgpu_type"), "0\n").unwrap();
    let inventory = discover(&host).unwrap();
    assert_eq!(inventory.sriov_pfs.len(), 1);
    let pf = &inventory.sriov_pfs[0];
    assert_eq!(
        (pf.total_vfs, pf.num_vfs, pf.drivers_autoprobe),
        (32, 1, Some(false))
    );
    let nvidia = pf.vfs[0].nvidia.as_ref().unwrap();
    assert_eq!(nvidia.current_type, 0);
    assert_eq!(
        nvidia.creatable.iter().map(|t| t.id).collect::<Vec<_>>(),
        [1145, 1146]
    );
}
