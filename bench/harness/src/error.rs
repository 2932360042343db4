//! The harness's error type: every failure names the command, file or call it came from.

use std::path::PathBuf;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file or directory operation failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done (`cannot write`, ...).
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A process could not be started.
    #[error("cannot start {command}")]
    Spawn {
        /// The command line.
        command: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A process ran but did not do what the benchmark needs.
    #[error("{command}: {detail}")]
    Process {
        /// The command line.
        command: String,
        /// What went wrong (exit status, stderr tail, missing output).
        detail: String,
    },
    /// A D-Bus call failed.
    #[error("D-Bus call {call} failed")]
    Bus {
        /// The call (`CreateInstances`, `Properties.Get Weight`, ...).
        call: String,
        /// The cause.
        #[source]
        source: zbus::Error,
    },
    /// The engine or the simulated host refused something the benchmark set up.
    #[error("setting up {what} failed")]
    Setup {
        /// What was being set up.
        what: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A result did not match what the same run set up (a count, a UUID).
    #[error("check failed: {0}")]
    Check(String),
}

impl BenchError {
    /// An [`BenchError::Io`] for `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| BenchError::Io { what, path, source }
    }

    /// A [`BenchError::Bus`] for `call`.
    pub fn bus(call: impl Into<String>) -> impl FnOnce(zbus::Error) -> Self {
        let call = call.into();
        move |source| BenchError::Bus { call, source }
    }

    /// A [`BenchError::Setup`] for `what`.
    pub fn setup<E: std::error::Error + Send + Sync + 'static>(
        what: impl Into<String>,
    ) -> impl FnOnce(E) -> Self {
        let what = what.into();
        move |source| BenchError::Setup {
            what,
            source: Box::new(source),
        }
    }
}

/// Result of the harness's operations.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
