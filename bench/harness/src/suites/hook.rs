//! Item 1: the libvirt hook. On a domain without vGPUs libvirt pays a process start and a
//! byte scan (against `/bin/true`, the cost of any process); with one vGPU the hook claims it
//! over D-Bus from the daemon on the simulated host.

use crate::error::{BenchError, Result};
use crate::procs::{interleave, Cmd, PrivateBus};
use crate::report::{Figure, Row, Section, Target};
use crate::stats::Samples;

use super::{daemon_root, simulated_daemon, Env};

/// A domain with one declared vGPU (the form docs/libvirt.md describes: metadata plus the
/// hostdev naming its UUID).
const ONE_VGPU_DOMAIN: &str = r#"<domain type='kvm'>
  <name>bench-vm</name>
  <uuid>5b0c7a1e-3d2f-4e8a-9c6b-1f2e3d4c5b6a</uuid>
  <metadata>
    <mm:vgpu xmlns:mm="https://mdev-manager.org/xmlns/vgpu/1" profile="mtty" parent="mtty"/>
  </metadata>
  <devices>
    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>
      <source>
        <address uuid='0d6a9c3e-7b41-4f25-8e90-2c1b3a4d5e6f'/>
      </source>
    </hostdev>
  </devices>
</domain>
"#;

/// Runs both hook measurements.
pub fn run(env: &Env) -> Result<Section> {
    let mut section = Section::new("1. libvirt hook");
    let fixtures = env.repo.join("libvirt-hooks/tests/fixtures/domains");
    let plain = fixtures.join("plain.xml");
    let hook = env.hook.display().to_string();

    let commands = [
        Cmd::new("/bin/true", "/bin/true", &[]).stdin(&plain),
        Cmd::new("prepare", &hook, &["vm", "prepare", "begin", "-"]).stdin(&plain),
        Cmd::new("release", &hook, &["vm", "release", "end", "destroyed"]).stdin(&plain),
        Cmd::new("start", &hook, &["vm", "start", "begin", "-"]).stdin(&plain),
    ];
    let samples = interleave(&commands, 50, env.rounds.hook_fast)?;
    let baseline = Figure::time(samples[0].clone());
    let fast_prepare = Figure::time(samples[1].clone());
    section.row(
        Row::new(
            "1",
            "hook `prepare begin`, domain without vGPUs",
            fast_prepare.clone(),
        )
        .against("`/bin/true`", &baseline)
        .target(Target::RatioAtMost(1.5)),
    );
    section.row(
        Row::new(
            "1",
            "hook `release end`, domain without vGPUs",
            Figure::time(samples[2].clone()),
        )
        .against("`/bin/true`", &baseline)
        .target(Target::RatioAtMost(1.5)),
    );
    section.row(
        Row::new(
            "1",
            "hook `start begin` (exits unread)",
            Figure::time(samples[3].clone()),
        )
        .against("`/bin/true`", &baseline)
        .target(Target::RatioAtMost(1.5)),
    );

    // One vGPU: `bench-vm` asks for an mtty port (catalog profile `mtty`) through the metadata;
    // the daemon runs on the `samples` topology (the VM tier's guest: mtty, mbochs, mdpy).
    let bus = PrivateBus::start()?;
    let root = daemon_root()?;
    let lone = root.path().join("bench-vm.xml");
    std::fs::write(&lone, ONE_VGPU_DOMAIN).map_err(BenchError::io("cannot write", &lone))?;
    let daemon = simulated_daemon(env, &bus, root.path(), "samples")?;
    let root_text = root.path().display().to_string();
    let with_bus = |cmd: Cmd| {
        cmd.env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
            .env("MDEV_MANAGER_ROOT", root_text.clone())
    };
    let prepare = with_bus(Cmd::new(
        "prepare",
        &hook,
        &["bench-vm", "prepare", "begin", "-"],
    ))
    .stdin(&lone);
    let release = with_bus(Cmd::new(
        "release",
        &hook,
        &["bench-vm", "release", "end", "destroyed"],
    ))
    .stdin(&lone);
    let fast = with_bus(Cmd::new("fast", &hook, &["vm", "prepare", "begin", "-"])).stdin(&plain);
    let mut prepare_samples = Samples::new();
    let mut release_samples = Samples::new();
    let mut fast_samples = Samples::new();
    for round in 0..env.rounds.hook_vgpu + 2 {
        let (p, r, f) = (prepare.time()?, release.time()?, fast.time()?);
        // The first two pairs warm the daemon's caches and the page cache.
        if round >= 2 {
            prepare_samples.push(p);
            release_samples.push(r);
            fast_samples.push(f);
        }
    }
    daemon.stop()?;
    let fast_figure = Figure::time(fast_samples);
    section.row(
        Row::new(
            "1",
            "hook `prepare begin`, one vGPU (PrepareDomain creates it, simulated host)",
            Figure::time(prepare_samples),
        )
        .against("hook, domain without vGPUs", &fast_figure),
    );
    section.row(
        Row::new(
            "1",
            "hook `release end`, one vGPU (ReleaseDomain destroys it)",
            Figure::time(release_samples),
        )
        .against("hook, domain without vGPUs", &fast_figure),
    );
    section.note(format!(
        "Fast path: {} interleaved rounds (order alternating each round), every process fed \
         `plain.xml` on stdin as libvirt pipes the domain XML; the hook exits after a byte scan \
         without parsing or connecting to D-Bus.",
        env.rounds.hook_fast
    ));
    section.note(
        "One vGPU: a domain declaring one vGPU (profile `mtty` on `mtty`, metadata + hostdev) against the daemon on \
         the simulated `samples` host over a private dbus-daemon, root let through by the \
         daemon (no polkit round trip); each round a prepare (claim + create + state write) \
         then a release (destroy + state write).",
    );
    Ok(section)
}
