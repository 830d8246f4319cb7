//! Reading and writing job rows: plain async functions over a connection.
//!
//! Nothing here knows of actors or HTTP; callers own the connection and decide
//! when to call. Each function issues a fixed number of statements. Only what
//! the service itself calls is public: tests read and write rows through the
//! entity ([`crate::entity::job`]) like any other reader of the table.
//!
//! What a flush writes, and what `executor_health_checked_at` means:
//!
//! | statement | rows | sets |
//! | --- | --- | --- |
//! | the heartbeat (always) | every open row of this session | `latest_heartbeat = now`, and `executor_health_checked_at = now` where a verdict was written |
//! | the verdicts (when any changed) | only the rows whose verdict (health or reason) changed | `executor_health`, `executor_health_reason`, `executor_health_checked_at` = when the verdict was made |
//! | the transitions (when any state changed) | one new `overseer_executor_history` row per change of state, one `INSERT` | see [`crate::history`] |
//! | the prune (at most once an hour) | `overseer_executor_history` rows older than the retention | deleted |
//!
//! So `executor_health_checked_at` is the last time this process stood behind
//! the verdict: the moment it was made, then the time of every heartbeat while
//! it holds. An unchanged verdict costs no statement of its own, and its
//! `checked_at` is never older than the row's heartbeat.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Timelike, Utc};
use sea_orm::sea_query::{Expr, Order};
use sea_orm::{
    AccessMode, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DbBackend, EntityTrait,
    IsolationLevel, QueryFilter, QueryOrder, QuerySelect, Statement, TransactionSession,
    TransactionTrait,
};

use crate::entity::job::{self, Column, Entity as Job};
use crate::error::Result;
use crate::history::Transition;
use crate::job::{ExecutorHealth, JobState, JobType};
use crate::report::JobRows;

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
    fn rows(&self) -> Condition {
        self.owns().add(Column::EndDate.is_null())
    }

    /// The filter that selects this session's rows, ended or not. Each column
    /// is also tested for `NULL`, so that the condition is never `NULL` itself
    /// and its negation selects every other row, whatever they hold.
    fn owns(&self) -> Condition {
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

/// A time cut to the microsecond, the precision every backend stores.
pub(crate) fn to_micros(at: DateTime<Utc>) -> DateTime<Utc> {
    at.with_nanosecond(at.nanosecond() / 1_000 * 1_000)
        .unwrap_or(at)
}

/// An executor's identity in the table: its class and its instance.
pub type ExecutorKey = (String, Option<String>);

/// Rows per statement where a statement's size grows with the executors (start-up
/// only): keeps every statement well under the drivers' parameter limits.
const ROWS_PER_STATEMENT: usize = 500;

/// Closes the rows a crash left open on this host for these executors:
/// `state = 'failed'`, `end_date = now`. Returns how many it closed.
///
/// One read finds this host's open executor rows (Airflow's `job_type`
/// index, and only rows without `end_date`), matched to the executors here,
/// then the matches are closed by id: the cost follows the open rows, not the
/// ended ones a long-lived `job` table piles up. (A condition per executor,
/// as this was, made each statement of 500 walk every `ExecutorJob` row ever
/// written: start-up at 50,000 executors went from 1.2 to 4.3 s after one
/// earlier run, and on with every run.)
pub async fn close_crashed(
    db: &impl ConnectionTrait,
    hostname: &str,
    executors: &[ExecutorKey],
    now: DateTime<Utc>,
) -> Result<u64> {
    let open = keyed_rows(
        db,
        Condition::all()
            .add(Column::JobType.eq(JobType::ExecutorJob.as_str()))
            .add(Column::Hostname.eq(hostname))
            .add(Column::EndDate.is_null()),
    )
    .await?;
    let wanted: std::collections::HashSet<&ExecutorKey> = executors.iter().collect();
    let crashed: Vec<i32> = open
        .into_iter()
        .filter_map(|(id, key)| wanted.contains(&key).then_some(id))
        .collect();
    let mut closed = 0;
    for chunk in crashed.chunks(ROWS_PER_STATEMENT) {
        let result = Job::update_many()
            .col_expr(Column::State, Expr::val(JobState::Failed.as_str()))
            .col_expr(Column::EndDate, Expr::val(now))
            .filter(Column::Id.is_in(chunk.iter().copied()))
            // Unless another process ended it since it was read.
            .filter(Column::EndDate.is_null())
            .exec(db)
            .await?;
        closed += result.rows_affected;
    }
    Ok(closed)
}

/// The id and [`ExecutorKey`] of every row `which` selects, in id order: only
/// the three columns that match rows to executors.
async fn keyed_rows(
    db: &impl ConnectionTrait,
    which: Condition,
) -> Result<Vec<(i32, ExecutorKey)>> {
    let rows: Vec<(i32, Option<String>, Option<String>)> = Job::find()
        .select_only()
        .column(Column::Id)
        .column(Column::ExecutorClass)
        .column(Column::ExecutorInstance)
        .filter(which)
        .order_by(Column::Id, Order::Asc)
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, class, instance)| (id, (class.unwrap_or_default(), instance)))
        .collect())
}

/// Inserts one `running` row per executor for this session and returns their
/// ids, in the executors' order.
pub async fn register(
    db: &impl ConnectionTrait,
    session: &Session,
    executors: &[ExecutorKey],
) -> Result<Vec<i32>> {
    for chunk in executors.chunks(ROWS_PER_STATEMENT) {
        let rows = chunk.iter().map(|(class, instance)| job::ActiveModel {
            dag_id: Set(None),
            state: Set(Some(JobState::Running.as_str().to_owned())),
            job_type: Set(Some(JobType::ExecutorJob.as_str().to_owned())),
            start_date: Set(Some(session.started)),
            end_date: Set(None),
            latest_heartbeat: Set(Some(session.started)),
            executor_class: Set(Some(class.clone())),
            hostname: Set(Some(session.hostname.clone())),
            unixname: Set(Some(session.unixname.clone())),
            executor_health: Set(ExecutorHealth::default().as_str().to_owned()),
            executor_health_reason: Set(None),
            executor_instance: Set(instance.clone()),
            executor_health_checked_at: Set(None),
            ..Default::default()
        });
        Job::insert_many(rows).exec_without_returning(db).await?;
    }
    // Read the ids back (MySQL has no RETURNING), matching rows to executors,
    // each key's ids in id order.
    let stored = keyed_rows(db, session.rows()).await?;
    let mut ids: std::collections::HashMap<ExecutorKey, std::collections::VecDeque<i32>> =
        std::collections::HashMap::with_capacity(stored.len());
    for (id, key) in stored {
        ids.entry(key).or_default().push_back(id);
    }
    executors
        .iter()
        .map(|key| {
            ids.get_mut(key)
                .and_then(std::collections::VecDeque::pop_front)
                .ok_or_else(|| {
                    crate::Error::Database(sea_orm::DbErr::RecordNotFound(format!(
                        "the row just inserted for {} is missing",
                        key.0
                    )))
                })
        })
        .collect()
}

/// One verdict to write: the row's id, the verdict, and when it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerdictRow {
    /// The executor's `job.id`.
    pub id: i32,
    /// The verdict: `executor_health` and `executor_health_reason`.
    pub health: ExecutorHealth,
    /// For a healthy verdict, the note beside it, written as its
    /// `executor_health_reason` (ignored for the others, whose reason is theirs).
    pub note: Option<String>,
    /// `executor_health_checked_at`: when the verdict was made (or, for one
    /// written late, the last heartbeat it held through).
    pub checked_at: DateTime<Utc>,
}

impl VerdictRow {
    /// What `executor_health_reason` holds: the verdict's reason, or a healthy
    /// verdict's note.
    pub fn reason(&self) -> Option<&str> {
        match &self.health {
            ExecutorHealth::Healthy => self.note.as_deref(),
            other => other.reason(),
        }
    }
}

/// Writes this session's heartbeats and the given verdicts (those that changed)
/// in one transaction of at most two statements, whatever the number of
/// executors: one heartbeat update selected by the session, which also moves
/// every written verdict's `executor_health_checked_at` to `now` (the verdict
/// holds), and, when `verdicts` is not empty, one update that joins every
/// changed row. Returns the number of statements run.
pub async fn flush<C>(
    db: &C,
    session: &Session,
    now: DateTime<Utc>,
    verdicts: &[VerdictRow],
) -> Result<usize>
where
    C: ConnectionTrait + TransactionTrait,
{
    flush_with_history(db, session, now, verdicts, &HistoryWrite::default()).await
}

/// What a flush writes to the history besides the verdicts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryWrite {
    /// The transitions the verdicts make, inserted with them.
    pub transitions: Vec<Transition>,
    /// Delete the transitions older than this (at most once an hour).
    pub prune_before: Option<DateTime<Utc>>,
}

/// [`flush`], with the history in the same transaction: one multi-row
/// `INSERT` of the transitions when there are some, and one `DELETE` of the
/// old ones when a prune is due; at most four statements, whatever the
/// number of executors and transitions. Returns the number of statements run.
pub async fn flush_with_history<C>(
    db: &C,
    session: &Session,
    now: DateTime<Utc>,
    verdicts: &[VerdictRow],
    history: &HistoryWrite,
) -> Result<usize>
where
    C: ConnectionTrait + TransactionTrait,
{
    let now = to_micros(now);
    let held: Expr = Expr::case(
        Column::ExecutorHealthCheckedAt.is_not_null(),
        Expr::val(now),
    )
    .into();
    let txn = db.begin().await?;
    Job::update_many()
        .col_expr(Column::LatestHeartbeat, Expr::val(now))
        .col_expr(Column::ExecutorHealthCheckedAt, held)
        .filter(session.rows())
        .exec(&txn)
        .await?;
    let mut statements = 1;
    if !verdicts.is_empty() {
        let backend = txn.get_database_backend();
        txn.execute_raw(verdict_update(backend, verdicts)).await?;
        statements += 1;
    }
    if !history.transitions.is_empty() {
        let backend = txn.get_database_backend();
        txn.execute_raw(crate::history::insert_statement(
            backend,
            &history.transitions,
        ))
        .await?;
        statements += 1;
    }
    if let Some(before) = history.prune_before {
        let pruned = crate::history::prune(&txn, before).await?;
        if pruned > 0 {
            tracing::debug!(rows = pruned, "pruned the executor history");
        }
        statements += 1;
    }
    txn.commit().await?;
    Ok(statements)
}

/// One `UPDATE` that sets every verdict from a derived table of
/// `(id, health, reason, checked_at)` rows joined on `id`, read from one JSON
/// parameter (`json_each` on SQLite, `json_to_recordset` on Postgres,
/// `JSON_TABLE` on MySQL and MariaDB): linear in the number of verdicts, with
/// no parameter limit on how many rows one statement takes, and one SQL text
/// whatever the verdicts. So the driver prepares and caches one statement,
/// where values written into the SQL made a new one, kept in every
/// connection's statement cache (and, on Postgres, prepared on the server), at
/// every change, and a parse tree as large as the values at the first flush.
fn verdict_update(backend: DbBackend, verdicts: &[VerdictRow]) -> Statement {
    #[derive(serde::Serialize)]
    struct Row<'a> {
        id: i32,
        health: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'a str>,
        checked_at: String,
    }
    let rows: Vec<Row> = verdicts
        .iter()
        .map(|v| Row {
            id: v.id,
            health: v.health.as_str(),
            reason: v.reason(),
            checked_at: timestamp_text(backend, v.checked_at),
        })
        .collect();
    let sql = match backend {
        DbBackend::Postgres => {
            "UPDATE job SET executor_health = v.health, executor_health_reason = v.reason, \
             executor_health_checked_at = v.checked_at \
             FROM json_to_recordset(CAST($1 AS json)) \
             AS v(id integer, health text, reason text, checked_at timestamptz) \
             WHERE job.id = v.id"
        }
        DbBackend::MySql => {
            "UPDATE job JOIN JSON_TABLE(?, '$[*]' COLUMNS (id INT PATH '$.id', \
             health VARCHAR(20) PATH '$.health', reason TEXT PATH '$.reason', \
             checked_at DATETIME(6) PATH '$.checked_at')) AS v ON job.id = v.id \
             SET job.executor_health = v.health, job.executor_health_reason = v.reason, \
             job.executor_health_checked_at = v.checked_at"
        }
        _ => {
            "UPDATE job SET executor_health = v.health, executor_health_reason = v.reason, \
             executor_health_checked_at = v.checked_at \
             FROM (SELECT json_extract(value, '$.id') AS id, \
             json_extract(value, '$.health') AS health, \
             json_extract(value, '$.reason') AS reason, \
             json_extract(value, '$.checked_at') AS checked_at FROM json_each(?)) AS v \
             WHERE job.id = v.id"
        }
    };
    json_statement(backend, sql, &rows)
}

/// `sql` with its one parameter: `rows` as a JSON array (text). A field left
/// out of a row (`None`) reads as SQL `NULL` on every backend.
pub(crate) fn json_statement<T: serde::Serialize>(
    backend: DbBackend,
    sql: &str,
    rows: &[T],
) -> Statement {
    let json = serde_json::to_string(rows).expect("rows of strings and numbers serialize");
    Statement::from_sql_and_values(backend, sql, [sea_orm::Value::from(json)])
}

/// A UTC time as text in a JSON row that the database reads back exactly as
/// the driver would have bound it: RFC 3339 for Postgres' `timestamptz`, naive
/// UTC for MySQL (whose session runs in UTC), and on SQLite the RFC 3339 text
/// sqlx writes for a `DateTime<Utc>` (stored as it is).
pub(crate) fn timestamp_text(backend: DbBackend, at: DateTime<Utc>) -> String {
    let at = to_micros(at);
    match backend {
        DbBackend::Postgres => at.to_rfc3339_opts(SecondsFormat::Micros, false),
        DbBackend::MySql => at.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
        _ => at.to_rfc3339_opts(SecondsFormat::AutoSi, false),
    }
}

/// A UTC time as a SQL literal that reads back exactly as the driver would have
/// bound it ([`timestamp_text`], as `timestamptz` on Postgres).
pub(crate) fn timestamp_literal(backend: DbBackend, at: DateTime<Utc>) -> String {
    let text = timestamp_text(backend, at);
    match backend {
        DbBackend::Postgres => format!("CAST('{text}' AS TIMESTAMP WITH TIME ZONE)"),
        _ => format!("'{text}'"),
    }
}

/// Ends this session's rows: `state = 'success'`, `end_date = now`.
pub async fn finish(
    db: &impl ConnectionTrait,
    session: &Session,
    now: DateTime<Utc>,
) -> Result<u64> {
    let now = to_micros(now);
    let result = Job::update_many()
        .col_expr(Column::State, Expr::val(JobState::Success.as_str()))
        .col_expr(Column::EndDate, Expr::val(now))
        .col_expr(Column::LatestHeartbeat, Expr::val(now))
        .filter(session.rows())
        .exec(db)
        .await?;
    Ok(result.rows_affected)
}

/// Reads what a report needs, in five statements whatever the table holds: the
/// most recent job of each type (Airflow's rule), and the open `running` rows
/// whose heartbeat is younger than `horizon`, of every host and session.
pub async fn report_rows<C>(db: &C, now: DateTime<Utc>, horizon: Duration) -> Result<JobRows>
where
    C: ConnectionTrait + TransactionTrait,
{
    let read = in_snapshot(db, async |txn| {
        read_rows(txn, Rows::Live { except: None }, now, horizon).await
    })
    .await?;
    Ok(JobRows {
        most_recent: read.most_recent,
        live: read.rows,
    })
}

/// Which rows besides the most recent ones a read returns.
#[derive(Debug, Clone, Copy)]
enum Rows<'a> {
    /// The open `running` rows younger than the horizon, but `except`'s.
    Live { except: Option<&'a Session> },
    /// Every row but `except`'s whose heartbeat, end or verdict time is at or
    /// after `since`, whatever its state: what changed since then.
    Changed {
        except: &'a Session,
        since: DateTime<Utc>,
    },
}

/// What one read of the table for a report returned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowsRead {
    /// The most recent job of each type (of every host, this session's rows
    /// included), in [`JobType::ALL`]'s order.
    pub most_recent: [Option<job::Model>; 4],
    /// The rows read, never this session's: every live one when `full`, else
    /// the ones that changed.
    pub rows: Vec<job::Model>,
    /// The rows are all the live ones, not only the ones that changed.
    pub full: bool,
}

/// Reads what a report needs besides this session's own rows (the caller holds
/// those), in five statements whatever the table holds: the most recent job of
/// each type, and either every other live row (`since` is `None`) or only the
/// other rows whose heartbeat, `end_date` or verdict time is at or after `since`
/// (a row that ended, or whose heartbeat or verdict moved, since then). The
/// history's latest transitions are a read of their own
/// ([`crate::history::latest`]): its work grows with the history, and a
/// history slow to read must not hold up the report or `metadatabase`.
pub async fn read_for_report<C>(
    db: &C,
    session: &Session,
    since: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    horizon: Duration,
) -> Result<RowsRead>
where
    C: ConnectionTrait + TransactionTrait,
{
    let rows = match since {
        Some(since) => Rows::Changed {
            except: session,
            since,
        },
        None => Rows::Live {
            except: Some(session),
        },
    };
    in_snapshot(db, async |txn| read_rows(txn, rows, now, horizon).await).await
}

/// This session's rows as the table holds them (to take their verdicts back
/// after the aggregator restarts): one statement.
pub async fn session_rows(db: &impl ConnectionTrait, session: &Session) -> Result<Vec<job::Model>> {
    Ok(Job::find()
        .filter(session.rows())
        .order_by(Column::Id, Order::Asc)
        .all(db)
        .await?)
}

/// Runs `read` in one snapshot, so that a write landing between two of its
/// statements cannot make the report contradict itself. SQLite's transactions
/// are serializable already and take no isolation level.
async fn in_snapshot<C, T>(
    db: &C,
    read: impl AsyncFnOnce(&C::Transaction) -> Result<T>,
) -> Result<T>
where
    C: ConnectionTrait + TransactionTrait,
{
    let txn = match db.get_database_backend() {
        DbBackend::Sqlite => db.begin().await?,
        _ => {
            db.begin_with_config(
                Some(IsolationLevel::RepeatableRead),
                Some(AccessMode::ReadOnly),
            )
            .await?
        }
    };
    let read = read(&txn).await?;
    txn.commit().await?;
    Ok(read)
}

async fn read_rows(
    db: &impl ConnectionTrait,
    rows: Rows<'_>,
    now: DateTime<Utc>,
    horizon: Duration,
) -> Result<RowsRead> {
    let mut read = RowsRead::default();
    for (slot, job_type) in read.most_recent.iter_mut().zip(JobType::ALL) {
        *slot = most_recent(db, job_type).await?;
    }
    let backend = db.get_database_backend();
    let query = match rows {
        Rows::Live { except } => {
            read.full = true;
            let since = crate::duration::before(now, horizon);
            let mut query = Job::find()
                .filter(Column::State.eq(JobState::Running.as_str()))
                .filter(Column::EndDate.is_null())
                .filter(at_or_after(backend, Column::LatestHeartbeat, since));
            if let Some(session) = except {
                query = query.filter(session.owns().not());
            }
            query
        }
        Rows::Changed { except, since } => Job::find().filter(except.owns().not()).filter(
            Condition::any()
                .add(at_or_after(backend, Column::LatestHeartbeat, since))
                .add(at_or_after(backend, Column::EndDate, since))
                .add(at_or_after(backend, Column::ExecutorHealthCheckedAt, since)),
        ),
    };
    read.rows = query.order_by(Column::Id, Order::Asc).all(db).await?;
    Ok(read)
}

/// `column >= at`, as each backend compares its stored times. Postgres and
/// MySQL compare times. SQLite compares text, and holds two forms: Airflow's
/// naive `2026-11-29 19:48:48.365305` and sqlx's `2026-11-29T19:48:48.365305+00:00`.
/// A `T` sorts after a space, so each form is compared with a bound of its
/// own form: a naive value of `at`'s day from `at`'s naive time on (and below
/// the day's `T` values), or any value at or after `at` in sqlx's form (which
/// also takes every later day, in both forms).
fn at_or_after(backend: DbBackend, column: Column, at: DateTime<Utc>) -> Condition {
    match backend {
        DbBackend::Sqlite => {
            let naive = at.naive_utc().format("%Y-%m-%d %H:%M:%S%.6f").to_string();
            let day_in_sqlx_form = at.format("%Y-%m-%dT").to_string();
            let sqlx_form = to_micros(at).to_rfc3339_opts(SecondsFormat::AutoSi, false);
            Condition::any()
                .add(
                    Condition::all()
                        .add(column.gte(naive))
                        .add(column.lt(day_in_sqlx_form)),
                )
                .add(column.gte(sqlx_form))
        }
        _ => Condition::all().add(column.gte(at)),
    }
}

/// Airflow's "most recent job" of a type, by Airflow's own query
/// (`airflow/jobs/job.py`, `most_recent_job`): running rows first, then the
/// latest heartbeat first. Null heartbeats sort as the database sorts them, as
/// they do for Airflow.
async fn most_recent(db: &impl ConnectionTrait, job_type: JobType) -> Result<Option<job::Model>> {
    let running_first: Expr = Expr::case(Column::State.eq(JobState::Running.as_str()), 0)
        .finally(1)
        .into();
    Ok(Job::find()
        .filter(Column::JobType.eq(job_type.as_str()))
        .order_by(running_first, Order::Asc)
        .order_by(Column::LatestHeartbeat, Order::Desc)
        .limit(1)
        .one(db)
        .await?)
}

/// Checks that the table has Overseer's columns, and that Overseer's history
/// table exists, so that a missing migration is one clear error at start-up
/// rather than a failure at the first write.
pub async fn check_schema(db: &impl ConnectionTrait) -> Result<()> {
    Job::find().limit(1).all(db).await.map(|_| ()).map_err(|e| {
        crate::Error::Schema(format!(
            "the job table is missing or lacks Overseer's executor columns (run `overseer migrate`): {e}"
        ))
    })?;
    crate::history::check_schema(db).await
}

/// Running jobs, most recent heartbeat first, as `airflow jobs check` reads them:
/// of one type and one host when given, at most `limit` of them (0: no limit).
pub async fn running_jobs(
    db: &impl ConnectionTrait,
    job_type: Option<&str>,
    hostname: Option<&str>,
    limit: u64,
) -> Result<Vec<job::Model>> {
    let mut query = Job::find()
        .filter(Column::State.eq(JobState::Running.as_str()))
        .order_by(Column::LatestHeartbeat, Order::Desc);
    if let Some(job_type) = job_type {
        query = query.filter(Column::JobType.eq(job_type));
    }
    if let Some(hostname) = hostname {
        query = query.filter(Column::Hostname.eq(hostname));
    }
    if limit > 0 {
        query = query.limit(limit);
    }
    Ok(query.all(db).await?)
}
