//! The scenarios, in run order, and the helpers that turn host answers into outcomes.

use std::io;
use std::path::{Path, PathBuf};

use super::{test_uuid, Outcome, Runner, MDEV_BUS, MDEV_DEVICES, PCI_DEVICES};
use mdev_host::HostFs;

pub(super) type Scenario = fn(&mut Runner);

/// The scenarios, in run order.
pub(super) const SCENARIOS: &[(&str, Scenario)] = &[
    ("create", scenario_create),
    ("malformed-uuid", scenario_malformed),
    ("duplicate", scenario_duplicate),
    ("exhaustion", scenario_exhaustion),
    ("remove", scenario_remove),
    ("remove-while-held", scenario_remove_held),
    (
        "remove-while-group-node-open",
        scenario_remove_group_node_open,
    ),
    ("sriov", scenario_sriov),
    ("formats", scenario_formats),
];

fn scenario_create(r: &mut Runner) {
    if !r.has_type("mtty", "mtty-1") {
        r.skip("create mtty-1", Outcome::Ok, "no mtty parent");
        return;
    }
    let dir = Runner::type_dir("mtty", "mtty-1");
    let create = format!("{dir}/create");
    let available = r
        .host
        .read(Path::new(&format!("{dir}/available_instances")))
        .map(|s| s.trim().to_string());
    r.record(
        "available_instances of mtty-1 before",
        Outcome::Value("24".into()),
        available.map_or_else(|e| Outcome::of(&Err(e)), Outcome::Value),
    );
    let good = test_uuid(1);
    r.step_write(
        "UUID with newline",
        Outcome::Ok,
        &create,
        format!("{good}\n").as_bytes(),
    );
    let dev = format!("{MDEV_DEVICES}/{good}");
    let group = r
        .host
        .read_link(Path::new(&format!("{dev}/iommu_group")))
        .ok();
    r.check(
        "device has an iommu_group link",
        group.is_some(),
        libc::ENOENT,
    );
    let node = group
        .as_ref()
        .and_then(|g| g.file_name())
        .map(|n| format!("/dev/vfio/{}", n.to_string_lossy()));
    r.check(
        "/dev/vfio/<group> exists",
        node.as_ref().is_some_and(|n| r.host.exists(Path::new(n))),
        libc::ENOENT,
    );
    let mdev_type = r
        .host
        .read_link(Path::new(&format!("{dev}/mdev_type")))
        .ok();
    r.check(
        "mdev_type links to ../mdev_supported_types/mtty-1",
        mdev_type.as_deref() == Some(Path::new("../mdev_supported_types/mtty-1")),
        libc::ENOENT,
    );
    r.check(
        "driver link present",
        r.host
            .read_link(Path::new(&format!("{dev}/driver")))
            .is_ok(),
        libc::ENOENT,
    );
    r.check(
        "vfio-dev/vfioN present",
        r.host
            .list(Path::new(&format!("{dev}/vfio-dev")))
            .is_ok_and(|v| v.len() == 1),
        libc::ENOENT,
    );
    let available = r
        .host
        .read(Path::new(&format!("{dir}/available_instances")))
        .map(|s| s.trim().to_string());
    r.record(
        "available_instances of mtty-1 after one",
        Outcome::Value("23".into()),
        available.map_or_else(|e| Outcome::of(&Err(e)), Outcome::Value),
    );
    let upper = test_uuid(2).to_ascii_uppercase();
    r.step_write("upper-case UUID", Outcome::Ok, &create, upper.as_bytes());
    r.check(
        "upper-case UUID shows in lower case",
        r.device_exists(&test_uuid(2)),
        libc::ENOENT,
    );
    r.step_write(
        "UUID plus one trailing byte",
        Outcome::Ok,
        &create,
        format!("{}x", test_uuid(3)).as_bytes(),
    );
    r.step_write(
        "UUID without newline",
        Outcome::Ok,
        &create,
        test_uuid(4).as_bytes(),
    );
    for n in 1..=4 {
        r.remove(&test_uuid(n));
    }
    r.check(
        "all removed",
        (1..=4).all(|n| !r.device_exists(&test_uuid(n))),
        libc::EEXIST,
    );
}

fn scenario_malformed(r: &mut Runner) {
    if !r.has_type("mtty", "mtty-1") {
        r.skip(
            "malformed UUIDs",
            Outcome::errno(libc::EINVAL),
            "no mtty parent",
        );
        return;
    }
    let create = format!("{}/create", Runner::type_dir("mtty", "mtty-1"));
    let base = test_uuid(10);
    let cases: [(&str, Vec<u8>); 6] = [
        ("bad hex digit", format!("{}g", &base[..35]).into_bytes()),
        ("too short", base.as_bytes()[..35].to_vec()),
        ("no dashes", base.replace('-', "").into_bytes()),
        ("38 bytes", format!("{base}\n\n").into_bytes()),
        ("braces", format!("{{{base}}}").into_bytes()),
        ("empty line", b"\n".to_vec()),
    ];
    for (name, data) in cases {
        r.step_write(name, Outcome::errno(libc::EINVAL), &create, &data);
    }
    r.check("nothing was created", !r.device_exists(&base), libc::EEXIST);
}

fn scenario_duplicate(r: &mut Runner) {
    if !r.has_type("mtty", "mtty-1") {
        r.skip(
            "duplicate UUID",
            Outcome::errno(libc::EEXIST),
            "no mtty parent",
        );
        return;
    }
    let uuid = test_uuid(20);
    let create = format!("{}/create", Runner::type_dir("mtty", "mtty-1"));
    r.step_write("first create", Outcome::Ok, &create, uuid.as_bytes());
    r.step_write(
        "same UUID, same type",
        Outcome::errno(libc::EEXIST),
        &create,
        uuid.as_bytes(),
    );
    r.step_write(
        "same UUID, other type",
        Outcome::errno(libc::EEXIST),
        &format!("{}/create", Runner::type_dir("mtty", "mtty-2")),
        uuid.as_bytes(),
    );
    if r.has_type("mdpy", "mdpy-vga") {
        r.step_write(
            "same UUID, other parent",
            Outcome::errno(libc::EEXIST),
            &format!("{}/create", Runner::type_dir("mdpy", "mdpy-vga")),
            uuid.as_bytes(),
        );
    } else {
        r.skip(
            "same UUID, other parent",
            Outcome::errno(libc::EEXIST),
            "no mdpy parent",
        );
    }
    r.remove(&uuid);
}

/// Fills `type_id` on `parent`, then tries `last_type` once more; cleans up.
fn exhaust(
    r: &mut Runner,
    parent: &str,
    fill_type: &str,
    fill_count: u32,
    last_type: &str,
    expected: i32,
    first_uuid: u32,
) {
    if !r.has_type(parent, fill_type) || !r.has_type(parent, last_type) {
        r.skip(
            &format!("{parent}: exhausted create"),
            Outcome::errno(expected),
            &format!("no {parent} parent"),
        );
        return;
    }
    let uuids: Vec<String> = (0..fill_count).map(|n| test_uuid(first_uuid + n)).collect();
    let failures = uuids
        .iter()
        .filter(|u| r.create(parent, fill_type, u).is_err())
        .count();
    r.check(
        &format!("{parent}: {fill_count} x {fill_type} fit"),
        failures == 0,
        libc::ENOSPC,
    );
    let available = r
        .host
        .read(Path::new(&format!(
            "{}/available_instances",
            Runner::type_dir(parent, last_type)
        )))
        .map(|s| s.trim().to_string());
    r.record(
        format!("{parent}: available_instances of {last_type} when full"),
        Outcome::Value("0".into()),
        available.map_or_else(|e| Outcome::of(&Err(e)), Outcome::Value),
    );
    let extra = test_uuid(first_uuid + fill_count);
    let outcome = Outcome::of(&r.create(parent, last_type, &extra));
    r.record(
        format!("{parent}: one more {last_type}"),
        Outcome::errno(expected),
        outcome,
    );
    r.check(
        &format!("{parent}: the refused instance does not exist"),
        !r.device_exists(&extra),
        libc::EEXIST,
    );
    for uuid in uuids.iter().chain(std::iter::once(&extra)) {
        r.remove(uuid);
    }
}

fn scenario_exhaustion(r: &mut Runner) {
    exhaust(r, "mtty", "mtty-2", 12, "mtty-1", libc::ENOSPC, 100);
    exhaust(
        r,
        "mbochs",
        "mbochs-medium",
        4,
        "mbochs-small",
        libc::ENOSPC,
        200,
    );
    exhaust(r, "mdpy", "mdpy-xga", 4, "mdpy-vga", libc::EUSERS, 300);
}

fn scenario_remove(r: &mut Runner) {
    if !r.has_type("mtty", "mtty-1") {
        r.skip("remove", Outcome::Ok, "no mtty parent");
        return;
    }
    let uuid = test_uuid(30);
    let created = r.create("mtty", "mtty-1", &uuid);
    r.record("create", Outcome::Ok, Outcome::of(&created));
    let remove = format!("{MDEV_DEVICES}/{uuid}/remove");
    r.step_write("remove with 0", Outcome::Ok, &remove, b"0");
    r.check(
        "device still there after 0",
        r.device_exists(&uuid),
        libc::ENOENT,
    );
    r.step_write("remove with x", Outcome::errno(libc::EINVAL), &remove, b"x");
    r.step_write("remove with 1", Outcome::Ok, &remove, b"1\n");
    r.check("device gone", !r.device_exists(&uuid), libc::EEXIST);
    r.step_write(
        "second remove by path",
        Outcome::errno(libc::ENOENT),
        &remove,
        b"1",
    );
}

fn scenario_remove_held(r: &mut Runner) {
    if !r.has_type("mtty", "mtty-1") {
        r.skip("remove while held", Outcome::Blocks, "no mtty parent");
        return;
    }
    let uuid = test_uuid(40);
    let created = r.create("mtty", "mtty-1", &uuid);
    r.record("create", Outcome::Ok, Outcome::of(&created));
    let device = PathBuf::from(format!("{MDEV_DEVICES}/{uuid}"));
    let held = r.holder.hold(&device);
    r.record(
        "hold the VFIO device",
        Outcome::Ok,
        Outcome::of(
            &held
                .as_ref()
                .map(|_| ())
                .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO))),
        ),
    );
    let Ok(held) = held else {
        r.remove(&uuid);
        return;
    };
    let second = r.holder.hold(&device).map(|_| ());
    r.record(
        "open the group again while held",
        Outcome::errno(libc::EBUSY),
        Outcome::of(&second),
    );
    let group = r
        .host
        .read_link(&device.join("iommu_group"))
        .ok()
        .and_then(|t| {
            t.file_name()
                .map(|n| format!("/dev/vfio/{}", n.to_string_lossy()))
        });
    let targets = proc_fd_targets(r.host.as_ref());
    r.check(
        "a /proc/<pid>/fd link names /dev/vfio/<group>",
        group.is_some_and(|g| targets.contains(&g)),
        libc::ENOENT,
    );
    r.check(
        "a /proc/<pid>/fd link is anon_inode:[vfio-device]",
        targets.iter().any(|t| t == "anon_inode:[vfio-device]"),
        libc::ENOENT,
    );
    let remove = format!("{}/remove", device.display());
    let device_text = device.display().to_string();
    // The device's own directory under its parent (the bus link goes first on removal).
    let device_dir = r
        .host
        .read_link(&device)
        .ok()
        .map(|target| normalize(&Path::new(MDEV_DEVICES).join(target)));
    r.blocking_write(
        "remove while held",
        &remove,
        b"1",
        |r| {
            // device_remove_file_self(): the attribute goes before the removal waits.
            r.check(
                "remove attribute gone while blocked",
                !r.host.exists(Path::new(&remove)),
                libc::EEXIST,
            );
            // device_del(): attributes, bus link and driver links go before the vendor
            // remove() waits; the directory with its group link and vfio-dev stays.
            r.check(
                "bus link gone while blocked",
                !r.host.exists(Path::new(&device_text)),
                libc::EEXIST,
            );
            let dir = device_dir.clone().unwrap_or_default();
            r.check(
                "device directory still present while blocked",
                r.host.is_dir(Path::new(&dir)),
                libc::ENOENT,
            );
            r.check(
                "iommu_group link still present while blocked",
                r.host.exists(Path::new(&format!("{dir}/iommu_group"))),
                libc::ENOENT,
            );
            r.check(
                "vfio-dev still present while blocked",
                r.host.is_dir(Path::new(&format!("{dir}/vfio-dev"))),
                libc::ENOENT,
            );
            r.check(
                "driver link gone while blocked",
                !r.host.exists(Path::new(&format!("{dir}/driver"))),
                libc::EEXIST,
            );
            r.check(
                "mdev_type link gone while blocked",
                !r.host.exists(Path::new(&format!("{dir}/mdev_type"))),
                libc::EEXIST,
            );
            r.check(
                "vendor attributes gone while blocked",
                !r.host.exists(Path::new(&format!("{dir}/vendor"))),
                libc::EEXIST,
            );
        },
        move || drop(held),
    );
    r.check(
        "device gone after release",
        !r.device_exists(&uuid),
        libc::EEXIST,
    );
}

/// The kernel waits for device fds, not for the group node: with the group node open alone
/// (libvirt's busy check during `nodedev-destroy`), `remove` completes.
fn scenario_remove_group_node_open(r: &mut Runner) {
    if !r.has_type("mtty", "mtty-1") {
        r.skip(
            "remove while the group node is open",
            Outcome::Ok,
            "no mtty parent",
        );
        return;
    }
    let uuid = test_uuid(41);
    let created = r.create("mtty", "mtty-1", &uuid);
    r.record("create", Outcome::Ok, Outcome::of(&created));
    let device = PathBuf::from(format!("{MDEV_DEVICES}/{uuid}"));
    let opened = r.holder.open_group_node(&device);
    r.record(
        "open the group node alone",
        Outcome::Ok,
        Outcome::of(
            &opened
                .as_ref()
                .map(|_| ())
                .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO))),
        ),
    );
    let Ok(opened) = opened else {
        r.remove(&uuid);
        return;
    };
    let second = r.holder.hold(&device).map(|_| ());
    r.record(
        "hold the device while another process has the group node open",
        Outcome::errno(libc::EBUSY),
        Outcome::of(&second),
    );
    let remove = format!("{}/remove", device.display());
    let outcome = r.write_within_block_wait(&remove, b"1", move || drop(opened));
    r.record("remove while the group node is open", Outcome::Ok, outcome);
    r.check("device gone", !r.device_exists(&uuid), libc::EEXIST);
}

/// Resolves `.` and `..` in an absolute path without touching the host.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for component in path.components() {
        match component {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    format!("/{}", parts.join("/"))
}

/// Every `/proc/<pid>/fd/<n>` link target on the host, the way the engine looks for holders.
fn proc_fd_targets(host: &dyn HostFs) -> Vec<String> {
    let mut targets = Vec::new();
    let Ok(entries) = host.list(Path::new("/proc")) else {
        return targets;
    };
    for pid in entries
        .iter()
        .filter_map(|e| e.to_str())
        .filter(|e| e.bytes().all(|b| b.is_ascii_digit()))
    {
        let fd_dir = format!("/proc/{pid}/fd");
        let Ok(fds) = host.list(Path::new(&fd_dir)) else {
            continue;
        };
        for fd in fds {
            if let Ok(target) = host.read_link(&Path::new(&fd_dir).join(&fd)) {
                targets.push(target.to_string_lossy().into_owned());
            }
        }
    }
    targets
}

/// The first PF with SR-IOV (QEMU's nvme in the VM tier) and its driver.
fn find_pf(host: &dyn HostFs) -> Option<(String, Option<String>)> {
    let mut names: Vec<String> = host
        .list(Path::new(PCI_DEVICES))
        .ok()?
        .iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .find(|bdf| host.exists(Path::new(&format!("{PCI_DEVICES}/{bdf}/sriov_totalvfs"))))
        .map(|bdf| {
            let driver = host
                .read_link(Path::new(&format!("{PCI_DEVICES}/{bdf}/driver")))
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
            (bdf, driver)
        })
}

fn scenario_sriov(r: &mut Runner) {
    let Some((pf, driver)) = find_pf(r.host.as_ref()) else {
        r.skip("SR-IOV", Outcome::Ok, "no SR-IOV PF");
        return;
    };
    let base = format!("{PCI_DEVICES}/{pf}");
    let numvfs = format!("{base}/sriov_numvfs");
    let total: u32 = r
        .host
        .read(Path::new(&format!("{base}/sriov_totalvfs")))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    match &driver {
        Some(name) => {
            let unbind = r.write(
                &format!("/sys/bus/pci/drivers/{name}/unbind"),
                pf.as_bytes(),
            );
            r.record("unbind the PF driver", Outcome::Ok, Outcome::of(&unbind));
            r.step_write(
                "sriov_numvfs=2 without PF driver",
                Outcome::errno(libc::ENOENT),
                &numvfs,
                b"2",
            );
            r.step_write(
                "bind the PF driver back",
                Outcome::Ok,
                &format!("/sys/bus/pci/drivers/{name}/bind"),
                pf.as_bytes(),
            );
        }
        None => {
            r.step_write(
                "sriov_numvfs=2 without PF driver",
                Outcome::errno(libc::ENOENT),
                &numvfs,
                b"2",
            );
            r.skip(
                "SR-IOV with a PF driver",
                Outcome::Ok,
                "the PF has no driver",
            );
            return;
        }
    }
    r.step_write(
        "sriov_numvfs above total",
        Outcome::errno(libc::ERANGE),
        &numvfs,
        format!("{}", total + 1).as_bytes(),
    );
    r.step_write(
        "sriov_numvfs=abc",
        Outcome::errno(libc::EINVAL),
        &numvfs,
        b"abc",
    );
    r.step_write(
        "sriov_drivers_autoprobe=0",
        Outcome::Ok,
        &format!("{base}/sriov_drivers_autoprobe"),
        b"0",
    );
    r.step_write("sriov_numvfs 0 -> 2", Outcome::Ok, &numvfs, b"2");
    let vf0 = r
        .host
        .read_link(Path::new(&format!("{base}/virtfn0")))
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
    r.check(
        "virtfn0 and virtfn1 exist",
        vf0.is_some() && r.host.exists(Path::new(&format!("{base}/virtfn1"))),
        libc::ENOENT,
    );
    r.step_write(
        "sriov_numvfs 2 -> 3",
        Outcome::errno(libc::EBUSY),
        &numvfs,
        b"3",
    );
    r.step_write("sriov_numvfs 2 -> 2", Outcome::Ok, &numvfs, b"2");
    r.step_write(
        "drivers_probe of a bogus BDF",
        Outcome::errno(libc::ENODEV),
        "/sys/bus/pci/drivers_probe",
        b"0000:ff:1f.7",
    );
    let vfio_loaded = r.host.is_dir(Path::new("/sys/bus/pci/drivers/vfio-pci"));
    match (vf0, vfio_loaded) {
        (Some(vf), true) => {
            let vf_dir = format!("{PCI_DEVICES}/{vf}");
            r.step_write(
                "VF driver_override=vfio-pci",
                Outcome::Ok,
                &format!("{vf_dir}/driver_override"),
                b"vfio-pci\n",
            );
            r.step_write(
                "drivers_probe of the VF",
                Outcome::Ok,
                "/sys/bus/pci/drivers_probe",
                vf.as_bytes(),
            );
            let bound = r
                .host
                .read_link(Path::new(&format!("{vf_dir}/driver")))
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
            r.record(
                "VF driver after probe",
                Outcome::Value("vfio-pci".into()),
                bound.map_or_else(|| Outcome::errno(libc::ENOENT), Outcome::Value),
            );
            let group = r
                .host
                .read_link(Path::new(&format!("{vf_dir}/iommu_group")))
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
            r.check(
                "/dev/vfio/<group> of the VF exists",
                group.is_some_and(|g| r.host.exists(Path::new(&format!("/dev/vfio/{g}")))),
                libc::ENOENT,
            );
            r.step_write(
                "second bind to vfio-pci",
                Outcome::errno(libc::EBUSY),
                "/sys/bus/pci/drivers/vfio-pci/bind",
                vf.as_bytes(),
            );
            match r.holder.hold(Path::new(&vf_dir)) {
                Ok(held) => {
                    r.record("hold the VF's VFIO device", Outcome::Ok, Outcome::Ok);
                    let mut pending_read = None;
                    let pf_base = base.clone();
                    let numvfs_path = numvfs.clone();
                    let vf_path = vf_dir.clone();
                    r.blocking_write(
                        "sriov_numvfs=0 while a VF is held",
                        &numvfs,
                        b"0",
                        |r| {
                            // sriov_disable() went VF by VF: the held VF's links are gone,
                            // its directory stays, later VFs are untouched.
                            r.check(
                                "held VF's virtfn0 link gone while blocked",
                                !r.host.exists(Path::new(&format!("{pf_base}/virtfn0"))),
                                libc::EEXIST,
                            );
                            r.check(
                                "held VF's physfn link gone while blocked",
                                !r.host.exists(Path::new(&format!("{vf_path}/physfn"))),
                                libc::EEXIST,
                            );
                            r.check(
                                "held VF's driver link gone while blocked",
                                !r.host.exists(Path::new(&format!("{vf_path}/driver"))),
                                libc::EEXIST,
                            );
                            r.check(
                                "held VF still present while blocked",
                                r.host.exists(Path::new(&vf_path)),
                                libc::ENOENT,
                            );
                            r.check(
                                "virtfn1 still present while blocked",
                                r.host.exists(Path::new(&format!("{pf_base}/virtfn1"))),
                                libc::ENOENT,
                            );
                            // The store holds the PF's device lock, which the show takes too.
                            let read = r.start_read(&numvfs_path);
                            let outcome = match read.recv_timeout(r.options.block_wait) {
                                Ok(result) => Outcome::of(&result.map(|_| ())),
                                Err(_) => Outcome::Blocks,
                            };
                            r.record(
                                "read sriov_numvfs while the disable blocks",
                                Outcome::Blocks,
                                outcome,
                            );
                            pending_read = Some(read);
                        },
                        move || drop(held),
                    );
                    if let Some(read) = pending_read {
                        let value = match read.recv_timeout(r.options.release_wait) {
                            Ok(Ok(text)) => Outcome::Value(text.trim_end().to_string()),
                            Ok(Err(error)) => Outcome::of(&Err(error)),
                            Err(_) => Outcome::Blocks,
                        };
                        r.record(
                            "that read after the disable finished",
                            Outcome::Value("0".into()),
                            value,
                        );
                    }
                }
                Err(error) => {
                    r.record(
                        "hold the VF's VFIO device",
                        Outcome::Ok,
                        Outcome::of(&Err(error)),
                    );
                }
            }
        }
        (None, _) => r.skip("bind a VF to vfio-pci", Outcome::Ok, "no VF appeared"),
        (Some(_), false) => r.skip(
            "bind a VF to vfio-pci",
            Outcome::Ok,
            "vfio-pci is not loaded",
        ),
    }
    let _ = r.write(&numvfs, b"0");
    r.check(
        "VFs gone",
        !r.host.exists(Path::new(&format!("{base}/virtfn0"))),
        libc::EEXIST,
    );
    let _ = r.write(&format!("{base}/sriov_drivers_autoprobe"), b"1");
}

/// What reading a file gives: its text without the one trailing newline (inner newlines
/// escaped, `(no newline)` appended when there was none), or the errno.
fn read_value(host: &dyn HostFs, path: &str) -> Outcome {
    match host.read(Path::new(path)) {
        Ok(text) => match text.strip_suffix('\n') {
            Some(line) => Outcome::Value(line.replace('\n', "\\n")),
            None => Outcome::Value(format!("{} (no newline)", text.replace('\n', "\\n"))),
        },
        Err(error) => Outcome::of(&Err(error)),
    }
}

/// A link's stored target, with a trailing IOMMU group number replaced by `N` (numbers are
/// the kernel's to choose).
fn link_value(host: &dyn HostFs, path: &str) -> Outcome {
    match host.read_link(Path::new(path)) {
        Ok(target) => {
            let text = target.to_string_lossy().into_owned();
            match text.rsplit_once("iommu_groups/") {
                Some((head, number)) if number.bytes().all(|b| b.is_ascii_digit()) => {
                    Outcome::Value(format!("{head}iommu_groups/N"))
                }
                _ => Outcome::Value(text),
            }
        }
        Err(error) => Outcome::of(&Err(error)),
    }
}

fn sorted_listing(host: &dyn HostFs, path: &str) -> Outcome {
    match host.list(Path::new(path)) {
        Ok(names) => {
            let mut names: Vec<String> = names
                .iter()
                .map(|n| n.to_string_lossy().into_owned())
                .collect();
            names.sort();
            Outcome::Value(names.join(" "))
        }
        Err(error) => Outcome::of(&Err(error)),
    }
}

impl Runner {
    fn value(&mut self, step: &str, expected: &str, path: &str) {
        let outcome = read_value(self.host.as_ref(), path);
        self.record(step, Outcome::Value(expected.to_string()), outcome);
    }

    fn link(&mut self, step: &str, expected: &str, path: &str) {
        let outcome = link_value(self.host.as_ref(), path);
        self.record(step, Outcome::Value(expected.to_string()), outcome);
    }
}

/// File formats, link texts and access rules, read the same way on both hosts.
fn scenario_formats(r: &mut Runner) {
    if r.has_type("mtty", "mtty-1") {
        let mtty1 = Runner::type_dir("mtty", "mtty-1");
        let listing = sorted_listing(r.host.as_ref(), &mtty1);
        r.record(
            "mtty-1 type directory (no description)",
            Outcome::Value("available_instances create device_api devices name".into()),
            listing,
        );
        r.value(
            "mtty-1 name",
            "Single port serial",
            &format!("{mtty1}/name"),
        );
        r.value(
            "mtty-2 name",
            "Dual port serial",
            &format!("{}/name", Runner::type_dir("mtty", "mtty-2")),
        );
        r.value(
            "mtty-1 device_api",
            "vfio-pci",
            &format!("{mtty1}/device_api"),
        );
        r.link(
            "mdev_bus link of mtty",
            "../../devices/virtual/mtty/mtty",
            &format!("{MDEV_BUS}/mtty"),
        );
        let read_create = r
            .host
            .read(Path::new(&format!("{mtty1}/create")))
            .map(|_| ());
        r.record(
            "read a write-only create",
            Outcome::errno(libc::EACCES),
            Outcome::of(&read_create),
        );
        r.step_write(
            "write a read-only available_instances",
            Outcome::errno(libc::EACCES),
            &format!("{mtty1}/available_instances"),
            b"1",
        );
        r.step_write(
            "empty write to create",
            Outcome::Ok,
            &format!("{mtty1}/create"),
            b"",
        );
        let uuid = test_uuid(50);
        let created = r.create("mtty", "mtty-2", &uuid);
        r.record("create an mtty-2", Outcome::Ok, Outcome::of(&created));
        let dev = format!("{MDEV_DEVICES}/{uuid}");
        r.link(
            "mdev device link",
            &format!("../../../devices/virtual/mtty/mtty/{uuid}"),
            &dev,
        );
        r.link(
            "mdev iommu_group link",
            "../../../../../kernel/iommu_groups/N",
            &format!("{dev}/iommu_group"),
        );
        r.link(
            "mdev driver link",
            "../../../../../bus/mdev/drivers/mtty",
            &format!("{dev}/driver"),
        );
        r.link(
            "mdev mdev_type link",
            "../mdev_supported_types/mtty-2",
            &format!("{dev}/mdev_type"),
        );
        r.link(
            "type devices/ link",
            &format!("../../../{uuid}"),
            &format!("{}/devices/{uuid}", Runner::type_dir("mtty", "mtty-2")),
        );
        r.value(
            "mtty vendor/sample_mdev_dev",
            &format!("This is MDEV {uuid}"),
            &format!("{dev}/vendor/sample_mdev_dev"),
        );
        r.step_write(
            "remove with an overflowing number",
            Outcome::errno(libc::EINVAL),
            &format!("{dev}/remove"),
            b"99999999999999999999999",
        );
        r.step_write("remove with 2", Outcome::Ok, &format!("{dev}/remove"), b"2");
        r.check("device gone after 2", !r.device_exists(&uuid), libc::EEXIST);
    } else {
        r.skip("mdev formats", Outcome::Ok, "no mtty parent");
    }
    if r.has_type("mbochs", "mbochs-small") {
        let small = Runner::type_dir("mbochs", "mbochs-small");
        r.value(
            "mbochs-small name",
            "mbochs-small",
            &format!("{small}/name"),
        );
        r.value(
            "mbochs-small description",
            "virtual display, 4 MB video memory",
            &format!("{small}/description"),
        );
        let uuid = test_uuid(51);
        let created = r.create("mbochs", "mbochs-medium", &uuid);
        r.record(
            "create an mbochs-medium",
            Outcome::Ok,
            Outcome::of(&created),
        );
        r.value(
            "mbochs vendor/memory",
            "16 MB",
            &format!("{MDEV_DEVICES}/{uuid}/vendor/memory"),
        );
        r.remove(&uuid);
    }
    if r.has_type("mdpy", "mdpy-hd") {
        let hd = Runner::type_dir("mdpy", "mdpy-hd");
        r.value(
            "mdpy-hd description",
            "virtual display, 1920x1080 framebuffer",
            &format!("{hd}/description"),
        );
        r.value(
            "mdpy-hd available_instances",
            "4",
            &format!("{hd}/available_instances"),
        );
        let uuid = test_uuid(52);
        let created = r.create("mdpy", "mdpy-xga", &uuid);
        r.record("create an mdpy-xga", Outcome::Ok, Outcome::of(&created));
        r.value(
            "mdpy vendor/resolution",
            "1024x768",
            &format!("{MDEV_DEVICES}/{uuid}/vendor/resolution"),
        );
        r.value(
            "mdpy-hd available_instances with one mdpy-xga",
            "3",
            &format!("{hd}/available_instances"),
        );
        r.remove(&uuid);
    }
    let Some((pf, Some(driver))) = find_pf(r.host.as_ref()) else {
        r.skip("PCI formats", Outcome::Ok, "no SR-IOV PF with a driver");
        return;
    };
    let base = format!("{PCI_DEVICES}/{pf}");
    for (file, expected) in [
        ("vendor", "0x1b36"),
        ("device", "0x0010"),
        ("subsystem_vendor", "0x1af4"),
        ("subsystem_device", "0x1100"),
        ("class", "0x010802"),
        ("numa_node", "-1"),
        ("sriov_totalvfs", "4"),
        ("sriov_offset", "1"),
        ("sriov_stride", "1"),
        ("sriov_vf_device", "10"),
        ("sriov_numvfs", "0"),
        ("sriov_drivers_autoprobe", "1"),
        ("driver_override", "(null)"),
    ] {
        r.value(&format!("PF {file}"), expected, &format!("{base}/{file}"));
    }
    r.link(
        "PF driver link",
        &format!("../../../../bus/pci/drivers/{driver}"),
        &format!("{base}/driver"),
    );
    r.link(
        "PF iommu_group link",
        "../../../../kernel/iommu_groups/N",
        &format!("{base}/iommu_group"),
    );
    r.step_write(
        "sriov_numvfs=70000 (u16 overflow)",
        Outcome::errno(libc::EINVAL),
        &format!("{base}/sriov_numvfs"),
        b"70000",
    );
    r.step_write(
        "sriov_drivers_autoprobe=maybe",
        Outcome::errno(libc::EINVAL),
        &format!("{base}/sriov_drivers_autoprobe"),
        b"maybe",
    );
    r.step_write(
        "sriov_drivers_autoprobe=0",
        Outcome::Ok,
        &format!("{base}/sriov_drivers_autoprobe"),
        b"0",
    );
    r.step_write(
        "sriov_numvfs=2",
        Outcome::Ok,
        &format!("{base}/sriov_numvfs"),
        b"2",
    );
    let vf1 = r
        .host
        .read_link(Path::new(&format!("{base}/virtfn1")))
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
    r.link(
        "virtfn0 link",
        "../0000:01:00.1",
        &format!("{base}/virtfn0"),
    );
    if let Some(vf) = vf1 {
        let vf_dir = format!("{PCI_DEVICES}/{vf}");
        r.link(
            "VF physfn link",
            &format!("../{pf}"),
            &format!("{vf_dir}/physfn"),
        );
        r.value("VF device", "0x0010", &format!("{vf_dir}/device"));
        r.value("VF vendor", "0x1b36", &format!("{vf_dir}/vendor"));
        r.check(
            "an unbound VF has no driver link",
            !r.host.exists(Path::new(&format!("{vf_dir}/driver"))),
            libc::EEXIST,
        );
        let group = link_value(r.host.as_ref(), &format!("{vf_dir}/iommu_group"));
        r.record(
            "VF iommu_group link",
            Outcome::Value("../../../../kernel/iommu_groups/N".into()),
            group,
        );
        let node = r
            .host
            .read_link(Path::new(&format!("{vf_dir}/iommu_group")))
            .ok()
            .and_then(|t| {
                t.file_name()
                    .map(|n| format!("/dev/vfio/{}", n.to_string_lossy()))
            });
        r.check(
            "no /dev/vfio node for a VF without a VFIO driver",
            node.is_some_and(|n| !r.host.exists(Path::new(&n))),
            libc::EEXIST,
        );
        if r.host.is_dir(Path::new("/sys/bus/pci/drivers/vfio-pci")) {
            r.step_write(
                "bind to vfio-pci without driver_override",
                Outcome::errno(libc::ENODEV),
                "/sys/bus/pci/drivers/vfio-pci/bind",
                vf.as_bytes(),
            );
        }
        r.step_write(
            &format!("unbind a VF from {driver} it is not bound to"),
            Outcome::errno(libc::ENODEV),
            &format!("/sys/bus/pci/drivers/{driver}/unbind"),
            vf.as_bytes(),
        );
        r.step_write(
            "VF driver_override=vfio-pci then text",
            Outcome::Ok,
            &format!("{vf_dir}/driver_override"),
            b"vfio-pci\nrest",
        );
        r.value(
            "VF driver_override after a newline",
            "vfio-pci",
            &format!("{vf_dir}/driver_override"),
        );
        r.step_write(
            "VF driver_override cleared with a newline",
            Outcome::Ok,
            &format!("{vf_dir}/driver_override"),
            b"\n",
        );
        r.value(
            "VF driver_override after clearing",
            "(null)",
            &format!("{vf_dir}/driver_override"),
        );
    } else {
        r.skip("VF formats", Outcome::Ok, "no VF appeared");
    }
    let _ = r.write(&format!("{base}/sriov_numvfs"), b"0");
    let _ = r.write(&format!("{base}/sriov_drivers_autoprobe"), b"1");
    r.value(
        "PF sriov_numvfs after the run",
        "0",
        &format!("{base}/sriov_numvfs"),
    );
}
