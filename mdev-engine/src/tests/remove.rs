//! Removal: only what the service created goes unless adopted or forced, and devices a process
//! holds are refused and left alone.

use super::*;

#[test]
fn only_instances_we_created_are_removed_unless_adopted_or_forced() {
    let s = setup("samples");
    s.sim
        .write(
            Path::new("/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create"),
            UUID_A.as_bytes(),
        )
        .unwrap();
    let listed = s.engine.instance(UUID_A).unwrap();
    assert_eq!(listed.owner, None);
    let error = s
        .engine
        .destroy(UUID_A, DestroyOptions::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotSupported);
    assert!(
        error.to_string().contains(UUID_A) && error.to_string().contains("adopt"),
        "{error}"
    );
    assert_eq!(s.sim.mdev_uuids(), [UUID_A]);

    let adopted = s.engine.adopt(UUID_A).unwrap();
    assert_eq!(
        (
            adopted.owner,
            adopted.parent.as_str(),
            adopted.type_id.as_str()
        ),
        (Some(Owner::Adopted), "mtty", "mtty-1")
    );
    s.engine.destroy(UUID_A, DestroyOptions::default()).unwrap();
    assert!(s.sim.mdev_uuids().is_empty());

    s.sim
        .write(
            Path::new("/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create"),
            UUID_B.as_bytes(),
        )
        .unwrap();
    s.engine
        .destroy(UUID_B, DestroyOptions { force: true })
        .unwrap();
    assert!(s.sim.mdev_uuids().is_empty());
}

#[test]
fn held_devices_are_refused_with_pid_and_command_and_left_alone() {
    let s = setup("samples");
    s.engine
        .create(mdev("mtty", "mtty-2", Some(UUID_A)))
        .unwrap();
    let holder = s
        .sim
        .hold_device(
            Path::new(&format!("/sys/bus/mdev/devices/{UUID_A}")),
            "qemu-system-x86",
        )
        .unwrap();
    let error = s
        .engine
        .destroy(UUID_A, DestroyOptions { force: true })
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InUse);
    let text = error.to_string();
    assert!(
        text.contains(&format!("pid {}", holder.pid()))
            && text.contains("qemu-system-x86")
            && text.contains(UUID_A),
        "{text}"
    );
    assert_eq!(s.sim.mdev_uuids(), [UUID_A]);
    assert!(s.sim.blocked_writes().is_empty(), "no write was issued");
    assert!(s.engine.instance(UUID_A).unwrap().owner.is_some());
    holder.release();
    s.engine.destroy(UUID_A, DestroyOptions::default()).unwrap();
}

#[test]
fn a_process_with_only_the_group_node_open_does_not_block_destroy() {
    // libvirt's nodedev-destroy: it opens the group node to see that no VM uses the mdev and
    // keeps it open while `mdevctl stop` runs; the kernel removes the device all the same.
    let s = setup("samples");
    let info = s
        .engine
        .create(mdev("mtty", "mtty-2", Some(UUID_A)))
        .unwrap();
    let group = info.iommu_group.expect("an mdev has its own group");
    let opener = s.sim.open_vfio_group_node(group, "libvirtd").unwrap();
    s.engine.destroy(UUID_A, DestroyOptions::default()).unwrap();
    assert!(s.sim.mdev_uuids().is_empty());
    assert!(s.sim.blocked_writes().is_empty());
    opener.release();
}
