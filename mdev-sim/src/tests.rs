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
fn remove_completes_while_a_process_holds_only_the_group_node() {
    // The kernel waits for device fds, not for the group node: libvirt's nodedev-destroy
    // keeps `/dev/vfio/<group>` open while mdevctl writes `remove`, and that completes.
    let host = samples();
    host.write(p(&format!("{MTTY1}/create")), U1.as_bytes())
        .unwrap();
    let device = format!("/sys/bus/mdev/devices/{U1}");
    let group: u32 = host
        .read_link(p(&format!("{device}/iommu_group")))
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .parse()
        .unwrap();
    let opener = host.open_vfio_group_node(group, "libvirtd").unwrap();
    let fd_dir = format!("/proc/{}/fd", opener.pid());
    let targets: Vec<PathBuf> = host
        .list(p(&fd_dir))
        .unwrap()
        .iter()
        .map(|fd| host.read_link(&Path::new(&fd_dir).join(fd)).unwrap())
        .collect();
    assert!(targets.contains(&PathBuf::from(format!("/dev/vfio/{group}"))));
    assert!(
        !targets.contains(&PathBuf::from("anon_inode:[vfio-device]")),
        "{targets:?}"
    );
    assert_eq!(
        host.open_vfio_group(group, "qemu")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EBUSY),
        "the group is single-open whether or not a device fd was taken"
    );
    host.write(p(&format!("{device}/remove")), b"1").unwrap();
    assert!(host.blocked_writes().is_empty());
    assert!(!host.exists(p(&device)));
    opener.release();
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
    // Before the vendor remove() waits, the core took away the bus link, the type links,
    // the attributes and the driver links; the directory, its group link and vfio-dev stay.
    assert!(!host.exists(p(&device)), "bus link gone while blocked");
    let dir = format!("/sys/devices/virtual/mtty/mtty/{U1}");
    assert!(host.exists(p(&format!("{dir}/iommu_group"))));
    assert!(host.is_dir(p(&format!("{dir}/vfio-dev"))));
    assert!(!host.exists(p(&format!("{dir}/driver"))));
    assert!(!host.exists(p(&format!("{dir}/mdev_type"))));
    assert!(!host.exists(p(&format!("{dir}/vendor"))));
    assert!(host
        .list(p(&format!("{MTTY1}/devices")))
        .unwrap()
        .is_empty());
    assert_eq!(
        errno_of(host.write(p(&format!("{MTTY1}/create")), U1.as_bytes())),
        Some(libc::EEXIST)
    );
    holder.release();
    let result = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("remove finished after release");
    assert!(result.is_ok());
    assert!(!host.exists(p(&dir)));
    assert!(!host.exists(p(&format!("/dev/vfio/{group}"))));
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
        (UeventAction::Add, "vfio"),
        (UeventAction::Add, "vfio-dev"),
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
    // The instance goes before the parent says it is unregistered.
    let states: Vec<(UeventAction, String, Option<String>)> = events
        .try_iter()
        .map(|e| {
            (
                e.action,
                e.subsystem.clone(),
                e.property("MDEV_STATE").map(str::to_string),
            )
        })
        .collect();
    let mdev_removed = states
        .iter()
        .position(|(a, s, _)| *a == UeventAction::Remove && s == "mdev");
    let unregistered = states
        .iter()
        .position(|(_, _, m)| m.as_deref() == Some("unregistered"));
    assert!(
        mdev_removed.is_some() && mdev_removed < unregistered,
        "{states:?}"
    );
    host.load_module("mtty").unwrap();
    assert_eq!(read(&host, &format!("{MTTY1}/available_instances")), "24\n");
    let registered = events
        .try_iter()
        .find(|e| e.property("MDEV_STATE").is_some())
        .unwrap();
    assert_eq!(registered.property("MDEV_STATE"), Some("registered"));
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

fn default_host() -> SimHost {
    SimHost::builtin("default").unwrap()
}

const T4: &str = "/sys/class/mdev_bus/0000:3b:00.0/mdev_supported_types";
const GVT: &str = "/sys/class/mdev_bus/0000:00:02.0/mdev_supported_types";
const H200: &str = "/sys/bus/pci/devices/0000:4b:00.0";

#[test]
fn nvidia_legacy_types_are_homogeneous() {
    let host = default_host();
    assert_eq!(
        read(&host, &format!("{T4}/nvidia-230/name")),
        "GRID T4-1Q\n"
    );
    assert_eq!(
        read(&host, &format!("{T4}/nvidia-231/description")),
        "num_heads=4, frl_config=60, framebuffer=2048M, max_resolution=7680x4320, max_instance=8\n"
    );
    assert_eq!(
        read(&host, &format!("{T4}/nvidia-231/available_instances")),
        "8\n"
    );
    host.write(p(&format!("{T4}/nvidia-231/create")), U1.as_bytes())
        .unwrap();
    assert_eq!(
        read(&host, &format!("{T4}/nvidia-231/available_instances")),
        "7\n"
    );
    assert_eq!(
        read(&host, &format!("{T4}/nvidia-230/available_instances")),
        "0\n"
    );
    assert_eq!(
        errno_of(host.write(p(&format!("{T4}/nvidia-230/create")), U2.as_bytes())),
        Some(libc::ENOSPC)
    );
    let params = format!("/sys/bus/mdev/devices/{U1}/nvidia/vgpu_params");
    assert_eq!(read(&host, &params), "");
    host.write(p(&params), b"frame_rate_limiter=0, disable_vnc=1")
        .unwrap();
    assert_eq!(read(&host, &params), "frame_rate_limiter=0, disable_vnc=1");
    assert_eq!(
        host.read_link(p(&format!("/sys/bus/mdev/devices/{U1}")))
            .unwrap(),
        p(&format!(
            "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/{U1}"
        ))
    );
    host.write(p(&format!("/sys/bus/mdev/devices/{U1}/remove")), b"1")
        .unwrap();
    assert_eq!(
        read(&host, &format!("{T4}/nvidia-230/available_instances")),
        "16\n"
    );
}

#[test]
fn gvt_g_matches_a_real_gen9_listing() {
    let host = default_host();
    let available: Vec<String> = ["1", "2", "4", "8"]
        .iter()
        .map(|n| {
            read(
                &host,
                &format!("{GVT}/i915-GVTg_V5_{n}/available_instances"),
            )
        })
        .collect();
    assert_eq!(available, ["1\n", "2\n", "5\n", "7\n"]);
    assert_eq!(
        read(&host, &format!("{GVT}/i915-GVTg_V5_4/description")),
        "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n"
    );
    assert_eq!(
        read(&host, &format!("{GVT}/i915-GVTg_V5_4/name")),
        "GVTg_V5_4\n"
    );
    // A V5_1 takes 512 of 640 MB low GM and 2048 of 2688 MB high GM: V5_2 falls to 0,
    // V5_8 to 1 (high GM 640 / 384).
    host.write(p(&format!("{GVT}/i915-GVTg_V5_1/create")), U1.as_bytes())
        .unwrap();
    assert_eq!(
        read(&host, &format!("{GVT}/i915-GVTg_V5_2/available_instances")),
        "0\n"
    );
    assert_eq!(
        read(&host, &format!("{GVT}/i915-GVTg_V5_8/available_instances")),
        "1\n"
    );
    assert_eq!(
        errno_of(host.write(p(&format!("{GVT}/i915-GVTg_V5_2/create")), U2.as_bytes())),
        Some(libc::ENOSPC)
    );
}

#[test]
fn h200_vfs_offer_vgpu_types_and_shrink_when_full() {
    let host = default_host();
    assert!(!host.exists(p(&format!("{H200}/virtfn0"))));
    host.write(p(&format!("{H200}/sriov_numvfs")), b"32")
        .unwrap();
    let vf0 = host.read_link(p(&format!("{H200}/virtfn0"))).unwrap();
    assert_eq!(vf0, p("../0000:4b:00.4"));
    let vf = "/sys/bus/pci/devices/0000:4b:00.4";
    assert_eq!(
        host.read_link(p(&format!("{vf}/driver")))
            .unwrap()
            .file_name()
            .unwrap(),
        "nvidia"
    );
    let creatable = read(&host, &format!("{vf}/nvidia/creatable_vgpu_types"));
    assert!(
        creatable.starts_with("ID    : vGPU Name\n1401  : NVIDIA H200X-4C\n"),
        "{creatable}"
    );
    assert_eq!(creatable.lines().count(), 10);
    assert_eq!(
        read(&host, &format!("{vf}/nvidia/current_vgpu_type")),
        "0\n"
    );
    // Only a one-instance type: the GPU is full after one.
    host.write(p(&format!("{vf}/nvidia/current_vgpu_type")), b"1409")
        .unwrap();
    assert_eq!(
        read(&host, &format!("{vf}/nvidia/creatable_vgpu_types")),
        "ID    : vGPU Name\n"
    );
    let vf1 = "/sys/bus/pci/devices/0000:4b:00.5";
    assert_eq!(
        read(&host, &format!("{vf1}/nvidia/creatable_vgpu_types")),
        "ID    : vGPU Name\n"
    );
    assert_eq!(
        errno_of(host.write(p(&format!("{vf1}/nvidia/current_vgpu_type")), b"1409")),
        Some(libc::ENOSPC)
    );
    assert_eq!(
        errno_of(host.write(p(&format!("{vf1}/nvidia/current_vgpu_type")), b"1401")),
        Some(libc::EINVAL)
    );
    assert_eq!(
        errno_of(host.write(p(&format!("{vf1}/nvidia/current_vgpu_type")), b"77")),
        Some(libc::ENODEV)
    );
    assert_eq!(
        errno_of(host.write(p(&format!("{vf1}/nvidia/current_vgpu_type")), b"x")),
        Some(libc::EINVAL)
    );
    // The vGPU makes the VF a VFIO device; while a VMM holds it, it cannot be destroyed.
    let group = host.read_link(p(&format!("{vf}/iommu_group"))).unwrap();
    let group = group.file_name().unwrap().to_str().unwrap().to_string();
    assert!(host.exists(p(&format!("/dev/vfio/{group}"))));
    let holder = host.hold_device(p(vf), "qemu-system-x86").unwrap();
    assert_eq!(
        errno_of(host.write(p(&format!("{vf}/nvidia/current_vgpu_type")), b"0")),
        Some(libc::EBUSY)
    );
    drop(holder);
    host.write(p(&format!("{vf}/nvidia/current_vgpu_type")), b"0")
        .unwrap();
    assert!(!host.exists(p(&format!("/dev/vfio/{group}"))));
    assert_eq!(
        read(&host, &format!("{vf1}/nvidia/creatable_vgpu_types"))
            .lines()
            .count(),
        10
    );
}

#[test]
fn amd_gim_enables_its_vfs_itself() {
    let host = default_host();
    let pf = "/sys/bus/pci/devices/0000:0c:00.0";
    assert_eq!(read(&host, &format!("{pf}/sriov_numvfs")), "4\n");
    assert_eq!(
        host.read_link(p(&format!("{pf}/virtfn0"))).unwrap(),
        p("../0000:0c:02.0")
    );
    assert_eq!(
        read(&host, "/sys/bus/pci/devices/0000:0c:02.3/device"),
        "0x692f\n"
    );
    // GIM has no sriov_configure.
    assert_eq!(
        errno_of(host.write(p(&format!("{pf}/sriov_numvfs")), b"0")),
        Some(libc::ENOENT)
    );
    host.unload_module("gim").unwrap();
    assert_eq!(read(&host, &format!("{pf}/sriov_numvfs")), "0\n");
    assert!(!host.exists(p("/sys/bus/pci/devices/0000:0c:02.0")));
    host.load_module("gim").unwrap();
    assert_eq!(read(&host, &format!("{pf}/sriov_numvfs")), "4\n");
}

#[test]
fn binding_follows_driver_override() {
    let host = samples();
    let numvfs = format!("{PF}/sriov_numvfs");
    host.write(p(&numvfs), b"2").unwrap();
    let vf = "/sys/bus/pci/devices/0000:01:00.1";
    // Autoprobe on: nvme probed the VF and failed, so it has no driver.
    assert!(!host.exists(p(&format!("{vf}/driver"))));
    // vfio-pci has no id table: without an override it does not match.
    assert_eq!(
        errno_of(host.write(p("/sys/bus/pci/drivers/vfio-pci/bind"), b"0000:01:00.1")),
        Some(libc::ENODEV)
    );
    host.write(p(&format!("{vf}/driver_override")), b"vfio-pci\ntrailing")
        .unwrap();
    assert_eq!(read(&host, &format!("{vf}/driver_override")), "vfio-pci\n");
    host.write(p("/sys/bus/pci/drivers/vfio-pci/bind"), b"0000:01:00.1\n")
        .unwrap();
    assert!(host.is_dir(p("/sys/bus/pci/drivers/vfio-pci/0000:01:00.1")));
    assert_eq!(host.list(p(&format!("{vf}/vfio-dev"))).unwrap().len(), 1);
    assert_eq!(
        errno_of(host.write(p("/sys/bus/pci/drivers/nvme/unbind"), b"0000:01:00.1")),
        Some(libc::ENODEV)
    );
    // Unbinding a held VFIO device blocks like removing it.
    let holder = host.hold_device(p(vf), "qemu").unwrap();
    let writer = host.clone();
    let done = std::thread::spawn(move || {
        writer.write(
            Path::new("/sys/bus/pci/drivers/vfio-pci/unbind"),
            b"0000:01:00.1",
        )
    });
    while host.blocked_writes().is_empty() {
        std::thread::yield_now();
    }
    drop(holder);
    done.join().unwrap().unwrap();
    assert!(!host.exists(p(&format!("{vf}/driver"))));
    // Clearing the override gives the device back to id matching.
    host.write(p(&format!("{vf}/driver_override")), b"\n")
        .unwrap();
    assert_eq!(read(&host, &format!("{vf}/driver_override")), "(null)\n");
    host.write(p("/sys/bus/pci/drivers_probe"), b"0000:01:00.1")
        .unwrap();
    assert!(!host.exists(p(&format!("{vf}/driver"))));
}

#[test]
fn reboot_loses_instances_vfs_and_holders() {
    let host = samples();
    host.write(p(&format!("{MTTY1}/create")), U1.as_bytes())
        .unwrap();
    host.write(p(&format!("{PF}/sriov_numvfs")), b"3").unwrap();
    let holder = host
        .hold_device(p(&format!("/sys/bus/mdev/devices/{U1}")), "qemu")
        .unwrap();
    let pid = holder.pid();
    host.unload_module("mdpy").unwrap();
    host.reboot();
    assert!(host.mdev_uuids().is_empty());
    assert_eq!(host.vf_count(), 0);
    assert!(!host.exists(p(&format!("/proc/{pid}"))));
    assert!(
        host.exists(p("/sys/class/mdev_bus/mdpy")),
        "modules come back as the topology says"
    );
    drop(holder);
    assert_eq!(read(&host, &format!("{MTTY1}/available_instances")), "24\n");
}

#[test]
fn a_write_blocked_across_reboot_fails_with_enodev() {
    let host = samples();
    host.write(p(&format!("{MTTY1}/create")), U1.as_bytes())
        .unwrap();
    let holder = host
        .hold_device(p(&format!("/sys/bus/mdev/devices/{U1}")), "qemu")
        .unwrap();
    let writer = host.clone();
    let remove = format!("/sys/bus/mdev/devices/{U1}/remove");
    let done = std::thread::spawn(move || writer.write(Path::new(&remove), b"1"));
    while host.blocked_writes().is_empty() {
        std::thread::yield_now();
    }
    host.reboot();
    assert_eq!(errno_of(done.join().unwrap()), Some(libc::ENODEV));
    drop(holder);
}

#[test]
fn rmmod_is_refused_while_a_device_is_held() {
    let host = samples();
    host.write(p(&format!("{MTTY1}/create")), U1.as_bytes())
        .unwrap();
    let holder = host
        .hold_device(p(&format!("/sys/bus/mdev/devices/{U1}")), "qemu")
        .unwrap();
    assert!(matches!(
        host.unload_module("mtty"),
        Err(SimError::ModuleInUse(_))
    ));
    assert_eq!(host.module_loaded("mtty"), Some(true));
    drop(holder);
    host.unload_module("mtty").unwrap();
    assert!(matches!(
        host.unload_module("mtty"),
        Err(SimError::NoSuchModule(_))
    ));
}

#[test]
fn faults_fail_delay_and_block() {
    let host = samples();
    let create = format!("{MTTY1}/create");
    let id = host.inject_fault(Fault::fail("*/mtty-1/create", libc::EIO).times(1));
    assert_eq!(
        errno_of(host.write(p(&create), U1.as_bytes())),
        Some(libc::EIO)
    );
    assert!(
        host.mdev_uuids().is_empty(),
        "a failed write changes nothing"
    );
    host.write(p(&create), U1.as_bytes()).unwrap();
    host.release_fault(id);

    host.inject_fault(Fault::slow(create.clone(), Duration::from_millis(50)).times(1));
    let started = std::time::Instant::now();
    host.write(p(&create), U2.as_bytes()).unwrap();
    assert!(started.elapsed() >= Duration::from_millis(50));

    // The pattern also matches the canonical path behind the class link.
    let gate = host.inject_fault(Fault::block("/sys/devices/virtual/mtty/mtty/*/remove"));
    let writer = host.clone();
    let done = std::thread::spawn(move || {
        writer.write(
            Path::new(&format!("/sys/bus/mdev/devices/{U1}/remove")),
            b"1",
        )
    });
    while host.blocked_writes().is_empty() {
        std::thread::yield_now();
    }
    assert!(
        host.exists(p(&format!("/sys/bus/mdev/devices/{U1}"))),
        "blocked before the store ran"
    );
    host.release_fault(gate);
    done.join().unwrap().unwrap();
    assert!(!host.exists(p(&format!("/sys/bus/mdev/devices/{U1}"))));
    host.write(p(&format!("/sys/bus/mdev/devices/{U2}/remove")), b"1")
        .unwrap();
}

#[test]
fn concurrent_creates_never_overcommit() {
    let host = samples();
    let mdpy = "/sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-vga/create";
    let threads: Vec<_> = (0..16)
        .map(|n| {
            let host = host.clone();
            std::thread::spawn(move || host.write(Path::new(mdpy), uuid(500 + n).as_bytes()))
        })
        .collect();
    let results: Vec<io::Result<()>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 4);
    assert!(results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .all(|e| e.raw_os_error() == Some(libc::EUSERS)));
    assert_eq!(host.mdev_uuids().len(), 4);
}

#[test]
fn module_load_events_match_the_kernel_order() {
    let host = samples();
    host.unload_module("mtty").unwrap();
    let events = host.subscribe();
    host.load_module("mtty").unwrap();
    let seen: Vec<String> = events
        .try_iter()
        .map(|e| format!("{} {} ({})", e.action.as_str(), e.devpath, e.subsystem))
        .collect();
    assert_eq!(
        seen,
        [
            "add /bus/mdev/drivers/mtty (drivers)",
            "add /class/mtty (class)",
            "add /devices/virtual/mtty/mtty (mtty)",
            "change /devices/virtual/mtty/mtty (mtty)",
            "add /module/mtty (module)",
        ]
    );
}

#[test]
fn refused_pool_create_shows_up_as_add_then_remove() {
    let host = samples();
    let large = "/sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-large";
    host.write(p(&format!("{large}/create")), U1.as_bytes())
        .unwrap();
    let events = host.subscribe();
    assert_eq!(
        errno_of(host.write(p(&format!("{large}/create")), U2.as_bytes())),
        Some(libc::ENOSPC)
    );
    let seen: Vec<UeventAction> = events.try_iter().map(|e| e.action).collect();
    assert_eq!(seen, [UeventAction::Add, UeventAction::Remove]);
}

#[test]
fn every_file_reads_like_sysfs() {
    for name in ["default", "samples", "scale", "scale-4096", "ampere"] {
        let host = SimHost::builtin(name).unwrap();
        for (path, value) in host.read_all_files() {
            match value {
                Ok(text) => {
                    let stored = path.ends_with("vgpu_params") || path == "/dev/null";
                    assert!(
                        stored || text.ends_with('\n'),
                        "{name}: {path} = {text:?} lacks the newline"
                    );
                }
                Err(errno) => {
                    let write_only = [
                        "create",
                        "remove",
                        "bind",
                        "unbind",
                        "drivers_probe",
                        "asymmetric_timeslice",
                    ]
                    .iter()
                    .any(|f| path.ends_with(f));
                    let device_node = path.starts_with("/dev/vfio/");
                    assert!(
                        write_only || device_node,
                        "{name}: {path} unreadable: {errno}"
                    );
                }
            }
        }
    }
}

#[test]
fn path_errors_are_the_kernels() {
    let host = samples();
    assert_eq!(
        errno_of(host.write(p("/sys/class/mdev_bus/none/x"), b"1")),
        Some(libc::ENOENT)
    );
    assert_eq!(
        errno_of(host.read(p("/sys/class/mdev_bus")).map(|_| ())),
        Some(libc::EISDIR)
    );
    assert_eq!(
        host.list(p(&format!("{MTTY1}/name")))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOTDIR)
    );
    assert_eq!(
        host.read_link(p(&format!("{MTTY1}/name")))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EINVAL)
    );
    assert!(!host.exists(p("/sys/../etc/passwd")));
    assert_eq!(
        errno_of(host.write(p("/dev/vfio/vfio"), b"1")),
        Some(libc::EINVAL)
    );
    // Empty writes never reach a store function.
    host.write(p(&format!("{MTTY1}/create")), b"").unwrap();
    assert!(host.mdev_uuids().is_empty());
}

/// Golden listing of each topology at boot: every entry, with file contents.
#[test]
fn golden_tree_listings() {
    for name in ["default", "samples", "scale", "ampere", "h200-real"] {
        let host = SimHost::builtin(name).unwrap();
        let values: std::collections::BTreeMap<String, String> = host
            .read_all_files()
            .into_iter()
            .map(|(path, value)| {
                (
                    path,
                    value
                        .unwrap_or_else(|errno| format!("<{errno}>"))
                        .escape_default()
                        .to_string(),
                )
            })
            .collect();
        let mut text = String::new();
        for line in host.tree_listing() {
            match values.get(&line) {
                Some(value) => text.push_str(&format!("{line} = {value}\n")),
                None => text.push_str(&format!("{line}\n")),
            }
        }
        let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("src/golden/{name}.txt"));
        if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
            std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
            std::fs::write(&golden, &text).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&golden)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", golden.display()));
        if expected != text {
            let first = expected.lines().zip(text.lines()).position(|(a, b)| a != b);
            panic!(
                "{name}: listing differs from {} at line {first:?} (UPDATE_GOLDEN=1 rewrites it)",
                golden.display()
            );
        }
    }
}

#[test]
fn a_gpu_parent_lives_while_its_pci_driver_is_bound() {
    let host = default_host();
    host.write(p(&format!("{T4}/nvidia-231/create")), U1.as_bytes())
        .unwrap();
    let holder = host
        .hold_device(p(&format!("/sys/bus/mdev/devices/{U1}")), "qemu")
        .unwrap();
    // Unbinding the GPU would remove its vGPUs: it blocks while one is held.
    let writer = host.clone();
    let done = std::thread::spawn(move || {
        writer.write(
            Path::new("/sys/bus/pci/drivers/nvidia/unbind"),
            b"0000:3b:00.0",
        )
    });
    while host.blocked_writes().is_empty() {
        std::thread::yield_now();
    }
    assert!(matches!(
        host.unload_module("nvidia"),
        Err(SimError::ModuleInUse(_))
    ));
    drop(holder);
    done.join().unwrap().unwrap();
    assert!(!host.exists(p("/sys/class/mdev_bus/0000:3b:00.0")));
    assert!(host.mdev_uuids().is_empty());
    host.write(p("/sys/bus/pci/drivers_probe"), b"0000:3b:00.0")
        .unwrap();
    assert_eq!(
        read(&host, &format!("{T4}/nvidia-231/available_instances")),
        "8\n"
    );
    // The vGPU manager module alone: parent goes, GPU stays bound.
    host.unload_module("nvidia_vgpu_vfio").unwrap();
    assert!(!host.exists(p("/sys/class/mdev_bus/0000:3b:00.0")));
    assert!(host.exists(p("/sys/bus/pci/devices/0000:3b:00.0/driver")));
    host.load_module("nvidia_vgpu_vfio").unwrap();
    assert!(host.exists(p(T4)));
}

#[test]
fn store_parsers_turn_every_parse_failure_into_einval() {
    let host = samples();
    host.write(p(&format!("{MTTY1}/create")), U1.as_bytes())
        .unwrap();
    let remove = format!("/sys/bus/mdev/devices/{U1}/remove");
    assert_eq!(
        errno_of(host.write(p(&remove), b"99999999999999999999999")),
        Some(libc::EINVAL)
    );
    assert_eq!(
        errno_of(host.write(p(&format!("{PF}/sriov_numvfs")), b"70000")),
        Some(libc::EINVAL)
    );
    assert_eq!(
        errno_of(host.write(p(&format!("{PF}/sriov_numvfs")), b"-1")),
        Some(libc::EINVAL)
    );
    assert_eq!(
        errno_of(host.write(p(&format!("{PF}/sriov_drivers_autoprobe")), b"maybe")),
        Some(libc::EINVAL)
    );
    // driver_override stops at a NUL like strlen() and at the first newline.
    host.write(p(&format!("{PF}/driver_override")), b"vfio-pci\0junk")
        .unwrap();
    assert_eq!(read(&host, &format!("{PF}/driver_override")), "vfio-pci\n");
    host.write(p(&format!("{PF}/driver_override")), b"\0")
        .unwrap();
    assert_eq!(read(&host, &format!("{PF}/driver_override")), "(null)\n");
    assert_eq!(
        errno_of(host.write(p(&format!("{PF}/driver_override")), &[b'a'; 4095])),
        Some(libc::EINVAL)
    );
}

#[test]
fn sample_drivers_vendor_attributes() {
    let host = samples();
    let mdpy = "/sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-xga/create";
    host.write(p(mdpy), U1.as_bytes()).unwrap();
    assert_eq!(
        read(
            &host,
            &format!("/sys/bus/mdev/devices/{U1}/vendor/resolution")
        ),
        "1024x768\n"
    );
    let mbochs = "/sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-medium/create";
    host.write(p(mbochs), U2.as_bytes()).unwrap();
    assert_eq!(
        read(&host, &format!("/sys/bus/mdev/devices/{U2}/vendor/memory")),
        "16 MB\n"
    );
}

#[test]
fn ampere_vfs_are_mdev_parents_with_one_instance_each() {
    let host = SimHost::builtin("ampere").unwrap();
    let pf = "/sys/bus/pci/devices/0000:08:00.0";
    assert!(host.list(p("/sys/class/mdev_bus")).unwrap().is_empty());
    host.write(p(&format!("{pf}/sriov_numvfs")), b"16").unwrap();
    assert_eq!(
        host.read_link(p(&format!("{pf}/virtfn11"))).unwrap(),
        p("../0000:08:01.7")
    );
    assert_eq!(host.list(p("/sys/class/mdev_bus")).unwrap().len(), 16);
    let types = |vf: &str| format!("/sys/class/mdev_bus/{vf}/mdev_supported_types");
    let vf0 = "0000:08:00.4";
    assert_eq!(
        read(&host, &format!("{}/nvidia-746/name", types(vf0))),
        "NVIDIA A2-4Q\n"
    );
    assert_eq!(
        read(
            &host,
            &format!("{}/nvidia-746/available_instances", types(vf0))
        ),
        "1\n"
    );
    host.write(
        p(&format!("{}/nvidia-754/create", types(vf0))),
        U1.as_bytes(),
    )
    .unwrap();
    // The VF holds one vGPU.
    assert_eq!(
        read(
            &host,
            &format!("{}/nvidia-754/available_instances", types(vf0))
        ),
        "0\n"
    );
    assert_eq!(
        errno_of(host.write(
            p(&format!("{}/nvidia-754/create", types(vf0))),
            U2.as_bytes()
        )),
        Some(libc::ENOSPC)
    );
    // Another VF: the same framebuffer size is still offered (4Q/4A/4C), others are not —
    // the pattern of the real A2 capture.
    let vf11 = "0000:08:01.7";
    let available: Vec<(String, String)> = host
        .list(p(&types(vf11)))
        .unwrap()
        .into_iter()
        .map(|t| t.to_string_lossy().into_owned())
        .map(|t| {
            let value = read(&host, &format!("{}/{t}/available_instances", types(vf11)));
            (t, value)
        })
        .filter(|(_, v)| v == "1\n")
        .collect();
    let mut open: Vec<&str> = available.iter().map(|(t, _)| t.as_str()).collect();
    open.sort();
    assert_eq!(open, ["nvidia-746", "nvidia-751", "nvidia-754"]);
    // Four 4 GB vGPUs fill the 16 GB GPU.
    for (n, vf) in ["0000:08:00.5", "0000:08:00.6", "0000:08:00.7"]
        .iter()
        .enumerate()
    {
        host.write(
            p(&format!("{}/nvidia-746/create", types(vf))),
            uuid(600 + n).as_bytes(),
        )
        .unwrap();
    }
    assert_eq!(
        read(
            &host,
            &format!("{}/nvidia-746/available_instances", types(vf11))
        ),
        "0\n"
    );
    // Disabling the VFs takes their parents and vGPUs.
    host.write(p(&format!("{pf}/sriov_numvfs")), b"0").unwrap();
    assert!(host.mdev_uuids().is_empty());
    assert!(host.list(p("/sys/class/mdev_bus")).unwrap().is_empty());
}

#[test]
fn holder_fds_stat_like_proc_magic_links() {
    let host = samples();
    host.write(p(&format!("{MTTY1}/create")), U1.as_bytes())
        .unwrap();
    let holder = host
        .hold_device(p(&format!("/sys/bus/mdev/devices/{U1}")), "qemu")
        .unwrap();
    let fd = format!("/proc/{}/fd", holder.pid());
    for n in ["0", "3", "4", "5"] {
        assert!(host.exists(p(&format!("{fd}/{n}"))), "fd {n}");
    }
    assert_eq!(
        host.read_link(p(&format!("{fd}/5"))).unwrap(),
        p("anon_inode:[vfio-device]")
    );
    assert_eq!(read(&host, "/dev/null"), "");
    host.write(p("/dev/null"), b"x").unwrap();
}

#[test]
fn disabling_vfs_stops_at_the_held_one_with_the_pf_locked() {
    let host = samples();
    let numvfs = format!("{PF}/sriov_numvfs");
    host.write(p(&format!("{PF}/sriov_drivers_autoprobe")), b"0")
        .unwrap();
    host.write(p(&numvfs), b"3").unwrap();
    let vf1 = "/sys/bus/pci/devices/0000:01:00.2";
    host.write(p(&format!("{vf1}/driver_override")), b"vfio-pci")
        .unwrap();
    host.write(p("/sys/bus/pci/drivers_probe"), b"0000:01:00.2")
        .unwrap();
    let holder = host.hold_device(p(vf1), "qemu").unwrap();
    let events = host.subscribe();
    let writer = host.clone();
    let path = numvfs.clone();
    let disable = std::thread::spawn(move || writer.write(Path::new(&path), b"0"));
    while host.blocked_writes().is_empty() {
        std::thread::yield_now();
    }
    // VF 0 went first; VF 1 lost its links and waits; VF 2 is untouched.
    assert!(!host.exists(p("/sys/bus/pci/devices/0000:01:00.1")));
    assert!(!host.exists(p(&format!("{PF}/virtfn1"))));
    assert!(!host.exists(p(&format!("{vf1}/physfn"))));
    assert!(host.exists(p(vf1)));
    assert!(host.exists(p(&format!("{PF}/virtfn2"))));
    // Readers of the PF's locked attributes wait too, and see the final value.
    let reader = host.clone();
    let path = numvfs.clone();
    let pending_read = std::thread::spawn(move || reader.read(Path::new(&path)));
    while host.blocked_writes().len() < 2 {
        std::thread::yield_now();
    }
    // Attributes that take no lock answer at once.
    assert_eq!(read(&host, &format!("{PF}/sriov_totalvfs")), "4\n");
    drop(holder);
    disable.join().unwrap().unwrap();
    assert_eq!(pending_read.join().unwrap().unwrap(), "0\n");
    assert_eq!(host.vf_count(), 0);
    let removed: Vec<String> = events
        .try_iter()
        .filter(|e| e.action == UeventAction::Remove && e.subsystem == "pci")
        .map(|e| e.property("PCI_SLOT_NAME").unwrap_or_default().to_string())
        .collect();
    assert_eq!(removed, ["0000:01:00.1", "0000:01:00.2", "0000:01:00.3"]);
}

/// The uevents of the real 6.1 kernel for one sequence of operations (see
/// `src/sim/fixtures/README.md`), replayed on the samples topology: same events, same order,
/// same properties (of those the sim models).
#[test]
fn uevents_match_the_real_kernel_capture() {
    const MODELLED: [&str; 11] = [
        "ACTION",
        "DEVPATH",
        "SUBSYSTEM",
        "DRIVER",
        "MDEV_STATE",
        "DEVNAME",
        "PCI_CLASS",
        "PCI_ID",
        "PCI_SUBSYS_ID",
        "PCI_SLOT_NAME",
        "MODALIAS",
    ];
    let capture = include_str!("fixtures/uevents-6.1-vmtier.txt");
    let real: Vec<String> = capture
        .split("\n\n")
        .filter(|block| block.starts_with("KERNEL["))
        .map(|block| {
            let mut properties: Vec<&str> = block
                .lines()
                .skip(1)
                .filter(|line| {
                    MODELLED
                        .iter()
                        .any(|key| line.starts_with(&format!("{key}=")))
                })
                .collect();
            properties.sort();
            properties.join(" ")
        })
        // The mdev core module itself (loaded with the first parent on the real guest; always
        // there on the sim).
        .filter(|event| {
            !event.contains("DEVPATH=/bus/mdev ") && !event.contains("DEVPATH=/module/mdev ")
        })
        .collect();

    let host = samples();
    host.unload_module("mtty").unwrap();
    host.unload_module("mbochs").unwrap();
    let events = host.subscribe();
    let write = |path: &str, data: &str| host.write(Path::new(path), data.as_bytes());
    host.load_module("mtty").unwrap();
    let a001 = "cf000000-0000-4000-8000-00000000a001";
    write(&format!("{MTTY1}/create"), &format!("{a001}\n")).unwrap();
    write(&format!("/sys/bus/mdev/devices/{a001}/remove"), "1\n").unwrap();
    host.load_module("mbochs").unwrap();
    let mbochs = "/sys/class/mdev_bus/mbochs/mdev_supported_types";
    write(
        &format!("{mbochs}/mbochs-large/create"),
        "cf000000-0000-4000-8000-00000000a002\n",
    )
    .unwrap();
    let refused = write(
        &format!("{mbochs}/mbochs-small/create"),
        "cf000000-0000-4000-8000-00000000a003\n",
    );
    assert_eq!(errno_of(refused), Some(libc::ENOSPC));
    host.unload_module("mbochs").unwrap();
    write(&format!("{PF}/sriov_drivers_autoprobe"), "0\n").unwrap();
    write(&format!("{PF}/sriov_numvfs"), "2\n").unwrap();
    write(
        "/sys/bus/pci/devices/0000:01:00.1/driver_override",
        "vfio-pci\n",
    )
    .unwrap();
    write("/sys/bus/pci/drivers_probe", "0000:01:00.1\n").unwrap();
    write("/sys/bus/pci/drivers/vfio-pci/unbind", "0000:01:00.1\n").unwrap();
    write(&format!("{PF}/sriov_numvfs"), "0\n").unwrap();
    host.unload_module("mtty").unwrap();
    let simulated: Vec<String> = events
        .try_iter()
        .map(|event| {
            let mut properties: Vec<String> = event
                .properties
                .iter()
                .filter(|(key, _)| MODELLED.contains(&key.as_str()))
                .map(|(key, value)| format!("{key}={value}"))
                .collect();
            properties.sort();
            properties.join(" ")
        })
        .collect();
    for (index, (real, simulated)) in real.iter().zip(&simulated).enumerate() {
        assert_eq!(real, simulated, "event {index} differs");
    }
    assert_eq!(
        real.len(),
        simulated.len(),
        "real: {real:#?}\nsimulated: {simulated:#?}"
    );
}

/// IOMMU groups and VFIO device indexes are the lowest free ones (the kernel's ida), so what a
/// removed mdev had is handed out again; capacity counts each parent's own mdevs only.
#[test]
fn freed_group_and_cdev_are_reused_and_capacity_is_per_parent() {
    let host = samples();
    let group_of = |u: &str| -> u32 {
        host.read_link(p(&format!("/sys/bus/mdev/devices/{u}/iommu_group")))
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let cdev_of = |u: &str| -> OsString {
        host.list(p(&format!("/sys/bus/mdev/devices/{u}/vfio-dev")))
            .unwrap()
            .remove(0)
    };
    for n in 1..=3 {
        host.write(p(&format!("{MTTY1}/create")), uuid(n).as_bytes())
            .unwrap();
    }
    let groups: Vec<u32> = (1..=3).map(|n| group_of(&uuid(n))).collect();
    assert!(groups.windows(2).all(|w| w[1] == w[0] + 1), "{groups:?}");
    let middle = (group_of(&uuid(2)), cdev_of(&uuid(2)));
    assert_eq!(read(&host, &format!("{MTTY1}/available_instances")), "21\n");
    let mbochs = "/sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-small";
    assert_eq!(
        read(&host, &format!("{mbochs}/available_instances")),
        "16\n"
    );
    host.write(
        p(&format!("/sys/bus/mdev/devices/{}/remove", uuid(2))),
        b"1",
    )
    .unwrap();
    assert_eq!(read(&host, &format!("{MTTY1}/available_instances")), "22\n");
    host.write(p(&format!("{MTTY1}/create")), uuid(4).as_bytes())
        .unwrap();
    assert_eq!((group_of(&uuid(4)), cdev_of(&uuid(4))), middle);
    // The next one gets the next id after the highest in use.
    host.write(p(&format!("{mbochs}/create")), uuid(5).as_bytes())
        .unwrap();
    assert_eq!(group_of(&uuid(5)), groups[2] + 1);
    assert_eq!(
        read(&host, &format!("{mbochs}/available_instances")),
        "15\n"
    );
    assert_eq!(read(&host, &format!("{MTTY1}/available_instances")), "21\n");
}

/// `h200-real` is the real H200 host of `fixtures/h200-pci-0000-00-06.0.txt`: the same PCI
/// attributes and driver, and like it no `sriov_*` files and no IOMMU group (the host has no
/// IOMMU at all: `/sys/kernel/iommu_groups` is empty, and vfio-pci cannot take the GPU).
#[test]
fn h200_real_matches_the_real_host_capture() {
    let capture = include_str!("fixtures/h200-pci-0000-00-06.0.txt");
    let host = SimHost::builtin("h200-real").unwrap();
    let dir = "/sys/bus/pci/devices/0000:00:06.0";
    let listed: Vec<&str> = capture
        .lines()
        .skip(1)
        .filter(|l| !l.contains('='))
        .collect();
    for line in capture.lines().skip(1) {
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        match name {
            "driver" => assert_eq!(
                host.read_link(p(&format!("{dir}/driver")))
                    .unwrap()
                    .file_name()
                    .unwrap(),
                Path::new(value).file_name().unwrap()
            ),
            "iommu_group" => {
                assert_eq!(value, "", "the capture has no IOMMU group");
                assert!(!host.exists(p(&format!("{dir}/iommu_group"))));
                assert!(listed.iter().all(|f| *f != "iommu_group"));
            }
            // Attributes the simulated host models carry the captured value.
            "vendor" | "device" | "subsystem_vendor" | "subsystem_device" | "class"
            | "numa_node" => assert_eq!(read(&host, &format!("{dir}/{name}")).trim(), value),
            _ => {}
        }
    }
    let sim_files: Vec<String> = host
        .list(p(dir))
        .unwrap()
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    for file in &sim_files {
        assert!(
            listed.contains(&file.as_str()),
            "{file} is not on the real host"
        );
    }
    assert!(listed.iter().all(|f| !f.starts_with("sriov_")));
    assert!(host.list(p("/sys/kernel/iommu_groups")).unwrap().is_empty());
    // vfio-pci's probe finds no IOMMU group: EINVAL, the GPU stays unbound.
    let mut topology = host.topology();
    topology.pci_drivers.push(PciDriverSpec {
        name: "vfio-pci".into(),
        module: Some("vfio_pci".into()),
        sriov_configure: false,
        vfio: true,
    });
    let host = SimHost::new(topology);
    host.write(p(&format!("{dir}/driver/unbind")), b"0000:00:06.0")
        .unwrap();
    host.write(p(&format!("{dir}/driver_override")), b"vfio-pci")
        .unwrap();
    assert_eq!(
        errno_of(host.write(p("/sys/bus/pci/drivers/vfio-pci/bind"), b"0000:00:06.0")),
        Some(libc::EINVAL)
    );
    assert!(!host.exists(p(&format!("{dir}/driver"))));
}

/// The search for a free IOMMU group or VFIO index starts past the ids known to be taken, and
/// a freed id lowers that start again: after freeing two ids below the highest, the next two
/// creates get the freed ones, lowest first, and the one after continues past the highest.
#[test]
fn ids_freed_below_the_highest_are_handed_out_lowest_first() {
    let host = samples();
    let ids_of = |u: &str| -> (String, OsString) {
        let group = host
            .read_link(p(&format!("/sys/bus/mdev/devices/{u}/iommu_group")))
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let cdev = host
            .list(p(&format!("/sys/bus/mdev/devices/{u}/vfio-dev")))
            .unwrap()
            .remove(0);
        (group, cdev)
    };
    for n in 1..=5 {
        host.write(p(&format!("{MTTY1}/create")), uuid(n).as_bytes())
            .unwrap();
    }
    let before: Vec<(String, OsString)> = (1..=5).map(|n| ids_of(&uuid(n))).collect();
    for n in [4, 2] {
        host.write(
            p(&format!("/sys/bus/mdev/devices/{}/remove", uuid(n))),
            b"1",
        )
        .unwrap();
    }
    for n in 6..=8 {
        host.write(p(&format!("{MTTY1}/create")), uuid(n).as_bytes())
            .unwrap();
    }
    assert_eq!(ids_of(&uuid(6)), before[1]);
    assert_eq!(ids_of(&uuid(7)), before[3]);
    let (group, cdev) = ids_of(&uuid(8));
    let next: u32 = before[4].0.parse::<u32>().unwrap() + 1;
    assert_eq!(group, next.to_string());
    assert_ne!(cdev, before[4].1);
    assert!(before.iter().all(|(_, taken)| *taken != cdev));
}
