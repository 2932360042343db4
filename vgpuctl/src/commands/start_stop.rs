//! `vgpuctl start UUID` and `vgpuctl stop UUID`: a persistent instance's device created again
//! or removed, its definition kept.

use dbus_api::options::ForceOptions;
use dbus_api::ClientError;

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::{find_instance, instance_proxy, snapshot, Auth, Sent, Session};

/// `vgpuctl start UUID` (`Instance.Start`).
pub async fn start(session: &Session, uuid: &str) -> Result<(), Failure> {
    let sent = Sent::new(&session.auth.no_options());
    let snapshot = snapshot(&session.connection).await?;
    let record = find_instance(&snapshot, uuid)?;
    instance_proxy(&session.connection, record)
        .await?
        .start(sent.proxy())
        .await
        .map_err(ClientError::from)?;
    if session.json {
        return print_json(&serde_json::json!({ "uuid": record.uuid }));
    }
    Ok(())
}

/// The options of `Instance.Stop`: the removals' set; vgpuctl never forces a stop.
pub fn stop_options(auth: Auth) -> ForceOptions {
    ForceOptions {
        force: None,
        no_user_interaction: auth.no_user_interaction(),
    }
}

/// `vgpuctl stop UUID` (`Instance.Stop`).
pub async fn stop(session: &Session, uuid: &str) -> Result<(), Failure> {
    let sent = Sent::new(&stop_options(session.auth));
    let snapshot = snapshot(&session.connection).await?;
    let record = find_instance(&snapshot, uuid)?;
    instance_proxy(&session.connection, record)
        .await?
        .stop(sent.proxy())
        .await
        .map_err(ClientError::from)?;
    if session.json {
        return print_json(&serde_json::json!({ "uuid": record.uuid }));
    }
    Ok(())
}
