//! Airflow's `job` table, column for column as Airflow 3.3.2 creates it, plus the
//! four executor-health columns Overseer adds.
//!
//! Text columns that Airflow owns (`state`, `job_type`, `executor_health`) are kept
//! as strings here so that any row Airflow wrote reads back; the typed views are
//! [`Model::state`], [`Model::job_type`] and [`Model::executor_health`].
//!
//! Timestamps are read as UTC whichever form the database stores them in:
//! `timestamp with time zone` on Postgres, naive UTC in MySQL's `TIMESTAMP(6)`
//! (the driver sets the session time zone to UTC), and naive UTC text such as
//! `2026-11-29 19:48:48.365305` in SQLite.

use sea_orm::entity::prelude::*;

use crate::error::Result;
use crate::job::{ExecutorHealth, JobState, JobType};

/// One row of `job`: one run of one Airflow component, or one supervised executor.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "job")]
pub struct Model {
    /// Serial primary key.
    #[sea_orm(primary_key)]
    pub id: i32,
    /// Airflow's: the DAG a backfill job ran; null for the components Overseer reads.
    #[sea_orm(column_type = "String(StringLen::N(250))", nullable)]
    pub dag_id: Option<String>,
    /// `running`, `success`, `restarting` or `failed` ([`JobState`]).
    #[sea_orm(column_type = "String(StringLen::N(20))", nullable)]
    pub state: Option<String>,
    /// `SchedulerJob`, `TriggererJob`, `DagProcessorJob` or `ExecutorJob` ([`JobType`]).
    #[sea_orm(column_type = "String(StringLen::N(30))", nullable)]
    pub job_type: Option<String>,
    /// When the process behind the row started.
    pub start_date: Option<DateTimeUtc>,
    /// When it ended; null while it runs (or when it crashed).
    pub end_date: Option<DateTimeUtc>,
    /// The last time the process said it was alive.
    pub latest_heartbeat: Option<DateTimeUtc>,
    /// The executor's configured name: `CeleryExecutor`, or `alias:CeleryExecutor`.
    #[sea_orm(column_type = "String(StringLen::N(500))", nullable)]
    pub executor_class: Option<String>,
    /// The host of the process that owns the row.
    #[sea_orm(column_type = "String(StringLen::N(500))", nullable)]
    pub hostname: Option<String>,
    /// The user of the process that owns the row.
    #[sea_orm(column_type = "String(StringLen::N(1000))", nullable)]
    pub unixname: Option<String>,
    /// Overseer's verdict: `healthy`, `unhealthy` or `unknown` ([`ExecutorHealth`]).
    #[sea_orm(column_type = "String(StringLen::N(20))", default_value = "unknown")]
    pub executor_health: String,
    /// Why, for `unhealthy`. Never a credential.
    #[sea_orm(column_type = "Text", nullable)]
    pub executor_health_reason: Option<String>,
    /// What counts as the executor's instance: for Celery, the broker's redacted URL.
    #[sea_orm(column_type = "String(StringLen::N(500))", nullable)]
    pub executor_instance: Option<String>,
    /// When the verdict was made.
    pub executor_health_checked_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

impl Model {
    /// The row's state, if it holds one Airflow defines.
    pub fn state(&self) -> Result<Option<JobState>> {
        self.state.as_deref().map(str::parse).transpose()
    }

    /// The row's job type, if it holds one Overseer knows.
    pub fn job_type(&self) -> Result<Option<JobType>> {
        self.job_type.as_deref().map(str::parse).transpose()
    }

    /// The row's executor verdict, from `executor_health` and its reason.
    pub fn executor_health(&self) -> Result<ExecutorHealth> {
        ExecutorHealth::from_columns(
            &self.executor_health,
            self.executor_health_reason.as_deref(),
        )
    }
}
