//! `vgpuctl create PROFILE [...]`: instances from a profile, by one call or as a job (waited
//! for, Ctrl-C cancelling it, or `--no-wait`).

use dbus_api::options::CreateOptions;
use dbus_api::wire::InstanceRecord;
use dbus_api::ClientError;
use zbus::Connection;

use crate::cli::Placement;
use crate::failure::Failure;
use crate::jobs;
use crate::output::print_json;
use crate::service::{list_instances, manager, Auth, Sent, Session};

/// The arguments of `vgpuctl create`.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The profile.
    pub profile: &'a str,
    /// `--parent`.
    pub parent: Option<&'a str>,
    /// `--uuid`.
    pub uuid: Option<&'a str>,
    /// `--count`.
    pub count: Option<u32>,
    /// `--autostart`.
    pub autostart: bool,
    /// `--weight`.
    pub weight: Option<u32>,
    /// `--placement`.
    pub placement: Option<Placement>,
    /// `--numa-node`.
    pub numa_node: Option<u32>,
    /// `--numa-strict`.
    pub numa_strict: bool,
    /// `--force`.
    pub force: bool,
    /// `--wait-for-parent`.
    pub wait_for_parent: Option<u32>,
    /// `--no-wait`.
    pub no_wait: bool,
}

/// The options `request` sends with `CreateInstances` / `StartCreateInstances`: the service's
/// own option set, so a key it does not know cannot be sent.
pub fn options(auth: Auth, request: &Request<'_>) -> CreateOptions {
    CreateOptions {
        parent: request.parent.map(str::to_owned),
        uuid: request.uuid.map(str::to_owned),
        count: request.count,
        autostart: request.autostart.then_some(true),
        weight: request.weight,
        placement: request.placement.map(|p| p.as_str().to_owned()),
        numa_node: request.numa_node,
        numa_strict: request.numa_strict.then_some(true),
        force: request.force.then_some(true),
        wait_for_parent: request.wait_for_parent,
        no_user_interaction: auth.no_user_interaction(),
        ..CreateOptions::default()
    }
}

/// `vgpuctl create`.
pub async fn create(session: &Session, request: &Request<'_>) -> Result<(), Failure> {
    let connection = &session.connection;
    let json = session.json;
    let manager = manager(connection).await?;
    let sent = Sent::new(&options(session.auth, request));
    let created = if request.wait_for_parent.is_some() || request.no_wait {
        // Subscribed before the call: the job may end before its path comes back.
        let watch = jobs::JobWatch::subscribe(connection).await?;
        // Caught before the call too: from here on Ctrl-C cancels the job we wait
        // for instead of leaving it to create what the user abandoned.
        let mut interrupts = if request.no_wait {
            None
        } else {
            Some(jobs::Interrupts::catch()?)
        };
        let job = manager
            .start_create_instances(request.profile, sent.proxy())
            .await
            .map_err(ClientError::from)?;
        let Some(interrupts) = interrupts.as_mut() else {
            if json {
                return print_json(&serde_json::json!({ "job": job.as_str() }));
            }
            outln!("{}", job.as_str());
            return Ok(());
        };
        if !json {
            eprintln!(
                "vgpuctl: job {} started (Ctrl-C or `vgpuctl job cancel {}` stops it)",
                job.as_str(),
                job.as_str().rsplit('/').next().unwrap_or_default()
            );
        }
        let waited =
            jobs::wait_or_cancel(connection, watch, &job, interrupts, "nothing was created")
                .await?;
        let end = waited.end;
        if !end.success {
            return Err(end.failure());
        }
        if waited.cancel_too_late {
            finished_before_cancel(connection, &end).await?;
        }
        end.result_objects
    } else {
        manager
            .create_instances(request.profile, sent.proxy())
            .await
            .map_err(ClientError::from)?
    };
    let instances = list_instances(connection).await?;
    let records: Vec<&InstanceRecord> = created
        .iter()
        .filter_map(|p| instances.iter().find(|i| i.object == p.as_str()))
        .collect();
    if json {
        return print_json(&records);
    }
    for record in records {
        outln!("{}", record.uuid);
    }
    Ok(())
}

/// Says on stderr what a job that completed before an interrupt's cancel took effect created.
async fn finished_before_cancel(
    connection: &Connection,
    end: &jobs::JobEnd,
) -> Result<(), Failure> {
    let instances = list_instances(connection).await?;
    let created: Vec<&str> = end
        .result_objects
        .iter()
        .map(|object| {
            instances
                .iter()
                .find(|i| i.object == object.as_str())
                .map_or(object.as_str(), |i| i.uuid.as_str())
        })
        .collect();
    eprintln!(
        "vgpuctl: job {} completed before the cancel took effect: it created {}",
        end.job.as_str(),
        if created.is_empty() {
            "nothing".to_string()
        } else {
            created.join(", ")
        }
    );
    Ok(())
}
