//! `vgpuctl status`: the service's version, features and last reconcile report.

use dbus_api::proxy::ManagerProxy;
use dbus_api::ClientError;

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::Session;

/// `vgpuctl status`.
pub async fn status(session: &Session) -> Result<(), Failure> {
    let manager = ManagerProxy::new(&session.connection).await?;
    let version = manager.version().await.map_err(ClientError::from)?;
    let features = manager.features().await.map_err(ClientError::from)?;
    let report = manager
        .reconcile_report()
        .await
        .map_err(ClientError::from)?;
    if session.json {
        return print_json(&serde_json::json!({
            "version": version,
            "features": features,
            "reconcile_report": report,
        }));
    }
    outln!("version: {version}");
    outln!("features: {}", features.join(", "));
    outln!("last reconcile:");
    for line in report {
        outln!("  {line}");
    }
    Ok(())
}
