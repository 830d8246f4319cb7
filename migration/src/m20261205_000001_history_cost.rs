//! Two columns of `overseer_executor_history`: what an `unhealthy` span cost
//! its executor, on the transition that ends it (`cost_failed`: task
//! instances that ended `failed` meanwhile; `cost_up_for_retry`: those that
//! went `up_for_retry`). Null where nothing was counted: a transition that
//! ends no `unhealthy` span, or a count that could not be made.
//!
//! `up` adds each column it does not find (so it is idempotent, as the other
//! migrations are); `down` drops them, keeping the table and its rows.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

/// The table, and the two columns.
#[derive(DeriveIden, Clone, Copy)]
enum OverseerExecutorHistory {
    Table,
    CostFailed,
    CostUpForRetry,
}

use OverseerExecutorHistory as History;

/// The table's name, as `has_column` takes it.
const TABLE: &str = "overseer_executor_history";

const COLUMNS: [History; 2] = [History::CostFailed, History::CostUpForRetry];

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261205_000001_history_cost"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in COLUMNS {
            if !manager.has_column(TABLE, &column.to_string()).await? {
                manager
                    .alter_table(
                        Table::alter()
                            .table(History::Table)
                            .add_column(ColumnDef::new(column).big_integer().null())
                            .to_owned(),
                    )
                    .await?;
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        for column in COLUMNS.into_iter().rev() {
            if !manager.has_table(TABLE).await?
                || !manager.has_column(TABLE, &column.to_string()).await?
            {
                continue;
            }
            if backend == DbBackend::Sqlite {
                // sea-query does not render DROP COLUMN for SQLite; SQLite has had it since 3.35.
                manager
                    .get_connection()
                    .execute_unprepared(&format!(
                        r#"ALTER TABLE "{TABLE}" DROP COLUMN "{}""#,
                        column.to_string()
                    ))
                    .await?;
            } else {
                manager
                    .alter_table(
                        Table::alter()
                            .table(History::Table)
                            .drop_column(column)
                            .to_owned(),
                    )
                    .await?;
            }
        }
        Ok(())
    }
}
