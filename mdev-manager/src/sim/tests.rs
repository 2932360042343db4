//! Unit tests of the kernel double against the real-kernel facts in `docs/simulated-host.md`.

use std::path::Path;
use std::sync::mpsc::channel;
use std::time::Duration;

use super::*;

const U1: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
const U2: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002";
const MTTY1: &str = "/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1";
const MTTY2: &str = "/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2";
const PF: &str = "/sys/bus/pci/devices/0000:01:00.0";

fn samples() -> SimHost {
    SimHost::builtin("samples").unwrap()
}

fn p(text: &str) -> &Path {
    Path::new(text)
}

fn errno_of(result: io::Result<()>) -> Option<i32> {
    result.err().and_then(|e| e.raw_os_error())
}

fn read(host: &SimHost, path: &str) -> String {
    host.read(p(path))
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
}

fn uuid(n: usize) -> String {
    format!("00000000-0000-0000-0000-{n:012x}")
}

#[test]
fn type_directories_have_the_kernel_files() {
    let host = samples();
    let mut mtty: Vec<_> = host.list(p(MTTY1)).unwrap();
    mtty.sort();
    assert_eq!(
        mtty,
        [
            "available_instances",
            "create",
            "device_api",
            "devices",
            "name"
        ]
    );
    assert_eq!(
        read(&host, &format!("{MTTY1}/name")),
        "Single port serial\n"
    );
    assert_eq!(read(&host, &format!("{MTTY1}/available_instances")), "24\n");
    assert_eq!(read(&host, &format!("{MTTY2}/available_instances")), "12\n");
    assert_eq!(read(&host, &format!("{MTTY1}/device_api")), "vfio-pci\n");
    let mbochs = "/sys/class/mdev_bus/mbochs/mdev_supported_types";
    assert_eq!(
        read(&host, &format!("{mbochs}/mbochs-small/available_instances")),
        "16\n"
    );
    assert_eq!(
        read(
            &host,
            &format!("{mbochs}/mbochs-medium/available_instances")
        ),
        "4\n"
    );
    assert_eq!(
        read(&host, &format!("{mbochs}/mbochs-large/available_instances")),
        "1\n"
    );
    assert_eq!(
        read(&host, &format!("{mbochs}/mbochs-medium/description")),
        "virtual display, 16 MB video memory\n"
    );
    assert_eq!(
        read(
            &host,
            "/sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-hd/available_instances"
        ),
        "4\n"
    );
    assert_eq!(
        host.read_link(p("/sys/class/mdev_bus/mtty")).unwrap(),
        p("../../devices/virtual/mtty/mtty")
    );
    assert_eq!(
        errno_of(host.read(p(&format!("{MTTY1}/create"))).map(|_| ())),
        Some(libc::EACCES)
    );
    assert_eq!(
        errno_of(host.write(p(&format!("{MTTY1}/available_instances")), b"3")),
        Some(libc::EACCES)
    );
}

#[test]
fn create_makes_a_device_with_group_node_and_links() {
    let host = samples();
    host.write(p(&format!("{MTTY2}/create")), format!("{U1}\n").as_bytes())
        .unwrap();
    let dev = format!("/sys/bus/mdev/devices/{U1}");
    assert_eq!(
        host.read_link(p(&dev)).unwrap(),
        PathBuf::from(format!("../../../devices/virtual/mtty/mtty/{U1}"))
    );
    assert_eq!(
        host.read_link(p(&format!("{dev}/mdev_type"))).unwrap(),
        p("../mdev_supported_types/mtty-2")
    );
    assert_eq!(
        host.read_link(p(&format!("{dev}/driver"))).unwrap(),
        p("../../../../../bus/mdev/drivers/mtty")
    );
    let group_link = host.read_link(p(&format!("{dev}/iommu_group"))).unwrap();
    let group: u32 = group_link
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(group_link.starts_with("../../../../../kernel/iommu_groups"));
    assert!(host.exists(p(&format!("/dev/vfio/{group}"))));
    assert!(host.is_dir(p(&format!("/sys/kernel/iommu_groups/{group}/devices/{U1}"))));
    assert!(host.is_dir(p(&format!("{dev}/vfio-dev"))));
    assert_eq!(host.list(p(&format!("{dev}/vfio-dev"))).unwrap().len(), 1);
    assert!(host.is_dir(p(&format!("{MTTY2}/devices/{U1}"))));
    assert_eq!(
        read(&host, &format!("{dev}/vendor/sample_mdev_dev")),
        format!("This is MDEV {U1}\n")
    );
    assert_eq!(read(&host, &format!("{MTTY2}/available_instances")), "11\n");
    assert_eq!(read(&host, &format!("{MTTY1}/available_instances")), "22\n");
    // A second mdev gets a group of its own.
    host.write(p(&format!("{MTTY1}/create")), U2.as_bytes())
        .unwrap();
    let second = host
        .read_link(p(&format!("/sys/bus/mdev/devices/{U2}/iommu_group")))
        .unwrap();
    assert_ne!(second, group_link);
}

#[test]
fn create_input_rules() {
    let host = samples();
    let create = format!("{MTTY1}/create");
    let upper = "83B8F4F2-509F-382F-3C1E-E6BFE0FA10AA";
    host.write(p(&create), upper.as_bytes()).unwrap();
    assert!(host.exists(p(&format!(
        "/sys/bus/mdev/devices/{}",
        upper.to_ascii_lowercase()
    ))));
    host.write(p(&create), format!("{U1}x").as_bytes()).unwrap();
    for bad in [
        &b"not-a-uuid"[..],
        &U2.as_bytes()[..35],
        b"83b8f4f2509f382f3c1ee6bfe0fa10020000",
        b"83b8f4f2-509f-382f-3c1e-e6bfe0fa100z",
        b"{83b8f4f2-509f-382f-3c1e-e6bfe0fa1002}",
        format!("{U2}\n\n").as_bytes(),
    ] {
        assert_eq!(
            errno_of(host.write(p(&create), bad)),
            Some(libc::EINVAL),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(host.mdev_uuids().len(), 2);
    assert_eq!(
        errno_of(host.write(p(&create), U1.as_bytes())),
        Some(libc::EEXIST)
    );
    let other = "/sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-vga/create";
    assert_eq!(
        errno_of(host.write(p(other), U1.as_bytes())),
        Some(libc::EEXIST)
    );
}

#[test]
fn exhaustion_errno_depends_on_who_counts() {
    let host = samples();
    for n in 0..12 {
        host.write(p(&format!("{MTTY2}/create")), uuid(n).as_bytes())
            .unwrap();
    }
    assert_eq!(read(&host, &format!("{MTTY1}/available_instances")), "0\n");
    assert_eq!(
        errno_of(host.write(p(&format!("{MTTY1}/create")), uuid(100).as_bytes())),
        Some(libc::ENOSPC)
    );
    let mbochs = "/sys/class/mdev_bus/mbochs/mdev_supported_types";
    host.write(
        p(&format!("{mbochs}/mbochs-medium/create")),
        uuid(200).as_bytes(),
    )
    .unwrap();
    assert_eq!(
        read(&host, &format!("{mbochs}/mbochs-large/available_instances")),
        "0\n"
    );
    assert_eq!(
        read(&host, &format!("{mbochs}/mbochs-small/available_instances")),
        "12\n"
    );
    assert_eq!(
        errno_of(host.write(
            p(&format!("{mbochs}/mbochs-large/create")),
            uuid(201).as_bytes()
        )),
        Some(libc::ENOSPC)
    );
    let mdpy = "/sys/class/mdev_bus/mdpy/mdev_supported_types";
    for n in 0..4 {
        let kind = ["vga", "xga", "hd", "vga"][n];
        host.write(
            p(&format!("{mdpy}/mdpy-{kind}/create")),
            uuid(300 + n).as_bytes(),
        )
        .unwrap();
    }
    assert_eq!(
        read(&host, &format!("{mdpy}/mdpy-xga/available_instances")),
        "0\n"
    );
    assert_eq!(
        errno_of(host.write(p(&format!("{mdpy}/mdpy-hd/create")), uuid(400).as_bytes())),
        Some(libc::EUSERS)
    );
}

#[test]
fn remove_semantics() {
    let host = samples();
    host.write(p(&format!("{MTTY1}/create")), U1.as_bytes())
        .unwrap();
    let remove = format!("/sys/bus/mdev/devices/{U1}/remove");
    host.write(p(&remove), b"0").unwrap();
    assert!(host.exists(p(&remove)));
    assert_eq!(errno_of(host.write(p(&remove), b"x")), Some(libc::EINVAL));
    let group = host
        .read_link(p(&format!("/sys/bus/mdev/devices/{U1}/iommu_group")))
        .unwrap();
    let group = group.file_name().unwrap().to_str().unwrap().to_string();
    host.write(p(&remove), b"1\n").unwrap();
    assert!(!host.exists(p(&format!("/sys/bus/mdev/devices/{U1}"))));
    assert!(!host.exists(p(&format!("/dev/vfio/{group}"))));
    assert!(!host.exists(p(&format!("/sys/kernel/iommu_groups/{group}"))));
    assert_eq!(host.list(p(&format!("{MTTY1}/devices"))).unwrap().len(), 0);
    assert_eq!(errno_of(host.write(p(&remove), b"1")), Some(libc::ENOENT));
    assert_eq!(read(&host, &format!("{MTTY1}/available_instances")), "24\n");
}

#[test]
fn remove_blocks_while_the_device_is_held() {
    let host = samples();
    host.write(p(&format!("{MTTY1}/create")), U1.as_bytes())
        .unwrap();
    let device = format!("/sys/bus/mdev/devices/{U1}");
    let holder = host.hold_device(p(&device), "qemu-system-x86").unwrap();
    let group = holder.group();
    // Holder detection through the seam, as the engine does it.
    let fd_dir = format!("/proc/{}/fd", holder.pid());
    let targets: Vec<PathBuf> = host
        .list(p(&fd_dir))
        .unwrap()
        .iter()
        .map(|fd| host.read_link(&Path::new(&fd_dir).join(fd)).unwrap())
        .collect();
    assert!(targets.contains(&PathBuf::from(format!("/dev/vfio/{group}"))));
    assert_eq!(
        read(&host, &format!("/proc/{}/comm", holder.pid())),
        "qemu-system-x86\n"
    );
    assert_eq!(
        host.open_vfio_group(group, "other")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EBUSY)
    );

    let (done_tx, done_rx) = channel();
    let writer = host.clone();
    let remove = format!("{device}/remove");
    std::thread::spawn(move || {
        let _ = done_tx.send(writer.write(Path::new(&remove), b"1"));
    });
    // Wait until the writer is really blocked inside the kernel double.
    while host.blocked_writes().is_empty() {
        std::thread::yield_now();
    }
    assert!(done_rx.try_recv().is_err());
    assert!(
        !host.exists(p(&format!("{device}/remove"))),
        "remove file goes first"
    );
    assert!(host.exists(p(&device)), "device stays until released");
    holder.release();
    let result = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("remove finished after release");
    assert!(result.is_ok());
    assert!(!host.exists(p(&device)));
    assert!(host.blocked_writes().is_empty());
}

#[test]
fn events_follow_kernel_order_for_create_and_remove() {
    let host = samples();
    let events = host.subscribe();
    host.write(p(&format!("{MTTY1}/create")), U1.as_bytes())
        .unwrap();
    host.write(p(&format!("/sys/bus/mdev/devices/{U1}/remove")), b"1")
        .unwrap();
    let seen: Vec<(UeventAction, String)> =
        events.try_iter().map(|e| (e.action, e.subsystem)).collect();
    let expected = [
        (UeventAction::Add, "mdev"),
        (UeventAction::Add, "vfio-dev"),
        (UeventAction::Add, "vfio"),
        (UeventAction::Bind, "mdev"),
        (UeventAction::Remove, "vfio-dev"),
        (UeventAction::Remove, "vfio"),
        (UeventAction::Unbind, "mdev"),
        (UeventAction::Remove, "mdev"),
    ];
    let expected: Vec<(UeventAction, String)> =
        expected.iter().map(|(a, s)| (*a, s.to_string())).collect();
    assert_eq!(seen, expected);
}

#[test]
fn rmmod_removes_instances_and_modprobe_brings_the_parent_back() {
    let host = samples();
    host.write(p(&format!("{MTTY1}/create")), U1.as_bytes())
        .unwrap();
    let events = host.subscribe();
    host.unload_module("mtty").unwrap();
    assert!(!host.exists(p("/sys/class/mdev_bus/mtty")));
    assert!(!host.exists(p(&format!("/sys/bus/mdev/devices/{U1}"))));
    assert!(!host.exists(p("/sys/devices/virtual/mtty")));
    let first = events.try_recv().unwrap();
    assert_eq!(
        (first.action, first.property("MDEV_STATE")),
        (UeventAction::Change, Some("unregistered"))
    );
    host.load_module("mtty").unwrap();
    assert_eq!(read(&host, &format!("{MTTY1}/available_instances")), "24\n");
    let last = events.try_iter().last().unwrap();
    assert_eq!(
        (last.action, last.property("MDEV_STATE")),
        (UeventAction::Change, Some("registered"))
    );
    assert!(matches!(
        host.load_module("nope"),
        Err(SimError::NoSuchModule(_))
    ));
}

#[test]
fn sriov_numvfs_errors_and_vf_creation() {
    let host = samples();
    let numvfs = format!("{PF}/sriov_numvfs");
    assert_eq!(read(&host, &format!("{PF}/sriov_totalvfs")), "4\n");
    assert_eq!(read(&host, &format!("{PF}/sriov_offset")), "1\n");
    assert_eq!(read(&host, &format!("{PF}/sriov_stride")), "1\n");
    assert_eq!(read(&host, &format!("{PF}/sriov_vf_device")), "10\n");
    assert_eq!(read(&host, &format!("{PF}/sriov_drivers_autoprobe")), "1\n");
    assert_eq!(read(&host, &format!("{PF}/vendor")), "0x1b36\n");
    assert_eq!(read(&host, &format!("{PF}/class")), "0x010802\n");
    assert_eq!(read(&host, &format!("{PF}/driver_override")), "(null)\n");
    assert_eq!(
        host.read_link(p(&format!("{PF}/driver"))).unwrap(),
        p("../../../../bus/pci/drivers/nvme")
    );
    assert_eq!(errno_of(host.write(p(&numvfs), b"5")), Some(libc::ERANGE));
    assert_eq!(errno_of(host.write(p(&numvfs), b"abc")), Some(libc::EINVAL));
    host.write(p(&format!("{PF}/sriov_drivers_autoprobe")), b"0")
        .unwrap();
    host.write(p(&numvfs), b"2\n").unwrap();
    assert_eq!(read(&host, &numvfs), "2\n");
    assert_eq!(
        host.read_link(p(&format!("{PF}/virtfn1"))).unwrap(),
        p("../0000:01:00.2")
    );
    assert_eq!(
        host.read_link(p("/sys/bus/pci/devices/0000:01:00.1/physfn"))
            .unwrap(),
        p("../0000:01:00.0")
    );
    assert_eq!(
        read(&host, "/sys/bus/pci/devices/0000:01:00.1/device"),
        "0x0010\n"
    );
    assert!(!host.exists(p("/sys/bus/pci/devices/0000:01:00.1/driver")));
    assert_eq!(errno_of(host.write(p(&numvfs), b"3")), Some(libc::EBUSY));
    host.write(p(&numvfs), b"2").unwrap();
    host.write(p(&numvfs), b"0").unwrap();
    assert!(!host.exists(p("/sys/bus/pci/devices/0000:01:00.1")));
    assert!(!host.exists(p(&format!("{PF}/virtfn0"))));
    // Without the PF driver the core refuses with ENOENT.
    host.write(p("/sys/bus/pci/drivers/nvme/unbind"), b"0000:01:00.0")
        .unwrap();
    assert_eq!(errno_of(host.write(p(&numvfs), b"2")), Some(libc::ENOENT));
    assert_eq!(
        errno_of(host.write(p(&numvfs), b"0")),
        None,
        "no change is success even without a driver"
    );
}
