//! Releases the hook could not deliver because the service was not running.
//!
//! `release end` must never lose a release: when the service is down the hook writes
//! `<root>/<state dir>/pending-releases/<domain uuid>` holding the domain name, and the
//! service finishes and deletes these files when it starts (docs/design.md, "Hook -> service").
//! The state directory is the service's ([`crate::config::state_dir`]), so that it finds them.

use std::io::Write;
use std::path::{Path, PathBuf};

use vgpu_types::Uuid;

/// Directory of the pending-release records inside the state directory (the service's
/// `state::PENDING_RELEASES_DIR`).
pub const PENDING_RELEASES_DIR: &str = "pending-releases";

/// The environment variable that moves the host root (tests; like mdevctl's
/// `MDEVCTL_ENV_ROOT`). Unset means `/`.
pub const ROOT_ENV: &str = "MDEV_MANAGER_ROOT";

/// A pending release could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PendingError {
    /// Creating the directory, writing or renaming the file failed.
    #[error("cannot record the pending release of domain {domain_uuid} in {}", path.display())]
    Write {
        /// The domain whose release was lost.
        domain_uuid: Uuid,
        /// The file or directory involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The host root: `$MDEV_MANAGER_ROOT`, or `/`.
pub fn host_root() -> PathBuf {
    std::env::var_os(ROOT_ENV)
        .filter(|root| !root.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// The record's path for `domain_uuid` under `root`, in the state directory `state_dir` (a
/// host path).
pub fn pending_release_path(root: &Path, state_dir: &Path, domain_uuid: &Uuid) -> PathBuf {
    crate::config::under_root(root, state_dir)
        .join(PENDING_RELEASES_DIR)
        .join(domain_uuid.to_string())
}

/// Records that `domain_name` (`domain_uuid`) must be released. The file holds the domain name
/// (no trailing newline) and appears atomically: it is written under a dot-name and renamed,
/// so the service never reads half a record. Recording twice is harmless.
pub fn record_pending_release(
    root: &Path,
    state_dir: &Path,
    domain_uuid: &Uuid,
    domain_name: &str,
) -> Result<PathBuf, PendingError> {
    let path = pending_release_path(root, state_dir, domain_uuid);
    let fail = |path: &Path, source| PendingError::Write {
        domain_uuid: *domain_uuid,
        path: path.to_owned(),
        source,
    };
    let dir = path.parent().unwrap_or(root);
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
    let temporary = dir.join(format!(".{domain_uuid}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(domain_name.as_bytes())?;
        // The record must survive a host crash right after the VM stopped.
        file.sync_all()
    };
    write().map_err(|e| fail(&temporary, e))?;
    std::fs::rename(&temporary, &path).map_err(|e| {
        // Nothing we own is left behind, even on failure.
        let _ = std::fs::remove_file(&temporary);
        fail(&path, e)
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: &str = crate::config::DEFAULT_STATE_DIR;

    #[test]
    fn records_the_domain_name_under_its_uuid() {
        let root = tempfile::tempdir().unwrap();
        let uuid = Uuid::parse("4dea22b3-1d52-d8f3-2516-782e98ab3fa0").unwrap();
        let path =
            record_pending_release(root.path(), Path::new(DEFAULT), &uuid, "vm one").unwrap();
        assert_eq!(
            path,
            root.path()
                .join("var/lib/mdev-manager/pending-releases/4dea22b3-1d52-d8f3-2516-782e98ab3fa0")
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "vm one");
        // Again: same file, no temporary left over.
        record_pending_release(root.path(), Path::new(DEFAULT), &uuid, "vm one").unwrap();
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from(
                "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
            )]
        );
    }

    #[test]
    fn records_go_into_the_state_directory_given() {
        let root = tempfile::tempdir().unwrap();
        let path =
            record_pending_release(root.path(), Path::new("/srv/vgpu"), &Uuid::NIL, "vm").unwrap();
        assert_eq!(
            path,
            root.path()
                .join("srv/vgpu/pending-releases/00000000-0000-0000-0000-000000000000")
        );
    }

    #[test]
    fn reports_the_path_when_the_root_is_not_writable() {
        let root = tempfile::tempdir().unwrap();
        // A file where the directory should be makes create_dir_all fail for root as well.
        std::fs::create_dir_all(root.path().join("var/lib")).unwrap();
        std::fs::write(root.path().join("var/lib/mdev-manager"), "").unwrap();
        let uuid = Uuid::NIL;
        let error =
            record_pending_release(root.path(), Path::new(DEFAULT), &uuid, "vm").unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("00000000-0000-0000-0000-000000000000"),
            "{message}"
        );
        assert!(message.contains("pending-releases"), "{message}");
    }
}
