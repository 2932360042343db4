//! `Manager.GetMetricsSnapshot`: everything the Prometheus exporter publishes, in one reply
//! (parents, types, instances with their shares, the operation counters and the version), so
//! a scrape is one call instead of a `GetManagedObjects` walk.
//!
//! D-Bus signature of the reply: `(sa(sqsias)a(ssu)a(ssssbbuu)(uada(stdat)a(sst)))`.

use crate::operation_stats::OperationStats;

/// Everything `Manager.GetMetricsSnapshot` returns.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, zbus::Type)]
pub struct MetricsSnapshot {
    /// The service's version (`Manager.Version`).
    pub version: String,
    /// Every parent, sorted by name.
    pub parents: Vec<MetricsParent>,
    /// Every mdev type, sorted by parent then id.
    pub types: Vec<MetricsType>,
    /// Every instance, sorted by parent then UUID.
    pub instances: Vec<MetricsInstance>,
    /// `Manager.GetOperationStats` at the same moment.
    pub stats: OperationStats,
}

/// One parent, D-Bus signature `(sqsias)`.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, zbus::Type,
)]
pub struct MetricsParent {
    /// `Name`.
    pub name: String,
    /// `VendorId`.
    pub vendor_id: u16,
    /// `Driver`.
    pub driver: String,
    /// `NumaNode` (-1 unknown).
    pub numa_node: i32,
    /// `Modes`.
    pub modes: Vec<String>,
}

/// One mdev type, D-Bus signature `(ssu)`.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, zbus::Type,
)]
pub struct MetricsType {
    /// `ParentName`.
    pub parent: String,
    /// `Id`.
    pub id: String,
    /// `AvailableInstances`.
    pub available_instances: u32,
}

/// One instance, D-Bus signature `(ssssbbuu)`.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, zbus::Type,
)]
pub struct MetricsInstance {
    /// `Uuid`.
    pub uuid: String,
    /// `ParentName`.
    pub parent: String,
    /// `Type`.
    pub mdev_type: String,
    /// `Kind`.
    pub kind: String,
    /// `Active`.
    pub active: bool,
    /// A VM holds it (`Holder` or `HolderUuid` set).
    pub held: bool,
    /// `RequestedShare` (ppm).
    pub requested_share_ppm: u32,
    /// `EffectiveShare` (ppm).
    pub effective_share_ppm: u32,
}
