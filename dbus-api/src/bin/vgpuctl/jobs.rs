//! Jobs: waiting for one the service started for us, listing the running ones, cancelling one.

use std::collections::HashMap;

use dbus_api::names::{interface, BUS_NAME};
use dbus_api::proxy::JobProxy;
use dbus_api::{path, ClientError, ErrorKind};
use futures_util::StreamExt;
use zbus::message::Type;
use zbus::{Connection, MatchRule, MessageStream, OwnedObjectPath, OwnedVariant};

use crate::{failure, Failure};

/// Prefix of every job's path.
const JOBS_PATH: &str = "/org/mdevmanager/VGpu1/jobs";

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd {
    /// The job.
    pub job: OwnedObjectPath,
    /// Whether it succeeded.
    pub success: bool,
    /// Its message (`<Kind>: <text>` on failure).
    pub message: String,
    /// The objects it made.
    pub result_objects: Vec<OwnedObjectPath>,
    /// On failure, the D-Bus error name (`Job.ErrorName`; empty from an older service).
    pub error_name: String,
}

impl JobEnd {
    /// The failure for a job that did not succeed (exit status from the error kind).
    pub fn failure(&self) -> Failure {
        match ErrorKind::from_dbus_name(&self.error_name) {
            Some(kind) => failure(kind, self.message.clone()),
            None => job_failure(&self.message),
        }
    }
}

/// A job's failure message is `<Kind>: <message>`; the kind picks the exit status.
pub fn job_failure(message: &str) -> Failure {
    let kind = message
        .split_once(':')
        .and_then(|(kind, _)| ErrorKind::ALL.into_iter().find(|k| k.short_name() == kind))
        .unwrap_or(ErrorKind::Failed);
    failure(kind, message.to_string())
}

/// Job signals subscribed to *before* the call that starts a job, so a job that ends before
/// its path is known is not missed.
pub struct JobWatch {
    stream: MessageStream,
}

impl JobWatch {
    /// Subscribes to the service's `PropertiesChanged` on job objects.
    pub async fn subscribe(connection: &Connection) -> Result<Self, Failure> {
        let rule = MatchRule::builder()
            .msg_type(Type::Signal)
            .sender(BUS_NAME)
            .interface("org.freedesktop.DBus.Properties")
            .member("PropertiesChanged")
            .path_namespace(JOBS_PATH)
            .build()?;
        let stream = MessageStream::for_match_rule(rule, connection, None).await?;
        Ok(Self { stream })
    }

    /// Waits until `job` finishes (its `Finished` turns true, announced with its result in one
    /// `PropertiesChanged`).
    pub async fn wait(mut self, job: &OwnedObjectPath) -> Result<JobEnd, Failure> {
        while let Some(message) = self.stream.next().await {
            let message = message?;
            if message.header().path().map(|p| p.as_str()) != Some(job.as_str()) {
                continue;
            }
            let Ok((iface, changed, _)) =
                message
                    .body()
                    .deserialize::<(String, HashMap<String, OwnedVariant>, Vec<String>)>()
            else {
                continue;
            };
            if iface != interface::JOB {
                continue;
            }
            let get_bool = |name: &str| {
                changed
                    .get(name)
                    .and_then(|v| bool::try_from(v).ok())
                    .unwrap_or(false)
            };
            if !get_bool("Finished") {
                continue;
            }
            let text = |name: &str| {
                changed
                    .get(name)
                    .and_then(|v| v.try_clone().ok())
                    .and_then(|v| String::try_from(v).ok())
                    .unwrap_or_default()
            };
            let message = text("Message");
            let error_name = text("ErrorName");
            let result_objects = changed
                .get("ResultObjects")
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| Vec::<OwnedObjectPath>::try_from(v).ok())
                .unwrap_or_default();
            return Ok(JobEnd {
                job: job.clone(),
                success: get_bool("Success"),
                message,
                result_objects,
                error_name,
            });
        }
        Err(Failure {
            message: format!("the service went away before job {} finished", job.as_str()),
            code: crate::EXIT_UNAVAILABLE,
        })
    }
}

/// A job path from `PATH` or a job number.
pub fn job_path(text: &str) -> Result<OwnedObjectPath, Failure> {
    if let Ok(id) = text.parse::<u64>() {
        return Ok(path::job_path(id));
    }
    let valid = text
        .strip_prefix(JOBS_PATH)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|id| id.parse::<u64>().is_ok());
    if !valid {
        return Err(failure(
            ErrorKind::InvalidArgs,
            format!("{text:?} is not a job: give its number or its path {JOBS_PATH}/<n>"),
        ));
    }
    OwnedObjectPath::try_from(text.to_string())
        .map_err(|e| failure(ErrorKind::InvalidArgs, format!("job path {text:?}: {e}")))
}

/// `vgpuctl job cancel`.
pub async fn cancel(
    connection: &Connection,
    job: &str,
    options: HashMap<&'static str, zbus::Variant<'static>>,
    json: bool,
) -> Result<(), Failure> {
    let job = job_path(job)?;
    let proxy = JobProxy::builder(connection)
        .path(job.clone())
        .build()
        .await?;
    proxy.cancel(options).await.map_err(|error| {
        match ClientError::from(error) {
            // The job has ended (and its object gone) already.
            ClientError::Other { name, .. } if name.ends_with("UnknownObject") => failure(
                ErrorKind::NotFound,
                format!("no job {} (it has finished, or never ran)", job.as_str()),
            ),
            other => Failure::from(other),
        }
    })?;
    if json {
        return crate::print_json(
            &serde_json::json!({ "job": job.as_str(), "cancel": "requested" }),
        );
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
pub async fn list(connection: &Connection, json: bool) -> Result<(), Failure> {
    let objects = crate::managed_objects(connection).await?;
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
    if json {
        return crate::print_json(&rows);
    }
    crate::table::print(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_named_by_number_or_path() {
        assert_eq!(
            job_path("3").unwrap().as_str(),
            "/org/mdevmanager/VGpu1/jobs/3"
        );
        assert_eq!(
            job_path("/org/mdevmanager/VGpu1/jobs/12").unwrap().as_str(),
            "/org/mdevmanager/VGpu1/jobs/12"
        );
        for bad in [
            "",
            "x",
            "/org/mdevmanager/VGpu1/jobs/",
            "/org/elsewhere/1",
            "-1",
        ] {
            let failure = job_path(bad).unwrap_err();
            assert_eq!(failure.code, ErrorKind::InvalidArgs.exit_code(), "{bad}");
        }
    }

    #[test]
    fn a_failed_job_exits_with_its_kind() {
        assert_eq!(
            job_failure("Cancelled: cancelled before binding 0000:41:00.0 to vfio-pci").code,
            ErrorKind::Cancelled.exit_code()
        );
        assert_eq!(
            job_failure("TimedOut: parent mtty did not appear within 5s").code,
            ErrorKind::TimedOut.exit_code()
        );
        assert_eq!(
            job_failure("no kind here").code,
            ErrorKind::Failed.exit_code()
        );
    }
}
