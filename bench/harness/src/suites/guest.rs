//! Item 5: create + remove on the real kernel, inside the VM tier's guest (`bench/vm/run`
//! boots it): the service (D-Bus call pair, and `vgpuctl` command pair) against raw writes of
//! the kernel's `create` and `remove` files, on the `mtty` sample driver. Under TCG absolute
//! times mean little; the ratios are the figures.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{BenchError, Result};
use crate::procs::{Cmd, Daemon, PrivateBus};
use crate::report::{Figure, Row, Section};
use crate::stats::Samples;

use super::{bus_create_destroy, command_create_destroy, connect, runtime, Env};

const MTTY_CREATE: &str = "/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create";
/// The catalog profile pinned to `mtty-1`.
const PROFILE: &str = "mtty";

/// Runs in the guest against its real sysfs.
pub fn run(env: &Env, rounds: usize) -> Result<Section> {
    let mut section = Section::new("5. Real kernel (VM tier guest, mtty)");
    if !Path::new(MTTY_CREATE).exists() {
        return Err(BenchError::Check(format!(
            "{MTTY_CREATE} is missing: is mtty loaded?"
        )));
    }
    let state = tempfile::tempdir().map_err(BenchError::io("cannot create", "a temp dir"))?;
    let bus = PrivateBus::start()?;
    let daemon = Daemon::start(
        &env.daemon,
        bus.address(),
        &["--state-dir".into(), state.path().display().to_string()],
    )?;
    let rt = runtime()?;
    let connection = rt.block_on(connect(&bus))?;
    let vgpuctl = env.vgpuctl.display().to_string();
    let address = bus.address().to_string();
    let create = Cmd::new(
        "vgpuctl create",
        &vgpuctl,
        &["--address", &address, "create", PROFILE, "--parent", "mtty"],
    );

    let truth = Cmd::new("/bin/true", "/bin/true", &[]);
    let version = Cmd::new("vgpuctl --version", &vgpuctl, &["--version"]);

    let mut raw = Samples::new();
    let mut over_bus = Samples::new();
    let mut command = Samples::new();
    let mut spawns = Samples::new();
    let mut bare = Samples::new();
    for round in 0..rounds + 1 {
        let mut order = [0, 1, 2, 3, 4];
        if round % 2 == 1 {
            order.reverse();
        }
        for step in order {
            let elapsed = match step {
                0 => raw_create_remove()?,
                1 => rt.block_on(bus_create_destroy(&connection, PROFILE, "mtty"))?,
                2 => command_create_destroy(&create, &vgpuctl, &address)?,
                3 => {
                    let started = Instant::now();
                    truth.time()?;
                    truth.time()?;
                    started.elapsed()
                }
                _ => {
                    let started = Instant::now();
                    version.time()?;
                    version.time()?;
                    started.elapsed()
                }
            };
            // Round 0 warms the page cache and the daemon.
            if round > 0 {
                [
                    &mut raw,
                    &mut over_bus,
                    &mut command,
                    &mut spawns,
                    &mut bare,
                ][step]
                    .push(elapsed);
            }
        }
    }
    daemon.stop()?;
    let raw = Figure::time(raw);
    section.row(Row::new(
        "5",
        "raw `create` + `remove` writes (real sysfs)",
        raw.clone(),
    ));
    section.row(
        Row::new(
            "5",
            "D-Bus `CreateInstances` + `Instance.Destroy`",
            Figure::time(over_bus),
        )
        .against("raw writes", &raw),
    );
    let command_figure = Figure::time(command);
    section.row(
        Row::new(
            "5",
            "`vgpuctl create` + `vgpuctl destroy`",
            command_figure.clone(),
        )
        .against("raw writes", &raw),
    );
    let spawns = Figure::time(spawns);
    section.row(Row::new(
        "5",
        "two process starts (`/bin/true` twice), what the `vgpuctl` pair pays before any work",
        spawns.clone(),
    ));
    section.row(
        Row::new(
            "5",
            "`vgpuctl create` + `vgpuctl destroy`",
            command_figure.clone(),
        )
        .against("two `/bin/true` starts", &spawns),
    );
    let bare = Figure::time(bare);
    section.row(
        Row::new(
            "5",
            "two `vgpuctl --version` starts (process start, no bus)",
            bare.clone(),
        )
        .against("two `/bin/true` starts", &spawns),
    );
    section.row(
        Row::new("5", "`vgpuctl create` + `vgpuctl destroy`", command_figure)
            .against("two `vgpuctl --version` starts", &bare),
    );
    section.note(format!(
        "{rounds} interleaved rounds in one boot of Debian's kernel under QEMU TCG (no KVM): \
         absolute times are inflated by emulation, ratios are the figure. The daemon runs on the \
         guest's real `/sys` with its state in a temp dir; root is let through without polkit. The \
         binaries run from the guest's tmpfs (copied from the results share, whose 9p mount \
         has no page cache and made every process start page its binary in again)."
    ));
    Ok(section)
}

fn write_once(path: &str, data: &[u8]) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(BenchError::io("cannot open", path))?;
    file.write_all(data)
        .map_err(BenchError::io("cannot write", path))
}

fn raw_create_remove() -> Result<Duration> {
    let uuid = uuid::Uuid::new_v4().to_string();
    let remove = format!("/sys/bus/mdev/devices/{uuid}/remove");
    let started = Instant::now();
    write_once(MTTY_CREATE, uuid.as_bytes())?;
    write_once(&remove, b"1")?;
    Ok(started.elapsed())
}
