//! One service per host, over a real bus: a second `mdev-manager` beside a running one stops
//! before it touches anything, naming who holds what; a service whose bus goes away says so
//! and exits non-zero; temporary state files a killed writer left are cleared at start.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use dbus_api::names::BUS_NAME;
use e2e_tests::bus::{
    created_uuids, start_service_in, vgpuctl, wait_for, workspace_binary, TestBus,
};

/// The lock file in the state directory (`mdev_manager::daemon::single_instance`).
const LOCK_FILE_NAME: &str = "mdev-manager.lock";

/// A domain UUID whose pending release a start-up reconcile would finish (and delete).
const PENDING_DOMAIN: &str = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b";

/// A fresh state directory in the bus's scratch directory.
fn state_dir(bus: &TestBus, prefix: &str) -> PathBuf {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(bus.dir())
        .expect("state dir")
        .keep()
}

/// Leaves a release the hook "could not deliver" in `state_dir`: only a start-up reconcile
/// removes it, so its presence afterwards shows no reconcile ran.
fn leave_pending_release(state_dir: &Path) -> PathBuf {
    let dir = state_dir.join("pending-releases");
    std::fs::create_dir_all(&dir).expect("pending-releases dir");
    let file = dir.join(PENDING_DOMAIN);
    std::fs::write(&file, "left-by-the-hook\n").expect("pending release");
    file
}

/// Every file below `dir` with its bytes, sorted by path.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = e2e_tests::bus::files_under(dir)
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).expect("read a state file");
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

/// Runs a daemon on the simulated host that is expected to refuse to start: waits (at most
/// 60 s, then kills it and fails naming what it printed) for it to exit; returns its status
/// and stderr.
fn run_refused_daemon(bus: &TestBus, state_dir: &Path) -> (ExitStatus, String) {
    let stderr_path = bus.dir().join("refused-daemon.stderr");
    let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
    let mut child = Command::new(workspace_binary("mdev-manager"))
        .args(["--simulate", "default", "--state-dir"])
        .arg(state_dir)
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .env("MDEV_MANAGER_LOG", "info")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start the second mdev-manager");
    let exited = wait_for(Duration::from_secs(60), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if exited.is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the second mdev-manager was still running after 60 s; it printed:\n{}",
            std::fs::read_to_string(&stderr_path).unwrap_or_default()
        );
    }
    let status = child.wait().expect("status of the second mdev-manager");
    let text = std::fs::read_to_string(&stderr_path).expect("read its stderr");
    (status, text)
}

/// The unique name and pid of the connection owning the service's name now.
async fn name_owner(bus: &TestBus) -> (String, u32) {
    let connection = bus.connect().await;
    let dbus = zbus::fdo::DBusProxy::new(&connection)
        .await
        .expect("DBus proxy");
    let owner = dbus
        .get_name_owner(BUS_NAME.try_into().expect("bus name"))
        .await
        .expect("the service's name has an owner");
    let pid = dbus
        .get_connection_unix_process_id(owner.as_ref().into())
        .await
        .expect("the owner's pid");
    (owner.to_string(), pid)
}

fn list_json(bus: &TestBus) -> String {
    let output = vgpuctl(bus, None, &["--json", "list"]);
    assert!(output.status.success(), "vgpuctl list failed: {output:?}");
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_service_on_the_same_state_directory_exits_naming_the_lock_and_changes_nothing() {
    let bus = TestBus::start().expect("dbus-daemon");
    let state = state_dir(&bus, "state-");
    let first = start_service_in(&bus, "default", &state, "info", &[]).expect("first service");
    let uuids = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "nvidia-t4-2q", "--count", "2"],
    ));
    assert_eq!(uuids.len(), 2);
    let pending = leave_pending_release(&state);
    let (owner_before, first_pid) = name_owner(&bus).await;
    let files_before = snapshot(&state);
    let list_before = list_json(&bus);

    // On the same bus, and on another bus (where only the lock can stop it).
    let other_bus = TestBus::start().expect("a second dbus-daemon");
    for (which, bus) in [("the same bus", &bus), ("another bus", &other_bus)] {
        let (status, stderr) = run_refused_daemon(bus, &state);

        assert!(
            !status.success(),
            "on {which} the second service exited {status}"
        );
        let lock = state.join(LOCK_FILE_NAME);
        assert!(
            stderr.contains(&lock.display().to_string())
                && stderr.contains(&format!("pid {first_pid}")),
            "on {which} the message names neither the lock file {} nor the holder's pid \
             {first_pid}:\n{stderr}",
            lock.display()
        );
        assert!(
            !stderr.contains("ready"),
            "on {which} the second service said it was ready:\n{stderr}"
        );
        assert_eq!(
            snapshot(&state),
            files_before,
            "on {which} the second service changed the state directory"
        );
        assert!(
            pending.exists(),
            "on {which} the second service ran a reconcile"
        );
    }
    assert_eq!(
        name_owner(&bus).await,
        (owner_before, first_pid),
        "the name changed hands"
    );
    assert_eq!(
        list_json(&bus),
        list_before,
        "the first service's host changed"
    );
    // The first still serves: it changes the host when asked.
    let destroyed = vgpuctl(&bus, None, &["destroy", &uuids[0]]);
    assert!(destroyed.status.success(), "{destroyed:?}");
    drop(first);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_service_on_the_same_bus_with_another_state_directory_exits_naming_the_owner_before_reconciling(
) {
    let bus = TestBus::start().expect("dbus-daemon");
    let first_state = state_dir(&bus, "state-first-");
    let _first =
        start_service_in(&bus, "default", &first_state, "info", &[]).expect("first service");
    let (owner, first_pid) = name_owner(&bus).await;
    let second_state = state_dir(&bus, "state-second-");
    let pending = leave_pending_release(&second_state);

    let (status, stderr) = run_refused_daemon(&bus, &second_state);

    assert!(!status.success(), "the second service exited {status}");
    for wanted in [BUS_NAME, owner.as_str(), &format!("pid {first_pid}")] {
        assert!(
            stderr.contains(wanted),
            "the message does not name {wanted}:\n{stderr}"
        );
    }
    assert!(
        pending.exists(),
        "the second service ran its start-up reconcile before finding the name taken:\n{stderr}"
    );
    assert_eq!(name_owner(&bus).await, (owner, first_pid));
    assert!(list_json(&bus).starts_with('['));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_asking_to_replace_the_service_does_not_get_its_name() {
    let bus = TestBus::start().expect("dbus-daemon");
    let state = state_dir(&bus, "state-");
    let _service = start_service_in(&bus, "default", &state, "info", &[]).expect("service");
    let before = name_owner(&bus).await;
    let intruder = bus.connect().await;
    let reply = zbus::fdo::DBusProxy::new(&intruder)
        .await
        .expect("DBus proxy")
        .request_name(
            BUS_NAME.try_into().expect("bus name"),
            zbus::fdo::RequestNameFlags::REPLACE_EXISTING
                | zbus::fdo::RequestNameFlags::DO_NOT_QUEUE,
        )
        .await
        .expect("RequestName is answered");
    assert_eq!(reply, zbus::fdo::RequestNameReply::Exists);
    assert_eq!(name_owner(&bus).await, before, "the name changed hands");
    assert!(list_json(&bus).starts_with('['));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_whose_bus_goes_away_says_so_and_exits_non_zero() {
    let bus = TestBus::start().expect("dbus-daemon");
    let state = state_dir(&bus, "state-");
    let stderr_path = bus.dir().join("service.stderr");
    let mut child = Command::new(workspace_binary("mdev-manager"))
        .args(["--simulate", "default", "--state-dir"])
        .arg(&state)
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .env("MDEV_MANAGER_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("start mdev-manager");
    let owned = wait_for(Duration::from_secs(30), || {
        e2e_tests::bus::name_has_owner(&bus.address(), BUS_NAME)
    });
    if owned.is_err() {
        let _ = child.kill();
        panic!("mdev-manager did not take its name");
    }
    // The bus driver answers for itself with the dbus-daemon's pid.
    let connection = bus.connect().await;
    let bus_pid = zbus::fdo::DBusProxy::new(&connection)
        .await
        .expect("DBus proxy")
        .get_connection_unix_process_id("org.freedesktop.DBus".try_into().expect("name"))
        .await
        .expect("the dbus-daemon's pid");
    drop(connection);
    // SAFETY: kill(2) on the test bus's dbus-daemon, which this test started.
    unsafe {
        libc::kill(bus_pid as i32, libc::SIGKILL);
    }

    let exited = wait_for(Duration::from_secs(30), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    if exited.is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("mdev-manager kept running 30 s after its bus went away:\n{stderr}");
    }
    let status = child.wait().expect("status");
    assert!(!status.success(), "it exited {status}:\n{stderr}");
    assert!(
        stderr.contains("bus connection closed") && stderr.contains(BUS_NAME),
        "it did not say why it stopped:\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn temporary_state_files_a_killed_writer_left_are_removed_at_start_and_the_state_is_kept() {
    let bus = TestBus::start().expect("dbus-daemon");
    let state = state_dir(&bus, "state-");
    let service = start_service_in(&bus, "default", &state, "info", &[]).expect("service");
    let uuids = created_uuids(&vgpuctl(
        &bus,
        None,
        &["--json", "create", "nvidia-t4-2q", "--autostart"],
    ));
    let stopped = service.terminate().expect("stop the service");
    assert!(stopped.status.success(), "{stopped:?}");
    e2e_tests::bus::wait_name_released(&bus).expect("the name is released");
    let state_file = state.join("state.json");
    let state_bytes = std::fs::read(&state_file).expect("state.json");
    // What a kill inside the atomic write leaves: a torn copy under the writer's pid.
    let stale: Vec<PathBuf> = [4242u32, 1]
        .iter()
        .map(|pid| state.join(format!("state.json.tmp.{pid}")))
        .collect();
    for path in &stale {
        std::fs::write(path, &state_bytes[..state_bytes.len() / 2]).expect("stale temp file");
    }

    // Without a reconcile the state file must come through byte for byte.
    let _service =
        start_service_in(&bus, "default", &state, "info", &["--no-reconcile"]).expect("restart");

    for path in &stale {
        assert!(!path.exists(), "{} is still there", path.display());
    }
    assert_eq!(
        std::fs::read(&state_file).expect("state.json"),
        state_bytes,
        "state.json changed"
    );
    let listed = list_json(&bus);
    assert!(
        listed.contains(&uuids[0]),
        "{} is not listed: {listed}",
        uuids[0]
    );
}
