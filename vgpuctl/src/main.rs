//! `vgpuctl`: command-line client of the mdev-manager service. A pure D-Bus client: it talks to
//! `org.mdevmanager.VGpu1` and never touches the host itself.
//!
//! One module per command under `commands/` (one function per subcommand, as mdevctl has);
//! this file only dispatches. `service` holds what the commands share (the connection, the
//! listings, the option sets they send), `jobs` the waiting for a job.

// First, so that its macros are in scope in the modules below.
#[macro_use]
mod output;
mod cli;
mod commands;
mod failure;
mod jobs;
mod service;
mod table;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command, JobAction, ScheduleAction};
use commands::{apply, attach, hostdev, jobs as job_commands, schedule, start_stop};
use failure::Failure;
use service::Session;

// Start-up (docs/benchmarks.md, item 2): the unwinder linked in from gcc's `libgcc_eh.a` ahead
// of the `-lgcc_s` std asks for, and `pow` (the one `libm` function in the binary, from tokio's
// multi-thread scheduler, which vgpuctl never runs) from the `libm` crate, so every vgpuctl
// run loads `libc.so.6` alone instead of also finding, mapping and relocating `libgcc_s.so.1`
// and `libm.so.6` (~0.2 ms per run on the benchmark machine). The hook does the same.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[link(name = "gcc_eh", kind = "static")]
extern "C" {}

/// `pow` for the code in this binary that calls it; see the comment above.
#[no_mangle]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprint!("{}", failure.render());
            ExitCode::from(failure.code)
        }
    }
}

/// Runs the command `cli` names.
async fn run(cli: Cli) -> Result<(), Failure> {
    // The two that need no service.
    match &cli.command {
        Command::Generate { what, dir } => return commands::generate::generate(what, dir),
        Command::InstallHook { root } => {
            return commands::install_hook::install_hook(root.as_deref())
        }
        _ => {}
    }
    let session = Session::connect(&cli).await?;
    let s = &session;
    match &cli.command {
        Command::Generate { .. } | Command::InstallHook { .. } => unreachable!("handled above"),
        Command::Profiles { fit } => commands::profiles::profiles(s, *fit).await,
        Command::Telemetry => commands::telemetry::telemetry(s).await,
        Command::Parents => commands::parents::parents(s).await,
        Command::Types { parent } => commands::types::types(s, parent.as_deref()).await,
        Command::List => commands::list::list(s).await,
        Command::Show { uuid } => commands::show::show(s, uuid).await,
        Command::Xml {
            uuid,
            display,
            ramfb,
        } => hostdev::xml(s, uuid, *display, *ramfb).await,
        Command::QemuArgs { target } => hostdev::qemu_args(s, target).await,
        Command::Attach {
            domain,
            profile,
            live,
            config,
        } => attach::attach(s, domain, profile, attach::Scope::new(*live, *config)).await,
        Command::Detach {
            domain,
            uuid,
            live,
            config,
        } => attach::detach(s, domain, uuid, attach::Scope::new(*live, *config)).await,
        Command::Create {
            profile,
            parent,
            uuid,
            count,
            autostart,
            weight,
            placement,
            numa_node,
            numa_strict,
            force,
            wait_for_parent,
            no_wait,
        } => {
            let request = commands::create::Request {
                profile,
                parent: parent.as_deref(),
                uuid: uuid.as_deref(),
                count: *count,
                autostart: *autostart,
                weight: *weight,
                placement: *placement,
                numa_node: *numa_node,
                numa_strict: *numa_strict,
                force: *force,
                wait_for_parent: *wait_for_parent,
                no_wait: *no_wait,
            };
            commands::create::create(s, &request).await
        }
        Command::Destroy {
            uuids,
            force,
            no_wait,
        } => commands::destroy::destroy(s, uuids, *force, *no_wait).await,
        Command::Start { uuid } => start_stop::start(s, uuid).await,
        Command::Stop { uuid } => start_stop::stop(s, uuid).await,
        Command::Autostart { uuid, state } => {
            commands::autostart::autostart(s, uuid, state.enabled()).await
        }
        Command::Sriov {
            parent,
            vfs,
            force,
            no_wait,
        } => commands::sriov::sriov(s, parent, *vfs, *force, *no_wait).await,
        Command::Apply {
            file,
            config,
            format,
            dry_run,
            force,
        } => {
            let mode = if *dry_run {
                apply::Mode::DryRun
            } else {
                apply::Mode::Apply
            };
            apply::run(s, &apply::Document::new(file, config, format), *force, mode).await
        }
        Command::Assert {
            file,
            config,
            format,
        } => {
            let document = apply::Document::new(file, config, format);
            apply::run(s, &document, false, apply::Mode::Assert).await
        }
        Command::Jobs => job_commands::list(s).await,
        Command::Job {
            action: JobAction::Cancel { job },
        } => job_commands::cancel(s, job).await,
        Command::ImportMdevctl { dry_run } => commands::import::import_mdevctl(s, *dry_run).await,
        Command::Permissions => commands::permissions::permissions(s).await,
        Command::Status => commands::status::status(s).await,
        Command::Weight {
            uuid,
            weight,
            min,
            max,
        } => schedule::weight(s, uuid, *weight, min.as_deref(), max.as_deref()).await,
        Command::Schedule {
            action: Some(ScheduleAction::Show { parent, svg }),
            ..
        } => schedule::show(s, parent.as_deref(), svg.as_deref()).await,
        Command::Schedule {
            action: None,
            parent,
            policy,
            period,
            slice,
        } => {
            let request = schedule::PolicyRequest {
                policy: policy.as_deref(),
                period: period.as_deref(),
                slice: slice.as_deref(),
            };
            schedule::set_policy(s, parent.as_deref(), &request).await
        }
        Command::Events { count } => commands::events::follow(s, *count).await,
        Command::Probe { target } => commands::probe::probe(s, target).await,
    }
}
