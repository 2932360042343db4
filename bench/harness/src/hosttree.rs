//! Host trees the benchmarks run on: the simulated `scale` host with instances created by the
//! engine, written out as a REAL directory tree so that mdevctl (`MDEVCTL_ENV_ROOT`) and the
//! daemon (`--root`) read the very same files, plus the profile file and mdevctl's layout.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mdev_engine::{CreateRequest, CreateTarget, DiskFiles, Engine, EngineConfig, InstanceInfo};
use mdev_host::HostFs;
use mdev_sim::SimHost;

use crate::error::{BenchError, Result};

/// The built-in simulated topology with 8 GPUs of 4, 8, ..., 32 mdev types.
pub const SCALE_TOPOLOGY: &str = "scale";
/// The profile the create benchmarks use: 512 MiB of a scale GPU (`simgpu-1`).
pub const BENCH_PROFILE: &str = "bench-512m";
/// The parents of the scale topology.
pub const SCALE_PARENTS: [&str; 8] = [
    "0000:10:00.0",
    "0000:20:00.0",
    "0000:30:00.0",
    "0000:40:00.0",
    "0000:50:00.0",
    "0000:60:00.0",
    "0000:70:00.0",
    "0000:80:00.0",
];

const PROFILE_FILE: &str = r#"# Benchmark profile (written by mdev-bench): the smallest type of the simulated scale GPUs.
[[profile]]
name = "bench-512m"
description = "Benchmark seat: 512 MiB of a simulated scale GPU"

[profile.pin]
type_id = "simgpu-1"
"#;

/// Writes the benchmark profile under `root`'s `/etc/mdev-manager/profiles.d`.
pub fn write_profiles(root: &Path) -> Result<()> {
    let dir = root.join("etc/mdev-manager/profiles.d");
    std::fs::create_dir_all(&dir).map_err(BenchError::io("cannot create", &dir))?;
    let file = dir.join("bench.toml");
    std::fs::write(&file, PROFILE_FILE).map_err(BenchError::io("cannot write", &file))
}

/// The directories mdevctl insists on under `MDEVCTL_ENV_ROOT`.
pub fn write_mdevctl_layout(root: &Path) -> Result<()> {
    for dir in [
        "usr/lib/mdevctl/scripts.d/callouts",
        "usr/lib/mdevctl/scripts.d/notifiers",
        "etc/mdevctl.d/scripts.d/callouts",
        "etc/mdevctl.d/scripts.d/notifiers",
    ] {
        let path = root.join(dir);
        std::fs::create_dir_all(&path).map_err(BenchError::io("cannot create", &path))?;
    }
    Ok(())
}

/// `count` persistent autostart create requests of the scale types `simgpu-1..=3`, spread
/// round-robin over the 8 parents (48 per parent for 384, well inside each 64 GiB pool).
pub fn scale_requests(count: usize) -> Vec<CreateRequest> {
    (0..count)
        .map(|i| {
            let parent = SCALE_PARENTS[i % SCALE_PARENTS.len()].to_string();
            let type_id = format!("simgpu-{}", (i / SCALE_PARENTS.len()) % 3 + 1);
            let mut request = CreateRequest::new(CreateTarget::Mdev { parent, type_id });
            request.persistent = true;
            request.autostart = true;
            request
        })
        .collect()
}

/// What [`build_inventory_tree`] made.
#[derive(Debug)]
pub struct InventoryTree {
    /// The instances (active and defined).
    pub instances: Vec<InstanceInfo>,
    /// How many mdev types the parents offer in all.
    pub type_count: usize,
}

/// Creates `count` instances on a fresh simulated scale host through the engine (state under
/// `root`), writes the host's sysfs as files and links under `root`, and the same instances as
/// mdevctl definitions in `root/etc/mdevctl.d`.
pub fn build_inventory_tree(root: &Path, count: usize) -> Result<InventoryTree> {
    build_tree(root, SCALE_TOPOLOGY, &SCALE_PARENTS, scale_requests(count))
}

/// The parents of the ten-times topology `scale-4096`: 64 GPUs on buses `0x40..=0x7f`.
pub const SCALE_4096_TOPOLOGY: &str = "scale-4096";

/// The 64 parents of [`SCALE_4096_TOPOLOGY`].
pub fn scale_4096_parents() -> Vec<String> {
    (0x40..0x80)
        .map(|bus| format!("0000:{bus:02x}:00.0"))
        .collect()
}

/// `count` persistent autostart create requests on [`SCALE_4096_TOPOLOGY`], round-robin over
/// its 64 parents, all of type `simgpu-1` (the benchmark profile's type: a parent running one
/// time-sliced type refuses a profile of another unless mixed mode is on). 64 per parent for
/// 4,096: 32 GiB of each 64 GiB pool, so every parent keeps room for more.
pub fn scale_4096_requests(count: usize) -> Vec<CreateRequest> {
    let parents = scale_4096_parents();
    (0..count)
        .map(|i| {
            let parent = parents[i % parents.len()].clone();
            let type_id = "simgpu-1".to_owned();
            let mut request = CreateRequest::new(CreateTarget::Mdev { parent, type_id });
            request.persistent = true;
            request.autostart = true;
            request
        })
        .collect()
}

/// Creates `requests` on a fresh simulated `topology` host through the engine (state under
/// `root`, in the engine's default state directory), writes the host's sysfs as files and
/// links under `root`, and the same instances as mdevctl definitions in `root/etc/mdevctl.d`.
/// `parents` are the parents whose types are counted.
pub fn build_tree<P: AsRef<str>>(
    root: &Path,
    topology: &str,
    parents: &[P],
    requests: Vec<CreateRequest>,
) -> Result<InventoryTree> {
    let sim = SimHost::builtin(topology)
        .map_err(BenchError::setup(format!("the {topology} topology")))?;
    let engine = Engine::new(
        Arc::new(sim.clone()),
        Arc::new(DiskFiles::new(root)),
        EngineConfig::default(),
    )
    .map_err(BenchError::setup(format!(
        "the engine on the {topology} host"
    )))?;
    let count = requests.len();
    let instances = engine
        .create_batch(requests)
        .map_err(BenchError::setup(format!(
            "{count} instances on the {topology} host"
        )))?;
    materialize(&sim, root)?;
    write_mdevctl_definitions(root, &instances)?;
    write_mdevctl_layout(root)?;
    let mut type_count = 0;
    for parent in parents {
        let dir = PathBuf::from(format!(
            "/sys/class/mdev_bus/{}/mdev_supported_types",
            parent.as_ref()
        ));
        type_count += sim
            .list(&dir)
            .map_err(BenchError::io("cannot list (simulated)", &dir))?
            .len();
    }
    Ok(InventoryTree {
        instances,
        type_count,
    })
}

/// Writes every directory, link and file of the simulated host under `root`: files hold what
/// reading them gives (write-only attributes such as `create` become empty files), links keep
/// their relative kernel-style targets.
pub fn materialize(sim: &SimHost, root: &Path) -> Result<()> {
    let contents: std::collections::HashMap<String, String> = sim
        .read_all_files()
        .into_iter()
        .map(|(path, value)| (path, value.unwrap_or_default()))
        .collect();
    for entry in sim.tree_listing() {
        if let Some(dir) = entry.strip_suffix('/') {
            let path = rooted(root, dir);
            std::fs::create_dir_all(&path).map_err(BenchError::io("cannot create", &path))?;
        } else if let Some((link, target)) = entry.split_once(" -> ") {
            let path = rooted(root, link);
            ensure_parent(&path)?;
            let target = if target.starts_with('/') {
                rooted(root, target)
            } else {
                PathBuf::from(target)
            };
            std::os::unix::fs::symlink(&target, &path)
                .map_err(BenchError::io("cannot link", &path))?;
        } else {
            let path = rooted(root, &entry);
            ensure_parent(&path)?;
            let text = contents.get(&entry).map(String::as_str).unwrap_or("");
            std::fs::write(&path, text).map_err(BenchError::io("cannot write", &path))?;
        }
    }
    Ok(())
}

/// Each instance as `etc/mdevctl.d/<parent>/<uuid>`, mdevctl's definition format.
fn write_mdevctl_definitions(root: &Path, instances: &[InstanceInfo]) -> Result<()> {
    for instance in instances {
        let dir = root.join("etc/mdevctl.d").join(&instance.parent);
        std::fs::create_dir_all(&dir).map_err(BenchError::io("cannot create", &dir))?;
        let definition = serde_json::json!({
            "mdev_type": instance.type_id,
            "start": "auto",
            "attrs": [],
        });
        let path = dir.join(&instance.uuid);
        std::fs::write(&path, format!("{definition}\n"))
            .map_err(BenchError::io("cannot write", &path))?;
    }
    Ok(())
}

fn rooted(root: &Path, host_path: &str) -> PathBuf {
    root.join(host_path.trim_start_matches('/'))
}

fn ensure_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(parent) => {
            std::fs::create_dir_all(parent).map_err(BenchError::io("cannot create", parent))
        }
        None => Ok(()),
    }
}
