//! The migration on every backend this machine has: an empty database, a `job`
//! table that Airflow 3.3.2 made (with its rows), twice in a row, and `down`.

use overseer_migration::{Migrator, MigratorTrait};
use overseer_testkit::{TestDb, all_backends};
use sea_orm_migration::sea_orm::DbBackend;

/// Airflow 3.3.2's columns of `job`, in its order.
const AIRFLOW_COLUMNS: [&str; 10] = [
    "id",
    "dag_id",
    "state",
    "job_type",
    "start_date",
    "end_date",
    "latest_heartbeat",
    "executor_class",
    "hostname",
    "unixname",
];

/// The four columns Overseer adds, in its order.
const EXECUTOR_COLUMNS: [&str; 4] = [
    "executor_health",
    "executor_health_reason",
    "executor_instance",
    "executor_health_checked_at",
];

/// Airflow's three indexes on `job`, sorted.
const AIRFLOW_INDEXES: [&str; 3] = [
    "idx_job_dag_id",
    "idx_job_state_heartbeat",
    "job_type_heart",
];

fn all_columns() -> Vec<String> {
    AIRFLOW_COLUMNS
        .iter()
        .chain(EXECUTOR_COLUMNS.iter())
        .map(|c| c.to_string())
        .collect()
}

/// Three rows as Airflow writes them: a running scheduler, an ended triggerer, a
/// failed dag processor. Timestamps in the literal form the backend stores.
fn airflow_rows(backend: DbBackend) -> String {
    let ts = |t: &str| match backend {
        DbBackend::Postgres => format!("'2026-11-29 {t}+00'"),
        _ => format!("'2026-11-29 {t}'"),
    };
    format!(
        "INSERT INTO job (id, dag_id, state, job_type, start_date, end_date, latest_heartbeat, executor_class, hostname, unixname) VALUES \
         (1, NULL, 'running', 'SchedulerJob', {a}, NULL, {b}, 'CeleryExecutor', 'sched-1', 'airflow'), \
         (2, NULL, 'success', 'TriggererJob', {a}, {b}, {b}, NULL, 'trig-1', 'airflow'), \
         (3, NULL, 'failed', 'DagProcessorJob', {a}, NULL, {a}, NULL, 'dagp-1', 'airflow')",
        a = ts("19:40:00.000001"),
        b = ts("19:48:48.365305"),
    )
}

/// Every row of `job`, each as one text line, in id order: proves rows were left as they were.
async fn row_dump(db: &TestDb) -> Vec<String> {
    let sql = match db.backend {
        DbBackend::MySql => {
            "SELECT CONCAT_WS('|', id, state, job_type, start_date, end_date, latest_heartbeat, executor_class, hostname, unixname) FROM job ORDER BY id"
        }
        _ => {
            "SELECT CAST(id AS TEXT) || '|' || COALESCE(state, '') || '|' || job_type || '|' || CAST(start_date AS TEXT) || '|' || COALESCE(CAST(end_date AS TEXT), '') || '|' || CAST(latest_heartbeat AS TEXT) || '|' || COALESCE(executor_class, '') || '|' || hostname || '|' || unixname FROM job ORDER BY id"
        }
    };
    db.strings(sql).await
}

#[tokio::test]
async fn an_empty_database_gets_airflows_job_table_with_the_executor_columns() {
    for db in all_backends().await {
        Migrator::up(&db.conn, None).await.unwrap();
        assert_eq!(
            db.column_names("job").await,
            all_columns(),
            "{:?}",
            db.backend
        );
        assert_eq!(
            db.index_names("job").await,
            AIRFLOW_INDEXES,
            "{:?}",
            db.backend
        );

        let status = Migrator::get_pending_migrations(&db.conn).await.unwrap();
        assert!(
            status.is_empty(),
            "{:?}: nothing pending after up",
            db.backend
        );
    }
}

#[tokio::test]
async fn running_up_twice_changes_nothing() {
    for db in all_backends().await {
        Migrator::up(&db.conn, None).await.unwrap();
        let columns = db.column_names("job").await;
        let indexes = db.index_names("job").await;

        Migrator::up(&db.conn, None).await.unwrap();
        assert_eq!(db.column_names("job").await, columns, "{:?}", db.backend);
        assert_eq!(db.index_names("job").await, indexes, "{:?}", db.backend);

        // Even with its bookkeeping gone, the migration only adds what is missing.
        db.execute_script("DELETE FROM seaql_migrations").await;
        Migrator::up(&db.conn, None).await.unwrap();
        assert_eq!(db.column_names("job").await, columns, "{:?}", db.backend);
    }
}

#[tokio::test]
async fn a_table_airflow_made_keeps_its_rows_and_gains_only_the_four_columns() {
    for db in all_backends().await {
        db.create_airflow_job_table().await;
        db.execute_script(&airflow_rows(db.backend)).await;
        let before = row_dump(&db).await;
        assert_eq!(before.len(), 3, "{:?}", db.backend);

        Migrator::up(&db.conn, None).await.unwrap();
        Migrator::up(&db.conn, None).await.unwrap();

        assert_eq!(
            db.column_names("job").await,
            all_columns(),
            "{:?}",
            db.backend
        );
        assert_eq!(
            db.index_names("job").await,
            AIRFLOW_INDEXES,
            "{:?}",
            db.backend
        );
        assert_eq!(
            row_dump(&db).await,
            before,
            "{:?}: rows unchanged",
            db.backend
        );
        assert_eq!(
            db.strings("SELECT executor_health FROM job ORDER BY id")
                .await,
            ["unknown", "unknown", "unknown"],
            "{:?}",
            db.backend
        );
        assert_eq!(
            db.strings("SELECT COALESCE(executor_health_reason, executor_instance, 'null') FROM job ORDER BY id")
                .await,
            ["null", "null", "null"],
            "{:?}",
            db.backend
        );
    }
}

#[tokio::test]
async fn airflows_postgres_ddl_from_pg_dump_migrates() {
    // The exact pg_dump of a real Airflow 3.3.2, schema-qualified, with its sequence.
    let Some(db) = overseer_testkit::postgres().await else {
        return;
    };
    db.execute_script(overseer_testkit::AIRFLOW_JOB_DDL_POSTGRES)
        .await;
    db.execute_script(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, unixname) \
         VALUES ('running', 'SchedulerJob', now(), now(), 'sched-1', 'airflow')",
    )
    .await;
    Migrator::up(&db.conn, None).await.unwrap();
    assert_eq!(db.column_names("job").await, all_columns());
    // Airflow's sequence still numbers new rows after the existing one.
    db.execute_script(
        "INSERT INTO job (state, job_type, hostname) VALUES ('running', 'ExecutorJob', 'x')",
    )
    .await;
    assert_eq!(
        db.strings("SELECT id::text || ':' || executor_health FROM job ORDER BY id")
            .await,
        ["1:unknown", "2:unknown"]
    );
}

#[tokio::test]
async fn down_drops_the_four_columns_and_keeps_the_table_and_its_rows() {
    for db in all_backends().await {
        db.create_airflow_job_table().await;
        db.execute_script(&airflow_rows(db.backend)).await;
        let before = row_dump(&db).await;

        Migrator::up(&db.conn, None).await.unwrap();
        Migrator::down(&db.conn, None).await.unwrap();

        assert!(
            db.has_table("job").await,
            "{:?}: job survives down",
            db.backend
        );
        assert_eq!(
            db.column_names("job").await,
            AIRFLOW_COLUMNS,
            "{:?}",
            db.backend
        );
        assert_eq!(
            db.index_names("job").await,
            AIRFLOW_INDEXES,
            "{:?}",
            db.backend
        );
        assert_eq!(row_dump(&db).await, before, "{:?}", db.backend);

        // And up again restores them.
        Migrator::up(&db.conn, None).await.unwrap();
        assert_eq!(
            db.column_names("job").await,
            all_columns(),
            "{:?}",
            db.backend
        );
    }
}
