//! The Jobs table through a whole run, on real databases: rows inserted and
//! heartbeating with their verdicts, ended with `success` on shutdown, crashed
//! rows closed on the next start, a Postgres outage survived with no verdict
//! lost, refreshes that never read this process's own rows, and a JSON
//! rendered only when the report changes.

use crate::support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{Timelike, Utc};
use overseer_core::entity::job;
use overseer_core::report::Status;
use overseer_core::storage::{self, ExecutorIdentity, Session};
use overseer_core::{Executor, ExecutorHealth, JobState, JobType};
use overseer_migration::{Migrator, MigratorTrait};
use overseer_testkit::{TestDb, wait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder,
};
use support::{PATIENCE, Switch, migrated_throwaway_postgres, quick, report_until};
use tokio_stream::StreamExt;

/// The row with this id.
async fn row(db: &DatabaseConnection, id: i32) -> job::Model {
    job::Entity::find_by_id(id)
        .one(db)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no row {id}"))
}

async fn executor_rows(db: &DatabaseConnection) -> Vec<job::Model> {
    job::Entity::find()
        .filter(job::Column::JobType.eq(JobType::ExecutorJob.as_str()))
        .order_by_asc(job::Column::Id)
        .all(db)
        .await
        .unwrap()
}

/// Waits until `done` holds (a counter the actors keep).
async fn until(what: &str, done: impl Fn() -> bool) {
    wait::until_true_async(what, PATIENCE, done).await;
}

/// Polls the table until `done` holds for the executor rows.
async fn rows_until(
    db: &DatabaseConnection,
    what: &str,
    done: impl Fn(&[job::Model]) -> bool,
) -> Vec<job::Model> {
    wait::until_async(what, PATIENCE, || async {
        match job::Entity::find()
            .filter(job::Column::JobType.eq(JobType::ExecutorJob.as_str()))
            .order_by_asc(job::Column::Id)
            .all(db)
            .await
        {
            Ok(rows) if done(&rows) => Ok(rows),
            read => Err(read),
        }
    })
    .await
}

async fn a_run_leaves_running_rows_with_verdicts_then_success(db: TestDb) {
    Migrator::up(&db.conn, None).await.unwrap();
    let broken = Switch::new(ExecutorHealth::unhealthy(
        "broker redis://broker:6379/0 refused the connection",
    ));
    let overseer = quick(&db.url, "sched-1")
        .executor(
            Executor::new("CeleryExecutor", Switch::new(ExecutorHealth::Healthy))
                .with_instance("redis://broker:6379/0"),
        )
        .executor(
            Executor::new("fast:CeleryExecutor", broken.clone())
                .with_instance("amqp://rabbit:5672//"),
        )
        .executor(Executor::unchecked("LocalExecutor"))
        .start()
        .await
        .unwrap();

    // subscribe(): the report now, then each change.
    let mut changes = overseer.subscribe();
    let first = changes.next().await.expect("the current report");
    let second = tokio::time::timeout(PATIENCE, changes.next())
        .await
        .expect("a change within the patience")
        .expect("another report");
    assert_ne!(
        first.json(),
        second.json(),
        "each report the stream gives is a change"
    );

    let report = report_until(&overseer, "three verdicts in the report", |r| {
        r.executor.as_ref().is_some_and(|e| {
            e.instances.len() == 3 && e.instances.iter().all(|i| i.checked_at.is_some())
        })
    })
    .await;
    let entry = report.executor.as_ref().unwrap();
    assert_eq!(entry.status, Some(Status::Unhealthy), "{:?}", db.backend);
    let by_class = |class: &str| {
        entry
            .instances
            .iter()
            .find(|i| i.executor.as_deref() == Some(class))
            .unwrap()
    };
    assert_eq!(by_class("CeleryExecutor").health, ExecutorHealth::Healthy);
    assert_eq!(
        by_class("fast:CeleryExecutor").health,
        ExecutorHealth::unhealthy("broker redis://broker:6379/0 refused the connection")
    );
    assert_eq!(
        by_class("LocalExecutor").health,
        ExecutorHealth::unknown("no health check for LocalExecutor")
    );

    // The report shows this process's verdicts as soon as they are made; the
    // table has them after the next flush.
    let rows = rows_until(&db.conn, "three verdicts written", |rows| {
        rows.iter().all(|r| r.executor_health_checked_at.is_some())
    })
    .await;
    assert_eq!(rows.len(), 3, "{:?}: one row per executor", db.backend);
    for row in &rows {
        assert_eq!(row.state().unwrap(), Some(JobState::Running));
        assert_eq!(row.hostname.as_deref(), Some("sched-1"));
        assert_eq!(row.end_date, None);
        let age = Utc::now() - row.latest_heartbeat.unwrap();
        assert!(
            age < chrono::Duration::seconds(10),
            "{:?}: heartbeat {age} old",
            db.backend
        );
    }
    assert_eq!(
        rows[1].executor_instance.as_deref(),
        Some("amqp://rabbit:5672//")
    );
    assert!(
        rows[0].latest_heartbeat > rows[0].start_date,
        "{:?}: heartbeats advance",
        db.backend
    );

    // The verdict changes; the row follows.
    broken.set(ExecutorHealth::Healthy);
    rows_until(&db.conn, "the recovered verdict in the table", |rows| {
        rows.iter().all(|r| r.executor_health != "unhealthy")
    })
    .await;

    // How many statements those flushes ran is counted where they ran, in
    // flush_statements.rs, not by the aggregator's own account.
    assert!(overseer.aggregator_stats().flushes.load(Ordering::Relaxed) > 0);

    overseer.shutdown().await.unwrap();
    for row in executor_rows(&db.conn).await {
        assert_eq!(
            row.state().unwrap(),
            Some(JobState::Success),
            "{:?}",
            db.backend
        );
        assert!(row.end_date.is_some(), "{:?}", db.backend);
    }
}

#[tokio::test]
async fn run_on_sqlite() {
    a_run_leaves_running_rows_with_verdicts_then_success(overseer_testkit::sqlite().await).await;
}

#[tokio::test]
async fn run_on_postgres() {
    if let Some(db) = overseer_testkit::postgres().await {
        a_run_leaves_running_rows_with_verdicts_then_success(db).await;
    }
}

#[tokio::test]
async fn run_on_mariadb() {
    if let Some(db) = overseer_testkit::mariadb().await {
        a_run_leaves_running_rows_with_verdicts_then_success(db).await;
    }
}

#[tokio::test]
async fn a_restart_closes_the_rows_a_crash_left_open_and_only_those() {
    for db in overseer_testkit::all_backends().await {
        Migrator::up(&db.conn, None).await.unwrap();
        // What a crash leaves: the rows of sessions that never ended.
        let crashed_at = Utc::now() - chrono::Duration::minutes(10);
        let crashed_at = crashed_at.with_nanosecond(0).unwrap();
        let crashed_session = |host: &str| Session {
            hostname: host.into(),
            unixname: "airflow".into(),
            started: crashed_at,
        };
        let broker = || Some("redis://broker:6379/0".to_owned());
        let here = storage::register(
            &db.conn,
            &crashed_session("sched-1"),
            &[
                ExecutorIdentity::new("CeleryExecutor", broker()),
                ExecutorIdentity::new("team:my.BatchExecutor", broker()),
            ],
        )
        .await
        .unwrap();
        let (crashed, other_executor) = (here[0], here[1]);
        let other_host = storage::register(
            &db.conn,
            &crashed_session("sched-2"),
            &[ExecutorIdentity::new("CeleryExecutor", broker())],
        )
        .await
        .unwrap()[0];

        let overseer = quick(&db.url, "sched-1")
            .executor(
                Executor::new("CeleryExecutor", Switch::new(ExecutorHealth::Healthy))
                    .with_instance("redis://broker:6379/0"),
            )
            .start()
            .await
            .unwrap();

        let closed = row(&db.conn, crashed).await;
        assert_eq!(
            closed.state().unwrap(),
            Some(JobState::Failed),
            "{:?}",
            db.backend
        );
        assert!(closed.end_date.is_some());
        for untouched in [other_host, other_executor] {
            let row = row(&db.conn, untouched).await;
            assert_eq!(
                row.state().unwrap(),
                Some(JobState::Running),
                "{:?}",
                db.backend
            );
            assert_eq!(row.end_date, None);
        }
        let fresh: Vec<_> = executor_rows(&db.conn)
            .await
            .into_iter()
            .filter(|r| r.hostname.as_deref() == Some("sched-1") && r.end_date.is_none())
            .filter(|r| r.executor_class.as_deref() == Some("CeleryExecutor"))
            .collect();
        assert_eq!(fresh.len(), 1, "{:?}: one fresh running row", db.backend);
        overseer.shutdown().await.unwrap();
    }
}

/// A database that answers every read but refuses every write (its disk
/// full: here a trigger that aborts each update of `job`) is not a healthy
/// metadatabase: unhealthy while writes fail, healthy again once one lands.
#[tokio::test]
async fn a_database_that_refuses_writes_reads_as_an_unhealthy_metadatabase() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let overseer = quick(&db.url, "sched-1")
        .executor(Executor::new(
            "CeleryExecutor",
            Switch::new(ExecutorHealth::Healthy),
        ))
        .start()
        .await
        .unwrap();
    report_until(&overseer, "a healthy metadatabase", |r| {
        r.metadatabase == Status::Healthy
    })
    .await;
    db.conn
        .execute_unprepared(
            "CREATE TRIGGER disk_full BEFORE UPDATE ON job \
             BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END",
        )
        .await
        .unwrap();
    report_until(&overseer, "metadatabase unhealthy while writes fail", |r| {
        r.metadatabase == Status::Unhealthy
    })
    .await;
    db.conn
        .execute_unprepared("DROP TRIGGER disk_full")
        .await
        .unwrap();
    report_until(&overseer, "metadatabase healthy once a write lands", |r| {
        r.metadatabase == Status::Healthy
    })
    .await;
    overseer.shutdown().await.unwrap();
}

/// Another writer ends this session's rows (an Overseer on another machine,
/// given the same hostname, found them silent and closed them as a crash's):
/// this one says so, naming the hostname, stops, and writes nothing more into
/// the ended rows: no heartbeat, no verdict, no `success` over the `failed`.
/// On every backend, as each counts the rows an `UPDATE` reached its own way.
#[tokio::test]
async fn an_overseer_whose_rows_another_writer_ended_says_so_and_stops() {
    for db in overseer_testkit::all_backends().await {
        Migrator::up(&db.conn, None).await.unwrap();
        let switch = Switch::new(ExecutorHealth::Healthy);
        let overseer = quick(&db.url, "sched-1")
            .executor(
                Executor::new("CeleryExecutor", switch.clone())
                    .with_instance("redis://broker:6379/0"),
            )
            .start()
            .await
            .unwrap();
        let registered = executor_rows(&db.conn).await;
        let (id, beat) = (registered[0].id, registered[0].latest_heartbeat);
        rows_until(&db.conn, "a heartbeat and a verdict written", |rows| {
            rows[0].latest_heartbeat > beat && rows[0].executor_health == "healthy"
        })
        .await;

        // The other writer: what its start-up does to rows it finds silent.
        storage::close_crashed(&db.conn, &[id], Utc::now())
            .await
            .unwrap();
        let closed = row(&db.conn, id).await;
        switch.set(ExecutorHealth::unhealthy("broker down"));
        let why = tokio::time::timeout(PATIENCE, overseer.ousted())
            .await
            .unwrap_or_else(|_| panic!("{:?}: the ended rows went unnoticed", db.backend));
        assert!(
            why.starts_with(
                "another writer ended 1 of the 1 executor rows this Overseer keeps for \
                 hostname \"sched-1\" (another Overseer given the same hostname took them over?)"
            ) && why.ends_with("give each Overseer a hostname of its own ([supervisor] hostname)"),
            "{:?}: {why}",
            db.backend
        );
        overseer.shutdown().await.unwrap();
        let after = row(&db.conn, id).await;
        assert_eq!(
            (
                after.state().unwrap(),
                after.end_date,
                after.latest_heartbeat,
                after.executor_health.as_str(),
            ),
            (
                Some(JobState::Failed),
                closed.end_date,
                closed.latest_heartbeat,
                "healthy"
            ),
            "{:?}: the ended row is left as the other writer ended it",
            db.backend
        );
    }
}

/// Two Overseers given one hostname: the second refuses to start, naming the
/// first, whose rows go on running and heartbeating (it once closed them as a
/// crash's, and the first went on with its heartbeats landing nowhere). A
/// crash's rows, still fresh when the restart comes at once, are closed.
#[tokio::test]
async fn a_second_overseer_with_the_same_hostname_refuses_and_the_first_runs_on() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let celery = || {
        Executor::new("CeleryExecutor", Switch::new(ExecutorHealth::Healthy))
            .with_instance("redis://broker:6379/0")
    };
    let first = quick(&db.url, "sched-1")
        .executor(celery())
        .start()
        .await
        .unwrap();
    let second = quick(&db.url, "sched-1").executor(celery()).start().await;
    let refusal = second
        .err()
        .expect("the second start is refused")
        .to_string();
    assert!(
        refusal.starts_with(
            "another Overseer with hostname \"sched-1\" supervises \
             CeleryExecutor @ redis://broker:6379/0: its row "
        ) && refusal.ends_with(
            "give this one a hostname of its own ([supervisor] hostname) or stop that one"
        ),
        "{refusal}"
    );
    let running = executor_rows(&db.conn).await;
    assert_eq!(running.len(), 1, "{running:?}");
    let (id, beat) = (running[0].id, running[0].latest_heartbeat);
    assert_eq!(running[0].state().unwrap(), Some(JobState::Running));
    rows_until(&db.conn, "the first one's heartbeat to go on", |rows| {
        rows[0].latest_heartbeat > beat && rows[0].end_date.is_none()
    })
    .await;
    // A stand-in for a crash: its row heartbeat just now, and no more.
    first.shutdown().await.unwrap();
    let crashed = storage::register(
        &db.conn,
        &Session {
            hostname: "sched-1".into(),
            unixname: "airflow".into(),
            started: Utc::now(),
        },
        &[ExecutorIdentity::new(
            "CeleryExecutor",
            Some("redis://broker:6379/0".to_owned()),
        )],
    )
    .await
    .unwrap()[0];
    let restarted = quick(&db.url, "sched-1")
        .executor(celery())
        .start()
        .await
        .unwrap();
    assert_eq!(
        row(&db.conn, crashed).await.state().unwrap(),
        Some(JobState::Failed)
    );
    assert_eq!(
        row(&db.conn, id).await.state().unwrap(),
        Some(JobState::Success)
    );
    restarted.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_postgres_outage_is_survived_and_the_latest_verdict_written_when_it_returns() {
    let Some(server) = migrated_throwaway_postgres().await else {
        return;
    };

    let check = Switch::new(ExecutorHealth::Healthy);
    let overseer = quick(&server.url(), "sched-1")
        .executor(
            Executor::new("CeleryExecutor", check.clone()).with_instance("redis://broker:6379/0"),
        )
        .start()
        .await
        .unwrap();
    report_until(&overseer, "healthy before the outage", |r| {
        r.executor.as_ref().is_some_and(|e| {
            e.instances
                .iter()
                .any(|i| i.health == ExecutorHealth::Healthy)
        })
    })
    .await;

    server.kill();
    check.set(ExecutorHealth::unhealthy("broker down during the outage"));
    report_until(&overseer, "metadatabase unhealthy during the outage", |r| {
        r.metadatabase == Status::Unhealthy
    })
    .await;
    // The report keeps the last rows it read while the database is away.
    assert!(overseer.report().executor.is_some());

    // The new verdict is made while the database is away: one poll at a time is
    // in flight, so the second poll answered from here on was sent after the
    // switch. Its verdict then goes to the aggregator, which cannot write it.
    let executor = overseer.executor_stats()[0].1.clone();
    let answered = executor.poll_count.load(Ordering::Relaxed);
    until("two polls answered after the switch", || {
        executor.poll_count.load(Ordering::Relaxed) >= answered + 2
    })
    .await;
    // A write waits for the database up to its timeout (two heartbeats, here
    // under the outage's length) before it counts as failed.
    let stats = overseer.aggregator_stats();
    until("a write failed during the outage", || {
        stats.flush_failures.load(Ordering::Relaxed) > 0
    })
    .await;

    server.resume().unwrap();
    report_until(
        &overseer,
        "the latest verdict, read back after the outage",
        |r| {
            r.metadatabase == Status::Healthy
                && r.executor.as_ref().is_some_and(|e| {
                    e.instances.iter().any(|i| {
                        i.health == ExecutorHealth::unhealthy("broker down during the outage")
                    })
                })
        },
    )
    .await;
    // The report shows this process's verdict from memory; the table has it
    // once the database is back, before any shutdown writes it.
    let db = sea_orm::Database::connect(server.url()).await.unwrap();
    rows_until(&db, "the latest verdict written after the outage", |rows| {
        rows.iter()
            .any(|r| r.executor_health_reason.as_deref() == Some("broker down during the outage"))
    })
    .await;
    overseer.shutdown().await.unwrap();

    let rows = executor_rows(&db).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].executor_health, "unhealthy");
    assert_eq!(
        rows[0].executor_health_reason.as_deref(),
        Some("broker down during the outage")
    );
    assert_eq!(rows[0].state().unwrap(), Some(JobState::Success));
    db.close().await.unwrap();
}

/// Recovery is as quick as failure: the job table of a Postgres of the
/// test's own is made unreadable (renamed away) long enough for the reads'
/// back-off to grow (eight failed reads: before, it doubled to 12.8 s by
/// then), then given back. `metadatabase` is healthy again within the reads'
/// back-off ceiling (two refreshes) and one read's timeout, not after the
/// back-off the outage built up. Every read and write fails at once while the
/// table is away, so the back-off alone spaces the attempts.
#[tokio::test]
async fn after_an_outage_metadatabase_is_healthy_within_a_refresh_or_two_of_the_database_return() {
    use overseer_core::actors::aggregator::{PUBLISH_DELAY, read_backoff_ceiling};
    use overseer_core::connect::full_read_timeout;

    let Some(server) = migrated_throwaway_postgres().await else {
        return;
    };
    let refresh = Duration::from_millis(100);
    let overseer = quick(&server.url(), "sched-1")
        .refresh_interval(refresh)
        .executor(
            Executor::new("CeleryExecutor", Switch::new(ExecutorHealth::Healthy))
                .with_instance("redis://broker:6379/0"),
        )
        .start()
        .await
        .unwrap();
    report_until(&overseer, "metadatabase healthy before the outage", |r| {
        r.metadatabase == Status::Healthy && r.executor.is_some()
    })
    .await;

    let admin = sea_orm::Database::connect(server.url()).await.unwrap();
    admin
        .execute_unprepared("ALTER TABLE job RENAME TO job_away")
        .await
        .unwrap();
    let stats = overseer.aggregator_stats();
    let failed = stats.refresh_failures.load(Ordering::Relaxed);
    until("eight reads failed during the outage", || {
        stats.refresh_failures.load(Ordering::Relaxed) >= failed + 8
    })
    .await;
    assert_eq!(overseer.report().metadatabase, Status::Unhealthy);

    admin
        .execute_unprepared("ALTER TABLE job_away RENAME TO job")
        .await
        .unwrap();
    let back = std::time::Instant::now();
    report_until(&overseer, "metadatabase healthy after the outage", |r| {
        r.metadatabase == Status::Healthy
    })
    .await;
    let took = back.elapsed();
    // The last read may have failed just before the table came back: the next
    // waits at most the ceiling, and takes at most a full read's timeout.
    let bound = read_backoff_ceiling(refresh) + full_read_timeout(refresh) + PUBLISH_DELAY;
    assert!(
        took <= bound,
        "metadatabase healthy {took:?} after the database answered again; \
         the settings bound it to {bound:?}"
    );
    overseer.shutdown().await.unwrap();
    admin.close().await.unwrap();
}

/// An embedder's check that quotes its URL, password and all, in its reason and
/// instance: the row and the report show neither password.
#[tokio::test]
async fn a_check_quoting_a_password_never_writes_it() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let overseer = quick(&db.url, "sched-1")
        .executor(
            Executor::new(
                "CeleryExecutor",
                Switch::new(ExecutorHealth::unhealthy(
                    "cannot reach redis://:hunter2@broker:6379/0",
                )),
            )
            .with_instance("redis://:hunter2@broker:6379/0"),
        )
        .start()
        .await
        .unwrap();
    let rows = rows_until(&db.conn, "the verdict written", |rows| {
        rows.iter().any(|r| r.executor_health == "unhealthy")
    })
    .await;
    let row = &rows[0];
    assert_eq!(
        row.executor_instance.as_deref(),
        Some("redis://:***@broker:6379/0")
    );
    assert_eq!(
        row.executor_health_reason.as_deref(),
        Some("cannot reach redis://:***@broker:6379/0")
    );
    let report = report_until(&overseer, "the verdict in the report", |r| {
        r.executor
            .as_ref()
            .is_some_and(|e| e.instances.iter().any(|i| i.checked_at.is_some()))
    })
    .await;
    assert!(!report.json().contains("hunter2"), "{}", report.json());
    overseer.shutdown().await.unwrap();
}

/// A refresh never reads this process's own rows (the report holds them), and
/// with nothing changed elsewhere it reads none at all.
#[tokio::test]
async fn a_refresh_reads_no_row_of_its_own() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let overseer = quick(&db.url, "sched-1")
        .executor(Executor::new(
            "CeleryExecutor",
            Switch::new(ExecutorHealth::Healthy),
        ))
        .start()
        .await
        .unwrap();
    report_until(&overseer, "the verdict", |r| {
        r.executor
            .as_ref()
            .is_some_and(|e| e.instances.iter().any(|i| i.checked_at.is_some()))
    })
    .await;
    let stats = overseer.aggregator_stats();
    let reads = stats.reads.load(Ordering::Relaxed);
    until("five more reads", || {
        stats.reads.load(Ordering::Relaxed) >= reads + 5
    })
    .await;
    assert_eq!(stats.last_read_rows.load(Ordering::Relaxed), 0);
    assert_eq!(stats.refresh_failures.load(Ordering::Relaxed), 0);
    overseer.shutdown().await.unwrap();
}

/// The JSON is rendered only when the report says something new: with no
/// executor and nothing in the table, refreshes render nothing; a scheduler
/// that starts heartbeating is rendered, and shown.
#[tokio::test]
async fn the_json_is_rendered_only_when_the_report_changes() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let overseer = quick(&db.url, "sched-1").start().await.unwrap();
    let stats = overseer.aggregator_stats();
    until("five reads", || stats.reads.load(Ordering::Relaxed) >= 5).await;
    assert_eq!(
        stats.renders.load(Ordering::Relaxed),
        0,
        "nothing changed: {}",
        overseer.report().json()
    );

    let now = Utc::now().format("%Y-%m-%d %H:%M:%S%.6f");
    db.execute_script(&format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, unixname, \
         executor_health) VALUES ('running', 'SchedulerJob', '{now}', '{now}', 'sched-2', \
         'airflow', 'unknown')"
    ))
    .await;
    let report = report_until(&overseer, "the scheduler", |r| {
        r.scheduler.instances.len() == 1
    })
    .await;
    assert_eq!(report.scheduler.status, Some(Status::Healthy));
    assert!(stats.renders.load(Ordering::Relaxed) >= 1);
    overseer.shutdown().await.unwrap();
}

/// A component and its instances agree in one report: a scheduler's heartbeat
/// committed later than the read's lookback (Airflow took its time well
/// before the commit) is missed by the changed-rows read, but it is the
/// type's most recent row, read at every refresh; the report that shows it
/// at the top shows it for the instance too, not the value of the last full
/// read.
#[tokio::test]
async fn a_component_and_its_instance_show_the_same_heartbeat() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let at = |ago: i64| {
        (Utc::now() - chrono::Duration::seconds(ago))
            .format("%Y-%m-%d %H:%M:%S%.6f")
            .to_string()
    };
    let first = at(10);
    db.execute_script(&format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, unixname, \
         executor_health) VALUES ('running', 'SchedulerJob', '{first}', '{first}', 'sched-2', \
         'airflow', 'unknown')"
    ))
    .await;
    let overseer = quick(&db.url, "sched-1").start().await.unwrap();
    report_until(&overseer, "the scheduler", |r| {
        r.scheduler.instances.len() == 1
    })
    .await;
    for late in [4, 3, 2] {
        // Past the lookback of the read that runs next.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let heartbeat = at(late);
        db.execute_script(&format!(
            "UPDATE job SET latest_heartbeat = '{heartbeat}' WHERE hostname = 'sched-2'"
        ))
        .await;
        let report = report_until(&overseer, "the late heartbeat at the top", |r| {
            r.scheduler
                .latest_heartbeat
                .map(|h| h.format("%Y-%m-%d %H:%M:%S%.6f").to_string())
                == Some(heartbeat.clone())
        })
        .await;
        assert_eq!(
            report.scheduler.instances[0].latest_heartbeat,
            report.scheduler.latest_heartbeat,
            "{}",
            report.json()
        );
    }
    overseer.shutdown().await.unwrap();
}

/// Shutting down while writes and reads are running (flushes and refreshes
/// every few tens of milliseconds, 1,000 rows each): `shutdown` waits for them, ends
/// every row with `success`, writes each first verdict's transition once, and
/// the actors' thread ends cleanly (a read or write cut off as its runtime
/// ended dropped its pooled connection where no runtime could take it back,
/// and the thread panicked).
async fn a_shutdown_amid_writes_and_reads_ends_cleanly(db: TestDb) {
    Migrator::up(&db.conn, None).await.unwrap();
    const EXECUTORS: usize = 1_000;
    for round in 0..5 {
        let executors = (0..EXECUTORS).map(|i| {
            Executor::new(
                format!("e{i}:CeleryExecutor"),
                Switch::new(ExecutorHealth::Healthy),
            )
        });
        let overseer = quick(&db.url, &format!("sched-{round}"))
            // No verdict may flip for want of a reply while the thread is busy.
            .poll_interval(Duration::from_secs(1))
            .poll_timeout(Duration::from_millis(900))
            .heartbeat_interval(Duration::from_millis(50))
            .refresh_interval(Duration::from_millis(20))
            .executors(executors)
            .start()
            .await
            .unwrap();
        report_until(&overseer, "every verdict made", |r| {
            r.executor.as_ref().is_some_and(|e| {
                e.instances.len() == EXECUTORS
                    && e.instances
                        .iter()
                        .all(|i| i.health == ExecutorHealth::Healthy)
            })
        })
        .await;
        let stats = overseer.aggregator_stats();
        overseer
            .shutdown()
            .await
            .unwrap_or_else(|e| panic!("round {round} on {:?}: {e}", db.backend));
        let counters = format!(
            "round {round} on {:?}: {} flushes, {} failed, {} transitions written before the last",
            db.backend,
            stats.flushes.load(Ordering::Relaxed),
            stats.flush_failures.load(Ordering::Relaxed),
            stats.transitions_written.load(Ordering::Relaxed),
        );
        let rows: Vec<job::Model> = job::Entity::find()
            .filter(job::Column::Hostname.eq(format!("sched-{round}")))
            .all(&db.conn)
            .await
            .unwrap();
        assert_eq!(rows.len(), EXECUTORS);
        // Every verdict made was written (a loaded machine may flip some to
        // unhealthy for want of a reply: still a verdict, never `unknown`).
        assert!(
            rows.iter()
                .all(|r| r.state.as_deref() == Some(JobState::Success.as_str())
                    && r.executor_health != "unknown"),
            "every row ended with success and its verdict ({counters}): {:?}",
            rows.iter()
                .map(|r| (r.state.clone(), r.executor_health.clone()))
                .collect::<std::collections::BTreeSet<_>>()
        );
        // Every transition recorded is written once; only a flush that timed
        // out after its commit (a known limit) may write some twice.
        let transitions = overseer_core::entity::history::Entity::find()
            .filter(overseer_core::entity::history::Column::Hostname.eq(format!("sched-{round}")))
            .count(&db.conn)
            .await
            .unwrap();
        let recorded = stats.transitions_recorded.load(Ordering::Relaxed);
        if stats.flush_failures.load(Ordering::Relaxed) == 0 {
            assert_eq!(
                transitions, recorded,
                "each transition written once ({counters})"
            );
        } else {
            assert!(transitions >= recorded, "no transition lost ({counters})");
        }
    }
}

#[tokio::test]
async fn a_shutdown_amid_writes_and_reads_ends_cleanly_on_sqlite() {
    a_shutdown_amid_writes_and_reads_ends_cleanly(overseer_testkit::sqlite().await).await;
}

#[tokio::test]
async fn a_shutdown_amid_writes_and_reads_ends_cleanly_on_postgres() {
    if let Some(db) = overseer_testkit::postgres().await {
        a_shutdown_amid_writes_and_reads_ends_cleanly(db).await;
    }
}

/// A database that takes connections but does not answer at start-up (here
/// its job table held by a lock that is not let go) fails `start` with one
/// line naming the step, once the step's timeout passes, instead of holding
/// start-up forever; once the lock goes, the same start succeeds.
#[tokio::test]
async fn a_start_the_database_does_not_answer_fails_with_an_error_naming_the_step() {
    let Some(db) = overseer_testkit::postgres().await else {
        return;
    };
    Migrator::up(&db.conn, None).await.unwrap();
    let locker = sea_orm::Database::connect(&db.url).await.unwrap();
    let lock = sea_orm::TransactionTrait::begin(&locker).await.unwrap();
    lock.execute_unprepared("LOCK TABLE job IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let check = Switch::new(ExecutorHealth::Healthy);
    let start = || {
        quick(&db.url, "sched-1")
            .executor(Executor::new("CeleryExecutor", check.clone()))
            .start()
    };
    let error = tokio::time::timeout(PATIENCE, start())
        .await
        .expect("start-up gives up on a database that does not answer")
        .err()
        .expect("start-up fails while the table is locked")
        .to_string();
    assert_eq!(
        error,
        "the database did not answer within 5s when asked to check the schema at start-up"
    );

    lock.rollback().await.unwrap();
    let overseer = start().await.unwrap();
    report_until(&overseer, "the executor healthy", |r| {
        r.executor
            .as_ref()
            .is_some_and(|e| e.status == Some(Status::Healthy))
    })
    .await;
    overseer.shutdown().await.unwrap();
    let _ = locker.close().await;
}
