//! `vgpuctl sriov PARENT --vfs N [--force] [--no-wait]`: a PF's VF count, as a job that cannot
//! be cancelled (Ctrl-C says so and keeps waiting; a second one stops the waiting).

use dbus_api::options::ForceOptions;
use dbus_api::proxy::SriovProxy;
use dbus_api::{path, ClientError, ErrorKind};

use crate::failure::{failure, Failure};
use crate::jobs;
use crate::output::print_json;
use crate::service::{Auth, Sent, Session};

/// The options of `Sriov.SetNumVfs`.
pub fn options(auth: Auth, force: bool) -> ForceOptions {
    ForceOptions {
        force: force.then_some(true),
        no_user_interaction: auth.no_user_interaction(),
    }
}

/// `vgpuctl sriov`.
pub async fn sriov(
    session: &Session,
    parent: &str,
    vfs: u32,
    force: bool,
    no_wait: bool,
) -> Result<(), Failure> {
    let connection = &session.connection;
    let json = session.json;
    // Subscribed before the call: the job may end before its path comes back.
    let watch = jobs::JobWatch::subscribe(connection).await?;
    let proxy = SriovProxy::builder(connection)
        .path(path::parent_path(parent))
        .build()
        .await?;
    let sent = Sent::new(&options(session.auth, force));
    let mut interrupts = if no_wait {
        None
    } else {
        Some(jobs::Interrupts::catch()?)
    };
    let job = proxy
        .set_num_vfs(vfs, sent.proxy())
        .await
        .map_err(|e| sriov_error(e, parent))?;
    let Some(interrupts) = interrupts.as_mut() else {
        if json {
            return print_json(&serde_json::json!({ "job": job.as_str() }));
        }
        outln!("{}", job.as_str());
        return Ok(());
    };
    // A VF change is one kernel write and cannot be cancelled: Ctrl-C says so and
    // keeps waiting (a second one stops the waiting).
    let end = jobs::wait_or_cancel(
        connection,
        watch,
        &job,
        interrupts,
        &format!("the VFs of {parent} were not changed"),
    )
    .await?
    .end;
    if json {
        print_json(&serde_json::json!({
            "job": job.as_str(),
            "result": end.result(),
            "message": end.message,
        }))?;
    } else if end.success {
        outln!("{}", end.message);
    }
    if end.success {
        return Ok(());
    }
    Err(end.failure())
}

/// `SetNumVfs` on a path with no Sriov interface is the bus's UnknownObject/UnknownInterface:
/// say which parent instead.
fn sriov_error(error: zbus::Error, parent: &str) -> Failure {
    match ClientError::from(error) {
        ClientError::Other { name, .. }
            if name.ends_with("UnknownObject")
                || name.ends_with("UnknownInterface")
                || name.ends_with("UnknownMethod") =>
        {
            failure(
                ErrorKind::NotFound,
                format!("no SR-IOV parent {parent} (see `vgpuctl parents`)"),
            )
        }
        other => Failure::from(other),
    }
}
