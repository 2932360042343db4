//! `vgpuctl import-mdevctl [--dry-run]`: brings mdevctl's definitions (`/etc/mdevctl.d`) under
//! management through `Manager.ImportMdevctl` and reports what was imported, what was skipped
//! (already managed) and which files could not be imported, with why.

use dbus_api::options::ImportOptions;
use dbus_api::proxy::ManagerProxy;
use dbus_api::ClientError;

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::{Auth, Sent, Session};

/// The options of `Manager.ImportMdevctl` (`dry_run`: `--dry-run`).
pub fn options(auth: Auth, dry_run: bool) -> ImportOptions {
    ImportOptions {
        dry_run: dry_run.then_some(true),
        no_user_interaction: auth.no_user_interaction(),
    }
}

/// Runs the import (or its preview) and prints the report.
pub async fn import_mdevctl(session: &Session, dry_run: bool) -> Result<(), Failure> {
    let sent = Sent::new(&options(session.auth, dry_run));
    let manager = ManagerProxy::new(&session.connection).await?;
    let (imported, skipped, problems) = manager
        .import_mdevctl(sent.proxy())
        .await
        .map_err(ClientError::from)?;
    if session.json {
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
