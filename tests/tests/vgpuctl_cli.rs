//! `vgpuctl` as a process against the service on a private bus: behaviour of the client itself.

use std::process::{Command, Stdio};

use e2e_tests::bus::{bus_with_service, created_uuids, vgpuctl, workspace_binary, TestBus};

/// `vgpuctl profiles | head -0`: the reader is gone before the first line is written. The
/// client must end quietly with status 0 instead of panicking on EPIPE.
#[test]
fn closed_stdout_pipe_ends_quietly() {
    let (bus, _service) = bus_with_service();
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

/// `vgpuctl qemu-args` for an NVIDIA mdev: the `-device` argument on stdout, the `-uuid` note
/// on stderr; an unknown instance is NotFound naming it.
#[test]
fn qemu_args_for_an_nvidia_mdev() {
    let (bus, _service) = bus_with_service();
    let uuid = created_uuids(&vgpuctl(&bus, None, &["--json", "create", "nvidia-t4-2q"])).remove(0);

    let output = vgpuctl(&bus, None, &["qemu-args", &uuid]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("-device vfio-pci,sysfsdev=/sys/bus/mdev/devices/{uuid}\n")
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("-uuid <vm uuid>"));

    let output = vgpuctl(&bus, None, &["--json", "qemu-args", &uuid]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["needs_vm_uuid"], true);
    assert_eq!(json["args"][0], "-device");

    let missing = "00000000-0000-4000-8000-000000000001";
    let output = vgpuctl(&bus, None, &["qemu-args", missing]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains(missing));
}

/// Runs a program this test has just written. Another test thread that forks while the file is
/// still open for writing passes that descriptor to its child, and until the child execs, the
/// kernel refuses to execute the file (`ETXTBSY`); trying again after a moment is the usual
/// remedy. Bounded: 100 tries, 20 ms apart.
fn output_of_fresh_executable(command: &mut Command) -> std::process::Output {
    for _ in 0..100 {
        match command.output() {
            Err(error) if error.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            result => return result.expect("run the program"),
        }
    }
    panic!("{command:?} stayed busy (ETXTBSY) for 2 s")
}

/// `vgpuctl install-hook --root DIR` runs the `mdev-manager-hook` installed next to it with
/// `--install DIR`; without one (and none on PATH) it fails naming the program.
#[test]
fn install_hook_runs_the_hook_beside_vgpuctl() {
    let dir = tempfile::tempdir().unwrap();
    let vgpuctl = dir.path().join("vgpuctl");
    std::fs::copy(workspace_binary("vgpuctl"), &vgpuctl).unwrap();
    let empty_path = dir.path().join("empty");
    std::fs::create_dir(&empty_path).unwrap();

    let missing = output_of_fresh_executable(
        Command::new(&vgpuctl)
            .args(["install-hook"])
            .env("PATH", &empty_path),
    );
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("mdev-manager-hook"),
        "{missing:?}"
    );

    // A stand-in hook that records its arguments and prints the hook's warning.
    let record = dir.path().join("argv");
    let hook = dir.path().join("mdev-manager-hook");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\necho 'warning: restart libvirtd' >&2\n",
            record.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("image");
    let output = output_of_fresh_executable(
        Command::new(&vgpuctl)
            .arg("install-hook")
            .arg("--root")
            .arg(&root)
            .env("PATH", &empty_path),
    );
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        std::fs::read_to_string(&record).unwrap(),
        format!("--install\n{}\n", root.display())
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("restart libvirtd"));
}

/// A stand-in `virsh` (no libvirtd runs on the test host): records each call's argv and the
/// XML file it was given, answers `domuuid`, `domstate` (the file `state`, else running) and
/// `dumpxml [--inactive]` (the files `live.xml` and `inactive.xml`, else an empty domain), and
/// fails `attach-device` when told to.
fn fake_virsh(dir: &std::path::Path) -> std::path::PathBuf {
    let script = format!(
        r#"#!/bin/sh
log='{log}'
echo "$*" >> "$log"
case "$1" in
  domuuid) echo 4dea22b3-1d52-d8f3-2516-782e98ab3fa0 ;;
  domstate) cat '{dir}/state' 2>/dev/null || echo running ;;
  dumpxml)
    if [ "$2" = --inactive ]; then file='{dir}/inactive.xml'; else file='{dir}/live.xml'; fi
    cat "$file" 2>/dev/null || echo '<domain/>' ;;
  attach-device|detach-device)
    cat "$3" > '{dir}'/"$1".xml
    if [ "$1" = attach-device ] && [ -e '{dir}/fail' ]; then
      echo "error: Failed to attach device from $3" >&2; exit 1
    fi ;;
  *) echo "unexpected virsh call: $*" >&2; exit 2 ;;
esac
"#,
        log = dir.join("calls").display(),
        dir = dir.display()
    );
    let path = dir.join("virsh");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn vgpuctl_with_path(bus: &TestBus, path: &std::ffi::OsStr, args: &[&str]) -> std::process::Output {
    Command::new(workspace_binary("vgpuctl"))
        .args(args)
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .env("PATH", path)
        .output()
        .expect("run vgpuctl")
}

/// `vgpuctl attach` creates an instance claimed by the domain and hands virsh the generated
/// hostdev; `detach` hands virsh the same hostdev and destroys the instance; a refused attach
/// destroys what it created.
#[test]
fn attach_and_detach_through_virsh() {
    let (bus, _service) = bus_with_service();
    let dir = tempfile::tempdir().unwrap();
    fake_virsh(dir.path());
    let mut path = std::ffi::OsString::from(dir.path());
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());

    let output = vgpuctl_with_path(&bus, &path, &["attach", "guest", "nvidia-t4-2q", "--live"]);
    assert!(output.status.success(), "{output:?}");
    let uuid = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let xml = std::fs::read_to_string(dir.path().join("attach-device.xml")).unwrap();
    assert!(xml.contains(&format!("<address uuid='{uuid}'/>")), "{xml}");
    assert!(xml.contains("type='mdev' model='vfio-pci'>"), "{xml}");
    let shown = vgpuctl(&bus, None, &["--json", "show", &uuid]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["holder"], "guest");
    assert_eq!(shown["holder_uuid"], "4dea22b3-1d52-d8f3-2516-782e98ab3fa0");

    // Another domain cannot detach it.
    let output = vgpuctl_with_path(&bus, &path, &["detach", "other", &uuid]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("held by domain guest"));

    let output = vgpuctl_with_path(&bus, &path, &["detach", "guest", &uuid, "--live"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("detach-device.xml")).unwrap(),
        xml
    );
    let shown = vgpuctl(&bus, None, &["show", &uuid]);
    assert!(!shown.status.success(), "destroyed after detach");

    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls[0], "domuuid guest");
    assert!(calls[1].starts_with("attach-device guest /") && calls[1].ends_with(".xml --live"));
    assert!(calls[2].starts_with("detach-device guest /") && calls[2].ends_with(".xml --live"));
    // Destroyed only once neither the running domain nor its configuration names it.
    assert_eq!(calls[3], "dumpxml guest");
    assert_eq!(calls[4], "dumpxml --inactive guest");
    assert_eq!(calls.len(), 5, "{calls:?}");
    let shown = vgpuctl(&bus, None, &["--json", "list"]);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&shown.stdout).unwrap(),
        serde_json::json!([]),
        "a live-only attach is transient and gone after its detach"
    );

    // virsh refuses: the instance created for it is destroyed again.
    std::fs::write(dir.path().join("fail"), "").unwrap();
    let output = vgpuctl_with_path(
        &bus,
        &path,
        &["attach", "guest", "nvidia-t4-2q", "--config"],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("Failed to attach device"), "{stderr}");
    assert!(stderr.contains("destroyed again"), "{stderr}");
    let listed = vgpuctl(&bus, None, &["--json", "list"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
}

/// An attach into a domain's configuration (`--config`, or no flag on a shut-off domain: virsh's
/// `--current`) makes a persistent instance the domain claims, so the domain's next start
/// finds it; a detach that leaves the device named in the configuration keeps the instance,
/// and the detach that removes the last mention destroys it.
#[test]
fn attach_to_the_configuration_makes_a_definition_that_detach_keeps_while_named() {
    let (bus, _service) = bus_with_service();
    let dir = tempfile::tempdir().unwrap();
    fake_virsh(dir.path());
    let mut path = std::ffi::OsString::from(dir.path());
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    std::fs::write(dir.path().join("state"), "shut off\n").unwrap();

    let output = vgpuctl_with_path(&bus, &path, &["attach", "guest", "nvidia-t4-2q"]);
    assert!(output.status.success(), "{output:?}");
    let uuid = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let shown = vgpuctl(&bus, None, &["--json", "show", &uuid]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["holder"], "guest", "{shown}");
    assert_eq!(shown["persistent"], true, "{shown}");
    assert_eq!(shown["autostart"], false, "{shown}");
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls[..2], ["domuuid guest", "domstate guest"]);
    assert!(
        calls[2].starts_with("attach-device guest /") && calls[2].ends_with(".xml --config"),
        "{calls:?}"
    );

    // The configuration names it (as libvirt writes it back); a live-only detach keeps it.
    let hostdev = std::fs::read_to_string(dir.path().join("attach-device.xml")).unwrap();
    std::fs::write(
        dir.path().join("inactive.xml"),
        format!("<domain type='kvm'><devices>{hostdev}</devices></domain>"),
    )
    .unwrap();
    let output = vgpuctl_with_path(&bus, &path, &["detach", "guest", &uuid, "--live"]);
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("instance {uuid} kept"))
            && stderr.contains("its persistent configuration"),
        "{stderr}"
    );
    assert!(vgpuctl(&bus, None, &["show", &uuid]).status.success());

    // Gone from the configuration too: destroyed.
    std::fs::remove_file(dir.path().join("inactive.xml")).unwrap();
    let output = vgpuctl_with_path(&bus, &path, &["--json", "detach", "guest", &uuid]);
    assert!(output.status.success(), "{output:?}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["destroyed"], true, "{json}");
    assert!(!vgpuctl(&bus, None, &["show", &uuid]).status.success());
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
    let last: Vec<&str> = calls.lines().rev().take(4).collect();
    assert_eq!(last[0], "dumpxml --inactive guest");
    assert!(last[2].ends_with(".xml --config"), "{last:?}");
    assert_eq!(last[3], "domstate guest");
}

/// `vgpuctl probe`: a malformed target is the invalid-args exit code naming the text; on the
/// simulated service a well-formed one is NotSupported saying the host is simulated.
#[test]
fn probe_on_the_simulated_service() {
    let (bus, _service) = bus_with_service();
    let output = vgpuctl(&bus, None, &["probe", "not-a-target"]);
    assert_eq!(
        output.status.code(),
        Some(dbus_api::ErrorKind::InvalidArgs.exit_code().into()),
        "{output:?}"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("not-a-target"),
        "{output:?}"
    );

    let output = vgpuctl(&bus, None, &["probe", "0000:3b:00.4"]);
    assert_eq!(
        output.status.code(),
        Some(dbus_api::ErrorKind::NotSupported.exit_code().into()),
        "{output:?}"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("simulated host"),
        "{output:?}"
    );
}
