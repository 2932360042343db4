//! Issue 16: changes under concurrency now that every create records a write-ahead intent and
//! concurrent state changes share one durable write (group commit). 32 clients, each on its
//! own bus connection, each repeating `CreateInstances` of one instance and the `Destroy` of
//! it on the simulated scale host (the clients spread over its 8 parents): creates plus
//! destroys per second over the whole run. The `SetSchedule` figures of 1 and 16 clients are
//! in section 4 (`footprint`).

use std::time::{Duration, Instant};

use crate::error::{BenchError, Result};
use crate::hosttree::{BENCH_PROFILE, SCALE_PARENTS, SCALE_TOPOLOGY};
use crate::procs::PrivateBus;
use crate::report::{Figure, Row, Section, Target};
use crate::stats::Samples;

use super::{bus_create_destroy, connect, daemon_root, runtime, simulated_daemon, Env};

/// Concurrent clients.
pub const CLIENTS: usize = 32;

/// Runs the measurement: `rounds` runs of [`CLIENTS`] clients, each making `calls`
/// create+destroy pairs.
pub fn run(env: &Env) -> Result<Section> {
    let mut section = Section::new("8. Concurrent changes: write-ahead intent and group commit");
    let rt = runtime()?;
    let bus = PrivateBus::start()?;
    let root = daemon_root()?;
    let daemon = simulated_daemon(env, &bus, root.path(), SCALE_TOPOLOGY)?;
    let calls = env.rounds.writes_per_client * 2;
    let mut rates = Samples::new();
    let mut pairs = Samples::new();
    let runs = env.rounds.starts.max(2);
    for _ in 0..runs {
        let (elapsed, samples) = rt.block_on(concurrent_pairs(&bus, CLIENTS, calls))?;
        // Each pair is two changes (a create and a destroy).
        let changes = (samples.len() * 2) as f64;
        rates.push_value(changes / elapsed.as_secs_f64());
        pairs.extend(&samples);
    }
    daemon.stop()?;
    section.row(
        Row::new(
            "8",
            format!("creates + destroys per second, {CLIENTS} concurrent clients"),
            Figure::rate(rates),
        )
        .target(Target::AtLeast(1000.0)),
    );
    let pair = Figure::time(pairs);
    section.row(Row::new(
        "7",
        format!("one create + destroy round trip, {CLIENTS} concurrent clients"),
        pair,
    ));
    section.note(format!(
        "{runs} runs; in each, {CLIENTS} clients (own bus connection each) make {calls} pairs of \
         `CreateInstances {BENCH_PROFILE}` (one instance, `parent` option: the clients spread \
         over the 8 parents) and `Instance.Destroy`, all at once; the rate is every create and \
         destroy acknowledged over the run's wall-clock time. Each create saves its intent and \
         its record durably before its reply, each destroy its removal (`state.json` fsynced); \
         concurrent saves share one write (group commit)."
    ));
    Ok(section)
}

/// `clients` clients making `calls` create+destroy pairs each; the wall-clock time of the
/// whole run and every pair's round trip.
async fn concurrent_pairs(
    bus: &PrivateBus,
    clients: usize,
    calls: usize,
) -> Result<(Duration, Samples)> {
    let mut connections = Vec::new();
    for _ in 0..clients {
        connections.push(connect(bus).await?);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (client, connection) in connections.into_iter().enumerate() {
        let parent = SCALE_PARENTS[client % SCALE_PARENTS.len()];
        tasks.push(tokio::spawn(async move {
            let mut samples = Samples::new();
            for _ in 0..calls {
                samples.push(bus_create_destroy(&connection, BENCH_PROFILE, parent).await?);
            }
            Ok::<_, BenchError>(samples)
        }));
    }
    let all = super::join_clients(tasks).await?;
    Ok((started.elapsed(), all))
}
