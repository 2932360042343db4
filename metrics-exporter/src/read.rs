//! One reading of the service over D-Bus: `GetManagedObjects` on the object root (parents,
//! types, instances with their shares) and `Manager.GetOperationStats`, fetched concurrently.
//! Only read-only calls, so the exporter needs no polkit grant.

use std::collections::HashMap;

use dbus_api::names::{interface, BUS_NAME, ROOT_PATH};
use dbus_api::proxy::{ManagerProxy, PropertyMap};
use dbus_api::wire::Snapshot;

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
    /// The service's objects did not have the properties this exporter knows.
    #[error("unexpected objects from {BUS_NAME}")]
    Objects(#[source] dbus_api::wire::PropertyError),
}

/// Reads everything the metrics need.
pub async fn read(connection: &zbus::Connection) -> Result<Reading, ReadError> {
    let object_manager = zbus::fdo::ObjectManagerProxy::builder(connection)
        .destination(BUS_NAME)
        .path(ROOT_PATH)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .map_err(|source| ReadError::Call {
            call: "GetManagedObjects",
            source,
        })?;
    let manager = ManagerProxy::builder(connection)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .map_err(|source| ReadError::Call {
            call: "Manager",
            source,
        })?;
    let (objects, stats, version) = tokio::join!(
        object_manager.get_managed_objects(),
        manager.get_operation_stats(),
        manager.version()
    );
    let objects = objects.map_err(|source| ReadError::Call {
        call: "GetManagedObjects",
        source: source.into(),
    })?;
    let stats = stats.map_err(|source| ReadError::Call {
        call: "Manager.GetOperationStats",
        source,
    })?;
    let version = version.map_err(|source| ReadError::Call {
        call: "Manager.Version",
        source,
    })?;
    // Shares are not part of the plain records: read them from the instance properties.
    let mut shares: HashMap<String, (u32, u32)> = HashMap::new();
    for interfaces in objects.values() {
        let Some(map) = interfaces
            .iter()
            .find(|(name, _)| name.as_str() == interface::INSTANCE)
            .map(|(_, map)| map)
        else {
            continue;
        };
        let map: PropertyMap = map
            .iter()
            .filter_map(|(k, v)| Some((k.to_string(), v.try_clone().ok()?)))
            .collect();
        let uuid = property::<String>(&map, "Uuid").unwrap_or_default();
        let requested = property::<u32>(&map, "RequestedShare").unwrap_or_default();
        let effective = property::<u32>(&map, "EffectiveShare").unwrap_or_default();
        shares.insert(uuid, (requested, effective));
    }
    let snapshot = Snapshot::from_managed_objects(objects).map_err(ReadError::Objects)?;
    Ok(Reading {
        service_version: version,
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
            .map(|instance| {
                let (requested, effective) =
                    shares.get(&instance.uuid).copied().unwrap_or_default();
                InstanceSample {
                    held: !instance.holder_uuid.is_empty() || !instance.holder.is_empty(),
                    uuid: instance.uuid,
                    parent: instance.parent,
                    mdev_type: instance.mdev_type,
                    kind: instance.kind,
                    active: instance.active,
                    requested_share_ppm: requested,
                    effective_share_ppm: effective,
                }
            })
            .collect(),
        stats,
    })
}

fn property<T: TryFrom<zbus::OwnedVariant>>(map: &PropertyMap, name: &str) -> Option<T> {
    T::try_from(map.get(name)?.try_clone().ok()?).ok()
}
