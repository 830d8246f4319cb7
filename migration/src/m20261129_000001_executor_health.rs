//! Airflow's `job` table, and the four executor-health columns.
//!
//! - Where `job` is missing (the embedded SQLite, a fresh database), it is created
//!   as Airflow 3.3.2 creates it: the same columns, types, lengths and three indexes,
//!   plus the executor columns.
//! - Where Airflow already made it, only the missing executor columns are added;
//!   existing rows keep every value and read `executor_health = 'unknown'`.
//! - Each step checks before it acts, so `up` is idempotent even outside the
//!   migration bookkeeping (a table copied from elsewhere, a half-run migration).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

/// The table, and every column this migration names (`JobType` is the column `job_type`).
#[derive(DeriveIden, Clone, Copy)]
#[allow(clippy::enum_variant_names)]
enum Job {
    Table,
    Id,
    DagId,
    State,
    JobType,
    StartDate,
    EndDate,
    LatestHeartbeat,
    ExecutorClass,
    Hostname,
    Unixname,
    ExecutorHealth,
    ExecutorHealthReason,
    ExecutorInstance,
    ExecutorHealthCheckedAt,
}

/// The columns Overseer adds, in the order they are added.
const EXECUTOR_COLUMNS: [Job; 4] = [
    Job::ExecutorHealth,
    Job::ExecutorHealthReason,
    Job::ExecutorInstance,
    Job::ExecutorHealthCheckedAt,
];

/// Airflow's three indexes on `job`: name and columns.
const AIRFLOW_INDEXES: [(&str, &[Job]); 3] = [
    ("idx_job_dag_id", &[Job::DagId]),
    (
        "idx_job_state_heartbeat",
        &[Job::State, Job::LatestHeartbeat],
    ),
    ("job_type_heart", &[Job::JobType, Job::LatestHeartbeat]),
];

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261129_000001_executor_health"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        if !manager.has_table("job").await? {
            create_airflow_job_table(manager, backend).await?;
        }
        for column in EXECUTOR_COLUMNS {
            if !manager.has_column("job", &column.to_string()).await? {
                manager
                    .alter_table(
                        Table::alter()
                            .table(Job::Table)
                            .add_column(executor_column(column, backend))
                            .to_owned(),
                    )
                    .await?;
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in EXECUTOR_COLUMNS.into_iter().rev() {
            crate::columns::drop_if_present(manager, "job", &column.to_string()).await?;
        }
        Ok(())
    }
}

/// Creates `job` as Airflow 3.3.2 does, with the executor columns already in it.
async fn create_airflow_job_table(
    manager: &SchemaManager<'_>,
    backend: DbBackend,
) -> Result<(), DbErr> {
    let mut table = Table::create();
    table
        .table(Job::Table)
        .col(
            ColumnDef::new(Job::Id)
                .integer()
                .not_null()
                .auto_increment()
                .primary_key(),
        )
        .col(ColumnDef::new(Job::DagId).string_len(250).null())
        .col(ColumnDef::new(Job::State).string_len(20).null())
        .col(ColumnDef::new(Job::JobType).string_len(30).null());
    for column in [Job::StartDate, Job::EndDate, Job::LatestHeartbeat] {
        table.col(timestamp_column(column, backend));
    }
    table
        .col(ColumnDef::new(Job::ExecutorClass).string_len(500).null())
        .col(ColumnDef::new(Job::Hostname).string_len(500).null())
        .col(ColumnDef::new(Job::Unixname).string_len(1000).null());
    for column in EXECUTOR_COLUMNS {
        table.col(executor_column(column, backend));
    }
    manager.create_table(table.to_owned()).await?;

    for (name, columns) in AIRFLOW_INDEXES {
        let mut index = Index::create();
        index.name(name).table(Job::Table);
        for column in columns {
            index.col(*column);
        }
        manager.create_index(index.to_owned()).await?;
    }
    Ok(())
}

/// A nullable timestamp in the form Airflow's `UtcDateTime` takes on each backend:
/// `timestamp with time zone` on Postgres, `TIMESTAMP(6)` on MySQL, `DATETIME` on SQLite.
fn timestamp_column(column: Job, backend: DbBackend) -> ColumnDef {
    let mut def = ColumnDef::new(column);
    match backend {
        DbBackend::MySql => def.custom(Alias::new("TIMESTAMP(6)")),
        DbBackend::Sqlite => def.custom(Alias::new("DATETIME")),
        _ => def.timestamp_with_time_zone(),
    };
    def.null().to_owned()
}

/// The definition of one of the four executor columns.
fn executor_column(column: Job, backend: DbBackend) -> ColumnDef {
    match column {
        Job::ExecutorHealth => ColumnDef::new(column)
            .string_len(20)
            .not_null()
            .default("unknown")
            .to_owned(),
        Job::ExecutorHealthReason => ColumnDef::new(column).text().null().to_owned(),
        Job::ExecutorInstance => ColumnDef::new(column).string_len(500).null().to_owned(),
        Job::ExecutorHealthCheckedAt => timestamp_column(column, backend),
        _ => unreachable!("{} is not an executor column", column.to_string()),
    }
}
