//! Job rows through the storage functions the service calls, on every backend:
//! rows Overseer writes, and rows in the forms Airflow itself stores. Rows are
//! read back through the entity, as any reader of the table would.
//!
//! How many statements a flush runs is counted at the driver and the server,
//! in `flush_statements.rs`.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Timelike, Utc};
use overseer_core::entity::job;
use overseer_core::history::{HistoryWrite, flush_with_history};
use overseer_core::storage::{self, ExecutorIdentity, Session, VerdictRow};
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
            &[ExecutorIdentity::new(
                "alias:CeleryExecutor",
                Some("redis://broker:6379/0".into()),
            )],
        )
        .await
        .unwrap();

        let read = row(&db, ids[0]).await;
        assert_eq!(read.state().unwrap(), Some(JobState::Running));
        assert_eq!(read.job_type().unwrap(), Some(JobType::ExecutorJob));
        assert_eq!(read.executor_health().unwrap(), ExecutorHealth::default());
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
        assert_eq!(
            running.executor_health().unwrap(),
            ExecutorHealth::default()
        );

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
        let keys: Vec<ExecutorIdentity> = (0..3)
            .map(|i| {
                ExecutorIdentity::new(
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
                note: None,
                checked_at,
            },
            VerdictRow {
                id: ids[2],
                health: ExecutorHealth::Healthy,
                note: Some(
                    "healthy through failover; not answering: broker redis://standby:6379/0".into(),
                ),
                checked_at,
            },
        ];
        flush_with_history(
            &db.conn,
            &session,
            Utc::now(),
            &verdicts,
            &HistoryWrite::default(),
        )
        .await
        .unwrap();

        let rows: Vec<_> = rows_by_id(&db, &ids).await;
        // A healthy verdict's note is its row's reason.
        assert_eq!(
            rows[2].executor_health_reason.as_deref(),
            Some("healthy through failover; not answering: broker redis://standby:6379/0"),
            "{:?}",
            db.backend
        );
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
            ExecutorHealth::default(),
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

/// `executor_health_checked_at` through three flushes: a verdict written
/// carries the time it was made; while it holds, each heartbeat moves it to the
/// heartbeat's time, with no statement of its own; a row with no verdict keeps
/// none.
#[tokio::test]
async fn a_held_verdicts_checked_at_moves_with_the_heartbeat_and_a_new_one_keeps_its_time() {
    for db in migrated().await {
        let session = Session {
            hostname: "sched-1".into(),
            unixname: "airflow".into(),
            started: at(19, 0, 0, 0),
        };
        let keys: Vec<ExecutorIdentity> = (0..3)
            .map(|i| ExecutorIdentity::new(format!("e{i}:CeleryExecutor"), None))
            .collect();
        let ids = storage::register(&db.conn, &session, &keys).await.unwrap();
        let verdict = |id: i32, health: ExecutorHealth, checked_at| VerdictRow {
            id,
            health,
            note: None,
            checked_at,
        };

        // 19:00:05: two verdicts, made at 19:00:04.5.
        let made = at(19, 0, 4, 500_000);
        let first = vec![
            verdict(ids[0], ExecutorHealth::Healthy, made),
            verdict(ids[1], ExecutorHealth::unhealthy("broker down"), made),
        ];
        flush_with_history(
            &db.conn,
            &session,
            at(19, 0, 5, 0),
            &first,
            &HistoryWrite::default(),
        )
        .await
        .unwrap();
        let checked = |rows: &[job::Model]| -> Vec<Option<DateTime<Utc>>> {
            rows.iter().map(|r| r.executor_health_checked_at).collect()
        };
        let rows = rows_by_id(&db, &ids).await;
        assert_eq!(
            checked(&rows),
            [Some(made), Some(made), None],
            "{:?}",
            db.backend
        );

        // 19:00:10: nothing changed: both verdicts are checked as of the heartbeat.
        let statements = flush_with_history(
            &db.conn,
            &session,
            at(19, 0, 10, 0),
            &[],
            &HistoryWrite::default(),
        )
        .await
        .unwrap();
        assert_eq!(statements.statements, 1);
        let rows = rows_by_id(&db, &ids).await;
        let beat = Some(at(19, 0, 10, 0));
        assert_eq!(checked(&rows), [beat, beat, None], "{:?}", db.backend);
        assert!(rows.iter().all(|r| r.latest_heartbeat == beat));
        assert_eq!(
            rows[1].executor_health().unwrap(),
            ExecutorHealth::unhealthy("broker down")
        );

        // 19:00:15: the second recovered at 19:00:12; the first still holds.
        let recovered = at(19, 0, 12, 0);
        flush_with_history(
            &db.conn,
            &session,
            at(19, 0, 15, 0),
            &[verdict(ids[1], ExecutorHealth::Healthy, recovered)],
            &HistoryWrite::default(),
        )
        .await
        .unwrap();
        let rows = rows_by_id(&db, &ids).await;
        assert_eq!(
            checked(&rows),
            [Some(at(19, 0, 15, 0)), Some(recovered), None],
            "{:?}",
            db.backend
        );
        assert_eq!(rows[1].executor_health().unwrap(), ExecutorHealth::Healthy);
        assert_eq!(rows[1].executor_health_reason, None);
    }
}

/// What a refresh reads: never the rows of its own session (it holds those),
/// at first every other live row, then only the rows whose heartbeat, end or
/// verdict time is at or after the time asked, in both of SQLite's time forms.
#[tokio::test]
async fn a_refresh_reads_other_sessions_rows_and_then_only_what_changed() {
    for db in all_backends().await {
        db.create_airflow_job_table().await;
        Migrator::up(&db.conn, None).await.unwrap();
        let ours = Session {
            hostname: "sched-1".into(),
            unixname: "airflow".into(),
            started: at(19, 0, 0, 0),
        };
        let theirs = Session {
            hostname: "sched-2".into(),
            ..ours.clone()
        };
        let key = |class: &str| {
            vec![ExecutorIdentity::new(
                class,
                Some("redis://broker:6379/0".to_owned()),
            )]
        };
        let own = storage::register(&db.conn, &ours, &key("CeleryExecutor"))
            .await
            .unwrap();
        let other = storage::register(&db.conn, &theirs, &key("CeleryExecutor"))
            .await
            .unwrap();
        // A scheduler as Airflow writes it (naive text on SQLite), heartbeat 19:00:20.
        let scheduler_beat = match db.backend {
            DbBackend::Postgres => "'2026-11-29 19:00:20+00'",
            _ => "'2026-11-29 19:00:20.000000'",
        };
        db.execute_script(&format!(
            "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, unixname, executor_health) \
             VALUES ('running', 'SchedulerJob', {scheduler_beat}, {scheduler_beat}, 'sched-1', 'airflow', 'unknown')"
        ))
        .await;
        let horizon = Duration::from_secs(60);
        let ids = |read: &storage::RowsRead| read.rows.iter().map(|r| r.id).collect::<Vec<_>>();

        // The first read: every live row but our own.
        let now = at(19, 0, 30, 0);
        let read = storage::read_for_report(&db.conn, &ours, None, now, horizon)
            .await
            .unwrap();
        assert!(read.full);
        let scheduler = read
            .rows
            .iter()
            .find(|r| r.job_type.as_deref() == Some("SchedulerJob"))
            .map(|r| r.id)
            .unwrap_or_else(|| panic!("{:?}: the scheduler row", db.backend));
        assert_eq!(ids(&read), [other[0], scheduler], "{:?}", db.backend);
        // The most recent executor job is still Airflow's rule over every row.
        assert!(read.most_recent[3].is_some(), "{:?}", db.backend);

        // Nothing changed at or after 19:00:21.
        let changed = |since| storage::read_for_report(&db.conn, &ours, Some(since), now, horizon);
        let read = changed(at(19, 0, 21, 0)).await.unwrap();
        assert!(!read.full);
        assert_eq!(ids(&read), Vec::<i32>::new(), "{:?}", db.backend);
        // The scheduler's heartbeat (19:00:20, naive on SQLite) is at or after 19:00:20.
        assert_eq!(
            ids(&read_at(&changed, 20).await),
            [scheduler],
            "{:?}",
            db.backend
        );

        // Both sessions heartbeat at 19:00:25: only the other one's row is read.
        for session in [&ours, &theirs] {
            flush_with_history(
                &db.conn,
                session,
                at(19, 0, 25, 0),
                &[],
                &HistoryWrite::default(),
            )
            .await
            .unwrap();
        }
        assert_eq!(
            ids(&read_at(&changed, 24).await),
            [other[0]],
            "{:?}",
            db.backend
        );
        assert_eq!(ids(&read_at(&changed, 26).await), Vec::<i32>::new());

        // The other session ends at 19:00:28: its row is read once more, ended.
        storage::finish(&db.conn, &theirs, at(19, 0, 28, 0))
            .await
            .unwrap();
        let read = read_at(&changed, 27).await;
        assert_eq!(ids(&read), [other[0]], "{:?}", db.backend);
        assert!(read.rows[0].end_date.is_some());
        assert_eq!(own.len(), 1);
    }
}

/// A read of what changed at or after 19:00:`second`.
async fn read_at<F, Fut>(changed: &F, second: u32) -> storage::RowsRead
where
    F: Fn(DateTime<Utc>) -> Fut,
    Fut: Future<Output = overseer_core::Result<storage::RowsRead>>,
{
    changed(at(19, 0, second, 0)).await.unwrap()
}
