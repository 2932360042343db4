//! The Prometheus exporter (issue 19): one `GET /metrics` of `mdev-manager-exporter` against
//! the daemon on the simulated scale host with 384 instances (each scrape is one
//! `Manager.GetMetricsSnapshot` call and the rendering of about 1,400 series).
//! Target: at most 20 ms.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dbus_api::names::option;
use dbus_api::proxy::ManagerProxy;
use zbus::zvariant::Variant;

use super::{connect, daemon_root, runtime, simulated_daemon, Env};
use crate::error::{BenchError, Result};
use crate::hosttree::{BENCH_PROFILE, SCALE_TOPOLOGY};
use crate::procs::PrivateBus;
use crate::report::{Figure, Row, Section, Target};
use crate::stats::Samples;

/// Instances on the host while scraping.
const INSTANCES: u32 = 384;

/// Runs the suite.
pub fn run(env: &Env) -> Result<Section> {
    let mut section = Section::new("Exporter scrape (simulated scale host, 384 instances)");
    let rt = runtime()?;
    let bus = PrivateBus::start()?;
    let root = daemon_root()?;
    let _daemon = simulated_daemon(env, &bus, root.path(), SCALE_TOPOLOGY)?;
    rt.block_on(async {
        let connection = connect(&bus).await?;
        let manager = ManagerProxy::new(&connection)
            .await
            .map_err(BenchError::bus("Manager proxy"))?;
        // The service takes at most 256 per call.
        for count in [256, INSTANCES - 256] {
            let options = HashMap::from([(option::COUNT, Variant::from(count))]);
            manager
                .create_instances(BENCH_PROFILE, options)
                .await
                .map_err(BenchError::bus("CreateInstances"))?;
        }
        Ok::<_, BenchError>(())
    })?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(BenchError::io("cannot find", "a free loopback port"))?
        .port();
    let exporter = env.daemon.with_file_name("mdev-manager-exporter");
    let mut child = Command::new(&exporter)
        .args(["--address", bus.address(), "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(BenchError::io("cannot start", &exporter))?;
    let result = scrapes(port, env.rounds.inventory.max(3) * 10);
    let _ = child.kill();
    let _ = child.wait();
    let samples = result?;
    section.row(
        Row::new(
            "19",
            "`GET /metrics` of mdev-manager-exporter, 384 instances",
            Figure::time(samples),
        )
        .target(Target::AtMost(0.020)),
    );
    Ok(section)
}

/// `rounds` timed scrapes after a few untimed ones; each answer is checked to hold every
/// instance.
fn scrapes(port: u16, rounds: usize) -> Result<Samples> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while scrape(port).is_err() {
        if Instant::now() > deadline {
            return Err(BenchError::Check(
                "mdev-manager-exporter never answered /metrics".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut samples = Samples::new();
    for round in 0..rounds + 3 {
        let started = Instant::now();
        let body = scrape(port)?;
        let elapsed = started.elapsed();
        let shares = body
            .lines()
            .filter(|line| line.starts_with("mdev_manager_instance_share_ratio{"))
            .count();
        if shares != 2 * INSTANCES as usize {
            return Err(BenchError::Check(format!(
                "a scrape held {shares} share series, not {}",
                2 * INSTANCES
            )));
        }
        if round >= 3 {
            samples.push(elapsed);
        }
    }
    Ok(samples)
}

fn scrape(port: u16) -> Result<String> {
    let io = || BenchError::io("cannot scrape", "mdev-manager-exporter");
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(io())?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .map_err(io())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(io())?;
    if !response.starts_with("HTTP/1.1 200") {
        return Err(BenchError::Check(format!(
            "scrape answered {}",
            response.lines().next().unwrap_or_default()
        )));
    }
    Ok(response)
}
