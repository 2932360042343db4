//! Mirrored mdevctl definitions over a real bus: the service keeps `<mdevctl_dir>/<parent>/<uuid>`
//! in step with its persistent mdev instances (mdevctl's bytes), never touches a definition it
//! did not write, and writes nothing with `mirror_mdevctl = false`.

use std::path::Path;

use e2e_tests::bus::{created_uuids, start_service, vgpuctl, vgpuctl_json, TestBus};

const FOREIGN: &str = "f0f0f0f0-0000-4000-8000-00000000f0f0";

/// A private bus and the service with its mdevctl directory in `dir` and the mirror `on`.
fn service_with_mirror(dir: &Path, on: bool) -> (TestBus, e2e_tests::bus::Process) {
    let config = dir.join("mdev-manager.toml");
    std::fs::write(
        &config,
        format!(
            "mdevctl_dir = \"{}\"\nmirror_mdevctl = {on}\n",
            dir.join("mdevctl.d").display()
        ),
    )
    .unwrap();
    let bus = TestBus::start().expect("dbus-daemon");
    let service =
        start_service(&bus, &["--config", &config.display().to_string()]).expect("service");
    (bus, service)
}

fn parent_of(bus: &TestBus, uuid: &str) -> String {
    let list = vgpuctl_json(&vgpuctl(bus, None, &["--json", "list"]));
    list.as_array()
        .unwrap()
        .iter()
        .find(|i| i["uuid"] == uuid)
        .unwrap_or_else(|| panic!("{uuid} not listed: {list}"))["parent"]
        .as_str()
        .unwrap()
        .to_string()
}

fn type_of(bus: &TestBus, uuid: &str) -> String {
    let list = vgpuctl_json(&vgpuctl(bus, None, &["--json", "list"]));
    list.as_array()
        .unwrap()
        .iter()
        .find(|i| i["uuid"] == uuid)
        .unwrap()["type"]
        .as_str()
        .unwrap()
        .to_string()
}

fn definition(mdev_type: &str, start: &str) -> String {
    format!("{{\n  \"mdev_type\": \"{mdev_type}\",\n  \"start\": \"{start}\",\n  \"attrs\": []\n}}")
}

#[test]
fn persistent_instances_are_mirrored_as_mdevctl_definitions_and_foreign_files_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _service) = service_with_mirror(dir.path(), true);
    let defined = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "--autostart", "nvidia-t4-2q"],
    ))
    .remove(0);
    let transient =
        created_uuids(&vgpuctl(&bus, None, &["--json", "create", "nvidia-t4-2q"])).remove(0);
    let parent = parent_of(&bus, &defined);
    let mdev_type = type_of(&bus, &defined);
    let parent_dir = dir.path().join("mdevctl.d").join(&parent);
    let file = parent_dir.join(&defined);
    assert_eq!(
        std::fs::read_to_string(&file).expect("the definition is mirrored"),
        definition(&mdev_type, "auto")
    );
    assert!(
        !parent_dir.join(&transient).exists(),
        "a transient instance has no definition"
    );

    // A definition the service did not write stays as it is.
    let foreign_text = "{\"mdev_type\":\"x\",\"start\":\"manual\",\"attrs\":[]}";
    std::fs::write(parent_dir.join(FOREIGN), foreign_text).unwrap();

    assert!(vgpuctl(&bus, None, &["autostart", &defined, "off"])
        .status
        .success());
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        definition(&mdev_type, "manual")
    );
    assert!(vgpuctl(&bus, None, &["destroy", &defined]).status.success());
    assert!(
        !file.exists(),
        "the destroyed instance's definition is still there"
    );
    assert_eq!(
        std::fs::read_to_string(parent_dir.join(FOREIGN)).unwrap(),
        foreign_text
    );
    // mdevctl's own file for an instance, with the same bytes (an imported definition), is
    // taken over: it goes when the instance does.
    let imported = "1a2b3c4d-0000-4000-8000-00000000000a";
    std::fs::write(parent_dir.join(imported), definition(&mdev_type, "manual")).unwrap();
    let report = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "import-mdevctl"]));
    assert_eq!(report["imported"][0], imported, "{report}");
    assert!(vgpuctl(&bus, None, &["destroy", imported]).status.success());
    assert!(
        !parent_dir.join(imported).exists(),
        "the taken-over definition is still there"
    );
    let leftovers: Vec<String> = std::fs::read_dir(&parent_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(leftovers, [FOREIGN], "only the foreign file is left");
}

#[test]
fn with_the_mirror_off_no_definition_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let (bus, _service) = service_with_mirror(dir.path(), false);
    created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "--autostart", "nvidia-t4-2q"],
    ));
    assert!(!dir.path().join("mdevctl.d").exists());
}
