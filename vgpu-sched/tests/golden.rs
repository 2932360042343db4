//! Golden files: the NVIDIA modprobe config, AMD slices and the SVG timeline, byte for byte.
//! `UPDATE_GOLDEN=1 cargo test -p vgpu-sched --test golden` rewrites them; review the diff.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use vgpu_sched::amd::{time_slices, AmdVf};
use vgpu_sched::nvidia::modprobe_config;
use vgpu_sched::{
    svg, Busy, InstanceId, InstanceSchedule, ParentSchedule, Plan, Policy, Share, Weight,
};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn check(path: &Path, actual: &str) {
    check_with(std::env::var("UPDATE_GOLDEN").ok().as_deref(), path, actual);
}

/// Only `UPDATE_GOLDEN=1` rewrites: `0`, an empty value or a typo compare like an unset one.
fn check_with(update_golden: Option<&str>, path: &Path, actual: &str) {
    if update_golden == Some("1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 creates it)", path.display()));
    assert!(
        expected == actual,
        "{} differs from the output (UPDATE_GOLDEN=1 rewrites it):\n--- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

#[test]
fn a_golden_file_is_rewritten_only_when_update_golden_is_1() {
    let dir = std::env::temp_dir().join(format!("vgpu-sched-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample");
    for value in [None, Some("0"), Some(""), Some("yes"), Some("true")] {
        std::fs::write(&path, "old\n").unwrap();
        let outcome = std::panic::catch_unwind(|| check_with(value, &path, "new\n"));
        assert!(
            outcome.is_err(),
            "UPDATE_GOLDEN={value:?} passed a differing file"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "old\n",
            "UPDATE_GOLDEN={value:?} rewrote the golden file"
        );
    }
    check_with(Some("1"), &path, "new\n");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn pct(p: u32) -> Share {
    Share::from_percent(p).unwrap()
}

fn weight(w: u32) -> Weight {
    Weight::new(w).unwrap()
}

#[test]
fn nvidia_modprobe_configs() {
    let single = [ParentSchedule::new("0000:3b:00.0")
        .with_policy(Policy::EqualShare)
        .with_time_slice_us(3_000)];
    check(
        &golden_dir().join("nvidia-equal-share-3ms.conf"),
        &modprobe_config(&single).unwrap().text,
    );

    let mut arr = ParentSchedule::new("0000:86:00.0");
    arr.frequency_hz = Some(960);
    let mixed = [
        ParentSchedule::new("0000:af:00.0").with_policy(Policy::BestEffort),
        ParentSchedule::new("0000:5e:00.0")
            .with_policy(Policy::FixedShare)
            .with_time_slice_us(24_000),
        arr,
        ParentSchedule::new("0000:3b:00.0").with_policy(Policy::EqualShare),
    ];
    check(
        &golden_dir().join("nvidia-four-gpus.conf"),
        &modprobe_config(&mixed).unwrap().text,
    );

    let mut both = ParentSchedule::new("0000:d8:00.0")
        .with_policy(Policy::FixedShare)
        .with_time_slice_us(45_000);
    both.frequency_hz = Some(480);
    let clamped = [
        both,
        ParentSchedule::new("0000:3b:00.0")
            .with_policy(Policy::EqualShare)
            .with_time_slice_us(500),
    ];
    check(
        &golden_dir().join("nvidia-clamped.conf"),
        &modprobe_config(&clamped).unwrap().text,
    );

    let defaults = [ParentSchedule::new("0000:3b:00.0").with_policy(Policy::BestEffort)];
    check(
        &golden_dir().join("nvidia-best-effort.conf"),
        &modprobe_config(&defaults).unwrap().text,
    );
}

fn vf(index: u32, w: u32) -> AmdVf {
    AmdVf {
        schedule: InstanceSchedule::new(format!("0000:c1:02.{index}")).with_weight(weight(w)),
        vf_index: index,
    }
}

#[test]
fn amd_slices() {
    let parent = ParentSchedule::new("0000:c1:00.0");
    let mut text = String::new();

    let mut case = |title: &str, vfs: &[AmdVf], total: u32| {
        let slices = time_slices(&parent, vfs, total).unwrap();
        let _ = writeln!(text, "## {title}\n{}", slices.to_text());
    };
    case(
        "equal weights",
        &[vf(0, 100), vf(1, 100), vf(2, 100), vf(3, 100)],
        4,
    );
    case(
        "weights 1:2:3:4",
        &[vf(0, 100), vf(1, 200), vf(2, 300), vf(3, 400)],
        4,
    );
    let mut guaranteed = vf(0, 100);
    guaranteed.schedule.min_share = Some(pct(50));
    let mut capped = vf(1, 1_000);
    capped.schedule.max_share = Some(pct(10));
    case("guarantee and cap", &[guaranteed, capped, vf(2, 100)], 3);
    case("extreme weights", &[vf(0, 1), vf(1, 10_000), vf(2, 50)], 3);
    case("two of four VFs managed", &[vf(0, 100), vf(1, 300)], 4);
    case("single VF", &[vf(0, 100)], 1);
    let many: Vec<AmdVf> = (0..8).map(|i| vf(i, 100 + 150 * i)).collect();
    case("eight VFs, rising weights", &many, 8);

    check(&golden_dir().join("amd-slices.txt"), &text);
}

/// The example in docs/scheduling.md: weights, a guarantee, a cap and an idle instance.
fn example_plan() -> Plan {
    let parent = ParentSchedule::new("0000:3b:00.0")
        .with_policy(Policy::Weighted)
        .with_period_us(20_000)
        .with_time_slice_us(2_000);
    let instances = [
        InstanceSchedule::new("7b4e2a10-5c1d-4f3a-9d8e-0a1b2c3d4e01").with_weight(weight(100)),
        InstanceSchedule::new("7b4e2a10-5c1d-4f3a-9d8e-0a1b2c3d4e02").with_weight(weight(300)),
        InstanceSchedule::new("7b4e2a10-5c1d-4f3a-9d8e-0a1b2c3d4e03")
            .with_weight(weight(100))
            .with_min_share(pct(30)),
        InstanceSchedule::new("7b4e2a10-5c1d-4f3a-9d8e-0a1b2c3d4e04")
            .with_weight(weight(200))
            .with_max_share(pct(10)),
        InstanceSchedule::new("7b4e2a10-5c1d-4f3a-9d8e-0a1b2c3d4e05").with_weight(weight(100)),
    ];
    let busy: Vec<InstanceId> = instances[..4].iter().map(|i| i.id.clone()).collect();
    Plan::compute(&parent, &instances, Busy::Only(&busy)).unwrap()
}

#[test]
fn svg_timeline_example() {
    let plan = example_plan();
    let shares: Vec<u32> = plan.instances.iter().map(|i| i.share.ppm()).collect();
    assert_eq!(shares, [150_000, 450_000, 300_000, 100_000, 0]);
    let picture = svg::timeline(&plan);
    check(&golden_dir().join("timeline-weighted.svg"), &picture);
    // The picture in the docs is this same output.
    check(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/scheduling-example.svg"),
        &picture,
    );
}

#[test]
fn svg_timeline_fixed_share_with_idle_slot_and_caps() {
    let parent = ParentSchedule::new("mtty")
        .with_policy(Policy::FixedShare)
        .with_period_us(10_000);
    let instances = [
        InstanceSchedule::new("a")
            .with_weight(weight(100))
            .with_max_share(pct(30)),
        InstanceSchedule::new("b")
            .with_weight(weight(100))
            .with_max_share(pct(25)),
        InstanceSchedule::new("c")
            .with_weight(weight(100))
            .with_max_share(pct(20)),
    ];
    let busy = [InstanceId::from("a"), InstanceId::from("c")];
    let plan = Plan::compute(&parent, &instances, Busy::Only(&busy)).unwrap();
    check(
        &golden_dir().join("timeline-fixed-share.svg"),
        &svg::timeline(&plan),
    );
}

/// Every SVG we produce must be well-formed XML, or browsers show nothing.
fn assert_well_formed(svg: &str) {
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut depth = 0i32;
    let mut elements = 0;
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Start(_)) => {
                depth += 1;
                elements += 1;
            }
            Ok(quick_xml::events::Event::End(_)) => depth -= 1,
            Ok(quick_xml::events::Event::Empty(_)) => elements += 1,
            Ok(quick_xml::events::Event::Text(text)) => {
                text.unescape().expect("text unescapes");
            }
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("not well-formed at {}: {e}", reader.buffer_position()),
        }
    }
    assert_eq!(depth, 0, "unbalanced elements");
    assert!(elements > 10, "suspiciously empty picture");
}

#[test]
fn svg_output_is_well_formed() {
    assert_well_formed(&svg::timeline(&example_plan()));
    for name in ["timeline-weighted.svg", "timeline-fixed-share.svg"] {
        assert_well_formed(&std::fs::read_to_string(golden_dir().join(name)).unwrap());
    }
    let parent = ParentSchedule::new("<&\"'>").with_period_us(1_000);
    let odd = [InstanceSchedule::new("x<y>&z")];
    assert_well_formed(&svg::timeline(
        &Plan::compute(&parent, &odd, Busy::All).unwrap(),
    ));
}
