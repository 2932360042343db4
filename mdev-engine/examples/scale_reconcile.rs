//! Cold start (`Engine::new`) + `reconcile_and_discover()` of the simulated `scale-4096` host
//! with its 4,096 autostart instances restored after a simulated reboot, in process (no D-Bus):
//! the engine's share of the `scale` bench suite's cold start. A measurement, not a test; run
//! it in a release build (also under `valgrind --tool=callgrind` or massif):
//!
//! ```sh
//! cargo run --release -p mdev-engine --example scale_reconcile [STATE_ROOT]
//! ```
//!
//! With `STATE_ROOT`, the state is written there (`STATE_ROOT/bench-state/state.json`, the
//! bench's layout) and kept, for starting the daemon on it.

use std::sync::Arc;
use std::time::Instant;

use mdev_engine::{CreateRequest, CreateTarget, DiskFiles, Engine, EngineConfig, ReconcileAction};
use mdev_sim::SimHost;

const INSTANCES: usize = 4096;

fn main() -> anyhow::Result<()> {
    let kept = std::env::args().nth(1).map(std::path::PathBuf::from);
    let temp = tempfile::tempdir()?;
    let root = kept.clone().unwrap_or_else(|| temp.path().to_owned());
    let sim = SimHost::builtin("scale-4096")?;
    let config = EngineConfig {
        state_dir: "/bench-state".into(),
        ..EngineConfig::default()
    };
    let open = || {
        Engine::new(
            Arc::new(sim.clone()),
            Arc::new(DiskFiles::new(&root)),
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
    let requests: Vec<CreateRequest> = (0..INSTANCES)
        .map(|i| CreateRequest {
            persistent: true,
            autostart: true,
            ..CreateRequest::new(CreateTarget::Mdev {
                parent: parents[i % parents.len()].clone(),
                type_id: "simgpu-1".into(),
            })
        })
        .collect();
    let started = Instant::now();
    engine.create_batch(requests)?;
    println!("create_batch of {INSTANCES}: {:?}", started.elapsed());
    drop(engine);
    if kept.is_some() {
        return Ok(());
    }
    sim.reboot();
    let started = Instant::now();
    let engine = open()?;
    let opened = started.elapsed();
    let done = engine.reconcile_and_discover()?;
    let reconciled = started.elapsed();
    let infos = engine.instances_in(&done.inventory);
    let listed = started.elapsed();
    let recreated = done
        .report
        .actions
        .iter()
        .filter(|a| matches!(a, ReconcileAction::Recreated { .. }))
        .count();
    println!(
        "Engine::new {opened:?}, + reconcile_and_discover {reconciled:?} ({recreated} recreated), \
         + instances_in {listed:?} ({} listed)",
        infos.len()
    );
    Ok(())
}
