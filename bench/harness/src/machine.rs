//! The machine and the versions a run measured, for the results header.

use std::process::Command;

fn first_line(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().next().map(|l| l.trim().to_string())
}

/// The mdevctl the benchmarks run: `$MDEVCTL`, else the one `cargo install mdevctl` put in
/// `~/.cargo/bin` (Debian's 1.2.0 ignores `MDEVCTL_ENV_ROOT`, so it cannot read a test tree).
pub fn mdevctl_path() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("MDEVCTL") {
        return path.into();
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    std::path::Path::new(&home).join(".cargo/bin/mdevctl")
}

/// mdevctl's version (it prints none itself without a full host layout): from cargo's list
/// of installed crates.
pub fn mdevctl_version() -> String {
    let listed = Command::new("cargo")
        .args(["install", "--list"])
        .output()
        .ok()
        .and_then(|output| {
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .find(|l| l.starts_with("mdevctl v"))
                .map(|l| l.trim_end_matches(':').to_string())
        });
    match listed {
        Some(version) => format!("{version} (crates.io, `cargo install mdevctl`)"),
        None => format!("{} (version unknown)", mdevctl_path().display()),
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The value of the `name` line (`VmRSS:`, `MemTotal:`) of a `/proc` file in kB, as
/// `/proc/meminfo` and `/proc/PID/status` print them (`VmRSS:     1234 kB`).
pub fn kib_field(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
}

fn memory() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| kib_field(&text, "MemTotal:"))
        .map(|kib| format!("{:.1} GiB", kib / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into())
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// A Markdown table of the machine and versions.
pub fn markdown() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get().to_string())
        .unwrap_or_else(|_| "?".into());
    let rows = [
        ("CPUs (nproc)", cpus),
        ("CPU model", cpu_model()),
        ("memory", memory()),
        (
            "kernel",
            first_line("uname", &["-r"]).unwrap_or_else(|| "unknown".into()),
        ),
        ("load average at start (1, 5, 15 min)", load()),
        (
            "rustc",
            first_line("rustc", &["--version"]).unwrap_or_else(|| "unknown".into()),
        ),
        ("mdevctl", mdevctl_version()),
        (
            "dbus-daemon",
            first_line("dbus-daemon", &["--version"]).unwrap_or_else(|| "unknown".into()),
        ),
    ];
    let mut out = String::from("| | |\n|---|---|\n");
    for (key, value) in rows {
        out.push_str(&format!("| {key} | {value} |\n"));
    }
    out
}
