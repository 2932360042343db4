//! mdev-host: what the service knows about the host, below the engine: the file-operation seam
//! and the real backend (this module), vendor-tool commands ([`command`]), sysfs layout, names
//! and discovery ([`discovery`]), who holds a device open ([`holders`]), kernel device events
//! ([`events`]) and the error classes every layer answers with ([`ErrorKind`]).
//!
//! Host access: every path the service reads or writes under `/sys`, `/dev`, `/proc`, `/etc`
//! and `/var/lib` goes through a [`HostFs`], addressed by its *host-absolute* path
//! (`/sys/class/mdev_bus/...`).
//!
//! Two implementations sit below this seam:
//! * [`RealFs`] maps each path onto a root directory (`/` on a real host, a temp tree in tests),
//!   like mdevctl's `MDEVCTL_ENV_ROOT`;
//! * the simulated host (mdev-sim) answers the same file operations from a kernel double
//!   with the kernel's files, formats and errno values.
//!
//! Engine code above the seam is identical for both, so simulated tests exercise the code that
//! runs on a real host.
//!
//! Vendor tools (NVIDIA's `sriov-manage`, `nvidia-smi`) are the second seam, [`command`]: each
//! host hands out its [`HostCommands`] ([`HostFs::commands`]), real processes for [`RealFs`],
//! the kernel double's models of the tools for the simulated host.

#![deny(missing_docs)]

pub mod command;
pub mod discovery;
pub mod error;
pub mod events;
pub mod holders;

pub use error::ErrorKind;

pub use command::{CommandError, CommandOutput, HostCommands, RealCommands, RunLimits};

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// The file operations the engine needs from a host. Paths are host-absolute.
///
/// Errors are plain [`io::Error`]s carrying the errno the kernel would give
/// (`raw_os_error()`), because the errno *is* the kernel's answer (EEXIST, ENOSPC, EUSERS, ...).
pub trait HostFs: Send + Sync + std::fmt::Debug {
    /// Reads a whole (small) file as text, like `cat` of a sysfs attribute.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Writes `data` to an existing file in one `write(2)`, like `echo -n data > path`.
    /// Sysfs attributes are never created by writes.
    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()>;
    /// Lists the names in a directory (not sorted).
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// Reads a symbolic link's target as stored (often relative, e.g. `../../../kernel/iommu_groups/4`).
    fn read_link(&self, path: &Path) -> io::Result<PathBuf>;
    /// Whether a path exists (following links).
    fn exists(&self, path: &Path) -> bool;
    /// Whether a path is a directory (following links).
    fn is_dir(&self, path: &Path) -> bool;
    /// The host's vendor tools. The default is a host without any.
    fn commands(&self) -> &dyn HostCommands {
        &command::NoCommands
    }
}

/// A [`HostFs`] over the real filesystem, every host path re-rooted under `root`.
#[derive(Debug, Clone)]
pub struct RealFs {
    root: PathBuf,
    commands: RealCommands,
}

impl RealFs {
    /// A host rooted at `root` (`/` for the machine itself).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Self {
            commands: RealCommands::new(&root),
            root,
        }
    }

    /// The root every host path hangs off.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Maps a host-absolute path into the root. `..` components are refused so that a name
    /// taken from input can never escape the tree.
    pub fn resolve(&self, path: &Path) -> io::Result<PathBuf> {
        resolve_under(&self.root, path)
    }
}

/// Maps the host-absolute `path` into the tree at `root` (what [`RealFs::resolve`] and the
/// state files' `DiskFiles` do). `..` and prefix components are refused (`InvalidInput`,
/// naming the path) so that a name taken from input can never escape the tree.
pub fn resolve_under(root: &Path, path: &Path) -> io::Result<PathBuf> {
    let mut out = root.to_path_buf();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => out.push(part),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("path {} leaves the host root", path.display()),
                ))
            }
        }
    }
    Ok(out)
}

impl HostFs for RealFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(self.resolve(path)?)
    }

    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(false)
            .open(self.resolve(path)?)?;
        // One write(2): sysfs store functions see exactly this buffer, and a short write of a
        // sysfs attribute is itself an error the caller must hear about.
        let written = file.write(data)?;
        if written != data.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "short write to {}: {written} of {} bytes",
                    path.display(),
                    data.len()
                ),
            ));
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(self.resolve(dir)?)?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect()
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(self.resolve(path)?)
    }

    fn exists(&self, path: &Path) -> bool {
        self.resolve(path).map(|p| p.exists()).unwrap_or(false)
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.resolve(path).map(|p| p.is_dir()).unwrap_or(false)
    }

    fn commands(&self) -> &dyn HostCommands {
        &self.commands
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_refuses_parent_components() {
        let fs = RealFs::new("/tmp/root");
        assert!(fs.resolve(Path::new("/sys/../etc")).is_err());
        assert_eq!(
            fs.resolve(Path::new("/sys/class/mdev_bus")).unwrap(),
            PathBuf::from("/tmp/root/sys/class/mdev_bus")
        );
    }

    #[test]
    fn real_fs_reads_writes_and_lists_under_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/x")).unwrap();
        std::fs::write(dir.path().join("sys/x/attr"), "1\n").unwrap();
        let fs = RealFs::new(dir.path());
        assert_eq!(fs.read(Path::new("/sys/x/attr")).unwrap(), "1\n");
        fs.write(Path::new("/sys/x/attr"), b"22").unwrap();
        assert_eq!(fs.read(Path::new("/sys/x/attr")).unwrap(), "22");
        assert_eq!(
            fs.list(Path::new("/sys/x")).unwrap(),
            vec![OsString::from("attr")]
        );
        assert!(fs.write(Path::new("/sys/x/missing"), b"1").is_err());
    }
}
