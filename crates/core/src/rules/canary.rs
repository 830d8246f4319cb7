//! The canary: work proven to flow end to end, queue by queue.
//!
//! The plugin's `overseer_canary` DAG runs one trivial task on each queue;
//! [`crate::airflow::canary`] reads its task instances and judges them (its table of
//! what each state of the canary means). This rule takes that judgement into
//! the verdict: a canary that failed, or waited for a worker longer than
//! `canary_max_pickup`, is a finding; a canary that cannot run makes an
//! executor that would read `healthy` read `unknown`, and so does a canary
//! that stopped running (its latest run three of its periods old), blaming
//! the scheduler when none is alive. Each pickup is counted
//! once in the executor's stats, however many polls see it.

use std::time::Duration;

use super::{Found, Poll, Rule};
use crate::airflow::canary::PickupsSeen;

/// How long a queued canary may wait for a worker, by default.
pub const DEFAULT_MAX_PICKUP: Duration = Duration::from_secs(120);

/// The rule, with its limit and the pickups it counted.
#[derive(Debug, Default)]
pub struct Canary {
    /// How long a queued canary may wait for a worker (`ZERO`: never judged).
    max_pickup: Duration,
    /// The canaries whose pickup was counted.
    pickups: PickupsSeen,
}

impl Canary {
    /// A canary queued longer than `max_pickup` is a finding (`ZERO`: never).
    pub fn new(max_pickup: Duration) -> Self {
        Self {
            max_pickup,
            pickups: PickupsSeen::default(),
        }
    }
}

impl Rule for Canary {
    fn judge(&mut self, poll: &mut Poll<'_>, found: &mut Found) {
        let Some(airflow) = poll.airflow else {
            return;
        };
        let Some(read) = airflow.snapshot.canary.as_ref() else {
            return;
        };
        let pickups = self.pickups.new_pickups(read, airflow.index);
        if let Some(stats) = poll.stats {
            stats.observe_pickups(pickups);
        }
        // Airflow's live schedulers, as the capacity's read counted them.
        let schedulers = airflow.snapshot.capacity.as_ref().map(|c| c.schedulers);
        let Some(judged) =
            read.for_executor(airflow.index, airflow.default, self.max_pickup, schedulers)
        else {
            return;
        };
        // Its findings stand beside the other rules' whatever they named:
        // the canary judges its own task instances over its own clock, and a
        // cause that clears before the canary recovers (a worker for the queue
        // that cannot run tasks) must not leave a moment that reads healthy.
        found.findings.extend(judged.findings);
        found.blind = found.blind.take().or(judged.blind);
        poll.detail.canary = Some(judged.detail);
    }
}
