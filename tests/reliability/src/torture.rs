//! Crash torture: the engine runs in a worker process (`torture-worker`, the daemon's engine
//! with its state on disk) against the simulated host served by this process
//! ([`crate::remote_host`]), so the kernel's devices survive the worker being SIGKILLed just as
//! they survive a daemon crash on a real host. Each round starts a worker (which reconciles
//! first, as the daemon does on start), lets it run a random batch of operations and kills it
//! at a chosen point:
//!
//! * right after the `k`-th kernel write took effect, before the worker heard of it (between
//!   the sysfs write and the state write);
//! * right before the `k`-th kernel write;
//! * after a random delay (anywhere, including inside the state file write);
//! * during a batch rollback (a create of the batch fails with EIO, the kill lands right after
//!   the first rollback `remove`).
//!
//! Then a checking worker starts, reconciles and lists the instances, and the invariants are
//! checked against the simulated host and the operations the killed worker had acknowledged.
//! A device a kill left that the restarted engine neither manages nor removed (an orphan) is a
//! violation.
//! A final round destroys everything and checks that every type's capacity is back to its
//! boot value.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdev_engine::state::{DiskFiles, Scheduling};
use mdev_engine::{
    CreateRequest, CreateTarget, DestroyOptions, DeviceRequest, DomainRef, Engine, EngineConfig,
    InstanceInfo, ReconcileAction, ReconcileReport,
};
use mdev_host::HostFs;
use mdev_sim::{Fault, SimHost};
use serde::{Deserialize, Serialize};

use crate::remote_host::{answer, RemoteHost, Request, Response};

/// The simulated topology: the kernel's sample mdev drivers and an SR-IOV NVMe PF.
pub const TOPOLOGY: &str = "samples";
/// The SR-IOV PF of [`TOPOLOGY`].
pub const PF: &str = "0000:01:00.0";
const MDEV_TYPES: [(&str, &str); 8] = [
    ("mtty", "mtty-1"),
    ("mtty", "mtty-2"),
    ("mbochs", "mbochs-small"),
    ("mbochs", "mbochs-medium"),
    ("mbochs", "mbochs-large"),
    ("mdpy", "mdpy-vga"),
    ("mdpy", "mdpy-xga"),
    ("mdpy", "mdpy-hd"),
];
const PROFILES: [&str; 4] = ["mbochs-small", "mdpy-vga", "mtty", "mtty-dual"];
const DOMAINS: [&str; 3] = [
    "9a3b6f0e-1111-4c3d-8e9f-aabbccddee01",
    "9a3b6f0e-2222-4c3d-8e9f-aabbccddee02",
    "9a3b6f0e-3333-4c3d-8e9f-aabbccddee03",
];

/// One operation of a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// `create` of one mdev.
    CreateMdev {
        /// Parent.
        parent: String,
        /// Type.
        type_id: String,
        /// Persistent + autostart.
        autostart: bool,
        /// Weight recorded.
        weight: Option<u32>,
    },
    /// `create_batch` of several mdevs, all or nothing.
    CreateBatch {
        /// (parent, type) per item.
        items: Vec<(String, String)>,
    },
    /// A free VF bound to vfio-pci.
    CreateVf,
    /// `destroy`.
    Destroy {
        /// Instance.
        uuid: String,
        /// Force.
        force: bool,
    },
    /// `claim_domain` with one device.
    Claim {
        /// Domain UUID.
        domain: String,
        /// Claim a known instance by UUID, else create from `profile`.
        uuid: Option<String>,
        /// Profile.
        profile: Option<String>,
    },
    /// `release_domain`.
    Release {
        /// Domain UUID.
        domain: String,
    },
    /// `set_scheduling` with a weight.
    SetWeight {
        /// Instance.
        uuid: String,
        /// Weight.
        weight: u32,
    },
    /// `set_num_vfs` on [`PF`].
    SetNumVfs {
        /// Count.
        num_vfs: u32,
        /// Force.
        force: bool,
    },
    /// Destroy every managed instance and disable the VFs (final round).
    Teardown,
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Success; the instances created or claimed, if any.
    Ok {
        /// UUIDs.
        uuids: Vec<String>,
    },
    /// A typed engine error.
    Err {
        /// `ErrorKind::name()`.
        kind: String,
        /// The message.
        message: String,
    },
}

/// Engine settings of the workers: short waits, the simulated host answers at once.
pub fn engine_config() -> EngineConfig {
    EngineConfig {
        readiness_timeout: Duration::from_millis(500),
        poll_interval: Duration::from_millis(5),
        write_timeout: Duration::from_secs(2),
        ..EngineConfig::default()
    }
}

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len() as u64) as usize])
    }
}

fn choose_op(rng: &mut Rng, managed: &[InstanceInfo]) -> Op {
    let uuids: Vec<String> = managed.iter().map(|i| i.uuid.clone()).collect();
    let mdev_type = |rng: &mut Rng| {
        let (parent, type_id) = MDEV_TYPES[rng.below(MDEV_TYPES.len() as u64) as usize];
        (parent.to_string(), type_id.to_string())
    };
    loop {
        let op = match rng.below(100) {
            0..=21 => {
                let (parent, type_id) = mdev_type(rng);
                Op::CreateMdev {
                    parent,
                    type_id,
                    autostart: rng.chance(40),
                    weight: rng.chance(50).then(|| 1 + rng.below(500) as u32),
                }
            }
            22..=33 => Op::CreateBatch {
                items: (0..2 + rng.below(2)).map(|_| mdev_type(rng)).collect(),
            },
            34..=39 => Op::CreateVf,
            40..=54 => match rng.pick(&uuids) {
                Some(uuid) => Op::Destroy {
                    uuid: uuid.clone(),
                    force: rng.chance(30),
                },
                None => continue,
            },
            55..=69 => {
                let domain = rng
                    .pick(&DOMAINS)
                    .copied()
                    .unwrap_or(DOMAINS[0])
                    .to_string();
                let persistent: Vec<String> = managed
                    .iter()
                    .filter(|i| i.persistent && i.claim.is_none())
                    .map(|i| i.uuid.clone())
                    .collect();
                match (rng.chance(40), rng.pick(&persistent)) {
                    (true, Some(uuid)) => Op::Claim {
                        domain,
                        uuid: Some(uuid.clone()),
                        profile: None,
                    },
                    _ => Op::Claim {
                        domain,
                        uuid: None,
                        profile: rng.pick(&PROFILES).map(|p| p.to_string()),
                    },
                }
            }
            70..=79 => Op::Release {
                domain: rng
                    .pick(&DOMAINS)
                    .copied()
                    .unwrap_or(DOMAINS[0])
                    .to_string(),
            },
            80..=91 => match rng.pick(&uuids) {
                Some(uuid) => Op::SetWeight {
                    uuid: uuid.clone(),
                    weight: 1 + rng.below(1000) as u32,
                },
                None => continue,
            },
            _ => Op::SetNumVfs {
                num_vfs: rng.below(5) as u32,
                force: rng.chance(30),
            },
        };
        return op;
    }
}

fn domain_ref(uuid: &str) -> DomainRef {
    DomainRef {
        name: format!("torture-{}", &uuid[9..13]),
        uuid: uuid.to_string(),
    }
}

/// Runs `op` on `engine` (also the model-based fuzz target's step).
pub fn perform(engine: &Engine, op: &Op) -> Outcome {
    let mdev_request = |parent: &str, type_id: &str| {
        CreateRequest::new(CreateTarget::Mdev {
            parent: parent.to_string(),
            type_id: type_id.to_string(),
        })
    };
    let result: Result<Vec<String>, mdev_engine::EngineError> = match op {
        Op::CreateMdev {
            parent,
            type_id,
            autostart,
            weight,
        } => engine
            .create(CreateRequest {
                autostart: *autostart,
                persistent: *autostart,
                scheduling: Scheduling {
                    weight: *weight,
                    ..Scheduling::default()
                },
                ..mdev_request(parent, type_id)
            })
            .map(|info| vec![info.uuid]),
        Op::CreateBatch { items } => engine
            .create_batch(items.iter().map(|(p, t)| mdev_request(p, t)).collect())
            .map(|infos| infos.into_iter().map(|i| i.uuid).collect()),
        Op::CreateVf => engine
            .create(CreateRequest::new(CreateTarget::Vf {
                pf: PF.to_string(),
                vf: None,
            }))
            .map(|info| vec![info.uuid]),
        Op::Destroy { uuid, force } => engine
            .destroy(uuid, DestroyOptions { force: *force })
            .map(|()| Vec::new()),
        Op::Claim {
            domain,
            uuid,
            profile,
        } => engine
            .claim_domain(
                &domain_ref(domain),
                &[DeviceRequest {
                    kind: "mdev".into(),
                    uuid: uuid.clone(),
                    profile: profile.clone(),
                    ..DeviceRequest::default()
                }],
            )
            .map(|infos| infos.into_iter().map(|i| i.uuid).collect()),
        Op::Release { domain } => engine
            .release_domain(&domain_ref(domain))
            .map(|report| report.destroyed),
        Op::SetWeight { uuid, weight } => engine
            .set_scheduling(
                uuid,
                Scheduling {
                    weight: Some(*weight),
                    ..Scheduling::default()
                },
            )
            .map(|_| Vec::new()),
        Op::SetNumVfs { num_vfs, force } => engine
            .set_num_vfs(PF, *num_vfs, DestroyOptions { force: *force })
            .map(|_| Vec::new()),
        Op::Teardown => (|| {
            for info in engine.instances()? {
                if info.owner.is_some() {
                    engine.destroy(&info.uuid, DestroyOptions { force: true })?;
                }
            }
            engine.set_num_vfs(PF, 0, DestroyOptions { force: true })?;
            Ok(Vec::new())
        })(),
    };
    match result {
        Ok(uuids) => Outcome::Ok { uuids },
        Err(error) => Outcome::Err {
            kind: error.kind().name().to_string(),
            message: error.to_string(),
        },
    }
}

/// What a worker does after it reconciled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerMode {
    /// `ops` random operations (none for a checking round).
    Operations,
    /// The final teardown: destroy everything, disable the VFs.
    Teardown,
    /// Stop talking, as a hung worker would (the harness's bounds must end the run): only for
    /// the harness's own tests.
    Stall,
}

/// The worker process: connects to the host server at `socket`, opens the engine on the state
/// under `root`, reconciles, runs `ops` random operations (or the final teardown) and lists
/// the instances. Every step is logged to the server with [`RemoteHost::mark`].
pub fn worker_main(
    socket: &Path,
    root: &Path,
    seed: u64,
    ops: u32,
    mode: WorkerMode,
) -> io::Result<()> {
    let host = Arc::new(RemoteHost::connect(socket)?);
    let engine = match Engine::new(
        host.clone(),
        Arc::new(DiskFiles::new(root)),
        engine_config(),
    ) {
        Ok(engine) => engine,
        Err(error) => {
            host.mark(format!("FATAL engine does not open: {error}"))?;
            return Err(io::Error::other(error.to_string()));
        }
    };
    let report = engine
        .reconcile()
        .map_err(|error| io::Error::other(error.to_string()));
    match report {
        Ok(report) => host.mark(format!("RECONCILED {}", json(&report)))?,
        Err(error) => {
            host.mark(format!("FATAL reconcile: {error}"))?;
            return Err(error);
        }
    }
    if mode == WorkerMode::Stall {
        std::thread::sleep(Duration::from_secs(3600));
    }
    let mut rng = Rng::new(seed);
    let planned: Vec<Option<Op>> = if mode == WorkerMode::Teardown {
        vec![Some(Op::Teardown)]
    } else {
        (0..ops).map(|_| None).collect()
    };
    for planned_op in planned {
        let op = match planned_op {
            Some(op) => op,
            None => {
                let managed: Vec<InstanceInfo> = engine
                    .instances()
                    .map(|all| all.into_iter().filter(|i| i.owner.is_some()).collect())
                    .unwrap_or_default();
                choose_op(&mut rng, &managed)
            }
        };
        host.mark(format!("BEGIN {}", json(&op)))?;
        let outcome = perform(&engine, &op);
        host.mark(format!("ACK {}", json(&outcome)))?;
    }
    let instances = engine
        .instances()
        .map_err(|error| io::Error::other(error.to_string()))?;
    host.mark(format!("INSTANCES {}", json(&instances)))?;
    Ok(())
}

fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("\"unserializable: {e}\""))
}

/// Where a round's worker is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillPlan {
    /// After the `n`-th kernel write took effect, before its answer.
    AfterWrite(u32),
    /// When the `n`-th kernel write arrives, before it takes effect.
    BeforeWrite(u32),
    /// After this long.
    AfterDelay(Duration),
    /// After the first successful `remove` that follows a failed write (a rollback step).
    InRollback,
    /// Not killed (the checking and final rounds).
    Never,
}

/// What the server saw in one round, in order.
#[derive(Debug, Clone)]
enum Event {
    Write {
        path: PathBuf,
        data: Vec<u8>,
        ok: bool,
    },
    Mark(String),
}

struct Round {
    events: Vec<Event>,
    killed: bool,
    exit_ok: bool,
    stderr: String,
}

/// How long the harness waits, at most, for any one thing a worker does (connect, send its
/// next request, read an answer, exit): a worker's request takes milliseconds, so a wait this
/// long means something hangs, and the run fails naming the round, the seed and the last
/// request instead of hanging CI.
pub const DEFAULT_WAIT_BOUND: Duration = Duration::from_secs(120);

/// Settings of a torture run.
#[derive(Debug, Clone)]
pub struct TortureConfig {
    /// Kills to deliver.
    pub kills: u32,
    /// Seed of every random choice.
    pub seed: u64,
    /// The `torture-worker` binary.
    pub worker: PathBuf,
    /// Print each violation as it is found.
    pub verbose: bool,
    /// The bound of every wait (see [`DEFAULT_WAIT_BOUND`]).
    pub wait_bound: Duration,
}

/// Figures of a torture run.
#[derive(Debug, Clone, Default)]
pub struct TortureReport {
    /// Workers killed (each followed by a restart, reconcile and invariant check).
    pub kills: u32,
    /// Kills that landed right after a kernel write took effect.
    pub kills_after_write: u32,
    /// Kills that landed during a batch rollback.
    pub kills_in_rollback: u32,
    /// Rounds whose worker finished before its kill point.
    pub clean_rounds: u32,
    /// Operations acknowledged by workers.
    pub ops_acknowledged: u32,
    /// Operations interrupted by a kill.
    pub ops_interrupted: u32,
    /// Devices a kill left on the host that the state does not know after the restart's
    /// reconcile (mdevs our workers created, VFs bound to vfio-pci that no record holds). Each
    /// is also a violation; the harness removes it after counting it once.
    pub orphans: u32,
    /// Connections of killed workers found waiting on the host socket and closed unserved
    /// (a worker killed after it connected, before the harness accepted it).
    pub stale_connections: u32,
    /// Invariant violations (target: none).
    pub violations: Vec<String>,
}

/// The acknowledged effects the checks hold the engine to.
#[derive(Debug, Default)]
struct Model {
    /// Instance → domain UUID of an acknowledged claim.
    claims: BTreeMap<String, String>,
    /// Instance → acknowledged weight.
    weights: BTreeMap<String, u32>,
    /// Every UUID we saw written to a `create` file.
    created: BTreeSet<String>,
    /// The PF's VF count after the last acknowledged change (`None`: not known).
    num_vfs: Option<u32>,
    /// The last worker round's operations, outcomes and VF-count writes, for the message of a
    /// VF-count violation (the kill lands at a random point, so the run can't be replayed).
    vf_trace: Vec<String>,
}

/// Which round a worker serves, for the message of a wait that ran out.
#[derive(Debug, Clone, Copy)]
struct RoundLabel {
    number: u64,
    phase: &'static str,
}

/// The simulated host, served on a Unix socket to one worker process after another, and the
/// state directory the workers share (see the module documentation). Every wait on a worker is
/// bounded by [`TortureConfig::wait_bound`]; a wait that runs out is an error naming the
/// round, the seed and the worker's last request, and the worker is killed.
pub struct Harness<'a> {
    config: &'a TortureConfig,
    sim: SimHost,
    dir: PathBuf,
    root: PathBuf,
    socket: PathBuf,
    listener: UnixListener,
    checks: u64,
    stale_connections: u32,
}

impl<'a> Harness<'a> {
    /// A fresh simulated host ([`TOPOLOGY`]) and an empty state directory under the system
    /// temp directory.
    pub fn new(config: &'a TortureConfig) -> io::Result<Self> {
        let sim = SimHost::builtin(TOPOLOGY).map_err(|e| io::Error::other(e.to_string()))?;
        let dir = tempfile_dir()?;
        let root = dir.join("root");
        std::fs::create_dir_all(&root)?;
        let socket = dir.join("host.sock");
        let listener = UnixListener::bind(&socket)?;
        listener.set_nonblocking(true)?;
        Ok(Self {
            config,
            sim,
            dir,
            root,
            socket,
            listener,
            checks: 0,
            stale_connections: 0,
        })
    }

    /// The host socket the workers connect to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Connections closed unserved because they were not the current worker's.
    pub fn stale_connections(&self) -> u32 {
        self.stale_connections
    }

    /// One checking round on its own: a worker starts, reconciles and lists the instances;
    /// returns the invariant violations found.
    pub fn check_once(&mut self) -> io::Result<Vec<String>> {
        self.checks += 1;
        let label = RoundLabel {
            number: self.checks,
            phase: "restart and check",
        };
        let mut rng = Rng::new(self.config.seed);
        let round = self.run_round(
            label,
            0,
            0,
            WorkerMode::Operations,
            KillPlan::Never,
            &mut rng,
        )?;
        let mut report = TortureReport::default();
        let mut model = Model::default();
        check_round(
            &self.sim,
            &round,
            &mut model,
            &mut report,
            self.config,
            label.number,
        );
        Ok(report.violations)
    }

    fn run_round(
        &mut self,
        label: RoundLabel,
        seed: u64,
        ops: u32,
        mode: WorkerMode,
        plan: KillPlan,
        rng: &mut Rng,
    ) -> io::Result<Round> {
        let mut command = Command::new(&self.config.worker);
        command
            .arg(&self.socket)
            .arg(&self.root)
            .arg(seed.to_string())
            .arg(ops.to_string());
        match mode {
            WorkerMode::Operations => {}
            WorkerMode::Teardown => {
                command.arg("teardown");
            }
            WorkerMode::Stall => {
                command.arg("stall");
            }
        }
        // Into a file, not a pipe: a worker that wrote more than a pipe holds would block on
        // it while the harness waits for its next request.
        let stderr_path = self.dir.join("worker.stderr");
        let mut child = command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path)?)
            .spawn()?;
        let mut worker = Worker {
            label,
            seed: self.config.seed,
            bound: self.config.wait_bound,
            stderr_path,
            last_request: "(none yet)".to_string(),
        };
        let started = Instant::now();
        let stream = loop {
            match self.listener.accept() {
                // Only the current worker is served. A worker killed right after it connected
                // (a kill on a short delay) leaves its connection queued on the socket; served
                // as the next worker's, it reads as closed at once and the harness would wait
                // for a worker that in fact waits for its first answer (issue 14).
                Ok((stream, _)) => match peer_pid(&stream) {
                    Ok(pid) if pid == child.id() => break Some(stream),
                    Ok(_) => self.stale_connections += 1,
                    Err(error) => {
                        return Err(worker.give_up(
                            &mut child,
                            &format!("cannot tell who connected to the host socket: {error}"),
                        ))
                    }
                },
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if child.try_wait()?.is_some() {
                        break None;
                    }
                    if let KillPlan::AfterDelay(delay) = plan {
                        if started.elapsed() >= delay {
                            kill(&mut child);
                            return worker.finish(&mut child, Vec::new(), true);
                        }
                    }
                    if started.elapsed() >= worker.bound {
                        return Err(worker.give_up(
                            &mut child,
                            "it neither connected to the host socket nor exited",
                        ));
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(error) => return Err(error),
            }
        };
        let Some(stream) = stream else {
            return worker.finish(&mut child, Vec::new(), false);
        };
        worker.serve(&self.sim, stream, &mut child, plan, started, rng)
    }
}

impl Drop for Harness<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The process at the other end of `stream`: the one that connected (`SO_PEERCRED`).
fn peer_pid(stream: &UnixStream) -> io::Result<u32> {
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut length = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `stream` keeps the descriptor open for the call; getsockopt writes at most
    // `length` bytes into `credentials`, a `ucred` this frame owns, and stores the size written.
    let result = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut credentials as *mut libc::ucred).cast(),
            &mut length,
        )
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u32::try_from(credentials.pid).unwrap_or(0))
}

/// The harness's side of one worker: what a wait that runs out must name.
struct Worker {
    label: RoundLabel,
    seed: u64,
    bound: Duration,
    stderr_path: PathBuf,
    last_request: String,
}

impl Worker {
    /// Kills the worker (bounded reap) and returns the error that ends the run.
    fn give_up(&self, child: &mut Child, problem: &str) -> io::Error {
        kill(child);
        let reaped = wait_bounded(child, self.bound).ok().flatten().is_some();
        let stderr = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "torture --seed {} round {} ({}): worker pid {} stuck, {problem} (waited {:?}); \
                 last request: {}{}{}",
                self.seed,
                self.label.number,
                self.label.phase,
                child.id(),
                self.bound,
                self.last_request,
                if reaped {
                    ""
                } else {
                    "; it did not even die of SIGKILL"
                },
                if stderr.trim().is_empty() {
                    String::new()
                } else {
                    format!("; its stderr: {}", stderr.trim())
                },
            ),
        )
    }

    fn serve(
        &mut self,
        sim: &SimHost,
        stream: UnixStream,
        child: &mut Child,
        plan: KillPlan,
        started: Instant,
        rng: &mut Rng,
    ) -> io::Result<Round> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(Duration::from_millis(2)))?;
        stream.set_write_timeout(Some(self.bound))?;
        let mut writer = stream.try_clone()?;
        let mut reader = BufReader::new(stream);
        let mut events = Vec::new();
        let mut writes = 0u32;
        let mut failed_write_seen = false;
        let mut batch_fault = None;
        // Bytes, not a String: a read that times out part-way keeps what it read (read_line
        // would drop a partial line that ends inside a multi-byte character).
        let mut line = Vec::new();
        let mut waiting_since = Instant::now();
        loop {
            if let KillPlan::AfterDelay(delay) = plan {
                if started.elapsed() >= delay {
                    kill(child);
                    return self.finish(child, events, true);
                }
            }
            if waiting_since.elapsed() >= self.bound {
                return Err(self.give_up(child, "it sent no complete request"));
            }
            match reader.read_until(b'\n', &mut line) {
                Ok(0) if line.is_empty() => return self.finish(child, events, false),
                Ok(_) if line.ends_with(b"\n") => {}
                // The worker closed the socket in the middle of a line.
                Ok(_) => {
                    return Err(self.give_up(
                        child,
                        &format!(
                            "it closed the host socket in the middle of a request: {}",
                            summary(&line)
                        ),
                    ))
                }
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(error) => {
                    return Err(self.give_up(child, &format!("reading its request: {error}")))
                }
            }
            self.last_request = summary(&line);
            waiting_since = Instant::now();
            let request: Request = match serde_json::from_slice(&line) {
                Ok(request) => request,
                Err(error) => {
                    return Err(self.give_up(child, &format!("unreadable request ({error})")))
                }
            };
            line.clear();
            if let Request::Mark { line: mark } = &request {
                if let Some(op) = mark.strip_prefix("BEGIN ") {
                    // A batch may get its last create failed, so that it rolls back.
                    if let Ok(Op::CreateBatch { items }) = serde_json::from_str::<Op>(op) {
                        if plan == KillPlan::InRollback || rng.chance(25) {
                            if let Some((_, type_id)) = items.last() {
                                batch_fault = Some(sim.inject_fault(
                                    Fault::fail(format!("*/{type_id}/create"), libc::EIO).times(1),
                                ));
                            }
                        }
                    }
                }
                if mark.starts_with("ACK ") && batch_fault.take().is_some() {
                    sim.clear_faults();
                }
                events.push(Event::Mark(mark.clone()));
            }
            let response = if let Request::Write { path, data } = &request {
                writes += 1;
                let remove = path.ends_with("remove");
                if plan == KillPlan::BeforeWrite(writes) {
                    kill(child);
                    return self.finish(child, events, true);
                }
                let response = answer(sim, &request);
                let ok = matches!(response, Response::Done);
                events.push(Event::Write {
                    path: path.clone(),
                    data: data.clone(),
                    ok,
                });
                let in_rollback = plan == KillPlan::InRollback && failed_write_seen && remove && ok;
                failed_write_seen |= !ok;
                if plan == KillPlan::AfterWrite(writes) || in_rollback {
                    kill(child);
                    if batch_fault.take().is_some() {
                        sim.clear_faults();
                    }
                    return self.finish(child, events, true);
                }
                response
            } else {
                answer(sim, &request)
            };
            if let Err(error) = respond(&mut writer, &response) {
                return Err(self.give_up(child, &format!("answering its request: {error}")));
            }
        }
    }

    /// Reaps the worker (killed, or done: it closed the socket or exited before connecting).
    fn finish(&self, child: &mut Child, events: Vec<Event>, killed: bool) -> io::Result<Round> {
        let Some(status) = wait_bounded(child, self.bound)? else {
            return Err(self.give_up(
                child,
                if killed {
                    "it did not die of SIGKILL"
                } else {
                    "it closed the host socket but did not exit"
                },
            ));
        };
        let stderr = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        Ok(Round {
            events,
            killed,
            exit_ok: status.success(),
            stderr,
        })
    }
}

/// Waits up to `bound` for `child` to exit; `None` if it has not.
fn wait_bounded(child: &mut Child, bound: Duration) -> io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A request line for an error message: at most 300 characters.
fn summary(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    match text.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Runs the torture (see the module documentation).
pub fn run(config: &TortureConfig) -> io::Result<TortureReport> {
    let mut harness = Harness::new(config)?;
    let boot_capacity = capacity(&harness.sim);
    let mut report = TortureReport::default();
    let mut model = Model::default();
    let mut rng = Rng::new(config.seed);
    let mut round_number = 0u64;
    while report.kills < config.kills {
        round_number += 1;
        let plan = match rng.below(100) {
            0..=44 => KillPlan::AfterWrite(1 + rng.below(8) as u32),
            45..=64 => KillPlan::BeforeWrite(1 + rng.below(8) as u32),
            65..=84 => KillPlan::AfterDelay(Duration::from_millis(rng.below(60))),
            _ => KillPlan::InRollback,
        };
        let ops = 2 + rng.below(10) as u32;
        let worker_seed = rng.next();
        let round = harness.run_round(
            RoundLabel {
                number: round_number,
                phase: "operations, killed",
            },
            worker_seed,
            ops,
            WorkerMode::Operations,
            plan,
            &mut rng,
        )?;
        if round.killed {
            report.kills += 1;
            match plan {
                KillPlan::AfterWrite(_) => report.kills_after_write += 1,
                KillPlan::InRollback => report.kills_in_rollback += 1,
                _ => {}
            }
        } else if round.exit_ok {
            report.clean_rounds += 1;
        } else {
            violation(
                &mut report,
                config,
                format!(
                    "round {round_number}: worker failed without being killed: {} {}",
                    fatal_of(&round.events),
                    round.stderr.trim()
                ),
            );
        }
        absorb(&round, &mut model, &mut report, config, round_number);
        // Restart, reconcile and check.
        let check = harness.run_round(
            RoundLabel {
                number: round_number,
                phase: "restart and check",
            },
            0,
            0,
            WorkerMode::Operations,
            KillPlan::Never,
            &mut rng,
        )?;
        check_round(
            &harness.sim,
            &check,
            &mut model,
            &mut report,
            config,
            round_number,
        );
    }
    // Final round: destroy everything; every type's capacity must be back.
    let last = harness.run_round(
        RoundLabel {
            number: round_number + 1,
            phase: "final teardown",
        },
        0,
        0,
        WorkerMode::Teardown,
        KillPlan::Never,
        &mut rng,
    )?;
    let sim = &harness.sim;
    absorb(&last, &mut model, &mut report, config, round_number + 1);
    check_round(
        sim,
        &last,
        &mut model,
        &mut report,
        config,
        round_number + 1,
    );
    if let Some(Outcome::Err { kind, message }) = outcomes(&last.events).last() {
        violation(
            &mut report,
            config,
            format!("final teardown failed: {kind}: {message}"),
        );
    }
    let after = capacity(sim);
    for (key, boot) in &boot_capacity {
        let now = after.get(key).cloned().unwrap_or_default();
        if now != *boot {
            violation(
                &mut report,
                config,
                format!("capacity of {key} is {now} after teardown, {boot} at boot"),
            );
        }
    }
    if sim.vf_count() != 0 {
        violation(
            &mut report,
            config,
            format!("{} VFs left after teardown", sim.vf_count()),
        );
    }
    report.stale_connections = harness.stale_connections;
    Ok(report)
}

fn tempfile_dir() -> io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("mdev-torture-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn violation(report: &mut TortureReport, config: &TortureConfig, text: String) {
    if config.verbose {
        eprintln!("VIOLATION: {text}");
    }
    report.violations.push(text);
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

fn respond(writer: &mut UnixStream, response: &Response) -> io::Result<()> {
    let mut out = serde_json::to_vec(response).map_err(io::Error::other)?;
    out.push(b'\n');
    writer.write_all(&out)
}

fn kill(child: &mut Child) {
    // SAFETY: kill(2) on our own child, not yet reaped (we wait for it right after).
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
}

fn marks(events: &[Event]) -> impl Iterator<Item = &str> {
    events.iter().filter_map(|e| match e {
        Event::Mark(m) => Some(m.as_str()),
        Event::Write { .. } => None,
    })
}

/// A write to `sriov_numvfs`, as text for a violation message.
fn numvfs_write(event: &Event) -> Option<String> {
    match event {
        Event::Write { path, data, ok } if path.ends_with("sriov_numvfs") => Some(format!(
            "write {:?} to {} ({})",
            String::from_utf8_lossy(data).trim(),
            path.display(),
            if *ok { "ok" } else { "failed" }
        )),
        _ => None,
    }
}

fn numvfs_writes(events: &[Event]) -> Vec<String> {
    events.iter().filter_map(numvfs_write).collect()
}

fn outcomes(events: &[Event]) -> Vec<Outcome> {
    marks(events)
        .filter_map(|m| m.strip_prefix("ACK "))
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}

fn fatal_of(events: &[Event]) -> String {
    marks(events)
        .find(|m| m.starts_with("FATAL"))
        .unwrap_or("")
        .to_string()
}

fn created_uuid(path: &Path, data: &[u8]) -> Option<String> {
    path.ends_with("create")
        .then(|| String::from_utf8_lossy(data).trim().to_lowercase())
}

fn removed_uuid(path: &Path) -> Option<String> {
    if !path.ends_with("remove") {
        return None;
    }
    path.parent()
        .and_then(Path::file_name)
        .map(|name| name.to_string_lossy().to_lowercase())
}

/// Folds a killed (or finished) round's acknowledged operations into the model, checks that no
/// operation created more devices than it asked for, and forgets what the interrupted
/// operation may have changed.
fn absorb(
    round: &Round,
    model: &mut Model,
    report: &mut TortureReport,
    config: &TortureConfig,
    round_number: u64,
) {
    let mut current: Option<Op> = None;
    let mut net_created: BTreeSet<String> = BTreeSet::new();
    model.vf_trace = round
        .events
        .iter()
        .filter_map(|event| match event {
            Event::Mark(mark) if mark.starts_with("BEGIN ") || mark.starts_with("ACK ") => {
                Some(mark.clone())
            }
            Event::Write { .. } => numvfs_write(event),
            _ => None,
        })
        .collect();
    for event in &round.events {
        match event {
            Event::Write {
                path,
                data,
                ok: true,
            } => {
                if let Some(uuid) = created_uuid(path, data) {
                    model.created.insert(uuid.clone());
                    if !net_created.insert(uuid.clone()) {
                        violation(
                            report,
                            config,
                            format!("round {round_number}: {uuid} created twice in one operation"),
                        );
                    }
                } else if let Some(uuid) = removed_uuid(path) {
                    net_created.remove(&uuid);
                }
            }
            Event::Write { .. } => {}
            Event::Mark(mark) => {
                if let Some(op) = mark.strip_prefix("BEGIN ") {
                    current = serde_json::from_str(op).ok();
                    net_created.clear();
                } else if let Some(outcome) = mark.strip_prefix("ACK ") {
                    report.ops_acknowledged += 1;
                    let outcome: Option<Outcome> = serde_json::from_str(outcome).ok();
                    if let (Some(op), Some(outcome)) = (current.take(), outcome) {
                        let asked = match &op {
                            Op::CreateMdev { .. } | Op::Claim { .. } => 1,
                            Op::CreateBatch { items } => items.len(),
                            _ => 0,
                        };
                        if net_created.len() > asked {
                            violation(
                                report,
                                config,
                                format!(
                                    "round {round_number}: {op:?} left {} new mdevs, asked for {asked}",
                                    net_created.len()
                                ),
                            );
                        }
                        if let Outcome::Err { kind, message } = &outcome {
                            if message.trim().is_empty() || kind.is_empty() {
                                violation(
                                    report,
                                    config,
                                    format!("round {round_number}: untyped error for {op:?}"),
                                );
                            }
                        }
                        apply(model, &op, &outcome);
                    }
                }
            }
        }
    }
    if let Some(op) = current {
        report.ops_interrupted += 1;
        forget(model, &op);
    }
}

fn apply(model: &mut Model, op: &Op, outcome: &Outcome) {
    let Outcome::Ok { uuids } = outcome else {
        return;
    };
    match op {
        Op::CreateMdev {
            weight: Some(weight),
            ..
        } => {
            for uuid in uuids {
                model.weights.insert(uuid.clone(), *weight);
            }
        }
        Op::Claim { domain, .. } => {
            for uuid in uuids {
                model.claims.insert(uuid.clone(), domain.clone());
            }
        }
        Op::Release { domain } => model.claims.retain(|_, d| d != domain),
        Op::Destroy { uuid, .. } => {
            model.claims.remove(uuid);
            model.weights.remove(uuid);
        }
        Op::SetWeight { uuid, weight } => {
            model.weights.insert(uuid.clone(), *weight);
        }
        Op::SetNumVfs { num_vfs, .. } => model.num_vfs = Some(*num_vfs),
        Op::Teardown => {
            model.claims.clear();
            model.weights.clear();
            model.num_vfs = Some(0);
        }
        _ => {}
    }
}

/// An interrupted operation may or may not have taken effect: stop holding the engine to the
/// values it could have changed (the next check learns the outcome).
fn forget(model: &mut Model, op: &Op) {
    match op {
        Op::Release { domain } => model.claims.retain(|_, d| d != domain),
        Op::Destroy { uuid, .. } | Op::SetWeight { uuid, .. } => {
            model.claims.remove(uuid);
            model.weights.remove(uuid);
        }
        Op::SetNumVfs { .. } | Op::Teardown => {
            model.claims.clear();
            model.weights.clear();
            model.num_vfs = None;
        }
        _ => {}
    }
}

fn check_round(
    sim: &SimHost,
    round: &Round,
    model: &mut Model,
    report: &mut TortureReport,
    config: &TortureConfig,
    round_number: u64,
) {
    for event in &round.events {
        if let Event::Write {
            path,
            data,
            ok: true,
        } = event
        {
            if let Some(uuid) = created_uuid(path, data) {
                model.created.insert(uuid);
            }
        }
    }
    let mut fail =
        |text: String| violation(report, config, format!("round {round_number}: {text}"));
    if !round.exit_ok {
        fail(format!(
            "restart failed: {} {}",
            fatal_of(&round.events),
            round.stderr.trim()
        ));
        return;
    }
    let reconcile: Option<ReconcileReport> = marks(&round.events)
        .find_map(|m| m.strip_prefix("RECONCILED "))
        .and_then(|j| serde_json::from_str(j).ok());
    let instances: Option<Vec<InstanceInfo>> = marks(&round.events)
        .find_map(|m| m.strip_prefix("INSTANCES "))
        .and_then(|j| serde_json::from_str(j).ok());
    let (Some(reconcile), Some(instances)) = (reconcile, instances) else {
        fail("restart logged no reconcile report or instance list".into());
        return;
    };
    let unknown: BTreeSet<String> = reconcile
        .actions
        .iter()
        .filter_map(|a| match a {
            ReconcileAction::Unknown { id, .. } => Some(id.to_lowercase()),
            _ => None,
        })
        .collect();
    let recreate_failed: BTreeSet<String> = reconcile
        .actions
        .iter()
        .filter_map(|a| match a {
            ReconcileAction::RecreateFailed { uuid, .. } => Some(uuid.clone()),
            _ => None,
        })
        .collect();
    let managed: BTreeMap<String, &InstanceInfo> = instances
        .iter()
        .filter(|i| i.owner.is_some())
        .map(|i| (i.uuid.clone(), i))
        .collect();
    // Every instance the state says exists exists.
    for info in managed.values() {
        let should_exist = !info.persistent || info.autostart;
        if should_exist && !info.active && !recreate_failed.contains(&info.uuid) {
            fail(format!(
                "state holds {} ({:?}, {}) but it does not exist on the host",
                info.uuid, info.kind, info.type_id
            ));
        }
    }
    // Every mdev on the host is in the state: one of ours that reconcile left unknown is an
    // orphan (its capacity is lost until an administrator acts), a violation like any other.
    let mut orphans = Vec::new();
    for uuid in sim.mdev_uuids() {
        let uuid = uuid.to_lowercase();
        if managed.contains_key(&uuid) {
            continue;
        }
        if !model.created.contains(&uuid) {
            fail(format!("{uuid} exists but nobody created it"));
        } else if unknown.contains(&uuid) {
            fail(format!(
                "orphan: {uuid} was created by a worker, is on the host, and reconcile left it unknown"
            ));
        } else {
            fail(format!(
                "orphan: {uuid} was created by a worker, is on the host, neither managed nor reported"
            ));
        }
        orphans.push(uuid);
    }
    // Every VF bound to vfio-pci is held by a record: a bind the state does not know takes
    // the VF out of every later pick (an orphaned VF).
    let held: BTreeSet<String> = managed
        .values()
        .filter_map(|i| i.vf.map(|vf| vf.to_string()))
        .collect();
    let mut orphaned_vfs = Vec::new();
    for vf in vfio_bound_vfs(sim) {
        if !held.contains(&vf) {
            fail(format!(
                "orphan: VF {vf} is bound to vfio-pci but no instance holds it"
            ));
            orphaned_vfs.push(vf);
        }
    }
    // No two records own the same VF.
    let mut vfs = BTreeSet::new();
    for info in managed.values() {
        if let Some(vf) = info.vf {
            if !vfs.insert(vf) {
                fail(format!("VF {vf} is held by two instances"));
            }
        }
    }
    // No acknowledged claim or weight is lost.
    for (uuid, domain) in &model.claims {
        match managed.get(uuid) {
            Some(info)
                if info
                    .claim
                    .as_ref()
                    .map(|c| c.domain_uuid.to_string())
                    .as_deref()
                    == Some(domain) => {}
            Some(info) => fail(format!(
                "claim of {uuid} by {domain} lost (now {:?})",
                info.claim
            )),
            None => fail(format!("claimed instance {uuid} (by {domain}) lost")),
        }
    }
    for (uuid, weight) in &model.weights {
        if let Some(info) = managed.get(uuid) {
            if info.scheduling.weight != Some(*weight) {
                fail(format!(
                    "weight of {uuid} is {:?}, acknowledged {weight}",
                    info.scheduling.weight
                ));
            }
        }
    }
    // An acknowledged VF count survives the crash (reconcile restores it if needed).
    if let Some(expected) = model.num_vfs {
        if sim.vf_count() != expected as usize {
            fail(format!(
                "PF has {} VFs, acknowledged {expected}; last round: {}; restart: {}",
                sim.vf_count(),
                model.vf_trace.join(" | "),
                numvfs_writes(&round.events).join(" | ")
            ));
        }
    }
    model.num_vfs = Some(sim.vf_count() as u32);
    // Re-learn the truth (interrupted operations resolved one way or the other).
    model.claims = managed
        .values()
        .filter_map(|i| {
            i.claim
                .as_ref()
                .map(|c| (i.uuid.clone(), c.domain_uuid.to_string()))
        })
        .collect();
    model.weights = managed
        .values()
        .filter_map(|i| i.scheduling.weight.map(|w| (i.uuid.clone(), w)))
        .collect();
    // Each orphan is counted once (a violation above): the harness then removes it, so it is
    // not reported again in every later round and its capacity does not fail the final check.
    report.orphans += (orphans.len() + orphaned_vfs.len()) as u32;
    for uuid in orphans {
        let _ = sim.write(
            &Path::new("/sys/bus/mdev/devices")
                .join(&uuid)
                .join("remove"),
            b"1",
        );
    }
    for vf in orphaned_vfs {
        let _ = sim.write(
            &Path::new("/sys/bus/pci/drivers")
                .join(mdev_host::discovery::VFIO_PCI)
                .join("unbind"),
            vf.as_bytes(),
        );
    }
}

/// The VFs of [`PF`] bound to vfio-pci.
fn vfio_bound_vfs(sim: &SimHost) -> Vec<String> {
    let Ok(pf) = PF.parse() else {
        return Vec::new();
    };
    mdev_host::discovery::read_sriov_pf(sim, pf)
        .map(|sriov| {
            sriov
                .vfs
                .iter()
                .filter(|vf| vf.function.driver.as_deref() == Some(mdev_host::discovery::VFIO_PCI))
                .map(|vf| vf.function.address.to_string())
                .collect()
        })
        .unwrap_or_default()
}
