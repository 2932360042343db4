//! Differential test: the real mdevctl 1.4 (crates.io, `MDEVCTL_ENV_ROOT`) and the compatible
//! command (`mdev-manager-mdevctl`, through the daemon running with `--root` on the same
//! directory) list the same host tree, and every listing must come out byte for byte the same
//! with the same exit status.
//!
//! The tree is the benchmark's inventory host (`mdev-bench tree`: the simulated `scale` host
//! with 384 persistent autostart instances over 8 parents of 4..32 types, written out as real
//! files and links, with the same instances as `/etc/mdevctl.d` definitions and the engine's
//! state under the root). Then changes that touch only definitions (`modify --auto/--manual`,
//! `modify --addattr/--delattr [--index]`, `undefine` and `define` of a running device) go
//! through both, each followed by the
//! listings again. Start and stop are not compared: on a plain directory tree a write to
//! `create` or `remove` makes no device (docs/libvirt.md).
//!
//! The real mdevctl is `$MDEVCTL`, else `~/.cargo/bin/mdevctl` (`scripts/install-test-deps`
//! installs it; Debian's 1.2.0 ignores `MDEVCTL_ENV_ROOT`).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use e2e_tests::bus::{name_has_owner, package_binary, wait_for, workspace_binary, TestBus};

fn real_mdevctl() -> PathBuf {
    let path = match std::env::var_os("MDEVCTL") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo/bin/mdevctl"),
    };
    assert!(
        path.exists(),
        "the real mdevctl 1.4 is not at {} (run scripts/install-test-deps, or set MDEVCTL)",
        path.display()
    );
    path
}

/// What a command printed and how it ended.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    code: Option<i32>,
    stdout: String,
}

fn outcome(output: Output) -> Outcome {
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
    }
}

#[test]
fn listings_and_definition_changes_match_the_real_mdevctl_byte_for_byte() {
    let mdevctl = real_mdevctl();
    let root = tempfile::tempdir().expect("temp dir");
    let root_text = root.path().display().to_string();
    let tree = Command::new(package_binary("mdev-bench", "mdev-bench"))
        .args(["tree", &root_text])
        .output()
        .expect("run mdev-bench tree");
    assert!(tree.status.success(), "mdev-bench tree: {tree:?}");

    let bus = TestBus::start().expect("dbus-daemon");
    let mut daemon = Command::new(workspace_binary("mdev-manager"))
        .args(["--root", &root_text, "--no-reconcile"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .env("MDEV_MANAGER_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start mdev-manager");
    let started = wait_for(Duration::from_secs(60), || {
        name_has_owner(&bus.address(), dbus_api::names::BUS_NAME)
    });
    if started.is_err() {
        let _ = daemon.kill();
        panic!("mdev-manager --root {root_text} did not take its bus name");
    }

    let ours = package_binary("mdevctl-compat", "mdev-manager-mdevctl");
    let parents = ["0000:10:00.0", "0000:80:00.0"];
    let sample = std::fs::read_dir(root.path().join("sys/bus/mdev/devices"))
        .expect("the tree's mdev devices")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .min()
        .expect("at least one device");
    let unknown = "00000000-0000-4000-8000-000000000001";
    let mut commands: Vec<Vec<String>> = Vec::new();
    for base in [vec!["list"], vec!["list", "--defined"]] {
        let base: Vec<String> = base.into_iter().map(String::from).collect();
        for extra in [
            vec![],
            vec!["--dumpjson".to_string()],
            vec!["--verbose".to_string()],
            vec![format!("--parent={}", parents[0])],
            vec![
                "--parent".to_string(),
                parents[1].to_string(),
                "--dumpjson".to_string(),
            ],
            vec![format!("--uuid={sample}")],
            vec!["--dumpjson".to_string(), "-u".to_string(), sample.clone()],
            vec!["--dumpjson".to_string(), format!("--uuid={unknown}")],
            vec![format!("--uuid={unknown}")],
            vec![
                "--parent=0000:ff:00.0".to_string(),
                "--dumpjson".to_string(),
            ],
        ] {
            commands.push(base.iter().cloned().chain(extra).collect());
        }
    }
    for extra in [
        vec![],
        vec!["--dumpjson".to_string()],
        vec![format!("--parent={}", parents[0])],
        vec![
            "--dumpjson".to_string(),
            "--parent".to_string(),
            parents[1].to_string(),
        ],
        vec!["--parent=0000:ff:00.0".to_string()],
        vec![
            "--parent=0000:ff:00.0".to_string(),
            "--dumpjson".to_string(),
        ],
    ] {
        commands.push(std::iter::once("types".to_string()).chain(extra).collect());
    }

    let run_both = |args: &[String]| -> (Outcome, Outcome) {
        let theirs = outcome(
            Command::new(&mdevctl)
                .args(args)
                .env("MDEVCTL_ENV_ROOT", &root_text)
                .output()
                .expect("run the real mdevctl"),
        );
        let mine = outcome(
            Command::new(&ours)
                .args(args)
                .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
                .output()
                .expect("run mdev-manager-mdevctl"),
        );
        (theirs, mine)
    };
    let mut compared = 0;
    let mut differences = Vec::new();
    let mut compare = |args: &[String], theirs: Outcome, mine: Outcome| {
        compared += 1;
        if theirs != mine {
            // The first line that differs, with the line before it for context.
            let first = theirs
                .stdout
                .lines()
                .zip(mine.stdout.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(
                    theirs
                        .stdout
                        .lines()
                        .count()
                        .min(mine.stdout.lines().count()),
                );
            let around = |text: &str| -> String {
                text.lines()
                    .skip(first.saturating_sub(1))
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" | ")
            };
            differences.push(format!(
                "mdevctl {}:\n  real ({:?}), line {first}: {:.400}\n  ours ({:?}), line {first}: {:.400}",
                args.join(" "),
                theirs.code,
                around(&theirs.stdout),
                mine.code,
                around(&mine.stdout)
            ));
        }
    };
    for args in &commands {
        let (theirs, mine) = run_both(args);
        assert!(
            !theirs.stdout.is_empty()
                || args
                    .iter()
                    .any(|a| a.contains("ff:00.0") || a.contains(unknown)),
            "mdevctl {args:?} printed nothing: the tree is not what the test expects"
        );
        compare(args, theirs, mine);
    }

    // Changes that touch only definitions (no device is made or removed, which a plain
    // directory cannot do): each through both, then the listings again.
    let mut devices: Vec<String> = std::fs::read_dir(root.path().join("sys/bus/mdev/devices"))
        .expect("the tree's mdev devices")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    devices.sort();
    let (first, second) = (&devices[0], &devices[1]);
    let changes: Vec<Vec<String>> = vec![
        vec![
            "modify".into(),
            "--uuid".into(),
            first.clone(),
            "--manual".into(),
        ],
        vec!["modify".into(), "-u".into(), first.clone(), "--auto".into()],
        vec![
            "modify".into(),
            "-u".into(),
            first.clone(),
            "--manual".into(),
        ],
        vec!["undefine".into(), format!("--uuid={second}")],
        vec!["undefine".into(), format!("--uuid={second}")],
        vec![
            "define".into(),
            "--uuid".into(),
            second.clone(),
            "--auto".into(),
        ],
        vec!["define".into(), "--uuid".into(), second.clone()],
        vec![
            "modify".into(),
            format!("--uuid={unknown}"),
            "--auto".into(),
        ],
        // Attributes of a definition: added at the end and at an index, a bad index, deleted
        // at an index and from the end.
        vec![
            "modify".into(),
            "-u".into(),
            first.clone(),
            "--addattr=nvidia/vgpu_params".into(),
            "--value=frame_rate_limiter=0".into(),
        ],
        vec![
            "modify".into(),
            "-u".into(),
            first.clone(),
            "--addattr".into(),
            "vendor/mode".into(),
            "--value".into(),
            "fast".into(),
            "--index".into(),
            "0".into(),
        ],
        vec![
            "modify".into(),
            "-u".into(),
            first.clone(),
            "--delattr".into(),
            "--index=5".into(),
        ],
        vec![
            "modify".into(),
            "-u".into(),
            second.clone(),
            "--addattr=vendor/mode".into(),
            "--value=slow".into(),
        ],
        vec![
            "modify".into(),
            "-u".into(),
            first.clone(),
            "--delattr".into(),
            "--index=0".into(),
        ],
        vec![
            "modify".into(),
            "-u".into(),
            second.clone(),
            "--delattr".into(),
        ],
    ];
    let listings: Vec<Vec<String>> = [
        &["list"][..],
        &["list", "--defined"][..],
        &["list", "--dumpjson"][..],
        &["list", "--dumpjson", "--defined"][..],
        &["list", "--defined", "--verbose"][..],
    ]
    .iter()
    .map(|args| args.iter().map(|a| a.to_string()).collect())
    .collect();
    for change in &changes {
        let (theirs, mine) = run_both(change);
        compare(change, theirs, mine);
        for listing in &listings {
            let (theirs, mine) = run_both(listing);
            compare(listing, theirs, mine);
        }
    }

    let _ = daemon.kill();
    let _ = daemon.wait();
    println!(
        "{compared} commands compared, {} differences",
        differences.len()
    );
    assert!(
        differences.is_empty(),
        "{} of {compared} commands differ:\n{}",
        differences.len(),
        differences.join("\n")
    );
}
