//! The cost of a fault: when an executor's `unhealthy` span ends, how many of
//! its task instances ended `failed` or went `up_for_retry` meanwhile, read
//! from Airflow's `task_instance` table and kept on the history's transition
//! that ends the span ([`crate::history::Transition::cost`]).
//!
//! - **When.** The aggregator queues the transition out of `unhealthy` with
//!   the span it ends ([`Span`]: the executor, and when the span began); the
//!   flush that writes it counts first ([`read`], one statement, bounded by
//!   [`READ_TIMEOUT`], the flush's counts together by [`FLUSH_BUDGET`] and
//!   ended by the first that fails), outside the verdicts' transaction, so a
//!   slow count, or thousands of spans ending at once, never hold a
//!   heartbeat's write past its timeout. A count that fails or times out
//!   (Overseer's own SQLite has no `task_instance`) leaves `cost` null: not
//!   counted, never zero by default.
//! - **What.** Task instances whose state is `failed` or `up_for_retry` and
//!   whose `end_date` falls in the span, each routed to the executor that runs
//!   it as the queued task instances are ([`Routes`]). The state is the one
//!   at the span's end: a task instance that went `up_for_retry` and was
//!   retried with success before the executor recovered is not counted; one
//!   the scheduler marks failed after the recovery is not either.
//! - **Cost.** The statement filters on `state` (the `ti_state` index) and the
//!   span's `end_date`: its work grows with the task instances in those two
//!   states, and it runs once per recovery, not per refresh.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::airflow::queued::{cutoff_literal, team_join};
use crate::airflow::routes::Routes;
use crate::error::Result;

/// How long the count may take before the transition is written without it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the counts of one flush may take together: well inside the
/// flush's write timeout (two heartbeat intervals, at least a second), so a
/// flush that ends many spans at once is never failed by its counts.
pub const FLUSH_BUDGET: Duration = Duration::from_millis(500);

/// What an `unhealthy` span cost its executor: task instances that ended
/// `failed` or went `up_for_retry` while it lasted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FaultCost {
    /// Task instances that ended `failed`.
    pub failed: u64,
    /// Task instances that went `up_for_retry`.
    pub up_for_retry: u64,
}

impl FaultCost {
    /// `2 task instances failed, 1 went up_for_retry`, as logs and alerts say
    /// it; `no task instance failed` when none did.
    pub fn describe(&self) -> String {
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        match (self.failed, self.up_for_retry) {
            (0, 0) => "no task instance failed".to_owned(),
            (failed, 0) => format!("{failed} task instance{} failed", plural(failed)),
            (0, retry) => format!("{retry} task instance{} went up_for_retry", plural(retry)),
            (failed, retry) => format!(
                "{failed} task instance{} failed, {retry} went up_for_retry",
                plural(failed)
            ),
        }
    }
}

/// The `unhealthy` span a transition ends: its executor (the index Overseer
/// supervises it at) and when the span began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The executor's index, as [`Routes`] routes task instances to it.
    pub executor: usize,
    /// When the executor turned `unhealthy`.
    pub from: DateTime<Utc>,
}

/// Counts the task instances executor `span.executor` lost between
/// `span.from` and `to` (one statement).
pub async fn read(
    db: &impl ConnectionTrait,
    routes: &Routes,
    span: Span,
    to: DateTime<Utc>,
) -> Result<FaultCost> {
    let backend = db.get_database_backend();
    let by_team = routes.by_team();
    let rows = db
        .query_all_raw(Statement::from_string(
            backend,
            query(backend, span.from, to, by_team),
        ))
        .await?;
    let mut cost = FaultCost::default();
    for row in rows {
        let executor: Option<String> = row.try_get("", "executor")?;
        let team: Option<String> = if by_team {
            row.try_get("", "team")?
        } else {
            None
        };
        if routes.route(executor.as_deref(), team.as_deref()) != Some(span.executor) {
            continue;
        }
        let state: String = row.try_get("", "state")?;
        let n = row.try_get::<i64>("", "n")?.max(0).unsigned_abs();
        match state.as_str() {
            "failed" => cost.failed += n,
            _ => cost.up_for_retry += n,
        }
    }
    Ok(cost)
}

/// The one statement: task instances `failed` or `up_for_retry` that ended
/// between `from` and `to`, counted by `executor` and state (and team, when
/// executors have teams: the join the queued task instances' read makes).
pub fn query(backend: DbBackend, from: DateTime<Utc>, to: DateTime<Utc>, by_team: bool) -> String {
    let (team, join, by) = team_join(by_team);
    format!(
        "SELECT ti.executor AS executor{team}, ti.state AS state, COUNT(*) AS n \
         FROM task_instance ti{join} WHERE ti.state IN ('failed', 'up_for_retry') \
         AND ti.end_date >= {} AND ti.end_date <= {} GROUP BY ti.executor, ti.state{by}",
        cutoff_literal(backend, from),
        cutoff_literal(backend, to)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_says_what_was_lost_in_words() {
        let cost = |failed, up_for_retry| FaultCost {
            failed,
            up_for_retry,
        };
        assert_eq!(cost(0, 0).describe(), "no task instance failed");
        assert_eq!(cost(1, 0).describe(), "1 task instance failed");
        assert_eq!(cost(3, 0).describe(), "3 task instances failed");
        assert_eq!(cost(0, 2).describe(), "2 task instances went up_for_retry");
        assert_eq!(
            cost(2, 1).describe(),
            "2 task instances failed, 1 went up_for_retry"
        );
    }

    #[test]
    fn the_span_s_bounds_are_compared_as_each_backend_stores_end_date() {
        let from = DateTime::parse_from_rfc3339("2026-12-05T10:00:00.5Z")
            .unwrap()
            .to_utc();
        let to = from + chrono::Duration::seconds(30);
        let sqlite = query(DbBackend::Sqlite, from, to, false);
        assert!(
            sqlite.contains(
                "ti.end_date >= '2026-12-05 10:00:00.500000' \
                 AND ti.end_date <= '2026-12-05 10:00:30.500000'"
            ),
            "{sqlite}"
        );
        let teams = query(DbBackend::Postgres, from, to, true);
        assert!(teams.contains("JOIN dag_bundle_team"), "{teams}");
        assert!(teams.ends_with("GROUP BY ti.executor, ti.state, bt.team_name"));
    }
}
