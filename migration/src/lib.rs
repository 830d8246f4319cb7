//! # overseer-migration
//!
//! The schema Overseer needs in Airflow's metadata database, as sea-orm migrations.
//!
//! # Layout
//! - [`Migrator`]: the ordered list of migrations, for `overseer migrate` and `serve`.
//! - `m20261129_000001_executor_health`: Airflow's `job` table where it is missing,
//!   and the four executor-health columns.
//! - `m20261201_000001_executor_history`: `overseer_executor_history`, a table of
//!   Overseer's own: every change of an executor's verdict state.
//! - `m20261205_000001_history_cost`: the history's two columns of what an
//!   `unhealthy` span cost (task instances failed, gone `up_for_retry`).
//!
//! Overseer only ever adds to Airflow's schema: `down` removes what `up` added to a
//! table and never drops the table itself, which Airflow's rows live in. Its own
//! table (the history) `down` drops whole.

pub use sea_orm_migration::prelude::*;

mod columns;
mod m20261129_000001_executor_health;
mod m20261201_000001_executor_history;
mod m20261205_000001_history_cost;

/// Overseer's migrations, oldest first.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261129_000001_executor_health::Migration),
            Box::new(m20261201_000001_executor_history::Migration),
            Box::new(m20261205_000001_history_cost::Migration),
        ]
    }
}
