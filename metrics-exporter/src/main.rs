//! `mdev-manager-exporter`: Prometheus metrics of mdev-manager, read over its D-Bus API as an
//! unprivileged client. Serves `GET /metrics` on 127.0.0.1:9842 by default (`--listen`), each
//! scrape one fresh reading; or, with `--textfile PATH`, writes one reading for
//! node_exporter's textfile collector atomically (a temporary file in the same directory,
//! renamed over PATH) and exits. docs/metrics.md lists the metrics.

mod http;
mod read;
mod render;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;

/// The default listen address (loopback: the metrics name VMs' devices; expose them
/// deliberately).
const DEFAULT_LISTEN: &str = "127.0.0.1:9842";

/// Prometheus exporter of mdev-manager.
#[derive(Debug, Parser)]
#[command(name = "mdev-manager-exporter", version)]
struct Cli {
    /// Address to serve /metrics on.
    #[arg(long, default_value = DEFAULT_LISTEN, env = "MDEV_MANAGER_EXPORTER_LISTEN")]
    listen: SocketAddr,
    /// Write the metrics once to this file (node_exporter textfile collector) and exit.
    #[arg(long, value_name = "PATH")]
    textfile: Option<PathBuf>,
    /// Read the service on the session bus.
    #[arg(long, conflicts_with = "address")]
    session: bool,
    /// Read the service on the bus at this D-Bus address (default: the system bus, honouring
    /// DBUS_SYSTEM_BUS_ADDRESS).
    #[arg(long)]
    address: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let target = match (&cli.address, cli.session) {
        (Some(address), _) => dbus_api::BusTarget::Address(address.clone()),
        (None, true) => dbus_api::BusTarget::Session,
        (None, false) => dbus_api::BusTarget::System,
    };
    let connection = dbus_api::connect(&target)
        .await
        .context("cannot connect to the D-Bus bus")?;
    if let Some(path) = &cli.textfile {
        let reading = read::read(&connection).await?;
        write_textfile(path, &render::render(&reading))?;
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cli.listen))?;
    eprintln!(
        "mdev-manager-exporter: serving http://{}/metrics",
        listener.local_addr()?
    );
    http::serve(listener, connection).await
}

/// Writes `text` to `path` atomically: the collector never sees a half-written file.
fn write_textfile(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::Builder::new()
        .prefix(".mdev-manager-exporter.")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.as_file().sync_all())
        .with_context(|| format!("cannot write {}", file.path().display()))?;
    // Readable by the collector (tempfile creates 0600).
    std::fs::set_permissions(
        file.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .with_context(|| format!("cannot set permissions on {}", file.path().display()))?;
    file.persist(path)
        .with_context(|| format!("cannot rename the metrics onto {}", path.display()))?;
    Ok(())
}
