//! NVIDIA vGPU telemetry over a real bus (issue 20, item 5): the service runs `nvidia-smi vgpu
//! -q` (the simulated host answers it in the real layout from its NVIDIA vGPUs), and
//! `vgpuctl telemetry` shows each vGPU with the service's instance it is, its framebuffer
//! used, utilization and licence state; on a host without `nvidia-smi` it fails
//! `NotSupported` naming the tool.

use e2e_tests::bus::{created_uuids, start_service_on, stderr_of, vgpuctl, vgpuctl_json, TestBus};

const T4: &str = "0000:3b:00.0";
const H200: &str = "0000:4b:00.0";

#[test]
fn vgpuctl_telemetry_lists_every_nvidia_vgpu_with_its_instance() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = start_service_on(&bus, "default", &[]).expect("mdev-manager");
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "telemetry"])),
        serde_json::json!([]),
        "no vGPU yet"
    );

    let t4 = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "nvidia-t4-2q", "--count", "2"],
    ));
    assert_eq!(t4.len(), 2);
    let sriov = vgpuctl(&bus, None, &["sriov", H200, "--vfs", "32"]);
    assert!(sriov.status.success(), "{}", stderr_of(&sriov));
    let h200 = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "nvidia-h200-35c"],
    ));
    assert_eq!(h200.len(), 1);

    let rows = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "telemetry"]));
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    let mut on_t4: Vec<String> = rows
        .iter()
        .filter(|r| r["gpu"] == T4)
        .map(|r| r["instance"].as_str().unwrap().to_owned())
        .collect();
    on_t4.sort();
    let mut expected = t4.clone();
    expected.sort();
    assert_eq!(on_t4, expected, "{rows:?}");
    for row in rows.iter().filter(|r| r["gpu"] == T4) {
        assert_eq!(row["vgpu_name"], "GRID T4-2Q", "{row}");
        assert_eq!(row["fb_used_mib"], 0, "{row}");
        assert_eq!(row["fb_total_mib"], -1, "not reported: {row}");
        assert_eq!(row["gpu_utilization_percent"], 0, "{row}");
        assert_eq!(row["license_status"], "Unlicensed (Unrestricted)", "{row}");
        assert_eq!(
            row["vm_uuid"], "",
            "no VM runs on the simulated host: {row}"
        );
    }
    let vf = rows
        .iter()
        .find(|r| r["gpu"] == H200)
        .unwrap_or_else(|| panic!("the H200 vGPU: {rows:?}"));
    assert!(
        vf["vgpu_name"].as_str().unwrap().starts_with("NVIDIA H200"),
        "{vf}"
    );

    // The table: one line per vGPU, the instance's UUID and the licence in it.
    let table = vgpuctl(&bus, None, &["telemetry"]);
    assert!(table.status.success(), "{}", stderr_of(&table));
    let text = String::from_utf8_lossy(&table.stdout);
    let header = text.lines().next().unwrap_or_default();
    for column in ["GPU", "INSTANCE", "VM UUID", "FB USED", "GPU%", "LICENSE"] {
        assert!(header.contains(column), "{text}");
    }
    let line = text
        .lines()
        .find(|l| l.contains(&t4[0]))
        .unwrap_or_else(|| panic!("{} not shown: {text}", t4[0]));
    assert!(
        line.starts_with(T4) && line.contains("GRID T4-2Q") && line.contains("0 MiB"),
        "{line}"
    );

    // Destroyed: gone from the next answer at once.
    let destroy = vgpuctl(&bus, None, &["destroy", &t4[0]]);
    assert!(destroy.status.success(), "{}", stderr_of(&destroy));
    let rows = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "telemetry"]));
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .all(|r| r["instance"] != t4[0].as_str()),
        "{rows}"
    );
}

#[test]
fn without_nvidia_smi_vgpuctl_telemetry_names_the_missing_tool() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = start_service_on(&bus, "h200-real", &[]).expect("mdev-manager");
    let output = vgpuctl(&bus, None, &["telemetry"]);
    // NotSupported is exit status 9.
    assert_eq!(output.status.code(), Some(9), "{}", stderr_of(&output));
    let message = stderr_of(&output);
    assert!(
        message.contains("/usr/bin/nvidia-smi is not installed"),
        "{message}"
    );
}
