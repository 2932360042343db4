//! `vgpuctl destroy UUID... [--force] [--no-wait]`: every UUID is looked up before any is
//! destroyed; one instance is one `Instance.Destroy`, several one `DestroyInstances`.

use dbus_api::options::ForceOptions;
use dbus_api::wire::InstanceRecord;
use dbus_api::{ClientError, ErrorKind};
use zbus::Connection;

use crate::failure::{failure, Failure};
use crate::output::print_json;
use crate::service::{instance_proxy, list_instances, manager, Auth, Sent, Session};

/// The options of `Destroy`, `DestroyInstances` and `StartDestroy`.
pub fn options(auth: Auth, force: bool) -> ForceOptions {
    ForceOptions {
        force: force.then_some(true),
        no_user_interaction: auth.no_user_interaction(),
    }
}

/// `vgpuctl destroy`.
pub async fn destroy(
    session: &Session,
    uuids: &[String],
    force: bool,
    no_wait: bool,
) -> Result<(), Failure> {
    let connection = &session.connection;
    let instances = list_instances(connection).await?;
    // Look every UUID up first, so a typo in the last one destroys nothing.
    let records = uuids
        .iter()
        .map(|u| {
            dbus_api::wire::find_instance(&instances, u)
                .ok_or_else(|| failure(ErrorKind::NotFound, format!("no instance {u}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let sent = Sent::new(&options(session.auth, force));
    if no_wait {
        return start_destroy_jobs(connection, &records, &sent, session.json).await;
    }
    let destroyed: Vec<String> = records.iter().map(|r| r.uuid.clone()).collect();
    if let [record] = records.as_slice() {
        instance_proxy(connection, record)
            .await?
            .destroy(sent.proxy())
            .await
            .map_err(ClientError::from)?;
    } else {
        // Several: one call, one state save, all checked before any is destroyed.
        let uuids: Vec<&str> = destroyed.iter().map(String::as_str).collect();
        manager(connection)
            .await?
            .destroy_instances(&uuids, sent.proxy())
            .await
            .map_err(ClientError::from)?;
    }
    if session.json {
        return print_json(&serde_json::json!({ "destroyed": destroyed }));
    }
    Ok(())
}

/// `destroy --no-wait`: one `Instance.StartDestroy` job per instance; prints their paths.
/// When one cannot be started, the jobs already started are printed before the failure.
async fn start_destroy_jobs(
    connection: &Connection,
    records: &[&InstanceRecord],
    sent: &Sent,
    json: bool,
) -> Result<(), Failure> {
    let mut started: Vec<(String, zbus::OwnedObjectPath)> = Vec::new();
    let mut failed = None;
    for record in records {
        let result = match instance_proxy(connection, record).await {
            Ok(proxy) => proxy
                .start_destroy(sent.proxy())
                .await
                .map_err(|e| Failure::from(ClientError::from(e))),
            Err(failure) => Err(failure),
        };
        match result {
            Ok(job) => started.push((record.uuid.clone(), job)),
            Err(failure) => {
                failed = Some(failure);
                break;
            }
        }
    }
    if json {
        let jobs: Vec<serde_json::Value> = started
            .iter()
            .map(|(uuid, job)| serde_json::json!({ "uuid": uuid, "job": job.as_str() }))
            .collect();
        print_json(&serde_json::json!({ "jobs": jobs }))?;
    } else {
        for (_, job) in &started {
            outln!("{}", job.as_str());
        }
    }
    match failed {
        None => Ok(()),
        Some(mut failure) if !started.is_empty() => {
            failure.message = format!(
                "{} (the destroy jobs printed above were started and run on)",
                failure.message
            );
            Err(failure)
        }
        Some(failure) => Err(failure),
    }
}
