//! Properties of the plan over random settings: exact sums, guarantees and caps held,
//! proportional and monotonic in weight, deterministic, and met exactly by the software scheduler.

use proptest::prelude::*;
use vgpu_sched::software::SoftwareScheduler;
use vgpu_sched::{Busy, InstanceId, InstanceSchedule, ParentSchedule, Plan, Policy, Share, Weight};

const WHOLE: u64 = 1_000_000;

#[derive(Debug, Clone)]
struct Case {
    parent: ParentSchedule,
    instances: Vec<InstanceSchedule>,
    busy: Vec<InstanceId>,
}

impl Case {
    fn plan(&self) -> Plan {
        Plan::compute(&self.parent, &self.instances, Busy::Only(&self.busy))
            .expect("admitted settings")
    }

    fn takes_part(&self, instance: &InstanceSchedule) -> bool {
        !self.parent.policy.is_work_conserving() || self.busy.contains(&instance.id)
    }
}

fn policy() -> impl Strategy<Value = Policy> {
    prop::sample::select(Policy::ALL.to_vec())
}

/// Settings that pass admission control: guarantees scaled to fit 100% when needed, each
/// guarantee at most its cap.
fn case() -> impl Strategy<Value = Case> {
    let instance = (
        1u32..=10_000,
        prop::option::weighted(0.4, 0u32..=600_000),
        prop::option::weighted(0.4, 1u32..=1_000_000),
        any::<bool>(),
    );
    (
        policy(),
        1_000u32..=1_000_000,
        prop::collection::vec(instance, 0..24),
    )
        .prop_map(|(policy, period_us, raw)| {
            let min_total: u64 = raw.iter().filter_map(|r| r.1).map(u64::from).sum();
            let mut instances = Vec::new();
            let mut busy = Vec::new();
            for (index, (weight, min, max, is_busy)) in raw.into_iter().enumerate() {
                let min = min.map(|m| {
                    if min_total > WHOLE {
                        (u64::from(m) * WHOLE / min_total) as u32
                    } else {
                        m
                    }
                });
                let max = match (min, max) {
                    (Some(min), Some(max)) => Some(max.max(min).max(1)),
                    (_, max) => max,
                };
                let mut instance = InstanceSchedule::new(format!("uuid-{index}"))
                    .with_weight(Weight::new(weight).unwrap());
                instance.min_share = min.map(|m| Share::from_ppm(m).unwrap());
                instance.max_share = max.map(|m| Share::from_ppm(m).unwrap());
                if is_busy {
                    busy.push(instance.id.clone());
                }
                instances.push(instance);
            }
            Case {
                parent: ParentSchedule::new("0000:3b:00.0")
                    .with_policy(policy)
                    .with_period_us(period_us),
                instances,
                busy,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn shares_sum_to_the_whole_unless_all_capped(case in case()) {
        let plan = case.plan();
        let mut sum = 0u64;
        let mut caps = 0u64;
        for (instance, planned) in case.instances.iter().zip(&plan.instances) {
            if case.takes_part(instance) {
                sum += u64::from(planned.share.ppm());
                caps += u64::from(instance.cap().ppm());
            } else {
                prop_assert_eq!(planned.share, Share::ZERO, "idle {} got time", instance.id);
            }
        }
        let any_part = case.instances.iter().any(|i| case.takes_part(i));
        prop_assert_eq!(sum, if any_part { caps.min(WHOLE) } else { 0 });
    }

    #[test]
    fn guarantees_and_caps_hold(case in case()) {
        let plan = case.plan();
        for (instance, planned) in case.instances.iter().zip(&plan.instances) {
            prop_assert!(planned.share <= instance.cap(), "{} over its cap", instance.id);
            if case.takes_part(instance) {
                prop_assert!(planned.share >= instance.guarantee(), "{} under its guarantee", instance.id);
            }
        }
    }

    #[test]
    fn shares_between_bounds_follow_the_weights(case in case()) {
        let plan = case.plan();
        let weight = |i: &InstanceSchedule| if case.parent.policy.uses_weights() { u64::from(i.weight.get()) } else { 1 };
        let free: Vec<(u64, u64)> = case
            .instances
            .iter()
            .zip(&plan.instances)
            .filter(|(i, p)| {
                case.takes_part(i)
                    && p.share.ppm() > i.guarantee().ppm() + 1
                    && p.share.ppm() + 1 < i.cap().ppm()
            })
            .map(|(i, p)| (u64::from(p.share.ppm()), weight(i)))
            .collect();
        for a in &free {
            for b in &free {
                // share_a / w_a == share_b / w_b up to one ppm of rounding on each side.
                let lhs = a.0 * b.1;
                let rhs = b.0 * a.1;
                prop_assert!(lhs.abs_diff(rhs) <= a.1 + b.1, "{:?} vs {:?}", a, b);
            }
        }
    }

    #[test]
    fn more_weight_never_means_less_share(case in case(), pick in any::<prop::sample::Index>(), extra in 1u32..10_000) {
        prop_assume!(!case.instances.is_empty());
        let index = pick.index(case.instances.len());
        let before = case.plan().instances[index].share.ppm();
        let mut heavier = case.clone();
        let weight = &mut heavier.instances[index].weight;
        *weight = Weight::new((weight.get() + extra).min(10_000)).unwrap();
        let after = heavier.plan().instances[index].share.ppm();
        prop_assert!(after + 1 >= before, "weight up, share {} -> {}", before, after);
    }

    #[test]
    fn deterministic_and_order_independent(case in case()) {
        prop_assert_eq!(case.plan(), case.plan());
        let mut reversed = case.clone();
        reversed.instances.reverse();
        let forward = case.plan();
        let backward = reversed.plan();
        for planned in &forward.instances {
            let other = backward.instance(&planned.id).unwrap();
            prop_assert!(planned.share.ppm().abs_diff(other.share.ppm()) <= 2, "{} differs by order", planned.id);
        }
    }

    #[test]
    fn slices_split_the_period_exactly(case in case()) {
        let plan = case.plan();
        let period = u64::from(plan.period_us);
        let mut total_share = 0u64;
        for planned in &plan.instances {
            let exact = u64::from(planned.share.ppm()) * period;
            let slice = u64::from(planned.slice_us) * WHOLE;
            prop_assert!(slice.abs_diff(exact) < WHOLE, "{} slice off by a µs or more", planned.id);
            total_share += u64::from(planned.share.ppm());
        }
        let slices: u64 = plan.instances.iter().map(|p| u64::from(p.slice_us)).sum();
        prop_assert_eq!(slices, (total_share * period + WHOLE / 2) / WHOLE);
    }

    #[test]
    fn software_scheduler_meets_the_plan_every_period(case in case(), periods in 1u64..4) {
        let mut scheduler = SoftwareScheduler::new(case.parent.clone(), case.instances.clone()).unwrap();
        for instance in &case.instances {
            scheduler.set_busy(&instance.id, case.busy.contains(&instance.id)).unwrap();
        }
        let plan = scheduler.plan().clone();
        prop_assert_eq!(&plan, &case.plan());
        scheduler.run_for(periods * u64::from(plan.period_us));
        let usage = scheduler.take_usage();
        let mut used = 0;
        for (index, planned) in plan.instances.iter().enumerate() {
            let expected = if planned.busy { periods * u64::from(planned.slice_us) } else { 0 };
            prop_assert_eq!(usage.ran_us[index], expected, "{} ran the wrong time", planned.id);
            used += usage.ran_us[index];
        }
        prop_assert_eq!(used + usage.idle_us, periods * u64::from(plan.period_us));
    }
}
