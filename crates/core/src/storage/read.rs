//! The reads: what a report needs (in one snapshot), this session's rows,
//! Airflow's running jobs, and the schema check at start-up.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, Order};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    TransactionTrait,
};

use super::Session;
use super::sql::{at_or_after, in_snapshot};
use crate::entity::job::{self, Column, Entity as Job};
use crate::error::Result;
use crate::job::{JobState, JobType};
use crate::report::JobRows;

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
/// history's latest transitions are a read of their own (the history's
/// `latest`): its work grows with the history, and a
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

/// Checks that the table has Overseer's columns, so that a missing migration
/// is one clear error at start-up rather than a failure at the first write
/// (with [`crate::history::check_schema`], which checks the history's table).
pub async fn check_schema(db: &impl ConnectionTrait) -> Result<()> {
    Job::find().limit(1).all(db).await.map(|_| ()).map_err(|e| {
        crate::Error::Schema(format!(
            "the job table is missing or lacks Overseer's executor columns (run `overseer migrate`): {e}"
        ))
    })
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
