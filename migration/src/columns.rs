//! What more than one migration does to a column.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

/// Drops `column` of `table` when the table has it (so `down` is idempotent
/// as `up` is). sea-query renders no `DROP COLUMN` for SQLite, which has had
/// it since 3.35: there it is written out.
pub(crate) async fn drop_if_present(
    manager: &SchemaManager<'_>,
    table: &str,
    column: &str,
) -> Result<(), DbErr> {
    if !manager.has_table(table).await? || !manager.has_column(table, column).await? {
        return Ok(());
    }
    if manager.get_database_backend() == DbBackend::Sqlite {
        manager
            .get_connection()
            .execute_unprepared(&format!(r#"ALTER TABLE "{table}" DROP COLUMN "{column}""#))
            .await?;
        return Ok(());
    }
    manager
        .alter_table(
            Table::alter()
                .table(Alias::new(table))
                .drop_column(Alias::new(column))
                .to_owned(),
        )
        .await
}
