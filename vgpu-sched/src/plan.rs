//! The plan: each instance's share of the parent and its time per period, by water-filling.
//!
//! Every instance that takes part gets `clamp(level × weight, guarantee, cap)`, with one common
//! `level` chosen so that the shares add up to 100% (or to the sum of the caps when the caps
//! leave time over). That one formula gives the three rules at once: guarantees first, the rest
//! by weight, and time a capped instance cannot take flows to the others.

use serde::Serialize;

use crate::model::{
    check_parent, InstanceId, InstanceSchedule, ModelError, ParentSchedule, Policy,
};
use crate::share::{Share, Weight, PPM_PER_WHOLE};

/// Which instances have work right now.
#[derive(Debug, Clone, Copy)]
pub enum Busy<'a> {
    /// Every instance is busy (the planning default: what each instance gets under full load).
    All,
    /// Only these instances are busy; the others are idle.
    Only(&'a [InstanceId]),
}

impl Busy<'_> {
    /// Whether `id` is busy.
    pub fn contains(&self, id: &InstanceId) -> bool {
        match self {
            Busy::All => true,
            Busy::Only(ids) => ids.contains(id),
        }
    }
}

/// One instance in a [`Plan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedInstance {
    /// The instance.
    pub id: InstanceId,
    /// Its weight as set (the policy may ignore it).
    pub weight: Weight,
    /// Its guarantee as set.
    pub min_share: Option<Share>,
    /// Its cap as set.
    pub max_share: Option<Share>,
    /// Whether it has work.
    pub busy: bool,
    /// Its share of the parent's time. Under a policy that is not work-conserving an idle
    /// instance keeps its share and the time goes unused.
    pub share: Share,
    /// Its time in each period, in µs.
    pub slice_us: u32,
}

/// The shares and time per period of every instance on one parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The parent.
    pub parent: String,
    /// Its policy.
    pub policy: Policy,
    /// The period in µs.
    pub period_us: u32,
    /// The time slice in µs, if one is set.
    pub time_slice_us: Option<u32>,
    /// The instances, in the order given.
    pub instances: Vec<PlannedInstance>,
}

impl Plan {
    /// Computes the plan for a parent's instances. Refuses settings that fail admission control.
    ///
    /// Deterministic: the same input gives the same plan. Shares are exact in ppm: the shares
    /// of the instances that take part add up to 100% unless every one of them is capped below.
    pub fn compute(
        parent: &ParentSchedule,
        instances: &[InstanceSchedule],
        busy: Busy<'_>,
    ) -> Result<Plan, ModelError> {
        check_parent(parent, instances)?;
        let taking_part: Vec<bool> = instances
            .iter()
            .map(|instance| !parent.policy.is_work_conserving() || busy.contains(&instance.id))
            .collect();
        let bounds: Vec<Bounds> = instances
            .iter()
            .zip(&taking_part)
            .filter(|(_, taking_part)| **taking_part)
            .map(|(instance, _)| Bounds {
                weight: if parent.policy.uses_weights() {
                    f64::from(instance.weight.get())
                } else {
                    1.0
                },
                min: instance.guarantee().ppm(),
                max: instance.cap().ppm(),
            })
            .collect();
        let mut filled = water_fill(&bounds).into_iter();
        let shares: Vec<u32> = taking_part
            .iter()
            // `water_fill` returns one share per instance taking part, in order.
            .map(|taking_part| {
                if *taking_part {
                    filled.next().unwrap_or(0)
                } else {
                    0
                }
            })
            .collect();
        let slices = split_period(&shares, parent.period_us);
        let planned = instances
            .iter()
            .zip(shares.iter().zip(slices))
            .map(|(instance, (share, slice_us))| PlannedInstance {
                id: instance.id.clone(),
                weight: instance.weight,
                min_share: instance.min_share,
                max_share: instance.max_share,
                busy: busy.contains(&instance.id),
                // Water-filling keeps every share within 0..=100%.
                share: Share::from_ppm(*share).unwrap_or(Share::ZERO),
                slice_us,
            })
            .collect();
        Ok(Plan {
            parent: parent.parent.clone(),
            policy: parent.policy,
            period_us: parent.period_us,
            time_slice_us: parent.time_slice_us,
            instances: planned,
        })
    }

    /// The instance's entry, if it is in the plan.
    pub fn instance(&self, id: &InstanceId) -> Option<&PlannedInstance> {
        self.instances.iter().find(|instance| &instance.id == id)
    }

    /// The share nobody is given (all caps below 100%, or no instance at all).
    pub fn unallocated(&self) -> Share {
        let allocated: u32 = self.instances.iter().map(|i| i.share.ppm()).sum();
        Share::WHOLE.saturating_sub(Share::from_ppm(allocated).unwrap_or(Share::WHOLE))
    }

    /// The share the busy instances actually use: under a policy that is not work-conserving,
    /// idle instances' shares are lost time.
    pub fn used_by_busy(&self) -> Share {
        let used: u32 = self
            .instances
            .iter()
            .filter(|i| i.busy)
            .map(|i| i.share.ppm())
            .sum();
        Share::from_ppm(used).unwrap_or(Share::WHOLE)
    }
}

/// One instance's input to water-filling, shares in ppm.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    weight: f64,
    min: u32,
    max: u32,
}

impl Bounds {
    fn at_level(&self, level: f64) -> f64 {
        (level * self.weight).clamp(f64::from(self.min), f64::from(self.max))
    }
}

/// Shares in ppm: `clamp(level × weight, min, max)` for the level where they sum to the target
/// (100%, or the caps' sum when that is less), then rounded to whole ppm so that the sum is exact.
///
/// Expects `min <= max` for each, the mins summing to at most 100% and weights above zero
/// (admission control guarantees all three).
fn water_fill(bounds: &[Bounds]) -> Vec<u32> {
    let whole = u64::from(PPM_PER_WHOLE);
    let cap_sum: u64 = bounds.iter().map(|b| u64::from(b.max)).sum();
    let target = cap_sum.min(whole);
    let level = if cap_sum <= whole {
        f64::INFINITY
    } else {
        solve_level(bounds, target as f64)
    };
    let exact: Vec<f64> = bounds.iter().map(|b| b.at_level(level)).collect();
    round_to_target(bounds, &exact, target)
}

/// The level where `Σ clamp(level × wᵢ, minᵢ, maxᵢ) = target`. The sum is piecewise linear and
/// non-decreasing in the level, with corners where an instance leaves its guarantee
/// (`minᵢ / wᵢ`) or reaches its cap (`maxᵢ / wᵢ`); walk the corners to the segment that holds the
/// target and interpolate inside it.
fn solve_level(bounds: &[Bounds], target: f64) -> f64 {
    let mut corners: Vec<f64> = bounds
        .iter()
        .flat_map(|b| [f64::from(b.min) / b.weight, f64::from(b.max) / b.weight])
        .collect();
    corners.sort_by(f64::total_cmp);
    corners.dedup();
    let total = |level: f64| bounds.iter().map(|b| b.at_level(level)).sum::<f64>();
    let mut low = 0.0;
    for &corner in &corners {
        if total(corner) >= target {
            // Between `low` and `corner` the sum is linear with slope Σ weights of the instances
            // strictly between their guarantee and cap.
            let middle = (low + corner) / 2.0;
            let slope: f64 = bounds
                .iter()
                .filter(|b| {
                    let share = middle * b.weight;
                    share > f64::from(b.min) && share < f64::from(b.max)
                })
                .map(|b| b.weight)
                .sum();
            if slope <= 0.0 {
                return corner;
            }
            return (low + (target - total(low)) / slope).clamp(low, corner);
        }
        low = corner;
    }
    // Only reached when the caps sum to less than the target, which the caller handles.
    low
}

/// Rounds shares to whole ppm summing exactly to `target`, each within its bounds: floor
/// everything, then hand the missing ppm out by largest remainder (ties to the earlier instance).
fn round_to_target(bounds: &[Bounds], exact: &[f64], target: u64) -> Vec<u32> {
    let mut shares: Vec<u32> = exact
        .iter()
        .zip(bounds)
        .map(|(x, b)| (x.floor() as u32).clamp(b.min, b.max))
        .collect();
    let assigned: u64 = shares.iter().map(|s| u64::from(*s)).sum();
    let mut missing = target.saturating_sub(assigned);
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| {
        let ra = exact[a] - exact[a].floor();
        let rb = exact[b] - exact[b].floor();
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    // Floating-point error can leave more than one ppm per instance to hand out; keep going
    // round until done or everyone is at their cap.
    while missing > 0 {
        let before = missing;
        for &index in &order {
            if missing == 0 {
                break;
            }
            if shares[index] < bounds[index].max {
                shares[index] += 1;
                missing -= 1;
            }
        }
        if missing == before {
            break;
        }
    }
    // And the other way: take back from the largest above their guarantee.
    let mut excess = shares
        .iter()
        .map(|s| u64::from(*s))
        .sum::<u64>()
        .saturating_sub(target);
    while excess > 0 {
        let before = excess;
        for &index in order.iter().rev() {
            if excess == 0 {
                break;
            }
            if shares[index] > bounds[index].min {
                shares[index] -= 1;
                excess -= 1;
            }
        }
        if excess == before {
            break;
        }
    }
    shares
}

/// Each instance's µs per period from its ppm share, summing exactly to the shares' total part of
/// the period (largest remainder again).
fn split_period(shares: &[u32], period_us: u32) -> Vec<u32> {
    let whole = u64::from(PPM_PER_WHOLE);
    let products: Vec<u64> = shares
        .iter()
        .map(|s| u64::from(*s) * u64::from(period_us))
        .collect();
    let total_product: u64 = products.iter().sum();
    let target = (total_product + whole / 2) / whole;
    let mut slices: Vec<u64> = products.iter().map(|p| p / whole).collect();
    let mut missing = target.saturating_sub(slices.iter().sum());
    let mut order: Vec<usize> = (0..shares.len()).filter(|&i| shares[i] > 0).collect();
    order.sort_by(|&a, &b| {
        (products[b] % whole)
            .cmp(&(products[a] % whole))
            .then(a.cmp(&b))
    });
    for &index in &order {
        if missing == 0 {
            break;
        }
        slices[index] += 1;
        missing -= 1;
    }
    // Each slice is at most the period, which is a u32.
    slices
        .into_iter()
        .map(|s| u32::try_from(s).unwrap_or(period_us))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pct(p: u32) -> Share {
        Share::from_percent(p).unwrap()
    }

    fn weighted(w: u32, id: &str) -> InstanceSchedule {
        InstanceSchedule::new(id).with_weight(Weight::new(w).unwrap())
    }

    fn shares(plan: &Plan) -> Vec<u32> {
        plan.instances.iter().map(|i| i.share.ppm()).collect()
    }

    #[test]
    fn weights_split_the_parent() {
        let parent = ParentSchedule::new("p");
        let plan = Plan::compute(
            &parent,
            &[weighted(100, "a"), weighted(300, "b")],
            Busy::All,
        )
        .unwrap();
        assert_eq!(shares(&plan), [250_000, 750_000]);
        assert_eq!(plan.instances[0].slice_us, 25_000);
        assert_eq!(plan.instances[1].slice_us, 75_000);
        assert_eq!(plan.unallocated(), Share::ZERO);
    }

    #[test]
    fn thirds_round_to_an_exact_whole() {
        let parent = ParentSchedule::new("p").with_period_us(10_000);
        let ids = [weighted(100, "a"), weighted(100, "b"), weighted(100, "c")];
        let plan = Plan::compute(&parent, &ids, Busy::All).unwrap();
        assert_eq!(shares(&plan), [333_334, 333_333, 333_333]);
        let slices: Vec<u32> = plan.instances.iter().map(|i| i.slice_us).collect();
        assert_eq!(slices, [3_334, 3_333, 3_333]);
    }

    #[test]
    fn guarantee_comes_before_weight() {
        let parent = ParentSchedule::new("p");
        let a = weighted(100, "a").with_min_share(pct(60));
        let plan = Plan::compute(&parent, &[a, weighted(300, "b")], Busy::All).unwrap();
        // By weight a would get 25%; its guarantee lifts it to 60% and b gets the rest.
        assert_eq!(shares(&plan), [600_000, 400_000]);
    }

    #[test]
    fn cap_time_flows_to_the_others_by_weight() {
        let parent = ParentSchedule::new("p");
        let a = weighted(800, "a").with_max_share(pct(20));
        let plan = Plan::compute(
            &parent,
            &[a, weighted(100, "b"), weighted(300, "c")],
            Busy::All,
        )
        .unwrap();
        assert_eq!(shares(&plan), [200_000, 200_000, 600_000]);
    }

    #[test]
    fn all_capped_leaves_time_unallocated() {
        let parent = ParentSchedule::new("p");
        let a = weighted(100, "a").with_max_share(pct(30));
        let b = weighted(100, "b").with_max_share(pct(20));
        let plan = Plan::compute(&parent, &[a, b], Busy::All).unwrap();
        assert_eq!(shares(&plan), [300_000, 200_000]);
        assert_eq!(plan.unallocated(), pct(50));
    }

    #[test]
    fn weighted_gives_idle_time_away() {
        let parent = ParentSchedule::new("p");
        let busy = [InstanceId::from("b")];
        let a = weighted(100, "a").with_min_share(pct(50));
        let plan = Plan::compute(&parent, &[a, weighted(100, "b")], Busy::Only(&busy)).unwrap();
        assert_eq!(shares(&plan), [0, 1_000_000]);
        assert!(!plan.instances[0].busy);
        assert_eq!(plan.used_by_busy(), Share::WHOLE);
    }

    #[test]
    fn fixed_share_keeps_idle_time() {
        let parent = ParentSchedule::new("p").with_policy(Policy::FixedShare);
        let busy = [InstanceId::from("b")];
        let plan = Plan::compute(
            &parent,
            &[weighted(300, "a"), weighted(100, "b")],
            Busy::Only(&busy),
        )
        .unwrap();
        assert_eq!(shares(&plan), [750_000, 250_000]);
        assert_eq!(plan.used_by_busy(), pct(25));
    }

    #[test]
    fn equal_policies_ignore_weights() {
        let instances = [weighted(300, "a"), weighted(100, "b")];
        let busy = [InstanceId::from("a")];
        let best = Plan::compute(
            &ParentSchedule::new("p").with_policy(Policy::BestEffort),
            &instances,
            Busy::Only(&busy),
        )
        .unwrap();
        assert_eq!(shares(&best), [1_000_000, 0]);
        let equal = Plan::compute(
            &ParentSchedule::new("p").with_policy(Policy::EqualShare),
            &instances,
            Busy::Only(&busy),
        )
        .unwrap();
        assert_eq!(shares(&equal), [500_000, 500_000]);
    }

    #[test]
    fn no_instances_and_no_busy_instances() {
        let parent = ParentSchedule::new("p");
        let plan = Plan::compute(&parent, &[], Busy::All).unwrap();
        assert!(plan.instances.is_empty());
        assert_eq!(plan.unallocated(), Share::WHOLE);
        let plan = Plan::compute(&parent, &[weighted(5, "a")], Busy::Only(&[])).unwrap();
        assert_eq!(shares(&plan), [0]);
        assert_eq!(plan.instances[0].slice_us, 0);
    }

    #[test]
    fn refuses_what_admission_refuses() {
        let parent = ParentSchedule::new("0000:3b:00.0");
        let a = weighted(100, "a").with_min_share(pct(50));
        let b = weighted(100, "b").with_min_share(pct(70));
        let err = Plan::compute(&parent, &[a, b], Busy::All).unwrap_err();
        assert!(matches!(err, ModelError::GuaranteesExceedWhole { .. }));
    }

    #[test]
    fn extreme_weights_still_sum_exactly() {
        let parent = ParentSchedule::new("p").with_period_us(1_000);
        let mut instances: Vec<InstanceSchedule> =
            (0..63).map(|i| weighted(1, &format!("s{i}"))).collect();
        instances.push(weighted(10_000, "big"));
        let plan = Plan::compute(&parent, &instances, Busy::All).unwrap();
        assert_eq!(shares(&plan).iter().sum::<u32>(), PPM_PER_WHOLE);
        assert_eq!(
            plan.instances.iter().map(|i| i.slice_us).sum::<u32>(),
            1_000
        );
        assert!(plan.instances[63].share.ppm() > 990_000);
    }
}
