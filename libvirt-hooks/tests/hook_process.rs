//! The hook binary run exactly as libvirt runs it (argv + domain XML on stdin), without the
//! service: the fast path, and what happens when the service is not there.

mod common;

use std::os::unix::net::UnixListener;

use common::{fixture, run_hook, stderr_of, HOOK};
use e2e_tests::bus::{files_under, TestBus};

/// A socket posing as the system bus that only records whether anyone connected, so a test can
/// prove the hook did not touch D-Bus.
struct ConnectionRecorder {
    listener: UnixListener,
    address: String,
    _dir: tempfile::TempDir,
}

impl ConnectionRecorder {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bus");
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        Self {
            listener,
            address: format!("unix:path={}", path.display()),
            _dir: dir,
        }
    }

    fn was_connected(&self) -> bool {
        self.listener.accept().is_ok()
    }
}

/// What libvirt's hook gets here: the system bus at `bus_address`, the host root at `root`.
fn hook_env<'a>(bus_address: &'a str, root: &'a str) -> [(&'static str, &'a str); 2] {
    [
        ("DBUS_SYSTEM_BUS_ADDRESS", bus_address),
        ("MDEV_MANAGER_ROOT", root),
    ]
}

const OPERATIONS: [(&str, &str); 5] = [
    ("prepare", "begin"),
    ("release", "end"),
    ("reconnect", "begin"),
    ("migrate", "begin"),
    ("restore", "begin"),
];

#[test]
fn other_operations_exit_0_without_reading_stdin_or_touching_dbus() {
    let bus = ConnectionRecorder::new();
    let root = tempfile::tempdir().unwrap();
    let root_text = root.path().display().to_string();
    let env = hook_env(&bus.address, &root_text);
    let xml = fixture("domains/metadata-several.xml");
    for (operation, sub) in [
        ("start", "begin"),
        ("started", "begin"),
        ("stopped", "end"),
        ("attach", "begin"),
        ("prepare", "end"),
    ] {
        let output = run_hook(["render-farm-01", operation, sub, "-"], &xml, &env);
        assert!(
            output.status.success(),
            "{operation} {sub}: {}",
            stderr_of(&output)
        );
        assert!(
            output.stdout.is_empty() && output.stderr.is_empty(),
            "{operation} {sub}"
        );
    }
    assert!(
        !bus.was_connected(),
        "the fast path must not connect to D-Bus"
    );
    assert!(files_under(root.path()).is_empty());
}

#[test]
fn domains_without_vgpus_exit_0_at_every_operation_without_touching_dbus() {
    let bus = ConnectionRecorder::new();
    let root = tempfile::tempdir().unwrap();
    let root_text = root.path().display().to_string();
    let env = hook_env(&bus.address, &root_text);
    // plain.xml is settled by the byte scan; nic-passthrough.xml has <hostdev>s (a managed PCI
    // NIC and a USB device) that the full parse finds are libvirt's, not ours.
    for name in ["domains/plain.xml", "domains/nic-passthrough.xml"] {
        let xml = fixture(name);
        for (operation, sub) in OPERATIONS {
            let output = run_hook(["vm", operation, sub, "-"], &xml, &env);
            assert!(
                output.status.success(),
                "{name} {operation}: {}",
                stderr_of(&output)
            );
            // Empty output is libvirt's "XML unchanged" for migrate and restore.
            assert!(output.stdout.is_empty(), "{name} {operation}");
            assert!(
                output.stderr.is_empty(),
                "{name} {operation}: {}",
                stderr_of(&output)
            );
        }
    }
    assert!(
        !bus.was_connected(),
        "a domain without vGPUs must not connect to D-Bus"
    );
    assert!(files_under(root.path()).is_empty());
}

#[test]
fn release_with_no_system_bus_records_the_release_and_exits_0() {
    let root = tempfile::tempdir().unwrap();
    let root_text = root.path().display().to_string();
    let missing = format!("unix:path={}/no-bus-here", root_text);
    let env = hook_env(&missing, &root_text);
    let output = run_hook(
        ["render-farm-01", "release", "end", "destroyed"],
        &fixture("domains/metadata-several.xml"),
        &env,
    );
    assert!(output.status.success(), "{}", stderr_of(&output));
    let record = root
        .path()
        .join("var/lib/mdev-manager/pending-releases/4dea22b3-1d52-d8f3-2516-782e98ab3fa0");
    assert_eq!(std::fs::read_to_string(&record).unwrap(), "render-farm-01");
    assert!(
        stderr_of(&output).contains("not running"),
        "{}",
        stderr_of(&output)
    );
    assert_eq!(
        files_under(root.path()).len(),
        1,
        "only the record: {:?}",
        files_under(root.path())
    );
}

#[test]
fn release_on_a_bus_without_the_service_records_the_release_and_exits_0() {
    let bus = TestBus::start().expect("dbus-daemon");
    let address = bus.address();
    let root = tempfile::tempdir().unwrap();
    let root_text = root.path().display().to_string();
    let env = hook_env(&address, &root_text);
    // A domain with only a bare mdev hostdev is released too: the service may hold it.
    let xml = fixture("domains/metadata-lone-vgpu.xml");
    let output = run_hook(["ci-runner", "release", "end", "-"], &xml, &env);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let record = root
        .path()
        .join("var/lib/mdev-manager/pending-releases/1f3e5d7c-9b2a-4c6e-8d0f-a1b2c3d4e5f6");
    assert_eq!(std::fs::read_to_string(record).unwrap(), "ci-runner");
}

#[test]
fn prepare_of_declared_vgpus_without_the_service_fails_with_one_clear_line() {
    let bus = TestBus::start().expect("dbus-daemon");
    let address = bus.address();
    let root = tempfile::tempdir().unwrap();
    let root_text = root.path().display().to_string();
    let env = hook_env(&address, &root_text);
    let xml = fixture("domains/metadata-several.xml");
    for (operation, sub) in [
        ("prepare", "begin"),
        ("migrate", "begin"),
        ("restore", "begin"),
    ] {
        let output = run_hook(["render-farm-01", operation, sub, "-"], &xml, &env);
        assert_eq!(output.status.code(), Some(1), "{operation}");
        assert!(
            output.stdout.is_empty(),
            "{operation}: a failed filter must not print XML"
        );
        let stderr = stderr_of(&output);
        assert_eq!(stderr.lines().count(), 1, "{operation}: {stderr}");
        for needle in [
            "render-farm-01",
            "nvidia-a16-4q",
            "c2177883-f1bb-47f0-914d-32a22e3a8804",
            "not running",
        ] {
            assert!(
                stderr.contains(needle),
                "{operation}: {needle} missing from {stderr}"
            );
        }
    }
    assert!(
        files_under(root.path()).is_empty(),
        "a failed prepare leaves nothing behind"
    );
}

#[test]
fn prepare_of_bare_hostdevs_without_the_service_lets_libvirt_go_on() {
    let bus = TestBus::start().expect("dbus-daemon");
    let address = bus.address();
    let env = [("DBUS_SYSTEM_BUS_ADDRESS", address.as_str())];
    let output = run_hook(
        ["ml-train", "prepare", "begin", "-"],
        &fixture("domains/vf-hostdev.xml"),
        &env,
    );
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert!(
        stderr_of(&output).contains("not claiming vf 0000:3b:01.2"),
        "{}",
        stderr_of(&output)
    );
}

#[test]
fn reconnect_never_fails() {
    let bus = TestBus::start().expect("dbus-daemon");
    let address = bus.address();
    let env = [("DBUS_SYSTEM_BUS_ADDRESS", address.as_str())];
    for name in [
        "domains/metadata-several.xml",
        "domains/malformed.xml",
        "domains/entities.xml",
    ] {
        let output = run_hook(
            ["render-farm-01", "reconnect", "begin", "-"],
            &fixture(name),
            &env,
        );
        assert!(
            output.status.success(),
            "{name}: a failed reconnect would kill the guest"
        );
        assert!(
            !output.stderr.is_empty(),
            "{name}: the problem is still reported"
        );
    }
}

#[test]
fn unreadable_xml_fails_prepare_with_one_line_and_touches_nothing() {
    let bus = ConnectionRecorder::new();
    let root = tempfile::tempdir().unwrap();
    let root_text = root.path().display().to_string();
    let env = hook_env(&bus.address, &root_text);
    for name in ["domains/malformed.xml", "domains/entities.xml"] {
        let output = run_hook(["broken", "prepare", "begin", "-"], &fixture(name), &env);
        assert_eq!(output.status.code(), Some(1), "{name}");
        let stderr = stderr_of(&output);
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(
            stderr.starts_with(
                "mdev-manager-hook: prepare of domain 'broken': cannot read the domain XML"
            ),
            "{stderr}"
        );
    }
    let mut huge = b"<domain><name>big</name><devices><hostdev type='mdev'/>".to_vec();
    huge.resize(libvirt_hooks::MAX_DOMAIN_XML_BYTES + 100, b' ');
    let output = run_hook(["big", "prepare", "begin", "-"], &huge, &env);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr_of(&output).contains("bytes, more than the"),
        "{}",
        stderr_of(&output)
    );
    assert!(!bus.was_connected());
    assert!(files_under(root.path()).is_empty());
}

#[test]
fn wrong_arguments_exit_2_with_usage() {
    let output = run_hook(["only-a-name", "prepare", "begin", "-"], b"", &[]);
    assert!(output.status.success(), "sanity: a full command line works");
    let output = std::process::Command::new(HOOK).arg("vm").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr_of(&output).contains("<domain name> <operation> <sub-operation>"),
        "{}",
        stderr_of(&output)
    );
}

#[test]
fn install_flag_copies_the_binary_and_warns_about_restarting_libvirt() {
    let root = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(HOOK)
        .arg("--install")
        .arg(root.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr_of(&output));
    let installed = root.path().join("etc/libvirt/hooks/qemu.d/mdev-manager");
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(HOOK).unwrap()
    );
    assert!(
        stderr_of(&output).contains("restart libvirtd"),
        "{}",
        stderr_of(&output)
    );
    // The installed copy is a working hook.
    let output = std::process::Command::new(&installed)
        .args(["vm", "start", "begin", "-"])
        .output()
        .unwrap();
    assert!(output.status.success());
}
