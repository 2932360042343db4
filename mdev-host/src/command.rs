//! The host-command seam: vendor tools the engine runs (NVIDIA's `sriov-manage` to change VFs,
//! `nvidia-smi` to read) go through a [`HostCommands`], as files go through
//! [`super::HostFs`].
//!
//! Contract: a program is named by its host-absolute path; [`HostCommands::run`] returns its
//! exit status and captured output, or an error naming the command line. A run never outlives
//! its timeout or a cancel: the process (and everything it started) is killed and the output
//! so far is kept in the error. Two implementations sit below the seam:
//! * [`RealCommands`] starts real processes, every program path re-rooted like [`super::RealFs`]
//!   (so a test tree can hold a stand-in script);
//! * the simulated host answers from its kernel double, modelling the tools as their vendors
//!   document them (mdev-sim).

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The most output kept from each stream of a command (its tail: errors come last).
const OUTPUT_LIMIT: usize = 4096;

/// What a finished command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// Its exit status (`-1` when a signal ended it).
    pub status: i32,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl CommandOutput {
    /// Both streams in one line for an error message (`stdout: ...; stderr: ...`), empty ones
    /// left out.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = [("stdout", &self.stdout), ("stderr", &self.stderr)]
            .into_iter()
            .filter(|(_, text)| !text.trim().is_empty())
            .map(|(name, text)| format!("{name}: {}", text.trim().replace('\n', " | ")))
            .collect();
        if parts.is_empty() {
            "no output".to_owned()
        } else {
            parts.join("; ")
        }
    }
}

/// How long a run may take and how the caller stops it.
pub struct RunLimits<'a> {
    /// The longest the command may run before it is killed.
    pub timeout: Duration,
    /// Polled while the command runs: `true` kills it (the caller's cancel).
    pub cancelled: &'a (dyn Fn() -> bool + Sync),
}

impl std::fmt::Debug for RunLimits<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLimits")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A command that could not run or did not succeed; each names the command line.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The program is not on this host.
    #[error("{program} is not installed")]
    NotInstalled {
        /// Its host path.
        program: PathBuf,
    },
    /// The program exists but could not be started.
    #[error("cannot start {command}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// It ran past its timeout and was killed.
    #[error("{command} did not finish within {timeout:?} and was killed ({})", output.summary())]
    TimedOut {
        /// The command line.
        command: String,
        /// The bound.
        timeout: Duration,
        /// What it printed before.
        output: CommandOutput,
    },
    /// The caller cancelled it and it was killed.
    #[error("{command} was cancelled and killed ({})", output.summary())]
    Cancelled {
        /// The command line.
        command: String,
        /// What it printed before.
        output: CommandOutput,
    },
    /// It exited with a non-zero status.
    #[error("{command} failed with exit status {} ({})", output.status, output.summary())]
    Failed {
        /// The command line.
        command: String,
        /// What it printed.
        output: CommandOutput,
    },
}

impl CommandError {
    /// The error class.
    pub fn kind(&self) -> crate::error::ErrorKind {
        match self {
            Self::NotInstalled { .. } => crate::error::ErrorKind::NotSupported,
            Self::Spawn { source, .. } => crate::error::kind_of_io(source),
            Self::TimedOut { .. } => crate::error::ErrorKind::TimedOut,
            Self::Cancelled { .. } => crate::error::ErrorKind::Cancelled,
            Self::Failed { .. } => crate::error::ErrorKind::Failed,
        }
    }
}

/// The command line as shown in messages (`/usr/lib/nvidia/sriov-manage -e 0000:4b:00.0`).
pub fn command_line(program: &Path, args: &[String]) -> String {
    std::iter::once(program.display().to_string())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The vendor tools of a host.
pub trait HostCommands: Send + Sync + std::fmt::Debug {
    /// Whether `program` (host-absolute) is installed and executable.
    fn installed(&self, program: &Path) -> bool;
    /// Runs `program` with `args` (no shell) to its end, its timeout or a cancel. A non-zero
    /// exit is an `Ok` output here; [`run_checked`] makes it an error.
    fn run(
        &self,
        program: &Path,
        args: &[String],
        limits: &RunLimits<'_>,
    ) -> Result<CommandOutput, CommandError>;
}

/// Runs a command and treats a non-zero exit as [`CommandError::Failed`].
pub fn run_checked(
    commands: &dyn HostCommands,
    program: &Path,
    args: &[String],
    limits: &RunLimits<'_>,
) -> Result<CommandOutput, CommandError> {
    let output = commands.run(program, args, limits)?;
    if output.status != 0 {
        return Err(CommandError::Failed {
            command: command_line(program, args),
            output,
        });
    }
    Ok(output)
}

/// A host without vendor tools (the default of [`super::HostFs::commands`]).
#[derive(Debug, Default)]
pub struct NoCommands;

impl HostCommands for NoCommands {
    fn installed(&self, _program: &Path) -> bool {
        false
    }

    fn run(
        &self,
        program: &Path,
        _args: &[String],
        _limits: &RunLimits<'_>,
    ) -> Result<CommandOutput, CommandError> {
        Err(CommandError::NotInstalled {
            program: program.to_owned(),
        })
    }
}

/// Real processes; program paths re-rooted under `root` (`/` on a real host).
#[derive(Debug, Clone)]
pub struct RealCommands {
    root: PathBuf,
}

/// How often a running command is checked for its end, its timeout and a cancel.
const POLL: Duration = Duration::from_millis(10);

impl RealCommands {
    /// Tools under `root` (`/` for the machine itself).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
}

impl HostCommands for RealCommands {
    fn installed(&self, program: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        super::resolve_under(&self.root, program)
            .and_then(std::fs::metadata)
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    }

    fn run(
        &self,
        program: &Path,
        args: &[String],
        limits: &RunLimits<'_>,
    ) -> Result<CommandOutput, CommandError> {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let command = command_line(program, args);
        if !self.installed(program) {
            return Err(CommandError::NotInstalled {
                program: program.to_owned(),
            });
        }
        let resolved =
            super::resolve_under(&self.root, program).map_err(|source| CommandError::Spawn {
                command: command.clone(),
                source,
            })?;
        let mut child = Command::new(&resolved)
            .args(args)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a kill reaches what a script started too.
            .process_group(0)
            .spawn()
            .map_err(|source| CommandError::Spawn {
                command: command.clone(),
                source,
            })?;
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        let start = Instant::now();
        let ended = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) => {}
                Err(source) => break Err(source),
            }
            if (limits.cancelled)() {
                kill_group(&mut child);
                break Err(io::Error::from(io::ErrorKind::Interrupted));
            }
            if start.elapsed() >= limits.timeout {
                kill_group(&mut child);
                break Err(io::Error::from(io::ErrorKind::TimedOut));
            }
            std::thread::sleep(POLL);
        };
        let collect = |reader: Option<std::thread::JoinHandle<String>>| {
            reader
                .and_then(|handle| handle.join().ok())
                .unwrap_or_default()
        };
        let mut output = CommandOutput {
            status: -1,
            stdout: collect(stdout),
            stderr: collect(stderr),
        };
        match ended {
            Ok(status) => {
                output.status = status
                    .code()
                    .unwrap_or_else(|| -status.signal().unwrap_or(1));
                Ok(output)
            }
            Err(error) if error.kind() == io::ErrorKind::TimedOut => Err(CommandError::TimedOut {
                command,
                timeout: limits.timeout,
                output,
            }),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {
                Err(CommandError::Cancelled { command, output })
            }
            Err(source) => Err(CommandError::Spawn { command, source }),
        }
    }
}

/// Reads a stream to its end on a thread, keeping its tail.
fn drain(mut stream: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 4096];
        while let Ok(read) = stream.read(&mut buffer) {
            if read == 0 {
                break;
            }
            bytes.extend_from_slice(&buffer[..read]);
            if bytes.len() > 2 * OUTPUT_LIMIT {
                bytes.drain(..bytes.len() - OUTPUT_LIMIT);
            }
        }
        if bytes.len() > OUTPUT_LIMIT {
            bytes.drain(..bytes.len() - OUTPUT_LIMIT);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Kills the child's process group and reaps the child.
fn kill_group(child: &mut std::process::Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) with a negative pid signals the process group the child leads (it
        // was started with process_group(0)); it touches no memory of ours.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn never() -> bool {
        false
    }

    fn limits(timeout: Duration) -> RunLimits<'static> {
        RunLimits {
            timeout,
            cancelled: &never,
        }
    }

    /// A tree holding `/usr/lib/tool`, a shell script with `body`.
    fn tool(body: &str) -> (tempfile::TempDir, RealCommands) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("usr/lib/tool");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let commands = RealCommands::new(dir.path());
        (dir, commands)
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn a_real_command_runs_with_its_arguments_and_its_output_is_captured() {
        let (_dir, commands) = tool("echo \"got $1 $2\"; echo warn >&2; exit 3");
        let output = commands
            .run(
                Path::new("/usr/lib/tool"),
                &args(&["-e", "0000:4b:00.0"]),
                &limits(Duration::from_secs(30)),
            )
            .unwrap();
        assert_eq!(output.status, 3);
        assert_eq!(output.stdout, "got -e 0000:4b:00.0\n");
        assert_eq!(output.stderr, "warn\n");
        let error = run_checked(
            &commands,
            Path::new("/usr/lib/tool"),
            &args(&["-d", "x"]),
            &limits(Duration::from_secs(30)),
        )
        .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("/usr/lib/tool -d x")
                && text.contains("status 3")
                && text.contains("warn"),
            "{text}"
        );
        assert_eq!(error.kind(), crate::error::ErrorKind::Failed);
    }

    #[test]
    fn a_missing_or_non_executable_program_is_not_installed() {
        let (dir, commands) = tool("exit 0");
        assert!(commands.installed(Path::new("/usr/lib/tool")));
        assert!(!commands.installed(Path::new("/usr/lib/other")));
        let error = commands
            .run(
                Path::new("/usr/lib/other"),
                &[],
                &limits(Duration::from_secs(5)),
            )
            .unwrap_err();
        assert!(
            matches!(error, CommandError::NotInstalled { .. }),
            "{error}"
        );
        assert_eq!(error.kind(), crate::error::ErrorKind::NotSupported);
        std::fs::set_permissions(
            dir.path().join("usr/lib/tool"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert!(!commands.installed(Path::new("/usr/lib/tool")));
    }

    #[test]
    fn a_command_past_its_timeout_is_killed_with_what_it_printed() {
        // The sleep is a child of the script: the whole group must go, or the pipe stays open.
        let (_dir, commands) = tool("echo started; sleep 600; echo never");
        let error = commands
            .run(
                Path::new("/usr/lib/tool"),
                &[],
                &limits(Duration::from_millis(200)),
            )
            .unwrap_err();
        match &error {
            CommandError::TimedOut { output, .. } => assert_eq!(output.stdout, "started\n"),
            other => panic!("{other}"),
        }
        assert_eq!(error.kind(), crate::error::ErrorKind::TimedOut);
        assert!(error.to_string().contains("started"), "{error}");
    }

    #[test]
    fn a_cancelled_command_is_killed() {
        let (_dir, commands) = tool("echo waiting; sleep 600");
        let cancel = AtomicBool::new(false);
        let cancelled = || cancel.load(Ordering::SeqCst);
        let limits = RunLimits {
            timeout: Duration::from_secs(600),
            cancelled: &cancelled,
        };
        let error = std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                cancel.store(true, Ordering::SeqCst);
            });
            commands
                .run(Path::new("/usr/lib/tool"), &[], &limits)
                .unwrap_err()
        });
        assert!(matches!(error, CommandError::Cancelled { .. }), "{error}");
        assert_eq!(error.kind(), crate::error::ErrorKind::Cancelled);
    }
}
