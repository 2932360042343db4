//! `vgpuctl autostart UUID on|off`.

use dbus_api::options::AutostartOptions;
use dbus_api::ClientError;

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::{find_instance, instance_proxy, snapshot, Auth, Sent, Session};

/// The options of `Instance.SetAutostart`: persistence follows autostart (the service's
/// default), so only `auth.no_user_interaction`.
pub fn options(auth: Auth) -> AutostartOptions {
    AutostartOptions {
        persistent: None,
        no_user_interaction: auth.no_user_interaction(),
    }
}

/// `vgpuctl autostart UUID on|off` (`enabled`: `on`).
pub async fn autostart(session: &Session, uuid: &str, enabled: bool) -> Result<(), Failure> {
    let snapshot = snapshot(&session.connection).await?;
    let record = find_instance(&snapshot, uuid)?;
    let sent = Sent::new(&options(session.auth));
    instance_proxy(&session.connection, record)
        .await?
        .set_autostart(enabled, sent.proxy())
        .await
        .map_err(ClientError::from)?;
    if session.json {
        return print_json(&serde_json::json!({ "uuid": record.uuid, "autostart": enabled }));
    }
    Ok(())
}
