//! `vgpuctl list`: every instance.

use dbus_api::wire::InstanceRecord;

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::{list_instances, Session};
use crate::table;

/// `vgpuctl list`.
pub async fn list(session: &Session) -> Result<(), Failure> {
    let instances = list_instances(&session.connection).await?;
    if session.json {
        return print_json(&instances);
    }
    print_instances(&instances);
    Ok(())
}

/// The instances as a table, one row each.
fn print_instances(instances: &[InstanceRecord]) {
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    table::print(
        &[
            "UUID",
            "KIND",
            "PARENT",
            "TYPE",
            "PROFILE",
            "ACTIVE",
            "PERSISTENT",
            "AUTOSTART",
            "HOLDER",
        ],
        instances.iter().map(|i| {
            vec![
                i.uuid.clone(),
                i.kind.clone(),
                i.parent.clone(),
                i.mdev_type.clone(),
                if i.profile.is_empty() {
                    "-".into()
                } else {
                    i.profile.clone()
                },
                yes(i.active),
                yes(i.persistent),
                yes(i.autostart),
                if i.holder.is_empty() {
                    "-".into()
                } else {
                    i.holder.clone()
                },
            ]
        }),
    );
}
