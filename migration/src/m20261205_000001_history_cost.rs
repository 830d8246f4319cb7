//! Two columns of `overseer_executor_history`: what an `unhealthy` span cost
//! its executor, on the transition that ends it (`cost_failed`: task
//! instances that ended `failed` meanwhile; `cost_up_for_retry`: those that
//! went `up_for_retry`). Null where nothing was counted: a transition that
//! ends no `unhealthy` span, or a count that could not be made.
//!
//! `up` adds each column it does not find (so it is idempotent, as the other
//! migrations are); `down` drops them, keeping the table and its rows.

use sea_orm_migration::prelude::*;

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
        for column in COLUMNS.into_iter().rev() {
            crate::columns::drop_if_present(manager, TABLE, &column.to_string()).await?;
        }
        Ok(())
    }
}
