//! The model-based engine fuzz target (`reliability::engine_model`), short CI version: chosen
//! programs that once broke a property, then random programs from a fixed seed. Long runs:
//! `scripts/fuzz SECONDS engine_model`.

use std::time::Instant;

use reliability::engine_model::{run_with, HostWrites};

/// Every program runs with both write modes: inline (the fuzz target's) must keep every
/// property the daemon's bounded-writer threads keep.
const MODES: [HostWrites; 2] = [HostWrites::Inline, HostWrites::Bounded];

/// Runs `program` in both write modes.
fn run(program: &[u8]) {
    for writes in MODES {
        run_with(program, writes);
    }
}

/// Step bytes: create one mdev of type `type_index` with `flags`, then the "extra" byte that
/// picks a fault and a crash point.
fn create_mdev(type_index: u8, extra: u8) -> Vec<u8> {
    vec![0, type_index, 0, extra]
}

/// The extra byte of a crash right after the `k`-th host write of the step (k in 1..=8).
fn crash_after_write(k: u8) -> u8 {
    0x0c | ((k - 1) << 4)
}

/// The extra byte of a crash right before the `k`-th host write of the step.
fn crash_before_write(k: u8) -> u8 {
    crash_after_write(k) | 0x80
}

#[test]
fn a_crash_right_after_the_create_write_leaves_no_orphan() {
    for type_index in 0..5 {
        run(&create_mdev(type_index, crash_after_write(1)));
    }
}

#[test]
fn a_crash_at_any_write_of_a_create_batch_or_claim_leaves_no_orphan() {
    for k in 1..=8 {
        for crash in [crash_after_write(k), crash_before_write(k)] {
            // One mdev, a batch of three, a claim by profile, a VF (after enabling 2 VFs).
            run(&create_mdev(2, crash));
            run(&[2, 1, 0, 2, 4, crash]);
            run(&[5, 0, 0, 3, crash]);
            run(&[9, 2, 0, 0, 3, crash]);
        }
    }
}

/// xorshift64*, seeded: the same programs every run.
fn programs(seed: u64, count: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    (0..count).map(move |_| {
        let len = 8 + (next() % 120) as usize;
        (0..len).map(|_| (next() >> 24) as u8).collect()
    })
}

#[test]
fn random_programs_of_operations_faults_and_crashes_keep_every_property() {
    let count = std::env::var("ENGINE_MODEL_PROGRAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let started = Instant::now();
    for (index, program) in programs(20261202, count).enumerate() {
        for writes in MODES {
            let outcome = std::panic::catch_unwind(|| run_with(&program, writes));
            assert!(
                outcome.is_ok(),
                "program {index} breaks a property with {writes:?} host writes: {program:?}"
            );
        }
    }
    eprintln!("{count} programs in {:?}", started.elapsed());
}

/// Replays one program: `PROGRAM=1,2,3 ENGINE_MODEL_TRACE=1 cargo test -p reliability --test
/// engine_model replay -- --ignored --nocapture` (the bytes a failure message printed).
#[test]
#[ignore]
fn replay() {
    let program: Vec<u8> = std::env::var("PROGRAM")
        .expect("PROGRAM=comma-separated bytes")
        .split(',')
        .map(|byte| byte.trim().parse().expect("a byte"))
        .collect();
    run(&program);
}
