//! `vgpuctl import-mdevctl [--dry-run]` over a real bus (`Manager.ImportMdevctl`): mdevctl's
//! definition files become adopted, persistent instances; UUIDs the service already manages
//! are skipped; unusable files are reported with why; a dry run changes nothing.

use e2e_tests::bus::{created_uuids, start_service, vgpuctl, vgpuctl_json, TestBus};

const NEW_AUTO: &str = "1a2b3c4d-0000-4000-8000-00000000000a";
const NEW_MANUAL: &str = "1a2b3c4d-0000-4000-8000-00000000000b";

fn sorted(value: &serde_json::Value) -> Vec<String> {
    let mut items: Vec<String> = value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect();
    items.sort();
    items
}

#[test]
fn mdevctl_definitions_are_imported_as_adopted_persistent_instances_and_a_dry_run_changes_nothing()
{
    let dir = tempfile::tempdir().expect("temp dir");
    let mdevctl_dir = dir.path().join("mdevctl.d");
    let config = dir.path().join("mdev-manager.toml");
    std::fs::write(
        &config,
        format!("mdevctl_dir = \"{}\"\n", mdevctl_dir.display()),
    )
    .unwrap();
    let bus = TestBus::start().expect("dbus-daemon");
    let _service =
        start_service(&bus, &["--config", &config.display().to_string()]).expect("service");

    let managed = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "--autostart", "nvidia-t4-2q"],
    ))
    .remove(0);
    let list = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    let record = list.as_array().unwrap()[0].clone();
    let parent = record["parent"].as_str().unwrap().to_string();
    let mdev_type = record["type"].as_str().unwrap().to_string();

    let parent_dir = mdevctl_dir.join(&parent);
    std::fs::create_dir_all(&parent_dir).unwrap();
    let definition =
        |start: &str| format!(r#"{{"mdev_type":"{mdev_type}","start":"{start}","attrs":[]}}"#);
    std::fs::write(parent_dir.join(NEW_AUTO), definition("auto")).unwrap();
    std::fs::write(parent_dir.join(NEW_MANUAL), definition("manual")).unwrap();
    std::fs::write(parent_dir.join(&managed), definition("auto")).unwrap();
    std::fs::write(parent_dir.join("not-a-uuid"), "{}").unwrap();

    let before = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    let preview = vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &["--json", "import-mdevctl", "--dry-run"],
    ));
    assert_eq!(
        sorted(&preview["imported"]),
        [NEW_AUTO, NEW_MANUAL],
        "{preview}"
    );
    assert_eq!(
        sorted(&preview["skipped"]),
        vec![managed.clone()],
        "{preview}"
    );
    let problems = preview["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{preview}");
    assert!(
        problems[0].as_str().unwrap().contains("not-a-uuid"),
        "{preview}"
    );
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"])),
        before,
        "a dry run changed the instances"
    );

    let text = vgpuctl(&bus, None, &["import-mdevctl"]);
    assert!(text.status.success(), "{text:?}");
    let report = String::from_utf8_lossy(&text.stdout);
    assert!(report.contains(&format!("imported {NEW_AUTO}")), "{report}");
    assert!(
        report.contains(&format!("skipped {managed}: already managed")),
        "{report}"
    );
    assert!(
        report.contains("2 imported, 1 skipped, 1 not imported"),
        "{report}"
    );

    let list = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    for (uuid, autostart) in [(NEW_AUTO, true), (NEW_MANUAL, false)] {
        let instance = list
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["uuid"] == uuid)
            .unwrap_or_else(|| panic!("{uuid} not imported: {list}"));
        assert_eq!(instance["owner"], "adopted");
        assert_eq!(instance["persistent"], true);
        assert_eq!(instance["autostart"], autostart);
        assert_eq!(instance["type"], mdev_type.as_str());
        assert_eq!(instance["parent"], parent.as_str());
    }

    let again = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "import-mdevctl"]));
    assert_eq!(sorted(&again["imported"]), Vec::<String>::new(), "{again}");
    assert_eq!(
        sorted(&again["skipped"]),
        {
            let mut all = vec![
                NEW_AUTO.to_string(),
                NEW_MANUAL.to_string(),
                managed.clone(),
            ];
            all.sort();
            all
        },
        "{again}"
    );
}
