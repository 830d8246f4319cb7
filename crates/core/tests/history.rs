//! The history of verdict states on real databases: a transition recorded with
//! its states, reason and time in the verdict's own transaction, `since` and
//! `previous` in the report (kept across a restart, and read for another
//! host's rows), a transition made while Postgres is killed written when it
//! returns, and old transitions pruned.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use overseer_core::entity::{history as history_row, job};
use overseer_core::history::{self, HistoryFilter, HistoryReader, HistorySettings, Transition};
use overseer_core::history::{HistoryWrite, flush_with_history};
use overseer_core::report::{ExecutorHealthKind, ExecutorInstance, Status};
use overseer_core::storage::{self, ExecutorIdentity, Session};
use overseer_core::{Executor, ExecutorHealth, HealthReport, JobType, Overseer};
use overseer_migration::{Migrator, MigratorTrait};
use overseer_testkit::TestDb;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, Set,
};
use support::{PATIENCE, Switch, migrated_throwaway_postgres, quick, report_until};

const BROKER: &str = "redis://broker:6379/0";

fn celery(check: &Switch) -> Executor {
    Executor::new("CeleryExecutor", check.clone()).with_instance(BROKER)
}

/// The executor instance of `host` in a report.
fn instance<'a>(report: &'a HealthReport, host: &str) -> Option<&'a ExecutorInstance> {
    report
        .executor
        .as_ref()?
        .instances
        .iter()
        .find(|i| i.hostname.as_deref() == Some(host))
}

/// Every transition in the table, oldest first.
async fn transitions(db: &DatabaseConnection) -> Vec<Transition> {
    history_row::Entity::find()
        .order_by_asc(history_row::Column::Id)
        .all(db)
        .await
        .unwrap()
        .into_iter()
        .map(|row| Transition::from_row(row).unwrap())
        .collect()
}

/// Polls the table until `done` holds for its transitions.
async fn transitions_until(
    db: &DatabaseConnection,
    what: &str,
    done: impl Fn(&[Transition]) -> bool,
) -> Vec<Transition> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Ok(rows) = history_row::Entity::find()
            .order_by_asc(history_row::Column::Id)
            .all(db)
            .await
        {
            let found: Vec<Transition> = rows
                .into_iter()
                .map(|row| Transition::from_row(row).unwrap())
                .collect();
            if done(&found) {
                return found;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not seen within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The transitions a flip makes, recorded with both states, the reason and
/// the verdict's own time; the table holds a verdict only with its transition
/// (same transaction), and `since`/`previous` follow, across a restart too.
async fn a_flip_is_recorded_with_its_verdict(db: TestDb) {
    Migrator::up(&db.conn, None).await.unwrap();
    let backend = db.backend;
    let check = Switch::new(ExecutorHealth::Healthy);
    let overseer = quick(&db.url, "sched-1")
        .executor(celery(&check))
        .start()
        .await
        .unwrap();
    let healthy = report_until(&overseer, "healthy", |r| {
        instance(r, "sched-1").is_some_and(|i| i.health == ExecutorHealth::Healthy)
    })
    .await;
    let first = instance(&healthy, "sched-1").unwrap();
    assert_eq!(
        first.previous,
        Some(ExecutorHealthKind::Unknown),
        "{backend:?}"
    );
    assert_eq!(
        first.since, first.checked_at,
        "{backend:?}: since the first verdict"
    );
    let healthy_since = first.since.unwrap();

    // The state changes: a transition.
    check.set(ExecutorHealth::unhealthy("broker refused the connection"));
    let unhealthy = report_until(&overseer, "unhealthy", |r| {
        instance(r, "sched-1").is_some_and(|i| i.health.as_str() == "unhealthy")
    })
    .await;
    let made = instance(&unhealthy, "sched-1").unwrap().clone();
    assert_eq!(
        made.previous,
        Some(ExecutorHealthKind::Healthy),
        "{backend:?}"
    );
    assert_eq!(made.since, made.checked_at, "{backend:?}");
    // The cause changes, the state does not: recorded, beginning no state.
    check.set(ExecutorHealth::unhealthy("broker timed out"));
    let same_state = report_until(&overseer, "a new reason", |r| {
        instance(r, "sched-1").is_some_and(|i| i.health.reason() == Some("broker timed out"))
    })
    .await;
    let same_state = instance(&same_state, "sched-1").unwrap();
    let new_cause_at = same_state.checked_at.unwrap();
    assert_eq!(
        same_state.since, made.since,
        "{backend:?}: a new reason begins no state"
    );
    assert_eq!(same_state.previous, Some(ExecutorHealthKind::Healthy));

    // Whenever the table holds the unhealthy verdict, it holds its transition:
    // both are written by one transaction.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let rows = job::Entity::find()
            .filter(job::Column::JobType.eq(JobType::ExecutorJob.as_str()))
            .all(&db.conn)
            .await
            .unwrap();
        let written = transitions(&db.conn).await;
        if rows.iter().any(|r| r.executor_health == "unhealthy") {
            assert!(
                written
                    .iter()
                    .any(|t| t.to == ExecutorHealthKind::Unhealthy),
                "{backend:?}: the verdict is written, its transition is not: {written:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{backend:?}: the verdict is never written"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    overseer.shutdown().await.unwrap();

    let written = transitions(&db.conn).await;
    assert_eq!(
        written,
        [
            Transition {
                executor: "CeleryExecutor".into(),
                instance: Some(BROKER.into()),
                hostname: "sched-1".into(),
                from: ExecutorHealthKind::Unknown,
                to: ExecutorHealthKind::Healthy,
                reason: None,
                at: healthy_since,
                cost: None,
            },
            Transition {
                executor: "CeleryExecutor".into(),
                instance: Some(BROKER.into()),
                hostname: "sched-1".into(),
                from: ExecutorHealthKind::Healthy,
                to: ExecutorHealthKind::Unhealthy,
                reason: Some("broker refused the connection".into()),
                at: made.since.unwrap(),
                cost: None,
            },
            Transition {
                executor: "CeleryExecutor".into(),
                instance: Some(BROKER.into()),
                hostname: "sched-1".into(),
                from: ExecutorHealthKind::Unhealthy,
                to: ExecutorHealthKind::Unhealthy,
                reason: Some("broker timed out".into()),
                at: new_cause_at,
                cost: None,
            },
        ],
        "{backend:?}"
    );

    // A new process on the same host takes `since` back from the history:
    // the same state is no new transition.
    let overseer = quick(&db.url, "sched-1")
        .executor(celery(&check))
        .start()
        .await
        .unwrap();
    let again = report_until(&overseer, "unhealthy again, with its since", |r| {
        instance(r, "sched-1").is_some_and(|i| i.checked_at.is_some() && i.since.is_some())
    })
    .await;
    let again = instance(&again, "sched-1").unwrap();
    assert_eq!(
        again.since, made.since,
        "{backend:?}: kept across the restart"
    );
    assert_eq!(again.previous, Some(ExecutorHealthKind::Healthy));
    overseer.shutdown().await.unwrap();
    assert_eq!(
        transitions(&db.conn).await.len(),
        3,
        "{backend:?}: the same state and the same cause after a restart are nothing new"
    );
}

#[tokio::test]
async fn a_flip_is_recorded_with_its_verdict_on_sqlite() {
    a_flip_is_recorded_with_its_verdict(overseer_testkit::sqlite().await).await;
}

#[tokio::test]
async fn a_flip_is_recorded_with_its_verdict_on_postgres() {
    if let Some(db) = overseer_testkit::postgres().await {
        a_flip_is_recorded_with_its_verdict(db).await;
    }
}

#[tokio::test]
async fn a_flip_is_recorded_with_its_verdict_on_mariadb() {
    if let Some(db) = overseer_testkit::mariadb().await {
        a_flip_is_recorded_with_its_verdict(db).await;
    }
}

/// sched-1, its broker down, has written its transition, and sched-2, started
/// beside it, shows sched-1's `since`: both overseers, sched-1's instance as
/// sched-1 reports it, and that report of sched-2's.
async fn sched_1_down_seen_from_sched_2(
    db: &TestDb,
    history: HistorySettings,
) -> (Overseer, Overseer, ExecutorInstance, Arc<HealthReport>) {
    let check = Switch::new(ExecutorHealth::unhealthy("broker down"));
    let one = quick(&db.url, "sched-1")
        .history(history)
        .executor(celery(&check))
        .start()
        .await
        .unwrap();
    let made = report_until(&one, "unhealthy on sched-1", |r| {
        instance(r, "sched-1").is_some_and(|i| i.since.is_some())
    })
    .await;
    let made = instance(&made, "sched-1").unwrap().clone();
    transitions_until(&db.conn, "the transition written", |t| t.len() == 1).await;

    let two = quick(&db.url, "sched-2")
        .history(history)
        .start()
        .await
        .unwrap();
    let seen = report_until(&two, "sched-1's since, seen from sched-2", |r| {
        instance(r, "sched-1").is_some_and(|i| i.since.is_some())
    })
    .await;
    (one, two, made, seen)
}

/// Another host's row shows `since` and `previous` from the history, read at
/// the next full read.
#[tokio::test]
async fn another_host_s_row_shows_since_from_the_history() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let (one, two, made, seen) =
        sched_1_down_seen_from_sched_2(&db, HistorySettings::default()).await;
    let seen = instance(&seen, "sched-1").unwrap();
    assert_eq!(seen.since, made.since);
    assert_eq!(seen.previous, Some(ExecutorHealthKind::Unknown));
    assert_eq!(seen.detail, None, "another host's row");
    two.shutdown().await.unwrap();
    one.shutdown().await.unwrap();
}

/// A history slow to read holds up neither the report nor `metadatabase`.
/// Here another session locks it (as a long maintenance statement does; a
/// history of millions of transitions is slow the same way, 2.3 s for
/// 2,000,000 on Postgres): the next read of the latest transitions times out,
/// while every read of the rows succeeds, a scheduler that starts meanwhile is
/// shown, and rows keep the `since` they had.
#[tokio::test]
async fn a_history_slow_to_read_holds_up_neither_the_report_nor_the_metadatabase() {
    let Some(db) = overseer_testkit::postgres().await else {
        return;
    };
    Migrator::up(&db.conn, None).await.unwrap();
    // No pruning, and steady verdicts: no flush touches the locked table.
    let keep = HistorySettings {
        retention: Duration::ZERO,
        ..HistorySettings::default()
    };
    let (one, two, _, before) = sched_1_down_seen_from_sched_2(&db, keep).await;
    let since = instance(&before, "sched-1").unwrap().since;

    let locker = sea_orm::Database::connect(&db.url).await.unwrap();
    let lock = sea_orm::TransactionTrait::begin(&locker).await.unwrap();
    lock.execute_unprepared(&format!(
        "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
        history::TABLE
    ))
    .await
    .unwrap();
    let stats = two.aggregator_stats();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while stats.history_read_failures.load(Ordering::Relaxed) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no read of the locked history timed out"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    db.conn
        .execute_unprepared(
            "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, unixname, \
             executor_health) VALUES ('running', 'SchedulerJob', now(), now(), 'sched-3', \
             'airflow', 'unknown')",
        )
        .await
        .unwrap();
    let during = report_until(
        &two,
        "the new scheduler, while the history is locked",
        |r| !r.scheduler.instances.is_empty(),
    )
    .await;
    assert_eq!(during.metadatabase, Status::Healthy);
    assert_eq!(during.scheduler.status, Some(Status::Healthy));
    assert_eq!(instance(&during, "sched-1").unwrap().since, since);
    assert_eq!(
        stats.refresh_failures.load(Ordering::Relaxed),
        0,
        "every read of the rows succeeded"
    );

    lock.rollback().await.unwrap();
    two.shutdown().await.unwrap();
    one.shutdown().await.unwrap();
    let _ = locker.close().await;
}

/// THE OUTAGE: Postgres is killed, the check flips while it is down, Postgres
/// comes back on the same port and data folder, and the transition made
/// during the outage is in the history (and read by the API's reader).
#[tokio::test]
async fn a_transition_made_while_postgres_is_down_is_in_the_history_when_it_returns() {
    let Some(server) = migrated_throwaway_postgres().await else {
        return;
    };

    let check = Switch::new(ExecutorHealth::Healthy);
    let overseer = quick(&server.url(), "sched-1")
        .executor(celery(&check))
        .start()
        .await
        .unwrap();
    let db = sea_orm::Database::connect(server.url()).await.unwrap();
    transitions_until(&db, "unknown -> healthy written", |t| {
        t.iter().any(|t| t.to == ExecutorHealthKind::Healthy)
    })
    .await;
    db.close().await.unwrap();

    server.kill();
    check.set(ExecutorHealth::unhealthy("broker down during the outage"));
    let during = report_until(&overseer, "the flip, while the database is down", |r| {
        r.metadatabase == Status::Unhealthy
            && instance(r, "sched-1").is_some_and(|i| i.health.as_str() == "unhealthy")
    })
    .await;
    let made = instance(&during, "sched-1").unwrap().clone();
    assert_eq!(made.previous, Some(ExecutorHealthKind::Healthy));
    // The flush that would have written it fails, and keeps it.
    let stats = overseer.aggregator_stats();
    let failures = stats.flush_failures.load(Ordering::Relaxed);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while stats.flush_failures.load(Ordering::Relaxed) <= failures {
        assert!(tokio::time::Instant::now() < deadline, "no write failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stats.transitions_pending.load(Ordering::Relaxed), 1);

    server.resume().unwrap();
    let db = sea_orm::Database::connect(server.url()).await.unwrap();
    let written = transitions_until(&db, "the outage's transition written", |t| {
        t.iter().any(|t| t.to == ExecutorHealthKind::Unhealthy)
    })
    .await;
    let transition = written.last().unwrap();
    assert_eq!(
        (transition.from, transition.to, transition.reason.as_deref()),
        (
            ExecutorHealthKind::Healthy,
            ExecutorHealthKind::Unhealthy,
            Some("broker down during the outage")
        )
    );
    assert_eq!(Some(transition.at), made.since, "made during the outage");
    assert_eq!(stats.transitions_dropped.load(Ordering::Relaxed), 0);

    // The API's reader finds it, newest first.
    let reader = HistoryReader::connect(&server.url()).await.unwrap();
    let read = reader
        .transitions(&HistoryFilter {
            executor: Some("CeleryExecutor".into()),
            ..HistoryFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(read.first(), Some(transition));
    overseer.shutdown().await.unwrap();
    db.close().await.unwrap();
}

/// Migrates `db` and registers one executor's row for a session of
/// `sched-1`, which it returns.
async fn one_executor_registered(db: &TestDb) -> Session {
    Migrator::up(&db.conn, None).await.unwrap();
    let session = Session::start("sched-1", "airflow");
    storage::register(
        &db.conn,
        &session,
        &[ExecutorIdentity::new("CeleryExecutor", None)],
    )
    .await
    .unwrap();
    session
}

fn old_transition(at: chrono::DateTime<Utc>, reason: &str) -> Transition {
    Transition {
        executor: "CeleryExecutor".into(),
        instance: Some(BROKER.into()),
        hostname: "sched-0".into(),
        from: ExecutorHealthKind::Healthy,
        to: ExecutorHealthKind::Unhealthy,
        reason: Some(reason.into()),
        at,
        cost: None,
    }
}

/// The flush's prune deletes transitions older than the retention and keeps
/// the rest, on every backend, in the flush's transaction.
#[tokio::test]
async fn a_flush_prunes_transitions_older_than_the_retention() {
    for db in overseer_testkit::all_backends().await {
        let session = one_executor_registered(&db).await;
        let old = Utc.with_ymd_and_hms(2026, 11, 1, 12, 0, 0).unwrap();
        let recent = Utc::now() - chrono::Duration::hours(1);
        let write = HistoryWrite {
            transitions: vec![
                old_transition(old, "old, it's 'quoted'"),
                old_transition(recent, "recent"),
            ],
            prune_before: None,
            ..HistoryWrite::default()
        };
        let statements = flush_with_history(&db.conn, &session, Utc::now(), &[], &write)
            .await
            .unwrap();
        assert_eq!(
            statements.statements, 2,
            "{:?}: the heartbeat and the insert",
            db.backend
        );
        assert_eq!(transitions(&db.conn).await.len(), 2, "{:?}", db.backend);

        let prune = HistoryWrite {
            transitions: Vec::new(),
            prune_before: Some(Utc::now() - chrono::Duration::days(14)),
            ..HistoryWrite::default()
        };
        let statements = flush_with_history(&db.conn, &session, Utc::now(), &[], &prune)
            .await
            .unwrap();
        assert_eq!(
            statements.statements, 2,
            "{:?}: the heartbeat and the prune",
            db.backend
        );
        let kept = transitions(&db.conn).await;
        assert_eq!(kept.len(), 1, "{:?}: {kept:?}", db.backend);
        assert_eq!(kept[0].reason.as_deref(), Some("recent"));
        assert_eq!(
            kept[0].at,
            storage_micros(recent),
            "{:?}: the time reads back",
            db.backend
        );
    }
}

/// A flush retried after its commit went through (its answer timed out, so
/// the aggregator kept its transitions and sends them again) writes each
/// transition once, on every backend, with an instance or without; a
/// transition of the same row at another time is written.
#[tokio::test]
async fn a_flush_retried_after_its_commit_writes_each_transition_once() {
    for db in overseer_testkit::all_backends().await {
        let session = one_executor_registered(&db).await;
        let at = storage_micros(Utc::now() - chrono::Duration::minutes(1));
        let write = HistoryWrite {
            transitions: vec![
                old_transition(at, "broker down"),
                Transition {
                    instance: None,
                    ..old_transition(at, "no instance")
                },
            ],
            prune_before: None,
            ..HistoryWrite::default()
        };
        for _ in 0..2 {
            flush_with_history(&db.conn, &session, Utc::now(), &[], &write)
                .await
                .unwrap();
        }
        assert_eq!(
            transitions(&db.conn).await,
            write.transitions,
            "{:?}",
            db.backend
        );

        let later = HistoryWrite {
            transitions: vec![old_transition(
                at + chrono::Duration::seconds(1),
                "down again",
            )],
            prune_before: None,
            ..HistoryWrite::default()
        };
        flush_with_history(&db.conn, &session, Utc::now(), &[], &later)
            .await
            .unwrap();
        assert_eq!(transitions(&db.conn).await.len(), 3, "{:?}", db.backend);
    }
}

fn storage_micros(at: chrono::DateTime<Utc>) -> chrono::DateTime<Utc> {
    use chrono::Timelike;
    at.with_nanosecond(at.nanosecond() / 1_000 * 1_000).unwrap()
}

/// A running Overseer prunes by itself, at most once per `prune_every` (here
/// shortened), and a zero retention keeps everything.
#[tokio::test]
async fn a_running_overseer_prunes_the_history_and_a_zero_retention_keeps_it() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let insert = |at: chrono::DateTime<Utc>| {
        let conn = db.conn.clone();
        async move {
            conn.execute_unprepared(&format!(
                "INSERT INTO {} (executor, instance, hostname, from_health, to_health, reason, at) \
                 VALUES ('CeleryExecutor', NULL, 'sched-0', 'healthy', 'unhealthy', 'old', '{}')",
                history::TABLE,
                at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false)
            ))
            .await
            .unwrap();
        }
    };
    let month_ago = Utc::now() - chrono::Duration::days(30);

    // Retention zero: kept forever.
    insert(month_ago).await;
    let keep = quick(&db.url, "sched-1")
        .history(HistorySettings {
            retention: Duration::ZERO,
            prune_every: Duration::from_millis(100),
        })
        .start()
        .await
        .unwrap();
    let stats = keep.aggregator_stats();
    let flushes = stats.flushes.load(Ordering::Relaxed);
    while stats.flushes.load(Ordering::Relaxed) < flushes + 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stats.history_prunes.load(Ordering::Relaxed), 0);
    keep.shutdown().await.unwrap();
    assert_eq!(
        transitions(&db.conn).await.len(),
        1,
        "kept with retention 0"
    );

    // A week's retention, pruned at the first flush and again after a later
    // old row is inserted.
    let prune = quick(&db.url, "sched-1")
        .history(HistorySettings {
            retention: Duration::from_secs(7 * 24 * 3600),
            prune_every: Duration::from_millis(100),
        })
        .start()
        .await
        .unwrap();
    transitions_until(&db.conn, "the old row pruned", |t| t.is_empty()).await;
    insert(month_ago).await;
    transitions_until(&db.conn, "the second old row pruned", |t| t.is_empty()).await;
    // The count is taken once the prune's flush has returned, a moment after
    // its DELETE is seen: wait for it rather than race it (a loaded host).
    let prunes = || {
        prune
            .aggregator_stats()
            .history_prunes
            .load(Ordering::Relaxed)
    };
    overseer_testkit::wait::until_async("two prunes counted", Duration::from_secs(30), || async {
        if prunes() >= 2 { Ok(()) } else { Err(prunes()) }
    })
    .await;
    prune.shutdown().await.unwrap();
}

/// What a new run reads to take back the alerts the last run left open, on
/// every backend: of this host's rows, the latest transition the earlier run
/// wrote (not one this run wrote since, nor another host's), with the last
/// heartbeat of the earlier run's row (how long it watched that state: until
/// it ended, here gracefully).
#[tokio::test]
async fn a_new_run_reads_how_the_earlier_run_left_its_rows() {
    for db in overseer_testkit::all_backends().await {
        Migrator::up(&db.conn, None).await.unwrap();
        let key = [ExecutorIdentity::new(
            "CeleryExecutor",
            Some(BROKER.to_owned()),
        )];
        let down = storage_micros(Utc::now() - chrono::Duration::minutes(10));
        let earlier = Session {
            started: down - chrono::Duration::minutes(1),
            ..Session::start("sched-1", "airflow")
        };
        storage::register(&db.conn, &earlier, &key).await.unwrap();
        let transition = |hostname: &str, from, to, at| Transition {
            hostname: hostname.into(),
            from,
            to,
            at,
            reason: (to == ExecutorHealthKind::Unhealthy).then(|| "broker down".into()),
            ..old_transition(at, "")
        };
        use ExecutorHealthKind::{Healthy, Unhealthy};
        let went_down = transition("sched-1", Healthy, Unhealthy, down);
        let other_host = transition("sched-2", Unhealthy, Healthy, down);
        let last_heartbeat = down + chrono::Duration::seconds(40);
        let write = HistoryWrite {
            transitions: vec![went_down.clone(), other_host],
            prune_before: None,
            ..HistoryWrite::default()
        };
        flush_with_history(&db.conn, &earlier, last_heartbeat, &[], &write)
            .await
            .unwrap();
        let ended = last_heartbeat + chrono::Duration::seconds(1);
        storage::finish(&db.conn, &earlier, ended).await.unwrap();

        // This run starts, and has written its own transition already.
        let this = Session::start("sched-1", "airflow");
        storage::register(&db.conn, &this, &key).await.unwrap();
        let back_up = HistoryWrite {
            transitions: vec![transition("sched-1", Unhealthy, Healthy, this.started)],
            prune_before: None,
            ..HistoryWrite::default()
        };
        flush_with_history(&db.conn, &this, Utc::now(), &[], &back_up)
            .await
            .unwrap();

        let left = history::left_by_earlier_runs(&db.conn, "sched-1")
            .await
            .unwrap();
        assert_eq!(
            left,
            [history::LeftBehind {
                transition: went_down,
                last_seen: Some(ended),
            }],
            "{:?}",
            db.backend
        );
        let reader = HistoryReader::new(db.conn.clone());
        assert_eq!(
            reader.left_by_earlier_runs("sched-3").await.unwrap(),
            [],
            "{:?}: a host with no earlier run",
            db.backend
        );
    }
}

/// Overseer stopped for ten minutes (its rows stale meanwhile): the next run
/// records the gap, `healthy -> unknown` at the earlier run's last heartbeat
/// ("not supervised"), then `unknown -> healthy` at its first verdict; the
/// report's `since` and `previous` say the same. What the alerts read back
/// passes over the gap: the state the earlier run saw, since it began.
#[tokio::test]
async fn a_run_after_an_outage_of_overseer_records_the_gap() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let check = Switch::new(ExecutorHealth::Healthy);
    let overseer = quick(&db.url, "sched-1")
        .executor(celery(&check))
        .start()
        .await
        .unwrap();
    report_until(&overseer, "healthy", |r| {
        instance(r, "sched-1").is_some_and(|i| i.health == ExecutorHealth::Healthy)
    })
    .await;
    overseer.shutdown().await.unwrap();

    // The run stopped ten minutes ago: its row, and its transition, back then.
    let ago = chrono::Duration::minutes(10);
    for row in job::Entity::find().all(&db.conn).await.unwrap() {
        let back = |at: Option<chrono::DateTime<Utc>>| Set(at.map(|at| at - ago));
        let (started, ended, beat) = (row.start_date, row.end_date, row.latest_heartbeat);
        let mut row = row.into_active_model();
        row.start_date = back(started);
        row.end_date = back(ended);
        row.latest_heartbeat = back(beat);
        row.update(&db.conn).await.unwrap();
    }
    for t in history_row::Entity::find().all(&db.conn).await.unwrap() {
        let at = t.at - ago;
        let mut t = t.into_active_model();
        t.at = Set(at);
        t.update(&db.conn).await.unwrap();
    }
    let earlier = transitions(&db.conn).await;
    assert_eq!(earlier.len(), 1, "{earlier:?}");
    let stopped = job::Entity::find()
        .filter(job::Column::JobType.eq(JobType::ExecutorJob.as_str()))
        .one(&db.conn)
        .await
        .unwrap()
        .unwrap()
        .latest_heartbeat
        .unwrap();

    let overseer = quick(&db.url, "sched-1")
        .executor(celery(&check))
        .start()
        .await
        .unwrap();
    let resumed = report_until(&overseer, "healthy again", |r| {
        instance(r, "sched-1")
            .is_some_and(|i| i.health == ExecutorHealth::Healthy && i.checked_at.is_some())
    })
    .await;
    let resumed = instance(&resumed, "sched-1").unwrap();
    assert_eq!(resumed.previous, Some(ExecutorHealthKind::Unknown));
    assert_eq!(
        resumed.since, resumed.checked_at,
        "healthy since it resumed"
    );
    let written = transitions_until(&db.conn, "the gap and the recovery", |t| t.len() >= 3).await;
    let row = |from, to, reason: Option<&str>, at| Transition {
        executor: "CeleryExecutor".into(),
        instance: Some(BROKER.into()),
        hostname: "sched-1".into(),
        from,
        to,
        reason: reason.map(str::to_owned),
        at,
        cost: None,
    };
    use ExecutorHealthKind::{Healthy, Unknown};
    assert_eq!(
        written,
        [
            earlier[0].clone(),
            row(Healthy, Unknown, Some(history::NOT_SUPERVISED), stopped),
            row(Unknown, Healthy, None, resumed.since.unwrap()),
        ]
    );
    let left = history::left_by_earlier_runs(&db.conn, "sched-1")
        .await
        .unwrap();
    assert_eq!(
        left.iter().map(|l| &l.transition).collect::<Vec<_>>(),
        [&earlier[0]],
        "the alerts read the state the earlier run saw"
    );
    overseer.shutdown().await.unwrap();
}
