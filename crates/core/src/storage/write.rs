//! The writes: registering this session's executor rows (and closing the ones
//! a crash left open), the flush of heartbeats and verdicts, and ending the
//! rows at shutdown.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, Order};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DbBackend, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, Statement,
};

use super::sql::{json_statement, timestamp_text, to_micros};
use super::{ExecutorIdentity, Session};
use crate::entity::job::{self, Column, Entity as Job};
use crate::error::Result;
use crate::job::{ExecutorHealth, JobState, JobType};
use crate::reason::Reason;

/// Rows per statement where a statement's size grows with the executors (start-up
/// only): keeps every statement well under the drivers' parameter limits.
const ROWS_PER_STATEMENT: usize = 500;

/// An executor row with no `end_date`: its id, its executor and its last
/// heartbeat. Of an earlier session of this host, a crash left it open, or
/// another Overseer with the same hostname runs (see [`crate::overseer`]'s
/// start-up, which tells them apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRow {
    /// `job.id`.
    pub id: i32,
    /// The executor it is for.
    pub key: ExecutorIdentity,
    /// Its `latest_heartbeat`.
    pub latest_heartbeat: Option<DateTime<Utc>>,
}

/// This host's open executor rows for these executors, in id order.
///
/// One read finds this host's open executor rows (Airflow's `job_type`
/// index, and only rows without `end_date`), matched to the executors here:
/// the cost follows the open rows, not the ended ones a long-lived `job`
/// table piles up. (A condition per executor, as this was, made each
/// statement of 500 walk every `ExecutorJob` row ever written: start-up at
/// 50,000 executors went from 1.2 to 4.3 s after one earlier run, and on
/// with every run.)
pub async fn open_rows(
    db: &impl ConnectionTrait,
    hostname: &str,
    executors: &[ExecutorIdentity],
) -> Result<Vec<OpenRow>> {
    let open = keyed_rows(
        db,
        Condition::all()
            .add(Column::JobType.eq(JobType::ExecutorJob.as_str()))
            .add(Column::Hostname.eq(hostname))
            .add(Column::EndDate.is_null()),
    )
    .await?;
    let wanted: std::collections::HashSet<&ExecutorIdentity> = executors.iter().collect();
    Ok(open
        .into_iter()
        .filter(|row| wanted.contains(&row.key))
        .collect())
}

/// Closes the rows a crash left open (their ids, from [`open_rows`]):
/// `state = 'failed'`, `end_date = now`. Returns how many it closed.
pub async fn close_crashed(
    db: &impl ConnectionTrait,
    crashed: &[i32],
    now: DateTime<Utc>,
) -> Result<u64> {
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

/// Every row `which` selects, in id order: only the columns that match rows
/// to executors, and the heartbeat.
async fn keyed_rows(db: &impl ConnectionTrait, which: Condition) -> Result<Vec<OpenRow>> {
    /// `id`, `executor_class`, `executor_instance`, `latest_heartbeat`.
    type Columns = (i32, Option<String>, Option<String>, Option<DateTime<Utc>>);
    let rows: Vec<Columns> = Job::find()
        .select_only()
        .column(Column::Id)
        .column(Column::ExecutorClass)
        .column(Column::ExecutorInstance)
        .column(Column::LatestHeartbeat)
        .filter(which)
        .order_by(Column::Id, Order::Asc)
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, class, instance, latest_heartbeat)| OpenRow {
            id,
            key: ExecutorIdentity {
                executor_class: class.unwrap_or_default(),
                instance,
            },
            latest_heartbeat,
        })
        .collect())
}

/// Inserts one `running` row per executor for this session and returns their
/// ids, in the executors' order.
pub async fn register(
    db: &impl ConnectionTrait,
    session: &Session,
    executors: &[ExecutorIdentity],
) -> Result<Vec<i32>> {
    for chunk in executors.chunks(ROWS_PER_STATEMENT) {
        let rows = chunk.iter().map(|e| job::ActiveModel {
            dag_id: Set(None),
            state: Set(Some(JobState::Running.as_str().to_owned())),
            job_type: Set(Some(JobType::ExecutorJob.as_str().to_owned())),
            start_date: Set(Some(session.started)),
            end_date: Set(None),
            latest_heartbeat: Set(Some(session.started)),
            executor_class: Set(Some(e.executor_class.clone())),
            hostname: Set(Some(session.hostname.clone())),
            unixname: Set(Some(session.unixname.clone())),
            executor_health: Set(ExecutorHealth::default().as_str().to_owned()),
            executor_health_reason: Set(None),
            executor_instance: Set(e.instance.clone()),
            executor_health_checked_at: Set(None),
            ..Default::default()
        });
        Job::insert_many(rows).exec_without_returning(db).await?;
    }
    // Read the ids back (MySQL has no RETURNING), matching rows to executors,
    // each key's ids in id order.
    let stored = keyed_rows(db, session.rows()).await?;
    let mut ids: std::collections::HashMap<ExecutorIdentity, std::collections::VecDeque<i32>> =
        std::collections::HashMap::with_capacity(stored.len());
    for row in stored {
        ids.entry(row.key).or_default().push_back(row.id);
    }
    executors
        .iter()
        .map(|key| {
            ids.get_mut(key)
                .and_then(std::collections::VecDeque::pop_front)
                .ok_or_else(|| {
                    crate::Error::Database(sea_orm::DbErr::RecordNotFound(format!(
                        "the row just inserted for {} is missing",
                        key.label()
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
    pub note: Option<Reason>,
    /// `executor_health_checked_at`: when the verdict was made (or, for one
    /// written late, the last heartbeat it held through).
    pub checked_at: DateTime<Utc>,
}

impl VerdictRow {
    /// What `executor_health_reason` holds: the verdict's reason, or a healthy
    /// verdict's note.
    pub fn reason(&self) -> Option<&str> {
        self.health.shown(self.note.as_ref()).map(Reason::as_str)
    }
}

/// This session's heartbeats and the given verdicts (those that changed), in
/// a transaction the caller opened and commits (the history adds its own to
/// it, [`crate::history::flush_with_history`]): at most two statements,
/// whatever the number of executors: one heartbeat update selected by the
/// session, which also moves every written verdict's
/// `executor_health_checked_at` to `now` (the verdict holds), and, when
/// `verdicts` is not empty, one update that joins every changed row still
/// open. Returns what it wrote ([`Flushed`]).
pub(crate) async fn heartbeats_and_verdicts(
    txn: &impl ConnectionTrait,
    session: &Session,
    now: DateTime<Utc>,
    verdicts: &[VerdictRow],
) -> Result<Flushed> {
    let now = to_micros(now);
    let held: Expr = Expr::case(
        Column::ExecutorHealthCheckedAt.is_not_null(),
        Expr::val(now),
    )
    .into();
    let open = Job::update_many()
        .col_expr(Column::LatestHeartbeat, Expr::val(now))
        .col_expr(Column::ExecutorHealthCheckedAt, held)
        .filter(session.rows())
        .exec(txn)
        .await?
        .rows_affected;
    let mut statements = 1;
    if !verdicts.is_empty() {
        let backend = txn.get_database_backend();
        txn.execute_raw(verdict_update(backend, verdicts)).await?;
        statements += 1;
    }
    Ok(Flushed { statements, open })
}

/// What one flush wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    /// The statements it ran.
    pub statements: usize,
    /// This session's rows its heartbeat reached: those still open. Fewer
    /// than the session registered means another writer ended the rest (an
    /// Overseer on another machine with the same hostname took them over).
    pub open: u64,
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
             WHERE job.id = v.id AND job.end_date IS NULL"
        }
        DbBackend::MySql => {
            "UPDATE job JOIN JSON_TABLE(?, '$[*]' COLUMNS (id INT PATH '$.id', \
             health VARCHAR(20) PATH '$.health', reason TEXT PATH '$.reason', \
             checked_at DATETIME(6) PATH '$.checked_at')) AS v ON job.id = v.id \
             SET job.executor_health = v.health, job.executor_health_reason = v.reason, \
             job.executor_health_checked_at = v.checked_at WHERE job.end_date IS NULL"
        }
        _ => {
            "UPDATE job SET executor_health = v.health, executor_health_reason = v.reason, \
             executor_health_checked_at = v.checked_at \
             FROM (SELECT json_extract(value, '$.id') AS id, \
             json_extract(value, '$.health') AS health, \
             json_extract(value, '$.reason') AS reason, \
             json_extract(value, '$.checked_at') AS checked_at FROM json_each(?)) AS v \
             WHERE job.id = v.id AND job.end_date IS NULL"
        }
    };
    json_statement(backend, sql, &rows)
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
