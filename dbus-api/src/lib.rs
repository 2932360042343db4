//! The mdev-manager D-Bus API: names, wire types, typed errors and client proxies.
//!
//! The service (`mdev-manager`) implements this API; clients (`vgpuctl`, the libvirt hook,
//! management UIs) use only this crate and never link host code. The published introspection
//! XML is `dbus-api/interface/org.mdevmanager.VGpu1.xml`; docs/dbus-api.md describes it.
#![deny(missing_docs)]

pub mod error;
pub mod hostdev;
pub mod names;
pub mod operation_stats;
pub mod options;
pub mod path;
pub mod proxy;
pub mod schedule;
pub mod wire;

pub use error::{BusError, ClientError, ErrorKind};

/// The introspection XML of every interface, as published in the repository.
pub const INTROSPECTION_XML: &str = include_str!("../interface/org.mdevmanager.VGpu1.xml");

/// The `<interface name="...">...</interface>` blocks of an introspection document, by name,
/// each line trimmed (indentation differs between a document and a live object). Used to check
/// that a running service matches [`INTROSPECTION_XML`].
pub fn interface_blocks(xml: &str) -> std::collections::BTreeMap<String, String> {
    let mut blocks = std::collections::BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in xml.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("<interface name=\"") {
            let name = rest.split('"').next().unwrap_or_default().to_string();
            current = Some((name, String::new()));
        }
        if let Some((_, block)) = current.as_mut() {
            block.push_str(line);
            block.push('\n');
        }
        if line == "</interface>" {
            if let Some((name, block)) = current.take() {
                blocks.insert(name, block);
            }
        }
    }
    blocks
}

/// Connects to the bus the service is on: the system bus (honouring
/// `DBUS_SYSTEM_BUS_ADDRESS`), the session bus, or an explicit address.
pub async fn connect(target: &BusTarget) -> Result<zbus::Connection, ClientError> {
    let builder = match target {
        BusTarget::System => zbus::connection::Builder::system(),
        BusTarget::Session => zbus::connection::Builder::session(),
        BusTarget::Address(address) => zbus::connection::Builder::address(address.as_str()),
    };
    builder.build().await.map_err(ClientError::Bus)
}

/// Which bus to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusTarget {
    /// The system bus (`DBUS_SYSTEM_BUS_ADDRESS` or the default socket).
    System,
    /// The session bus.
    Session,
    /// An explicit D-Bus address (`unix:path=/run/...`).
    Address(String),
}
