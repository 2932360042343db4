//! One service per host: the state-directory lock and the bus name.
//!
//! Contract:
//! * [`StateDirLock::acquire`] takes an exclusive `flock(2)` on `<state dir>/mdev-manager.lock`
//!   and writes the holder's pid into it. The daemon takes it before it reads the state or
//!   touches the host and keeps it for its whole life (the kernel lets it go when the process
//!   ends, however it ends). A second daemon on the same state directory is refused naming the
//!   lock file and the holder's pid.
//! * [`ensure_name_unowned`] asks the bus who owns `org.mdevmanager.VGpu1` before the start-up
//!   reconcile, so a second daemon on the same bus with another state directory stops before
//!   it touches the host. [`take_bus_name`] then requests the name without replacing an owner
//!   and without queueing; the name is never offered for replacement either.
//! * [`NameWatch`] reports the name lost (`NameLost`) or the bus connection gone; the daemon
//!   then says so and exits non-zero (systemd's `Restart=on-failure` starts it again).

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use dbus_api::names::BUS_NAME;
use futures_util::StreamExt;
use zbus::fdo::{DBusProxy, RequestNameFlags, RequestNameReply};
use zbus::names::BusName;
use zbus::Connection;

/// File name of the lock file inside the state directory.
pub const LOCK_FILE_NAME: &str = "mdev-manager.lock";

/// Why the service may not run (another one does) or must stop (it lost its name).
#[derive(Debug, thiserror::Error)]
pub enum SingleInstanceError {
    /// The lock file could not be created or locked for another reason than a holder.
    #[error("cannot {op} the lock file {path}")]
    LockFile {
        /// `create`, `lock` or `write`.
        op: &'static str,
        /// The lock file (resolved under the root).
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Another process holds the state directory's lock.
    #[error(
        "another mdev-manager ({holder}) holds the lock file {path}: one service per state \
         directory; stop it first (systemctl stop mdev-manager)"
    )]
    Locked {
        /// The lock file (resolved under the root).
        path: PathBuf,
        /// `pid N`, or `pid unknown` when the file names none.
        holder: String,
    },
    /// Another connection owns the bus name.
    #[error(
        "the bus name {BUS_NAME} is owned by {owner} ({holder}): another mdev-manager serves \
         this bus; stop it first (systemctl stop mdev-manager)"
    )]
    NameTaken {
        /// The owner's unique connection name (`:1.5`), or `another connection`.
        owner: String,
        /// `pid N` (with its command when known), or `pid unknown`.
        holder: String,
    },
    /// The request for the name was queued although queueing was not asked for.
    #[error("the bus queued the request for {BUS_NAME} instead of refusing or granting it")]
    Queued,
    /// The bus could not be asked.
    #[error("cannot ask the bus about {BUS_NAME}")]
    Bus(#[source] zbus::Error),
    /// The service lost its name while serving.
    #[error("lost the bus name {BUS_NAME} while serving; exiting so that it can be restarted")]
    NameLost,
    /// The bus connection closed while serving.
    #[error(
        "the bus connection closed while serving {BUS_NAME}; exiting so that it can be restarted"
    )]
    Disconnected,
}

/// The exclusive lock on a state directory; held until dropped (or the process ends).
#[derive(Debug)]
pub struct StateDirLock {
    // Kept open only for the lock on it (flock locks belong to the open file).
    _file: File,
    path: PathBuf,
}

impl StateDirLock {
    /// Creates `dir` if needed and locks `dir/mdev-manager.lock` without waiting; writes this
    /// process's pid into it. `dir` is a real path (already resolved under the root).
    pub fn acquire(dir: &Path) -> Result<Self, SingleInstanceError> {
        let path = dir.join(LOCK_FILE_NAME);
        let error = |op, source| SingleInstanceError::LockFile {
            op,
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(|source| error("create", source))?;
        let mut file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(&path)
                .map_err(|source| error("create", source))?
        };
        loop {
            // SAFETY: flock(2) on a descriptor `file` owns and keeps open for the call.
            let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if locked == 0 {
                break;
            }
            let cause = io::Error::last_os_error();
            match cause.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) => {
                    return Err(SingleInstanceError::Locked {
                        holder: describe_pid(read_pid(&mut file)),
                        path,
                    })
                }
                _ => return Err(error("lock", cause)),
            }
        }
        // Only the holder writes, so a reader sees at worst an empty file (`pid unknown`).
        let written = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()));
        written.map_err(|source| error("write", source))?;
        Ok(Self { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// `pid N (command)`, `pid N` or `pid unknown`.
fn describe_pid(pid: Option<u32>) -> String {
    let Some(pid) = pid else {
        return "pid unknown".to_string();
    };
    // The command only makes the message friendlier; a process that is gone has none.
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(command) if !command.trim().is_empty() => format!("pid {pid}, {}", command.trim()),
        _ => format!("pid {pid}"),
    }
}

/// The name's owner and its pid as the message wants them; `None` when the name is free.
async fn owner_of_name(dbus: &DBusProxy<'_>) -> Result<Option<(String, String)>, zbus::Error> {
    let name = BusName::try_from(BUS_NAME)?;
    let owner = match dbus.get_name_owner(name).await {
        Ok(owner) => owner,
        Err(zbus::fdo::Error::NameHasNoOwner(_)) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    let pid = dbus
        .get_connection_unix_process_id(BusName::from(owner.as_ref()))
        .await
        .ok();
    Ok(Some((owner.to_string(), describe_pid(pid))))
}

/// Fails with [`SingleInstanceError::NameTaken`] when a connection owns the bus name now.
/// (The authoritative request is [`take_bus_name`]; this lets a second service stop before
/// its start-up reconcile touches the host.)
pub async fn ensure_name_unowned(connection: &Connection) -> Result<(), SingleInstanceError> {
    let dbus = DBusProxy::new(connection)
        .await
        .map_err(SingleInstanceError::Bus)?;
    match owner_of_name(&dbus)
        .await
        .map_err(SingleInstanceError::Bus)?
    {
        None => Ok(()),
        Some((owner, holder)) => Err(SingleInstanceError::NameTaken { owner, holder }),
    }
}

/// Requests the bus name without replacing an owner, without queueing and without allowing a
/// later request to replace this one.
pub async fn take_bus_name(connection: &Connection) -> Result<(), SingleInstanceError> {
    match connection
        .request_name_with_flags(BUS_NAME, RequestNameFlags::DO_NOT_QUEUE)
        .await
    {
        Ok(RequestNameReply::PrimaryOwner | RequestNameReply::AlreadyOwner) => Ok(()),
        Ok(RequestNameReply::InQueue) => {
            let _ = connection.release_name(BUS_NAME).await;
            Err(SingleInstanceError::Queued)
        }
        Ok(RequestNameReply::Exists) | Err(zbus::Error::NameTaken) => {
            let dbus = DBusProxy::new(connection)
                .await
                .map_err(SingleInstanceError::Bus)?;
            // The owner may have gone in between: the message then names nobody in particular.
            let (owner, holder) = owner_of_name(&dbus)
                .await
                .ok()
                .flatten()
                .unwrap_or_else(|| ("another connection".into(), "pid unknown".into()));
            Err(SingleInstanceError::NameTaken { owner, holder })
        }
        Err(error) => Err(SingleInstanceError::Bus(error)),
    }
}

/// Watches for the loss of the bus name or of the connection. Made before the name is
/// requested, so no `NameLost` can be missed.
pub struct NameWatch {
    lost: zbus::fdo::NameLostStream,
}

impl std::fmt::Debug for NameWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NameWatch").finish_non_exhaustive()
    }
}

impl NameWatch {
    /// Subscribes to `NameLost` for the service's name on `connection`.
    pub async fn new(connection: &Connection) -> Result<Self, SingleInstanceError> {
        let dbus = DBusProxy::new(connection)
            .await
            .map_err(SingleInstanceError::Bus)?;
        let lost = dbus
            .receive_name_lost_with_args(&[(0, BUS_NAME)])
            .await
            .map_err(SingleInstanceError::Bus)?;
        Ok(Self { lost })
    }

    /// Resolves when the name is lost ([`SingleInstanceError::NameLost`]) or the connection is
    /// gone ([`SingleInstanceError::Disconnected`]); pending while the service owns its name.
    pub async fn lost(&mut self) -> SingleInstanceError {
        while let Some(signal) = self.lost.next().await {
            // The match rule already names the service's name; check it anyway (a bus may
            // send NameLost for every name the connection had).
            match signal.args() {
                Ok(args) if args.name.as_str() == BUS_NAME => return SingleInstanceError::NameLost,
                _ => continue,
            }
        }
        SingleInstanceError::Disconnected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_naming_the_file_and_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = StateDirLock::acquire(dir.path()).unwrap();
        let written = std::fs::read_to_string(first.path()).unwrap();
        assert_eq!(written, format!("{}\n", std::process::id()));
        // flock locks belong to the open file, so a second open in this process conflicts
        // like another process would.
        let error = StateDirLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains(&first.path().display().to_string()),
            "{error}"
        );
        assert!(
            error.contains(&format!("pid {}", std::process::id())),
            "{error}"
        );
        assert_eq!(std::fs::read_to_string(first.path()).unwrap(), written);
        drop(first);
        let again = StateDirLock::acquire(dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(again.path()).unwrap(),
            format!("{}\n", std::process::id())
        );
    }

    #[test]
    fn a_holder_that_wrote_no_pid_is_named_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE_NAME);
        let file = File::create(&path).unwrap();
        // SAFETY: flock(2) on a descriptor `file` owns.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(locked, 0);
        let error = StateDirLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(error.contains("pid unknown"), "{error}");
    }
}
