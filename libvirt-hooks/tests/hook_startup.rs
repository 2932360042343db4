//! The hook's process start (src/main.rs): it runs on every operation of every domain, so it
//! loads `libc.so.6` alone and does without std's `fn main` start-up; what of that start-up
//! matters is kept and checked here.

use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};

const HOOK: &str = env!("CARGO_BIN_EXE_mdev-manager-hook");

/// The shared libraries `ldd` lists for the hook, by file name.
fn needed_libraries() -> Vec<String> {
    let output = Command::new("ldd").arg(HOOK).output().expect("ldd runs");
    assert!(output.status.success(), "ldd {HOOK} failed: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(|name| name.rsplit('/').next().unwrap_or(name).to_owned())
        .collect()
}

#[test]
fn the_hook_loads_libc_alone() {
    let libraries = needed_libraries();
    assert!(
        libraries.iter().any(|name| name.starts_with("libc.so")),
        "{libraries:?}"
    );
    // Each further library is found, mapped and relocated at every hook call (measured: ~0.16 ms
    // for libgcc_s, ~0.05 ms for libm; docs/benchmarks.md, item 1). A new one here comes from
    // a new symbol of it in the binary: provide it in src/main.rs as `pow` is, or measure and
    // document the cost.
    let extra: Vec<_> = libraries
        .iter()
        .filter(|name| {
            !name.starts_with("libc.so")
                && !name.starts_with("linux-vdso")
                && !name.starts_with("ld-linux")
        })
        .collect();
    assert!(extra.is_empty(), "the hook loads more than libc: {extra:?}");
}

#[test]
fn a_closed_stderr_keeps_the_exit_status() {
    // libvirt reads the hook's stderr to the end, but should the reader be gone, a write to
    // stderr must be an error the hook ignores (SIGPIPE ignored, as std's start-up does), not a
    // signal death or a panic: the exit status is what libvirt acts on.
    let (reader, writer) = UnixStream::pair().expect("socket pair");
    drop(reader);
    let status = Command::new(HOOK)
        .args(["vm", "prepare"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::os::fd::OwnedFd::from(writer))
        .status()
        .expect("hook runs");
    assert_eq!(status.code(), Some(2), "{status:?}");
}

#[test]
fn operations_the_hook_ignores_leave_stdin_unread() {
    // libvirt writes the domain XML into a non-blocking pipe and ignores the EPIPE it gets when
    // the hook exits without reading it (libvirt src/util/vircommand.c, virCommandProcessIO),
    // so those operations cost a bare process start. A file as stdin shares its offset with
    // the hook's descriptor, which shows how far the hook read.
    let xml =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/domains/plain.xml");
    let length = std::fs::metadata(&xml).expect("fixture").len();
    for (operation, sub, read) in [
        ("started", "begin", 0),
        ("start", "begin", 0),
        ("prepare", "begin", length),
    ] {
        let mut stdin = std::fs::File::open(&xml).expect("fixture");
        let status = Command::new(HOOK)
            .args(["vm", operation, sub, "-"])
            .stdin(stdin.try_clone().expect("dup"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("hook runs");
        assert!(status.success(), "{operation} {sub}: {status:?}");
        let offset = std::io::Seek::stream_position(&mut stdin).expect("offset");
        assert_eq!(offset, read, "{operation} {sub}");
    }
}
