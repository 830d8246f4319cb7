//! Overseer's connections to a shared metadata database say whose they are:
//! on a real Postgres, `pg_stat_activity` shows them as `overseer`, or as the
//! URL names them.

use overseer_core::connect;
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};

/// The `application_name` the server holds for a connection opened as Overseer
/// opens them, to `url`.
async fn application_name(url: &str) -> String {
    let db = Database::connect(connect::options(url)).await.unwrap();
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()",
        ))
        .await
        .unwrap()
        .unwrap();
    let name: String = row.try_get_by_index(0).unwrap();
    db.close().await.unwrap();
    name
}

#[tokio::test]
async fn postgres_shows_overseer_s_connections_by_name() {
    let Some(db) = overseer_testkit::postgres().await else {
        return;
    };
    assert_eq!(application_name(&db.url).await, "overseer");
    let join = if db.url.contains('?') { '&' } else { '?' };
    let own = format!("{}{join}application_name=sched-1-overseer", db.url);
    assert_eq!(application_name(&own).await, "sched-1-overseer");
}
