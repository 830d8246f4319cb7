//! The history table's migration on every backend this machine has: `up`
//! creates `overseer_executor_history` with its columns and two indexes (twice
//! in a row changes nothing), and `down` drops it, leaving Airflow's `job`.

use overseer_migration::{Migrator, MigratorTrait};
use overseer_testkit::all_backends;

const TABLE: &str = "overseer_executor_history";

/// Its columns, in table order.
const COLUMNS: [&str; 10] = [
    "id",
    "executor",
    "instance",
    "hostname",
    "from_health",
    "to_health",
    "reason",
    "at",
    "cost_failed",
    "cost_up_for_retry",
];

/// Its indexes, sorted.
const INDEXES: [&str; 2] = [
    "idx_overseer_executor_history_at",
    "idx_overseer_executor_history_executor",
];

#[tokio::test]
async fn up_creates_the_history_table_and_down_drops_it() {
    for db in all_backends().await {
        let backend = db.backend;
        Migrator::up(&db.conn, None).await.unwrap();
        assert_eq!(db.column_names(TABLE).await, COLUMNS, "{backend:?}");
        assert_eq!(db.index_names(TABLE).await, INDEXES, "{backend:?}");

        // Twice, and with the bookkeeping gone, changes nothing.
        db.execute_script("DELETE FROM seaql_migrations").await;
        Migrator::up(&db.conn, None).await.unwrap();
        assert_eq!(db.column_names(TABLE).await, COLUMNS, "{backend:?}");
        assert_eq!(db.index_names(TABLE).await, INDEXES, "{backend:?}");

        // A row as Overseer writes one (a reason with a quote, no instance),
        // and one whose `at` the database fills (MySQL's default).
        db.execute_script(&format!(
            "INSERT INTO {TABLE} (executor, instance, hostname, from_health, to_health, reason, at) \
             VALUES ('CeleryExecutor', NULL, 'sched-1', 'healthy', 'unhealthy', 'it''s down', '2026-11-29 19:48:48.365305')"
        ))
        .await;
        assert_eq!(
            db.strings(&format!("SELECT reason FROM {TABLE}")).await,
            ["it's down"],
            "{backend:?}"
        );

        // Down the last migration only: the cost columns go, the row stays.
        Migrator::down(&db.conn, Some(1)).await.unwrap();
        assert_eq!(db.column_names(TABLE).await, COLUMNS[..8], "{backend:?}");
        assert_eq!(
            db.strings(&format!("SELECT reason FROM {TABLE}")).await,
            ["it's down"],
            "{backend:?}"
        );

        // Down the one before: the history goes, `job` stays whole.
        Migrator::down(&db.conn, Some(1)).await.unwrap();
        assert!(!db.has_table(TABLE).await, "{backend:?}: dropped");
        assert!(db.has_table("job").await, "{backend:?}");
        assert_eq!(db.column_names("job").await.len(), 14, "{backend:?}");

        Migrator::up(&db.conn, None).await.unwrap();
        assert!(db.has_table(TABLE).await, "{backend:?}: made again");
        assert!(
            db.strings(&format!("SELECT reason FROM {TABLE}"))
                .await
                .is_empty(),
            "{backend:?}"
        );

        // Down everything drops it too.
        Migrator::down(&db.conn, None).await.unwrap();
        assert!(!db.has_table(TABLE).await, "{backend:?}");
    }
}
