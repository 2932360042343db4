//! The simulated host served to another process over a Unix socket, so the "kernel" outlives
//! a daemon that is killed: the test process owns the [`SimHost`] (like the kernel owns its
//! devices) and the engine in a worker process reaches it through [`RemoteHost`], a
//! [`HostFs`] whose every call is one request/answer on the socket.
//!
//! The server sees every kernel write before and after it is applied, so a test can SIGKILL
//! the worker at an exact point: right after a `create` write took effect and before the
//! worker could save its state (the window the crash torture is about).
//!
//! Wire format: one JSON object per line each way.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mdev_host::HostFs;
use serde::{Deserialize, Serialize};

/// One file operation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// [`HostFs::read`].
    Read {
        /// Host path.
        path: PathBuf,
    },
    /// [`HostFs::write`].
    Write {
        /// Host path.
        path: PathBuf,
        /// The bytes written.
        data: Vec<u8>,
    },
    /// [`HostFs::list`].
    List {
        /// Host path.
        path: PathBuf,
    },
    /// [`HostFs::read_link`].
    ReadLink {
        /// Host path.
        path: PathBuf,
    },
    /// [`HostFs::exists`].
    Exists {
        /// Host path.
        path: PathBuf,
    },
    /// [`HostFs::is_dir`].
    IsDir {
        /// Host path.
        path: PathBuf,
    },
    /// Not a file operation: a line the worker logs into the server's ordered event stream
    /// (where an operation begins and how it ended), answered with [`Response::Done`].
    Mark {
        /// The line.
        line: String,
    },
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    /// Text of a read.
    Text(String),
    /// A write succeeded.
    Done,
    /// Names of a listing (raw bytes).
    Names(Vec<Vec<u8>>),
    /// A link target (raw bytes).
    Link(Vec<u8>),
    /// `exists` / `is_dir`.
    Flag(bool),
    /// The call failed with this errno.
    Errno(i32),
}

/// Answers one request from `host`.
pub fn answer(host: &dyn HostFs, request: &Request) -> Response {
    let errno = |error: io::Error| Response::Errno(error.raw_os_error().unwrap_or(libc::EIO));
    match request {
        Request::Read { path } => host.read(path).map_or_else(errno, Response::Text),
        Request::Write { path, data } => host
            .write(path, data)
            .map_or_else(errno, |()| Response::Done),
        Request::List { path } => host.list(path).map_or_else(errno, |names| {
            Response::Names(names.into_iter().map(OsString::into_vec).collect())
        }),
        Request::ReadLink { path } => host.read_link(path).map_or_else(errno, |target| {
            Response::Link(target.as_os_str().as_bytes().to_vec())
        }),
        Request::Exists { path } => Response::Flag(host.exists(path)),
        Request::IsDir { path } => Response::Flag(host.is_dir(path)),
        Request::Mark { .. } => Response::Done,
    }
}

/// A [`HostFs`] served by another process (see the module documentation). A lost connection
/// makes every call fail with `EIO` (`false` for the predicates).
#[derive(Debug)]
pub struct RemoteHost {
    connection: Mutex<(BufReader<UnixStream>, UnixStream)>,
}

impl RemoteHost {
    /// Connects to the server at `socket`.
    pub fn connect(socket: &Path) -> io::Result<Self> {
        let stream = UnixStream::connect(socket)?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Self {
            connection: Mutex::new((reader, stream)),
        })
    }

    fn call(&self, request: &Request) -> io::Result<Response> {
        let mut guard = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (reader, writer) = &mut *guard;
        let mut line = serde_json::to_vec(request).map_err(io::Error::other)?;
        line.push(b'\n');
        writer.write_all(&line)?;
        let mut answer = String::new();
        if reader.read_line(&mut answer)? == 0 {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        match serde_json::from_str(&answer).map_err(io::Error::other)? {
            Response::Errno(errno) => Err(io::Error::from_raw_os_error(errno)),
            other => Ok(other),
        }
    }

    /// Logs `line` into the server's event stream, in order with the file operations.
    pub fn mark(&self, line: String) -> io::Result<()> {
        self.call(&Request::Mark { line }).map(|_| ())
    }

    fn unexpected(response: Response) -> io::Error {
        io::Error::other(format!(
            "unexpected answer from the host server: {response:?}"
        ))
    }
}

impl HostFs for RemoteHost {
    fn read(&self, path: &Path) -> io::Result<String> {
        match self.call(&Request::Read { path: path.into() })? {
            Response::Text(text) => Ok(text),
            other => Err(Self::unexpected(other)),
        }
    }

    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        match self.call(&Request::Write {
            path: path.into(),
            data: data.to_vec(),
        })? {
            Response::Done => Ok(()),
            other => Err(Self::unexpected(other)),
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        match self.call(&Request::List { path: dir.into() })? {
            Response::Names(names) => Ok(names.into_iter().map(OsString::from_vec).collect()),
            other => Err(Self::unexpected(other)),
        }
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        match self.call(&Request::ReadLink { path: path.into() })? {
            Response::Link(target) => Ok(PathBuf::from(OsString::from_vec(target))),
            other => Err(Self::unexpected(other)),
        }
    }

    fn exists(&self, path: &Path) -> bool {
        matches!(
            self.call(&Request::Exists { path: path.into() }),
            Ok(Response::Flag(true))
        )
    }

    fn is_dir(&self, path: &Path) -> bool {
        matches!(
            self.call(&Request::IsDir { path: path.into() }),
            Ok(Response::Flag(true))
        )
    }
}
