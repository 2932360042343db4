//! Issue 15, "ten times the scale": the built-in simulated `scale-4096` host (64 parents × 4
//! types, each a 64 GiB pool) with 4,096 persistent autostart instances.
//!
//! - Cold start + reconcile: the daemon restores the 4,096 from `state.json` on a fresh
//!   simulated host (as after a reboot), against a cold start with an empty state.
//! - Resident memory with the 4,096, after a listing (the service holds its prepared answer).
//! - One create+destroy pair over D-Bus with the 4,096 present against the same pair on the
//!   same topology with nothing present (cost independent of the host's size).
//! - `vgpuctl --json list` against `mdevctl list --dumpjson` on one REAL directory tree (the
//!   host with its 4,096 instances written out as files and links, and 4,096 mdevctl
//!   definitions), read by both: the daemon with `--root` (the real-host code path), mdevctl
//!   with `MDEVCTL_ENV_ROOT`.

use std::collections::HashSet;

use crate::error::{BenchError, Result};
use crate::hosttree::{
    build_tree, scale_4096_parents, scale_4096_requests, write_profiles, BENCH_PROFILE,
    SCALE_4096_TOPOLOGY,
};
use crate::procs::{interleave, Cmd, PrivateBus};
use crate::report::{Figure, Row, Section, Target};
use crate::stats::Samples;

use super::{bus_create_destroy, connect, daemon_root, runtime, simulated_daemon, Env};

/// Persistent autostart instances on the ten-times host.
pub const INSTANCES: usize = 4096;

/// Runs the ten-times measurements.
pub fn run(env: &Env) -> Result<Section> {
    let mut section = Section::new(format!(
        "15. Ten times the scale (simulated `{SCALE_4096_TOPOLOGY}`: 64 parents × 4 types, \
         {INSTANCES} autostart instances)"
    ));
    // The engine itself writes the 4,096 (its own store format) and the tree both listings read.
    let tree_root = tempfile::tempdir().map_err(BenchError::io("cannot create", "a temp dir"))?;
    let parents = scale_4096_parents();
    let tree = build_tree(
        tree_root.path(),
        SCALE_4096_TOPOLOGY,
        &parents,
        scale_4096_requests(INSTANCES),
    )?;
    write_profiles(tree_root.path())?;
    let written = tree_root.path().join("var/lib/mdev-manager/state.json");
    let state = std::fs::read(&written).map_err(BenchError::io("cannot read", &written))?;
    let uuids: HashSet<String> = tree.instances.iter().map(|i| i.uuid.clone()).collect();

    let bus = PrivateBus::start()?;
    let rt = runtime()?;
    // The pair's parent: the first, which holds 64 of the instances and has room for more.
    let parent = parents[0].clone();
    let pairs_per_start = env.rounds.single.div_ceil(env.rounds.starts).max(1);
    let mut start_empty = Samples::new();
    let mut start_full = Samples::new();
    let mut rss_full = Samples::new();
    let mut pair_empty = Samples::new();
    let mut pair_full = Samples::new();
    for round in 0..env.rounds.starts {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for full in order {
            let root = daemon_root()?;
            if full {
                let path = super::state_file(root.path());
                std::fs::write(&path, &state).map_err(BenchError::io("cannot write", &path))?;
            }
            let daemon = simulated_daemon(env, &bus, root.path(), SCALE_4096_TOPOLOGY)?;
            if full {
                start_full.push(daemon.ready_after);
                let listing = Cmd::new(
                    "vgpuctl list",
                    &env.vgpuctl,
                    &["--address", bus.address(), "--json", "list"],
                )
                .output()?;
                let missing = uuids.difference(&uuids_in(&listing)).count();
                if missing > 0 {
                    return Err(BenchError::Check(format!(
                        "the daemon restored {} of {INSTANCES} autostart instances",
                        INSTANCES - missing
                    )));
                }
                rss_full.push_value(daemon.memory_mib()?.0);
            } else {
                start_empty.push(daemon.ready_after);
            }
            let samples = rt.block_on(pairs(&bus, &parent, pairs_per_start))?;
            if full {
                pair_full.extend(&samples);
            } else {
                pair_empty.extend(&samples);
            }
            daemon.stop()?;
        }
    }

    let (list_samples, rss_tree) = listings(env, &bus, tree_root.path(), &uuids)?;

    let start_empty = Figure::time(start_empty);
    section.row(Row::new(
        "15",
        "cold start, empty state (spawn → bus name owned)",
        start_empty.clone(),
    ));
    section.row(
        Row::new(
            "15",
            format!("cold start + reconcile restoring {INSTANCES} autostart instances"),
            Figure::time(start_full),
        )
        .against("cold start, empty", &start_empty)
        .target(Target::AtMost(0.5)),
    );
    let [vgpuctl_list, mdevctl_list] = list_samples;
    section.row(
        Row::new(
            "15",
            format!("`vgpuctl --json list` ({INSTANCES} instances, daemon running)"),
            Figure::time(vgpuctl_list),
        )
        .against("`mdevctl list --dumpjson`", &Figure::time(mdevctl_list))
        .target(Target::RatioAtMost(0.5)),
    );
    let pair_empty = Figure::time(pair_empty);
    section.row(Row::new(
        "15",
        "D-Bus create + destroy pair, empty host",
        pair_empty.clone(),
    ));
    section.row(
        Row::new(
            "15",
            format!("D-Bus create + destroy pair, {INSTANCES} instances present"),
            Figure::time(pair_full),
        )
        .against("empty host", &pair_empty)
        .target(Target::RatioAtMost(1.2)),
    );
    section.row(
        Row::new(
            "15",
            format!("resident memory (VmRSS) with {INSTANCES} instances, after a listing"),
            Figure::mib(rss_full),
        )
        .target(Target::AtMost(64.0)),
    );
    section.note(format!(
        "{} cold starts of each kind, interleaved (order alternating); each start is a fresh \
         simulated `{SCALE_4096_TOPOLOGY}` host, so the {INSTANCES} instances are really created \
         by the start-up reconcile from `state.json` (written by the engine: 64 per parent, \
         all `simgpu-1`, the benchmark profile's type). After each start: one `vgpuctl --json list` \
         (checked to name all {INSTANCES} UUIDs), the memory reading, then {pairs_per_start} \
         timed `CreateInstances` (profile `{BENCH_PROFILE}`, parent `{parent}`) + \
         `Instance.Destroy` pairs after one untimed pair.",
        env.rounds.starts
    ));
    section.note(format!(
        "Listings: the same host written out as a directory tree ({} types, {INSTANCES} \
         instances, {INSTANCES} mdevctl definitions); the daemon runs on it with `--root` \
         (RealFs, no reconcile), mdevctl {} with `MDEVCTL_ENV_ROOT`; both outputs were checked \
         to name every UUID; {} interleaved rounds after 2 warm-up rounds. The daemon's \
         resident memory on that tree: {rss_tree:.1} MiB.",
        tree.type_count,
        crate::machine::mdevctl_version(),
        env.rounds.inventory
    ));
    Ok(section)
}

/// `vgpuctl --json list` and `mdevctl list --dumpjson` on the tree at `root`, interleaved;
/// and the daemon's resident memory there.
fn listings(
    env: &Env,
    bus: &PrivateBus,
    root: &std::path::Path,
    uuids: &HashSet<String>,
) -> Result<([Samples; 2], f64)> {
    let daemon = super::tree_daemon(env, bus, root)?;
    let vgpuctl = Cmd::new(
        "vgpuctl list",
        &env.vgpuctl,
        &["--address", bus.address(), "--json", "list"],
    );
    let mdevctl = Cmd::new(
        "mdevctl list",
        crate::machine::mdevctl_path(),
        &["list", "--dumpjson"],
    )
    .env("MDEVCTL_ENV_ROOT", root.display().to_string());
    for command in [&vgpuctl, &mdevctl] {
        let missing = uuids.difference(&uuids_in(&command.output()?)).count();
        if missing > 0 {
            return Err(BenchError::Check(format!(
                "{} misses {missing} of the {} instances",
                command.name,
                uuids.len()
            )));
        }
    }
    let samples = interleave(&[vgpuctl, mdevctl], 2, env.rounds.inventory)?;
    let (rss, _) = daemon.memory_mib()?;
    daemon.stop()?;
    let [a, b]: [Samples; 2] = samples
        .try_into()
        .map_err(|_| BenchError::Check("two commands, two sample sets".into()))?;
    Ok(([a, b], rss))
}

/// One untimed create+destroy pair on `parent`, then `count` timed ones.
async fn pairs(bus: &PrivateBus, parent: &str, count: usize) -> Result<Samples> {
    let connection = connect(bus).await?;
    bus_create_destroy(&connection, BENCH_PROFILE, parent).await?;
    let mut samples = Samples::new();
    for _ in 0..count {
        samples.push(bus_create_destroy(&connection, BENCH_PROFILE, parent).await?);
    }
    Ok(samples)
}

/// Every UUID-shaped word (36 characters, hex and four dashes) in `text`.
fn uuids_in(text: &str) -> HashSet<String> {
    text.split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .filter(|word| super::is_uuid_word(word))
        .map(str::to_owned)
        .collect()
}
