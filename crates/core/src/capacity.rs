//! Capacity: an executor whose slots are all taken while work waits.
//!
//! Airflow's `[core] parallelism` caps each scheduler's executor: at the cap,
//! tasks sit in `scheduled` and nothing is unhealthy anywhere. Each refresh
//! counts, per executor, its task instances `running` and `queued` (the slots
//! taken) and `scheduled` (waiting for one), and the live schedulers (`job`
//! rows of `SchedulerJob`, `running`, heartbeating within the scheduler's
//! threshold): an executor has `parallelism × live schedulers` slots.
//!
//! Every slot taken while tasks wait in `scheduled`, for `max_at_capacity`
//! (default 5 min), is a finding: `at capacity: 2 of 2 slots taken
//! (parallelism 2 × 1 scheduler) for 30s, tasks waiting in scheduled`. The
//! counts that tick (how many run, how many wait) are in the detail.
//!
//! One statement per refresh for the task instances (grouped by `executor` and
//! `state`, on Airflow's `ti_state` index) and one for the schedulers. Each
//! row is routed as Airflow's scheduler routes it ([`Routes`], teams aside: a
//! team's tasks that name no executor count for the default one).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, Statement};
use tokio::time::Instant;

use crate::detail::CapacityDetail;
use crate::duration;
use crate::error::Result;
use crate::queued::Routes;

/// How long every slot may stay taken while tasks wait, by default.
pub const DEFAULT_MAX_AT_CAPACITY: Duration = Duration::from_secs(300);

/// Airflow's `[core] parallelism` by default.
pub const DEFAULT_PARALLELISM: u32 = 32;

/// One read: per executor index, its counts; and the live schedulers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapacityRead {
    /// `SchedulerJob` rows running and heartbeating within the threshold.
    pub schedulers: u32,
    /// `(owner, state, count)`: `owner` as [`Routes::route`] says.
    pub counts: Vec<(Option<usize>, String, u64)>,
}

impl CapacityRead {
    /// The detail of the executor at `index` with `parallelism` slots per scheduler.
    pub fn for_executor(&self, index: usize, parallelism: u32) -> CapacityDetail {
        let count = |state: &str| {
            self.counts
                .iter()
                .filter(|(owner, s, _)| *owner == Some(index) && s == state)
                .map(|(_, _, n)| n)
                .sum()
        };
        CapacityDetail {
            slots: u64::from(parallelism) * u64::from(self.schedulers),
            parallelism,
            schedulers: self.schedulers,
            running: count("running"),
            queued: count("queued"),
            scheduled: count("scheduled"),
        }
    }
}

/// What one executor's actor remembers: since when every slot is taken.
#[derive(Debug, Default)]
pub struct CapacityWatch {
    full_since: Option<Instant>,
}

impl CapacityWatch {
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

/// Counts the task instances running, queued and scheduled per executor, and
/// the schedulers heartbeating within `scheduler_threshold` of `now`.
pub async fn read(
    db: &impl ConnectionTrait,
    routes: &Routes,
    scheduler_threshold: Duration,
    now: DateTime<Utc>,
) -> Result<CapacityRead> {
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT executor, state, COUNT(*) AS n FROM task_instance \
             WHERE state IN ('running', 'queued', 'scheduled') GROUP BY executor, state"
                .to_owned(),
        ))
        .await?;
    let mut counts = Vec::with_capacity(rows.len());
    for row in rows {
        let executor: Option<String> = row.try_get("", "executor")?;
        let state: String = row.try_get("", "state")?;
        let n: i64 = row.try_get("", "n")?;
        counts.push((
            routes.route(executor.as_deref(), None),
            state,
            n.max(0).unsigned_abs(),
        ));
    }
    let cutoff = crate::duration::before(now, scheduler_threshold);
    let schedulers = db
        .query_one_raw(Statement::from_string(
            backend,
            format!(
                "SELECT COUNT(*) AS n FROM job WHERE job_type = 'SchedulerJob' \
                 AND state = 'running' AND latest_heartbeat > {}",
                crate::storage::timestamp_literal(backend, cutoff)
            ),
        ))
        .await?
        .map(|row| row.try_get::<i64>("", "n"))
        .transpose()?
        .unwrap_or(0);
    Ok(CapacityRead {
        schedulers: u32::try_from(schedulers.max(0)).unwrap_or(u32::MAX),
        counts,
    })
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

    #[test]
    fn each_executor_counts_its_own_rows_against_parallelism_times_schedulers() {
        let read = CapacityRead {
            schedulers: 2,
            counts: vec![
                (Some(0), "running".into(), 3),
                (Some(0), "running".into(), 2),
                (Some(0), "queued".into(), 1),
                (Some(1), "scheduled".into(), 9),
                (Some(0), "scheduled".into(), 4),
                (None, "running".into(), 50),
            ],
        };
        assert_eq!(
            read.for_executor(0, 32),
            CapacityDetail {
                slots: 64,
                parallelism: 32,
                schedulers: 2,
                running: 5,
                queued: 1,
                scheduled: 4,
            }
        );
        assert_eq!(read.for_executor(1, 32).scheduled, 9);
    }
}
