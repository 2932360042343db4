//! Benchmark for `vgpu-sched` (issue #5). Not part of the test pass/fail.
//!
//! 1. Accuracy: the software scheduler runs 2..64 busy instances with random (seeded) weights,
//!    guarantees, caps, periods and time slices for 10 s of virtual time; every 1 s window the
//!    achieved share of each instance is compared with its planned share. A second pass makes
//!    one instance idle or busy again at each window boundary (the plan changes with the busy
//!    set) and compares each window with the plan in force. Target: worst deviation under
//!    1 percentage point.
//! 2. Speed: `Plan::compute` for 64 instances with guarantees and caps, median of many runs,
//!    against a baseline measured in the same run (the same call with 64 default equal-share
//!    instances), printed as a ratio.
//!
//! Run: `cargo run --release -p sched-bench [-- --seed N]`.

use std::hint::black_box;
use std::time::Instant;

use vgpu_sched::software::SoftwareScheduler;
use vgpu_sched::{Busy, InstanceSchedule, ParentSchedule, Plan, Policy, Share, Weight};

/// SplitMix64: a tiny seeded generator, enough for reproducible random settings.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    fn range(&mut self, low: u32, high: u32) -> u32 {
        let span = u64::from(high - low) + 1;
        low + (self.next() % span) as u32
    }

    fn chance(&mut self, percent: u32) -> bool {
        self.range(1, 100) <= percent
    }
}

/// Random settings that pass admission: weights log-uniform 1..10000, ~30% with a guarantee
/// (all together at most 90%), ~30% with a cap at or above their guarantee.
fn random_instances(rng: &mut Rng, count: usize) -> Vec<InstanceSchedule> {
    let mut instances: Vec<InstanceSchedule> = (0..count)
        .map(|index| {
            let exponent = rng.range(0, 4000);
            let weight = (10f64.powf(f64::from(exponent) / 1000.0)).round() as u32;
            InstanceSchedule::new(format!("00000000-0000-4000-8000-{index:012}"))
                .with_weight(Weight::new(weight.clamp(1, 10_000)).expect("clamped"))
        })
        .collect();
    let mut raw_mins: Vec<u32> = instances
        .iter()
        .map(|_| {
            if rng.chance(30) {
                rng.range(1, 400_000)
            } else {
                0
            }
        })
        .collect();
    let total: u64 = raw_mins.iter().map(|m| u64::from(*m)).sum();
    if total > 900_000 {
        for min in &mut raw_mins {
            *min = (u64::from(*min) * 900_000 / total) as u32;
        }
    }
    for (instance, min) in instances.iter_mut().zip(raw_mins) {
        if min > 0 {
            instance.min_share = Some(Share::from_ppm(min).expect("below 100%"));
        }
        if rng.chance(30) {
            let cap = rng.range(min.max(10_000), 1_000_000);
            instance.max_share = Some(Share::from_ppm(cap).expect("at most 100%"));
        }
    }
    instances
}

fn random_parent(rng: &mut Rng) -> ParentSchedule {
    let policies = [
        Policy::Weighted,
        Policy::FixedShare,
        Policy::BestEffort,
        Policy::EqualShare,
    ];
    let policy = policies[rng.range(0, 3) as usize];
    let period_us = rng.range(1_000, 100_000);
    let mut parent = ParentSchedule::new("0000:3b:00.0")
        .with_policy(policy)
        .with_period_us(period_us);
    if rng.chance(70) {
        parent = parent.with_time_slice_us(rng.range(100, period_us.min(5_000)));
    }
    parent
}

/// Worst |achieved − planned| in percentage points over 1 s windows, and the number of
/// (window, instance) samples.
fn accuracy(rng: &mut Rng, count: usize, toggle: bool) -> (f64, usize, ParentSchedule) {
    const WINDOW_US: u64 = 1_000_000;
    const WINDOWS: usize = 10;
    let parent = random_parent(rng);
    let instances = random_instances(rng, count);
    let ids: Vec<_> = instances.iter().map(|i| i.id.clone()).collect();
    let mut scheduler =
        SoftwareScheduler::new(parent.clone(), instances).expect("admitted settings");
    let mut busy = vec![true; count];
    let mut worst: f64 = 0.0;
    let mut samples = 0;
    for _ in 0..WINDOWS {
        if toggle {
            let index = rng.range(0, count as u32 - 1) as usize;
            busy[index] = !busy[index];
            scheduler
                .set_busy(&ids[index], busy[index])
                .expect("known instance");
        }
        let plan = scheduler.plan().clone();
        scheduler.run_for(WINDOW_US);
        let usage = scheduler.take_usage();
        for (index, planned) in plan.instances.iter().enumerate() {
            let expected = if planned.busy {
                planned.share.fraction()
            } else {
                0.0
            };
            worst = worst.max((usage.achieved(index) - expected).abs() * 100.0);
            samples += 1;
        }
    }
    (worst, samples, parent)
}

/// Median ns per call of `f`, timing batches so the clock's resolution does not matter.
fn median_ns(runs: usize, batch: usize, mut f: impl FnMut()) -> f64 {
    let mut samples: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                f();
            }
            start.elapsed().as_nanos() as f64 / batch as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let seed = std::env::args()
        .skip_while(|arg| arg != "--seed")
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_u64);
    let mut rng = Rng(seed);
    println!("vgpu-sched benchmark, seed {seed:#x}");
    println!();
    println!("Accuracy: software scheduler, 10 x 1 s windows, 20 random configurations per row");
    println!("(random policy, period 1-100 ms, time slice 0.1-5 ms or default 1 ms)");
    println!(
        "{:>9} | {:>20} | {:>26} | {:>8}",
        "instances", "all busy: worst pp", "one toggles/window: worst pp", "samples"
    );
    let mut overall: f64 = 0.0;
    let mut worst_case = None;
    for count in [2usize, 4, 8, 16, 32, 64] {
        let mut worst_busy: f64 = 0.0;
        let mut worst_toggle: f64 = 0.0;
        let mut samples = 0;
        for _ in 0..20 {
            let (worst, n, parent) = accuracy(&mut rng, count, false);
            if worst > overall {
                overall = worst;
                worst_case = Some((count, parent));
            }
            worst_busy = worst_busy.max(worst);
            samples += n;
            let (worst, n, parent) = accuracy(&mut rng, count, true);
            if worst > overall {
                overall = worst;
                worst_case = Some((count, parent));
            }
            worst_toggle = worst_toggle.max(worst);
            samples += n;
        }
        println!("{count:>9} | {worst_busy:>20.4} | {worst_toggle:>26.4} | {samples:>8}");
    }
    println!(
        "worst deviation {overall:.4} pp (target < 1 pp): {}",
        if overall < 1.0 { "met" } else { "NOT met" }
    );
    if let Some((count, parent)) = worst_case {
        println!(
            "  worst case: {count} instances, {} policy, period {} µs, time slice {:?} µs",
            parent.policy, parent.period_us, parent.time_slice_us
        );
    }

    println!();
    println!("Plan time, 64 instances (median of 301 batches of 200 calls)");
    let parent = ParentSchedule::new("0000:3b:00.0");
    let instances = random_instances(&mut rng, 64);
    let baseline_parent = ParentSchedule::new("0000:3b:00.0").with_policy(Policy::EqualShare);
    let baseline_instances: Vec<InstanceSchedule> = (0..64)
        .map(|i| InstanceSchedule::new(format!("00000000-0000-4000-8000-{i:012}")))
        .collect();
    // Warm up caches and the allocator for both.
    for _ in 0..1_000 {
        black_box(Plan::compute(&parent, &instances, Busy::All).expect("admitted"));
        black_box(
            Plan::compute(&baseline_parent, &baseline_instances, Busy::All).expect("admitted"),
        );
    }
    // Interleave the two measurements so that load from other processes hits both alike.
    let mut full = Vec::new();
    let mut base = Vec::new();
    for _ in 0..3 {
        full.push(median_ns(101, 200, || {
            black_box(
                Plan::compute(black_box(&parent), black_box(&instances), Busy::All)
                    .expect("admitted"),
            );
        }));
        base.push(median_ns(101, 200, || {
            black_box(
                Plan::compute(
                    black_box(&baseline_parent),
                    black_box(&baseline_instances),
                    Busy::All,
                )
                .expect("admitted"),
            );
        }));
    }
    full.sort_by(f64::total_cmp);
    base.sort_by(f64::total_cmp);
    let (full, base) = (full[1], base[1]);
    let guarantees = instances.iter().filter(|i| i.min_share.is_some()).count();
    let caps = instances.iter().filter(|i| i.max_share.is_some()).count();
    println!(
        "  weighted, {guarantees} guarantees, {caps} caps: {:>8.2} µs",
        full / 1_000.0
    );
    println!(
        "  baseline, equal share, defaults:  {:>8.2} µs",
        base / 1_000.0
    );
    println!("  ratio: {:.2}x the baseline", full / base);
}
