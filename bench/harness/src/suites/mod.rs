//! One module per item of the benchmark issue (#8).

pub mod apply;
pub mod durable;
pub mod exporter;
pub mod footprint;
pub mod guest;
pub mod hook;
pub mod inventory;
pub mod lifecycle;
pub mod scale;

use std::path::{Path, PathBuf};

use crate::error::{BenchError, Result};
use crate::hosttree;
use crate::procs::{Daemon, PrivateBus};

/// The binaries under test and how many repetitions to make.
#[derive(Debug, Clone)]
pub struct Env {
    /// The repository root (fixtures).
    pub repo: PathBuf,
    /// `mdev-manager`.
    pub daemon: PathBuf,
    /// `vgpuctl`.
    pub vgpuctl: PathBuf,
    /// `mdev-manager-hook`.
    pub hook: PathBuf,
    /// `mdev-manager-mdevctl`, the mdevctl-compatible command.
    pub mdevctl_compat: PathBuf,
    /// Repetition counts.
    pub rounds: Rounds,
}

/// Repetition counts per kind of measurement.
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    /// Hook fast path rounds (each runs every command once).
    pub hook_fast: usize,
    /// Hook prepare/release pairs on the simulated host.
    pub hook_vgpu: usize,
    /// Inventory command rounds.
    pub inventory: usize,
    /// Single create+destroy rounds.
    pub single: usize,
    /// Batches of 384.
    pub batch: usize,
    /// Daemon cold starts.
    pub starts: usize,
    /// Property reads per client.
    pub reads_per_client: usize,
    /// Mutating calls per client.
    pub writes_per_client: usize,
}

impl Rounds {
    /// The counts `scripts/bench` uses.
    pub fn full() -> Self {
        Self {
            hook_fast: 1000,
            hook_vgpu: 60,
            inventory: 30,
            single: 60,
            batch: 2,
            starts: 5,
            reads_per_client: 300,
            writes_per_client: 15,
        }
    }

    /// A fast pass to check that everything runs.
    pub fn quick() -> Self {
        Self {
            hook_fast: 50,
            hook_vgpu: 5,
            inventory: 3,
            single: 5,
            batch: 1,
            starts: 2,
            reads_per_client: 20,
            writes_per_client: 3,
        }
    }
}

/// The daemon's `--state-dir` in every suite. The daemon re-roots host paths under its
/// `--root`, which is always a temp directory here, so the state lives in
/// `<temp root>/bench-state`: never the host's `/var/lib`, and gone with the temp directory.
pub const STATE_DIR: &str = "/bench-state";

/// `state.json` of a daemon running with `--root root` and [`STATE_DIR`].
pub fn state_file(root: &Path) -> PathBuf {
    root.join(STATE_DIR.trim_start_matches('/'))
        .join("state.json")
}

/// A temp directory prepared as a host root for the daemon: the benchmark profile and an empty
/// state directory ([`STATE_DIR`] under it).
pub fn daemon_root() -> Result<tempfile::TempDir> {
    let root = tempfile::tempdir().map_err(BenchError::io("cannot create", "a temp dir"))?;
    hosttree::write_profiles(root.path())?;
    let state = root.path().join(STATE_DIR.trim_start_matches('/'));
    std::fs::create_dir_all(&state).map_err(BenchError::io("cannot create", &state))?;
    Ok(root)
}

/// Starts the daemon on the simulated `topology` with its state and profiles under `root`.
pub fn simulated_daemon(
    env: &Env,
    bus: &PrivateBus,
    root: &Path,
    topology: &str,
) -> Result<Daemon> {
    Daemon::start(
        &env.daemon,
        bus.address(),
        &[
            format!("--simulate={topology}"),
            "--root".into(),
            root.display().to_string(),
            "--state-dir".into(),
            STATE_DIR.into(),
        ],
    )
}

/// Starts the daemon on the REAL directory tree at `root` (`--root`, the real-host code path),
/// with the state the engine wrote with the tree copied into [`STATE_DIR`], so it knows the
/// tree's instances as what they are (persistent, autostart). `--no-reconcile`: every instance
/// is already present, and the benchmark must not write the tree it compares on.
pub fn tree_daemon(env: &Env, bus: &PrivateBus, root: &Path) -> Result<Daemon> {
    let written = root.join("var/lib/mdev-manager/state.json");
    let state = state_file(root);
    if let Some(dir) = state.parent() {
        std::fs::create_dir_all(dir).map_err(BenchError::io("cannot create", dir))?;
    }
    std::fs::copy(&written, &state).map_err(BenchError::io("cannot copy", &written))?;
    Daemon::start(
        &env.daemon,
        bus.address(),
        &[
            "--root".into(),
            root.display().to_string(),
            "--no-reconcile".into(),
            "--state-dir".into(),
            STATE_DIR.into(),
        ],
    )
}

/// A client connection to the private bus.
pub async fn connect(bus: &PrivateBus) -> Result<zbus::Connection> {
    zbus::connection::Builder::address(bus.address())
        .build()
        .await
        .map_err(BenchError::bus("connect"))
}

/// Waits for every client task and pools their samples; the first failure (of a task, or the
/// task itself) is the result.
pub async fn join_clients(
    tasks: Vec<tokio::task::JoinHandle<Result<crate::stats::Samples>>>,
) -> Result<crate::stats::Samples> {
    let mut all = crate::stats::Samples::new();
    for task in tasks {
        let samples = task
            .await
            .map_err(|e| BenchError::Check(format!("a client task failed: {e}")))??;
        all.extend(&samples);
    }
    Ok(all)
}

/// A tokio runtime for the harness's own D-Bus clients.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::io("cannot start", "a tokio runtime"))
}

/// Destroys one instance by its object path.
pub async fn destroy_over_bus(
    connection: &zbus::Connection,
    path: zbus::OwnedObjectPath,
) -> Result<()> {
    dbus_api::proxy::InstanceProxy::builder(connection)
        .path(path)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .map_err(BenchError::bus("Instance proxy"))?
        .destroy(std::collections::HashMap::new())
        .await
        .map_err(BenchError::bus("Instance.Destroy"))
}

/// One `CreateInstances` of `profile` on `parent` and the `Destroy` of what it made, timed.
pub async fn bus_create_destroy(
    connection: &zbus::Connection,
    profile: &str,
    parent: &str,
) -> Result<std::time::Duration> {
    let manager = dbus_api::proxy::ManagerProxy::new(connection)
        .await
        .map_err(BenchError::bus("Manager proxy"))?;
    let started = std::time::Instant::now();
    let mut options = std::collections::HashMap::new();
    options.insert(
        dbus_api::names::option::PARENT,
        zbus::zvariant::Variant::from(parent),
    );
    let paths = manager
        .create_instances(profile, options)
        .await
        .map_err(BenchError::bus("CreateInstances"))?;
    for path in paths {
        destroy_over_bus(connection, path).await?;
    }
    Ok(started.elapsed())
}

/// `vgpuctl create` (the prepared command) then `vgpuctl destroy` of the UUID it printed, timed.
pub fn command_create_destroy(
    create: &crate::procs::Cmd,
    vgpuctl: &str,
    address: &str,
) -> Result<std::time::Duration> {
    let started = std::time::Instant::now();
    let output = create.output()?;
    let uuid = output
        .split_whitespace()
        .find(|word| is_uuid_word(word))
        .ok_or_else(|| BenchError::Check(format!("vgpuctl create printed no UUID: {output:?}")))?
        .to_string();
    crate::procs::Cmd::new(
        "vgpuctl destroy",
        vgpuctl,
        &["--address", address, "destroy", &uuid],
    )
    .output()?;
    Ok(started.elapsed())
}

/// Whether `word` has a UUID's shape (36 characters with four dashes); what the suites look for
/// in a command's output.
pub fn is_uuid_word(word: &str) -> bool {
    word.len() == 36 && word.matches('-').count() == 4
}
