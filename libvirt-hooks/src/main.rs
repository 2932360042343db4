//! `mdev-manager-hook`: the libvirt qemu hook. Install it as
//! `/etc/libvirt/hooks/qemu.d/mdev-manager` (or as the main `/etc/libvirt/hooks/qemu`); see
//! docs/libvirt.md.
//!
//! libvirt calls it as `mdev-manager-hook <domain> <operation> <sub-operation> <extra>` with the
//! domain XML on stdin. `mdev-manager-hook --install [ROOT]` copies this binary into place.
//!
//! libvirt runs the hook synchronously on every operation of every domain, so its process start
//! is what every VM start and stop on the host pays. Three things here keep it small
//! (docs/benchmarks.md, item 1, has the measurements):
//! * no `fn main`: std's start-up around it finds the main thread's stack guard by reading
//!   `/proc/self/maps` and sets up an alternate signal stack for the stack-overflow message;
//!   [`main`] is the C entry point and does the part of that start-up the hook needs;
//! * the unwinder is linked in from gcc's `libgcc_eh.a`, so the dynamic loader does not have to
//!   find, map and relocate `libgcc_s.so.1`;
//! * [`pow`], the one `libm` function in the binary, comes from the `libm` crate, so
//!   `libm.so.6` is not loaded either: the hook needs `libc.so.6` alone, as `/bin/true` does.
#![cfg_attr(not(test), no_main)]
// The unit tests get the test harness's `main`, which leaves the hook's own code unused there.
#![cfg_attr(test, allow(dead_code))]

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;

use libvirt_hooks::hook::{self, HookSettings};
use libvirt_hooks::install::install_hook;
use libvirt_hooks::invocation::HookInvocation;
use libvirt_hooks::MAX_DOMAIN_XML_BYTES;

// Links gcc's static unwinder ahead of the `-lgcc_s` that std asks for: the `_Unwind_*`
// symbols are then defined when the linker reaches `libgcc_s.so.1`, which `--as-needed` drops.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[link(name = "gcc_eh", kind = "static")]
extern "C" {}

/// The process entry point, called by the C runtime with std already usable (on glibc std takes
/// the arguments from its own initializer, so [`std::env::args_os`] works).
///
/// What std's start-up did that matters here: stdin, stdout and stderr kept open; SIGPIPE
/// ignored, so a closed pipe or bus socket is an `EPIPE` error instead of killing the hook
/// (libvirt would see a signal death, and a release would go unrecorded); a panic ends the
/// process with status 101 instead of unwinding into C; stdout flushed before the C runtime
/// exits.
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn main(_argc: std::ffi::c_int, _argv: *const *const std::ffi::c_char) -> i32 {
    keep_standard_fds_open();
    // SAFETY: SIG_IGN is a valid disposition for SIGPIPE; no other thread exists yet and
    // nothing else in the process installs a SIGPIPE handler.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let code = std::panic::catch_unwind(run).unwrap_or(101);
    let _ = std::io::stdout().flush();
    i32::from(code)
}

/// Reopens a closed stdin, stdout or stderr on `/dev/null`, as std's start-up does, so that a
/// file or socket the hook opens later cannot take its number (a line for stderr would then go
/// into, say, the D-Bus socket).
#[cfg(not(test))]
fn keep_standard_fds_open() {
    for fd in 0..3 {
        // SAFETY: F_GETFD only reads the flags of a descriptor number; a closed one is EBADF.
        let closed = unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF);
        if closed {
            // SAFETY: a NUL-terminated path. open returns the lowest free number, which is
            // `fd` (the lower ones are open or were reopened first); it stays open for the
            // life of the process on purpose. If it fails there is nothing better to do.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        }
    }
}

/// `pow` for the code in this binary that calls it (tokio's multi-thread scheduler statistics,
/// linked in but never run by the hook), so that `libm.so.6` is not loaded at every start. A
/// symbol of the executable: the shared libraries the hook loads (libc alone) never call it.
#[no_mangle]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

/// One line on stderr, which libvirt logs. Nothing better to do if stderr is gone: the exit
/// status still tells libvirt.
fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn run() -> u8 {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    // libvirt always passes at least three arguments, so a one- or two-word command line
    // starting with --install cannot be a hook call, whatever the domain is named.
    if args.len() <= 2 && args.first().is_some_and(|arg| arg == "--install") {
        return install(args.get(1).map(PathBuf::from));
    }
    let invocation = match HookInvocation::from_args(args) {
        Ok(invocation) => invocation,
        Err(error) => {
            say(format_args!("mdev-manager-hook: {error}"));
            return 2;
        }
    };
    // Operations we ignore exit without reading stdin: libvirt ignores the EPIPE this gives
    // its writer, and the hook stays a bare process start on every VM operation.
    let domain_xml = if invocation.operation.reads_domain_xml() {
        match read_domain_xml() {
            Ok(xml) => xml,
            Err(error) => {
                say(format_args!(
                    "mdev-manager-hook: cannot read the domain XML from stdin: {error}"
                ));
                return 1;
            }
        }
    } else {
        Vec::new()
    };
    let outcome = hook::run(&invocation, &domain_xml, &HookSettings::from_env());
    for line in &outcome.stderr {
        say(format_args!("{line}"));
    }
    if !outcome.stdout.is_empty() {
        let mut stdout = std::io::stdout().lock();
        if let Err(error) = stdout
            .write_all(&outcome.stdout)
            .and_then(|()| stdout.flush())
        {
            say(format_args!(
                "mdev-manager-hook: cannot write the domain XML to stdout: {error}"
            ));
            return 1;
        }
    }
    outcome.exit_code
}

/// Reads stdin up to one byte past the bound, so an oversized XML is seen as such without
/// reading all of it.
fn read_domain_xml() -> std::io::Result<Vec<u8>> {
    let mut xml = Vec::with_capacity(16 * 1024);
    let limit = u64::try_from(MAX_DOMAIN_XML_BYTES + 1).unwrap_or(u64::MAX);
    std::io::stdin().lock().take(limit).read_to_end(&mut xml)?;
    Ok(xml)
}

fn install(root: Option<PathBuf>) -> u8 {
    let root = root.unwrap_or_else(libvirt_hooks::pending::host_root);
    let binary = match std::env::current_exe() {
        Ok(path) => path,
        Err(error) => {
            say(format_args!(
                "mdev-manager-hook: cannot find this program's own path: {error}"
            ));
            return 1;
        }
    };
    match install_hook(&root, &binary) {
        Ok(installed) => {
            println!("installed {}", installed.path.display());
            if let Some(warning) = installed.warning() {
                say(format_args!("warning: {warning}"));
            }
            0
        }
        Err(error) => {
            say(format_args!("mdev-manager-hook: {}", hook::chain(&error)));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::pow;

    #[test]
    fn pow_gives_libm_results() {
        assert_eq!(pow(2.0, 10.0), 1024.0);
        assert_eq!(pow(10.0, -2.0), 0.01);
        assert_eq!(pow(0.0, 0.0), 1.0);
        assert_eq!(pow(f64::NAN, 0.0), 1.0);
        assert_eq!(pow(-2.0, 3.0), -8.0);
        assert!(pow(-8.0, 1.0 / 3.0).is_nan());
        assert_eq!(pow(0.0, -1.0), f64::INFINITY);
        assert_eq!(pow(2.0, 0.5), std::f64::consts::SQRT_2);
        // tokio's use: an exponentially weighted mean's decay factor.
        let decay = pow(1.0 - 0.1, 4.0);
        assert!((decay - 0.6561).abs() < 1e-15, "{decay}");
    }
}
