//! A scheduler that runs a plan in virtual time: the backend for parents whose driver has no
//! scheduler (the kernel's sample mdev drivers, the simulated host), and the yardstick for how
//! closely a plan can be met.
//!
//! Each period every instance has a budget: its planned time per period. Within the period the
//! order comes from stride scheduling (Waldspurger & Weihl): the instance with the lowest `pass`
//! runs for one time slice (or what is left of its budget) and advances its `pass` by the time it
//! ran divided by its tickets (its share), so the instances interleave in proportion to their
//! shares instead of running back to back. When all budgets are spent the period ends and they
//! refill, like GVT-g's credit refill but exact. Time nobody is given (all caps below 100%, or
//! the slots of idle instances under a policy that keeps them) is budgeted to an idle client, so
//! it stays unused instead of flowing to the others.

use serde::Serialize;

use crate::model::{InstanceId, InstanceSchedule, ModelError, ParentSchedule};
use crate::plan::{Busy, Plan};
use crate::report::InstanceReport;

/// The time slice when the parent sets none: 1 ms, GVT-g's scheduling tick.
pub const DEFAULT_TIME_SLICE_US: u32 = 1_000;

/// `pass` advances by `STRIDE_ONE / tickets` per µs run. Tickets are ppm (at most 10⁶ ≈ 2²⁰),
/// so a stride keeps about 44 significant bits.
const STRIDE_ONE: u128 = 1 << 64;

/// One contiguous run on the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Run {
    /// Index of the instance in the plan whose slot this is, `None` for unallocated time.
    pub instance: Option<usize>,
    /// Whether the instance uses the time; `false` for the kept slot of an idle instance
    /// (policies that are not work-conserving) and for unallocated time.
    pub used: bool,
    /// Start, µs of virtual time.
    pub start_us: u64,
    /// Length in µs.
    pub len_us: u64,
}

/// Run time per instance over a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// The window's length in µs.
    pub window_us: u64,
    /// µs each instance ran, in the plan's order.
    pub ran_us: Vec<u64>,
    /// µs nobody ran.
    pub idle_us: u64,
}

impl Usage {
    /// The share instance `index` achieved, 0.0..=1.0.
    pub fn achieved(&self, index: usize) -> f64 {
        match (self.ran_us.get(index), self.window_us) {
            (Some(ran), window) if window > 0 => *ran as f64 / window as f64,
            _ => 0.0,
        }
    }
}

#[derive(Debug, Clone)]
struct Client {
    stride: u128,
    pass: u128,
    budget_us: u64,
    left_us: u64,
    /// Whether its time is used (a busy instance) or lost (idle slot, unallocated time).
    runs: bool,
}

/// The per-period budgets and stride order of one plan.
#[derive(Debug, Clone)]
struct Budgets {
    /// One per instance of the plan, then the idle client.
    clients: Vec<Client>,
    time_slice_us: u64,
}

impl Budgets {
    fn new(plan: &Plan) -> Self {
        let instances = plan.instances.len();
        let used: u64 = plan.instances.iter().map(|i| u64::from(i.slice_us)).sum();
        let idle_us = u64::from(plan.period_us).saturating_sub(used);
        let mut clients: Vec<Client> = plan
            .instances
            .iter()
            .map(|i| (i.share.ppm(), u64::from(i.slice_us), i.busy))
            .chain(std::iter::once((plan.unallocated().ppm(), idle_us, false)))
            .map(|(tickets, budget_us, runs)| Client {
                // A client with budget but no tickets (rounding) still needs a finite stride.
                stride: STRIDE_ONE / u128::from(tickets.max(1)),
                pass: 0,
                budget_us,
                left_us: budget_us,
                runs,
            })
            .collect();
        debug_assert_eq!(clients.len(), instances + 1);
        if clients.iter().all(|c| c.budget_us == 0) {
            // An empty plan of zero length cannot advance time; give it all to idle.
            if let Some(idle) = clients.last_mut() {
                idle.budget_us = u64::from(plan.period_us);
                idle.left_us = idle.budget_us;
            }
        }
        Self {
            clients,
            time_slice_us: u64::from(plan.time_slice_us.unwrap_or(DEFAULT_TIME_SLICE_US)),
        }
    }

    fn refill(&mut self) {
        for client in &mut self.clients {
            client.left_us = client.budget_us;
            client.pass = 0;
        }
    }

    /// The next run of at most `limit_us`: (client index, length). Refills at period end.
    fn next(&mut self, limit_us: u64) -> (usize, u64) {
        if self.clients.iter().all(|c| c.left_us == 0) {
            self.refill();
        }
        let chosen = self
            .clients
            .iter()
            .enumerate()
            .filter(|(_, c)| c.left_us > 0)
            // Lowest pass; ties go to the earlier client so runs are deterministic.
            .min_by(|a, b| a.1.pass.cmp(&b.1.pass).then(a.0.cmp(&b.0)))
            .map(|(index, _)| index)
            // `refill` left at least one budget above zero (see `new`).
            .unwrap_or(self.clients.len() - 1);
        let client = &mut self.clients[chosen];
        let len_us = self.time_slice_us.min(client.left_us).min(limit_us);
        client.left_us -= len_us;
        client.pass += client.stride * u128::from(len_us);
        (chosen, len_us)
    }
}

/// The runs of one period of a plan, from its start: what the timeline picture shows.
pub fn period_runs(plan: &Plan) -> Vec<Run> {
    let mut budgets = Budgets::new(plan);
    let mut runs: Vec<Run> = Vec::new();
    let mut now = 0;
    let period = u64::from(plan.period_us);
    while now < period {
        let (client, len_us) = budgets.next(period - now);
        if len_us == 0 {
            // Only a hand-built plan without any budget gets here; stop rather than spin.
            break;
        }
        let instance = (client < plan.instances.len()).then_some(client);
        let used = budgets.clients[client].runs;
        match runs.last_mut() {
            Some(last) if last.instance == instance && last.used == used => last.len_us += len_us,
            _ => runs.push(Run {
                instance,
                used,
                start_us: now,
                len_us,
            }),
        }
        now += len_us;
    }
    runs
}

/// Runs a parent's plan in virtual time.
#[derive(Debug, Clone)]
pub struct SoftwareScheduler {
    parent: ParentSchedule,
    instances: Vec<InstanceSchedule>,
    busy: Vec<bool>,
    plan: Plan,
    budgets: Budgets,
    now_us: u64,
    window_start_us: u64,
    ran_us: Vec<u64>,
    idle_us: u64,
}

/// Refusals of the software scheduler.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SoftwareError {
    /// The settings fail admission control.
    #[error("cannot schedule parent {parent}")]
    Settings {
        /// The parent.
        parent: String,
        /// Why.
        #[source]
        source: ModelError,
    },
    /// An instance the scheduler does not run.
    #[error("instance {instance} is not scheduled on {parent}")]
    UnknownInstance {
        /// The parent.
        parent: String,
        /// The instance.
        instance: InstanceId,
    },
}

impl SoftwareScheduler {
    /// A scheduler for a parent's instances, all busy at first.
    pub fn new(
        parent: ParentSchedule,
        instances: Vec<InstanceSchedule>,
    ) -> Result<Self, SoftwareError> {
        let plan = Plan::compute(&parent, &instances, Busy::All).map_err(|source| {
            SoftwareError::Settings {
                parent: parent.parent.clone(),
                source,
            }
        })?;
        let count = instances.len();
        Ok(Self {
            budgets: Budgets::new(&plan),
            parent,
            instances,
            busy: vec![true; count],
            plan,
            now_us: 0,
            window_start_us: 0,
            ran_us: vec![0; count],
            idle_us: 0,
        })
    }

    /// The plan being run.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Virtual time now, µs.
    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// Marks an instance busy or idle and re-plans (the plan's shares depend on who is busy).
    /// A new period starts at once, so the new plan is met from now on.
    pub fn set_busy(&mut self, id: &InstanceId, busy: bool) -> Result<(), SoftwareError> {
        let index = self
            .instances
            .iter()
            .position(|instance| &instance.id == id)
            .ok_or_else(|| SoftwareError::UnknownInstance {
                parent: self.parent.parent.clone(),
                instance: id.clone(),
            })?;
        if self.busy[index] == busy {
            return Ok(());
        }
        self.busy[index] = busy;
        let busy_ids: Vec<InstanceId> = self
            .instances
            .iter()
            .zip(&self.busy)
            .filter(|(_, busy)| **busy)
            .map(|(instance, _)| instance.id.clone())
            .collect();
        self.plan = Plan::compute(&self.parent, &self.instances, Busy::Only(&busy_ids)).map_err(
            |source| SoftwareError::Settings {
                parent: self.parent.parent.clone(),
                source,
            },
        )?;
        self.budgets = Budgets::new(&self.plan);
        Ok(())
    }

    /// Runs for `duration_us` of virtual time.
    pub fn run_for(&mut self, duration_us: u64) {
        let end = self.now_us + duration_us;
        while self.now_us < end {
            let (client, len_us) = self.budgets.next(end - self.now_us);
            if len_us == 0 {
                // Plans from `Plan::compute` always budget the whole period; never spin.
                break;
            }
            if self.budgets.clients[client].runs {
                self.ran_us[client] += len_us;
            } else {
                self.idle_us += len_us;
            }
            self.now_us += len_us;
        }
    }

    /// Run time since the last call (or the start) and starts a new window.
    pub fn take_usage(&mut self) -> Usage {
        let usage = Usage {
            window_us: self.now_us - self.window_start_us,
            ran_us: std::mem::replace(&mut self.ran_us, vec![0; self.instances.len()]),
            idle_us: std::mem::take(&mut self.idle_us),
        };
        self.window_start_us = self.now_us;
        usage
    }

    /// The report for every instance: the software scheduler enforces its plan exactly.
    pub fn report(&self) -> Vec<InstanceReport> {
        self.plan
            .instances
            .iter()
            .map(|planned| InstanceReport {
                id: planned.id.clone(),
                requested: planned.share,
                effective: planned.share,
                enforced: true,
                note: format!(
                    "software scheduler: {} µs per {} µs period",
                    planned.slice_us, self.plan.period_us
                ),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Policy;
    use crate::share::{Share, Weight};

    fn weighted(w: u32, id: &str) -> InstanceSchedule {
        InstanceSchedule::new(id).with_weight(Weight::new(w).unwrap())
    }

    #[test]
    fn achieved_shares_follow_the_weights() {
        let parent = ParentSchedule::new("mtty");
        let mut scheduler =
            SoftwareScheduler::new(parent, vec![weighted(100, "a"), weighted(300, "b")]).unwrap();
        scheduler.run_for(1_000_000);
        let usage = scheduler.take_usage();
        assert_eq!(usage.window_us, 1_000_000);
        assert_eq!(usage.ran_us, [250_000, 750_000]);
        assert_eq!(usage.idle_us, 0);
    }

    #[test]
    fn idle_instances_give_way_under_weighted() {
        let parent = ParentSchedule::new("mtty");
        let mut scheduler =
            SoftwareScheduler::new(parent, vec![weighted(100, "a"), weighted(300, "b")]).unwrap();
        scheduler.set_busy(&"b".into(), false).unwrap();
        scheduler.run_for(500_000);
        let usage = scheduler.take_usage();
        assert_eq!(usage.ran_us, [500_000, 0]);
        assert!(matches!(
            scheduler.set_busy(&"zz".into(), false),
            Err(SoftwareError::UnknownInstance { .. })
        ));
    }

    #[test]
    fn idle_slots_stay_unused_under_fixed_share() {
        let parent = ParentSchedule::new("mtty").with_policy(Policy::FixedShare);
        let mut scheduler =
            SoftwareScheduler::new(parent, vec![weighted(100, "a"), weighted(300, "b")]).unwrap();
        scheduler.set_busy(&"b".into(), false).unwrap();
        scheduler.run_for(1_000_000);
        let usage = scheduler.take_usage();
        assert_eq!(usage.ran_us, [250_000, 0]);
        assert_eq!(usage.idle_us, 750_000);
    }

    #[test]
    fn caps_leave_idle_time() {
        let parent = ParentSchedule::new("mtty").with_time_slice_us(500);
        let capped = weighted(100, "a").with_max_share(Share::from_percent(30).unwrap());
        let mut scheduler = SoftwareScheduler::new(parent, vec![capped]).unwrap();
        let runs = period_runs(scheduler.plan());
        let ran: u64 = runs
            .iter()
            .filter(|r| r.instance == Some(0) && r.used)
            .map(|r| r.len_us)
            .sum();
        assert_eq!(ran, 30_000);
        // Runs tile the period without gaps or overlaps.
        let mut at = 0;
        for run in &runs {
            assert_eq!(run.start_us, at);
            at += run.len_us;
        }
        assert_eq!(at, 100_000);
        scheduler.run_for(250_000);
        let usage = scheduler.take_usage();
        assert_eq!(usage.ran_us, [75_000]);
        assert_eq!(usage.idle_us, 175_000);
        assert!(scheduler.report().iter().all(|r| r.enforced));
    }

    #[test]
    fn runs_interleave_by_share() {
        let parent = ParentSchedule::new("mtty").with_period_us(10_000);
        let scheduler =
            SoftwareScheduler::new(parent, vec![weighted(100, "a"), weighted(100, "b")]).unwrap();
        let order: Vec<Option<usize>> = period_runs(scheduler.plan())
            .iter()
            .map(|r| r.instance)
            .collect();
        assert_eq!(order.len(), 10, "1 ms slices alternate: {order:?}");
        assert!(order.windows(2).all(|w| w[0] != w[1]));
    }

    #[test]
    fn settings_are_checked() {
        let parent = ParentSchedule::new("mtty");
        let a = weighted(100, "a").with_min_share(Share::from_percent(80).unwrap());
        let b = weighted(100, "b").with_min_share(Share::from_percent(80).unwrap());
        let err = SoftwareScheduler::new(parent, vec![a, b]).unwrap_err();
        assert_eq!(err.to_string(), "cannot schedule parent mtty");
    }
}
