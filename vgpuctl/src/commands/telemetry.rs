//! `vgpuctl telemetry`: what NVIDIA's `nvidia-smi vgpu -q` reports per running vGPU.

use dbus_api::options::NoOptions;
use dbus_api::ClientError;

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::{manager, Sent, Session};
use crate::table;

/// `vgpuctl telemetry`.
pub async fn telemetry(session: &Session) -> Result<(), Failure> {
    let sent = Sent::new(&NoOptions::default());
    let rows = manager(&session.connection)
        .await?
        .get_vgpu_telemetry(sent.proxy())
        .await
        .map_err(ClientError::from)?;
    if session.json {
        return print_json(&rows);
    }
    let text = |value: &str| {
        if value.is_empty() {
            "-".to_owned()
        } else {
            value.to_owned()
        }
    };
    let number = |value: i64, unit: &str| {
        if value < 0 {
            "-".to_owned()
        } else {
            format!("{value}{unit}")
        }
    };
    table::print(
        &[
            "GPU", "VGPU", "INSTANCE", "VM UUID", "TYPE", "FB USED", "GPU%", "MEM%", "LICENSE",
        ],
        rows.iter().map(|r| {
            let fb = match (r.fb_used_mib, r.fb_total_mib) {
                (used, total) if total >= 0 => {
                    format!("{}/{total} MiB", number(used, ""))
                }
                (used, _) => number(used, " MiB"),
            };
            vec![
                r.gpu.clone(),
                r.vgpu_id.to_string(),
                text(&r.instance),
                text(&r.vm_uuid),
                text(&r.vgpu_name),
                fb,
                number(i64::from(r.gpu_utilization_percent), "%"),
                number(i64::from(r.memory_utilization_percent), "%"),
                text(&r.license_status),
            ]
        }),
    );
    Ok(())
}
