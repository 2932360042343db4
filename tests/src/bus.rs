//! Real D-Bus components for end-to-end tests: a private bus configured like the system bus
//! (Debian's own `system.conf` with the project's policy file included), `polkitd` on it, the
//! `mdev-manager` daemon on the simulated host, and `vgpuctl`, each as a separate process.
//!
//! How the private bus is set up follows what was seen working on Debian 12 (no systemd):
//! `/usr/share/dbus-1/system.conf` with the listen address moved into a temp directory, the
//! user/pidfile/fork/syslog lines removed, the include directory made absolute, and nothing
//! of the host's own: no bus activation (a service is there only if a test started it) and
//! none of the host's local configuration under `/etc/dbus-1/`.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The repository root (this crate lives in `<root>/tests`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// A file of the repository's `packaging/` directory.
pub fn packaging_file(relative: &str) -> PathBuf {
    repo_root().join("packaging").join(relative)
}

/// The target directory the test binary was built into (`target/debug`).
fn target_dir() -> PathBuf {
    // The test executable is `<target>/debug/deps/<name>-<hash>`.
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().and_then(Path::parent).map(Path::to_path_buf))
        .unwrap_or_else(|| repo_root().join("target/debug"))
}

/// Path of a workspace binary (`mdev-manager`, `vgpuctl`), built on first use so the tests
/// never run a stale one. Binaries of other packages are not built by `cargo test -p
/// e2e-tests`, hence the explicit build.
pub fn workspace_binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        cargo_build(&[
            "-p",
            "mdev-manager",
            "--bin",
            "mdev-manager",
            "-p",
            "vgpuctl",
            "--bin",
            "vgpuctl",
        ])
    });
    if let Err(message) = built {
        panic!("{message}");
    }
    target_dir().join(name)
}

/// Path of the binary `bin` of the workspace package `package`, built now (`cargo build` is
/// quick when it is current): for a test of another package, which cannot name it with
/// `CARGO_BIN_EXE_*` (`mdev-e2e-client` of this crate, `mdev-manager-hook`).
pub fn package_binary(package: &str, bin: &str) -> PathBuf {
    if let Err(message) = cargo_build(&["-p", package, "--bin", bin]) {
        panic!("{message}");
    }
    target_dir().join(bin)
}

fn cargo_build(args: &[&str]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(repo_root())
        .args(["build", "--quiet"])
        .args(args)
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build {} failed: {status}", args.join(" ")))
    }
}

/// A private system-like bus. Killed on drop.
#[derive(Debug)]
pub struct TestBus {
    dir: tempfile::TempDir,
    pid: i32,
}

impl TestBus {
    /// Starts `dbus-daemon` with Debian's system bus configuration and the project's policy
    /// file, listening in a fresh temp directory.
    pub fn start() -> io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("mdev-bus-").tempdir()?;
        // The bus runs as root but other users must reach the socket (authorization tests).
        set_mode(dir.path(), 0o755)?;
        let policy_dir = dir.path().join("policy");
        std::fs::create_dir(&policy_dir)?;
        std::fs::copy(
            packaging_file("dbus/org.mdevmanager.VGpu1.conf"),
            policy_dir.join("org.mdevmanager.VGpu1.conf"),
        )?;
        let system_conf = std::fs::read_to_string("/usr/share/dbus-1/system.conf")?;
        let config = system_bus_config(&system_conf, &dir.path().join("bus"), &policy_dir);
        let config_path = dir.path().join("system.conf");
        std::fs::write(&config_path, config)?;
        let output = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config_path.display()))
            .args(["--fork", "--print-pid"])
            .stderr(Stdio::inherit())
            .output()?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "dbus-daemon failed: {}",
                output.status
            )));
        }
        let pid = String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse::<i32>()
            .map_err(|e| io::Error::other(format!("dbus-daemon printed no pid: {e}")))?;
        let bus = Self { dir, pid };
        wait_for(Duration::from_secs(10), || bus.socket().exists())
            .map_err(|_| io::Error::other("dbus-daemon socket did not appear"))?;
        Ok(bus)
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("bus")
    }

    /// The bus address, for `DBUS_SYSTEM_BUS_ADDRESS`.
    pub fn address(&self) -> String {
        format!("unix:path={}", self.socket().display())
    }

    /// A scratch directory that lives as long as the bus.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A client connection to the bus (panics when the bus is not there: tests only).
    pub async fn connect(&self) -> zbus::Connection {
        zbus::connection::Builder::address(self.address().as_str())
            .build()
            .await
            .expect("connect to the test bus")
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid dbus-daemon printed; it is our child's fork.
        unsafe {
            libc::kill(self.pid, libc::SIGTERM);
        }
    }
}

/// Debian's system bus config turned into a private one (see the module doc).
pub fn system_bus_config(system_conf: &str, socket: &Path, policy_dir: &Path) -> String {
    let mut out = String::new();
    for line in system_conf.lines() {
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
            out.push_str(&format!(
                "  <listen>unix:path={}</listen>\n",
                socket.display()
            ));
            continue;
        }
        if trimmed == "<includedir>system.d</includedir>" {
            out.push_str("  <includedir>/usr/share/dbus-1/system.d</includedir>\n");
            out.push_str(&format!(
                "  <includedir>{}</includedir>\n",
                policy_dir.display()
            ));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// `ready` did not hold within the time allowed.
#[derive(Debug)]
pub struct WaitTimedOut;

/// Polls `ready` every 20 ms until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut ready: impl FnMut() -> bool) -> Result<(), WaitTimedOut> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if ready() {
        Ok(())
    } else {
        Err(WaitTimedOut)
    }
}

/// Whether `name` has an owner on the bus at `address` (asked with `dbus-send`).
pub fn name_has_owner(address: &str, name: &str) -> bool {
    Command::new("dbus-send")
        .arg(format!("--bus={address}"))
        .args([
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.NameHasOwner",
        ])
        .arg(format!("string:{name}"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("boolean true"))
        .unwrap_or(false)
}

/// A child process killed (SIGTERM, then waited for) on drop.
#[derive(Debug)]
pub struct Process {
    child: Option<Child>,
    name: &'static str,
}

impl Process {
    /// Takes charge of `child` (named `name` in messages).
    pub fn new(child: Child, name: &'static str) -> Self {
        Self {
            child: Some(child),
            name,
        }
    }

    /// Takes charge of a child started elsewhere (`name` names it in messages).
    pub fn from_child(child: Child, name: &'static str) -> Self {
        Self::new(child, name)
    }

    /// Sends `signal` (SIGSTOP and SIGCONT make it hang and resume).
    pub fn signal(&self, signal: i32) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
            unsafe {
                libc::kill(child.id() as i32, signal);
            }
        }
    }

    /// SIGKILL and wait: the process gets no chance to shut down cleanly (a crash).
    pub fn kill(mut self) -> io::Result<std::process::ExitStatus> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| io::Error::other("process already reaped"))?;
        child.kill()?;
        child.wait()
    }

    /// Sends SIGTERM and waits; returns the exit status and whatever output was captured.
    pub fn terminate(mut self) -> io::Result<Output> {
        let child = self
            .child
            .take()
            .ok_or_else(|| io::Error::other("process already reaped"))?;
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        child.wait_with_output()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        // SAFETY: kill(2) on our own child's pid; harmless if it already exited (not reaped).
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        if wait_for(Duration::from_secs(5), || {
            matches!(child.try_wait(), Ok(Some(_)))
        })
        .is_err()
        {
            eprintln!("{} did not stop on SIGTERM; killing it", self.name);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `polkitd` on the test bus (started as root; it drops to the `polkitd` user).
pub fn start_polkitd(bus: &TestBus) -> io::Result<Process> {
    let child = Command::new("/usr/lib/polkit-1/polkitd")
        .arg("--no-debug")
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let process = Process::new(child, "polkitd");
    wait_for(Duration::from_secs(15), || {
        name_has_owner(&bus.address(), "org.freedesktop.PolicyKit1")
    })
    .map_err(|_| io::Error::other("polkitd did not take org.freedesktop.PolicyKit1"))?;
    Ok(process)
}

/// The `mdev-manager` daemon on the simulated host, on the test bus, with its state in a
/// fresh directory. `extra` are further arguments.
pub fn start_service(bus: &TestBus, extra: &[&str]) -> io::Result<Process> {
    start_service_on(bus, "default", extra)
}

/// [`start_service`] on another simulated host: a built-in topology name (`scale`) or a
/// topology file.
pub fn start_service_on(bus: &TestBus, topology: &str, extra: &[&str]) -> io::Result<Process> {
    let state = tempfile::Builder::new()
        .prefix("state-")
        .tempdir_in(bus.dir())?
        .keep();
    start_service_in(bus, topology, &state, "info", extra)
}

/// The daemon on the simulated host `topology` with its state store in `state_dir` (a host
/// path: under `--root` when `extra` gives one) and `MDEV_MANAGER_LOG=log`; returns once it
/// owns its bus name.
pub fn start_service_in(
    bus: &TestBus,
    topology: &str,
    state_dir: &Path,
    log: &str,
    extra: &[&str],
) -> io::Result<Process> {
    let child = Command::new(workspace_binary("mdev-manager"))
        .arg("--simulate")
        .arg(topology)
        .arg("--state-dir")
        .arg(state_dir)
        .args(extra)
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .env("MDEV_MANAGER_LOG", log)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    let process = Process::new(child, "mdev-manager");
    wait_for(Duration::from_secs(30), || {
        name_has_owner(&bus.address(), dbus_api::names::BUS_NAME)
    })
    .map_err(|_| io::Error::other("mdev-manager did not take its bus name"))?;
    Ok(process)
}

/// Waits until the service's bus name has no owner (after stopping it).
pub fn wait_name_released(bus: &TestBus) -> Result<(), WaitTimedOut> {
    wait_for(Duration::from_secs(10), || {
        !name_has_owner(&bus.address(), dbus_api::names::BUS_NAME)
    })
}

/// A private bus with the daemon on the default simulated host: how most tests start.
pub fn bus_with_service() -> (TestBus, Process) {
    let bus = TestBus::start().expect("dbus-daemon");
    let service = start_service(&bus, &[]).expect("mdev-manager");
    (bus, service)
}

/// The service's `ObjectManager` (the object root).
pub async fn object_manager(
    connection: &zbus::Connection,
) -> zbus::fdo::ObjectManagerProxy<'static> {
    zbus::fdo::ObjectManagerProxy::builder(connection)
        .destination(dbus_api::names::BUS_NAME)
        .path(dbus_api::names::ROOT_PATH)
        .build()
        .await
        .expect("ObjectManager proxy")
}

/// Everything the service exports now (`GetManagedObjects`).
pub async fn managed_objects(connection: &zbus::Connection) -> zbus::fdo::ManagedObjects {
    object_manager(connection)
        .await
        .get_managed_objects()
        .await
        .expect("GetManagedObjects")
}

/// A device dict of `PrepareDomain`/`StartPrepareDomain` naming a function by address
/// (`kind` `vf` or `passthrough`).
pub fn claim_device(
    kind: &str,
    pci_address: &str,
) -> std::collections::HashMap<&'static str, zbus::zvariant::Variant<'static>> {
    std::collections::HashMap::from([
        ("kind", zbus::zvariant::Variant::from(kind.to_owned())),
        (
            "pci_address",
            zbus::zvariant::Variant::from(pci_address.to_owned()),
        ),
    ])
}

/// Every signal the service sends, as a stream; subscribe before the call whose signals
/// the test reads.
pub async fn service_signals(connection: &zbus::Connection) -> zbus::MessageStream {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(dbus_api::names::BUS_NAME)
        .path_namespace(dbus_api::names::ROOT_PATH)
        .build()
        .expect("the service's match rule");
    zbus::MessageStream::for_match_rule(rule, connection, None)
        .await
        .expect("subscribe to the service's signals")
}

/// The JSON a successful `vgpuctl --json` printed (panics, with vgpuctl's stderr, when it
/// failed).
pub fn vgpuctl_json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "vgpuctl failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("vgpuctl --json prints JSON")
}

/// The UUIDs of the instances a successful `vgpuctl --json create` printed.
pub fn created_uuids(output: &Output) -> Vec<String> {
    vgpuctl_json(output)
        .as_array()
        .expect("a list of instances")
        .iter()
        .map(|i| i["uuid"].as_str().expect("uuid").to_string())
        .collect()
}

/// A program's stderr as text.
pub fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A copy of `binary` that other users can run: the checkout may sit in a directory only
/// root can enter (`mktemp -d` makes 0700 directories, and CI clones into one), so a test
/// that runs a program as another user runs it from the bus's own directory (0755).
pub fn runnable_by_others(bus: &TestBus, binary: &Path) -> PathBuf {
    let name = binary.file_name().expect("a binary has a file name");
    let copy = bus.dir().join(name);
    if !copy.exists() {
        let partial = bus
            .dir()
            .join(format!(".{}.partial", name.to_string_lossy()));
        std::fs::copy(binary, &partial)
            .unwrap_or_else(|e| panic!("cannot copy {}: {e}", binary.display()));
        set_mode(&partial, 0o755).expect("make the copy executable");
        // A rename, so a concurrent caller never runs a half-written copy.
        std::fs::rename(&partial, &copy).expect("put the copy in place");
    }
    copy
}

/// Runs `vgpuctl` against the test bus, as root or (with `user`) as another user.
pub fn vgpuctl(bus: &TestBus, user: Option<&str>, args: &[&str]) -> Output {
    let binary = workspace_binary("vgpuctl");
    let mut command = match user {
        Some(user) => {
            let mut command = Command::new("runuser");
            command
                .args(["-u", user, "--", "env"])
                .arg(format!("DBUS_SYSTEM_BUS_ADDRESS={}", bus.address()))
                .arg(runnable_by_others(bus, &binary));
            command
        }
        None => {
            let mut command = Command::new(binary);
            command.env("DBUS_SYSTEM_BUS_ADDRESS", bus.address());
            command
        }
    };
    command
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run vgpuctl: {e}"))
}

/// A system user (and optionally a group it belongs to) created for one test and deleted on
/// drop.
#[derive(Debug)]
pub struct TestUser {
    /// The user name.
    pub name: String,
    /// The group name, if one was created.
    pub group: Option<String>,
}

impl TestUser {
    /// `useradd -M <name>` (and `groupadd <group>` + membership).
    pub fn create(name: &str, group: Option<&str>) -> io::Result<Self> {
        // A leftover from an interrupted run would make useradd fail.
        let _ = Command::new("userdel").arg(name).output();
        if let Some(group) = group {
            let _ = Command::new("groupdel").arg(group).output();
            run(Command::new("groupadd").arg(group))?;
        }
        let mut useradd = Command::new("useradd");
        useradd.args(["-M", "-s", "/usr/sbin/nologin"]);
        if let Some(group) = group {
            useradd.args(["-G", group]);
        }
        if let Err(error) = run(useradd.arg(name)) {
            // Not left behind for the next run (a group named like the user, say, makes
            // useradd refuse to make the user's own group).
            if let Some(group) = group {
                let _ = Command::new("groupdel").arg(group).output();
            }
            return Err(error);
        }
        Ok(Self {
            name: name.to_string(),
            group: group.map(str::to_string),
        })
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
        if let Some(group) = &self.group {
            let _ = Command::new("groupdel").arg(group).output();
        }
    }
}

/// A file installed for one test (a polkit rule or action file) and removed on drop.
#[derive(Debug)]
pub struct InstalledFile {
    path: PathBuf,
}

impl InstalledFile {
    /// Writes `contents` to `path` atomically (a watcher such as polkitd never sees a partial
    /// file).
    pub fn install(path: impl Into<PathBuf>, contents: &[u8]) -> io::Result<Self> {
        let path = path.into();
        let dir = path.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(dir)?;
        let temporary = dir.join(format!(".{}.tmp", std::process::id()));
        std::fs::write(&temporary, contents)?;
        set_mode(&temporary, 0o644)?;
        std::fs::rename(&temporary, &path)?;
        Ok(Self { path })
    }
}

impl Drop for InstalledFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether the tests run as root (those that create users and install polkit files must).
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Where polkitd reads the project's actions; it reads action files only at start, from this
/// fixed directory.
pub const POLKIT_ACTIONS_FILE: &str = "/usr/share/polkit-1/actions/org.mdevmanager.vgpu1.policy";

/// Installs the packaged polkit actions unless they are there already (another test, or the
/// package, installed them): `Some` when this call installed them (removed on drop).
pub fn install_polkit_actions() -> Option<InstalledFile> {
    if Path::new(POLKIT_ACTIONS_FILE).exists() {
        return None;
    }
    let policy = std::fs::read(packaging_file("polkit/org.mdevmanager.vgpu1.policy"))
        .expect("read the packaged polkit actions");
    Some(InstalledFile::install(POLKIT_ACTIONS_FILE, &policy).expect("install the polkit actions"))
}

/// A polkit rule granting every action of the service to the members of `group`.
pub fn group_rule(group: &str) -> String {
    format!(
        "polkit.addRule(function(action, subject) {{\n  \
         if (action.id.indexOf(\"org.mdevmanager.vgpu1.\") == 0 && subject.isInGroup(\"{group}\")) {{\n    \
         return polkit.Result.YES;\n  }}\n}});\n"
    )
}

/// Waits until polkitd has picked up a rule granting `user` the `manage-instances` action
/// (polkitd notices new rule files by itself, a little later).
pub fn wait_for_manage_grant(bus: &TestBus, user: &str) -> Result<(), WaitTimedOut> {
    wait_for(Duration::from_secs(20), || {
        let output = vgpuctl(bus, Some(user), &["--json", "permissions"]);
        output.status.success()
            && serde_json::from_slice::<serde_json::Value>(&output.stdout)
                .map(|p| p["org.mdevmanager.vgpu1.manage-instances"] == "yes")
                .unwrap_or(false)
    })
}

/// Runs the `mdev-e2e-client` helper (`client`: its path) with `args`, as root or (with
/// `user`) as another user, and returns what it printed: method → outcome.
pub fn call_everything(
    bus: &TestBus,
    client: &Path,
    user: Option<&str>,
    args: &[&str],
) -> std::collections::BTreeMap<String, String> {
    let (mut command, client) = match user {
        Some(user) => {
            let mut command = Command::new("runuser");
            command.args(["-u", user, "--", "env"]);
            (command, runnable_by_others(bus, client))
        }
        None => (Command::new("env"), client.to_path_buf()),
    };
    let output = command
        .arg(format!("DBUS_SYSTEM_BUS_ADDRESS={}", bus.address()))
        .arg(client)
        .args(args)
        .output()
        .expect("run the client");
    assert!(
        output.status.success(),
        "client as {user:?} failed: {}",
        stderr_of(&output)
    );
    serde_json::from_slice(&output.stdout).expect("client JSON")
}

/// Every file (not directory) below `root`, at any depth, in no particular order.
pub fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

fn run(command: &mut Command) -> io::Result<()> {
    let output = command.output()?;
    if output.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_conf_is_turned_into_a_private_bus() {
        let conf = "<busconfig>\n  <type>system</type>\n  <user>messagebus</user>\n  <fork/>\n  \
                    <standard_system_servicedirs/>\n  \
                    <servicehelper>/usr/lib/dbus-1.0/dbus-daemon-launch-helper</servicehelper>\n  \
                    <pidfile>/run/dbus/pid</pidfile>\n  <syslog/>\n  \
                    <listen>unix:path=/run/dbus/system_bus_socket</listen>\n  \
                    <include ignore_missing=\"yes\">/etc/dbus-1/system.conf</include>\n  \
                    <includedir>system.d</includedir>\n  \
                    <includedir>/etc/dbus-1/system.d</includedir>\n  \
                    <include ignore_missing=\"yes\">/etc/dbus-1/system-local.conf</include>\n\
                    </busconfig>\n";
        let out = system_bus_config(conf, Path::new("/tmp/x/bus"), Path::new("/tmp/x/policy"));
        assert!(out.contains("<type>system</type>"));
        assert!(out.contains("<listen>unix:path=/tmp/x/bus</listen>"));
        assert!(out.contains("<includedir>/usr/share/dbus-1/system.d</includedir>"));
        assert!(out.contains("<includedir>/tmp/x/policy</includedir>"));
        for gone in [
            "<user>",
            "<fork/>",
            "<pidfile>",
            "<syslog/>",
            "system_bus_socket",
            "servicedirs",
            "launch-helper",
            "/etc/dbus-1/",
        ] {
            assert!(!out.contains(gone), "{gone} left in {out}");
        }
    }
}
