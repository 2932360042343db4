//! `vgpuctl permissions`: what the caller may do, per polkit action.

use std::collections::BTreeMap;

use dbus_api::proxy::ManagerProxy;
use dbus_api::ClientError;

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::Session;
use crate::table;

/// `vgpuctl permissions`.
pub async fn permissions(session: &Session) -> Result<(), Failure> {
    let manager = ManagerProxy::new(&session.connection).await?;
    let permissions: BTreeMap<String, String> = manager
        .get_permissions()
        .await
        .map_err(ClientError::from)?
        .into_iter()
        .collect();
    if session.json {
        return print_json(&permissions);
    }
    table::print(
        &["ACTION", "ALLOWED"],
        permissions.iter().map(|(a, p)| vec![a.clone(), p.clone()]),
    );
    Ok(())
}
