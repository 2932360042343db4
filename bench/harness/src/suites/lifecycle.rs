//! Item 3: create and destroy. One instance through each layer (raw sysfs write on the
//! simulated host, the engine in-process with durable state, one D-Bus call pair, the
//! `vgpuctl` command pair), then batches of 384.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dbus_api::names::option;
use dbus_api::proxy::ManagerProxy;
use mdev_engine::{CreateRequest, CreateTarget, DestroyOptions, DiskFiles, Engine, EngineConfig};
use mdev_host::HostFs;
use mdev_sim::SimHost;
use zbus::zvariant::Variant;
use zbus::OwnedObjectPath;

use crate::error::{BenchError, Result};
use crate::hosttree::{scale_requests, BENCH_PROFILE, SCALE_PARENTS, SCALE_TOPOLOGY};
use crate::procs::{Cmd, PrivateBus};
use crate::report::{Figure, Row, Section, Target};
use crate::stats::Samples;

use super::{
    bus_create_destroy, command_create_destroy, connect, daemon_root, destroy_over_bus, runtime,
    simulated_daemon, Env,
};

/// Instances per batch.
pub const BATCH: usize = 384;
/// The parent single creates go to.
const PARENT: &str = SCALE_PARENTS[0];

/// Runs the create/destroy measurements.
pub fn run(env: &Env) -> Result<Section> {
    let mut section = Section::new("3. Create and destroy (simulated scale host, durable state)");
    let rt = runtime()?;

    // The floor: the kernel double's own cost, two writes on a host of its own.
    let raw_host =
        SimHost::builtin(SCALE_TOPOLOGY).map_err(BenchError::setup("the scale topology"))?;
    // The engine in-process, state written under a temp root like the daemon's.
    // Whole-file mode (every change rewrites `state.json`) and journal mode (the daemon's:
    // every change one append to `state.journal`), each under its own root.
    let engine_root = daemon_root()?;
    let engine = open_engine(&engine_root, false)?;
    let journal_root = daemon_root()?;
    let journal_engine = open_engine(&journal_root, true)?;
    // The daemon on its own simulated scale host.
    let bus = PrivateBus::start()?;
    let daemon_root = daemon_root()?;
    let daemon = simulated_daemon(env, &bus, daemon_root.path(), SCALE_TOPOLOGY)?;
    let connection = rt.block_on(connect(&bus))?;
    let vgpuctl = env.vgpuctl.display().to_string();
    let address = bus.address().to_string();
    let vgpuctl_create = Cmd::new(
        "vgpuctl create",
        &vgpuctl,
        &[
            "--address",
            &address,
            "create",
            BENCH_PROFILE,
            "--parent",
            PARENT,
        ],
    );

    let mut raw = Samples::new();
    let mut in_engine = Samples::new();
    let mut in_journal_engine = Samples::new();
    let mut over_bus = Samples::new();
    let mut command = Samples::new();
    let warmup = 3;
    for round in 0..env.rounds.single + warmup {
        let mut order = [0, 1, 2, 3, 4];
        if round % 2 == 1 {
            order.reverse();
        }
        for step in order {
            let elapsed = match step {
                0 => raw_create_destroy(&raw_host)?,
                1 => engine_create_destroy(&engine)?,
                2 => rt.block_on(bus_create_destroy(&connection, BENCH_PROFILE, PARENT))?,
                3 => command_create_destroy(&vgpuctl_create, &vgpuctl, &address)?,
                _ => engine_create_destroy(&journal_engine)?,
            };
            if round >= warmup {
                [
                    &mut raw,
                    &mut in_engine,
                    &mut over_bus,
                    &mut command,
                    &mut in_journal_engine,
                ][step]
                    .push(elapsed);
            }
        }
    }
    let durable = durable_write_floor(engine_root.path(), env.rounds.single)?;
    let raw = Figure::time(raw);
    let in_engine = Figure::time(in_engine);
    let in_journal_engine = Figure::time(in_journal_engine);
    let command = Figure::time(command);
    let overhead_ms = (command.samples.median() - raw.samples.median()) * 1e3;
    section.row(Row::new(
        "3",
        "raw `create` + `remove` writes (simulated host, in-process)",
        raw.clone(),
    ));
    section.row(Row::new(
        "3",
        "one durable file replace on this disk (write, fsync, rename, fsync dir)",
        Figure::time(durable),
    ));
    section.row(
        Row::new(
            "3",
            "engine `create` + `destroy` (in-process, durable state, whole-file mode)",
            in_engine.clone(),
        )
        .against("raw writes", &raw),
    );
    section.row(
        Row::new(
            "3",
            "engine `create` + `destroy` (in-process, durable state, state journal)",
            in_journal_engine.clone(),
        )
        .against("whole-file mode", &in_engine),
    );
    section.row(
        Row::new(
            "3",
            "D-Bus `CreateInstances` + `Instance.Destroy` (one connection)",
            Figure::time(over_bus.clone()),
        )
        .against("raw writes", &raw),
    );
    section.row(
        Row::new(
            "3",
            "D-Bus `CreateInstances` + `Instance.Destroy` over the engine's own pair",
            Figure::time(over_bus),
        )
        .against(
            "engine `create` + `destroy` (state journal, as the daemon)",
            &in_journal_engine,
        )
        .target(Target::RatioAtMost(2.0)),
    );
    section.row(
        Row::new(
            "3",
            "`vgpuctl create` + `vgpuctl destroy` (two processes)",
            command.clone(),
        )
        .against("raw writes", &raw),
    );

    // Batches of 384: create all, then destroy all; three ways.
    let mut rates: [[Samples; 3]; 3] = Default::default();
    for _ in 0..env.rounds.batch {
        let measured = [
            engine_batch(&engine)?,
            rt.block_on(bus_batch(&connection, true))?,
            rt.block_on(bus_batch(&connection, false))?,
        ];
        for (way, (create, destroy)) in measured.into_iter().enumerate() {
            rates[way][0].push_value(BATCH as f64 / create.as_secs_f64());
            rates[way][1].push_value(BATCH as f64 / destroy.as_secs_f64());
            rates[way][2].push_value(BATCH as f64 / (create + destroy).as_secs_f64());
        }
    }
    // The pair's cost against the host's size: 8 instances present, then 384.
    let (small, large) = rt.block_on(pair_by_host_size(&connection, env.rounds.single))?;
    daemon.stop()?;
    let small = Figure::time(small);
    section.row(Row::new(
        "3",
        format!("D-Bus create + destroy pair, {SMALL_HOST} instances present"),
        small.clone(),
    ));
    section.row(
        Row::new(
            "3",
            format!("D-Bus create + destroy pair, {BATCH} instances present"),
            Figure::time(large),
        )
        .against(format!("{SMALL_HOST} present"), &small)
        .target(Target::RatioAtMost(1.2)),
    );
    let ways = [
        "engine in-process: `create_batch` of 384, then `destroy_batch` of 384",
        "D-Bus: `CreateInstances` count 256 + 128, then one `DestroyInstances` of 384",
        "D-Bus: 384 `CreateInstances` (count 1), then 384 `Instance.Destroy`",
    ];
    for (way, name) in ways.iter().enumerate() {
        let [create, destroy, cycle] = rates[way].clone();
        section.row(Row::new(
            "3",
            format!("{name} — creates"),
            Figure::rate(create),
        ));
        section.row(Row::new(
            "3",
            format!("{name} — destroys"),
            Figure::rate(destroy),
        ));
        section.row(
            Row::new(
                "3",
                format!("{name} — whole cycle (384 ÷ create + destroy time)"),
                Figure::rate(cycle),
            )
            .target(Target::AtLeast(if way == 2 { 400.0 } else { 1000.0 })),
        );
    }
    section.note(format!(
        "Single instance: {} rounds (+{warmup} warm-up), the four ways interleaved with the order \
         alternating each round. `vgpuctl` overhead over the raw writes: {overhead_ms:.1} ms per \
         create+destroy pair (two process starts, two bus connections, the service's work, two \
         atomic state writes).",
        env.rounds.single
    ));
    section.note(
        "The raw baseline runs on a simulated host inside the harness (the daemon's simulated \
         host lives in its own process and cannot be written from outside); it is the same \
         kernel double with the same topology, so it is the floor the service stands on.",
    );
    section.note(format!(
        "Batches: {} repetitions of each way; the whole-cycle rate counts each instance once \
         (created and destroyed). Every change is saved to `state.json` (atomic write) before \
         the call returns. The batched ways destroy with the batch calls (`Engine::destroy_batch`, \
         `Manager.DestroyInstances`: one state save for the 384); the one-by-one way with 384 \
         `Instance.Destroy` calls.",
        env.rounds.batch
    ));
    Ok(section)
}

/// Instances present for the small-host pair.
const SMALL_HOST: usize = 8;

/// One create+destroy pair over D-Bus (as in the single-instance rows), `rounds` times with
/// [`SMALL_HOST`] instances present and `rounds` times with [`BATCH`] present, the two host
/// sizes alternating in blocks (filling the host is not timed).
async fn pair_by_host_size(
    connection: &zbus::Connection,
    rounds: usize,
) -> Result<(Samples, Samples)> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(BenchError::bus("Manager proxy"))?;
    let mut small = Samples::new();
    let mut large = Samples::new();
    let blocks = 4;
    let per_block = rounds.div_ceil(blocks).max(1);
    let mut present: Vec<OwnedObjectPath> = Vec::new();
    for block in 0..blocks * 2 {
        let want = if block % 2 == 0 { SMALL_HOST } else { BATCH };
        // Filled on the other parents, so that the timed pair on `PARENT` still finds room
        // (unpinned, the service fills `PARENT`'s type first and the pair then gets NoCapacity).
        let mut others = SCALE_PARENTS.iter().filter(|p| **p != PARENT).cycle();
        let mut full = 0;
        while present.len() < want {
            let parent = others.next().copied();
            let count = (want - present.len()).min(16) as u32;
            match create_over_bus(&manager, count, parent).await {
                Ok(paths) => present.extend(paths),
                // This parent's type is full: go on with the next one.
                Err(_) if full < SCALE_PARENTS.len() * 2 => full += 1,
                Err(error) => return Err(error),
            }
        }
        while present.len() > want {
            if let Some(path) = present.pop() {
                destroy_over_bus(connection, path).await?;
            }
        }
        // One unmeasured pair after each change of size.
        bus_create_destroy(connection, BENCH_PROFILE, PARENT).await?;
        for _ in 0..per_block {
            let elapsed = bus_create_destroy(connection, BENCH_PROFILE, PARENT).await?;
            if want == SMALL_HOST {
                small.push(elapsed);
            } else {
                large.push(elapsed);
            }
        }
    }
    for path in present {
        destroy_over_bus(connection, path).await?;
    }
    Ok((small, large))
}

/// What one atomic durable replace of a small file costs here, as the state store does it per
/// change: the floor under every changing call.
fn durable_write_floor(dir: &std::path::Path, rounds: usize) -> Result<Samples> {
    use std::io::Write as _;
    let mut samples = Samples::new();
    let target = dir.join("durable-floor.json");
    let temp = dir.join(".durable-floor.json.tmp");
    let data = vec![b'x'; 4096];
    for _ in 0..rounds {
        let started = Instant::now();
        let mut file =
            std::fs::File::create(&temp).map_err(BenchError::io("cannot create", &temp))?;
        file.write_all(&data)
            .map_err(BenchError::io("cannot write", &temp))?;
        file.sync_all()
            .map_err(BenchError::io("cannot fsync", &temp))?;
        std::fs::rename(&temp, &target).map_err(BenchError::io("cannot rename", &temp))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(BenchError::io("cannot fsync", dir))?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

fn open_engine(root: &tempfile::TempDir, state_journal: bool) -> Result<Engine> {
    let host = SimHost::builtin(SCALE_TOPOLOGY).map_err(BenchError::setup("the scale topology"))?;
    let config = EngineConfig {
        state_dir: super::STATE_DIR.into(),
        state_journal,
        ..EngineConfig::default()
    };
    Engine::new(
        Arc::new(host),
        Arc::new(DiskFiles::new(root.path())),
        config,
    )
    .map_err(BenchError::setup("the engine on the scale host"))
}

fn raw_create_destroy(host: &SimHost) -> Result<Duration> {
    let uuid = uuid::Uuid::new_v4().to_string();
    let create = PathBuf::from(format!(
        "/sys/class/mdev_bus/{PARENT}/mdev_supported_types/simgpu-1/create"
    ));
    let remove = PathBuf::from(format!("/sys/bus/mdev/devices/{uuid}/remove"));
    let started = Instant::now();
    host.write(&create, uuid.as_bytes())
        .map_err(BenchError::io("cannot write (simulated)", &create))?;
    host.write(&remove, b"1")
        .map_err(BenchError::io("cannot write (simulated)", &remove))?;
    Ok(started.elapsed())
}

fn engine_create_destroy(engine: &Engine) -> Result<Duration> {
    let started = Instant::now();
    let info = engine
        .create(CreateRequest::new(CreateTarget::Mdev {
            parent: PARENT.into(),
            type_id: "simgpu-1".into(),
        }))
        .map_err(BenchError::setup("engine create"))?;
    engine
        .destroy(&info.uuid, DestroyOptions::default())
        .map_err(BenchError::setup(format!(
            "engine destroy of {}",
            info.uuid
        )))?;
    Ok(started.elapsed())
}

async fn create_over_bus(
    manager: &ManagerProxy<'_>,
    count: u32,
    parent: Option<&str>,
) -> Result<Vec<OwnedObjectPath>> {
    let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
    options.insert(option::COUNT, Variant::from(count));
    if let Some(parent) = parent {
        options.insert(option::PARENT, Variant::from(parent));
    }
    manager
        .create_instances(BENCH_PROFILE, options)
        .await
        .map_err(BenchError::bus("CreateInstances"))
}

fn engine_batch(engine: &Engine) -> Result<(Duration, Duration)> {
    let requests: Vec<CreateRequest> = scale_requests(BATCH)
        .into_iter()
        .map(|mut request| {
            request.persistent = false;
            request.autostart = false;
            request
        })
        .collect();
    let started = Instant::now();
    let created = engine
        .create_batch(requests)
        .map_err(BenchError::setup(format!("engine batch of {BATCH}")))?;
    let create = started.elapsed();
    let uuids: Vec<String> = created.into_iter().map(|info| info.uuid).collect();
    let started = Instant::now();
    engine
        .destroy_batch(&uuids, DestroyOptions::default())
        .map_err(BenchError::setup(format!(
            "engine destroy_batch of {BATCH}"
        )))?;
    Ok((create, started.elapsed()))
}

async fn bus_batch(connection: &zbus::Connection, batched: bool) -> Result<(Duration, Duration)> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(BenchError::bus("Manager proxy"))?;
    let started = Instant::now();
    let mut paths = Vec::with_capacity(BATCH);
    if batched {
        // The service takes at most 256 per call.
        paths.extend(create_over_bus(&manager, 256, None).await?);
        paths.extend(create_over_bus(&manager, (BATCH - 256) as u32, None).await?);
    } else {
        for _ in 0..BATCH {
            paths.extend(create_over_bus(&manager, 1, None).await?);
        }
    }
    let create = started.elapsed();
    if paths.len() != BATCH {
        return Err(BenchError::Check(format!(
            "CreateInstances returned {} paths for {BATCH} instances",
            paths.len()
        )));
    }
    let started = Instant::now();
    if batched {
        // One call for all 384 (one state save), as `vgpuctl destroy` with several UUIDs.
        let uuids: Vec<String> = instance_uuids(connection, &paths).await?;
        let uuids: Vec<&str> = uuids.iter().map(String::as_str).collect();
        manager
            .destroy_instances(&uuids, HashMap::new())
            .await
            .map_err(BenchError::bus("DestroyInstances"))?;
    } else {
        for path in paths {
            destroy_over_bus(connection, path).await?;
        }
    }
    Ok((create, started.elapsed()))
}

/// The UUIDs of the instances at `paths` (outside the timed part: a client that created them
/// has the UUIDs already), from one `ListInstances`.
async fn instance_uuids(
    connection: &zbus::Connection,
    paths: &[OwnedObjectPath],
) -> Result<Vec<String>> {
    let manager = ManagerProxy::new(connection)
        .await
        .map_err(BenchError::bus("Manager proxy"))?;
    let listed = manager
        .list_instances(HashMap::new())
        .await
        .map_err(BenchError::bus("ListInstances"))?;
    let uuids: Vec<String> = paths
        .iter()
        .filter_map(|path| listed.iter().find(|i| &i.object == path))
        .map(|i| i.uuid.clone())
        .collect();
    if uuids.len() != paths.len() {
        return Err(BenchError::Check(format!(
            "ListInstances names {} of the {} instances just created",
            uuids.len(),
            paths.len()
        )));
    }
    Ok(uuids)
}
