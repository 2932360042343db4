//! The Prometheus exporter end to end with the real tools: the service on the simulated host
//! on a private bus, `mdev-manager-exporter` reading it, `promtool check metrics` on its
//! output, and a real `prometheus` scraping it on loopback, queried over its HTTP API
//! (`/api/v1/query`) after creates and destroys. Skipped (with a note) where Debian's
//! `prometheus` package is not installed; `scripts/install-test-deps` installs it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use dbus_api::proxy::ManagerProxy;
use dbus_api::{ClientError, ErrorKind};
use e2e_tests::bus::{bus_with_service, package_binary, wait_for, TestBus};

const PROMETHEUS: &str = "/usr/bin/prometheus";
const PROMTOOL: &str = "/usr/bin/promtool";

/// Fails unless Debian's Prometheus is there. `scripts/install-test-deps` installs it, so a missing
/// one fails the test rather than letting it pass by skipping.
fn require_prometheus() {
    assert!(
        Path::new(PROMETHEUS).exists() && Path::new(PROMTOOL).exists(),
        "{PROMETHEUS} or {PROMTOOL} missing: run scripts/install-test-deps (Debian package prometheus)"
    );
}

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// `GET path` on 127.0.0.1:`port`; the status code and body (None when nothing answers).
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// The exporter on `bus`, serving on `port`.
fn start_exporter(bus: &TestBus, port: u16) -> e2e_tests::bus::Process {
    let binary = package_binary("metrics-exporter", "mdev-manager-exporter");
    let child = Command::new(binary)
        .args(["--address", &bus.address(), "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start mdev-manager-exporter");
    let process = e2e_tests::bus::Process::from_child(child, "mdev-manager-exporter");
    wait_for(Duration::from_secs(30), || {
        http_get(port, "/metrics").is_some_and(|(status, _)| status == 200)
    })
    .expect("the exporter answers /metrics");
    process
}

/// Runs `promtool check metrics` on `text`; its verdict and output.
fn promtool_check_metrics(text: &str) -> (bool, String) {
    let mut child = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("promtool stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let output = child.wait_with_output().expect("promtool output");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

/// The value of each series a PromQL instant query returns, keyed by the labels `keys`.
fn query(port: u16, promql: &str) -> Option<HashMap<Vec<String>, f64>> {
    query_by(port, promql, &[])
}

fn query_by(port: u16, promql: &str, keys: &[&str]) -> Option<HashMap<Vec<String>, f64>> {
    let encoded: String = promql
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (status, body) = http_get(port, &format!("/api/v1/query?query={encoded}"))?;
    if status != 200 {
        return None;
    }
    let json: serde_json::Value = serde_json::from_str(&body).ok()?;
    let mut series = HashMap::new();
    for result in json["data"]["result"].as_array()? {
        let key = keys
            .iter()
            .map(|k| result["metric"][k].as_str().unwrap_or_default().to_string())
            .collect();
        let value: f64 = result["value"][1].as_str()?.parse().ok()?;
        series.insert(key, value);
    }
    Some(series)
}

/// A real Prometheus scraping 127.0.0.1:`target` every second, its data in `dir`.
fn start_prometheus(dir: &Path, target: u16, port: u16) -> e2e_tests::bus::Process {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: mdev-manager\n    static_configs:\n      \
             - targets: ['127.0.0.1:{target}']\n"
        ),
    )
    .expect("write prometheus.yml");
    let child = Command::new(PROMETHEUS)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let process = e2e_tests::bus::Process::from_child(child, "prometheus");
    wait_for(Duration::from_secs(60), || {
        http_get(port, "/-/ready").is_some_and(|(status, _)| status == 200)
    })
    .expect("prometheus is ready");
    process
}

async fn create(manager: &ManagerProxy<'_>, count: u32) -> Vec<String> {
    let options = HashMap::from([("count", zbus::zvariant::Variant::from(count))]);
    let paths = manager
        .create_instances("nvidia-t4-2q", options)
        .await
        .expect("CreateInstances");
    paths
        .iter()
        .map(|p| {
            let label = p.as_str().rsplit('/').next().unwrap_or_default();
            label.trim_start_matches('_').replace('_', "-")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_exporter_and_sees_creates_destroys_and_errors() {
    require_prometheus();
    let (bus, _service) = bus_with_service();
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.expect("Manager proxy");

    let created = create(&manager, 3).await;
    assert_eq!(created.len(), 3);
    manager
        .destroy_instances(&[created[0].as_str()], HashMap::new())
        .await
        .expect("DestroyInstances");
    let unknown = "5c1b7a59-8d1e-4f0f-b6b1-000000000000";
    let refused = manager
        .destroy_instances(&[unknown], HashMap::new())
        .await
        .expect_err("destroying an unknown UUID fails");
    assert_eq!(ClientError::from(refused).kind(), Some(ErrorKind::NotFound));

    let exporter_port = free_port();
    let _exporter = start_exporter(&bus, exporter_port);
    let (_, text) = http_get(exporter_port, "/metrics").expect("a scrape");
    let (valid, said) = promtool_check_metrics(&text);
    assert!(
        valid,
        "promtool check metrics refused the exposition: {said}\n{text}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let prometheus_port = free_port();
    let _prometheus = start_prometheus(dir.path(), exporter_port, prometheus_port);

    // Two T4 instances remain, free and active (the first scrape may still be on its way).
    let active = r#"sum(mdev_manager_instances{kind="mdev",state="active"})"#;
    wait_for(Duration::from_secs(60), || {
        query(prometheus_port, active).is_some_and(|series| !series.is_empty())
    })
    .expect("prometheus scraped the exporter");
    assert_eq!(
        query(prometheus_port, active)
            .unwrap()
            .into_values()
            .collect::<Vec<_>>(),
        vec![2.0]
    );
    let calls = query_by(
        prometheus_port,
        "mdev_manager_operation_duration_seconds_count",
        &["operation"],
    )
    .unwrap();
    assert_eq!(calls.get(&vec!["CreateInstances".to_string()]), Some(&1.0));
    assert_eq!(calls.get(&vec!["DestroyInstances".to_string()]), Some(&2.0));
    let errors = query_by(
        prometheus_port,
        "mdev_manager_operation_errors_total",
        &["operation", "error"],
    )
    .unwrap();
    assert_eq!(
        errors,
        HashMap::from([(
            vec![
                "DestroyInstances".to_string(),
                "org.mdevmanager.VGpu1.Error.NotFound".to_string()
            ],
            1.0
        )])
    );
    let up = query(prometheus_port, r#"up{job="mdev-manager"}"#).unwrap();
    assert_eq!(up.into_values().collect::<Vec<_>>(), vec![1.0]);

    // Destroying the rest shows in the next scrapes.
    manager
        .destroy_instances(&[created[1].as_str(), created[2].as_str()], HashMap::new())
        .await
        .expect("DestroyInstances");
    wait_for(Duration::from_secs(60), || {
        query(prometheus_port, active).is_some_and(|series| series.is_empty())
    })
    .expect("no active T4 instance left in prometheus");
    let calls = query_by(
        prometheus_port,
        "mdev_manager_operation_duration_seconds_count",
        &["operation"],
    )
    .unwrap();
    assert_eq!(calls.get(&vec!["DestroyInstances".to_string()]), Some(&3.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn textfile_mode_writes_atomically_counts_jobs_and_promtool_accepts_it() {
    require_prometheus();
    let (bus, _service) = bus_with_service();
    let connection = bus.connect().await;
    let manager = ManagerProxy::new(&connection).await.expect("Manager proxy");
    let created = create(&manager, 2).await;
    // A Job (VF enablement) is counted when its work ends. An NVIDIA PF's VFs change through
    // sriov-manage, all of them or none.
    let sriov = e2e_tests::bus::vgpuctl(&bus, None, &["sriov", "0000:4b:00.0", "--vfs", "32"]);
    assert!(
        sriov.status.success(),
        "{}",
        e2e_tests::bus::stderr_of(&sriov)
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("mdev_manager.prom");
    let status = Command::new(package_binary("metrics-exporter", "mdev-manager-exporter"))
        .args(["--address", &bus.address(), "--textfile"])
        .arg(&path)
        .status()
        .expect("run the exporter");
    assert!(status.success());
    let text = std::fs::read_to_string(&path).expect("the textfile");
    let (valid, said) = promtool_check_metrics(&text);
    assert!(valid, "{said}\n{text}");
    for uuid in &created {
        assert!(
            text.contains(&format!(
                "mdev_manager_instance_share_ratio{{uuid=\"{uuid}\","
            )),
            "{uuid} missing from\n{text}"
        );
    }
    assert!(
        text.contains(
            "mdev_manager_operation_duration_seconds_count{operation=\"job:sriov-set-numvfs\"} 1\n"
        ),
        "{text}"
    );
    assert!(text.contains("mdev_manager_jobs_running 0\n"), "{text}");
    // Nothing but the file is left in the directory (the temporary file was renamed).
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("mdev_manager.prom")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_while_the_service_is_away_is_a_503_naming_the_service() {
    let bus = TestBus::start().expect("dbus-daemon");
    let port = free_port();
    let binary = package_binary("metrics-exporter", "mdev-manager-exporter");
    let child = Command::new(binary)
        .args(["--address", &bus.address(), "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mdev-manager-exporter");
    let _exporter = e2e_tests::bus::Process::from_child(child, "mdev-manager-exporter");
    let mut answer = None;
    wait_for(Duration::from_secs(30), || {
        answer = http_get(port, "/metrics");
        answer.is_some()
    })
    .expect("the exporter answers");
    let (status, body) = answer.unwrap();
    assert_eq!(status, 503);
    assert!(body.contains("org.mdevmanager.VGpu1"), "{body}");
}

#[test]
fn the_example_alert_rules_pass_promtool_check_rules() {
    require_prometheus();
    let rules = e2e_tests::bus::packaging_file("prometheus/mdev-manager-alerts.yml");
    let output = Command::new(PROMTOOL)
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .expect("run promtool");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
