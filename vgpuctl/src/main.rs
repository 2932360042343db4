//! `vgpuctl`: command-line client of the mdev-manager service. A pure D-Bus client: it talks to
//! `org.mdevmanager.VGpu1` and never touches the host itself.

// First, so that its macros are in scope in the modules below.
#[macro_use]
mod output;
mod apply;
mod cli;
mod events;
mod import;
mod jobs;
mod schedule;
mod table;
mod virsh;

use std::collections::HashMap;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use dbus_api::names::{option, BUS_NAME, ROOT_PATH};
use dbus_api::proxy::{InstanceProxy, ManagerProxy, SriovProxy};
use dbus_api::wire::{InstanceRecord, MdevTypeRecord, Snapshot};
use dbus_api::{path, BusTarget, ClientError, ErrorKind};
use vgpu_types::error_chain;
use zbus::{Connection, Variant};

use cli::{Cli, Command, GenerateWhat, JobAction, ScheduleAction};

// Start-up (docs/benchmarks.md, item 2): the unwinder linked in from gcc's `libgcc_eh.a` ahead
// of the `-lgcc_s` std asks for, and `pow` (the one `libm` function in the binary, from tokio's
// multi-thread scheduler, which vgpuctl never runs) from the `libm` crate, so every vgpuctl
// run loads `libc.so.6` alone instead of also finding, mapping and relocating `libgcc_s.so.1`
// and `libm.so.6` (~0.2 ms per run on the benchmark machine). The hook does the same.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[link(name = "gcc_eh", kind = "static")]
extern "C" {}

/// `pow` for the code in this binary that calls it; see the comment above.
#[no_mangle]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

/// Exit status when the service (or the bus) cannot be reached (sysexits' EX_UNAVAILABLE).
const EXIT_UNAVAILABLE: u8 = 69;

/// A failure of one command, printed as one line.
#[derive(Debug)]
struct Failure {
    message: String,
    code: u8,
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        let code = match &error {
            ClientError::Service { kind, .. } => kind.exit_code(),
            ClientError::Unavailable { .. } | ClientError::Bus(_) => EXIT_UNAVAILABLE,
            ClientError::Other { .. } => 1,
        };
        Failure {
            message: error_chain(&error),
            code,
        }
    }
}

impl From<zbus::Error> for Failure {
    fn from(error: zbus::Error) -> Self {
        Failure::from(ClientError::from(error))
    }
}

fn failure(kind: ErrorKind, message: String) -> Failure {
    Failure {
        message,
        code: kind.exit_code(),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("vgpuctl: {}", failure.message.replace('\n', " "));
            ExitCode::from(failure.code)
        }
    }
}

fn target(cli: &Cli) -> BusTarget {
    if let Some(address) = &cli.address {
        BusTarget::Address(address.clone())
    } else if cli.session {
        BusTarget::Session
    } else {
        BusTarget::System
    }
}

fn print_json<T: serde::Serialize>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Failure {
        message: format!("cannot encode JSON: {e}"),
        code: 1,
    })?;
    outln!("{text}");
    Ok(())
}

/// Every object the service exports, in one ObjectManager call.
async fn managed_objects(connection: &Connection) -> Result<zbus::fdo::ManagedObjects, Failure> {
    let manager = zbus::fdo::ObjectManagerProxy::builder(connection)
        .destination(BUS_NAME)
        .path(ROOT_PATH)
        .build()
        .await?;
    Ok(manager
        .get_managed_objects()
        .await
        .map_err(ClientError::from)?)
}

async fn snapshot(connection: &Connection) -> Result<Snapshot, Failure> {
    let objects = managed_objects(connection).await?;
    Snapshot::from_managed_objects(objects).map_err(|e| Failure {
        message: e.to_string(),
        code: 1,
    })
}

/// The Manager without property caching: the listings need no properties, and a caching proxy
/// would first subscribe to their changes (a round trip per command).
async fn manager(connection: &Connection) -> Result<ManagerProxy<'static>, Failure> {
    Ok(ManagerProxy::builder(connection)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?)
}

/// Whether the service predates a method (it answered `UnknownMethod`).
fn unknown_method(error: &zbus::Error) -> bool {
    matches!(error, zbus::Error::MethodError(name, _, _)
        if name.as_str() == "org.freedesktop.DBus.Error.UnknownMethod")
}

/// Every instance, from `Manager.ListInstances` (one reply); from the ObjectManager walk when
/// the service is older than that method.
async fn list_instances(connection: &Connection) -> Result<Vec<InstanceRecord>, Failure> {
    match manager(connection)
        .await?
        .list_instances(HashMap::new())
        .await
    {
        Ok(entries) => Ok(dbus_api::wire::instances_from_entries(entries)),
        Err(error) if unknown_method(&error) => Ok(snapshot(connection).await?.instances),
        Err(error) => Err(ClientError::from(error).into()),
    }
}

/// The mdev types (of one parent), from `Manager.ListTypes`; from the ObjectManager walk when
/// the service is older than that method.
async fn list_types(
    connection: &Connection,
    parent: Option<&str>,
) -> Result<Vec<MdevTypeRecord>, Failure> {
    let mut options = HashMap::new();
    if let Some(parent) = parent {
        options.insert(option::PARENT, Variant::from(parent));
    }
    match manager(connection).await?.list_types(options).await {
        Ok(entries) => Ok(dbus_api::wire::types_from_entries(entries)),
        Err(error) if unknown_method(&error) => {
            let snapshot = snapshot(connection).await?;
            if let Some(parent) = parent {
                if snapshot.parent(parent).is_none() {
                    return Err(failure(ErrorKind::NotFound, format!("no parent {parent}")));
                }
            }
            Ok(snapshot
                .types
                .into_iter()
                .filter(|t| parent.is_none_or(|p| t.parent.eq_ignore_ascii_case(p)))
                .collect())
        }
        Err(error) => Err(ClientError::from(error).into()),
    }
}

fn find_instance<'a>(snapshot: &'a Snapshot, key: &str) -> Result<&'a InstanceRecord, Failure> {
    snapshot
        .instance(key)
        .ok_or_else(|| failure(ErrorKind::NotFound, format!("no instance {key}")))
}

fn options(cli: &Cli) -> HashMap<&'static str, Variant<'static>> {
    let mut options = HashMap::new();
    if cli.no_ask {
        options.insert(option::NO_USER_INTERACTION, Variant::from(true));
    }
    options
}

async fn instance_proxy<'a>(
    connection: &Connection,
    record: &InstanceRecord,
) -> Result<InstanceProxy<'a>, Failure> {
    Ok(InstanceProxy::builder(connection)
        .path(record.object.clone())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?)
}

async fn run(cli: Cli) -> Result<(), Failure> {
    if let Command::Generate { what, dir } = &cli.command {
        return generate(what, dir);
    }
    if let Command::InstallHook { root } = &cli.command {
        return install_hook(root.as_deref());
    }
    let connection = dbus_api::connect(&target(&cli)).await?;
    let json = cli.json;
    match &cli.command {
        Command::Generate { .. } | Command::InstallHook { .. } => unreachable!("handled above"),
        Command::Profiles { fit: true } => {
            let fits = manager(&connection)
                .await?
                .fit_profiles(HashMap::new())
                .await
                .map_err(ClientError::from)?;
            if json {
                return print_json(&fits);
            }
            table::print(
                &["PROFILE", "FITS", "WHERE OR WHY NOT"],
                fits.iter().map(|f| {
                    vec![
                        f.name.clone(),
                        if f.fits { "yes" } else { "no" }.to_string(),
                        f.detail.clone(),
                    ]
                }),
            );
        }
        Command::Telemetry => {
            let rows = manager(&connection)
                .await?
                .get_vgpu_telemetry(HashMap::new())
                .await
                .map_err(ClientError::from)?;
            if json {
                return print_json(&rows);
            }
            let text = |value: &str| {
                if value.is_empty() {
                    "-".to_owned()
                } else {
                    value.to_owned()
                }
            };
            let number = |value: i64, unit: &str| {
                if value < 0 {
                    "-".to_owned()
                } else {
                    format!("{value}{unit}")
                }
            };
            table::print(
                &[
                    "GPU", "VGPU", "INSTANCE", "VM UUID", "TYPE", "FB USED", "GPU%", "MEM%",
                    "LICENSE",
                ],
                rows.iter().map(|r| {
                    let fb = match (r.fb_used_mib, r.fb_total_mib) {
                        (used, total) if total >= 0 => {
                            format!("{}/{total} MiB", number(used, ""))
                        }
                        (used, _) => number(used, " MiB"),
                    };
                    vec![
                        r.gpu.clone(),
                        r.vgpu_id.to_string(),
                        text(&r.instance),
                        text(&r.vm_uuid),
                        text(&r.vgpu_name),
                        fb,
                        number(i64::from(r.gpu_utilization_percent), "%"),
                        number(i64::from(r.memory_utilization_percent), "%"),
                        text(&r.license_status),
                    ]
                }),
            );
        }
        Command::Profiles { fit: false } => {
            let snapshot = snapshot(&connection).await?;
            if json {
                return print_json(&snapshot.profiles);
            }
            table::print(
                &["PROFILE", "DESCRIPTION"],
                snapshot
                    .profiles
                    .iter()
                    .map(|p| vec![p.name.clone(), p.description.clone()]),
            );
        }
        Command::Parents => {
            let snapshot = snapshot(&connection).await?;
            if json {
                return print_json(&snapshot.parents);
            }
            table::print(
                &[
                    "PARENT",
                    "VENDOR:DEVICE",
                    "DRIVER",
                    "MODES",
                    "TYPES",
                    "INSTANCES",
                    "VFS",
                    "REASON",
                ],
                snapshot.parents.iter().map(|p| {
                    vec![
                        p.name.clone(),
                        format!("{:04x}:{:04x}", p.vendor_id, p.device_id),
                        p.driver.clone(),
                        if p.modes.is_empty() {
                            "-".to_string()
                        } else {
                            p.modes.join(",")
                        },
                        p.types.len().to_string(),
                        p.instances.len().to_string(),
                        p.sriov
                            .as_ref()
                            .map(|s| format!("{}/{}", s.num_vfs, s.total_vfs))
                            .unwrap_or_else(|| "-".into()),
                        p.reason.clone(),
                    ]
                }),
            );
        }
        Command::Types { parent } => {
            let types = list_types(&connection, parent.as_deref()).await?;
            if json {
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
        }
        Command::List => {
            let instances = list_instances(&connection).await?;
            if json {
                return print_json(&instances);
            }
            print_instances(&instances);
        }
        Command::Show { uuid } => {
            let snapshot = snapshot(&connection).await?;
            let record = find_instance(&snapshot, uuid)?;
            if json {
                return print_json(record);
            }
            let value = serde_json::to_value(record).unwrap_or_default();
            if let serde_json::Value::Object(map) = value {
                for (key, value) in map {
                    let text = match value {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    outln!("{key:>12}: {text}");
                }
            }
        }
        Command::Xml {
            uuid,
            display,
            ramfb,
        } => {
            let snapshot = snapshot(&connection).await?;
            let record = find_instance(&snapshot, uuid)?;
            let options = dbus_api::hostdev::MdevDisplay {
                display: *display,
                ramfb: *ramfb,
            };
            let xml = dbus_api::hostdev::hostdev_xml(record, options)
                .map_err(|e| failure(ErrorKind::NotSupported, error_chain(&e)))?;
            if json {
                return print_json(&serde_json::json!({ "uuid": record.uuid, "xml": xml }));
            }
            out!("{xml}");
        }
        Command::Attach {
            domain,
            profile,
            live,
            config,
        } => {
            let scope = virsh::Scope {
                live: *live,
                config: *config,
            };
            let record = virsh::attach(&connection, domain, profile, scope, options(&cli)).await?;
            if json {
                return print_json(&record);
            }
            outln!("{}", record.uuid);
        }
        Command::Detach {
            domain,
            uuid,
            live,
            config,
        } => {
            let scope = virsh::Scope {
                live: *live,
                config: *config,
            };
            let detached = virsh::detach(&connection, domain, uuid, scope, options(&cli)).await?;
            if json {
                return print_json(&serde_json::json!({
                    "uuid": detached.uuid,
                    "destroyed": detached.still_named_in.is_empty(),
                    "still_named_in": detached.still_named_in,
                }));
            }
            if !detached.still_named_in.is_empty() {
                eprintln!(
                    "instance {} kept: domain {domain} still names it in {}",
                    detached.uuid,
                    detached.still_named_in.join(" and ")
                );
            }
        }
        Command::QemuArgs { target } => {
            let snapshot = snapshot(&connection).await?;
            let record = find_instance(&snapshot, target)?;
            let vendor = snapshot.parent(&record.parent).map(|p| p.vendor_id);
            let qemu = dbus_api::hostdev::qemu_args(record, vendor)
                .map_err(|e| failure(ErrorKind::NotSupported, error_chain(&e)))?;
            if json {
                return print_json(&serde_json::json!({
                    "uuid": record.uuid,
                    "args": qemu.args,
                    "needs_vm_uuid": qemu.needs_vm_uuid,
                }));
            }
            outln!("{}", qemu.args.join(" "));
            if qemu.needs_vm_uuid {
                // On stderr so that stdout stays a pasteable argument list.
                eprintln!(
                    "vgpuctl: NVIDIA vGPU: also pass QEMU `-uuid <vm uuid>`; the vGPU manager reads the VM's UUID (libvirt passes the domain's UUID itself)"
                );
            }
        }
        Command::Create {
            profile,
            parent,
            uuid,
            count,
            autostart,
            weight,
            placement,
            numa_node,
            numa_strict,
            force,
            wait_for_parent,
            no_wait,
        } => {
            let manager = manager(&connection).await?;
            // The service's own option set: a key it does not know cannot be sent.
            let sent = dbus_api::options::to_dict(&dbus_api::options::CreateOptions {
                parent: parent.clone(),
                uuid: uuid.clone(),
                count: *count,
                autostart: autostart.then_some(true),
                weight: *weight,
                placement: placement.as_ref().map(|p| p.as_str().to_owned()),
                numa_node: *numa_node,
                numa_strict: numa_strict.then_some(true),
                force: force.then_some(true),
                wait_for_parent: *wait_for_parent,
                no_user_interaction: cli.no_ask.then_some(true),
                ..Default::default()
            });
            let opts = dbus_api::options::as_proxy_options(&sent);
            let created = if wait_for_parent.is_some() || *no_wait {
                // Subscribed before the call: the job may end before its path comes back.
                let watch = jobs::JobWatch::subscribe(&connection).await?;
                // Caught before the call too: from here on Ctrl-C cancels the job we wait
                // for instead of leaving it to create what the user abandoned.
                let mut interrupts = if *no_wait {
                    None
                } else {
                    Some(jobs::Interrupts::catch()?)
                };
                let job = manager
                    .start_create_instances(profile, opts)
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
                let waited = jobs::wait_or_cancel(
                    &connection,
                    watch,
                    &job,
                    interrupts,
                    "nothing was created",
                )
                .await?;
                let end = waited.end;
                if !end.success {
                    return Err(end.failure());
                }
                if waited.cancel_too_late {
                    finished_before_cancel(&connection, &end).await?;
                }
                end.result_objects
            } else {
                manager
                    .create_instances(profile, opts)
                    .await
                    .map_err(ClientError::from)?
            };
            let instances = list_instances(&connection).await?;
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
        }
        Command::Destroy {
            uuids,
            force,
            no_wait,
        } => {
            let instances = list_instances(&connection).await?;
            // Look every UUID up first, so a typo in the last one destroys nothing.
            let records = uuids
                .iter()
                .map(|u| {
                    dbus_api::wire::find_instance(&instances, u)
                        .ok_or_else(|| failure(ErrorKind::NotFound, format!("no instance {u}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let opts = || {
                let mut opts = options(&cli);
                if *force {
                    opts.insert(option::FORCE, Variant::from(true));
                }
                opts
            };
            if *no_wait {
                return start_destroy_jobs(&connection, &records, opts, json).await;
            }
            let opts = opts();
            let destroyed: Vec<String> = records.iter().map(|r| r.uuid.clone()).collect();
            if let [record] = records.as_slice() {
                instance_proxy(&connection, record)
                    .await?
                    .destroy(opts)
                    .await
                    .map_err(ClientError::from)?;
            } else {
                // Several: one call, one state save, all checked before any is destroyed.
                let uuids: Vec<&str> = destroyed.iter().map(String::as_str).collect();
                manager(&connection)
                    .await?
                    .destroy_instances(&uuids, opts)
                    .await
                    .map_err(ClientError::from)?;
            }
            if json {
                return print_json(&serde_json::json!({ "destroyed": destroyed }));
            }
        }
        Command::Start { uuid } | Command::Stop { uuid } => {
            let snapshot = snapshot(&connection).await?;
            let record = find_instance(&snapshot, uuid)?;
            let proxy = instance_proxy(&connection, record).await?;
            let result = if matches!(cli.command, Command::Start { .. }) {
                proxy.start(options(&cli)).await
            } else {
                proxy.stop(options(&cli)).await
            };
            result.map_err(ClientError::from)?;
            if json {
                return print_json(&serde_json::json!({ "uuid": record.uuid }));
            }
        }
        Command::Autostart { uuid, state } => {
            let snapshot = snapshot(&connection).await?;
            let record = find_instance(&snapshot, uuid)?;
            instance_proxy(&connection, record)
                .await?
                .set_autostart(state.enabled(), options(&cli))
                .await
                .map_err(ClientError::from)?;
            if json {
                return print_json(
                    &serde_json::json!({ "uuid": record.uuid, "autostart": state.enabled() }),
                );
            }
        }
        Command::Sriov {
            parent,
            vfs,
            force,
            no_wait,
        } => {
            // Subscribed before the call: the job may end before its path comes back.
            let watch = jobs::JobWatch::subscribe(&connection).await?;
            let proxy = SriovProxy::builder(&connection)
                .path(path::parent_path(parent))
                .build()
                .await?;
            let mut opts = options(&cli);
            if *force {
                opts.insert(option::FORCE, Variant::from(true));
            }
            let mut interrupts = if *no_wait {
                None
            } else {
                Some(jobs::Interrupts::catch()?)
            };
            let job = proxy
                .set_num_vfs(*vfs, opts)
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
                &connection,
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
            return Err(end.failure());
        }
        Command::Apply {
            file,
            config,
            format,
            dry_run,
            force,
        } => {
            let mode = if *dry_run {
                apply::Mode::DryRun
            } else {
                apply::Mode::Apply
            };
            let document = apply::Document::new(file, config, format);
            return apply::run(&connection, options(&cli), &document, *force, mode).await;
        }
        Command::Assert {
            file,
            config,
            format,
        } => {
            let mode = apply::Mode::Assert;
            let document = apply::Document::new(file, config, format);
            return apply::run(&connection, options(&cli), &document, false, mode).await;
        }
        Command::Jobs => return jobs::list(&connection, json).await,
        Command::ImportMdevctl { dry_run } => {
            return import::import_mdevctl(&connection, *dry_run, options(&cli), json).await
        }
        Command::Job {
            action: JobAction::Cancel { job },
        } => return jobs::cancel(&connection, job, options(&cli), json).await,
        Command::Permissions => {
            let manager = ManagerProxy::new(&connection).await?;
            let permissions: std::collections::BTreeMap<String, String> = manager
                .get_permissions()
                .await
                .map_err(ClientError::from)?
                .into_iter()
                .collect();
            if json {
                return print_json(&permissions);
            }
            table::print(
                &["ACTION", "ALLOWED"],
                permissions.iter().map(|(a, p)| vec![a.clone(), p.clone()]),
            );
        }
        Command::Status => {
            let manager = ManagerProxy::new(&connection).await?;
            let version = manager.version().await.map_err(ClientError::from)?;
            let features = manager.features().await.map_err(ClientError::from)?;
            let report = manager
                .reconcile_report()
                .await
                .map_err(ClientError::from)?;
            if json {
                return print_json(&serde_json::json!({
                    "version": version,
                    "features": features,
                    "reconcile_report": report,
                }));
            }
            outln!("version: {version}");
            outln!("features: {}", features.join(", "));
            outln!("last reconcile:");
            for line in report {
                outln!("  {line}");
            }
        }
        Command::Weight {
            uuid,
            weight,
            min,
            max,
        } => {
            schedule::weight(
                &connection,
                options(&cli),
                uuid,
                *weight,
                min.as_deref(),
                max.as_deref(),
                json,
            )
            .await?;
        }
        Command::Schedule {
            action: Some(ScheduleAction::Show { parent, svg }),
            ..
        } => {
            schedule::show(&connection, parent.as_deref(), svg.as_deref(), json).await?;
        }
        Command::Schedule {
            action: None,
            parent,
            policy,
            period,
            slice,
        } => {
            let Some(parent) = parent else {
                return Err(failure(
                    ErrorKind::InvalidArgs,
                    "name a parent (vgpuctl schedule PARENT --policy ...) or use `schedule show`"
                        .into(),
                ));
            };
            schedule::set_policy(
                &connection,
                options(&cli),
                parent,
                policy.as_deref(),
                period.as_deref(),
                slice.as_deref(),
                json,
            )
            .await?;
        }
        Command::Events { count } => {
            events::follow(&connection, json, *count).await?;
        }
        Command::Probe { target } => {
            let manager = ManagerProxy::new(&connection).await?;
            let report = manager
                .probe(target, options(&cli))
                .await
                .map_err(ClientError::from)?;
            print_probe(target, &report, json)?;
        }
    }
    Ok(())
}

/// Prints the service's probe report (JSON as received, or a table of steps); a failed step
/// makes the command fail with status 1 naming it.
fn print_probe(target: &str, report: &str, json: bool) -> Result<(), Failure> {
    let value: serde_json::Value = serde_json::from_str(report).map_err(|e| Failure {
        message: format!("the service's probe report for {target} is not JSON: {e}"),
        code: 1,
    })?;
    let text = |value: &serde_json::Value| match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    };
    let steps = value["steps"].as_array().cloned().unwrap_or_default();
    if json {
        print_json(&value)?;
    } else {
        table::print(
            &["STEP", "STATUS", "DETAIL"],
            steps.iter().map(|step| {
                vec![
                    text(&step["step"]),
                    text(&step["status"]),
                    text(&step["detail"]),
                ]
            }),
        );
    }
    if value["ok"] == serde_json::Value::Bool(true) {
        return Ok(());
    }
    let failed = steps
        .iter()
        .find(|step| step["status"] == "failed")
        .map(|step| text(&step["step"]))
        .unwrap_or_else(|| "a step".to_string());
    Err(Failure {
        message: format!("probe of {target}: {failed} failed"),
        code: 1,
    })
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

/// `destroy --no-wait`: one `Instance.StartDestroy` job per instance; prints their paths.
/// When one cannot be started, the jobs already started are printed before the failure.
async fn start_destroy_jobs(
    connection: &Connection,
    records: &[&InstanceRecord],
    options: impl Fn() -> HashMap<&'static str, Variant<'static>>,
    json: bool,
) -> Result<(), Failure> {
    let mut started: Vec<(String, zbus::OwnedObjectPath)> = Vec::new();
    let mut failed = None;
    for record in records {
        let result = match instance_proxy(connection, record).await {
            Ok(proxy) => proxy
                .start_destroy(options())
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

/// The hook binary's name, as packaging installs it.
const HOOK_BINARY: &str = "mdev-manager-hook";

/// The installed hook program: next to this program (the package installs both in one
/// directory), else the first on PATH.
fn hook_binary() -> Option<std::path::PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(HOOK_BINARY)))
        .filter(|candidate| candidate.is_file());
    beside.or_else(|| {
        let paths = std::env::var_os("PATH")?;
        std::env::split_paths(&paths)
            .map(|dir| dir.join(HOOK_BINARY))
            .find(|candidate| candidate.is_file())
    })
}

/// Runs `mdev-manager-hook --install [ROOT]`; its output (including the warning that libvirtd
/// must be restarted to see a new hook) goes straight to the user.
fn install_hook(root: Option<&std::path::Path>) -> Result<(), Failure> {
    let binary = hook_binary().ok_or_else(|| {
        failure(
            ErrorKind::NotFound,
            format!("cannot find {HOOK_BINARY} next to vgpuctl or on PATH; is the hook package installed?"),
        )
    })?;
    let mut command = std::process::Command::new(&binary);
    command.arg("--install");
    if let Some(root) = root {
        command.arg(root);
    }
    let status = command.status().map_err(|e| Failure {
        message: format!("cannot run {}: {e}", binary.display()),
        code: 1,
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure {
            message: format!("{} --install failed ({status})", binary.display()),
            code: 1,
        })
    }
}

fn generate(what: &GenerateWhat, dir: &std::path::Path) -> Result<(), Failure> {
    let io = |e: std::io::Error| Failure {
        message: format!("cannot write into {}: {e}", dir.display()),
        code: 1,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut command = Cli::command();
    match what {
        GenerateWhat::Completions => {
            use clap_complete::Shell;
            for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
                clap_complete::generate_to(shell, &mut command, "vgpuctl", dir).map_err(io)?;
            }
        }
        GenerateWhat::Man => {
            command.build();
            write_man(&command, "vgpuctl", dir).map_err(io)?;
            for sub in command
                .get_subcommands()
                .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            {
                let name = format!("vgpuctl-{}", sub.get_name());
                write_man(sub, &name, dir).map_err(io)?;
            }
        }
    }
    Ok(())
}

fn write_man(command: &clap::Command, name: &str, dir: &std::path::Path) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    clap_mangen::Man::new(command.clone())
        .title(name.to_ascii_uppercase())
        .render(&mut buffer)?;
    std::fs::write(dir.join(format!("{name}.1")), buffer)
}

#[cfg(test)]
mod tests {
    use super::print_probe;

    /// A report with a failed step fails the command with status 1 naming the step; a passing
    /// report succeeds; a reply that is not JSON is a failure, not a panic.
    #[test]
    fn probe_status_follows_the_report() {
        let failed = r#"{"ok":false,"steps":[
            {"step":"resolve","status":"ok","detail":"found"},
            {"step":"group","status":"failed","detail":"no group file"},
            {"step":"container","status":"not_run","detail":"earlier step failed"}]}"#;
        let failure = print_probe("0000:3b:00.4", failed, false).unwrap_err();
        assert_eq!(failure.code, 1);
        assert!(
            failure.message.contains("group failed"),
            "{}",
            failure.message
        );
        assert!(
            failure.message.contains("0000:3b:00.4"),
            "{}",
            failure.message
        );

        let passed = r#"{"ok":true,"steps":[{"step":"resolve","status":"ok","detail":""}]}"#;
        assert!(print_probe("0000:3b:00.4", passed, true).is_ok());

        let failure = print_probe("0000:3b:00.4", "not json", false).unwrap_err();
        assert_eq!(failure.code, 1);
    }
}
