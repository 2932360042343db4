//! `vgpuctl` as a process against the service on a private bus: behaviour of the client itself.

use std::process::{Command, Stdio};

use e2e_tests::bus::{start_service, workspace_binary, TestBus};

/// `vgpuctl profiles | head -0`: the reader is gone before the first line is written. The
/// client must end quietly with status 0 instead of panicking on EPIPE.
#[test]
fn closed_stdout_pipe_ends_quietly() {
    let bus = TestBus::start().expect("dbus-daemon");
    let _service = start_service(&bus, &[]).expect("mdev-manager");
    for args in [
        &["profiles"][..],
        &["--json", "profiles"][..],
        &["list"][..],
    ] {
        let mut child = Command::new(workspace_binary("vgpuctl"))
            .args(args)
            .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run vgpuctl");
        // Close the read end before vgpuctl has asked the service anything, like `head` that
        // has already exited.
        drop(child.stdout.take());
        let output = child.wait_with_output().expect("wait for vgpuctl");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "vgpuctl {args:?} with a closed stdout: {} {stderr}",
            output.status
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.is_empty(), "quiet exit expected, got: {stderr}");
    }
}
