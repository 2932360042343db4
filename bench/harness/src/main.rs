//! `mdev-bench`: measures mdev-manager against its peers (mdevctl, raw sysfs writes, `/bin/true`)
//! in one run and prints the results as Markdown (`scripts/bench` writes them to
//! `bench/RESULTS.md`). Not a test: nothing here passes or fails on a time.
//!
//! Usage: `mdev-bench [--quick] [--only hook,inventory,lifecycle,footprint,exporter,apply,durable,scale] [--bin-dir DIR]`,
//! or `mdev-bench guest [--rounds N] [--bin-dir DIR]` inside the VM tier's guest (`bench/vm/run`),
//! or `mdev-bench tree DIR` to write the inventory tree of item 2 alone,
//! or `mdev-bench cold-start --baseline FILE [--rounds N] [--bin-dir DIR]` to compare item 4's
//! cold start with 384 instances against another build of the daemon.

mod error;
mod hosttree;
mod machine;
mod procs;
mod report;
mod stats;
mod suites;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::report::Section;
use crate::suites::{Env, Rounds};

const SUITES: [&str; 8] = [
    "hook",
    "inventory",
    "lifecycle",
    "footprint",
    "exporter",
    "apply",
    "durable",
    "scale",
];

/// `--bin-dir`, else the harness's own directory: it is built into the same target directory
/// as the binaries it measures.
fn bin_dir_or_own(bin_dir: Option<PathBuf>) -> Result<PathBuf> {
    match bin_dir {
        Some(dir) => Ok(dir),
        None => std::env::current_exe()
            .context("cannot find the harness's own path")?
            .parent()
            .map(Path::to_path_buf)
            .context("the harness has no directory"),
    }
}

fn main() -> Result<()> {
    let mut quick = false;
    let mut only: Vec<String> = SUITES.iter().map(|s| s.to_string()).collect();
    let mut bin_dir: Option<PathBuf> = None;
    let mut guest = false;
    let mut guest_rounds = 20;
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("tree") {
        // Writes the inventory tree alone, for looking at it with mdevctl or the daemon.
        args.next();
        let dir = PathBuf::from(args.next().context("tree needs a directory")?);
        let tree = hosttree::build_inventory_tree(&dir, suites::inventory::INSTANCES)?;
        hosttree::write_profiles(&dir)?;
        println!(
            "{}: {} types, {} instances",
            dir.display(),
            tree.type_count,
            tree.instances.len()
        );
        return Ok(());
    }
    if args.peek().map(String::as_str) == Some("cold-start") {
        // The daemon under test against a baseline build, interleaved (start-up work).
        args.next();
        return cold_start(args.collect());
    }
    if args.peek().map(String::as_str) == Some("guest") {
        guest = true;
        args.next();
    }
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--rounds" => {
                guest_rounds = args
                    .next()
                    .context("--rounds needs a number")?
                    .parse()
                    .context("--rounds needs a number")?;
            }
            "--only" => {
                let list = args.next().context("--only needs a list")?;
                only = list.split(',').map(str::to_string).collect();
                if let Some(unknown) = only.iter().find(|s| !SUITES.contains(&s.as_str())) {
                    bail!("unknown suite {unknown}; known: {}", SUITES.join(", "));
                }
            }
            "--bin-dir" => {
                bin_dir = Some(args.next().context("--bin-dir needs a directory")?.into())
            }
            "-h" | "--help" => {
                println!(
                    "usage: mdev-bench [--quick] [--only {}] [--bin-dir DIR]\n       mdev-bench guest [--rounds N] [--bin-dir DIR]\n       mdev-bench cold-start --baseline FILE [--rounds N] [--bin-dir DIR]",
                    SUITES.join(",")
                );
                return Ok(());
            }
            other => bail!("unknown argument {other}"),
        }
    }
    let bin_dir = bin_dir_or_own(bin_dir)?;
    // The fixtures are read from the checkout; in the VM guest the host's / is the guest's /.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let env = Env {
        repo,
        daemon: bin_dir.join("mdev-manager"),
        vgpuctl: bin_dir.join("vgpuctl"),
        hook: bin_dir.join("mdev-manager-hook"),
        mdevctl_compat: bin_dir.join("mdev-manager-mdevctl"),
        rounds: if quick {
            Rounds::quick()
        } else {
            Rounds::full()
        },
    };
    let needed = if guest {
        vec![&env.daemon, &env.vgpuctl]
    } else {
        vec![&env.daemon, &env.vgpuctl, &env.hook, &env.mdevctl_compat]
    };
    for binary in needed {
        if !binary.exists() {
            bail!(
                "{} is missing: build it first (scripts/bench does)",
                binary.display()
            );
        }
    }

    if guest {
        println!("#### Guest\n\n{}", machine::markdown());
        let section = suites::guest::run(&env, guest_rounds).map_err(anyhow::Error::from)?;
        print!("{}", section.markdown());
        return Ok(());
    }
    println!("## Machine and versions\n\n{}", machine::markdown());
    let mut sections = Vec::new();
    let mut failed = Vec::new();
    for suite in &only {
        eprintln!("mdev-bench: running {suite}");
        // A panic in one suite (a bug in the harness or a library) is reported like an error:
        // it must not end the whole run and cost the other suites' figures.
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match suite.as_str() {
                "hook" => suites::hook::run(&env),
                "inventory" => suites::inventory::run(&env),
                "lifecycle" => suites::lifecycle::run(&env),
                "exporter" => suites::exporter::run(&env),
                "apply" => suites::apply::run(&env),
                "durable" => suites::durable::run(&env),
                "scale" => suites::scale::run(&env),
                _ => suites::footprint::run(&env),
            }));
        let section = match result {
            Ok(Ok(section)) => section,
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".to_string());
                eprintln!("mdev-bench: {suite} panicked: {message}");
                failed.push(suite.clone());
                let mut section = Section::new(format!("{suite}: FAILED"));
                section.note(format!(
                    "The suite panicked: {message} (the panic's location is in the run's log)."
                ));
                section
            }
            Ok(Err(error)) => {
                // One broken suite must not cost the figures of the others.
                let mut chain = error.to_string();
                let mut source = std::error::Error::source(&error);
                while let Some(cause) = source {
                    chain.push_str(&format!(": {cause}"));
                    source = cause.source();
                }
                eprintln!("mdev-bench: {suite} failed: {chain}");
                failed.push(suite.clone());
                let mut section = Section::new(format!("{suite}: FAILED"));
                section.note(format!("The suite did not finish: {chain}"));
                section
            }
        };
        print!("{}", section.markdown());
        sections.push(section);
    }
    println!(
        "### Targets\n\n| # | measurement | target | this run | verdict |\n|---|---|---|---|---|\n{}",
        report::target_summary(&sections)
    );
    if !failed.is_empty() {
        bail!("suites that did not finish: {}", failed.join(", "));
    }
    Ok(())
}

/// `mdev-bench cold-start --baseline FILE [--rounds N] [--bin-dir DIR]`.
fn cold_start(args: Vec<String>) -> Result<()> {
    let mut baseline: Option<PathBuf> = None;
    let mut rounds = 10;
    let mut bin_dir: Option<PathBuf> = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--baseline" => baseline = Some(args.next().context("--baseline needs a file")?.into()),
            "--rounds" => {
                rounds = args
                    .next()
                    .context("--rounds needs a number")?
                    .parse()
                    .context("--rounds needs a number")?
            }
            "--bin-dir" => {
                bin_dir = Some(args.next().context("--bin-dir needs a directory")?.into())
            }
            other => bail!("unknown argument {other} (cold-start --baseline FILE [--rounds N] [--bin-dir DIR])"),
        }
    }
    let baseline = baseline.context("cold-start needs --baseline FILE (an older mdev-manager)")?;
    if !baseline.exists() {
        bail!("baseline {} does not exist", baseline.display());
    }
    let bin_dir = bin_dir_or_own(bin_dir)?;
    let env = Env {
        repo: Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
        daemon: bin_dir.join("mdev-manager"),
        vgpuctl: bin_dir.join("vgpuctl"),
        hook: bin_dir.join("mdev-manager-hook"),
        mdevctl_compat: bin_dir.join("mdev-manager-mdevctl"),
        rounds: Rounds::full(),
    };
    let section = suites::footprint::compare_cold_starts(&env, &baseline, rounds)
        .map_err(anyhow::Error::from)?;
    print!("{}", section.markdown());
    Ok(())
}
