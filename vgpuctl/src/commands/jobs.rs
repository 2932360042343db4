//! `vgpuctl jobs` (the running jobs) and `vgpuctl job cancel JOB`.

use dbus_api::names::interface;
use dbus_api::proxy::JobProxy;
use dbus_api::{ClientError, ErrorKind};
use zbus::OwnedObjectPath;

use crate::failure::{failure, Failure};
use crate::jobs::job_path;
use crate::output::print_json;
use crate::service::{managed_objects, Sent, Session};
use crate::table;

/// `vgpuctl job cancel`.
pub async fn cancel(session: &Session, job: &str) -> Result<(), Failure> {
    let job = job_path(job)?;
    let sent = Sent::new(&session.auth.no_options());
    let proxy = JobProxy::builder(&session.connection)
        .path(job.clone())
        .build()
        .await?;
    proxy.cancel(sent.proxy()).await.map_err(|error| {
        match ClientError::from(error) {
            // The job has ended (and its object gone) already.
            ClientError::Other { name, .. } if name.ends_with("UnknownObject") => failure(
                ErrorKind::NotFound,
                format!("no job {} (it has finished, or never ran)", job.as_str()),
            ),
            other => Failure::from(other),
        }
    })?;
    if session.json {
        return print_json(&serde_json::json!({ "job": job.as_str(), "cancel": "requested" }));
    }
    outln!("cancel of {} requested", job.as_str());
    Ok(())
}

/// One running job, as `vgpuctl jobs` shows it.
#[derive(Debug, serde::Serialize)]
struct JobRow {
    job: String,
    operation: String,
    objects: Vec<String>,
    started_by_uid: u32,
    cancelable: bool,
}

/// `vgpuctl jobs`.
pub async fn list(session: &Session) -> Result<(), Failure> {
    let objects = managed_objects(&session.connection).await?;
    let mut rows: Vec<JobRow> = objects
        .iter()
        .filter_map(|(object, interfaces)| {
            let props = interfaces
                .iter()
                .find(|(name, _)| name.as_str() == interface::JOB)?
                .1;
            let string = |name: &str| {
                props
                    .get(name)
                    .and_then(|v| v.try_clone().ok())
                    .and_then(|v| String::try_from(v).ok())
                    .unwrap_or_default()
            };
            Some(JobRow {
                job: object.to_string(),
                operation: string("Operation"),
                objects: props
                    .get("Objects")
                    .and_then(|v| v.try_clone().ok())
                    .and_then(|v| Vec::<OwnedObjectPath>::try_from(v).ok())
                    .unwrap_or_default()
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                started_by_uid: props
                    .get("StartedByUid")
                    .and_then(|v| u32::try_from(v).ok())
                    .unwrap_or(u32::MAX),
                cancelable: props
                    .get("Cancelable")
                    .and_then(|v| bool::try_from(v).ok())
                    .unwrap_or(false),
            })
        })
        .collect();
    rows.sort_by_key(|row| {
        row.job
            .rsplit('/')
            .next()
            .and_then(|id| id.parse::<u64>().ok())
            .unwrap_or(u64::MAX)
    });
    if session.json {
        return print_json(&rows);
    }
    table::print(
        &["JOB", "OPERATION", "UID", "CANCELABLE", "OBJECTS"],
        rows.iter().map(|row| {
            vec![
                row.job.rsplit('/').next().unwrap_or_default().to_string(),
                row.operation.clone(),
                row.started_by_uid.to_string(),
                if row.cancelable { "yes" } else { "no" }.to_string(),
                row.objects.join(","),
            ]
        }),
    );
    Ok(())
}
