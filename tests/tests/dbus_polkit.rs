//! Authorization with the real polkitd on the private system bus: an unprivileged user is
//! refused every mutating method with NotAuthorized (and nothing changes), reads stay open,
//! and a polkit rule granting the actions to a group lets a member through.
//!
//! Needs root (it creates users and installs polkit files); the files and users it creates
//! are removed when it ends.

use std::path::Path;

use dbus_api::path;
use e2e_tests::bus::{
    bus_with_service, call_everything, group_rule, install_polkit_actions, is_root, start_polkitd,
    start_service, stderr_of, vgpuctl, vgpuctl_json, wait_for_manage_grant, InstalledFile, TestBus,
    TestUser,
};

#[test]
fn polkit_refuses_unprivileged_users_and_a_group_rule_lets_members_through() {
    if !is_root() {
        panic!("this test needs root (it creates users and installs polkit files)");
    }
    // polkitd reads action files only at start, from a fixed directory.
    let _actions = install_polkit_actions();
    let bus = TestBus::start().expect("dbus-daemon");
    let _polkitd = start_polkitd(&bus).expect("polkitd");
    let _service = start_service(&bus, &[]).expect("mdev-manager");

    // Root created one instance: root is let through whatever polkit says.
    let created = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "create", "nvidia-t4-2q"]));
    let uuid = created[0]["uuid"].as_str().unwrap().to_string();
    let instance = path::mdev_instance_path(&uuid).to_string();
    let h200 = path::parent_path("0000:4b:00.0").to_string();

    let suffix = std::process::id() % 100_000;
    let outsider = TestUser::create(&format!("mdevout{suffix}"), None).expect("useradd");
    let group = format!("mdevgrp{suffix}");
    let member = TestUser::create(&format!("mdevin{suffix}"), Some(&group)).expect("useradd");

    // Every mutating method is NotAuthorized for an ordinary user (no agent, no session).
    // The helper binary calls every mutating method and prints method → outcome.
    let client = Path::new(env!("CARGO_BIN_EXE_mdev-e2e-client"));
    let results = call_everything(&bus, client, Some(&outsider.name), &[&instance, &h200]);
    // 17 methods, plus ImportMdevctl and SetAttributes (issue 17) and StartApply (issue 19).
    assert_eq!(results.len(), 20, "{results:?}");
    for (method, outcome) in &results {
        assert_eq!(
            outcome, "org.mdevmanager.VGpu1.Error.NotAuthorized",
            "{method} as {}",
            outsider.name
        );
    }
    // ... and nothing changed.
    let list = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"]));
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["uuid"], uuid.as_str());
    assert_eq!(list[0]["active"], true);

    // Reads stay open.
    let list = vgpuctl_json(&vgpuctl(&bus, Some(&outsider.name), &["--json", "list"]));
    assert_eq!(list[0]["uuid"], uuid.as_str());
    let permissions = vgpuctl_json(&vgpuctl(
        &bus,
        Some(&outsider.name),
        &["--json", "permissions"],
    ));
    for (action, answer) in permissions.as_object().unwrap() {
        assert_eq!(answer, "auth", "{action}");
    }
    let output = vgpuctl(&bus, Some(&outsider.name), &["destroy", &uuid]);
    assert_eq!(output.status.code(), Some(5), "not-authorized exit code");
    assert!(stderr_of(&output).contains(&uuid));

    // A rule granting the actions to the group; polkitd notices new rule files by itself.
    let _rule = InstalledFile::install(
        format!("/etc/polkit-1/rules.d/49-mdev-e2e-{suffix}.rules"),
        group_rule(&group).as_bytes(),
    )
    .expect("install the rule");
    wait_for_manage_grant(&bus, &member.name).expect("polkitd picked up the rule");

    let output = vgpuctl(
        &bus,
        Some(&member.name),
        &["--json", "create", "nvidia-t4-2q"],
    );
    let theirs = vgpuctl_json(&output)[0]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let output = vgpuctl(&bus, Some(&member.name), &["destroy", &theirs, &uuid]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let output = vgpuctl(
        &bus,
        Some(&member.name),
        &["--json", "sriov", "0000:4b:00.0", "--vfs", "32"],
    );
    assert_eq!(vgpuctl_json(&output)["result"], "done");
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, None, &["--json", "list"])),
        serde_json::json!([])
    );

    // The rule is for the group only: the outsider is still refused.
    let output = vgpuctl(&bus, Some(&outsider.name), &["create", "nvidia-t4-2q"]);
    assert_eq!(output.status.code(), Some(5));
}

#[test]
fn without_polkitd_only_root_may_change_anything() {
    if !is_root() {
        panic!("this test needs root (it creates a user)");
    }
    let (bus, _service) = bus_with_service();
    let user = TestUser::create(&format!("mdevnopk{}", std::process::id() % 100_000), None)
        .expect("useradd");

    let output = vgpuctl(&bus, Some(&user.name), &["create", "nvidia-t4-2q"]);
    assert_eq!(output.status.code(), Some(5), "{}", stderr_of(&output));
    assert!(stderr_of(&output).contains("polkitd is not running"));
    let permissions = vgpuctl_json(&vgpuctl(&bus, Some(&user.name), &["--json", "permissions"]));
    for (action, answer) in permissions.as_object().unwrap() {
        assert_eq!(answer, "no", "{action}");
    }
    // Reads stay open; root still may.
    assert_eq!(
        vgpuctl_json(&vgpuctl(&bus, Some(&user.name), &["--json", "list"])),
        serde_json::json!([])
    );
    let created = vgpuctl_json(&vgpuctl(&bus, None, &["--json", "create", "nvidia-t4-2q"]));
    assert_eq!(created.as_array().unwrap().len(), 1);
}
