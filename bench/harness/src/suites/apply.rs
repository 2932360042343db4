//! Declarative apply (issue 19): `vgpuctl apply -f FILE` of a 384-instance plan on the
//! simulated scale host, end to end: the process starts, sends the file for the plan (a
//! dry-run Job), prints it, sends it again to apply (a Job: one create batch of 384), waits
//! for the Job's end and prints the result. Each round starts from an empty host (the 384 are
//! removed with one untimed `DestroyInstances`). Target: at most 1 s.

use std::collections::HashMap;

use dbus_api::proxy::ManagerProxy;

use super::{connect, daemon_root, runtime, simulated_daemon, Env};
use crate::error::{BenchError, Result};
use crate::hosttree::{BENCH_PROFILE, SCALE_TOPOLOGY};
use crate::procs::{Cmd, PrivateBus};
use crate::report::{Figure, Row, Section, Target};
use crate::stats::Samples;

/// Instances the plan creates.
const INSTANCES: usize = 384;

/// The desired-state file: 384 placed instances of the benchmark profile (one entry holds at
/// most 256, so two entries of the same profile).
fn desired_file() -> String {
    format!(
        "version = 1\n\n\
         [[instances]]\nprofile = \"{BENCH_PROFILE}\"\ncount = 256\n\n\
         [[instances]]\nprofile = \"{BENCH_PROFILE}\"\ncount = {}\n",
        INSTANCES - 256
    )
}

/// Runs the suite.
pub fn run(env: &Env) -> Result<Section> {
    let mut section = Section::new("Declarative apply (simulated scale host, 384 instances)");
    let rt = runtime()?;
    let bus = PrivateBus::start()?;
    let root = daemon_root()?;
    let _daemon = simulated_daemon(env, &bus, root.path(), SCALE_TOPOLOGY)?;
    let file = root.path().join("fleet.toml");
    std::fs::write(&file, desired_file()).map_err(BenchError::io("cannot write", &file))?;
    let vgpuctl = env.vgpuctl.display().to_string();
    let apply = Cmd::new(
        "vgpuctl apply",
        &vgpuctl,
        &[
            "--address",
            bus.address(),
            "apply",
            "-f",
            file.to_str().unwrap_or_default(),
        ],
    );
    let connection = rt.block_on(connect(&bus))?;
    let mut samples = Samples::new();
    let rounds = env.rounds.batch.max(1) * 5;
    for round in 0..rounds + 1 {
        let started = std::time::Instant::now();
        let output = apply.output()?;
        let elapsed = started.elapsed();
        if !output.contains(&format!("applied: {INSTANCES} created")) {
            return Err(BenchError::Check(format!(
                "vgpuctl apply did not create {INSTANCES}: {output:?}"
            )));
        }
        // The first round warms the daemon's caches up.
        if round > 0 {
            samples.push(elapsed);
        }
        rt.block_on(remove_all(&connection))?;
    }
    section.row(
        Row::new(
            "19",
            "`vgpuctl apply -f FILE`, 384-instance plan from an empty host (plan + apply)",
            Figure::time(samples),
        )
        .target(Target::AtMost(1.0)),
    );
    section.note(
        "One run of `vgpuctl apply` per round: process start, the plan (a dry-run Job), the \
         apply (a Job with one create batch of 384 placed `bench-512m` instances), output. \
         The 384 are removed between rounds, untimed.",
    );
    Ok(section)
}

/// Removes every instance with one `DestroyInstances`.
async fn remove_all(connection: &zbus::Connection) -> Result<()> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(BenchError::bus("Manager proxy"))?;
    let listed = manager
        .list_instances(HashMap::new())
        .await
        .map_err(BenchError::bus("ListInstances"))?;
    if listed.len() != INSTANCES {
        return Err(BenchError::Check(format!(
            "{} instances after apply, not {INSTANCES}",
            listed.len()
        )));
    }
    let uuids: Vec<&str> = listed.iter().map(|entry| entry.uuid.as_str()).collect();
    manager
        .destroy_instances(&uuids, HashMap::new())
        .await
        .map_err(BenchError::bus("DestroyInstances"))
}
