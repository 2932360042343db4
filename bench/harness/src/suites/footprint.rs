//! Item 4: the service's footprint. Cold start (spawn until it owns the bus name, start-up
//! reconcile included) empty and with 384 autostart instances to restore, resident memory,
//! and D-Bus round trips under 16 concurrent clients.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use dbus_api::names::{interface, option};
use dbus_api::proxy::ManagerProxy;
use zbus::zvariant::Variant;
use zbus::OwnedObjectPath;

use crate::error::{BenchError, Result};
use crate::hosttree::{BENCH_PROFILE, SCALE_TOPOLOGY};
use crate::procs::{Cmd, PrivateBus};
use crate::report::{Figure, Row, Section, Target};
use crate::stats::Samples;

use super::{connect, daemon_root, runtime, simulated_daemon, Env};

/// Instances restored at start.
pub const INSTANCES: u32 = 384;
/// Concurrent clients for the round-trip figures.
pub const CLIENTS: usize = 16;

/// Runs the footprint measurements.
pub fn run(env: &Env) -> Result<Section> {
    let mut section = Section::new("4. Service footprint (simulated scale host)");
    let rt = runtime()?;
    let bus = PrivateBus::start()?;
    let state = autostart_state(env, &bus)?;

    let mut start_empty = Samples::new();
    let mut start_full = Samples::new();
    let mut rss_idle = Samples::new();
    let mut rss_full = Samples::new();
    for round in 0..env.rounds.starts {
        for full in if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        } {
            let root = daemon_root()?;
            if full {
                let path = super::state_file(root.path());
                std::fs::write(&path, &state).map_err(BenchError::io("cannot write", &path))?;
            }
            let daemon = simulated_daemon(env, &bus, root.path(), SCALE_TOPOLOGY)?;
            if full {
                start_full.push(daemon.ready_after);
                // A listing, as a client makes: the service then also holds its prepared answer.
                Cmd::new(
                    "vgpuctl list",
                    &env.vgpuctl,
                    &["--address", bus.address(), "--json", "list"],
                )
                .output()?;
                rss_full.push_value(daemon.memory_mib()?.0);
                daemon.stop()?;
            } else {
                start_empty.push(daemon.ready_after);
                rss_idle.push_value(daemon.memory_mib()?.0);
                daemon.stop()?;
            }
        }
    }
    // The round trips run against a daemon holding the 384 instances.
    let root = daemon_root()?;
    let path = super::state_file(root.path());
    std::fs::write(&path, &state).map_err(BenchError::io("cannot write", &path))?;
    let daemon = simulated_daemon(env, &bus, root.path(), SCALE_TOPOLOGY)?;
    let instances = rt.block_on(instance_paths(&bus))?;
    if instances.len() != INSTANCES as usize {
        return Err(BenchError::Check(format!(
            "the daemon restored {} of {INSTANCES} autostart instances",
            instances.len()
        )));
    }
    let reads = |clients| {
        rt.block_on(round_trips(
            &bus,
            &instances,
            clients,
            env.rounds.reads_per_client,
            false,
        ))
    };
    let writes = |clients| {
        rt.block_on(round_trips(
            &bus,
            &instances,
            clients,
            env.rounds.writes_per_client,
            true,
        ))
    };
    let read_one = Figure::time(reads(1)?);
    let read_many = Figure::time(reads(CLIENTS)?);
    let write_one = Figure::time(writes(1)?);
    let write_many = Figure::time(writes(CLIENTS)?);
    let (_, peak) = daemon.memory_mib()?;
    daemon.stop()?;

    let start_empty = Figure::time(start_empty);
    section.row(Row::new(
        "4",
        "cold start, empty state (spawn → bus name owned)",
        start_empty.clone(),
    ));
    section.row(
        Row::new(
            "4",
            "cold start + reconcile restoring 384 autostart instances",
            Figure::time(start_full),
        )
        .against("cold start, empty", &start_empty)
        .target(Target::AtMost(0.1)),
    );
    section.row(
        Row::new(
            "4",
            "resident memory (VmRSS), idle, empty",
            Figure::mib(rss_idle),
        )
        .target(Target::AtMost(20.0)),
    );
    section.row(
        Row::new(
            "4",
            "resident memory (VmRSS) with 384 instances, after a listing",
            Figure::mib(rss_full),
        )
        .target(Target::AtMost(20.0)),
    );
    let p99 = |figure: &Figure| figure.samples.p99() * 1e3;
    section.row(Row::new(
        "4",
        "property read `Instance.Weight`, 1 client",
        read_one.clone(),
    ));
    section.row(
        Row::new(
            "4",
            format!("property read `Instance.Weight`, {CLIENTS} concurrent clients"),
            read_many.clone(),
        )
        .against("1 client", &read_one),
    );
    section.row(Row::new(
        "4",
        "weight change `Instance.SetSchedule`, 1 client",
        write_one.clone(),
    ));
    section.row(
        Row::new(
            "4",
            format!("weight change `Instance.SetSchedule`, {CLIENTS} concurrent clients"),
            write_many.clone(),
        )
        .against("1 client", &write_one),
    );
    section.note(format!(
        "p99 of the round trips: read {:.2} ms (1 client), {:.2} ms ({CLIENTS} clients); \
         SetSchedule {:.2} ms (1 client), {:.2} ms ({CLIENTS} clients). Each client has its own \
         bus connection; reads use `org.freedesktop.DBus.Properties.Get` (no client cache), \
         {} per client; writes {} per client, each on the client's own instance.",
        p99(&read_one),
        p99(&read_many),
        p99(&write_one),
        p99(&write_many),
        env.rounds.reads_per_client,
        env.rounds.writes_per_client
    ));
    section.note(
        "A weight change is `Instance.SetSchedule(weight, 0, 0, {})` alternating 200 and 100 on \
         the client's own instance: authorized (root is let through), admitted by the engine on \
         the parent, saved atomically to `state.json` and applied before the reply.",
    );
    section.note(format!(
        "Cold starts: {} of each kind, interleaved; each start is a fresh simulated host (as after \
         a reboot), so the 384 instances are really created by the start-up reconcile from \
         `state.json`. Peak resident memory (VmHWM) of the last daemon after all round trips: \
         {peak:.1} MiB.",
        env.rounds.starts
    ));
    Ok(section)
}

/// `mdev-bench cold-start`: the cold start with 384 autostart instances of the daemon under
/// test against another build of it (`baseline`, a copy of an older `mdev-manager`), `rounds`
/// starts of each, interleaved with the order alternating round by round, so that the load of
/// a shared machine hits both alike. Both restore the same `state.json` (made by the daemon
/// under test) on a fresh simulated host. For comparing a change to the start-up path; the
/// full suite's figures stay in `footprint`.
pub fn compare_cold_starts(env: &Env, baseline: &Path, rounds: usize) -> Result<Section> {
    let mut section =
        Section::new("4. Cold start + reconcile of 384: this build against a baseline");
    let bus = PrivateBus::start()?;
    let state = autostart_state(env, &bus)?;
    let baseline_env = Env {
        daemon: baseline.to_path_buf(),
        ..env.clone()
    };
    let mut this = Samples::new();
    let mut base = Samples::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for is_baseline in order {
            let root = daemon_root()?;
            let path = super::state_file(root.path());
            std::fs::write(&path, &state).map_err(BenchError::io("cannot write", &path))?;
            let which = if is_baseline { &baseline_env } else { env };
            let daemon = simulated_daemon(which, &bus, root.path(), SCALE_TOPOLOGY)?;
            if is_baseline {
                base.push(daemon.ready_after);
            } else {
                this.push(daemon.ready_after);
            }
            daemon.stop()?;
        }
    }
    let base = Figure::time(base);
    section.row(Row::new(
        "4",
        format!("baseline `{}`", baseline.display()),
        base.clone(),
    ));
    section.row(
        Row::new(
            "4",
            format!("this build `{}`", env.daemon.display()),
            Figure::time(this),
        )
        .against("baseline", &base)
        .target(Target::AtMost(0.1)),
    );
    section.note(format!(
        "{rounds} cold starts of each, interleaved (order alternating); each on a fresh \
         simulated scale host restoring the same 384 autostart instances from `state.json`."
    ));
    Ok(section)
}

/// A `state.json` with 384 autostart instances, made by the service itself.
fn autostart_state(env: &Env, bus: &PrivateBus) -> Result<Vec<u8>> {
    let root = daemon_root()?;
    let daemon = simulated_daemon(env, bus, root.path(), SCALE_TOPOLOGY)?;
    let rt = runtime()?;
    rt.block_on(async {
        let connection = connect(bus).await?;
        let manager = ManagerProxy::new(&connection)
            .await
            .map_err(BenchError::bus("Manager proxy"))?;
        for count in [256u32, INSTANCES - 256] {
            let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
            options.insert(option::COUNT, Variant::from(count));
            options.insert(option::AUTOSTART, Variant::from(true));
            manager
                .create_instances(BENCH_PROFILE, options)
                .await
                .map_err(BenchError::bus("CreateInstances autostart"))?;
        }
        Ok::<_, BenchError>(())
    })?;
    daemon.stop()?;
    let path = super::state_file(root.path());
    read(&path)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(BenchError::io("cannot read", path))
}

async fn instance_paths(bus: &PrivateBus) -> Result<Vec<OwnedObjectPath>> {
    let connection = connect(bus).await?;
    let objects = zbus::fdo::ObjectManagerProxy::builder(&connection)
        .destination(dbus_api::names::BUS_NAME)
        .path(dbus_api::names::ROOT_PATH)
        .build()
        .await
        .map_err(BenchError::bus("ObjectManager proxy"))?
        .get_managed_objects()
        .await
        .map_err(|e| BenchError::Bus {
            call: "GetManagedObjects".into(),
            source: e.into(),
        })?;
    let mut paths: Vec<OwnedObjectPath> = objects
        .into_iter()
        .filter(|(_, interfaces)| {
            interfaces
                .keys()
                .any(|name| name.as_str() == interface::INSTANCE)
        })
        .map(|(path, _)| path)
        .collect();
    paths.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    Ok(paths)
}

/// `clients` concurrent clients, each on its own connection and its own instance, each making
/// `calls` round trips: property reads, or autostart toggles.
async fn round_trips(
    bus: &PrivateBus,
    instances: &[OwnedObjectPath],
    clients: usize,
    calls: usize,
    write: bool,
) -> Result<Samples> {
    let mut tasks = Vec::new();
    for client in 0..clients {
        let connection = connect(bus).await?;
        let path = instances[client % instances.len()].clone();
        tasks.push(tokio::spawn(async move {
            client_round_trips(connection, path, calls, write).await
        }));
    }
    super::join_clients(tasks).await
}

async fn client_round_trips(
    connection: zbus::Connection,
    path: OwnedObjectPath,
    calls: usize,
    write: bool,
) -> Result<Samples> {
    let mut samples = Samples::new();
    if write {
        // `Instance.SetSchedule(u weight, u min_share, u max_share, a{sv} options)`: the
        // weight change libvirt or an admin makes; called by name, as any client would.
        let instance = zbus::Proxy::new(
            &connection,
            dbus_api::names::BUS_NAME,
            path,
            interface::INSTANCE,
        )
        .await
        .map_err(BenchError::bus("Instance proxy"))?;
        for call in 0..calls {
            let weight: u32 = if call % 2 == 0 { 200 } else { 100 };
            let options: HashMap<&str, Variant<'_>> = HashMap::new();
            let started = Instant::now();
            instance
                .call_method("SetSchedule", &(weight, 0u32, 0u32, options))
                .await
                .map_err(BenchError::bus("Instance.SetSchedule"))?;
            samples.push(started.elapsed());
        }
    } else {
        let properties = zbus::fdo::PropertiesProxy::builder(&connection)
            .destination(dbus_api::names::BUS_NAME)
            .path(path)
            .build()
            .await
            .map_err(BenchError::bus("Properties proxy"))?;
        let name = zbus::names::InterfaceName::from_static_str_unchecked(interface::INSTANCE);
        for _ in 0..calls {
            let started = Instant::now();
            properties
                .get(name.clone(), "Weight")
                .await
                .map_err(|e| BenchError::Bus {
                    call: "Properties.Get Weight".into(),
                    source: e.into(),
                })?;
            samples.push(started.elapsed());
        }
    }
    Ok(samples)
}
