//! `mdev-manager`: the vGPU host service on D-Bus (`org.mdevmanager.VGpu1`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Parser;
use mdev_engine::{DiskFiles, Engine, EngineConfig, PciAddress, PlacementRequest};
use mdev_host::{HostFs, RealFs};
use mdev_manager::daemon::auth::{Authorizer, Polkit};
use mdev_manager::daemon::single_instance::{self, NameWatch, StateDirLock};
use mdev_manager::daemon::Service;
use serde::Deserialize;

/// Default configuration file (host path, under --root).
const CONFIG_PATH: &str = "/etc/mdev-manager/mdev-manager.toml";

#[derive(Debug, Parser)]
#[command(
    name = "mdev-manager",
    version,
    about = "vGPU host service (VFIO mdev and SR-IOV) on D-Bus"
)]
struct Cli {
    /// Serve on the session bus instead of the system bus.
    #[arg(long, conflicts_with = "address")]
    session: bool,
    /// Serve on the bus at this D-Bus address (`unix:path=/run/...`).
    #[arg(long, value_name = "ADDR")]
    address: Option<String>,
    /// Run on the simulated host instead of the real one: a built-in topology name
    /// (`default`, `samples`, `scale`) or a topology TOML file.
    #[arg(long, value_name = "TOPOLOGY", num_args = 0..=1, default_missing_value = "default")]
    simulate: Option<String>,
    /// Directory of the state store (host path; default /var/lib/mdev-manager, or a fresh
    /// temporary directory with --simulate).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Directory of the profile files (host path; default /etc/mdev-manager/profiles.d).
    #[arg(long, value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    /// Root directory every host path is re-rooted under (default `/`).
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// Configuration file (host path).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Do not reconcile at start (no device is touched until a client asks).
    #[arg(long)]
    no_reconcile: bool,
    /// Write the man page mdev-manager.8 into DIR and exit (used by packaging).
    #[arg(long, value_name = "DIR", hide = true)]
    generate_man: Option<PathBuf>,
}

fn write_man_page(dir: &std::path::Path) -> Result<()> {
    use clap::CommandFactory;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .section("8")
        .render(&mut page)
        .context("cannot render the man page")?;
    let path = dir.join("mdev-manager.8");
    std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))
}

/// `/etc/mdev-manager/mdev-manager.toml`; every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    state_dir: Option<PathBuf>,
    profiles_dir: Option<PathBuf>,
    mdevctl_dir: Option<PathBuf>,
    /// Keep `mdevctl_dir` in step with the persistent instances (default: on, except on the
    /// simulated host with root `/`, where it would write the real `/etc/mdevctl.d`).
    mirror_mdevctl: Option<bool>,
    readiness_timeout_ms: Option<u64>,
    write_timeout_ms: Option<u64>,
    log: Option<String>,
    /// Default placement of a create that says none: `pack` or `spread`.
    placement: Option<String>,
    /// Default preferred NUMA node of a create that names none.
    numa_node: Option<i64>,
    /// With `numa_node`: accept only parents on it.
    numa_strict: Option<bool>,
    /// NVIDIA GPUs (PCI addresses) whose mixed-size vGPU mode the administrator turned on.
    nvidia_mixed_mode: Option<Vec<String>>,
    /// Host path of NVIDIA's `sriov-manage` (VF changes on NVIDIA GPUs go only through it).
    nvidia_sriov_manage: Option<PathBuf>,
    /// How long a vendor tool (`sriov-manage`, `nvidia-smi`) may run before it is killed.
    vendor_command_timeout_ms: Option<u64>,
    /// Host path of `nvidia-smi` (vGPU telemetry reads `nvidia-smi vgpu -q`).
    nvidia_smi: Option<PathBuf>,
    /// Append each durable change to `state.journal` rather than rewrite `state.json`
    /// (default: on; `false` is the whole-file mode).
    state_journal: Option<bool>,
}

impl ConfigFile {
    /// The placement defaults and the mixed-mode parents, checked: a bad value names the file
    /// (`path`), the key and the value, and the service does not start.
    fn placement_settings(&self, path: &Path) -> Result<(PlacementRequest, Vec<String>)> {
        let file = path.display();
        let policy = match self.placement.as_deref() {
            None => None,
            Some(value) => Some(
                mdev_manager::daemon::options::parse_policy(value).with_context(|| {
                    format!("config file {file}: placement = {value:?}: expected \"pack\" or \"spread\"")
                })?,
            ),
        };
        let numa_node = self
            .numa_node
            .map(|node| {
                u32::try_from(node).ok().with_context(|| {
                    format!("config file {file}: numa_node = {node}: expected a NUMA node number (0 or more)")
                })
            })
            .transpose()?;
        if self.numa_strict == Some(true) && numa_node.is_none() {
            bail!("config file {file}: numa_strict = true needs numa_node (the node to be strict about)");
        }
        let mut mixed = Vec::new();
        for value in self.nvidia_mixed_mode.iter().flatten() {
            let address: PciAddress = value.parse().with_context(|| {
                format!("config file {file}: nvidia_mixed_mode entry {value:?}: expected a PCI address such as \"0000:3b:00.0\"")
            })?;
            let address = address.to_string();
            if !mixed.contains(&address) {
                mixed.push(address);
            }
        }
        let placement = PlacementRequest {
            policy,
            numa_node,
            numa_strict: self.numa_strict.unwrap_or(false),
        };
        Ok((placement, mixed))
    }
}

fn init_logging(level: Option<&str>) {
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_env("MDEV_MANAGER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.unwrap_or("info")));
    // systemd sets JOURNAL_STREAM for units whose output goes to the journal: log natively
    // there (structured fields, priorities) instead of as plain lines.
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(journald) = tracing_journald::layer() {
            tracing_subscriber::registry()
                .with(filter)
                .with(journald)
                .init();
            return;
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// The config file and the path it was read from (for messages).
fn read_config(cli: &Cli) -> Result<(ConfigFile, PathBuf)> {
    let explicit = cli.config.is_some();
    let host_path = cli
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(CONFIG_PATH));
    let path = RealFs::new(&cli.root)
        .resolve(&host_path)
        .with_context(|| format!("config path {}", host_path.display()))?;
    let config = match std::fs::read_to_string(&path) {
        Ok(text) => {
            toml::from_str(&text).with_context(|| format!("config file {}", path.display()))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => ConfigFile::default(),
        Err(e) => {
            return Err(e).with_context(|| format!("cannot read config file {}", path.display()))
        }
    };
    Ok((config, path))
}

/// The host to work on, the features to publish, and the simulated host when there is one.
type OpenedHost = (
    Arc<dyn HostFs>,
    Vec<String>,
    Option<mdev_manager::simulated::SimHost>,
);

fn open_host(cli: &Cli) -> Result<OpenedHost> {
    let mut features = vec![
        "mdev".to_string(),
        "sriov".to_string(),
        "persistence".to_string(),
        "claims".to_string(),
    ];
    match &cli.simulate {
        None => Ok((Arc::new(RealFs::new(&cli.root)), features, None)),
        Some(topology) => {
            let (fs, host) = mdev_manager::simulated::open(topology)?;
            features.push("simulated".to_string());
            Ok((fs, features, Some(host)))
        }
    }
}

/// glibc malloc arenas the daemon may use. glibc's default (8 per CPU) gives each thread that
/// meets contention an arena of its own, which keeps freed memory resident per thread; the
/// service's work is one engine call at a time per request, so one arena costs no throughput
/// and keeps its resident memory down (docs/benchmarks.md, item 4).
const MALLOC_ARENAS: libc::c_int = 1;

/// Allocations from this size up get pages of their own, given back to the system when freed.
/// glibc's default threshold adapts upwards after such a block is freed, after which the big
/// temporaries of a start-up reconcile or a large listing (buffers of several MiB with 4,096
/// instances) stay in the heap and resident; a fixed threshold keeps that from happening.
const MALLOC_MMAP_THRESHOLD: libc::c_int = 256 * 1024;

/// Gives the heap's free pages back to the system (glibc keeps them after `free`): called once
/// the start-up reconcile and the publication are done, whose temporaries are freed by then
/// and sit between what stays (measured with 4,096 instances: 84.9 MiB resident before, 64.0
/// MiB after; `docs/benchmarks.md`, issue 15).
fn return_free_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists under its lock.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn main() -> Result<()> {
    // Before any thread exists, so no thread has made an arena of its own yet.
    // SAFETY: mallopt only sets an allocator parameter; no thread is allocating concurrently
    // (the runtime is started below).
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(serve())
}

async fn serve() -> Result<()> {
    let cli = Cli::parse();
    if let Some(dir) = &cli.generate_man {
        return write_man_page(dir);
    }
    let (config, config_path) = read_config(&cli)?;
    let (placement, mixed_mode_parents) = config.placement_settings(&config_path)?;
    init_logging(config.log.as_deref());

    let (host, features, sim) = open_host(&cli)?;
    let mut engine_config = EngineConfig::default();
    if let Some(dir) = config.state_dir.clone() {
        engine_config.state_dir = dir;
    }
    if let Some(dir) = config.profiles_dir.clone() {
        engine_config.profiles_dir = dir;
    }
    if let Some(dir) = config.mdevctl_dir.clone() {
        engine_config.mdevctl_dir = dir;
    }
    if let Some(ms) = config.readiness_timeout_ms {
        engine_config.readiness_timeout = std::time::Duration::from_millis(ms);
    }
    if let Some(ms) = config.write_timeout_ms {
        engine_config.write_timeout = std::time::Duration::from_millis(ms);
    }
    if let Some(path) = config.nvidia_sriov_manage.clone() {
        if !path.is_absolute() {
            bail!(
                "config file {}: nvidia_sriov_manage = {:?}: expected an absolute path",
                config_path.display(),
                path.display()
            );
        }
        engine_config.nvidia_sriov_manage = path;
    }
    if let Some(path) = config.nvidia_smi.clone() {
        if !path.is_absolute() {
            bail!(
                "config file {}: nvidia_smi = {:?}: expected an absolute path",
                config_path.display(),
                path.display()
            );
        }
        engine_config.nvidia_smi = path;
    }
    engine_config.state_journal = config.state_journal.unwrap_or(true);
    if let Some(ms) = config.vendor_command_timeout_ms {
        engine_config.vendor_command_timeout = std::time::Duration::from_millis(ms);
    }
    engine_config.placement = placement;
    engine_config.nvidia_mixed_mode_parents = mixed_mode_parents;
    match (&cli.state_dir, &sim) {
        (Some(dir), _) => engine_config.state_dir = dir.clone(),
        (None, Some(_)) if config.state_dir.is_none() => {
            // A simulated host must never write the real host's state.
            let dir = std::env::temp_dir().join(format!("mdev-manager-sim-{}", std::process::id()));
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create state directory {}", dir.display()))?;
            engine_config.state_dir = dir;
        }
        _ => {}
    }
    if let (Some(dir), None) = (&cli.state_dir, &sim) {
        // The libvirt hook learns the state directory from the config file only; a release it
        // records while the service is down would go where the service does not look.
        let configured = config
            .state_dir
            .clone()
            .unwrap_or_else(|| EngineConfig::default().state_dir);
        if *dir != configured {
            tracing::warn!(
                state_dir = %dir.display(),
                config_state_dir = %configured.display(),
                "--state-dir differs from the config file's state_dir, which the libvirt hook reads; set state_dir in {} instead",
                config_path.display()
            );
        }
    }
    if let Some(dir) = &cli.profiles_dir {
        engine_config.profiles_dir = dir.clone();
    }
    if sim.is_some() && cli.root == Path::new("/") {
        // The simulated GPUs' NVIDIA scheduler options must not reach the real modprobe.d.
        engine_config.nvidia_modprobe_path =
            engine_config.state_dir.join("mdev-manager-nvidia.conf");
    }
    if sim.is_some()
        && cli.root == std::path::Path::new("/")
        && engine_config.state_dir.starts_with("/var/lib")
    {
        bail!(
            "refusing to use {} with --simulate: pass --state-dir",
            engine_config.state_dir.display()
        );
    }
    // One service per state directory: the lock comes before the state is read or the host
    // touched, and is held until the process ends.
    let state_dir_on_disk = RealFs::new(&cli.root)
        .resolve(&engine_config.state_dir)
        .with_context(|| format!("state directory {}", engine_config.state_dir.display()))?;
    let state_dir_lock = StateDirLock::acquire(&state_dir_on_disk)?;
    tracing::info!(
        simulated = sim.is_some(),
        root = %cli.root.display(),
        state_dir = %engine_config.state_dir.display(),
        profiles_dir = %engine_config.profiles_dir.display(),
        lock = %state_dir_lock.path().display(),
        "starting"
    );

    let files = Arc::new(DiskFiles::new(&cli.root));
    // Under the lock no other writer is alive: a temporary state file is a killed writer's.
    let stale =
        mdev_engine::state::remove_stale_temp_files(files.as_ref(), &engine_config.state_dir)
            .context("cannot clear the state directory's temporary files")?;
    for path in stale {
        tracing::info!(path = %path.display(), "removed a temporary state file a killed writer left");
    }
    let engine =
        Arc::new(Engine::new(host, files, engine_config).context("cannot open the engine")?);

    let builder = if let Some(address) = &cli.address {
        zbus::connection::Builder::address(address.as_str())
    } else if cli.session {
        zbus::connection::Builder::session()
    } else {
        zbus::connection::Builder::system()
    };
    // Polkit needs a connection of its own to ask polkitd from inside method handlers; it is
    // made on the same bus as the service first, and asks the bus whether another service
    // owns the name: if one does, this one stops before its start-up reconcile touches the host.
    let polkit_connection = if let Some(address) = &cli.address {
        zbus::connection::Builder::address(address.as_str())
            .build()
            .await
    } else if cli.session {
        zbus::Connection::session().await
    } else {
        zbus::Connection::system().await
    }
    .context("cannot connect to the bus")?;
    single_instance::ensure_name_unowned(&polkit_connection).await?;
    let authorizer: Arc<dyn Authorizer> = Arc::new(Polkit::new(polkit_connection));
    let service = Service::new(engine.clone(), authorizer, features);
    if sim.is_none() {
        service.enable_probe(cli.root.clone());
    }
    let simulated_on_real_root = sim.is_some() && cli.root == Path::new("/");
    if config.mirror_mdevctl.unwrap_or(!simulated_on_real_root) {
        service.enable_mdevctl_mirror();
    }
    let connection = service
        .serve(builder, !cli.no_reconcile)
        .await
        .context("cannot start the service")?;

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hotplug = mdev_manager::daemon::host_events(
        &engine,
        sim.as_ref(),
        cli.root == std::path::Path::new("/"),
        &stop,
    );
    // Watching before asking, so a loss right after the request is not missed.
    let mut name_watch = NameWatch::new(&connection).await?;
    return_free_memory();
    Service::request_name(&connection).await?;
    tracing::info!(name = dbus_api::names::BUS_NAME, "ready");

    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    // A service without its name serves nobody: it says so and exits non-zero (after the same
    // clean-up as a stop), and systemd's Restart=on-failure starts it again.
    let outcome = tokio::select! {
        _ = term.recv() => {
            tracing::info!("SIGTERM: shutting down");
            Ok(())
        }
        _ = int.recv() => {
            tracing::info!("SIGINT: shutting down");
            Ok(())
        }
        lost = name_watch.lost() => {
            tracing::error!("{lost}");
            Err(lost)
        }
    };
    // Give the name back first so clients see the service go away, then stop the host events.
    let _ = connection.release_name(dbus_api::names::BUS_NAME).await;
    // Running jobs stop at their next step and roll back (a wait for a parent could otherwise
    // hold the exit for as long as it was allowed to wait).
    let cancelled = service.cancel_all_jobs();
    if cancelled > 0 {
        tracing::info!(cancelled, "cancelled the running jobs");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Some(thread) = hotplug {
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
    drop(connection);
    // A clean stop leaves the whole state in state.json (the journal folded into it).
    let folded = {
        let engine = engine.clone();
        tokio::task::spawn_blocking(move || engine.fold_state_journal()).await
    };
    if let Ok(Err(error)) = folded {
        tracing::warn!(error = %vgpu_types::error_chain(&error), "cannot fold the state journal at stop");
    }
    tracing::info!("stopped");
    drop(state_dir_lock);
    Ok(outcome?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdev_engine::PlacementPolicy;

    fn settings(text: &str) -> Result<(PlacementRequest, Vec<String>)> {
        let config: ConfigFile = toml::from_str(text)?;
        config.placement_settings(Path::new("/etc/mdev-manager/mdev-manager.toml"))
    }

    #[test]
    fn placement_keys_become_the_engine_defaults() {
        let (placement, mixed) = settings(
            "placement = \"spread\"\nnuma_node = 1\nnuma_strict = true\n\
             nvidia_mixed_mode = [\"0000:3B:00.0\", \"0000:5e:00.0\", \"0000:3b:00.0\"]\n",
        )
        .unwrap();
        assert_eq!(
            placement,
            PlacementRequest {
                policy: Some(PlacementPolicy::Spread),
                numa_node: Some(1),
                numa_strict: true,
            }
        );
        assert_eq!(mixed, ["0000:3b:00.0", "0000:5e:00.0"]);
        let (placement, mixed) = settings("").unwrap();
        assert_eq!(placement, PlacementRequest::default());
        assert!(mixed.is_empty());
    }

    #[test]
    fn bad_values_name_the_file_key_and_value() {
        let cases = [
            ("placement = \"spred\"", "placement", "spred"),
            ("placement = \"Pack\"", "placement", "Pack"),
            ("numa_node = -1", "numa_node", "-1"),
            ("numa_strict = true", "numa_strict", "numa_node"),
            (
                "nvidia_mixed_mode = [\"0000:3b:00.0\", \"3b:00.0\"]",
                "nvidia_mixed_mode",
                "3b:00.0",
            ),
        ];
        for (text, key, value) in cases {
            let error = format!("{:#}", settings(text).unwrap_err());
            assert!(
                error.contains("/etc/mdev-manager/mdev-manager.toml"),
                "{error}"
            );
            assert!(error.contains(key), "{error}");
            assert!(error.contains(value), "{error}");
        }
        // Unknown keys and wrong types are refused by the parser itself.
        assert!(toml::from_str::<ConfigFile>("placment = \"pack\"").is_err());
        assert!(toml::from_str::<ConfigFile>("numa_strict = \"yes\"").is_err());
        assert!(toml::from_str::<ConfigFile>("nvidia_mixed_mode = \"0000:3b:00.0\"").is_err());
    }
}
