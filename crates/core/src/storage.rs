//! Reading and writing job rows: plain async functions over a connection.
//!
//! Nothing here knows of actors or HTTP; callers own the connection and decide
//! when to call. Each function issues a fixed number of statements.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, Order};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
};

use crate::entity::job::{self, Column, Entity as Job};
use crate::error::Result;
use crate::job::{ExecutorHealth, JobState, JobType};

/// What a new row says about the process that owns it.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// The component kind.
    pub job_type: JobType,
    /// Normally [`JobState::Running`]: a row is inserted when its process starts.
    pub state: JobState,
    /// The executor's configured name; Airflow also fills it for its own components.
    pub executor_class: Option<String>,
    /// The host of the owning process.
    pub hostname: String,
    /// The user of the owning process.
    pub unixname: String,
    /// For executor rows: what counts as the instance (the broker, for Celery).
    pub executor_instance: Option<String>,
    /// Start time, which is also the first heartbeat.
    pub start_date: DateTime<Utc>,
}

/// Inserts a row and returns it as stored (with its id). Its verdict starts `unknown`.
pub async fn insert(db: &impl ConnectionTrait, new: NewJob) -> Result<job::Model> {
    let row = job::ActiveModel {
        dag_id: Set(None),
        state: Set(Some(new.state.as_str().to_owned())),
        job_type: Set(Some(new.job_type.as_str().to_owned())),
        start_date: Set(Some(new.start_date)),
        end_date: Set(None),
        latest_heartbeat: Set(Some(new.start_date)),
        executor_class: Set(new.executor_class),
        hostname: Set(Some(new.hostname)),
        unixname: Set(Some(new.unixname)),
        executor_health: Set(ExecutorHealth::Unknown.as_str().to_owned()),
        executor_health_reason: Set(None),
        executor_instance: Set(new.executor_instance),
        executor_health_checked_at: Set(None),
        ..Default::default()
    };
    Ok(row.insert(db).await?)
}

/// The row with this id, if any.
pub async fn find(db: &impl ConnectionTrait, id: i32) -> Result<Option<job::Model>> {
    Ok(Job::find_by_id(id).one(db).await?)
}

/// Airflow's "most recent job" of a type, by Airflow's own query
/// (`airflow/jobs/job.py`, `most_recent_job`): running rows first, then the
/// latest heartbeat first. Null heartbeats sort as the database sorts them, as
/// they do for Airflow.
pub async fn most_recent(
    db: &impl ConnectionTrait,
    job_type: JobType,
) -> Result<Option<job::Model>> {
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

/// Every row that has not ended (`end_date` is null), of every type and host,
/// ordered by id.
pub async fn open_jobs(db: &impl ConnectionTrait) -> Result<Vec<job::Model>> {
    Ok(Job::find()
        .filter(Column::EndDate.is_null())
        .order_by(Column::Id, Order::Asc)
        .all(db)
        .await?)
}
