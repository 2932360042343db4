//! `vgpuctl import-mdevctl [--dry-run]`: brings mdevctl's definitions (`/etc/mdevctl.d`) under
//! management through `Manager.ImportMdevctl` and reports what was imported, what was skipped
//! (already managed) and which files could not be imported, with why.

use std::collections::HashMap;

use dbus_api::names::option;
use dbus_api::proxy::ManagerProxy;
use dbus_api::ClientError;
use zbus::{Connection, Variant};

use crate::{print_json, Failure};

/// Runs the import (or its preview) and prints the report.
pub async fn import_mdevctl(
    connection: &Connection,
    dry_run: bool,
    mut options: HashMap<&'static str, Variant<'static>>,
    json: bool,
) -> Result<(), Failure> {
    if dry_run {
        options.insert(option::DRY_RUN, Variant::from(true));
    }
    let manager = ManagerProxy::new(connection).await?;
    let (imported, skipped, problems) = manager
        .import_mdevctl(options)
        .await
        .map_err(ClientError::from)?;
    if json {
        return print_json(&serde_json::json!({
            "dry_run": dry_run,
            "imported": imported,
            "skipped": skipped,
            "problems": problems,
        }));
    }
    let verb = if dry_run { "would import" } else { "imported" };
    for uuid in &imported {
        outln!("{verb} {uuid}");
    }
    for uuid in &skipped {
        outln!("skipped {uuid}: already managed by mdev-manager");
    }
    for problem in &problems {
        outln!("not imported: {problem}");
    }
    outln!(
        "{} {verb}, {} skipped, {} not imported",
        imported.len(),
        skipped.len(),
        problems.len()
    );
    Ok(())
}
