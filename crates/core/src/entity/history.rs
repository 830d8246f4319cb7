//! Overseer's own `overseer_executor_history` table: one row per change of an
//! executor's verdict state (migration `m20261201_000001_executor_history`).
//! The typed view of a row is [`crate::history::Transition`].

use sea_orm::entity::prelude::*;

/// One transition: an executor's verdict went from one state to another.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "overseer_executor_history")]
pub struct Model {
    /// Serial primary key: the order the transitions were written in.
    #[sea_orm(primary_key)]
    pub id: i32,
    /// The executor's configured name (`job.executor_class`).
    #[sea_orm(column_type = "String(StringLen::N(500))")]
    pub executor: String,
    /// Its instance (`job.executor_instance`): for Celery the broker, redacted.
    #[sea_orm(column_type = "String(StringLen::N(500))", nullable)]
    pub instance: Option<String>,
    /// The host of the supervisor that made the verdict.
    #[sea_orm(column_type = "String(StringLen::N(500))")]
    pub hostname: String,
    /// The state before: `healthy`, `unhealthy` or `unknown`.
    #[sea_orm(column_type = "String(StringLen::N(20))")]
    pub from_health: String,
    /// The state after.
    #[sea_orm(column_type = "String(StringLen::N(20))")]
    pub to_health: String,
    /// The new verdict's reason (`null` for `healthy`); never a credential.
    #[sea_orm(column_type = "Text", nullable)]
    pub reason: Option<String>,
    /// When the new verdict was made.
    pub at: DateTimeUtc,
    /// On a transition out of `unhealthy`: task instances of the executor
    /// that ended `failed` during the span (migration
    /// `m20261205_000001_history_cost`); null when not counted.
    pub cost_failed: Option<i64>,
    /// ...and those that went `up_for_retry`.
    pub cost_up_for_retry: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
