//! `mdev-manager-hook`: the libvirt qemu hook. Install it as
//! `/etc/libvirt/hooks/qemu.d/mdev-manager` (or as the main `/etc/libvirt/hooks/qemu`); see
//! docs/libvirt.md.
//!
//! libvirt calls it as `mdev-manager-hook <domain> <operation> <sub-operation> <extra>` with the
//! domain XML on stdin. `mdev-manager-hook --install [ROOT]` copies this binary into place.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use libvirt_hooks::hook::{self, HookSettings};
use libvirt_hooks::install::install_hook;
use libvirt_hooks::invocation::HookInvocation;
use libvirt_hooks::MAX_DOMAIN_XML_BYTES;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    // libvirt always passes at least three arguments, so a one- or two-word command line
    // starting with --install cannot be a hook call, whatever the domain is named.
    if args.len() <= 2 && args.first().is_some_and(|arg| arg == "--install") {
        return install(args.get(1).map(PathBuf::from));
    }
    let invocation = match HookInvocation::from_args(args) {
        Ok(invocation) => invocation,
        Err(error) => {
            eprintln!("mdev-manager-hook: {error}");
            return ExitCode::from(2);
        }
    };
    // Operations we ignore exit without reading stdin: libvirt ignores the EPIPE this gives
    // its writer, and the hook stays a bare process start on every VM operation.
    let domain_xml = if invocation.operation.reads_domain_xml() {
        match read_domain_xml() {
            Ok(xml) => xml,
            Err(error) => {
                eprintln!("mdev-manager-hook: cannot read the domain XML from stdin: {error}");
                return ExitCode::from(1);
            }
        }
    } else {
        Vec::new()
    };
    let outcome = hook::run(&invocation, &domain_xml, &HookSettings::from_env());
    let mut stderr = std::io::stderr().lock();
    for line in &outcome.stderr {
        // Nothing better to do if stderr is gone; the exit code still tells libvirt.
        let _ = writeln!(stderr, "{line}");
    }
    if !outcome.stdout.is_empty() {
        let mut stdout = std::io::stdout().lock();
        if let Err(error) = stdout
            .write_all(&outcome.stdout)
            .and_then(|()| stdout.flush())
        {
            let _ = writeln!(
                stderr,
                "mdev-manager-hook: cannot write the domain XML to stdout: {error}"
            );
            return ExitCode::from(1);
        }
    }
    ExitCode::from(outcome.exit_code)
}

/// Reads stdin up to one byte past the bound, so an oversized XML is seen as such without
/// reading all of it.
fn read_domain_xml() -> std::io::Result<Vec<u8>> {
    let mut xml = Vec::with_capacity(16 * 1024);
    let limit = u64::try_from(MAX_DOMAIN_XML_BYTES + 1).unwrap_or(u64::MAX);
    std::io::stdin().lock().take(limit).read_to_end(&mut xml)?;
    Ok(xml)
}

fn install(root: Option<PathBuf>) -> ExitCode {
    let root = root.unwrap_or_else(libvirt_hooks::pending::host_root);
    let binary = match std::env::current_exe() {
        Ok(path) => path,
        Err(error) => {
            eprintln!("mdev-manager-hook: cannot find this program's own path: {error}");
            return ExitCode::from(1);
        }
    };
    match install_hook(&root, &binary) {
        Ok(installed) => {
            println!("installed {}", installed.path.display());
            if let Some(warning) = installed.warning() {
                eprintln!("warning: {warning}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("mdev-manager-hook: {}", hook::chain(&error));
            ExitCode::from(1)
        }
    }
}
