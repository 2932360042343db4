//! The processes a benchmark drives: a private `dbus-daemon`, the `mdev-manager` daemon, and
//! short-lived commands timed from spawn to exit.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::error::{BenchError, Result};
use crate::stats::Samples;

/// How long a daemon may take to come up before the benchmark gives up on it.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A private session-type bus (`dbus-daemon --session`) listening in a temp directory. The
/// daemon, `vgpuctl`, the hook and the harness's own clients all meet there, never on the
/// host's buses. Stopped on drop.
#[derive(Debug)]
pub struct PrivateBus {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl PrivateBus {
    /// Starts the bus and reads its address.
    pub fn start() -> Result<Self> {
        let dir = tempfile::tempdir().map_err(BenchError::io("cannot create", "a temp dir"))?;
        let listen = format!("unix:path={}", dir.path().join("bus").display());
        let command =
            format!("dbus-daemon --session --nofork --print-address=1 --address={listen}");
        let mut child = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .arg(format!("--address={listen}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // It warns that it cannot raise its fd limit when not started by root's session
            // manager; harmless here.
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| BenchError::Spawn {
                command: command.clone(),
                source,
            })?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut line);
        }
        let address = line.trim().to_string();
        if address.is_empty() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BenchError::Process {
                command,
                detail: "printed no address".into(),
            });
        }
        Ok(Self {
            child,
            address,
            _dir: dir,
        })
    }

    /// The bus address (`unix:path=...,guid=...`).
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `mdev-manager` daemon. Its log is drained by a thread (a full pipe would stall
/// it) and kept for error messages. Stopped with SIGTERM on drop.
#[derive(Debug)]
pub struct Daemon {
    child: Option<Child>,
    log_tail: Arc<Mutex<Vec<String>>>,
    /// Time from spawn until the daemon logged that it owns the bus name (after reconcile).
    pub ready_after: Duration,
}

impl Daemon {
    /// Starts `binary` with `args` on the bus at `address` and waits until it is ready.
    pub fn start(binary: &Path, address: &str, args: &[String]) -> Result<Self> {
        let command = format!(
            "{} --address {address} {}",
            binary.display(),
            args.join(" ")
        );
        let started = Instant::now();
        let mut child = Command::new(binary)
            .arg("--address")
            .arg(address)
            .args(args)
            .env("MDEV_MANAGER_LOG", "info")
            .env_remove("JOURNAL_STREAM")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| BenchError::Spawn {
                command: command.clone(),
                source,
            })?;
        let log_tail = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            let tail = Arc::clone(&log_tail);
            std::thread::spawn(move || drain_log(stderr, tail, ready_tx));
        }
        let mut daemon = Self {
            child: Some(child),
            log_tail,
            ready_after: Duration::ZERO,
        };
        match ready_rx.recv_timeout(READY_TIMEOUT) {
            Ok(()) => {
                daemon.ready_after = started.elapsed();
                Ok(daemon)
            }
            Err(_) => Err(BenchError::Process {
                command,
                detail: format!("not ready; log tail:\n{}", daemon.log_tail()),
            }),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// The last lines the daemon logged.
    pub fn log_tail(&self) -> String {
        self.log_tail
            .lock()
            .map(|lines| lines.join("\n"))
            .unwrap_or_default()
    }

    /// Resident memory now (`VmRSS`) and its peak (`VmHWM`), in MiB.
    pub fn memory_mib(&self) -> Result<(f64, f64)> {
        let path = PathBuf::from(format!("/proc/{}/status", self.pid()));
        let status =
            std::fs::read_to_string(&path).map_err(BenchError::io("cannot read", &path))?;
        let field = |name: &str| -> Result<f64> {
            crate::machine::kib_field(&status, name)
                .map(|kib| kib / 1024.0)
                .ok_or_else(|| BenchError::Check(format!("{} has no {name}", path.display())))
        };
        Ok((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// SIGTERM, then waits (SIGKILL after 10 s).
    pub fn stop(mut self) -> Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(BenchError::Check(format!(
                        "mdev-manager (pid {}) did not stop on SIGTERM within 10 s",
                        child.id()
                    )));
                }
            }
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.terminate();
    }
}

fn drain_log(stderr: impl Read, tail: Arc<Mutex<Vec<String>>>, ready: mpsc::Sender<()>) {
    let mut announced = false;
    for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
        // main.rs logs `ready name=org.mdevmanager.VGpu1` once it owns the bus name, which is
        // after the objects are exported and the start-up reconcile finished.
        if !announced && line.contains("ready") && line.contains(dbus_api::names::BUS_NAME) {
            announced = true;
            let _ = ready.send(());
        }
        if let Ok(mut lines) = tail.lock() {
            lines.push(line);
            if lines.len() > 40 {
                lines.remove(0);
            }
        }
    }
}

/// A short-lived command to time: program, arguments, environment and stdin file.
#[derive(Debug, Clone)]
pub struct Cmd {
    /// Label in the results.
    pub name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    stdin: Option<PathBuf>,
}

impl Cmd {
    /// `program args...`.
    pub fn new(name: impl Into<String>, program: impl Into<PathBuf>, args: &[&str]) -> Self {
        Self {
            name: name.into(),
            program: program.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
            stdin: None,
        }
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Feeds this file on stdin (libvirt pipes the domain XML to the hook).
    pub fn stdin(mut self, path: impl Into<PathBuf>) -> Self {
        self.stdin = Some(path.into());
        self
    }

    fn line(&self) -> String {
        format!("{} {}", self.program.display(), self.args.join(" "))
    }

    fn command(&self) -> Result<Command> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        for (key, value) in &self.env {
            command.env(key, value);
        }
        match &self.stdin {
            Some(path) => {
                let file =
                    std::fs::File::open(path).map_err(BenchError::io("cannot open", path))?;
                command.stdin(file);
            }
            None => {
                command.stdin(Stdio::null());
            }
        }
        Ok(command)
    }

    /// Runs once with output discarded; the wall time from spawn to exit. A failing exit is
    /// an error (a benchmark of a failing command measures nothing).
    pub fn time(&self) -> Result<Duration> {
        let mut command = self.command()?;
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        let started = Instant::now();
        let output = command.output().map_err(|source| BenchError::Spawn {
            command: self.line(),
            source,
        })?;
        let elapsed = started.elapsed();
        if !output.status.success() {
            return Err(self.failure(&output.status, &output.stderr));
        }
        Ok(elapsed)
    }

    /// Runs once and returns stdout (for checking what a command printed).
    pub fn output(&self) -> Result<String> {
        let mut command = self.command()?;
        let output = command.output().map_err(|source| BenchError::Spawn {
            command: self.line(),
            source,
        })?;
        if !output.status.success() {
            return Err(self.failure(&output.status, &output.stderr));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn failure(&self, status: &std::process::ExitStatus, stderr: &[u8]) -> BenchError {
        let stderr = String::from_utf8_lossy(stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        BenchError::Process {
            command: self.line(),
            detail: format!(
                "{status}: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            ),
        }
    }
}

/// Runs every command once per round, `rounds` times, after `warmup` untimed rounds. The order
/// within a round alternates (forward, backward) so that load changes on a shared machine hit
/// every command alike rather than whichever ran during a burst.
pub fn interleave(commands: &[Cmd], warmup: usize, rounds: usize) -> Result<Vec<Samples>> {
    for _ in 0..warmup {
        for command in commands {
            command.time()?;
        }
    }
    let mut samples = vec![Samples::new(); commands.len()];
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..commands.len()).collect()
        } else {
            (0..commands.len()).rev().collect()
        };
        for index in order {
            samples[index].push(commands[index].time()?);
        }
    }
    Ok(samples)
}
