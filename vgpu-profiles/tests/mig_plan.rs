//! MIG planning on the real H200 placement table, against an independent exhaustive
//! search on small cases, and property tests (plans never overlap, never exceed capacity).

mod common;

use proptest::prelude::*;
use vgpu_profiles::mig_plan::{plan, profile_for_type, MigPlan, MigPlanError};
use vgpu_profiles::vendor::{MigGpuInstance, MigProfileName, MigProfileTable, NvidiaTypeName};

fn h200() -> MigProfileTable {
    let text = common::fixture("h200/nvidia-smi-mig-lgip.txt");
    MigProfileTable::parse(&text, &text).unwrap()
}

fn existing(
    table: &MigProfileTable,
    profile_id: u32,
    start: u8,
    instance_id: u32,
) -> MigGpuInstance {
    let profile = table.profiles.iter().find(|p| p.id == profile_id).unwrap();
    let size = table.placements_of(0, profile_id).unwrap().size;
    MigGpuInstance {
        gpu: 0,
        name: profile.name.clone(),
        profile_id,
        instance_id,
        start,
        size,
    }
}

fn starts(plan: &MigPlan) -> Vec<(String, u8)> {
    plan.instances
        .iter()
        .map(|i| (i.name.clone(), i.start))
        .collect()
}

#[test]
fn plans_on_the_h200_table() {
    let table = h200();
    let s = |v: &[(&str, u8)]| -> Vec<(String, u8)> {
        v.iter().map(|(n, s)| (n.to_string(), *s)).collect()
    };
    assert_eq!(
        starts(&plan(&table, 0, &[], &[0]).unwrap()),
        s(&[("7g.141gb", 0)])
    );
    // One small instance goes to the last slice it may use: 4g.71gb and one 3g.71gb stay creatable.
    let one = plan(&table, 0, &[], &[19]).unwrap();
    assert_eq!(starts(&one), s(&[("1g.18gb", 6)]));
    assert_eq!(
        one.creatable_after,
        vec![
            ("7g.141gb".to_owned(), 0),
            ("4g.71gb".to_owned(), 1),
            ("3g.71gb".to_owned(), 1),
            ("2g.35gb".to_owned(), 3),
            ("1g.35gb".to_owned(), 3),
            ("1g.18gb".to_owned(), 6),
            ("1g.18gb+me".to_owned(), 1),
        ]
    );
    assert_eq!(
        starts(&plan(&table, 0, &[], &[9, 9]).unwrap()),
        s(&[("3g.71gb", 0), ("3g.71gb", 4)])
    );
    // Request order is kept in the answer; the search handles the largest first.
    assert_eq!(
        starts(&plan(&table, 0, &[], &[9, 5]).unwrap()),
        s(&[("3g.71gb", 4), ("4g.71gb", 0)])
    );
    assert_eq!(
        starts(&plan(&table, 0, &[], &[15, 15, 15, 15]).unwrap()),
        s(&[
            ("1g.35gb", 0),
            ("1g.35gb", 2),
            ("1g.35gb", 4),
            ("1g.35gb", 6)
        ])
    );
    assert_eq!(
        starts(&plan(&table, 0, &[], &[14, 14, 14, 15]).unwrap()),
        s(&[
            ("2g.35gb", 0),
            ("2g.35gb", 2),
            ("2g.35gb", 4),
            ("1g.35gb", 6)
        ])
    );
    // Around existing instances: a 1g at slice 0 leaves 3g.71gb only at 4.
    let around = plan(&table, 0, &[existing(&table, 19, 0, 7)], &[9]).unwrap();
    assert_eq!(starts(&around), s(&[("3g.71gb", 4)]));
}

#[test]
fn impossible_sets_say_why() {
    let table = h200();
    let error = |existing: &[MigGpuInstance], request: &[u32]| {
        plan(&table, 0, existing, request).unwrap_err()
    };
    assert_eq!(
        error(&[], &[5, 5]).to_string(),
        "2 more MIG 4g.71gb requested but GPU 0 allows 1 in all and 0 exist"
    );
    assert_eq!(
        error(&[], &[0, 19]).to_string(),
        "the request needs 9 memory slices but GPU 0 has 8 free of 8"
    );
    assert_eq!(
        error(&[], &[19, 19, 19, 19, 19, 19, 19, 20]).to_string(),
        "the request needs 8 compute slices but GPU 0 has 7 free of 7"
    );
    let pinned = [existing(&table, 19, 1, 1), existing(&table, 19, 5, 2)];
    assert_eq!(
        error(&pinned, &[15, 15, 15]).to_string(),
        "no arrangement of 3 x 1g.35gb fits the legal placements on GPU 0 (free slices: 0,2-4,6-7)"
    );
    assert_eq!(
        error(&[], &[42]),
        MigPlanError::UnknownProfile {
            gpu: 0,
            profile_id: 42
        }
    );
    assert!(matches!(
        error(
            &[existing(&table, 19, 1, 1), existing(&table, 15, 0, 2)],
            &[19]
        ),
        MigPlanError::BadExisting { instance_id: 2, .. }
    ));
}

#[test]
fn mig_backed_type_names_map_to_profiles() {
    let table = h200();
    for (name, id) in [
        ("NVIDIA H200X-1-18C", 19),
        ("H200-1-18CME", 20),
        ("H200X-1-35C", 15),
        ("H200X-2-35C", 14),
        ("H200X-3-71C", 9),
        ("H200X-4-71C", 5),
        ("H200X-7-141C", 0),
    ] {
        let parsed = NvidiaTypeName::parse(name).unwrap();
        assert_eq!(
            profile_for_type(&table, 0, &parsed).map(|p| p.id),
            Some(id),
            "{name}"
        );
    }
    let time_sliced = NvidiaTypeName::parse("H200-35C").unwrap();
    assert!(profile_for_type(&table, 0, &time_sliced).is_none());
}

/// An independent model of the GPU for the oracle: (id, size, compute, total, starts).
fn shapes(table: &MigProfileTable) -> Vec<(u32, u8, u32, u32, Vec<u8>)> {
    table
        .profiles
        .iter()
        .map(|p| {
            let placement = table.placements_of(0, p.id).unwrap();
            (
                p.id,
                placement.size,
                u32::from(p.name.gpu_slices),
                p.instances_total,
                placement.starts.clone(),
            )
        })
        .collect()
}

/// Whether a full assignment (existing + new) is valid: no shared slice, counts and
/// compute within the GPU's.
fn valid(table: &MigProfileTable, assignment: &[(u32, u8)]) -> bool {
    let shapes = shapes(table);
    let mut used = [false; 8];
    let mut compute = 0;
    for &(id, start) in assignment {
        let (_, size, c, _, starts) = shapes.iter().find(|s| s.0 == id).unwrap();
        if !starts.contains(&start) {
            return false;
        }
        for slice in start..start + size {
            if used[usize::from(slice)] {
                return false;
            }
            used[usize::from(slice)] = true;
        }
        compute += c;
    }
    let counts_ok = shapes.iter().all(|(id, _, _, total, _)| {
        assignment.iter().filter(|(i, _)| i == id).count() as u32 <= *total
    });
    counts_ok && compute <= 7
}

/// The oracle's score: for each profile, largest first (size, compute, id), the most
/// further instances that fit, found by trying every subset of its starts.
fn score(table: &MigProfileTable, assignment: &[(u32, u8)]) -> Vec<u32> {
    let mut shapes = shapes(table);
    shapes.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
    shapes
        .iter()
        .map(|(id, _, _, _, starts)| {
            let mut best = 0;
            for subset in 0u32..(1 << starts.len()) {
                let mut trial = assignment.to_vec();
                trial.extend(
                    starts
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| subset & (1 << i) != 0)
                        .map(|(_, &s)| (*id, s)),
                );
                if valid(table, &trial) {
                    best = best.max(subset.count_ones());
                }
            }
            best
        })
        .collect()
}

/// Every assignment of starts to the request: the best score, if any is valid.
fn exhaustive(table: &MigProfileTable, fixed: &[(u32, u8)], request: &[u32]) -> Option<Vec<u32>> {
    let shapes = shapes(table);
    let options: Vec<Vec<u8>> = request
        .iter()
        .map(|id| shapes.iter().find(|s| s.0 == *id).unwrap().4.clone())
        .collect();
    let mut best: Option<Vec<u32>> = None;
    let mut index = vec![0usize; request.len()];
    loop {
        let mut assignment = fixed.to_vec();
        assignment.extend(
            request
                .iter()
                .enumerate()
                .map(|(position, id)| (*id, options[position][index[position]])),
        );
        if valid(table, &assignment) {
            let s = score(table, &assignment);
            if best.as_ref().is_none_or(|b| s > *b) {
                best = Some(s);
            }
        }
        // Next combination (odometer).
        let mut digit = 0;
        loop {
            if digit == request.len() {
                return best;
            }
            index[digit] += 1;
            if index[digit] < options[digit].len() {
                break;
            }
            index[digit] = 0;
            digit += 1;
        }
    }
}

fn plan_assignment(plan: &MigPlan) -> Vec<(u32, u8)> {
    plan.instances
        .iter()
        .map(|i| (i.profile_id, i.start))
        .collect()
}

const IDS: [u32; 7] = [19, 20, 15, 14, 9, 5, 0];

#[test]
fn planner_matches_exhaustive_search_on_every_pair_and_some_triples() {
    let table = h200();
    let mut requests: Vec<Vec<u32>> = Vec::new();
    for a in IDS {
        requests.push(vec![a]);
        for b in IDS {
            requests.push(vec![a, b]);
            for c in [19, 15, 14] {
                requests.push(vec![a, b, c]);
            }
        }
    }
    for request in requests {
        let oracle = exhaustive(&table, &[], &request);
        match plan(&table, 0, &[], &request) {
            Ok(p) => {
                let assignment = plan_assignment(&p);
                assert!(
                    valid(&table, &assignment),
                    "{request:?}: invalid plan {assignment:?}"
                );
                let got: Vec<u32> = p.creatable_after.iter().map(|(_, n)| *n).collect();
                assert_eq!(
                    got,
                    score(&table, &assignment),
                    "{request:?}: reported score"
                );
                assert_eq!(Some(got), oracle, "{request:?}: not the best plan");
            }
            Err(e) => assert_eq!(oracle, None, "{request:?}: planner said {e}"),
        }
    }
}

fn existing_strategy() -> impl Strategy<Value = Vec<(u32, u8)>> {
    proptest::collection::vec((proptest::sample::select(IDS.to_vec()), 0u8..8), 0..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn plans_never_overlap_or_exceed_capacity(
        tries in existing_strategy(),
        request in proptest::collection::vec(proptest::sample::select(IDS.to_vec()), 0..5),
    ) {
        let table = h200();
        // Keep only the existing instances that form a valid GPU state.
        let mut fixed: Vec<(u32, u8)> = Vec::new();
        for candidate in tries {
            let mut trial = fixed.clone();
            trial.push(candidate);
            if valid(&table, &trial) {
                fixed = trial;
            }
        }
        let existing_instances: Vec<MigGpuInstance> = fixed
            .iter()
            .enumerate()
            .map(|(n, &(id, start))| existing(&table, id, start, n as u32 + 1))
            .collect();
        let result = plan(&table, 0, &existing_instances, &request);
        let oracle = (request.len() <= 3).then(|| exhaustive(&table, &fixed, &request));
        match result {
            Ok(p) => {
                prop_assert_eq!(p.instances.len(), request.len());
                let mut all = fixed.clone();
                all.extend(plan_assignment(&p));
                prop_assert!(valid(&table, &all), "overlap or over capacity: {:?}", all);
                if let Some(oracle) = oracle {
                    let got: Vec<u32> = p.creatable_after.iter().map(|(_, n)| *n).collect();
                    prop_assert_eq!(Some(got), oracle);
                }
            }
            Err(_) => {
                if let Some(oracle) = oracle {
                    prop_assert_eq!(oracle, None);
                }
            }
        }
    }
}

#[test]
fn profile_names_round_trip() {
    for name in [
        "1g.18gb",
        "1g.18gb+me",
        "7g.141gb",
        "1g.24gb+me.all",
        "1g.24gb+gfx",
    ] {
        assert_eq!(MigProfileName::parse(name).unwrap().to_string(), name);
    }
    for bad in ["", "g.18gb", "1g.18", "0g.5gb", "1g.18gb+", "1g.18gb+ME"] {
        assert!(MigProfileName::parse(bad).is_none(), "{bad}");
    }
}
