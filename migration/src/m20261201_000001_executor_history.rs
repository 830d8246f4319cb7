//! `overseer_executor_history`: every change of an executor's verdict state
//! (`healthy`, `unhealthy`, `unknown`), a table of Overseer's own.
//!
//! - Added beside Airflow's tables, never inside one: `down` drops it whole
//!   (it holds nothing of Airflow's).
//! - Written by the aggregator in the same transaction as the verdict it
//!   records (`crates/core/src/storage.rs`), read by
//!   `GET /api/v2/monitor/health/history`, pruned after `history.retention`.
//! - Two indexes: on `at` (pruning, the newest first) and on
//!   `(executor, instance, at)` (one executor's history). On MySQL/MariaDB the
//!   two `varchar(500)` columns are indexed by a prefix, as a utf8mb4 key may
//!   hold at most 3072 bytes.
//! - Each step checks before it acts, so `up` is idempotent, as the first
//!   migration's is.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

/// The table, and its columns.
#[derive(DeriveIden, Clone, Copy)]
enum OverseerExecutorHistory {
    Table,
    Id,
    Executor,
    Instance,
    Hostname,
    FromHealth,
    ToHealth,
    Reason,
    At,
}

use OverseerExecutorHistory as History;

/// The table's name, as `has_table` takes it.
const TABLE: &str = "overseer_executor_history";

/// The index on `at`.
const AT_INDEX: &str = "idx_overseer_executor_history_at";

/// The index on `(executor, instance, at)`.
const EXECUTOR_INDEX: &str = "idx_overseer_executor_history_executor";

/// How many characters of `executor` and `instance` MySQL/MariaDB index: two
/// of them in utf8mb4 (4 bytes each) and a timestamp stay under 3072 bytes.
const MYSQL_PREFIX: u32 = 250;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261201_000001_executor_history"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        if !manager.has_table(TABLE).await? {
            manager
                .create_table(
                    Table::create()
                        .table(History::Table)
                        .col(
                            ColumnDef::new(History::Id)
                                .integer()
                                .not_null()
                                .auto_increment()
                                .primary_key(),
                        )
                        .col(ColumnDef::new(History::Executor).string_len(500).not_null())
                        .col(ColumnDef::new(History::Instance).string_len(500).null())
                        .col(ColumnDef::new(History::Hostname).string_len(500).not_null())
                        .col(
                            ColumnDef::new(History::FromHealth)
                                .string_len(20)
                                .not_null(),
                        )
                        .col(ColumnDef::new(History::ToHealth).string_len(20).not_null())
                        .col(ColumnDef::new(History::Reason).text().null())
                        .col(at_column(backend))
                        .to_owned(),
                )
                .await?;
        }
        if !manager.has_index(TABLE, AT_INDEX).await? {
            manager
                .create_index(
                    Index::create()
                        .name(AT_INDEX)
                        .table(History::Table)
                        .col(History::At)
                        .to_owned(),
                )
                .await?;
        }
        if !manager.has_index(TABLE, EXECUTOR_INDEX).await? {
            let mut index = Index::create();
            index.name(EXECUTOR_INDEX).table(History::Table);
            if backend == DbBackend::MySql {
                index
                    .col((History::Executor, MYSQL_PREFIX))
                    .col((History::Instance, MYSQL_PREFIX));
            } else {
                index.col(History::Executor).col(History::Instance);
            }
            index.col(History::At);
            manager.create_index(index.to_owned()).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(History::Table).if_exists().to_owned())
            .await
    }
}

/// `at`, not null, in the form the `job` table's timestamps take on each
/// backend: `timestamp with time zone` on Postgres, `TIMESTAMP(6)` on MySQL
/// (with an explicit default, so that MariaDB gives it no `ON UPDATE`), and
/// `DATETIME` on SQLite.
fn at_column(backend: DbBackend) -> ColumnDef {
    let mut def = ColumnDef::new(History::At);
    match backend {
        DbBackend::MySql => def
            .custom(Alias::new("TIMESTAMP(6)"))
            .default(Expr::cust("CURRENT_TIMESTAMP(6)")),
        DbBackend::Sqlite => def.custom(Alias::new("DATETIME")),
        _ => def.timestamp_with_time_zone(),
    };
    def.not_null().to_owned()
}
