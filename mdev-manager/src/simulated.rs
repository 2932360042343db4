//! The simulated host as the daemon sees it: mdev-sim's [`SimHost`] when the daemon is built
//! with the `simulate` feature (the default), an uninhabited stand-in without it, so the
//! daemon's code has one shape either way and `--simulate` fails with a clear message.

use std::sync::Arc;

use mdev_host::HostFs;
#[cfg(feature = "simulate")]
pub use mdev_sim::SimHost;

/// Without the `simulate` feature no simulated host exists: this type has no values.
#[cfg(not(feature = "simulate"))]
#[derive(Debug, Clone)]
pub enum SimHost {}

/// Opens the simulated host `topology` names (a topology file: a path or a `.toml` name; or a
/// built-in topology), as the host the engine works on and as the simulated host itself.
#[cfg(feature = "simulate")]
pub fn open(topology: &str) -> anyhow::Result<(Arc<dyn HostFs>, SimHost)> {
    use anyhow::Context;
    let host = if topology.ends_with(".toml") || topology.contains('/') {
        let text = std::fs::read_to_string(topology)
            .with_context(|| format!("cannot read topology file {topology}"))?;
        SimHost::from_topology_str(&text).with_context(|| format!("topology file {topology}"))?
    } else {
        SimHost::builtin(topology).with_context(|| format!("built-in topology {topology}"))?
    };
    Ok((Arc::new(host.clone()), host))
}

/// Without the `simulate` feature: refuses, naming the topology.
#[cfg(not(feature = "simulate"))]
pub fn open(topology: &str) -> anyhow::Result<(Arc<dyn HostFs>, SimHost)> {
    anyhow::bail!(
        "cannot simulate topology {topology}: mdev-manager was built without the `simulate` feature"
    )
}
