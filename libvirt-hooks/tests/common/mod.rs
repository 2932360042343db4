//! Helpers for running the hook binary the way libvirt does, alone or against the service on
//! the e2e harness's private system bus (`e2e_tests::bus`).

#![allow(dead_code)] // Each test file uses a different subset.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use e2e_tests::bus::{start_service_in, vgpuctl, vgpuctl_json, Process, TestBus};
use serde_json::Value;

/// The hook binary under test.
pub const HOOK: &str = env!("CARGO_BIN_EXE_mdev-manager-hook");

/// A fixture from `tests/fixtures`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs the hook as libvirt does: `<domain> <operation> <sub-operation> <extra>` with the domain
/// XML on stdin, in a clean environment holding only `env`.
pub fn run_hook(args: [&str; 4], stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(HOOK);
    command
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn the hook");
    let mut input = child.stdin.take().expect("stdin is piped");
    // libvirt ignores EPIPE when the hook exits without reading; so do we.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().expect("wait for the hook")
}

pub use e2e_tests::bus::stderr_of;

/// The `mdev-manager` daemon on the simulated host `topology` (a built-in name or a topology
/// file) with its state under `<root>/var/lib/mdev-manager`, where the hook (with
/// `MDEV_MANAGER_ROOT=<root>`) records pending releases.
pub fn start_daemon(bus: &TestBus, root: &Path, topology: &str) -> Process {
    start_service_in(
        bus,
        topology,
        &root.join("var/lib/mdev-manager"),
        "warn",
        &[],
    )
    .expect("start mdev-manager")
}

/// Runs the hook as libvirt does (see [`run_hook`]) against the service on `bus`, with the
/// host root `root` and `timeout_secs` for the service's answer.
pub fn run_hook_on(
    bus: &TestBus,
    root: &Path,
    args: [&str; 4],
    xml: &str,
    timeout_secs: &str,
) -> Output {
    let address = bus.address();
    let root = root.display().to_string();
    run_hook(
        args,
        xml.as_bytes(),
        &[
            ("DBUS_SYSTEM_BUS_ADDRESS", address.as_str()),
            ("MDEV_MANAGER_ROOT", root.as_str()),
            ("MDEV_MANAGER_HOOK_TIMEOUT_SECS", timeout_secs),
        ],
    )
}

/// `vgpuctl --json list`.
pub fn instances(bus: &TestBus) -> Vec<Value> {
    vgpuctl_json(&vgpuctl(bus, None, &["--json", "list"]))
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The `mdev-manager` daemon on the default simulated host with the host root `root` and no
/// `--state-dir`: its state directory is what `<root>/etc/mdev-manager/mdev-manager.toml`
/// says (or the default), as on a host. Returns once it owns its bus name.
pub fn start_daemon_configured(bus: &TestBus, root: &Path) -> Process {
    let child = Command::new(e2e_tests::bus::workspace_binary("mdev-manager"))
        .args(["--simulate", "default", "--root"])
        .arg(root)
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .env("MDEV_MANAGER_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start mdev-manager");
    let process = Process::new(child, "mdev-manager");
    e2e_tests::bus::wait_for(std::time::Duration::from_secs(30), || {
        e2e_tests::bus::name_has_owner(&bus.address(), dbus_api::names::BUS_NAME)
    })
    .expect("mdev-manager takes its bus name");
    process
}
