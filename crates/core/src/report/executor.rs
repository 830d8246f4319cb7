//! The `executor` entry: Overseer's addition to Airflow's report, one
//! instance per live executor row, of every host, with the verdict's word as
//! `job.executor_health` stores it.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::bounded::ShownDetail;
use super::{DetailedStatus, Status, optional_timestamp};
use crate::detail::Detail;
use crate::job::ExecutorHealth;
use crate::reason::Reason;

pub use crate::job::ExecutorHealthKind;

/// One live executor row: one executor, supervised from one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ExecutorInstance {
    /// As Airflow names it: `CeleryExecutor`, `alias:CeleryExecutor`.
    pub executor: Option<String>,
    /// What counts as the instance: for Celery the broker, without credentials.
    pub instance: Option<String>,
    /// The host of the supervising process.
    pub hostname: Option<String>,
    /// The team whose executor it is (Airflow 3.3's `[core] multi_team`: the
    /// executor `team_a=CeleryExecutor` is team `team_a`'s), as upstream
    /// names an instance's scope; `null` outside teams.
    pub team_name: Option<String>,
    /// The row's latest heartbeat.
    #[serde(
        rename = "latest_executor_heartbeat",
        serialize_with = "optional_timestamp"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub latest_heartbeat: Option<DateTime<Utc>>,
    /// The verdict (written as `health` and `reason`).
    #[serde(skip)]
    pub health: ExecutorHealth,
    /// The verdict's word.
    #[serde(rename = "health")]
    pub(in crate::report) health_kind: ExecutorHealthKind,
    /// Why, for `unhealthy` and `unknown`; for `healthy`, what is worth
    /// knowing all the same (a failover broker that does not answer, an edge
    /// worker gone quiet), else `null`. Never a credential.
    #[schema(value_type = Option<String>)]
    pub reason: Option<Reason>,
    /// When the verdict was made.
    #[serde(serialize_with = "optional_timestamp")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub checked_at: Option<DateTime<Utc>>,
    /// When the current state (`health`, whatever its reason) began: the
    /// latest transition into it in the history; `null` when not known (no
    /// transition recorded, or none read yet). This host's rows as the
    /// aggregator holds them; another host's as of the last full read of the
    /// table (every 10 s).
    #[serde(serialize_with = "optional_timestamp")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub since: Option<DateTime<Utc>>,
    /// The state before the current one; `null` when not known.
    pub previous: Option<ExecutorHealthKind>,
    /// The evidence of this host's latest check, whole (what `/metrics` and
    /// the paged routes read); the JSON shows [`Self::shown`].
    #[serde(skip)]
    pub detail: Option<Arc<Detail>>,
    /// The evidence of this host's latest check (queues, workers, task
    /// instances queued), each list cut to its first few, at fault first,
    /// with how many were left out; `null` for another host's row, or when the
    /// check gives none.
    #[serde(rename = "detail")]
    pub shown: Option<ShownDetail>,
    /// Left out of the entry's JSON to keep it within its budget.
    #[serde(skip)]
    pub(in crate::report) left_out: bool,
}

/// What the aggregator knows of an executor row beyond what the table holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowExtras {
    /// The evidence of this host's latest check.
    pub detail: Option<Arc<Detail>>,
    /// When the row's current state began.
    pub since: Option<DateTime<Utc>>,
    /// The state before it.
    pub previous: Option<ExecutorHealthKind>,
}

/// The `executor` entry: Overseer's addition, every supervised executor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutorEntry {
    /// `healthy` when at least one live row exists and none says `unhealthy`
    /// (`unknown` never counts as dead); `null` while no live row has been
    /// checked yet (right after a start: nothing has answered, so nothing is
    /// healthy), as Airflow writes a component it knows nothing of.
    pub status: Option<Status>,
    /// The most recent executor row's heartbeat, alive or not.
    #[serde(
        rename = "latest_executor_heartbeat",
        serialize_with = "optional_timestamp"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub latest_heartbeat: Option<DateTime<Utc>>,
    /// How the live rows are doing together: `down` when none is fine,
    /// `unknown` when none has a verdict.
    pub detailed_status: DetailedStatus,
    /// The live executor rows, of every host, by host, executor and instance;
    /// when they are too many for the entry's 16 KB, those `unhealthy` and
    /// `unknown` first (see `instances_left_out`).
    #[serde(serialize_with = "super::bounded::shown_instances")]
    pub instances: Vec<ExecutorInstance>,
    /// How many live rows the entry leaves out to stay within 16 KB (0 but
    /// with hundreds of executors; healthy ones are left out first).
    pub instances_left_out: usize,
}
