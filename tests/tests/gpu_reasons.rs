//! Every GPU is listed with why it can or cannot host vGPUs (issue 20): over a real bus, on
//! the simulated copy of a real H200 host (`h200-real`: `nvidia` bound without the vGPU
//! manager, no SR-IOV files, no IOMMU), `vgpuctl parents` lists the GPU with its reason, a
//! create aimed at it fails naming it and the reason, and `vgpuctl profiles --fit` says why
//! nothing fits.

use e2e_tests::bus::{start_service_on, stderr_of, vgpuctl, vgpuctl_json, TestBus};

const GPU: &str = "0000:00:06.0";
const WHY: &str = "nvidia driver without vGPU support loaded (no mdev types, no SR-IOV VFs); \
                   IOMMU off: no IOMMU group, so no pass-through";

#[test]
fn on_the_real_h200_host_vgpuctl_lists_the_gpu_with_its_reason() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = start_service_on(&bus, "h200-real", &[]).expect("mdev-manager");

    let parents = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "parents"]));
    let parents = parents.as_array().unwrap();
    assert_eq!(parents.len(), 1, "{parents:?}");
    let gpu = &parents[0];
    assert_eq!(gpu["name"], GPU);
    assert_eq!(
        (gpu["vendor_id"].as_u64(), gpu["device_id"].as_u64()),
        (Some(0x10de), Some(0x2335))
    );
    assert_eq!(gpu["driver"], "nvidia");
    assert_eq!(gpu["modes"], serde_json::json!([]));
    assert_eq!(gpu["reason"], WHY);

    let table = vgpuctl(&bus, None, &["parents"]);
    assert!(table.status.success(), "{}", stderr_of(&table));
    let text = String::from_utf8_lossy(&table.stdout);
    let header = text.lines().next().unwrap_or_default();
    assert!(header.ends_with("REASON"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with(GPU))
        .unwrap_or_else(|| panic!("{GPU} not listed: {text}"));
    assert!(line.contains("10de:2335") && line.ends_with(WHY), "{line}");

    // A create aimed at it: NotSupported (exit 9) naming it and why; nothing created.
    let create = vgpuctl(&bus, None, &["create", "nvidia-h200-35c", "--parent", GPU]);
    assert_eq!(create.status.code(), Some(9), "{}", stderr_of(&create));
    let message = stderr_of(&create);
    assert!(message.contains(GPU) && message.contains(WHY), "{message}");
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"])),
        serde_json::json!([])
    );

    // Which profiles fit this host: none, and each says why, naming the GPU.
    let fits = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "profiles", "--fit"]));
    let fits = fits.as_array().unwrap();
    assert!(!fits.is_empty());
    for fit in fits {
        assert_eq!(fit["fits"], false, "{fit}");
        assert!(fit["detail"].as_str().unwrap().contains(GPU), "{fit}");
    }
    let table = vgpuctl(&bus, None, &["profiles", "--fit"]);
    let text = String::from_utf8_lossy(&table.stdout);
    let h200 = text
        .lines()
        .find(|l| l.starts_with("nvidia-h200-35c "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(h200.contains(" no ") && h200.contains(WHY), "{h200}");
}

#[test]
fn on_the_default_host_profiles_fit_says_where_and_parents_have_no_reason() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = start_service_on(&bus, "default", &[]).expect("mdev-manager");
    let fits = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "profiles", "--fit"]));
    let t4 = fits
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "nvidia-t4-2q")
        .cloned()
        .expect("nvidia-t4-2q");
    assert_eq!(t4["fits"], true, "{t4}");
    assert!(
        t4["detail"].as_str().unwrap().contains("0000:3b:00.0"),
        "{t4}"
    );
    let parents = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "parents"]));
    for parent in parents.as_array().unwrap() {
        assert_eq!(parent["reason"], "", "{parent}");
    }
}
