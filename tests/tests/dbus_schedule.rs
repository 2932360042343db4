//! Scheduling end to end: the service (simulated host, everything re-rooted under a temp
//! directory) on a private system-like bus, driven with `vgpuctl weight` / `vgpuctl schedule`
//! and a proxy; admission refusals with their numbers, NVIDIA's refusal while vGPUs run, the
//! modprobe file under the root, change signals, the SVG, and persistence across a restart.

use std::path::Path;
use std::time::Duration;

use dbus_api::names::{interface, BUS_NAME};
use dbus_api::{path, ErrorKind};
use e2e_tests::bus::{
    created_uuids, start_service_in, stderr_of, vgpuctl, vgpuctl_json, wait_name_released, Process,
    TestBus,
};
use futures_util::StreamExt;
use serde_json::Value;

const T4: &str = "0000:3b:00.0";

/// The daemon with its root (and so its state and `/etc`) in `root`.
fn start_service(bus: &TestBus, root: &Path) -> Process {
    let root = root.to_str().expect("utf-8 path");
    start_service_in(
        bus,
        "default",
        Path::new("/var/lib/mdev-manager"),
        "info",
        &["--root", root],
    )
    .expect("mdev-manager")
}

fn refused(output: &std::process::Output, kind: ErrorKind) -> String {
    assert_eq!(
        output.status.code(),
        Some(i32::from(kind.exit_code())),
        "expected {kind:?}: {}",
        stderr_of(output)
    );
    stderr_of(output)
}

fn t4_schedule(bus: &TestBus) -> Value {
    let shown = vgpuctl_json(&vgpuctl(bus, None, &["--json", "schedule", "show", T4]));
    shown[0].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn weights_and_policies_over_the_bus_survive_a_restart() {
    let bus = TestBus::start().expect("dbus-daemon");
    let root = tempfile::tempdir().unwrap();
    let service = start_service(&bus, root.path());

    // The driver's default until a policy is set; then the file under the root.
    let before = t4_schedule(&bus);
    assert_eq!(before["backend"], "nvidia");
    assert_eq!(before["policy"], "best-effort");
    let set = vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &[
            "--json",
            "schedule",
            T4,
            "--policy",
            "equal-share",
            "--slice",
            "3ms",
        ],
    ));
    assert_eq!(set[0]["policy"], "equal-share");
    assert_eq!(set[0]["time_slice_us"], 3000);
    assert!(set[0]["note"].as_str().unwrap().contains("nvidia module"));
    let conf = root.path().join("etc/modprobe.d/mdev-manager-nvidia.conf");
    let text = std::fs::read_to_string(&conf).expect("modprobe file under the root");
    assert!(
        text.contains("NVreg_RegistryDwordsPerDevice=\"pci=0000:3b:00.0;RmPVMRL=0x00030001\""),
        "{text}"
    );

    let uuids = created_uuids(&vgpuctl(
        &bus,
        None,
        &[
            "--json",
            "create",
            "nvidia-t4-2q",
            "--count",
            "2",
            "--autostart",
        ],
    ));
    let (first, second) = (&uuids[0], &uuids[1]);

    // Change signals: subscribe on the first instance, then set it through a proxy.
    let connection = bus.connect().await;
    let properties = zbus::fdo::PropertiesProxy::builder(&connection)
        .destination(BUS_NAME)
        .path(path::mdev_instance_path(first))
        .build()
        .await
        .unwrap();
    let mut changes = properties.receive_properties_changed().await.unwrap();
    let set = vgpuctl_json(&vgpuctl(
        &bus,
        None,
        &[
            "--json", "weight", first, "300", "--min", "20", "--max", "80%",
        ],
    ));
    assert_eq!(set["weight"], 300);
    assert_eq!(set["min_share_ppm"], 200_000);
    assert_eq!(set["max_share_ppm"], 800_000);
    // Equal share: the weight is stored, both vGPUs get half.
    assert_eq!(set["effective_share_ppm"], 500_000);
    let signal = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("PropertiesChanged within 10 s")
        .expect("a signal");
    let args = signal.args().unwrap();
    assert_eq!(args.interface_name.as_str(), interface::INSTANCE);
    for name in ["Weight", "MinShare", "MaxShare"] {
        assert!(
            args.changed_properties.contains_key(name),
            "{name} missing from {:?}",
            args.changed_properties.keys().collect::<Vec<_>>()
        );
    }

    // Admission control: 20% + 90% is refused with the numbers; nothing changes.
    let error = refused(
        &vgpuctl(&bus, None, &["weight", second, "100", "--min", "90"]),
        ErrorKind::NoCapacity,
    );
    for needle in ["110%", "20%", "90%", first.as_str(), second.as_str()] {
        assert!(error.contains(needle), "{needle:?} missing from {error}");
    }
    // A bad weight names itself.
    let error = refused(
        &vgpuctl(&bus, None, &["weight", second, "0"]),
        ErrorKind::InvalidArgs,
    );
    assert!(error.contains("weight"), "{error}");
    // NVIDIA takes no policy change while vGPUs exist.
    let error = refused(
        &vgpuctl(&bus, None, &["schedule", T4, "--policy", "fixed-share"]),
        ErrorKind::Busy,
    );
    assert!(error.contains(T4), "{error}");
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), text);

    // One period as a picture.
    let svg = root.path().join("t4.svg");
    let output = vgpuctl(
        &bus,
        None,
        &["schedule", "show", T4, "--svg", svg.to_str().unwrap()],
    );
    assert!(output.status.success(), "{output:?}");
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.contains("<svg") && picture.contains(&first[..8]),
        "{picture}"
    );
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains("equal-share") && table.contains(first.as_str()),
        "{table}"
    );

    // Restart on a fresh simulated host: the autostart vGPUs come back with their settings.
    // SIGKILL: nothing is saved at shutdown, what comes back was saved when it changed.
    service.kill().expect("kill mdev-manager");
    wait_name_released(&bus).expect("the bus name is released");
    let _service = start_service(&bus, root.path());
    let after = t4_schedule(&bus);
    assert_eq!(after["policy"], "equal-share");
    assert_eq!(after["time_slice_us"], 3000);
    let instance = after["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["uuid"] == first.as_str())
        .expect("the first vGPU is back")
        .clone();
    assert_eq!(instance["active"], true);
    assert_eq!(instance["weight"], 300);
    assert_eq!(instance["min_share_ppm"], 200_000);
    assert_eq!(instance["max_share_ppm"], 800_000);
}
