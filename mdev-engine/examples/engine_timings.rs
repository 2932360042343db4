//! Prints how long the engine takes for its bulk paths on the simulated `scale` host with the
//! state on a real disk (fsync'd atomic saves): a batch create of 384 mdevs, destroying them,
//! and cold start (`Engine::new`) + `reconcile()` recreating 384 autostart instances after a
//! simulated reboot. A measurement, not a test: run it in a release build,
//!
//! ```sh
//! cargo run --release -p mdev-manager --example engine_timings [STATE_ROOT_PARENT]
//! ```
//!
//! The state root is a fresh directory under `STATE_ROOT_PARENT` (default: the current
//! directory, so the saves hit a disk rather than a tmpfs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mdev_engine::{CreateRequest, CreateTarget, DestroyOptions, DiskFiles, Engine, EngineConfig};
use mdev_sim::SimHost;

/// 8 parents x 48 instances of the smallest type.
const PER_PARENT: usize = 48;

fn main() -> anyhow::Result<()> {
    let parent_dir = std::env::args().nth(1).unwrap_or_else(|| ".".to_owned());
    let root = tempfile::tempdir_in(parent_dir)?;
    let sim = SimHost::builtin("scale")?;
    let host = Arc::new(sim.clone());
    let config = EngineConfig {
        poll_interval: Duration::from_millis(5),
        ..EngineConfig::default()
    };
    let open = || {
        Engine::new(
            host.clone(),
            Arc::new(DiskFiles::new(root.path())),
            config.clone(),
        )
    };

    let engine = open()?;
    let parents: Vec<String> = engine
        .inventory()?
        .mdev_parents
        .iter()
        .map(|p| p.name.clone())
        .collect();
    let requests = |autostart: bool| -> Vec<CreateRequest> {
        parents
            .iter()
            .flat_map(|parent| {
                (0..PER_PARENT).map(move |_| CreateRequest {
                    autostart,
                    ..CreateRequest::new(CreateTarget::Mdev {
                        parent: parent.clone(),
                        type_id: "simgpu-1".into(),
                    })
                })
            })
            .collect()
    };

    let batch = requests(false);
    let count = batch.len();
    let started = Instant::now();
    let created = engine.create_batch(batch)?;
    let create_time = started.elapsed();
    let uuids: Vec<String> = created.iter().map(|info| info.uuid.clone()).collect();

    let started = Instant::now();
    engine.destroy_batch(&uuids, DestroyOptions::default())?;
    let destroy_batch_time = started.elapsed();

    let created = engine.create_batch(requests(false))?;
    let started = Instant::now();
    for info in &created {
        engine.destroy(&info.uuid, DestroyOptions::default())?;
    }
    let destroy_each_time = started.elapsed();

    engine.create_batch(requests(true))?;
    drop(engine);
    sim.reboot();
    let started = Instant::now();
    let engine = open()?;
    let report = engine.reconcile()?;
    let reconcile_time = started.elapsed();
    let recreated = report
        .actions
        .iter()
        .filter(|a| matches!(a, mdev_engine::ReconcileAction::Recreated { .. }))
        .count();

    let rate = |n: usize, t: Duration| n as f64 / t.as_secs_f64();
    println!(
        "create_batch of {count} mdevs: {create_time:?} ({:.0}/s)",
        rate(count, create_time)
    );
    println!(
        "destroy_batch of {count}: {destroy_batch_time:?} ({:.0}/s)",
        rate(count, destroy_batch_time)
    );
    println!(
        "destroy one at a time, {count}: {destroy_each_time:?} ({:.0}/s)",
        rate(count, destroy_each_time)
    );
    println!(
        "create+destroy (batched) of {count}: {:.0}/s",
        rate(2 * count, create_time + destroy_batch_time)
    );
    println!("cold start + reconcile recreating {recreated} of {count}: {reconcile_time:?}");
    Ok(())
}
