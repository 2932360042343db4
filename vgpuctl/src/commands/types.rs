//! `vgpuctl types [PARENT]`: the mdev types, of every parent or of one.

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::{list_types, Session};
use crate::table;

/// `vgpuctl types [PARENT]`.
pub async fn types(session: &Session, parent: Option<&str>) -> Result<(), Failure> {
    let types = list_types(&session.connection, parent).await?;
    if session.json {
        return print_json(&types);
    }
    table::print(
        &["PARENT", "TYPE", "NAME", "AVAILABLE", "INSTANCES"],
        types.iter().map(|t| {
            vec![
                t.parent.clone(),
                t.id.clone(),
                t.name.clone(),
                t.available_instances.to_string(),
                t.instances.len().to_string(),
            ]
        }),
    );
    Ok(())
}
