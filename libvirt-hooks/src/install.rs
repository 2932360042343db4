//! Putting the hook where libvirt looks for it (`vgpuctl install-hook`).
//!
//! libvirt (6.5.0 and later) runs every executable in `/etc/libvirt/hooks/qemu.d/` in
//! alphabetical order, but only the scripts present when the daemon started: a hook installed
//! later is ignored until libvirtd (or virtqemud) restarts. Replacing an existing hook takes
//! effect at once, because libvirt executes it by path each time.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Host-absolute path of the installed hook.
pub const HOOK_INSTALL_PATH: &str = "/etc/libvirt/hooks/qemu.d/mdev-manager";

/// What an installation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledHook {
    /// Where the hook now is (under the root given).
    pub path: PathBuf,
    /// Whether there was no hook there before, so libvirt must restart to see it.
    pub newly_installed: bool,
}

impl InstalledHook {
    /// The warning to show the admin, if any.
    pub fn warning(&self) -> Option<String> {
        self.newly_installed.then(|| {
            format!(
                "libvirt only sees hooks that exist when it starts: restart libvirtd (or virtqemud) before starting VMs that use vGPUs, or {} will not run",
                self.path.display()
            )
        })
    }
}

/// The hook could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The hook binary to copy is not there.
    #[error("cannot read the hook binary {}", path.display())]
    Source {
        /// The binary.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Creating the directory or writing the hook failed.
    #[error("cannot install the hook at {}", path.display())]
    Write {
        /// The path involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Copies `hook_binary` to `<root>/etc/libvirt/hooks/qemu.d/mdev-manager`, mode 0755.
///
/// The new file appears atomically (written under a dot-name in the same directory, then
/// renamed), so libvirt never executes half a binary, and a VM starting meanwhile runs either
/// the old hook or the new one.
pub fn install_hook(root: &Path, hook_binary: &Path) -> Result<InstalledHook, InstallError> {
    let path = root.join(HOOK_INSTALL_PATH.trim_start_matches('/'));
    let dir = path.parent().unwrap_or(root).to_owned();
    let write_error = |path: &Path| {
        let path = path.to_owned();
        move |source| InstallError::Write { path, source }
    };
    let binary = std::fs::read(hook_binary).map_err(|source| InstallError::Source {
        path: hook_binary.to_owned(),
        source,
    })?;
    std::fs::create_dir_all(&dir).map_err(write_error(&dir))?;
    let newly_installed = !path.exists();
    let temporary = dir.join(".mdev-manager.tmp");
    let write = || -> std::io::Result<()> {
        std::fs::write(&temporary, &binary)?;
        std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o755))?;
        std::fs::File::open(&temporary)?.sync_all()?;
        std::fs::rename(&temporary, &path)
    };
    write().map_err(|source| {
        let _ = std::fs::remove_file(&temporary);
        InstallError::Write {
            path: path.clone(),
            source,
        }
    })?;
    Ok(InstalledHook {
        path,
        newly_installed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_executable_and_warns_only_the_first_time() {
        let root = tempfile::tempdir().unwrap();
        let source = root.path().join("hook-binary");
        std::fs::write(&source, b"\x7fELF first").unwrap();

        let first = install_hook(root.path(), &source).unwrap();
        assert_eq!(
            first.path,
            root.path().join("etc/libvirt/hooks/qemu.d/mdev-manager")
        );
        assert!(first.newly_installed);
        let warning = first.warning().unwrap();
        assert!(warning.contains("restart libvirtd"), "{warning}");
        let metadata = std::fs::metadata(&first.path).unwrap();
        assert_eq!(metadata.permissions().mode() & 0o777, 0o755);
        assert_eq!(std::fs::read(&first.path).unwrap(), b"\x7fELF first");

        std::fs::write(&source, b"\x7fELF second").unwrap();
        let second = install_hook(root.path(), &source).unwrap();
        assert!(!second.newly_installed);
        assert_eq!(second.warning(), None);
        assert_eq!(std::fs::read(&second.path).unwrap(), b"\x7fELF second");
        let names: Vec<_> = std::fs::read_dir(second.path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("mdev-manager")]);
    }

    #[test]
    fn missing_binary_is_named_and_nothing_is_created() {
        let root = tempfile::tempdir().unwrap();
        let missing = root.path().join("nope");
        let error = install_hook(root.path(), &missing).unwrap_err();
        assert!(error.to_string().contains("nope"), "{error}");
        assert!(!root.path().join("etc").exists());
    }
}
