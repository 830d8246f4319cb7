//! Queued too long: task instances Airflow holds in `queued` for the
//! executor longer than `max_queued_age` (default [`DEFAULT_MAX_QUEUED_AGE`];
//! `0s` turns it off, and the stall rule with it).
//!
//! The task instances come from Airflow's `task_instance` table
//! ([`crate::airflow::queued`]), counted overdue against the limit as they are read. A
//! queue whose task instances the lost-work rule found lost is its finding's,
//! not this one's: the reason names the cause, not the wait.
//! With them known, an executor whose check cannot tell (`unknown`: no check
//! for its kind) gets their verdict: `healthy` when none is overdue.

use std::time::Duration;

use super::{Found, Poll, Rule};
use crate::duration;

/// How long work may wait before the executor is unhealthy, by default:
/// shorter than Airflow's `[scheduler] task_queued_timeout` (10 min, after which
/// Airflow fails the task) so that the operator hears first.
pub const DEFAULT_MAX_QUEUED_AGE: Duration = Duration::from_secs(300);

/// The rule, with its limit.
#[derive(Debug)]
pub struct QueuedTooLong {
    max_age: Duration,
}

impl QueuedTooLong {
    /// Task instances queued longer than `max_age` are a finding (`ZERO`: never).
    pub fn new(max_age: Duration) -> Self {
        Self { max_age }
    }
}

impl Rule for QueuedTooLong {
    fn judge(&mut self, poll: &mut Poll<'_>, found: &mut Found) {
        if self.max_age.is_zero() {
            return;
        }
        let Some(queued) = poll.queued() else {
            return;
        };
        found.judged = true;
        found.findings.extend(
            queued
                .queues
                .iter()
                .filter(|q| q.overdue > 0 && !poll.explained.contains(&q.queue))
                .map(|q| {
                    format!(
                        "task instances queued longer than {} on queue {}",
                        duration::age(self.max_age),
                        q.queue
                    )
                }),
        );
    }
}
