//! The canary's read on real databases: Airflow's `dag`, `dag_run` and
//! `task_instance` (the columns it reads, in each backend's types as Airflow's
//! migrations create them, with the indexes it relies on), its latest runs
//! only, its times and flags read back as written, and the judgement built on
//! them. On Postgres the runs are found by a backward scan of Airflow's
//! unique `(dag_id, logical_date)` index and their task instances by
//! `ti_dag_run` (the bench measures the read at a million rows).

use chrono::{DateTime, Utc};
use overseer_core::airflow::canary::{self, DAG_ID};
use overseer_core::airflow::routes::Routes;
use overseer_testkit::TestDb;
use sea_orm::DbBackend;
use std::time::Duration;

fn ddl(backend: DbBackend) -> String {
    let (ts, boolean) = match backend {
        DbBackend::Postgres => ("TIMESTAMP WITH TIME ZONE", "BOOLEAN"),
        DbBackend::MySql => ("TIMESTAMP(6) NULL", "TINYINT(1)"),
        _ => ("DATETIME", "BOOLEAN"),
    };
    format!(
        "CREATE TABLE dag (dag_id VARCHAR(250) NOT NULL, is_paused {boolean} NOT NULL, \
         is_stale {boolean} NOT NULL, has_import_errors {boolean}, \
         next_dagrun_create_after {ts}, CONSTRAINT dag_pkey PRIMARY KEY (dag_id));
         CREATE TABLE dag_run (id INTEGER NOT NULL, dag_id VARCHAR(250) NOT NULL, \
         run_id VARCHAR(250) NOT NULL, logical_date {ts}, CONSTRAINT dag_run_pkey PRIMARY KEY (id), \
         CONSTRAINT dag_run_dag_id_logical_date_key UNIQUE (dag_id, logical_date), \
         CONSTRAINT dag_run_dag_id_run_id_key UNIQUE (dag_id, run_id));
         CREATE TABLE task_instance (task_id VARCHAR(250) NOT NULL, dag_id VARCHAR(250) NOT NULL, \
         run_id VARCHAR(250) NOT NULL, map_index INTEGER NOT NULL DEFAULT -1, \
         state VARCHAR(20), queue VARCHAR(256), executor VARCHAR(1000), \
         queued_dttm {ts}, start_date {ts}, end_date {ts}, \
         CONSTRAINT task_instance_composite_key PRIMARY KEY (dag_id, task_id, run_id, map_index));
         CREATE INDEX ti_dag_run ON task_instance (dag_id, run_id)"
    )
}

/// A time as Airflow writes it on `backend`, or NULL.
fn at(backend: DbBackend, time: Option<DateTime<Utc>>) -> String {
    let Some(time) = time else {
        return "NULL".into();
    };
    match backend {
        DbBackend::Postgres => format!("'{}'", time.format("%Y-%m-%d %H:%M:%S%.6f+00:00")),
        _ => format!("'{}'", time.format("%Y-%m-%d %H:%M:%S%.6f")),
    }
}

async fn dag(db: &TestDb, paused: bool, next: Option<DateTime<Utc>>) {
    db.execute_script(&format!("DELETE FROM dag WHERE dag_id = '{DAG_ID}'"))
        .await;
    db.execute_script(&format!(
        "INSERT INTO dag (dag_id, is_paused, is_stale, has_import_errors, next_dagrun_create_after) \
         VALUES ('{DAG_ID}', {}, {}, NULL, {})",
        if paused { "TRUE" } else { "FALSE" },
        "FALSE",
        at(db.backend, next)
    ))
    .await;
}

/// Run `n` of the canary (`n` periods of 20 s before now), its canary on
/// `default` in `state`, queued, started and ended `ago` seconds before now.
async fn run(db: &TestDb, now: DateTime<Utc>, n: i64, state: &str, ago: [Option<i64>; 3]) {
    let time = |s: Option<i64>| s.map(|s| now - chrono::Duration::seconds(s));
    let logical = now - chrono::Duration::seconds(20 * n);
    db.execute_script(&format!(
        "INSERT INTO dag_run (id, dag_id, run_id, logical_date) VALUES ({}, '{DAG_ID}', 'run_{n}', {})",
        100 - n,
        at(db.backend, Some(logical))
    ))
    .await;
    db.execute_script(&format!(
        "INSERT INTO task_instance (task_id, dag_id, run_id, state, queue, executor, queued_dttm, start_date, end_date) \
         VALUES ('canary_default', '{DAG_ID}', 'run_{n}', '{state}', 'default', NULL, {}, {}, {})",
        at(db.backend, time(ago[0])),
        at(db.backend, time(ago[1])),
        at(db.backend, time(ago[2])),
    ))
    .await;
}

#[tokio::test]
async fn the_canary_s_latest_runs_are_read_and_judged_on_every_backend() {
    for db in overseer_testkit::all_backends().await {
        let backend = db.backend;
        db.execute_script(&ddl(backend)).await;
        let routes = Routes::new(["CeleryExecutor"]);
        let now = Utc::now();
        let pickup = Duration::from_secs(30);

        // Not installed: no rule.
        let read = canary::read(&db.conn, &routes, now).await.unwrap();
        assert_eq!(read.dag, None, "{backend:?}");
        assert_eq!(
            read.for_executor(0, true, pickup, Some(1)),
            None,
            "{backend:?}"
        );

        dag(&db, false, Some(now + chrono::Duration::seconds(15))).await;
        // Oldest first: a success (out of the runs read), a failure before any
        // worker started it, a success 2.5 s after it was queued, then one
        // queued 40 s ago that no worker took.
        run(&db, now, 4, "success", [Some(85), Some(84), Some(83)]).await;
        run(&db, now, 3, "failed", [Some(65), None, Some(45)]).await;
        run(&db, now, 2, "success", [Some(50), None, None]).await;
        db.execute_script(&format!(
            "UPDATE task_instance SET start_date = {}, end_date = {} WHERE run_id = 'run_2'",
            at(backend, Some(now - chrono::Duration::milliseconds(47_500))),
            at(backend, Some(now - chrono::Duration::seconds(46))),
        ))
        .await;
        run(&db, now, 1, "queued", [Some(40), None, None]).await;

        let read = canary::read(&db.conn, &routes, now).await.unwrap();
        let runs: Vec<&str> = read.tasks.iter().map(|t| t.run_id.as_str()).collect();
        assert_eq!(
            runs,
            ["run_1", "run_2", "run_3"],
            "{backend:?}: the latest three, newest first"
        );
        assert!(read.tasks.iter().all(|t| t.owner == Some(0)), "{backend:?}");
        let judged = read.for_executor(0, true, pickup, Some(1)).expect("judged");
        assert_eq!(
            judged.findings,
            ["canary on queue default: no worker started it within 30s"],
            "{backend:?}"
        );
        assert_eq!(judged.blind, None, "{backend:?}");
        let queue = &judged.detail.queues[0];
        assert_eq!(queue.run_id, "run_1", "{backend:?}");
        assert_eq!(queue.state.as_deref(), Some("queued"), "{backend:?}");
        assert_eq!(queue.waiting_seconds, Some(40), "{backend:?}");
        let pickup_seconds = queue.pickup_seconds.expect("run_2 was picked up").0;
        assert!(
            (pickup_seconds - 2.5).abs() < 0.001,
            "{backend:?}: {pickup_seconds}"
        );
        let run_seconds = queue.run_seconds.expect("run_2 ran").0;
        assert!(
            (run_seconds - 1.5).abs() < 0.001,
            "{backend:?}: {run_seconds}"
        );
        let last = queue.last_success.expect("run_2 succeeded");
        assert_eq!(
            (now - last).num_milliseconds(),
            46_000,
            "{backend:?}: {last}"
        );

        // Taken and failed without starting: the failure is told.
        db.execute_script("UPDATE task_instance SET state = 'failed' WHERE run_id = 'run_1'")
            .await;
        let read = canary::read(&db.conn, &routes, now).await.unwrap();
        assert_eq!(
            read.for_executor(0, true, pickup, Some(1))
                .unwrap()
                .findings,
            ["canary on queue default failed before a worker started it"],
            "{backend:?}"
        );

        // Paused, the flag as each backend stores it: unknown, saying so.
        dag(&db, true, None).await;
        let read = canary::read(&db.conn, &routes, now).await.unwrap();
        let judged = read.for_executor(0, true, pickup, Some(1)).unwrap();
        assert_eq!(
            judged.blind.as_deref(),
            Some("canary DAG overseer_canary is paused"),
            "{backend:?}"
        );
        assert!(judged.findings.is_empty(), "{backend:?}");

        if backend == DbBackend::Postgres {
            let plan = db
                .strings(&format!("EXPLAIN {}", canary::tasks_query()))
                .await
                .join("\n");
            eprintln!("{backend:?}: the canary's runs:\n{plan}");
            assert!(
                plan.contains("Index Scan Backward using dag_run_dag_id_logical_date_key"),
                "{plan}"
            );
            assert!(plan.contains("ti_dag_run"), "{plan}");
        }
    }
}
