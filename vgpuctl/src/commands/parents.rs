//! `vgpuctl parents`: the parent devices (GPUs) and how they can be split.

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::{snapshot, Session};
use crate::table;

/// `vgpuctl parents`.
pub async fn parents(session: &Session) -> Result<(), Failure> {
    let snapshot = snapshot(&session.connection).await?;
    if session.json {
        return print_json(&snapshot.parents);
    }
    table::print(
        &[
            "PARENT",
            "VENDOR:DEVICE",
            "DRIVER",
            "MODES",
            "TYPES",
            "INSTANCES",
            "VFS",
            "REASON",
        ],
        snapshot.parents.iter().map(|p| {
            vec![
                p.name.clone(),
                format!("{:04x}:{:04x}", p.vendor_id, p.device_id),
                p.driver.clone(),
                if p.modes.is_empty() {
                    "-".to_string()
                } else {
                    p.modes.join(",")
                },
                p.types.len().to_string(),
                p.instances.len().to_string(),
                p.sriov
                    .as_ref()
                    .map(|s| format!("{}/{}", s.num_vfs, s.total_vfs))
                    .unwrap_or_else(|| "-".into()),
                p.reason.clone(),
            ]
        }),
    );
    Ok(())
}
