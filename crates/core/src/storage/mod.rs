//! Reading and writing job rows: plain async functions over a connection.
//!
//! Nothing here knows of actors, HTTP or the history; callers own the
//! connection and decide when to call. Each function issues a fixed number of
//! statements. What is public is what the service calls: verdicts are written
//! with the history, at once ([`crate::history::flush_with_history`]); tests
//! call that same path, and read and write rows through the entity
//! ([`crate::entity::job`]) like any other reader of the table.
//!
//! - [`write`](self#functions): registering, heartbeats and verdicts, ending rows.
//! - `read`: what a report needs, a session's rows, Airflow's running jobs.
//! - `sql`: the SQL helpers both use, and the history's statements too
//!   (times cut to the microsecond, JSON parameters, times as each backend
//!   reads them, snapshots).
//!
//! What a flush writes, and what `executor_health_checked_at` means:
//!
//! | statement | rows | sets |
//! | --- | --- | --- |
//! | the heartbeat (always) | every open row of this session | `latest_heartbeat = now`, and `executor_health_checked_at = now` where a verdict was written |
//! | the verdicts (when any changed) | only the rows whose verdict (health or reason) changed | `executor_health`, `executor_health_reason`, `executor_health_checked_at` = when the verdict was made |
//! | the transitions (when any state changed) | one new `overseer_executor_history` row per change of state, one `INSERT` | see [`crate::history`], which writes them in the flush's transaction |
//! | the prune (at most once an hour) | `overseer_executor_history` rows older than the retention | deleted |
//!
//! So `executor_health_checked_at` is the last time this process stood behind
//! the verdict: the moment it was made, then the time of every heartbeat while
//! it holds. An unchanged verdict costs no statement of its own, and its
//! `checked_at` is never older than the row's heartbeat.

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, Condition};

use crate::entity::job::Column;
use crate::job::JobType;

mod read;
mod sql;
mod write;

pub use read::{RowsRead, check_schema, read_for_report, report_rows, running_jobs, session_rows};
pub(crate) use sql::{json_statement, timestamp_literal, timestamp_text, to_micros};
pub(crate) use write::heartbeats_and_verdicts;
pub use write::{Flushed, OpenRow, VerdictRow, close_crashed, finish, open_rows, register};

/// The rows one Overseer process owns: its executor rows carry its host, its
/// user and its exact start time, which no other process shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// `job.hostname` of the supervising process.
    pub hostname: String,
    /// `job.unixname`: the user it runs as.
    pub unixname: String,
    /// `job.start_date` of every row it inserts, to the microsecond.
    pub started: DateTime<Utc>,
}

impl Session {
    /// A session starting now.
    pub fn start(hostname: impl Into<String>, unixname: impl Into<String>) -> Self {
        Self {
            hostname: hostname.into(),
            unixname: unixname.into(),
            started: to_micros(Utc::now()),
        }
    }

    /// The filter that selects this session's open executor rows.
    pub(super) fn rows(&self) -> Condition {
        self.owns().add(Column::EndDate.is_null())
    }

    /// The filter that selects this session's rows, ended or not. Each column
    /// is also tested for `NULL`, so that the condition is never `NULL` itself
    /// and its negation selects every other row, whatever they hold.
    pub(super) fn owns(&self) -> Condition {
        Condition::all()
            .add(Column::JobType.is_not_null())
            .add(Column::JobType.eq(JobType::ExecutorJob.as_str()))
            .add(Column::Hostname.is_not_null())
            .add(Column::Hostname.eq(self.hostname.as_str()))
            .add(Column::Unixname.is_not_null())
            .add(Column::Unixname.eq(self.unixname.as_str()))
            .add(Column::StartDate.is_not_null())
            .add(Column::StartDate.eq(self.started))
    }
}

/// An executor's identity in the job table: its class and its instance. Its
/// rows (one per host and session) carry it; the counters of
/// [`crate::Overseer::executor_stats`] are keyed by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExecutorIdentity {
    /// `job.executor_class`: the executor's configured name.
    pub executor_class: String,
    /// `job.executor_instance`: what it watches (for Celery, the broker).
    pub instance: Option<String>,
}

impl ExecutorIdentity {
    /// The identity of `executor_class` watching `instance`.
    pub fn new(executor_class: impl Into<String>, instance: Option<String>) -> Self {
        Self {
            executor_class: executor_class.into(),
            instance,
        }
    }

    /// `class` or `class @ instance`, for logs.
    pub fn label(&self) -> String {
        match &self.instance {
            Some(instance) => format!("{} @ {instance}", self.executor_class),
            None => self.executor_class.clone(),
        }
    }
}
