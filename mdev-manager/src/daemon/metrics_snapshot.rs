//! `Manager.GetMetricsSnapshot`: the exported objects as the Prometheus exporter needs them,
//! read under the same lock that publishes them (a consistent picture, no bus round trip per
//! object), with the operation counters and the version.

use dbus_api::metrics_snapshot::{MetricsInstance, MetricsParent, MetricsSnapshot, MetricsType};

use super::model::Shared;
use super::Service;

fn read<D>(cell: &Shared<D>) -> std::sync::RwLockReadGuard<'_, D> {
    cell.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Service {
    /// The snapshot: parents by name, types by parent then id, instances by parent then UUID.
    pub async fn metrics_snapshot(&self) -> MetricsSnapshot {
        let exported = self.exported.lock().await;
        let mut parents: Vec<MetricsParent> = exported
            .parents
            .values()
            .map(|cell| {
                let parent = read(cell);
                MetricsParent {
                    name: parent.name.clone(),
                    vendor_id: parent.vendor_id,
                    driver: parent.driver.clone(),
                    numa_node: parent.numa_node,
                    modes: parent.modes.clone(),
                }
            })
            .collect();
        let mut types: Vec<MetricsType> = exported
            .types
            .values()
            .map(|cell| {
                let mdev_type = read(cell);
                MetricsType {
                    parent: mdev_type.parent_name.clone(),
                    id: mdev_type.id.clone(),
                    available_instances: mdev_type.available_instances,
                }
            })
            .collect();
        let mut instances: Vec<MetricsInstance> = exported
            .instances
            .values()
            .map(|cell| {
                let instance = read(cell);
                MetricsInstance {
                    uuid: instance.uuid.clone(),
                    parent: instance.parent_name.clone(),
                    mdev_type: instance.type_id.clone(),
                    kind: instance.kind.clone(),
                    active: instance.active,
                    held: !instance.holder.is_empty() || !instance.holder_uuid.is_empty(),
                    requested_share_ppm: instance.schedule.requested_share,
                    effective_share_ppm: instance.schedule.effective_share,
                }
            })
            .collect();
        drop(exported);
        parents.sort_by(|a, b| a.name.cmp(&b.name));
        types.sort_by(|a, b| (&a.parent, &a.id).cmp(&(&b.parent, &b.id)));
        instances.sort_by(|a, b| (&a.parent, &a.uuid).cmp(&(&b.parent, &b.uuid)));
        MetricsSnapshot {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            parents,
            types,
            instances,
            stats: self.operation_stats(),
        }
    }
}
