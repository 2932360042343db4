//! `mdev-manager-mdevctl`: an mdevctl 1.4-compatible command (installable as `mdevctl`) that
//! drives the mdev-manager service over D-Bus, so libvirt's node devices (which run `mdevctl`)
//! see and change mdev-manager's instances. It never touches sysfs or the service's state: it
//! is a client of `org.mdevmanager.VGpu1` on the system bus (`DBUS_SYSTEM_BUS_ADDRESS`
//! honoured). Output bytes and exit statuses follow mdevctl 1.4: usage errors exit 2, every
//! other error prints `Error: MESSAGE` on stderr and exits 1. docs/libvirt.md describes it.

mod cli;
mod commands;
mod definition;
mod format;
mod json;

use clap::Parser;
use cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("Error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), commands::CommandError> {
    let connection = dbus_api::connect(&dbus_api::BusTarget::System).await?;
    let mut stdout = std::io::stdout().lock();
    match &cli.command {
        Command::List(args) => commands::list(&connection, args, &mut stdout).await,
        Command::Types(args) => commands::types(&connection, args, &mut stdout).await,
        Command::Start(args) => commands::start(&connection, args, &mut stdout).await,
        Command::Stop(args) => commands::stop(&connection, args).await,
        Command::Define(args) => commands::define(&connection, args, &mut stdout).await,
        Command::Undefine(args) => commands::undefine(&connection, args).await,
        Command::Modify(args) => commands::modify(&connection, args).await,
        Command::StartParentMdevs(args) => commands::start_parent_mdevs(&connection, args).await,
    }
}
