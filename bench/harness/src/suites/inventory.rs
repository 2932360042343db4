//! Item 2: inventory at scale. One REAL directory tree (the simulated scale host with 384
//! instances written out as files and links, plus 384 mdevctl definitions) is read by both
//! mdevctl (`MDEVCTL_ENV_ROOT`) and the daemon (`--root`, the real-host code path), so both
//! answer from the same files. The mdevctl-compatible command (`mdev-manager-mdevctl`, a client
//! of the daemon on the benchmark's private bus) runs the same `list --dumpjson` as mdevctl and
//! must print the same bytes.

use crate::error::{BenchError, Result};
use crate::hosttree::{self, build_inventory_tree};
use crate::procs::{interleave, Cmd, PrivateBus};
use crate::report::{Figure, Row, Section, Target};
use crate::stats::Samples;

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
    // The daemon knows the 384 instances as the persistent autostart instances they are, as
    // mdevctl knows them from their definitions (the compatible command's listing must match
    // mdevctl's byte for byte).
    let daemon = super::tree_daemon(env, &bus, root.path())?;
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

    let compat = env.mdevctl_compat.display().to_string();
    let compat_list = Cmd::new(
        "mdev-manager-mdevctl list",
        &compat,
        &["list", "--dumpjson"],
    )
    .env("DBUS_SYSTEM_BUS_ADDRESS", address.as_str());
    let commands = [
        vgpuctl_cmd("vgpuctl types", &["types"]),
        mdevctl_cmd("mdevctl types", &["types", "--dumpjson"]),
        vgpuctl_cmd("vgpuctl list", &["list"]),
        mdevctl_cmd("mdevctl list", &["list", "--dumpjson"]),
        mdevctl_cmd(
            "mdevctl list --defined",
            &["list", "--dumpjson", "--defined"],
        ),
        compat_list,
    ];
    check_outputs(&commands, &tree)?;
    same_bytes(&commands[3], &commands[5])?;
    // The floor under every `vgpuctl` figure: its process start alone, no bus.
    let mut commands = commands.to_vec();
    commands.push(Cmd::new("vgpuctl --version", &vgpuctl, &["--version"]));
    let samples = interleave(&commands, 3, env.rounds.inventory)?;
    let calls = calls_on_a_kept_connection(&bus, env.rounds.inventory * 10)?;
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
    section.row(
        Row::new(
            "2",
            "`vgpuctl --version` (process start alone: no bus, no call)",
            figure(6),
        )
        .against("`mdevctl types --dumpjson`", &figure(1)),
    );
    section.row(
        Row::new(
            "2",
            "`mdev-manager-mdevctl list --dumpjson` (the mdevctl-compatible command)",
            figure(5),
        )
        .against("`mdevctl list --dumpjson`", &figure(3))
        .target(Target::RatioAtMost(0.5)),
    );
    let [list_types, list_instances, walk] = calls;
    let walk = Figure::time(walk);
    section.row(
        Row::new(
            "2",
            "`Manager.ListTypes` call alone (kept connection, in the harness)",
            Figure::time(list_types),
        )
        .against("`GetManagedObjects`", &walk),
    );
    section.row(
        Row::new(
            "2",
            "`Manager.ListInstances` call alone (kept connection, in the harness)",
            Figure::time(list_instances),
        )
        .against("`GetManagedObjects`", &walk),
    );
    section.row(Row::new(
        "2",
        "`GetManagedObjects` call alone (the walk `vgpuctl` made before the listings)",
        walk,
    ));
    section.note(format!(
        "Same files for both: the simulated `scale` host ({} types on 8 parents) with {} \
         instances created by the engine, written out as a directory tree (files, relative \
         sysfs links) with the same {} instances as mdevctl definitions (`etc/mdevctl.d`). The \
         daemon runs on it with `--root` (RealFs, the real-host code path, no reconcile); \
         mdevctl {} with `MDEVCTL_ENV_ROOT`. Every output was checked to name all {} UUIDs \
         (lists) and the largest type `simgpu-32` (types) before timing, and \
         `mdev-manager-mdevctl list --dumpjson` to print the same bytes as mdevctl's.",
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

/// Round trips of the listing methods and of the ObjectManager walk on one kept connection,
/// interleaved: the service's share of a `vgpuctl` listing, without process start and bus
/// connection. Each reply is decoded as `vgpuctl` decodes it.
fn calls_on_a_kept_connection(bus: &PrivateBus, rounds: usize) -> Result<[Samples; 3]> {
    use std::collections::HashMap;
    use std::time::Instant;
    let rt = super::runtime()?;
    rt.block_on(async {
        let connection = super::connect(bus).await?;
        let manager = dbus_api::proxy::ManagerProxy::builder(&connection)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .map_err(BenchError::bus("Manager proxy"))?;
        let objects = zbus::fdo::ObjectManagerProxy::builder(&connection)
            .destination(dbus_api::names::BUS_NAME)
            .path(dbus_api::names::ROOT_PATH)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .map_err(BenchError::bus("ObjectManager proxy"))?;
        let mut samples: [Samples; 3] = Default::default();
        for round in 0..rounds + 3 {
            let mut order = [0, 1, 2];
            if round % 2 == 1 {
                order.reverse();
            }
            for step in order {
                let started = Instant::now();
                match step {
                    0 => {
                        let types = manager
                            .list_types(HashMap::new())
                            .await
                            .map_err(BenchError::bus("ListTypes"))?;
                        std::hint::black_box(dbus_api::wire::types_from_entries(types));
                    }
                    1 => {
                        let instances = manager
                            .list_instances(HashMap::new())
                            .await
                            .map_err(BenchError::bus("ListInstances"))?;
                        std::hint::black_box(dbus_api::wire::instances_from_entries(instances));
                    }
                    _ => {
                        let reply = objects
                            .get_managed_objects()
                            .await
                            .map_err(|e| BenchError::bus("GetManagedObjects")(e.into()))?;
                        let snapshot = dbus_api::wire::Snapshot::from_managed_objects(reply)
                            .map_err(|e| BenchError::Check(e.to_string()))?;
                        std::hint::black_box(snapshot);
                    }
                }
                if round >= 3 {
                    samples[step].push(started.elapsed());
                }
            }
        }
        Ok(samples)
    })
}

/// The compatible command must print exactly what mdevctl prints for the same tree; timing a
/// different answer would compare nothing.
fn same_bytes(mdevctl: &Cmd, compat: &Cmd) -> Result<()> {
    let (expected, got) = (mdevctl.output()?, compat.output()?);
    if expected != got {
        return Err(BenchError::Check(format!(
            "{} printed {} bytes, {} printed {} bytes: the outputs differ",
            compat.name,
            got.len(),
            mdevctl.name,
            expected.len()
        )));
    }
    Ok(())
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
