//! The history of verdict states: every time an executor's verdict went from
//! one state (`healthy`, `unhealthy`, `unknown`) to another, kept in Overseer's
//! own table, `overseer_executor_history` ([`crate::entity::history`]).
//!
//! - **Where a transition is seen.** The aggregator holds each of this host's
//!   verdicts; a new verdict whose *state* differs from the one the history
//!   knows for the row queues a [`Transition`]: the executor, instance, host,
//!   both states, the new reason, and when the new verdict was made. A new
//!   reason while the row stays `unhealthy` (a change of cause) queues one too,
//!   from `unhealthy` to `unhealthy`: it begins no state, so the reads of a
//!   row's latest state ([`latest`], [`left_by_earlier_runs`]) pass over it.
//! - **Written with the verdict.** The queue is written by the aggregator's
//!   flush, one multi-row `INSERT` in the same transaction as the verdict it
//!   records ([`flush_with_history`], over [`crate::storage`]'s statements). A flush that fails keeps the queue, so a
//!   transition made while the database is away is written when it returns.
//!   The queue holds at most [`MAX_PENDING`] (the oldest go first, counted in
//!   `AggregatorStats::transitions_dropped`, on `/metrics` as
//!   `overseer_history_transitions_dropped_total`); it outlives an aggregator
//!   that stops or panics, and the one started in its place writes it.
//! - **Since when.** The report's `since` and `previous` for each executor
//!   instance come from the aggregator for this host's rows (the latest
//!   transition read back at start, then each one it makes), and for other
//!   hosts' rows from the latest transition of each row, read at every full
//!   read (every [`crate::actors::aggregator::FULL_READ_EVERY`], one statement).
//! - **Pruned.** Rows older than [`HistorySettings::retention`] are deleted by
//!   a flush at most once every [`HistorySettings::prune_every`] (one
//!   statement); a zero retention keeps every row.
//! - **Read.** [`HistoryReader`] answers `GET /api/v2/monitor/health/history`:
//!   a small pool of its own, each read bounded by [`READ_TIMEOUT`].
//!
//! The writing (the flush's part, the cost counted first, the prune) is in
//! `write`; this module reads.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, Statement,
};
use serde::{Serialize, Serializer};
use utoipa::ToSchema;

use crate::airflow::cost::FaultCost;
use crate::entity::history::{self, Column, Entity as History};
use crate::error::{Error, Result};
use crate::job::ExecutorHealthKind;
use crate::storage::to_micros;
use crate::timestamp::airflow_timestamp;

mod write;

pub use write::{HistoryWrite, flush_with_history, prune};

/// The table's name.
pub const TABLE: &str = "overseer_executor_history";

/// Every column of a row, as the raw reads select them from `h`.
const COLUMNS: &str = "h.id, h.executor, h.instance, h.hostname, h.from_health, h.to_health, \
                       h.reason, h.at, h.cost_failed, h.cost_up_for_retry";

/// How long transitions are kept by default: two weeks, long enough to look
/// back over the last on-call rotation.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(14 * 24 * 3600);

/// How often, at most, old transitions are pruned: one `DELETE` an hour.
pub const DEFAULT_PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// The most transitions the aggregator keeps waiting for the database: an
/// outage of hours with every executor flapping fits; past it the oldest are
/// dropped (and counted), so memory stays bounded however long it lasts.
pub const MAX_PENDING: usize = 10_000;

/// Transitions a history read returns when no `limit` is given.
pub const DEFAULT_LIMIT: u64 = 100;

/// The most transitions one history read returns.
pub const MAX_LIMIT: u64 = 1_000;

/// How long a history read may take (waiting for a connection included)
/// before the endpoint answers 503: a database that does not answer fails
/// the request, not the service.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections of the reader's pool: reads of the history are rare (a person
/// looking), and never take the aggregator's connections.
pub const READER_CONNECTIONS: u32 = 2;

/// How long transitions are kept, and how often old ones are pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistorySettings {
    /// Transitions older than this are deleted; zero keeps them forever.
    pub retention: Duration,
    /// The least time between two prunes.
    pub prune_every: Duration,
}

impl Default for HistorySettings {
    fn default() -> Self {
        Self {
            retention: DEFAULT_RETENTION,
            prune_every: DEFAULT_PRUNE_EVERY,
        }
    }
}

/// One change of an executor's verdict state, as the table and the endpoint
/// hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Transition {
    /// As Airflow names it: `CeleryExecutor`, `alias:CeleryExecutor`.
    pub executor: String,
    /// What counts as the instance: for Celery the broker, without credentials.
    pub instance: Option<String>,
    /// The host of the supervisor that made the verdict.
    pub hostname: String,
    /// The state before.
    pub from: ExecutorHealthKind,
    /// The state after.
    pub to: ExecutorHealthKind,
    /// The new verdict's reason (`null` for `healthy`); never a credential.
    pub reason: Option<String>,
    /// When the new verdict was made, as Python's `isoformat()` writes it.
    #[serde(serialize_with = "timestamp")]
    #[schema(value_type = String, format = DateTime)]
    pub at: DateTime<Utc>,
    /// On a transition out of `unhealthy`: what the span cost the executor,
    /// its task instances that ended `failed` or went `up_for_retry`
    /// meanwhile ([`crate::airflow::cost`]); `null` when not counted (any other
    /// transition, or Airflow's `task_instance` could not be read).
    pub cost: Option<FaultCost>,
}

fn timestamp<S: Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&airflow_timestamp(*at))
}

impl Transition {
    /// The transition a row holds.
    pub fn from_row(row: history::Model) -> Result<Self> {
        Ok(Self {
            executor: row.executor,
            instance: row.instance,
            hostname: row.hostname,
            from: row.from_health.parse()?,
            to: row.to_health.parse()?,
            reason: row.reason,
            at: row.at,
            cost: match (row.cost_failed, row.cost_up_for_retry) {
                (None, None) => None,
                (failed, up_for_retry) => Some(FaultCost {
                    failed: count(failed),
                    up_for_retry: count(up_for_retry),
                }),
            },
        })
    }

    /// The row it is about: `(hostname, executor, instance)`.
    pub fn key(&self) -> RowKey {
        (
            self.hostname.clone(),
            self.executor.clone(),
            self.instance.clone(),
        )
    }
}

/// A count as the table holds it (never negative).
fn count(n: Option<i64>) -> u64 {
    n.unwrap_or(0).max(0).unsigned_abs()
}

/// An executor row's identity across sessions: `(hostname, executor, instance)`.
pub type RowKey = (String, String, Option<String>);

/// Which transitions a read returns: of one executor, one instance, at or
/// after a time; at most `limit`, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryFilter {
    /// Only this executor's (its configured name).
    pub executor: Option<String>,
    /// Only this instance's.
    pub instance: Option<String>,
    /// Only those at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// At most this many (within 1 and [`MAX_LIMIT`]).
    pub limit: u64,
}

impl Default for HistoryFilter {
    fn default() -> Self {
        Self {
            executor: None,
            instance: None,
            since: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

/// The transitions `filter` selects, newest first (by `at`, then by the order
/// they were written): one statement.
pub async fn read(db: &impl ConnectionTrait, filter: &HistoryFilter) -> Result<Vec<Transition>> {
    let mut query = History::find();
    if let Some(executor) = &filter.executor {
        query = query.filter(Column::Executor.eq(executor.as_str()));
    }
    if let Some(instance) = &filter.instance {
        query = query.filter(Column::Instance.eq(instance.as_str()));
    }
    if let Some(since) = filter.since {
        query = query.filter(Column::At.gte(to_micros(since)));
    }
    query
        .order_by_desc(Column::At)
        .order_by_desc(Column::Id)
        .limit(filter.limit.clamp(1, MAX_LIMIT))
        .all(db)
        .await?
        .into_iter()
        .map(Transition::from_row)
        .collect()
}

/// The latest transition of every executor row (by host, executor and
/// instance), for the report's `since` and `previous`: one statement, whose
/// work grows with the rows the history keeps (at most `retention`'s worth).
pub async fn latest(db: &impl ConnectionTrait) -> Result<Vec<Transition>> {
    let sql = latest_sql("", "GROUP BY hostname, executor, instance");
    let rows = History::find()
        .from_raw_sql(Statement::from_string(db.get_database_backend(), sql))
        .all(db)
        .await?;
    latest_states(rows)
}

/// The statement reading each row's latest state: for every group of
/// `group_by` among the rows `filter` keeps (a `WHERE` clause's conditions,
/// each ending in `AND`), its latest transition of state and its latest
/// transition of any kind (the same row unless a new reason came since),
/// oldest first: [`latest_states`] folds them.
fn latest_sql(filter: &str, group_by: &str) -> String {
    format!(
        "SELECT {COLUMNS} FROM {TABLE} h \
         WHERE h.id IN (SELECT MAX(id) FROM {TABLE} WHERE {filter}from_health <> to_health {group_by}) \
         OR h.id IN (SELECT MAX(id) FROM {TABLE} WHERE {filter}1 = 1 {group_by}) \
         ORDER BY h.id"
    )
}

/// Each row's latest state from [`latest_sql`]'s rows: its latest transition
/// of state (when the state began, from what), with the reason of its latest
/// transition, a new cause recorded since included. A row whose transitions
/// of state are all pruned keeps its latest change of cause as it is.
fn latest_states(rows: Vec<history::Model>) -> Result<Vec<Transition>> {
    let mut latest: Vec<Transition> = Vec::with_capacity(rows.len());
    let mut at: std::collections::HashMap<RowKey, usize> = std::collections::HashMap::new();
    for row in rows {
        let t = Transition::from_row(row)?;
        match at.get(&t.key()) {
            Some(&i) if t.from == t.to => latest[i].reason = t.reason,
            Some(&i) => latest[i] = t,
            None => {
                at.insert(t.key(), latest.len());
                latest.push(t);
            }
        }
    }
    Ok(latest)
}

/// How earlier runs of Overseer left one of a host's executor rows: the
/// latest transition they wrote for it, and the last heartbeat of the row's
/// ended sessions (the state held at least until then). What a run needs to
/// carry on with alerts the run before it left open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftBehind {
    /// The row's latest transition made by an earlier run.
    pub transition: Transition,
    /// The latest heartbeat of the row's sessions that ended.
    pub last_seen: Option<DateTime<Utc>>,
}

/// The reason of the transition to `unknown` that records a time when no
/// Overseer supervised a row ([`unsupervised_since_earlier_runs`]).
pub const NOT_SUPERVISED: &str = "not supervised: Overseer was not running";

/// How earlier runs left `hostname`'s executor rows (see [`LeftBehind`]), as
/// they supervised them: two statements. The transitions that record a time
/// no Overseer ran ([`NOT_SUPERVISED`]) are passed over, so the state is the
/// one the last run saw, and `since` when it began.
pub async fn left_by_earlier_runs(
    db: &impl ConnectionTrait,
    hostname: &str,
) -> Result<Vec<LeftBehind>> {
    left_behind(db, hostname, true).await
}

/// The transitions that record the time no Overseer supervised `hostname`'s
/// rows of `keys`, before a run that started at `started`: for each row whose
/// earlier runs' latest transition left it `healthy` or `unhealthy` and whose
/// last heartbeat is more than `stale_after` (the executor threshold: the
/// row read as stale meanwhile) before `started`, a transition to `unknown`
/// at that heartbeat, its reason [`NOT_SUPERVISED`]. The run's first verdict
/// then makes the transition that says when supervision resumed. A restart
/// quicker than `stale_after` leaves no gap, and `since` goes on. Two
/// statements.
pub async fn unsupervised_since_earlier_runs(
    db: &impl ConnectionTrait,
    hostname: &str,
    keys: &[crate::storage::ExecutorIdentity],
    started: DateTime<Utc>,
    stale_after: Duration,
) -> Result<Vec<Transition>> {
    let stale_after = chrono::Duration::from_std(stale_after).unwrap_or(chrono::Duration::MAX);
    Ok(left_behind(db, hostname, false)
        .await?
        .into_iter()
        .filter_map(|left| {
            let t = left.transition;
            let seen = left.last_seen?.max(t.at);
            let supervised = keys
                .iter()
                .any(|k| k.executor_class == t.executor && k.instance == t.instance);
            (supervised && t.to != ExecutorHealthKind::Unknown && started - seen > stale_after)
                .then(|| Transition {
                    from: t.to,
                    to: ExecutorHealthKind::Unknown,
                    reason: Some(NOT_SUPERVISED.to_owned()),
                    at: seen,
                    ..t
                })
        })
        .collect())
}

/// How earlier runs left `hostname`'s executor rows (see [`LeftBehind`]):
/// two statements. Earlier runs' rows are the ended ones (a run ends its rows
/// at shutdown, and the next start ends those a crash left open, before it
/// makes any verdict), so their transitions are those up to the latest
/// `end_date`: any later one is this run's. `supervised_only`: pass over the
/// transitions that record a time no Overseer ran.
async fn left_behind(
    db: &impl ConnectionTrait,
    hostname: &str,
    supervised_only: bool,
) -> Result<Vec<LeftBehind>> {
    use crate::entity::job;
    use crate::job::JobType;
    use std::collections::HashMap;

    let ended = job::Entity::find()
        .filter(job::Column::JobType.eq(JobType::ExecutorJob.as_str()))
        .filter(job::Column::Hostname.eq(hostname))
        .filter(job::Column::EndDate.is_not_null())
        .all(db)
        .await?;
    let Some(cutoff) = ended.iter().filter_map(|row| row.end_date).max() else {
        return Ok(Vec::new());
    };
    let mut last_seen: HashMap<(String, Option<String>), DateTime<Utc>> = HashMap::new();
    for row in ended {
        let (Some(class), Some(heartbeat)) = (row.executor_class, row.latest_heartbeat) else {
            continue;
        };
        let seen = last_seen
            .entry((class, row.executor_instance))
            .or_insert(heartbeat);
        *seen = (*seen).max(heartbeat);
    }
    let backend = db.get_database_backend();
    let placeholder = |n: usize| match backend {
        DbBackend::Postgres => format!("${n}"),
        _ => "?".to_owned(),
    };
    let mut values: Vec<sea_orm::Value> = vec![hostname.into(), to_micros(cutoff).into()];
    let supervised = if supervised_only {
        values.push(NOT_SUPERVISED.into());
        format!("(reason IS NULL OR reason <> {}) AND ", placeholder(3))
    } else {
        String::new()
    };
    let sql = latest_sql(
        &format!(
            "hostname = {} AND at <= {} AND {supervised}",
            placeholder(1),
            placeholder(2)
        ),
        "GROUP BY executor, instance",
    );
    if backend != DbBackend::Postgres {
        // `?` takes the values in order, and the filter is written twice.
        values.extend(values.clone());
    }
    let rows = History::find()
        .from_raw_sql(Statement::from_sql_and_values(backend, sql, values))
        .all(db)
        .await?;
    latest_states(rows)?
        .into_iter()
        .map(|transition| {
            let last_seen = last_seen
                .get(&(transition.executor.clone(), transition.instance.clone()))
                .copied();
            Ok(LeftBehind {
                transition,
                last_seen,
            })
        })
        .collect()
}

/// Checks that the history table exists, so that a missing migration is one
/// clear error at start-up.
pub async fn check_schema(db: &impl ConnectionTrait) -> Result<()> {
    History::find()
        .limit(1)
        .all(db)
        .await
        .map(|_| ())
        .map_err(|e| {
            Error::Schema(format!(
                "the {TABLE} table is missing (run `overseer migrate`): {e}"
            ))
        })
}

/// Reads the history for the HTTP API: a pool of [`READER_CONNECTIONS`] of
/// its own, opened lazily (a database that is away at start fails reads, not
/// start-up), each read bounded by [`READ_TIMEOUT`].
#[derive(Debug, Clone)]
pub struct HistoryReader {
    db: DatabaseConnection,
    timeout: Duration,
}

impl HistoryReader {
    /// A reader of the database at `url` (which carries its password: call
    /// this only where the connection is made).
    pub async fn connect(url: &str) -> Result<Self> {
        let mut options = crate::connect::options(url);
        options
            .max_connections(READER_CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(READ_TIMEOUT)
            .connect_lazy(true);
        Ok(Self::new(sea_orm::Database::connect(options).await?))
    }

    /// A reader over a connection the caller opened.
    pub fn new(db: DatabaseConnection) -> Self {
        Self {
            db,
            timeout: READ_TIMEOUT,
        }
    }

    /// How earlier runs left `hostname`'s executor rows
    /// ([`left_by_earlier_runs`]), or an error when the database fails or
    /// does not answer within [`READ_TIMEOUT`].
    pub async fn left_by_earlier_runs(&self, hostname: &str) -> Result<Vec<LeftBehind>> {
        tokio::time::timeout(self.timeout, left_by_earlier_runs(&self.db, hostname))
            .await
            .unwrap_or_else(|_| {
                Err(Error::Runtime(format!(
                    "the database did not answer within {}",
                    crate::duration::short(self.timeout)
                )))
            })
    }

    /// The transitions `filter` selects, newest first, or an error when the
    /// database fails or does not answer within [`READ_TIMEOUT`].
    pub async fn transitions(&self, filter: &HistoryFilter) -> Result<Vec<Transition>> {
        tokio::time::timeout(self.timeout, read(&self.db, filter))
            .await
            .unwrap_or_else(|_| {
                Err(Error::Runtime(format!(
                    "the database did not answer within {}",
                    crate::duration::short(self.timeout)
                )))
            })
    }
}
