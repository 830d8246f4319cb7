//! Job rows through the storage functions the service calls, on every backend:
//! rows Overseer writes, and rows in the forms Airflow itself stores. Rows are
//! read back through the entity, as any reader of the table would.
//!
//! How many statements a flush runs is counted at the driver and the server,
//! in `flush_statements.rs`.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Timelike, Utc};
use overseer_core::entity::job;
use overseer_core::storage::{self, Session, VerdictRow};
use overseer_core::{ExecutorHealth, JobState, JobType};
use overseer_migration::{Migrator, MigratorTrait};
use overseer_testkit::{TestDb, all_backends};
use sea_orm::{ColumnTrait, DbBackend, EntityTrait, QueryFilter, QueryOrder};

async fn migrated() -> Vec<TestDb> {
    let dbs = all_backends().await;
    for db in &dbs {
        Migrator::up(&db.conn, None).await.unwrap();
    }
    dbs
}

fn at(h: u32, m: u32, s: u32, micros: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, h, m, s)
        .unwrap()
        .with_nanosecond(micros * 1000)
        .unwrap()
}

/// The row with this id, read through the entity.
async fn row(db: &TestDb, id: i32) -> job::Model {
    job::Entity::find_by_id(id)
        .one(&db.conn)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{:?}: no row {id}", db.backend))
}

/// The ids of the rows that have not ended, in id order.
async fn open_ids(db: &TestDb) -> Vec<i32> {
    job::Entity::find()
        .filter(job::Column::EndDate.is_null())
        .order_by_asc(job::Column::Id)
        .all(&db.conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect()
}

#[tokio::test]
async fn a_registered_executor_row_reads_back_field_for_field() {
    for db in migrated().await {
        let session = Session {
            hostname: "sched-1".into(),
            unixname: "airflow".into(),
            started: at(19, 48, 48, 365_305),
        };
        let ids = storage::register(
            &db.conn,
            &session,
            &[(
                "alias:CeleryExecutor".into(),
                Some("redis://broker:6379/0".into()),
            )],
        )
        .await
        .unwrap();

        let read = row(&db, ids[0]).await;
        assert_eq!(read.state().unwrap(), Some(JobState::Running));
        assert_eq!(read.job_type().unwrap(), Some(JobType::ExecutorJob));
        assert_eq!(read.executor_health().unwrap(), ExecutorHealth::Unknown);
        assert_eq!(read.executor_health_reason, None);
        assert_eq!(read.executor_health_checked_at, None);
        assert_eq!(read.start_date, Some(session.started), "{:?}", db.backend);
        assert_eq!(
            read.latest_heartbeat,
            Some(session.started),
            "{:?}",
            db.backend
        );
        assert_eq!(read.end_date, None);
        assert_eq!(read.executor_class.as_deref(), Some("alias:CeleryExecutor"));
        assert_eq!(
            read.executor_instance.as_deref(),
            Some("redis://broker:6379/0")
        );
        assert_eq!(read.hostname.as_deref(), Some("sched-1"));
        assert_eq!(read.unixname.as_deref(), Some("airflow"));

        // The report's read finds it live while its heartbeat is young enough.
        let rows = storage::report_rows(
            &db.conn,
            session.started + chrono::Duration::seconds(10),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(rows.live, vec![read], "{:?}", db.backend);
    }
}

/// Rows as Airflow writes them, in each backend's stored timestamp form:
/// timezone-aware on Postgres (here given at +02:00), naive UTC text on SQLite,
/// naive UTC in MySQL's TIMESTAMP(6).
fn airflow_insert(backend: DbBackend) -> String {
    let ts = |utc: &str, pg_plus_two: &str| match backend {
        DbBackend::Postgres => format!("'2026-11-29 {pg_plus_two}+02'"),
        _ => format!("'2026-11-29 {utc}'"),
    };
    let old = ts("19:40:00.000001", "21:40:00.000001");
    let new = ts("19:48:48.365305", "21:48:48.365305");
    let newest = ts("19:49:00.5", "21:49:00.5");
    format!(
        "INSERT INTO job (id, state, job_type, start_date, end_date, latest_heartbeat, hostname, unixname) VALUES \
         (1, 'running', 'SchedulerJob', {old}, NULL, {new}, 'sched-1', 'airflow'), \
         (2, 'success', 'SchedulerJob', {old}, {newest}, {newest}, 'sched-2', 'airflow'), \
         (3, 'running', 'SchedulerJob', {old}, NULL, {old}, 'sched-3', 'airflow'), \
         (4, 'failed', 'TriggererJob', {old}, NULL, {new}, 'trig-1', 'airflow')"
    )
}

#[tokio::test]
async fn rows_airflow_wrote_read_back_as_utc_on_every_backend() {
    for db in all_backends().await {
        db.create_airflow_job_table().await;
        db.execute_script(&airflow_insert(db.backend)).await;
        Migrator::up(&db.conn, None).await.unwrap();

        let running = row(&db, 1).await;
        assert_eq!(
            running.start_date,
            Some(at(19, 40, 0, 1)),
            "{:?}",
            db.backend
        );
        assert_eq!(
            running.latest_heartbeat,
            Some(at(19, 48, 48, 365_305)),
            "{:?}",
            db.backend
        );
        assert_eq!(running.end_date, None);
        assert_eq!(running.job_type().unwrap(), Some(JobType::SchedulerJob));
        assert_eq!(running.executor_health().unwrap(), ExecutorHealth::Unknown);

        let ended = row(&db, 2).await;
        assert_eq!(
            ended.end_date,
            Some(at(19, 49, 0, 500_000)),
            "{:?}",
            db.backend
        );
    }
}

#[tokio::test]
async fn the_report_read_follows_airflows_rule_running_first_then_latest_heartbeat() {
    for db in all_backends().await {
        db.create_airflow_job_table().await;
        db.execute_script(&airflow_insert(db.backend)).await;
        Migrator::up(&db.conn, None).await.unwrap();

        let now = at(19, 50, 0, 0);
        let rows = storage::report_rows(&db.conn, now, Duration::from_secs(300))
            .await
            .unwrap();
        let [scheduler, triggerer, dag_processor, executor] =
            rows.most_recent.clone().map(|r| r.map(|r| r.id));
        // Row 2 has the newest heartbeat but has ended; of the running rows, row 1 is newer.
        assert_eq!(scheduler, Some(1), "{:?}", db.backend);
        // With no running row, the most recent is the newest heartbeat of any state.
        assert_eq!(triggerer, Some(4), "{:?}", db.backend);
        assert_eq!(dag_processor, None, "{:?}", db.backend);
        assert_eq!(executor, None, "{:?}", db.backend);

        // Live: running, not ended, and a heartbeat within the horizon (19:45 on),
        // compared in each backend's stored form (naive text on SQLite).
        let live: Vec<i32> = rows.live.iter().map(|r| r.id).collect();
        assert_eq!(live, [1], "{:?}", db.backend);
        let rows = storage::report_rows(&db.conn, now, Duration::from_secs(3_600))
            .await
            .unwrap();
        let live: Vec<i32> = rows.live.iter().map(|r| r.id).collect();
        assert_eq!(live, [1, 3], "{:?}: row 3's older heartbeat", db.backend);
        assert_eq!(open_ids(&db).await, [1, 3, 4], "{:?}", db.backend);
    }
}

#[tokio::test]
async fn one_flush_writes_every_verdict_exactly_whatever_its_reason_holds() {
    for db in migrated().await {
        let session = Session::start("sched-1", "airflow");
        let keys: Vec<(String, Option<String>)> = (0..3)
            .map(|i| {
                (
                    format!("e{i}:CeleryExecutor"),
                    Some(format!("redis://b{i}:6379/0")),
                )
            })
            .collect();
        let ids = storage::register(&db.conn, &session, &keys).await.unwrap();
        let tricky =
            "it's \"quoted\", a back\\slash, a\nnew line, 100% _wild_ ünïcode; DROP TABLE job; --";
        let checked_at = at(19, 48, 48, 365_305);
        let verdicts = vec![
            VerdictRow {
                id: ids[0],
                health: ExecutorHealth::unhealthy(tricky),
                checked_at,
            },
            VerdictRow {
                id: ids[2],
                health: ExecutorHealth::Healthy,
                checked_at,
            },
        ];
        storage::flush(&db.conn, &session, Utc::now(), &verdicts)
            .await
            .unwrap();

        let rows: Vec<_> = rows_by_id(&db, &ids).await;
        assert_eq!(
            rows[0].executor_health().unwrap(),
            ExecutorHealth::unhealthy(tricky),
            "{:?}",
            db.backend
        );
        assert_eq!(
            rows[0].executor_health_checked_at,
            Some(checked_at),
            "{:?}",
            db.backend
        );
        assert_eq!(
            rows[1].executor_health().unwrap(),
            ExecutorHealth::Unknown,
            "{:?}",
            db.backend
        );
        assert_eq!(rows[1].executor_health_checked_at, None);
        assert_eq!(
            rows[2].executor_health().unwrap(),
            ExecutorHealth::Healthy,
            "{:?}",
            db.backend
        );
        assert!(
            rows.iter()
                .all(|r| r.latest_heartbeat > Some(session.started)),
            "{:?}",
            db.backend
        );

        // The session's rows end together; nobody else's.
        assert_eq!(
            storage::finish(&db.conn, &session, Utc::now())
                .await
                .unwrap(),
            3
        );
        assert!(open_ids(&db).await.is_empty(), "{:?}", db.backend);
    }
}

async fn rows_by_id(db: &TestDb, ids: &[i32]) -> Vec<job::Model> {
    let mut rows = Vec::new();
    for id in ids {
        rows.push(row(db, *id).await);
    }
    rows
}
