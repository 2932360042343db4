//! Item 2: inventory at scale. One REAL directory tree (the simulated scale host with 384
//! instances written out as files and links, plus 384 mdevctl definitions) is read by both
//! mdevctl (`MDEVCTL_ENV_ROOT`) and the daemon (`--root`, the real-host code path), so both
//! answer from the same files.

use crate::error::{BenchError, Result};
use crate::hosttree::{self, build_inventory_tree};
use crate::procs::{interleave, Cmd, Daemon, PrivateBus};
use crate::report::{Figure, Row, Section, Target};

use super::Env;

/// Instances and definitions on the scale tree.
pub const INSTANCES: usize = 384;

/// Runs the inventory comparison.
pub fn run(env: &Env) -> Result<Section> {
    let mut section =
        Section::new("2. Inventory at scale (8 parents × 4..32 types, 384 instances)");
    let root = tempfile::tempdir().map_err(BenchError::io("cannot create", "a temp dir"))?;
    let tree = build_inventory_tree(root.path(), INSTANCES)?;
    hosttree::write_profiles(root.path())?;
    let root_text = root.path().display().to_string();

    let bus = PrivateBus::start()?;
    // --no-reconcile: every instance is already present, and the benchmark must not write the
    // tree it compares on.
    let daemon = Daemon::start(
        &env.daemon,
        bus.address(),
        &["--root".into(), root_text.clone(), "--no-reconcile".into()],
    )?;
    let vgpuctl = env.vgpuctl.display().to_string();
    let address = bus.address().to_string();
    let vgpuctl_cmd = |name: &str, args: &[&str]| {
        let mut all = vec!["--address", address.as_str(), "--json"];
        all.extend_from_slice(args);
        Cmd::new(name, &vgpuctl, &all)
    };
    let mdevctl = crate::machine::mdevctl_path();
    let mdevctl_cmd = |name: &str, args: &[&str]| {
        Cmd::new(name, &mdevctl, args).env("MDEVCTL_ENV_ROOT", &root_text)
    };

    let commands = [
        vgpuctl_cmd("vgpuctl types", &["types"]),
        mdevctl_cmd("mdevctl types", &["types", "--dumpjson"]),
        vgpuctl_cmd("vgpuctl list", &["list"]),
        mdevctl_cmd("mdevctl list", &["list", "--dumpjson"]),
        mdevctl_cmd(
            "mdevctl list --defined",
            &["list", "--dumpjson", "--defined"],
        ),
    ];
    check_outputs(&commands, &tree)?;
    let samples = interleave(&commands, 3, env.rounds.inventory)?;
    let (rss, _) = daemon.memory_mib()?;
    daemon.stop()?;

    let figure = |i: usize| Figure::time(samples[i].clone());
    section.row(
        Row::new("2", "`vgpuctl --json types` (daemon running)", figure(0))
            .against("`mdevctl types --dumpjson`", &figure(1))
            .target(Target::RatioAtMost(0.5)),
    );
    section.row(
        Row::new("2", "`vgpuctl --json list` (active + defined)", figure(2))
            .against("`mdevctl list --dumpjson`", &figure(3))
            .target(Target::RatioAtMost(0.5)),
    );
    section.row(
        Row::new("2", "`vgpuctl --json list` (active + defined)", figure(2))
            .against("`mdevctl list --dumpjson --defined`", &figure(4))
            .target(Target::RatioAtMost(0.5)),
    );
    section.note(format!(
        "Same files for both: the simulated `scale` host ({} types on 8 parents) with {} \
         instances created by the engine, written out as a directory tree (files, relative \
         sysfs links) with the same {} instances as mdevctl definitions (`etc/mdevctl.d`). The \
         daemon runs on it with `--root` (RealFs, the real-host code path, no reconcile); \
         mdevctl {} with `MDEVCTL_ENV_ROOT`. Every output was checked to name all {} UUIDs \
         (lists) and the largest type `simgpu-32` (types) before timing.",
        tree.type_count,
        INSTANCES,
        INSTANCES,
        crate::machine::mdevctl_version(),
        INSTANCES
    ));
    section.note(format!(
        "{} interleaved rounds after 3 warm-up rounds; `vgpuctl` times include process start, \
         bus connection and the daemon's answer; the daemon's resident memory on this tree was \
         {rss:.1} MiB.",
        env.rounds.inventory
    ));
    Ok(section)
}

/// Every command must show what the tree holds; timing a command that prints an error or an
/// empty list would compare nothing.
fn check_outputs(commands: &[Cmd], tree: &hosttree::InventoryTree) -> Result<()> {
    for command in commands {
        let output = command.output()?;
        if command.name.ends_with("types") {
            if !output.contains("simgpu-32") {
                return Err(BenchError::Check(format!(
                    "{} does not show the type simgpu-32",
                    command.name
                )));
            }
            continue;
        }
        let missing = tree
            .instances
            .iter()
            .filter(|instance| !output.contains(&instance.uuid))
            .count();
        if missing > 0 {
            return Err(BenchError::Check(format!(
                "{} misses {missing} of the {} instances",
                command.name,
                tree.instances.len()
            )));
        }
    }
    Ok(())
}
