//! Model-based fuzzing of the engine (issue 16, item 4): the fuzz input is a program of engine
//! operations (create, batch create, VF create, destroy, claim by profile or by UUID, release,
//! weight change, VF count change — the crash torture's [`Op`]s), each optionally preceded by a
//! one-shot fault injected into the simulated host (EIO, EBUSY, ENOSPC on a `create`, `remove`,
//! `bind` or `sriov_numvfs` write) and optionally cut by a crash: the process "dies" right
//! before or right after its `k`-th host write (every later host and state write is lost, as
//! after a SIGKILL), then a new engine opens the durable state and reconciles, as the daemon
//! does on start. A clean restart (no crash) can be asked for too.
//!
//! After every step the engine and the simulated host are checked against a reference model —
//! the instances the acknowledged operations made, their claims and weights — and against the
//! crash torture's invariants:
//!
//! 1. no orphan: every mdev on the host is managed, every VF bound to vfio-pci is held;
//! 2. every transient or autostart instance the engine lists is active on the host;
//! 3. no VF is held by two instances;
//! 4. acknowledged instances, claims and weights are kept (also across a crash); an operation
//!    that failed changed nothing it did not own; nothing appears that no operation made;
//! 5. at the end everything is destroyed and every type's capacity and the VF count are back
//!    to their boot values.
//!
//! A violated property panics (a finding for libFuzzer); the engine itself must never panic.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use mdev_engine::state::StateFiles;
use mdev_engine::{Catalog, Engine, EngineConfig, InstanceInfo};
use mdev_host::{HostCommands, HostFs};
use mdev_sim::{Fault, SimHost, Topology};

use crate::torture::{perform, Op, Outcome, PF, TOPOLOGY};

/// The longest program run: longer inputs are cut (each step costs a few host writes).
pub const MAX_STEPS: usize = 48;

/// The shared "process is dead" switch of one engine incarnation: set by the host when the
/// crash point is reached; from then on no host write and no state write takes effect.
#[derive(Debug, Default)]
struct Crash {
    dead: AtomicBool,
    /// Host writes left before the crash (`u32::MAX`: no crash planned).
    writes_left: AtomicU32,
    /// Crash before (`true`) or after the write that reaches zero.
    before: AtomicBool,
    /// UUIDs written to a `create` file since the operation began.
    created: Mutex<Vec<String>>,
}

impl Crash {
    fn arm(&self, after_writes: u32, before: bool) {
        self.before.store(before, Ordering::SeqCst);
        self.writes_left.store(after_writes, Ordering::SeqCst);
    }

    fn disarm(&self) {
        self.writes_left.store(u32::MAX, Ordering::SeqCst);
    }

    fn revive(&self) {
        self.disarm();
        self.dead.store(false, Ordering::SeqCst);
    }

    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }
}

fn dead_error() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

/// The simulated host as one engine incarnation sees it: writes stop at the crash point.
#[derive(Debug)]
struct CrashHost {
    sim: SimHost,
    crash: Arc<Crash>,
}

impl HostFs for CrashHost {
    fn read(&self, path: &Path) -> io::Result<String> {
        self.sim.read(path)
    }

    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        if self.crash.is_dead() {
            return Err(dead_error());
        }
        let left = self.crash.writes_left.load(Ordering::SeqCst);
        if left != u32::MAX {
            let left = left.saturating_sub(1);
            self.crash.writes_left.store(left, Ordering::SeqCst);
            if left == 0 && self.crash.before.load(Ordering::SeqCst) {
                self.crash.dead.store(true, Ordering::SeqCst);
                return Err(dead_error());
            }
        }
        let result = self.sim.write(path, data);
        if result.is_ok() && path.ends_with("create") {
            if let Ok(mut created) = self.crash.created.lock() {
                created.push(String::from_utf8_lossy(data).trim().to_lowercase());
            }
        }
        if left == 1 {
            // The write took effect; the process died before it heard back.
            self.crash.dead.store(true, Ordering::SeqCst);
            return Err(dead_error());
        }
        result
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        self.sim.list(dir)
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        self.sim.read_link(path)
    }

    fn exists(&self, path: &Path) -> bool {
        self.sim.exists(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.sim.is_dir(path)
    }

    fn commands(&self) -> &dyn HostCommands {
        self.sim.commands()
    }
}

/// Durable files in memory: a write after the crash point is lost.
#[derive(Debug)]
struct MemFiles {
    files: Mutex<HashMap<PathBuf, Vec<u8>>>,
    crash: Arc<Crash>,
}

impl MemFiles {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Vec<u8>>> {
        self.files
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl StateFiles for MemFiles {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        Ok(self.map().get(path).cloned())
    }

    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        if self.crash.is_dead() {
            return Err(dead_error());
        }
        self.map().insert(path.to_path_buf(), data.to_vec());
        Ok(())
    }

    fn append(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        if self.crash.is_dead() {
            return Err(dead_error());
        }
        self.map()
            .entry(path.to_path_buf())
            .or_default()
            .extend_from_slice(data);
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        Ok(self
            .map()
            .keys()
            .filter(|path| path.parent() == Some(dir))
            .filter_map(|path| path.file_name().map(|name| name.to_os_string()))
            .collect())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        if self.crash.is_dead() {
            return Err(dead_error());
        }
        self.map().remove(path);
        Ok(())
    }
}

/// How the engines of a run perform their host writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostWrites {
    /// On the calling thread, no deadline (`EngineConfig::inline_host_writes`): the simulated
    /// host never blocks, so a worker thread per write only adds wake-ups (a tenth of the
    /// context switches without it; docs/reliability.md). What the fuzz target uses.
    Inline,
    /// Through the engine's bounded-writer threads with a deadline, as the daemon does.
    Bounded,
}

/// Engine settings: short waits (the simulated host answers at once).
fn config(writes: HostWrites) -> EngineConfig {
    EngineConfig {
        readiness_timeout: Duration::from_millis(20),
        poll_interval: Duration::from_millis(1),
        write_timeout: Duration::from_secs(5),
        // The service's mode: every change an append to the state journal.
        state_journal: true,
        inline_host_writes: writes == HostWrites::Inline,
        ..EngineConfig::default()
    }
}

/// Reads the fuzz input a byte at a time; zeros once it runs out.
struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((first, rest)) => {
                self.data = rest;
                *first
            }
            None => 0,
        }
    }

    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

const MDEV_TYPES: [(&str, &str); 5] = [
    ("mtty", "mtty-1"),
    ("mtty", "mtty-2"),
    ("mbochs", "mbochs-small"),
    ("mbochs", "mbochs-large"),
    ("mdpy", "mdpy-vga"),
];
const PROFILES: [&str; 4] = ["mbochs-small", "mdpy-vga", "mtty", "mtty-dual"];
const DOMAINS: [&str; 2] = [
    "9a3b6f0e-1111-4c3d-8e9f-aabbccddee01",
    "9a3b6f0e-2222-4c3d-8e9f-aabbccddee02",
];
const FAULT_FILES: [&str; 5] = ["create", "remove", "bind", "sriov_numvfs", "unbind"];
const FAULT_ERRNOS: [i32; 3] = [libc::EIO, libc::EBUSY, libc::ENOSPC];

/// One step of a program.
#[derive(Debug)]
enum Step {
    Operation {
        op: Op,
        fault: Option<(&'static str, i32)>,
        /// Crash at the `k`-th host write of the operation: (k, before the write).
        crash: Option<(u32, bool)>,
    },
    /// Stop and start the service cleanly (reconcile on start).
    Restart,
}

fn decode_step(input: &mut Input<'_>, managed: &[InstanceInfo]) -> Step {
    let selector = input.byte();
    if selector >= 250 {
        return Step::Restart;
    }
    let mdev_type = |input: &mut Input<'_>| {
        let (parent, type_id) = MDEV_TYPES[input.below(MDEV_TYPES.len())];
        (parent.to_string(), type_id.to_string())
    };
    let pick_uuid = |input: &mut Input<'_>| -> Option<String> {
        (!managed.is_empty()).then(|| managed[input.below(managed.len())].uuid.clone())
    };
    let op = match selector % 10 {
        0 | 1 => {
            let (parent, type_id) = mdev_type(input);
            let flags = input.byte();
            Op::CreateMdev {
                parent,
                type_id,
                autostart: flags & 1 != 0,
                weight: (flags & 2 != 0).then(|| 1 + u32::from(input.byte())),
            }
        }
        2 => Op::CreateBatch {
            items: (0..2 + input.below(2)).map(|_| mdev_type(input)).collect(),
        },
        3 => Op::CreateVf,
        4 => match pick_uuid(input) {
            Some(uuid) => Op::Destroy {
                uuid,
                force: input.byte() & 1 != 0,
            },
            None => Op::CreateVf,
        },
        5 | 6 => {
            let domain = DOMAINS[input.below(DOMAINS.len())].to_string();
            let persistent: Vec<&InstanceInfo> = managed
                .iter()
                .filter(|i| i.persistent && i.claim.is_none())
                .collect();
            if input.byte() & 1 != 0 && !persistent.is_empty() {
                Op::Claim {
                    domain,
                    uuid: Some(persistent[input.below(persistent.len())].uuid.clone()),
                    profile: None,
                }
            } else {
                Op::Claim {
                    domain,
                    uuid: None,
                    profile: Some(PROFILES[input.below(PROFILES.len())].to_string()),
                }
            }
        }
        7 => Op::Release {
            domain: DOMAINS[input.below(DOMAINS.len())].to_string(),
        },
        8 => match pick_uuid(input) {
            Some(uuid) => Op::SetWeight {
                uuid,
                weight: 1 + u32::from(input.byte()),
            },
            None => Op::CreateVf,
        },
        _ => Op::SetNumVfs {
            num_vfs: u32::from(input.byte() % 5),
            force: input.byte() & 1 != 0,
        },
    };
    let extra = input.byte();
    let fault = (extra & 0x03 == 0x03).then(|| {
        (
            FAULT_FILES[usize::from(extra >> 2) % FAULT_FILES.len()],
            FAULT_ERRNOS[usize::from(extra >> 5) % FAULT_ERRNOS.len()],
        )
    });
    let crash =
        (extra & 0x0c == 0x0c).then(|| (1 + u32::from(extra >> 4 & 0x07), extra & 0x80 != 0));
    Step::Operation { op, fault, crash }
}

/// What the reference model holds an instance to.
#[derive(Debug, Clone, PartialEq)]
struct Expected {
    claim: Option<String>,
    weight: Option<u32>,
}

fn expected_of(info: &InstanceInfo) -> Expected {
    Expected {
        claim: info.claim.as_ref().map(|c| c.domain_uuid.to_string()),
        weight: info.scheduling.weight,
    }
}

/// One fuzz run (see the module documentation) with inline host writes. Panics naming the
/// step and the property when the engine breaks one.
pub fn run(data: &[u8]) {
    run_with(data, HostWrites::Inline);
}

/// One fuzz run whose engines write to the host as `writes` says; the same checks either way.
pub fn run_with(data: &[u8], writes: HostWrites) {
    // The topology is parsed once per process; each run boots a fresh host from it.
    static TOPOLOGY_PARSED: OnceLock<Option<Topology>> = OnceLock::new();
    let parsed = TOPOLOGY_PARSED.get_or_init(|| {
        SimHost::builtin_topology_text(TOPOLOGY).and_then(|text| Topology::from_toml(text).ok())
    });
    let Some(topology) = parsed else {
        panic!("the {TOPOLOGY} topology does not parse");
    };
    let sim = SimHost::new(topology.clone());
    let crash = Arc::new(Crash::default());
    crash.revive();
    let files: Arc<MemFiles> = Arc::new(MemFiles {
        files: Mutex::new(HashMap::new()),
        crash: Arc::clone(&crash),
    });
    // The profiles are loaded once per process, the way `Engine::new` loads them (the state
    // files hold no profiles directory: the built-in catalog), and shared by every engine.
    static CATALOG: OnceLock<Result<Arc<Catalog>, String>> = OnceLock::new();
    let catalog = match CATALOG.get_or_init(|| {
        Engine::load_catalog(files.as_ref(), &config(writes)).map_err(|error| error.to_string())
    }) {
        Ok(catalog) => catalog,
        Err(error) => panic!("the profiles do not load: {error}"),
    };
    let boot_capacity = capacity(&sim);
    let open = || -> Engine {
        let host = Arc::new(CrashHost {
            sim: sim.clone(),
            crash: Arc::clone(&crash),
        });
        let engine = Engine::with_catalog(host, files.clone(), config(writes), Arc::clone(catalog))
            .unwrap_or_else(|error| panic!("the engine does not open on its own state: {error}"));
        if let Err(error) = engine.reconcile() {
            panic!("reconcile failed: {error}");
        }
        engine
    };
    let mut engine = open();
    // The managed instances as the last check saw them: nothing changes between a check and
    // the next step, so the step is decoded against them instead of listing them again (a
    // listing is a full host discovery, most of a step's cost).
    let mut managed = managed_of(&engine);
    let mut model: BTreeMap<String, Expected> = BTreeMap::new();
    let mut input = Input { data };
    let mut steps = Vec::new();
    // `ENGINE_MODEL_TRACE=1`: every step and the instances after it, on stderr.
    let trace = std::env::var_os("ENGINE_MODEL_TRACE").is_some();
    while !input.is_empty() && steps.len() < MAX_STEPS {
        let step = decode_step(&mut input, &managed);
        let label = format!("step {} {step:?}", steps.len() + 1);
        match &step {
            Step::Restart => {
                drop(engine);
                engine = open();
                managed = check(&engine, &sim, &label, &mut model, None);
            }
            Step::Operation {
                op,
                fault,
                crash: plan,
            } => {
                if let Some((file, errno)) = fault {
                    sim.inject_fault(Fault::fail(format!("*/{file}"), *errno).times(1));
                }
                if let Ok(mut created) = crash.created.lock() {
                    created.clear();
                }
                if let Some((k, before)) = plan {
                    crash.arm(*k, *before);
                }
                let outcome = perform(&engine, op);
                sim.clear_faults();
                crash.disarm();
                if crash.is_dead() {
                    // The process died in the middle of `op`: a new one opens the durable
                    // state and reconciles.
                    let created: BTreeSet<String> = crash
                        .created
                        .lock()
                        .map(|c| c.iter().cloned().collect())
                        .unwrap_or_default();
                    drop(engine);
                    crash.revive();
                    engine = open();
                    managed = check(
                        &engine,
                        &sim,
                        &label,
                        &mut model,
                        Some((op, None, &created)),
                    );
                } else {
                    let created: BTreeSet<String> = crash
                        .created
                        .lock()
                        .map(|c| c.iter().cloned().collect())
                        .unwrap_or_default();
                    managed = check(
                        &engine,
                        &sim,
                        &label,
                        &mut model,
                        Some((op, Some(&outcome), &created)),
                    );
                }
            }
        }
        if trace {
            eprintln!("{label}");
            for info in &managed {
                eprintln!(
                    "    {} {:?} {} vf={:?} active={} persistent={} autostart={} claim={:?}",
                    info.uuid,
                    info.kind,
                    info.type_id,
                    info.vf,
                    info.active,
                    info.persistent,
                    info.autostart,
                    info.claim.as_ref().map(|c| c.domain_uuid.to_string())
                );
            }
        }
        steps.push(label);
    }
    // Everything destroyed: capacity and VFs back to boot.
    let outcome = perform(&engine, &Op::Teardown);
    if let Outcome::Err { kind, message } = &outcome {
        panic!("teardown after {steps:?} failed: {kind}: {message}");
    }
    let left: Vec<String> = sim.mdev_uuids();
    assert!(
        left.is_empty(),
        "mdevs left after teardown: {left:?}; steps {steps:?}"
    );
    assert_eq!(
        capacity(&sim),
        boot_capacity,
        "capacity after teardown differs from boot; steps {steps:?}"
    );
    assert_eq!(
        sim.vf_count(),
        0,
        "VFs left after teardown; steps {steps:?}"
    );
}

fn managed_of(engine: &Engine) -> Vec<InstanceInfo> {
    engine
        .instances()
        .map(|all| all.into_iter().filter(|i| i.owner.is_some()).collect())
        .unwrap_or_default()
}

/// The checks after one step. `step`: the operation, its outcome (`None`: cut by a crash) and
/// the UUIDs it wrote to `create` files. Returns the managed instances it checked.
fn check(
    engine: &Engine,
    sim: &SimHost,
    label: &str,
    model: &mut BTreeMap<String, Expected>,
    step: Option<(&Op, Option<&Outcome>, &BTreeSet<String>)>,
) -> Vec<InstanceInfo> {
    let listed = managed_of(engine);
    check_listed(sim, label, model, step, &listed);
    listed
}

fn check_listed(
    sim: &SimHost,
    label: &str,
    model: &mut BTreeMap<String, Expected>,
    step: Option<(&Op, Option<&Outcome>, &BTreeSet<String>)>,
    listed: &[InstanceInfo],
) {
    let managed: BTreeMap<String, InstanceInfo> =
        listed.iter().map(|i| (i.uuid.clone(), i.clone())).collect();
    // 1. No orphan.
    for uuid in sim.mdev_uuids() {
        let uuid = uuid.to_lowercase();
        assert!(
            managed.contains_key(&uuid),
            "{label}: orphan: mdev {uuid} is on the host but not managed"
        );
    }
    let held: BTreeSet<String> = managed
        .values()
        .filter_map(|i| i.vf.map(|vf| vf.to_string()))
        .collect();
    if let Ok(pf) = PF.parse() {
        if let Some(sriov) = mdev_host::discovery::read_sriov_pf(sim, pf) {
            for vf in &sriov.vfs {
                let address = vf.function.address.to_string();
                assert!(
                    vf.function.driver.as_deref() != Some(mdev_host::discovery::VFIO_PCI)
                        || held.contains(&address),
                    "{label}: orphan: VF {address} is bound to vfio-pci but no instance holds it"
                );
            }
        }
    }
    // 2. What should exist exists; 3. no VF held twice.
    let mut vfs = BTreeSet::new();
    for info in managed.values() {
        assert!(
            info.active || (info.persistent && !info.autostart),
            "{label}: {} ({:?} {}) is listed transient or autostart but is not on the host",
            info.uuid,
            info.kind,
            info.type_id
        );
        if let Some(vf) = info.vf {
            assert!(vfs.insert(vf), "{label}: VF {vf} is held by two instances");
        }
    }
    // 4. The reference model.
    let Some((op, outcome, created)) = step else {
        assert_same(label, model, &managed, &BTreeSet::new());
        return;
    };
    // The instances `op` may have changed (acknowledged or not).
    let touched: BTreeSet<String> = match op {
        Op::Destroy { uuid, .. } | Op::SetWeight { uuid, .. } => BTreeSet::from([uuid.clone()]),
        Op::Claim {
            uuid: Some(uuid), ..
        } => BTreeSet::from([uuid.clone()]),
        Op::Release { domain } => model
            .iter()
            .filter(|(_, e)| e.claim.as_deref() == Some(domain))
            .map(|(u, _)| u.clone())
            .collect(),
        Op::SetNumVfs { .. } | Op::Teardown => managed
            .values()
            .filter(|i| i.vf.is_some())
            .map(|i| i.uuid.clone())
            .chain(model.keys().filter(|u| !managed.contains_key(*u)).cloned())
            .collect(),
        _ => BTreeSet::new(),
    };
    match outcome {
        Some(Outcome::Ok { uuids }) => {
            apply(model, op, uuids, &managed);
            assert_same(label, model, &managed, &BTreeSet::new());
        }
        Some(Outcome::Err { kind, message }) => {
            assert!(
                !kind.is_empty() && !message.trim().is_empty(),
                "{label}: untyped error"
            );
            // A failed operation changed nothing but what it touched, and made nothing —
            // unless its rollback failed (a fault on a `remove`), when what it could not
            // remove stays recorded (never unrecorded: check 1).
            let mut allowed = touched.clone();
            if message.contains("rollback incomplete") {
                allowed.extend(leftovers(op, model, &managed, created));
            }
            assert_same(label, model, &managed, &allowed);
        }
        None => {
            // Cut by a crash: what it touched may have gone either way; it may have left what
            // it created recorded (its save was done, its reply not), never unrecorded.
            let mut allowed = touched.clone();
            allowed.extend(leftovers(op, model, &managed, created));
            assert_same(label, model, &managed, &allowed);
        }
    }
    // Learn what the touched instances became.
    for uuid in managed.keys().chain(model.clone().keys()) {
        if touched.contains(uuid) || !model.contains_key(uuid) {
            match managed.get(uuid) {
                Some(info) => {
                    model.insert(uuid.clone(), expected_of(info));
                }
                None => {
                    model.remove(uuid);
                }
            }
        }
    }
}

/// The managed instances `op` may have made that the model does not know: the mdevs it wrote
/// to a `create` file, and for an operation that can make a VF instance or a claim, any.
fn leftovers(
    op: &Op,
    model: &BTreeMap<String, Expected>,
    managed: &BTreeMap<String, InstanceInfo>,
    created: &BTreeSet<String>,
) -> BTreeSet<String> {
    managed
        .iter()
        .filter(|(uuid, _)| !model.contains_key(*uuid))
        .filter(|(uuid, info)| {
            created.contains(*uuid)
                || (info.vf.is_some() && matches!(op, Op::CreateVf | Op::Claim { .. }))
                || matches!(op, Op::Claim { uuid: None, .. })
        })
        .map(|(uuid, _)| uuid.clone())
        .collect()
}

/// The model after an acknowledged `op` that returned `uuids`.
fn apply(
    model: &mut BTreeMap<String, Expected>,
    op: &Op,
    uuids: &[String],
    managed: &BTreeMap<String, InstanceInfo>,
) {
    match op {
        Op::CreateMdev { .. } | Op::CreateBatch { .. } | Op::CreateVf => {
            for uuid in uuids {
                let expected = managed.get(uuid).map(expected_of).unwrap_or(Expected {
                    claim: None,
                    weight: None,
                });
                model.insert(uuid.clone(), expected);
            }
        }
        Op::Claim { domain, .. } => {
            for uuid in uuids {
                let weight = managed.get(uuid).and_then(|i| i.scheduling.weight);
                let weight = model.get(uuid).map_or(weight, |e| e.weight);
                model.insert(
                    uuid.clone(),
                    Expected {
                        claim: Some(domain.clone()),
                        weight,
                    },
                );
            }
        }
        Op::Release { domain } => {
            for uuid in uuids {
                model.remove(uuid);
            }
            for expected in model.values_mut() {
                if expected.claim.as_deref() == Some(domain) {
                    expected.claim = None;
                }
            }
            // A released persistent instance may stay or be stopped; it stays managed.
        }
        Op::Destroy { uuid, .. } => {
            model.remove(uuid);
        }
        Op::SetWeight { uuid, weight } => {
            if let Some(expected) = model.get_mut(uuid) {
                expected.weight = Some(*weight);
            }
        }
        Op::SetNumVfs { .. } | Op::Teardown => {
            model.retain(|uuid, _| managed.contains_key(uuid));
        }
    }
}

/// The engine's managed instances are the model's, except `free` (may differ either way).
fn assert_same(
    label: &str,
    model: &BTreeMap<String, Expected>,
    managed: &BTreeMap<String, InstanceInfo>,
    free: &BTreeSet<String>,
) {
    for (uuid, expected) in model {
        if free.contains(uuid) {
            continue;
        }
        let Some(info) = managed.get(uuid) else {
            panic!("{label}: acknowledged instance {uuid} is lost");
        };
        assert_eq!(
            &expected_of(info),
            expected,
            "{label}: instance {uuid} differs from what was acknowledged"
        );
    }
    for uuid in managed.keys() {
        assert!(
            model.contains_key(uuid) || free.contains(uuid),
            "{label}: instance {uuid} is managed but no acknowledged operation made it"
        );
    }
}

/// `available_instances` of every mdev type.
fn capacity(sim: &SimHost) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let base = Path::new("/sys/class/mdev_bus");
    for parent in sim.list(base).unwrap_or_default() {
        let types = base.join(&parent).join("mdev_supported_types");
        for type_id in sim.list(&types).unwrap_or_default() {
            let value = sim
                .read(&types.join(&type_id).join("available_instances"))
                .unwrap_or_default();
            out.insert(
                format!("{}/{}", parent.to_string_lossy(), type_id.to_string_lossy()),
                value.trim().to_string(),
            );
        }
    }
    out
}
