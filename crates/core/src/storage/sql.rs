//! The SQL helpers of the storage, which the history's statements use too:
//! times cut to the microsecond, one JSON parameter for many rows, times as
//! each backend reads them back, and reads in one snapshot.

use chrono::{DateTime, SecondsFormat, Timelike, Utc};
use sea_orm::{
    AccessMode, ColumnTrait, Condition, ConnectionTrait, DbBackend, IsolationLevel, Statement,
    TransactionSession, TransactionTrait,
};

use crate::entity::job::Column;
use crate::error::Result;

/// A time cut to the microsecond, the precision every backend stores.
pub(crate) fn to_micros(at: DateTime<Utc>) -> DateTime<Utc> {
    at.with_nanosecond(at.nanosecond() / 1_000 * 1_000)
        .unwrap_or(at)
}

/// `sql` with its one parameter: `rows` as a JSON array (text). A field left
/// out of a row (`None`) reads as SQL `NULL` on every backend.
pub(crate) fn json_statement<T: serde::Serialize>(
    backend: DbBackend,
    sql: &str,
    rows: &[T],
) -> Statement {
    let json = serde_json::to_string(rows).expect("rows of strings and numbers serialize");
    Statement::from_sql_and_values(backend, sql, [sea_orm::Value::from(json)])
}

/// A UTC time as text in a JSON row that the database reads back exactly as
/// the driver would have bound it: RFC 3339 for Postgres' `timestamptz`, naive
/// UTC for MySQL (whose session runs in UTC), and on SQLite the RFC 3339 text
/// sqlx writes for a `DateTime<Utc>` (stored as it is).
pub(crate) fn timestamp_text(backend: DbBackend, at: DateTime<Utc>) -> String {
    let at = to_micros(at);
    match backend {
        DbBackend::Postgres => at.to_rfc3339_opts(SecondsFormat::Micros, false),
        DbBackend::MySql => at.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
        _ => at.to_rfc3339_opts(SecondsFormat::AutoSi, false),
    }
}

/// A UTC time as a SQL literal that reads back exactly as the driver would have
/// bound it ([`timestamp_text`], as `timestamptz` on Postgres).
pub(crate) fn timestamp_literal(backend: DbBackend, at: DateTime<Utc>) -> String {
    let text = timestamp_text(backend, at);
    match backend {
        DbBackend::Postgres => format!("CAST('{text}' AS TIMESTAMP WITH TIME ZONE)"),
        _ => format!("'{text}'"),
    }
}

/// Runs `read` in one snapshot, so that a write landing between two of its
/// statements cannot make the report contradict itself. SQLite's transactions
/// are serializable already and take no isolation level.
pub(super) async fn in_snapshot<C, T>(
    db: &C,
    read: impl AsyncFnOnce(&C::Transaction) -> Result<T>,
) -> Result<T>
where
    C: ConnectionTrait + TransactionTrait,
{
    let txn = match db.get_database_backend() {
        DbBackend::Sqlite => db.begin().await?,
        _ => {
            db.begin_with_config(
                Some(IsolationLevel::RepeatableRead),
                Some(AccessMode::ReadOnly),
            )
            .await?
        }
    };
    let read = read(&txn).await?;
    txn.commit().await?;
    Ok(read)
}

/// `column >= at`, as each backend compares its stored times. Postgres and
/// MySQL compare times. SQLite compares text, and holds two forms: Airflow's
/// naive `2026-11-29 19:48:48.365305` and sqlx's `2026-11-29T19:48:48.365305+00:00`.
/// A `T` sorts after a space, so each form is compared with a bound of its
/// own form: a naive value of `at`'s day from `at`'s naive time on (and below
/// the day's `T` values), or any value at or after `at` in sqlx's form (which
/// also takes every later day, in both forms).
pub(super) fn at_or_after(backend: DbBackend, column: Column, at: DateTime<Utc>) -> Condition {
    match backend {
        DbBackend::Sqlite => {
            let naive = at.naive_utc().format("%Y-%m-%d %H:%M:%S%.6f").to_string();
            let day_in_sqlx_form = at.format("%Y-%m-%dT").to_string();
            let sqlx_form = to_micros(at).to_rfc3339_opts(SecondsFormat::AutoSi, false);
            Condition::any()
                .add(
                    Condition::all()
                        .add(column.gte(naive))
                        .add(column.lt(day_in_sqlx_form)),
                )
                .add(column.gte(sqlx_form))
        }
        _ => Condition::all().add(column.gte(at)),
    }
}
