//! Helpers for running the hook binary the way libvirt does, and a private system bus.

#![allow(dead_code)] // Each test file uses a different subset.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// stderr as text.
pub fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A `dbus-daemon` configured like the system bus (Debian's own system.conf, with the
/// socket moved into a temp dir and without the parts that need a real system), killed on drop.
/// Clients reach it through `DBUS_SYSTEM_BUS_ADDRESS`.
pub struct PrivateBus {
    dir: tempfile::TempDir,
    pid: u32,
    address: String,
}

impl PrivateBus {
    /// Starts a bus whose policy includes the files in `policy_dirs` (for a service's own policy).
    pub fn start(policy_dirs: &[&Path]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("bus");
        let original = std::fs::read_to_string("/usr/share/dbus-1/system.conf")
            .expect("dbus-daemon is installed (scripts/install-test-deps)");
        let mut config = String::new();
        for line in original.lines() {
            let trimmed = line.trim();
            let dropped = [
                "<user>",
                "<pidfile>",
                "<fork/>",
                "<syslog/>",
                "<standard_system_servicedirs/>",
                "<servicehelper>",
            ]
            .iter()
            .any(|tag| trimmed.starts_with(tag))
                || (trimmed.starts_with("<include") && trimmed.contains("/etc/dbus-1/"));
            if dropped {
                continue;
            }
            if trimmed.starts_with("<listen>") {
                config.push_str(&format!(
                    "  <listen>unix:path={}</listen>\n",
                    socket.display()
                ));
            } else if trimmed == "<includedir>system.d</includedir>" {
                config.push_str("  <includedir>/usr/share/dbus-1/system.d</includedir>\n");
                for extra in policy_dirs {
                    config.push_str(&format!("  <includedir>{}</includedir>\n", extra.display()));
                }
            } else {
                config.push_str(line);
                config.push('\n');
            }
        }
        let config_path = dir.path().join("system.conf");
        std::fs::write(&config_path, config).expect("write bus config");
        let output = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config_path.display()))
            .args(["--fork", "--print-pid"])
            .output()
            .expect("run dbus-daemon");
        assert!(
            output.status.success(),
            "dbus-daemon failed: {}",
            stderr_of(&output)
        );
        let pid: u32 = String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .expect("dbus-daemon prints its pid");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "bus socket {} never appeared",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let address = format!("unix:path={}", socket.display());
        Self { dir, pid, address }
    }

    /// The D-Bus address (`unix:path=...`).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Its temp dir (free for the test's own files).
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_owned()
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        // The daemon forked away from us, so it is not a child we can wait for; kill by pid.
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
    }
}
