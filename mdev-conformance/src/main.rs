//! `mdev-conformance`: runs the conformance scenarios on a real host (`--root /`) or on the
//! simulated host (`--simulate samples`) and prints the outcome of every step next to the
//! real kernel's, as a table or as JSON (`--json`) for diffing two runs (`--diff A B`).
//!
//! With `--engine` it runs the engine's scenarios instead (`mdev_conformance::engine_scenarios`:
//! create/destroy, rollback, ownership, in-use refusal, claims, reconcile, races) on the same
//! host, keeping the engine's state in a scratch directory (`--scratch`, default a new
//! directory under the system temp dir, removed afterwards).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;

use mdev_conformance as conformance;
use mdev_conformance::engine_scenarios::{self as scenarios, ScenarioResult, Verdict};
use mdev_conformance::{Report, RunOptions, SimDeviceHolder, VfioDeviceHolder};
use mdev_engine::DiskFiles;
use mdev_host::{HostFs, RealFs};
use mdev_sim::SimHost;

/// Run the mdev/SR-IOV conformance scenarios and report each step's outcome.
#[derive(Debug, Parser)]
#[command(name = "mdev-conformance", version)]
struct Args {
    /// Run on the real host whose filesystem root is this directory (needs root, VFIO).
    #[arg(long, conflicts_with_all = ["simulate", "diff"])]
    root: Option<PathBuf>,
    /// Run on a built-in simulated topology (default, samples, scale).
    #[arg(long, conflicts_with = "diff")]
    simulate: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Seconds a write must stay unfinished while held to count as blocking.
    #[arg(long, default_value_t = 2.0)]
    block_wait: f64,
    /// Compare two JSON reports and print where they differ (exit 1 if they do).
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    diff: Option<Vec<PathBuf>>,
    /// Run the engine scenarios instead of the kernel conformance steps.
    #[arg(long, conflicts_with = "diff")]
    engine: bool,
    /// With --engine: the directory for the engine's state files (kept afterwards).
    #[arg(long, requires = "engine")]
    scratch: Option<PathBuf>,
}

/// What `--engine --json` prints.
#[derive(Debug, serde::Serialize)]
struct EngineReport {
    host: String,
    scenarios: Vec<ScenarioResult>,
}

/// The host the engine scenarios run on.
enum ScenarioHost<'a> {
    Real(&'a PathBuf),
    Simulated(&'a str, SimHost),
}

fn run_engine_scenarios(args: &Args) -> anyhow::Result<()> {
    // The host first: a bad --root/--simulate must not leave a scratch directory behind.
    let host = match (&args.root, &args.simulate) {
        (Some(root), None) => ScenarioHost::Real(root),
        (None, Some(name)) => ScenarioHost::Simulated(
            name,
            SimHost::builtin(name).with_context(|| format!("simulated topology {name:?}"))?,
        ),
        _ => bail!("give exactly one of --root DIR and --simulate TOPOLOGY with --engine"),
    };
    let (own_scratch, scratch) = match &args.scratch {
        Some(dir) => (false, dir.clone()),
        None => (
            true,
            std::env::temp_dir().join(format!("mdev-conformance-engine-{}", std::process::id())),
        ),
    };
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("creating scratch directory {}", scratch.display()))?;
    let files = Arc::new(DiskFiles::new(&scratch));
    let state_dir = std::path::Path::new("/var/lib/mdev-manager");
    let (label, results) = match host {
        ScenarioHost::Real(root) => {
            let host: Arc<dyn HostFs> = Arc::new(RealFs::new(root));
            let holder = VfioDeviceHolder::new(root);
            (
                format!("root:{}", root.display()),
                scenarios::run(host, files, state_dir, &holder),
            )
        }
        ScenarioHost::Simulated(name, sim) => {
            let holder = SimDeviceHolder(sim.clone());
            (
                format!("sim:{name}"),
                scenarios::run(Arc::new(sim), files, state_dir, &holder),
            )
        }
    };
    if own_scratch {
        // Only the engine's own state files live there; failing to tidy is not a verdict.
        let _ = std::fs::remove_dir_all(&scratch);
    }
    if args.json {
        let report = EngineReport {
            host: label,
            scenarios: results.clone(),
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("engine scenarios on {label}");
        for result in &results {
            let verdict = match &result.verdict {
                Verdict::Passed => "passed".to_owned(),
                Verdict::Failed(why) => format!("FAILED: {why}"),
                Verdict::Skipped(why) => format!("skipped: {why}"),
            };
            println!("  {:<40} {verdict}", result.name);
        }
    }
    if results
        .iter()
        .any(|r| matches!(r.verdict, Verdict::Failed(_)))
    {
        std::process::exit(1);
    }
    Ok(())
}

fn load(path: &PathBuf) -> anyhow::Result<Report> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading report {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing report {}", path.display()))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.engine {
        return run_engine_scenarios(&args);
    }
    if let Some(paths) = &args.diff {
        let (a, b) = (load(&paths[0])?, load(&paths[1])?);
        let lines = a.diff(&b);
        for line in &lines {
            println!("{line}");
        }
        if !lines.is_empty() {
            std::process::exit(1);
        }
        return Ok(());
    }
    if !(args.block_wait.is_finite() && args.block_wait > 0.0 && args.block_wait < 3600.0) {
        bail!(
            "--block-wait {} is not a number of seconds between 0 and 3600",
            args.block_wait
        );
    }
    let options = RunOptions {
        block_wait: Duration::from_secs_f64(args.block_wait),
        ..RunOptions::default()
    };
    let report = match (&args.root, &args.simulate) {
        (Some(root), None) => {
            let label = format!("root:{}", root.display());
            conformance::run(
                Arc::new(RealFs::new(root)),
                Arc::new(VfioDeviceHolder::new(root)),
                &label,
                options,
            )
        }
        (None, Some(name)) => {
            let host =
                SimHost::builtin(name).with_context(|| format!("simulated topology {name:?}"))?;
            conformance::run_on_sim(&host, &format!("sim:{name}"), options)
        }
        _ => bail!("give exactly one of --root DIR and --simulate TOPOLOGY (or --diff A B)"),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_table());
    }
    if !report.mismatches().is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
