//! An executor at capacity: every slot taken while work waits.
//!
//! Airflow's `[core] parallelism` caps each scheduler's executor: at the cap,
//! tasks sit in `scheduled` and nothing is unhealthy anywhere. Each refresh
//! counts, per executor, its task instances `running` and `queued` (the slots
//! taken) and `scheduled` (waiting for one), and the live schedulers
//! ([`crate::airflow::capacity`], the read): an executor has `parallelism × live
//! schedulers` slots.
//!
//! Every slot taken while tasks wait in `scheduled`, for `max_at_capacity`
//! (default 5 min), is a finding: `at capacity: 2 of 2 slots taken
//! (parallelism 2 × 1 scheduler) for 30s, tasks waiting in scheduled`. The
//! counts that tick (how many run, how many wait) are in the detail.

use std::time::Duration;

use tokio::time::Instant;

use super::{Found, Poll, Rule};
use crate::detail::CapacityDetail;
use crate::duration;

/// How long every slot may stay taken while tasks wait, by default.
pub const DEFAULT_MAX_AT_CAPACITY: Duration = Duration::from_secs(300);

/// Airflow's `[core] parallelism` by default.
pub const DEFAULT_PARALLELISM: u32 = 32;

/// What one executor's actor remembers: since when every slot is taken.
#[derive(Debug, Default)]
pub struct CapacityWatch {
    /// Airflow's `[core] parallelism`: the slots per live scheduler.
    parallelism: u32,
    /// How long every slot may stay taken while tasks wait (`ZERO`: never a
    /// finding).
    max: Duration,
    full_since: Option<Instant>,
}

impl CapacityWatch {
    /// `parallelism` slots per scheduler, all taken for `max` while tasks
    /// wait: a finding (`ZERO`: never).
    pub fn new(parallelism: u32, max: Duration) -> Self {
        Self {
            parallelism,
            max,
            full_since: None,
        }
    }

    /// The finding at `now`, if every slot has been taken while tasks wait
    /// for `max` (`ZERO`: the rule is off). No live scheduler is no capacity
    /// to judge (the scheduler's own entry says it is down).
    pub fn finding(
        &mut self,
        detail: &CapacityDetail,
        max: Duration,
        now: Instant,
    ) -> Option<String> {
        let full = detail.slots > 0
            && detail.running + detail.queued >= detail.slots
            && detail.scheduled > 0;
        if !full {
            self.full_since = None;
            return None;
        }
        let since = *self.full_since.get_or_insert(now);
        if max.is_zero() || now.saturating_duration_since(since) < max {
            return None;
        }
        let schedulers = match detail.schedulers {
            1 => "1 scheduler".to_owned(),
            n => format!("{n} schedulers"),
        };
        Some(format!(
            "at capacity: {slots} of {slots} slots taken (parallelism {} × {schedulers}) for {}, tasks waiting in scheduled",
            detail.parallelism,
            duration::age(max),
            slots = detail.slots,
        ))
    }
}

impl Rule for CapacityWatch {
    fn judge(&mut self, poll: &mut Poll<'_>, found: &mut Found) {
        let Some(read) = poll
            .airflow
            .and_then(|a| Some((a.index, a.snapshot.capacity.as_ref()?)))
        else {
            return;
        };
        let (index, read) = read;
        let detail = read.for_executor(index, self.parallelism);
        found
            .findings
            .extend(self.finding(&detail, self.max, poll.now));
        poll.detail.capacity = Some(detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(running: u64, queued: u64, scheduled: u64) -> CapacityDetail {
        CapacityDetail {
            slots: 2,
            parallelism: 2,
            schedulers: 1,
            running,
            queued,
            scheduled,
        }
    }

    #[test]
    fn every_slot_taken_while_work_waits_is_a_finding_after_the_limit_only() {
        let max = Duration::from_secs(30);
        let start = Instant::now();
        let mut watch = CapacityWatch::default();
        let at = |s: u64| start + Duration::from_secs(s);
        // Full, nothing waiting: fully used, not a fault.
        assert_eq!(watch.finding(&detail(2, 0, 0), max, at(0)), None);
        // Full with work waiting: the clock starts.
        assert_eq!(watch.finding(&detail(1, 1, 2), max, at(1)), None);
        assert_eq!(watch.finding(&detail(2, 0, 3), max, at(30)), None);
        let expected = "at capacity: 2 of 2 slots taken (parallelism 2 × 1 scheduler) for 30s, tasks waiting in scheduled";
        assert_eq!(
            watch.finding(&detail(2, 0, 2), max, at(31)).as_deref(),
            Some(expected)
        );
        // The counts tick: the reason holds still.
        assert_eq!(
            watch.finding(&detail(1, 1, 7), max, at(40)).as_deref(),
            Some(expected)
        );
        // A slot frees: the clock starts again.
        assert_eq!(watch.finding(&detail(1, 0, 7), max, at(41)), None);
        assert_eq!(watch.finding(&detail(2, 0, 7), max, at(42)), None);
        // Off, or no live scheduler: never.
        let mut off = CapacityWatch::default();
        assert_eq!(off.finding(&detail(2, 0, 2), Duration::ZERO, at(0)), None);
        assert_eq!(off.finding(&detail(2, 0, 2), Duration::ZERO, at(999)), None);
        let none = CapacityDetail {
            slots: 0,
            schedulers: 0,
            ..detail(2, 0, 2)
        };
        assert_eq!(off.finding(&none, max, at(999)), None);
    }
}
