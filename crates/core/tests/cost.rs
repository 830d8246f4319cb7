//! What an `unhealthy` span cost, on real databases: the one statement that
//! counts an executor's task instances that ended `failed` or went
//! `up_for_retry` within the span (routed as the scheduler sends them), and
//! the history's transition out of `unhealthy` that carries the count, made by
//! a running Overseer as an operator's would be.

use crate::support;

use chrono::{DateTime, Utc};
use overseer_core::airflow::cost::{self, FaultCost, Span};
use overseer_core::airflow::routes::Routes;
use overseer_core::entity::history as history_row;
use overseer_core::history::Transition;
use overseer_core::report::ExecutorHealthKind;
use overseer_core::{Executor, ExecutorHealth};
use overseer_migration::{Migrator, MigratorTrait};
use overseer_testkit::TestDb;
use sea_orm::{DbBackend, EntityTrait, QueryOrder};
use std::time::Duration;
use support::{PATIENCE, Switch, quick, report_until};

/// The columns of Airflow 3.3's `task_instance` the count reads (and the
/// key), with its `ti_state` index, in each backend's types.
fn ddl(backend: DbBackend) -> String {
    let ts = match backend {
        DbBackend::Postgres => "TIMESTAMP WITH TIME ZONE",
        DbBackend::MySql => "TIMESTAMP(6) NULL",
        _ => "DATETIME",
    };
    format!(
        "CREATE TABLE task_instance (task_id VARCHAR(250) NOT NULL, dag_id VARCHAR(250) NOT NULL, \
         run_id VARCHAR(250) NOT NULL, map_index INTEGER NOT NULL DEFAULT -1, \
         state VARCHAR(20), queue VARCHAR(256), executor VARCHAR(1000), end_date {ts}, \
         CONSTRAINT task_instance_composite_key PRIMARY KEY (dag_id, task_id, run_id, map_index));
         CREATE INDEX ti_state ON task_instance (state)"
    )
}

/// A time as Airflow writes it on `backend`.
fn at(backend: DbBackend, time: DateTime<Utc>) -> String {
    match backend {
        DbBackend::Postgres => format!("'{}'", time.format("%Y-%m-%d %H:%M:%S%.6f+00:00")),
        _ => format!("'{}'", time.format("%Y-%m-%d %H:%M:%S%.6f")),
    }
}

/// One task instance: its task, state, `executor` column and end.
async fn ended(db: &TestDb, task: &str, state: &str, executor: Option<&str>, end: DateTime<Utc>) {
    let executor = executor.map_or("NULL".into(), |e| format!("'{e}'"));
    db.execute_script(&format!(
        "INSERT INTO task_instance (task_id, dag_id, run_id, state, queue, executor, end_date) \
         VALUES ('{task}', 'etl', 'run_1', '{state}', 'default', {executor}, {})",
        at(db.backend, end)
    ))
    .await;
}

#[tokio::test]
async fn a_span_counts_its_executor_s_failed_and_retried_task_instances_on_every_backend() {
    for db in overseer_testkit::all_backends().await {
        let backend = db.backend;
        db.execute_script(&ddl(backend)).await;
        let from = Utc::now() - chrono::Duration::minutes(10);
        let to = from + chrono::Duration::minutes(2);
        let within = from + chrono::Duration::seconds(30);
        let celery = "airflow.providers.celery.executors.celery_executor.CeleryExecutor";
        // The default executor's (no `executor`), by its short name and by
        // its path; the other executor's; and what the span does not hold.
        ended(&db, "a", "failed", None, within).await;
        ended(&db, "b", "up_for_retry", Some("CeleryExecutor"), within).await;
        ended(&db, "c", "failed", Some(celery), to).await;
        ended(&db, "d", "failed", Some("KubernetesExecutor"), within).await;
        ended(&db, "e", "success", None, within).await;
        ended(
            &db,
            "f",
            "failed",
            None,
            from - chrono::Duration::seconds(1),
        )
        .await;
        ended(&db, "g", "failed", None, to + chrono::Duration::seconds(1)).await;
        ended(&db, "h", "upstream_failed", None, within).await;
        let routes = Routes::new(["CeleryExecutor", "KubernetesExecutor"]);
        let span = |executor| Span { executor, from };
        assert_eq!(
            cost::read(&db.conn, &routes, span(0), to).await.unwrap(),
            FaultCost {
                failed: 2,
                up_for_retry: 1
            },
            "{backend:?}"
        );
        assert_eq!(
            cost::read(&db.conn, &routes, span(1), to).await.unwrap(),
            FaultCost {
                failed: 1,
                up_for_retry: 0
            },
            "{backend:?}"
        );
    }
}

/// Every transition in the table, oldest first.
async fn transitions(db: &TestDb) -> Vec<Transition> {
    history_row::Entity::find()
        .order_by_asc(history_row::Column::Id)
        .all(&db.conn)
        .await
        .unwrap()
        .into_iter()
        .map(|row| Transition::from_row(row).unwrap())
        .collect()
}

/// A running Overseer: healthy, unhealthy while two task instances fail and
/// one goes up for retry, healthy again. The transition out of `unhealthy`
/// carries the count, the one into it none; in the history endpoint's JSON as
/// `cost`. Without Airflow's `task_instance` (Overseer's own database), the
/// transition is written all the same, its cost `null`.
#[tokio::test]
async fn the_transition_out_of_unhealthy_says_what_the_span_cost() {
    for db in overseer_testkit::all_backends().await {
        let backend = db.backend;
        Migrator::up(&db.conn, None).await.unwrap();
        let airflow = backend != DbBackend::Sqlite;
        if airflow {
            db.execute_script(&ddl(backend)).await;
        }
        let check = Switch::new(ExecutorHealth::Healthy);
        let overseer = quick(&db.url, "sched-1")
            .executor(Executor::new("CeleryExecutor", check.clone()))
            .start()
            .await
            .unwrap();
        let is = |health: &'static str| {
            move |r: &overseer_core::HealthReport| {
                r.executor
                    .as_ref()
                    .and_then(|e| e.instances.first())
                    .is_some_and(|i| i.health.as_str() == health)
            }
        };
        report_until(&overseer, "healthy", is("healthy")).await;
        // Ended before the span: not its cost.
        if airflow {
            ended(&db, "before", "failed", None, Utc::now()).await;
        }
        check.set(ExecutorHealth::unhealthy("broker refused the connection"));
        report_until(&overseer, "unhealthy", is("unhealthy")).await;
        if airflow {
            let now = Utc::now();
            ended(&db, "x", "failed", None, now).await;
            ended(&db, "y", "failed", Some("CeleryExecutor"), now).await;
            ended(&db, "z", "up_for_retry", None, now).await;
            ended(&db, "ok", "success", None, now).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        check.set(ExecutorHealth::Healthy);
        report_until(&overseer, "healthy again", is("healthy")).await;
        let deadline = tokio::time::Instant::now() + PATIENCE;
        let written = loop {
            let written = transitions(&db).await;
            if written.len() >= 3 {
                break written;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{backend:?}: {written:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        overseer.shutdown().await.unwrap();
        let states: Vec<_> = written.iter().map(|t| (t.from, t.to, t.cost)).collect();
        let expected = airflow.then_some(FaultCost {
            failed: 2,
            up_for_retry: 1,
        });
        assert_eq!(
            states,
            [
                (
                    ExecutorHealthKind::Unknown,
                    ExecutorHealthKind::Healthy,
                    None
                ),
                (
                    ExecutorHealthKind::Healthy,
                    ExecutorHealthKind::Unhealthy,
                    None
                ),
                (
                    ExecutorHealthKind::Unhealthy,
                    ExecutorHealthKind::Healthy,
                    expected
                ),
            ],
            "{backend:?}"
        );
        let json = serde_json::to_value(&written[2]).unwrap();
        assert_eq!(
            json["cost"],
            if airflow {
                serde_json::json!({"failed": 2, "up_for_retry": 1})
            } else {
                serde_json::Value::Null
            },
            "{backend:?}"
        );
    }
}

/// Every executor back at once (a broker's outage ended for a whole fleet):
/// one flush ends thousands of `unhealthy` spans. On a database that cannot
/// count them (no `task_instance`: Overseer's own, or Airflow's before it
/// migrated), the flush counts until the first count fails and writes every
/// transition without its cost, within the write timeout the aggregator
/// gives it (two heartbeats of 1 s); a count per span, each failing in turn,
/// outlasted it, and the flush was retried whole for ever, its verdicts never
/// written (bench section 2, 50,000 executors on Postgres).
#[tokio::test]
async fn a_flush_ending_thousands_of_spans_is_written_within_its_timeout() {
    use overseer_core::history::{HistoryWrite, flush_with_history};
    use overseer_core::storage::Session;
    use std::sync::Arc;

    const SPANS: usize = 10_000;
    for db in overseer_testkit::all_backends().await {
        let backend = db.backend;
        Migrator::up(&db.conn, None).await.unwrap();
        let session = Session::start("sched-1", "airflow");
        let now = Utc::now();
        let from = now - chrono::Duration::seconds(40);
        let names: Vec<String> = (0..SPANS).map(|i| format!("e{i}:CeleryExecutor")).collect();
        let write = HistoryWrite {
            transitions: names
                .iter()
                .map(|executor| Transition {
                    executor: executor.clone(),
                    instance: None,
                    hostname: "sched-1".into(),
                    from: ExecutorHealthKind::Unhealthy,
                    to: ExecutorHealthKind::Healthy,
                    reason: None,
                    at: now,
                    cost: None,
                })
                .collect(),
            costs: (0..SPANS)
                .map(|i| (i, Span { executor: i, from }))
                .collect(),
            routes: Some(Arc::new(Routes::new(names.iter().map(String::as_str)))),
            prune_before: None,
        };
        let timeout = overseer_core::connect::write_timeout(Duration::from_secs(1));
        tokio::time::timeout(
            timeout,
            flush_with_history(&db.conn, &session, now, &[], &write),
        )
        .await
        .unwrap_or_else(|_| panic!("{backend:?}: the flush outlasted its timeout"))
        .unwrap();
        let written = transitions(&db).await;
        assert_eq!(written.len(), SPANS, "{backend:?}");
        assert!(written.iter().all(|t| t.cost.is_none()), "{backend:?}");
    }
}
