//! Capacity: what Airflow's tables say of each executor's slots, read for the
//! capacity rule ([`crate::rules::capacity`]).
//!
//! Each refresh counts, per executor, its task instances `running` and
//! `queued` (the slots taken) and `scheduled` (waiting for one), and the live
//! schedulers (`job` rows of `SchedulerJob`, `running`, heartbeating within the
//! scheduler's threshold).
//!
//! One statement per refresh for the task instances (grouped by `executor` and
//! `state`, on Airflow's `ti_state` index) and one for the schedulers. Each
//! row is routed as Airflow's scheduler routes it ([`Routes`], teams aside: a
//! team's tasks that name no executor count for the default one).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, Statement};

use crate::airflow::routes::Routes;
use crate::detail::CapacityDetail;
use crate::error::Result;

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
