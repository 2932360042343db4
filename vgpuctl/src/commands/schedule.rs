//! `vgpuctl weight`, `vgpuctl schedule PARENT`, `vgpuctl schedule show [PARENT] [--svg FILE]`.
//!
//! Reads the scheduling properties from the ObjectManager, calls `Instance.SetSchedule` and
//! `Parent.SetSchedulerPolicy`, and draws one period of a parent's plan with `vgpu-sched` (pure
//! code: the plan is computed here from the same properties the service publishes).

use std::path::Path;

use dbus_api::names::{interface, BUS_NAME};
use dbus_api::options::{NoOptions, SchedulerPolicyOptions};
use dbus_api::schedule::{InstanceScheduleRecord, ParentScheduleRecord};
use dbus_api::{path, ClientError, ErrorKind};
use serde::Serialize;
use vgpu_sched::{parse_duration_us, Share};
use zbus::Connection;

use crate::failure::{failure, Failure};
use crate::output::print_json;
use crate::service::{managed_objects, Auth, Session};
use crate::table;

/// Every parent's and instance's scheduling properties.
struct Schedules {
    parents: Vec<ParentScheduleRecord>,
    instances: Vec<InstanceScheduleRecord>,
}

async fn read(connection: &Connection) -> Result<Schedules, Failure> {
    let objects = managed_objects(connection).await?;
    let mut parents = Vec::new();
    let mut instances = Vec::new();
    let bad = |e: dbus_api::wire::PropertyError| Failure::new(e.to_string(), 1);
    for (object, interfaces) in &objects {
        for (name, properties) in interfaces {
            if name.as_str() == interface::PARENT {
                parents.push(
                    ParentScheduleRecord::from_properties(object.as_str(), properties)
                        .map_err(bad)?,
                );
            } else if name.as_str() == interface::INSTANCE {
                instances.push(
                    InstanceScheduleRecord::from_properties(object.as_str(), properties)
                        .map_err(bad)?,
                );
            }
        }
    }
    parents.sort_by(|a, b| a.parent.cmp(&b.parent));
    instances.sort_by(|a, b| (&a.parent, &a.uuid).cmp(&(&b.parent, &b.uuid)));
    Ok(Schedules { parents, instances })
}

fn percent(ppm: u32) -> String {
    if ppm == 0 {
        return "-".into();
    }
    Share::from_ppm(ppm).map_or_else(|_| format!("{ppm} ppm"), |s| s.to_string())
}

/// A share from the command line: `25`, `12.5%`; `none` or `0` clears it. Returns ppm.
fn parse_share(what: &str, text: &str) -> Result<u32, Failure> {
    if text == "none" {
        return Ok(0);
    }
    text.parse::<Share>().map(Share::ppm).map_err(|e| {
        failure(
            ErrorKind::InvalidArgs,
            format!("--{what} {text:?} is not a share in percent: {e}"),
        )
    })
}

fn parse_duration(what: &str, text: &str) -> Result<u32, Failure> {
    if text == "default" {
        return Ok(0);
    }
    parse_duration_us(text).map_err(|e| {
        failure(
            ErrorKind::InvalidArgs,
            format!("--{what} {text:?}: {e} (e.g. 2ms, 500us, 1s)"),
        )
    })
}

/// `vgpuctl weight UUID N [--min P] [--max P]`: unspecified bounds keep their current value.
pub async fn weight(
    session: &Session,
    uuid: &str,
    weight: u32,
    min: Option<&str>,
    max: Option<&str>,
) -> Result<(), Failure> {
    let connection = &session.connection;
    let json = session.json;
    let schedules = read(connection).await?;
    let wanted = uuid.to_ascii_lowercase();
    let current = schedules
        .instances
        .iter()
        .find(|i| i.uuid == wanted)
        .ok_or_else(|| failure(ErrorKind::NotFound, format!("no instance {uuid}")))?;
    let min = match min {
        Some(text) => parse_share("min", text)?,
        None => current.min_share_ppm,
    };
    let max = match max {
        Some(text) => parse_share("max", text)?,
        None => current.max_share_ppm,
    };
    let proxy = zbus::Proxy::new(
        connection,
        BUS_NAME,
        path::mdev_instance_path(&current.uuid),
        interface::INSTANCE,
    )
    .await?;
    // The typed set goes on the wire as the `a{sv}` the service reads it from.
    let options: NoOptions = session.auth.no_options();
    proxy
        .call_method("SetSchedule", &(weight, min, max, options))
        .await
        .map_err(ClientError::from)?;
    let after = read(connection).await?;
    let record = after.instances.into_iter().find(|i| i.uuid == wanted);
    match (json, record) {
        (true, Some(record)) => print_json(&record),
        (false, Some(record)) => {
            outln!(
                "{}: weight {}, min {}, max {}: requested {}, effective {}{}",
                record.uuid,
                record.weight,
                percent(record.min_share_ppm),
                percent(record.max_share_ppm),
                percent(record.requested_share_ppm),
                percent(record.effective_share_ppm),
                if record.enforced {
                    String::new()
                } else {
                    format!(" (not enforced: {})", record.note)
                }
            );
            Ok(())
        }
        (_, None) => Err(failure(
            ErrorKind::NotFound,
            format!("instance {uuid} went away"),
        )),
    }
}

/// The arguments of `vgpuctl schedule PARENT`.
#[derive(Debug, Clone, Copy)]
pub struct PolicyRequest<'a> {
    /// `--policy`.
    pub policy: Option<&'a str>,
    /// `--period`.
    pub period: Option<&'a str>,
    /// `--slice`.
    pub slice: Option<&'a str>,
}

/// The options of `Parent.SetSchedulerPolicy` for `request`; a period or slice that is not a
/// duration is `InvalidArgs` naming it.
pub fn policy_options(
    auth: Auth,
    request: &PolicyRequest<'_>,
) -> Result<SchedulerPolicyOptions, Failure> {
    Ok(SchedulerPolicyOptions {
        period: request
            .period
            .map(|period| parse_duration("period", period))
            .transpose()?,
        slice: request
            .slice
            .map(|slice| parse_duration("slice", slice))
            .transpose()?,
        no_user_interaction: auth.no_user_interaction(),
    })
}

/// `vgpuctl schedule PARENT [--policy P] [--period D] [--slice D]`.
pub async fn set_policy(
    session: &Session,
    parent: Option<&str>,
    request: &PolicyRequest<'_>,
) -> Result<(), Failure> {
    let Some(parent) = parent else {
        return Err(failure(
            ErrorKind::InvalidArgs,
            "name a parent (vgpuctl schedule PARENT --policy ...) or use `schedule show`".into(),
        ));
    };
    let connection = &session.connection;
    let options = policy_options(session.auth, request)?;
    let schedules = read(connection).await?;
    let record = schedules
        .parents
        .iter()
        .find(|p| p.parent.eq_ignore_ascii_case(parent))
        .ok_or_else(|| failure(ErrorKind::NotFound, format!("no parent {parent}")))?;
    let proxy = zbus::Proxy::new(
        connection,
        BUS_NAME,
        path::parent_path(&record.parent),
        interface::PARENT,
    )
    .await?;
    proxy
        .call_method(
            "SetSchedulerPolicy",
            &(request.policy.unwrap_or(""), options),
        )
        .await
        .map_err(ClientError::from)?;
    show(session, Some(&record.parent), None).await
}

/// One parent with its instances and plan, for `--json`.
#[derive(Debug, Serialize)]
struct ParentJson<'a> {
    #[serde(flatten)]
    parent: &'a ParentScheduleRecord,
    instances: Vec<&'a InstanceScheduleRecord>,
}

/// `vgpuctl schedule show [PARENT] [--svg FILE]`.
pub async fn show(
    session: &Session,
    parent: Option<&str>,
    svg: Option<&Path>,
) -> Result<(), Failure> {
    let json = session.json;
    let schedules = read(&session.connection).await?;
    let parents: Vec<&ParentScheduleRecord> = schedules
        .parents
        .iter()
        .filter(|p| parent.is_none_or(|name| p.parent.eq_ignore_ascii_case(name)))
        .collect();
    if let Some(name) = parent {
        if parents.is_empty() {
            return Err(failure(ErrorKind::NotFound, format!("no parent {name}")));
        }
    }
    if let Some(file) = svg {
        let Some(name) = parent else {
            return Err(failure(
                ErrorKind::InvalidArgs,
                "--svg draws one parent: name it (vgpuctl schedule show PARENT --svg FILE)".into(),
            ));
        };
        let plan = parents[0].plan(&schedules.instances).map_err(|e| {
            failure(
                ErrorKind::InvalidArgs,
                format!("cannot plan parent {name}: {e}"),
            )
        })?;
        std::fs::write(file, vgpu_sched::svg::timeline(&plan))
            .map_err(|e| Failure::new(format!("cannot write {}: {e}", file.display()), 1))?;
    }
    let on = |p: &ParentScheduleRecord| -> Vec<&InstanceScheduleRecord> {
        schedules
            .instances
            .iter()
            .filter(|i| i.parent == p.parent)
            .collect()
    };
    if json {
        let out: Vec<ParentJson<'_>> = parents
            .iter()
            .map(|p| ParentJson {
                parent: p,
                instances: on(p),
            })
            .collect();
        return print_json(&out);
    }
    let us = |v: u32| {
        if v == 0 {
            "default".to_string()
        } else if v % 1000 == 0 {
            format!("{}ms", v / 1000)
        } else {
            format!("{v}us")
        }
    };
    table::print(
        &[
            "PARENT", "BACKEND", "POLICY", "PERIOD", "SLICE", "ENFORCES", "NOTE",
        ],
        parents.iter().map(|p| {
            vec![
                p.parent.clone(),
                p.backend.clone(),
                p.policy.clone(),
                us(p.period_us),
                us(p.time_slice_us),
                if p.capabilities.is_empty() {
                    "-".into()
                } else {
                    p.capabilities.join(",")
                },
                if p.note.is_empty() {
                    "-".into()
                } else {
                    p.note.clone()
                },
            ]
        }),
    );
    let instances: Vec<&InstanceScheduleRecord> = parents.iter().flat_map(|p| on(p)).collect();
    if instances.is_empty() {
        return Ok(());
    }
    outln!();
    table::print(
        &[
            "INSTANCE",
            "PARENT",
            "WEIGHT",
            "MIN",
            "MAX",
            "REQUESTED",
            "EFFECTIVE",
            "US/PERIOD",
            "ENFORCED",
            "NOTE",
        ],
        instances.iter().map(|i| {
            vec![
                i.uuid.clone(),
                i.parent.clone(),
                if i.weight == 0 {
                    "100".into()
                } else {
                    i.weight.to_string()
                },
                percent(i.min_share_ppm),
                percent(i.max_share_ppm),
                percent(i.requested_share_ppm),
                percent(i.effective_share_ppm),
                i.time_slice_us.to_string(),
                if i.enforced { "yes" } else { "no" }.to_string(),
                if i.note.is_empty() {
                    "-".into()
                } else {
                    i.note.clone()
                },
            ]
        }),
    );
    Ok(())
}
