//! One reading of the service over D-Bus: `Manager.GetMetricsSnapshot`, one call that
//! returns parents, types, instances with their shares, the operation counters and the
//! version (the service reads them from the objects it exports, under one lock). Read-only,
//! so the exporter needs no polkit grant.

use dbus_api::names::BUS_NAME;
use dbus_api::proxy::ManagerProxy;

use crate::render::{InstanceSample, ParentSample, Reading, TypeSample};

/// A reading failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A D-Bus call to the service failed (not running, not reachable, refused).
    #[error("cannot read {BUS_NAME}: {call} failed")]
    Call {
        /// The call.
        call: &'static str,
        /// Why.
        #[source]
        source: zbus::Error,
    },
}

/// Reads everything the metrics need.
pub async fn read(connection: &zbus::Connection) -> Result<Reading, ReadError> {
    let manager = ManagerProxy::builder(connection)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .map_err(|source| ReadError::Call {
            call: "Manager",
            source,
        })?;
    let snapshot = manager
        .get_metrics_snapshot()
        .await
        .map_err(|source| ReadError::Call {
            call: "Manager.GetMetricsSnapshot",
            source,
        })?;
    Ok(Reading {
        service_version: snapshot.version,
        parents: snapshot
            .parents
            .into_iter()
            .map(|parent| ParentSample {
                name: parent.name,
                vendor_id: parent.vendor_id,
                driver: parent.driver,
                numa_node: parent.numa_node,
                modes: parent.modes,
            })
            .collect(),
        types: snapshot
            .types
            .into_iter()
            .map(|mdev_type| TypeSample {
                parent: mdev_type.parent,
                id: mdev_type.id,
                available_instances: mdev_type.available_instances,
            })
            .collect(),
        instances: snapshot
            .instances
            .into_iter()
            .map(|instance| InstanceSample {
                held: instance.held,
                uuid: instance.uuid,
                parent: instance.parent,
                mdev_type: instance.mdev_type,
                kind: instance.kind,
                active: instance.active,
                requested_share_ppm: instance.requested_share_ppm,
                effective_share_ppm: instance.effective_share_ppm,
            })
            .collect(),
        stats: snapshot.stats,
    })
}
