//! Discovery on every simulated topology against golden files (`UPDATE_GOLDEN=1` rewrites
//! them), and on a hand-made temp tree. An integration test: mdev-sim depends on this crate,
//! so only a test outside the library can use both.

use std::path::{Path, PathBuf};

use mdev_host::discovery::*;
use mdev_host::HostFs;
use mdev_host::RealFs;
use mdev_sim::SimHost;

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

/// The real H200 capture (see `src/sim/fixtures/README.md`): `name=value` attributes, then
/// the device directory's file list.
const H200_CAPTURE: &str = include_str!("../../mdev-sim/src/fixtures/h200-pci-0000-00-06.0.txt");

/// A temp tree holding the captured device: its attributes as files, its `driver` link, and
/// an empty file for every other listed name.
fn h200_tree(root: &Path) -> PathBuf {
    let pci_bus = root.join("sys/bus/pci");
    let device = pci_bus.join("devices/0000:00:06.0");
    std::fs::create_dir_all(&device).unwrap();
    std::fs::create_dir_all(pci_bus.join("drivers/nvidia")).unwrap();
    for line in H200_CAPTURE.lines().skip(1) {
        match line.split_once('=') {
            Some(("driver", target)) => {
                std::os::unix::fs::symlink(target, device.join("driver")).unwrap()
            }
            // An empty value is an absent link (no IOMMU group).
            Some((_, "")) => {}
            Some((name, value)) => std::fs::write(device.join(name), format!("{value}\n")).unwrap(),
            // Already made from its value (the `driver` link dangles in this tree: its target
            // is relative to the real /sys/devices path).
            None if device.join(line).symlink_metadata().is_ok() => {}
            None => std::fs::write(device.join(line), "").unwrap(),
        }
    }
    device
}

#[test]
fn a_real_h200_tree_is_listed_with_why_it_hosts_no_vgpu() {
    let dir = tempfile::tempdir().unwrap();
    h200_tree(dir.path());
    let inventory = discover(&RealFs::new(dir.path())).unwrap();
    assert!(inventory.mdev_parents.is_empty() && inventory.sriov_pfs.is_empty());
    assert_eq!(inventory.other_gpus.len(), 1, "{inventory:?}");
    let gpu = &inventory.other_gpus[0];
    assert_eq!(gpu.function.address.to_string(), "0000:00:06.0");
    assert_eq!(
        (
            gpu.function.vendor_id,
            gpu.function.device_id,
            gpu.function.class
        ),
        (Some(0x10de), Some(0x2335), Some(0x030200))
    );
    assert_eq!(gpu.function.driver.as_deref(), Some("nvidia"));
    assert!(!gpu.passthrough, "no IOMMU group: no pass-through");
    assert_eq!(
        gpu.reason(),
        "nvidia driver without vGPU support loaded (no mdev types, no SR-IOV VFs); \
         IOMMU off: no IOMMU group, so no pass-through"
    );
}

#[test]
fn the_simulated_h200_real_host_discovers_like_the_real_tree() {
    let dir = tempfile::tempdir().unwrap();
    h200_tree(dir.path());
    let real = discover(&RealFs::new(dir.path())).unwrap();
    let simulated = discover(&SimHost::builtin("h200-real").unwrap()).unwrap();
    assert_eq!(simulated, real);
    check_golden("h200-real", &simulated);
}

#[test]
fn functions_that_are_no_gpu_or_a_vf_or_a_parent_are_not_other_gpus() {
    // The default host's GPUs are all mdev parents or SR-IOV PFs; its VFs (3D class too)
    // belong to their PFs.
    let host = SimHost::builtin("default").unwrap();
    host.write(
        Path::new("/sys/bus/pci/devices/0000:4b:00.0/sriov_numvfs"),
        b"2",
    )
    .unwrap();
    assert_eq!(discover(&host).unwrap().other_gpus, []);
    // The pass-through host's amdgpu and nouveau cards are listed; its audio function,
    // bridge and NIC are not.
    let text = include_str!("../../mdev-sim/topologies/passthrough.toml");
    let host = SimHost::from_topology_str(text).unwrap();
    let gpus: Vec<(String, bool, String)> = discover(&host)
        .unwrap()
        .other_gpus
        .iter()
        .map(|g| (g.function.address.to_string(), g.passthrough, g.reason()))
        .collect();
    assert_eq!(
        gpus,
        [
            (
                "0000:41:00.0".to_owned(),
                true,
                "amdgpu driver offers no vGPU (no mdev types, no SR-IOV VFs)".to_owned()
            ),
            (
                "0000:61:00.0".to_owned(),
                true,
                "nouveau driver offers no vGPU (no mdev types, no SR-IOV VFs)".to_owned()
            ),
        ]
    );
}
