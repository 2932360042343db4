//! Engine scenarios on the simulated host, one file per operation family; this file holds the
//! fixtures they share (a simulated host and an engine on it, requests, state readers, event
//! helpers, failing state stores).

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use super::*;
use mdev_sim::{Fault, SimHost};

mod bad_input;
mod batch;
mod claims;
mod create;
mod events;
mod import;
mod per_call_costs;
mod profile_placement;
mod races;
mod readiness;
mod reconcile;
mod remove;
mod sriov;

const UUID_A: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
const UUID_B: &str = "0b7f4c6e-1a2b-4c3d-8e9f-001122334455";
const DOMAIN_UUID: &str = "9a3b6f0e-1111-4c3d-8e9f-aabbccddeeff";
const OTHER_DOMAIN_UUID: &str = "9a3b6f0e-2222-4c3d-8e9f-aabbccddeeff";
const T4: &str = "0000:3b:00.0";
const H200: &str = "0000:4b:00.0";
const NVME: &str = "0000:01:00.0";

struct Setup {
    sim: SimHost,
    engine: Arc<Engine>,
    dir: tempfile::TempDir,
}

/// Bounds generous enough that a loaded CI machine never trips them; the tests that
/// expect a timeout use [`short_timeouts`].
fn config() -> EngineConfig {
    EngineConfig {
        readiness_timeout: Duration::from_secs(10),
        poll_interval: Duration::from_millis(10),
        write_timeout: Duration::from_secs(10),
        ..EngineConfig::default()
    }
}

/// For tests that wait for a timeout to happen.
fn short_timeouts() -> EngineConfig {
    EngineConfig {
        readiness_timeout: Duration::from_millis(300),
        write_timeout: Duration::from_millis(300),
        ..config()
    }
}

fn setup_with(topology: &str, config: EngineConfig) -> Setup {
    let sim = SimHost::builtin(topology).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(
        Engine::new(
            Arc::new(sim.clone()),
            Arc::new(DiskFiles::new(dir.path())),
            config,
        )
        .unwrap(),
    );
    Setup { sim, engine, dir }
}

fn setup(topology: &str) -> Setup {
    let sim = SimHost::builtin(topology).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(&sim, dir.path());
    Setup { sim, engine, dir }
}

fn open(sim: &SimHost, root: &Path) -> Arc<Engine> {
    Arc::new(
        Engine::new(
            Arc::new(sim.clone()),
            Arc::new(DiskFiles::new(root)),
            config(),
        )
        .unwrap(),
    )
}

fn mdev(parent: &str, type_id: &str, uuid: Option<&str>) -> CreateRequest {
    CreateRequest {
        uuid: uuid.map(str::to_owned),
        ..CreateRequest::new(CreateTarget::Mdev {
            parent: parent.into(),
            type_id: type_id.into(),
        })
    }
}

fn saved_state(setup: &Setup) -> serde_json::Value {
    let text =
        std::fs::read_to_string(setup.dir.path().join("var/lib/mdev-manager/state.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn domain(uuid: &str) -> DomainRef {
    DomainRef {
        name: format!("vm-{}", &uuid[9..13]),
        uuid: uuid.into(),
    }
}

/// The simulated host's uevents as a [`HostEvents`] source.
struct SimEvents(std::sync::mpsc::Receiver<mdev_sim::SimEvent>);

impl HostEvents for SimEvents {
    fn next_event(&mut self, timeout: Duration) -> Option<HostEvent> {
        let event = self.0.recv_timeout(timeout).ok()?;
        Some(HostEvent {
            action: match event.action {
                mdev_sim::UeventAction::Add => HostEventAction::Add,
                mdev_sim::UeventAction::Remove => HostEventAction::Remove,
                mdev_sim::UeventAction::Change => HostEventAction::Change,
                mdev_sim::UeventAction::Bind => HostEventAction::Bind,
                mdev_sim::UeventAction::Unbind => HostEventAction::Unbind,
            },
            subsystem: event.subsystem.clone(),
            sysname: event
                .devpath
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned(),
            properties: event.properties.clone(),
        })
    }
}

fn wait_for(events: &EventSubscription, wanted: &EngineEvent) -> bool {
    wait_for_all(events, std::slice::from_ref(wanted))
}

/// Waits until every one of `wanted` was seen, in any order.
fn wait_for_all(events: &EventSubscription, wanted: &[EngineEvent]) -> bool {
    let mut missing: Vec<&EngineEvent> = wanted.iter().collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !missing.is_empty() && std::time::Instant::now() < deadline {
        if let Some(event) = events.recv_timeout(Duration::from_millis(50)) {
            missing.retain(|m| **m != event);
        }
    }
    missing.is_empty()
}

fn profile(name: &str) -> CreateRequest {
    CreateRequest::new(CreateTarget::Profile {
        profile: name.into(),
        parent: None,
    })
}

fn profile_on(name: &str, parent: &str) -> CreateRequest {
    CreateRequest::new(CreateTarget::Profile {
        profile: name.into(),
        parent: Some(parent.into()),
    })
}

/// The VF behind a PF's `virtfnN` link.
fn virtfn(sim: &SimHost, pf: &str, index: u32) -> String {
    let link = sim
        .read_link(Path::new(&format!(
            "/sys/bus/pci/devices/{pf}/virtfn{index}"
        )))
        .unwrap();
    link.file_name().unwrap().to_string_lossy().into_owned()
}

/// State files whose atomic writes fail once armed (a full or failing disk), and which keep
/// only what was durably written: a crash between writes loses nothing that was acknowledged.
#[derive(Debug)]
struct FailingFiles {
    inner: DiskFiles,
    fail_writes: std::sync::atomic::AtomicBool,
}

impl StateFiles for FailingFiles {
    fn read(&self, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
        self.inner.read(path)
    }
    fn write_atomic(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.inner.write_atomic(path, data)
    }
    fn append(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.inner.append(path, data)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        self.inner.list(dir)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove(path)
    }
}

/// [`StateFiles`] on disk that keeps a copy of every state it saves.
#[derive(Debug)]
struct RecordingFiles {
    disk: DiskFiles,
    saved: Mutex<Vec<serde_json::Value>>,
}

impl StateFiles for RecordingFiles {
    fn read(&self, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
        self.disk.read(path)
    }
    fn write_atomic(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        if path.ends_with(crate::state::STATE_FILE_NAME) {
            lock(&self.saved).push(serde_json::from_slice(data).unwrap());
        }
        self.disk.write_atomic(path, data)
    }
    fn append(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        self.disk.append(path, data)?;
        if path.ends_with(crate::journal::JOURNAL_FILE_NAME) {
            // In journal mode a save is an append: keep the whole state it makes.
            let dir = path.parent().unwrap_or(Path::new("/"));
            let state = crate::state::load(&self.disk, dir).map_err(std::io::Error::other)?;
            lock(&self.saved).push(serde_json::to_value(state).map_err(std::io::Error::other)?);
        }
        Ok(())
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        self.disk.list(dir)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.disk.remove(path)
    }
}

fn sorted_keys(value: &serde_json::Value, field: &str) -> Vec<String> {
    let mut keys: Vec<String> = match &value[field] {
        serde_json::Value::Object(map) => map.keys().cloned().collect(),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect(),
        _ => Vec::new(),
    };
    keys.sort();
    keys
}

/// The `scale` host (8 identical parents, the first four on NUMA node 0, the rest on node 1)
/// with a profile any of them can take.
fn scale_with_profile(placement: PlacementRequest) -> Setup {
    let sim = SimHost::builtin("scale").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("etc/mdev-manager/profiles.d");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("sim.toml"),
        "[[profile]]\nname = \"sim-small\"\ndescription = \"512M\"\n[profile.pin]\ntype_name = \"SIM-512M\"\n",
    )
    .unwrap();
    let engine = Arc::new(
        Engine::new(
            Arc::new(sim.clone()),
            Arc::new(DiskFiles::new(dir.path())),
            EngineConfig {
                placement,
                ..config()
            },
        )
        .unwrap(),
    );
    Setup { sim, engine, dir }
}

fn sim_small(placement: PlacementRequest) -> CreateRequest {
    CreateRequest {
        placement,
        ..profile("sim-small")
    }
}

fn numa_of_parent(s: &Setup, parent: &str) -> Option<u32> {
    let address: PciAddress = parent.parse().unwrap();
    s.sim
        .read(
            &Path::new("/sys/bus/pci/devices")
                .join(address.to_string())
                .join("numa_node"),
        )
        .ok()
        .and_then(|text| text.trim().parse().ok())
}
