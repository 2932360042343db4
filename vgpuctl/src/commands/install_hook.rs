//! `vgpuctl install-hook [--root ROOT]`: runs the hook's own installer. Needs no service.

use std::path::{Path, PathBuf};

use dbus_api::ErrorKind;

use crate::failure::{failure, Failure};

/// The hook binary's name, as packaging installs it.
const HOOK_BINARY: &str = "mdev-manager-hook";

/// The installed hook program: next to this program (the package installs both in one
/// directory), else the first on PATH.
fn hook_binary() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(HOOK_BINARY)))
        .filter(|candidate| candidate.is_file());
    beside.or_else(|| {
        let paths = std::env::var_os("PATH")?;
        std::env::split_paths(&paths)
            .map(|dir| dir.join(HOOK_BINARY))
            .find(|candidate| candidate.is_file())
    })
}

/// Runs `mdev-manager-hook --install [ROOT]`; its output (including the warning that libvirtd
/// must be restarted to see a new hook) goes straight to the user.
pub fn install_hook(root: Option<&Path>) -> Result<(), Failure> {
    let binary = hook_binary().ok_or_else(|| {
        failure(
            ErrorKind::NotFound,
            format!("cannot find {HOOK_BINARY} next to vgpuctl or on PATH; is the hook package installed?"),
        )
    })?;
    let mut command = std::process::Command::new(&binary);
    command.arg("--install");
    if let Some(root) = root {
        command.arg(root);
    }
    let status = command
        .status()
        .map_err(|e| Failure::new(format!("cannot run {}: {e}", binary.display()), 1))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure::new(
            format!("{} --install failed ({status})", binary.display()),
            1,
        ))
    }
}
