//! Airflow's queued task instances, on real databases: the one query that
//! reads them for every executor, the index it uses on Postgres, and the
//! verdict an executor with no check of its own gets from them.

use crate::support;

use std::time::Duration;

use chrono::{DateTime, Utc};
use overseer_core::airflow::queued::{self, QueuedRow};
use overseer_core::airflow::routes::Routes;
use overseer_core::detail::QueuedOnQueue;
use overseer_core::{Executor, ExecutorHealth, HealthReport};
use overseer_migration::{Migrator, MigratorTrait};
use overseer_testkit::TestDb;
use sea_orm::DbBackend;
use support::{quick, report_until};

/// The columns of Airflow 3.3's `task_instance` that the query reads (and the
/// key), with its `ti_state` index, in each backend's types as Airflow's
/// migrations create them.
fn task_instance_ddl(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => {
            "CREATE TABLE task_instance (id UUID NOT NULL DEFAULT gen_random_uuid(), \
             task_id VARCHAR(250) NOT NULL, dag_id VARCHAR(250) NOT NULL, \
             run_id VARCHAR(250) NOT NULL, map_index INTEGER NOT NULL DEFAULT -1, \
             state VARCHAR(20), queue VARCHAR(256), executor VARCHAR(1000), \
             queued_dttm TIMESTAMP WITH TIME ZONE, \
             CONSTRAINT task_instance_pkey PRIMARY KEY (id));
             CREATE INDEX ti_state ON task_instance (state)"
        }
        DbBackend::MySql => {
            "CREATE TABLE task_instance (id VARCHAR(36) NOT NULL, \
             task_id VARCHAR(250) NOT NULL, dag_id VARCHAR(250) NOT NULL, \
             run_id VARCHAR(250) NOT NULL, map_index INTEGER NOT NULL DEFAULT -1, \
             state VARCHAR(20), queue VARCHAR(256), executor VARCHAR(1000), \
             queued_dttm TIMESTAMP(6) NULL, \
             CONSTRAINT task_instance_pkey PRIMARY KEY (id));
             CREATE INDEX ti_state ON task_instance (state)"
        }
        _ => {
            "CREATE TABLE task_instance (id CHAR(32) NOT NULL, \
             task_id VARCHAR(250) NOT NULL, dag_id VARCHAR(250) NOT NULL, \
             run_id VARCHAR(250) NOT NULL, map_index INTEGER NOT NULL DEFAULT -1, \
             state VARCHAR(20), queue VARCHAR(256), executor VARCHAR(1000), \
             queued_dttm DATETIME, \
             CONSTRAINT task_instance_pkey PRIMARY KEY (id));
             CREATE INDEX ti_state ON task_instance (state)"
        }
    }
}

/// Airflow 3.3's `dag` (the columns the team's join reads) and
/// `dag_bundle_team`, as its migrations create them, with `bundles` (a bundle
/// and its team, or none) and one DAG per bundle, named after it.
async fn teams_ddl(db: &TestDb, bundles: &[(&str, Option<&str>)]) {
    db.execute_script(
        "CREATE TABLE dag (dag_id VARCHAR(250) NOT NULL, bundle_name VARCHAR(250), \
         CONSTRAINT dag_pkey PRIMARY KEY (dag_id));
         CREATE TABLE dag_bundle_team (dag_bundle_name VARCHAR(250) NOT NULL, \
         team_name VARCHAR(50) NOT NULL, \
         CONSTRAINT dag_bundle_team_pkey PRIMARY KEY (dag_bundle_name, team_name))",
    )
    .await;
    for (bundle, team) in bundles {
        db.execute_script(&format!(
            "INSERT INTO dag (dag_id, bundle_name) VALUES ('{bundle}', '{bundle}')"
        ))
        .await;
        if let Some(team) = team {
            db.execute_script(&format!(
                "INSERT INTO dag_bundle_team (dag_bundle_name, team_name) VALUES ('{bundle}', '{team}')"
            ))
            .await;
        }
    }
}

/// A task instance row, `age` seconds queued (when given).
struct Ti<'a> {
    dag: &'a str,
    state: &'a str,
    queue: &'a str,
    executor: Option<&'a str>,
    age: Option<i64>,
}

async fn insert(db: &TestDb, now: DateTime<Utc>, rows: &[Ti<'_>]) {
    for (n, ti) in rows.iter().enumerate() {
        let id = format!("{:032x}", rand_id(n));
        let id = match db.backend {
            DbBackend::Postgres => format!("'{}'::uuid", uuid_form(&id)),
            DbBackend::MySql => format!("'{}'", uuid_form(&id)),
            _ => format!("'{id}'"),
        };
        let executor = ti.executor.map_or("NULL".into(), |e| format!("'{e}'"));
        let queued = ti.age.map_or("NULL".into(), |age| {
            let at = now - chrono::Duration::seconds(age);
            match db.backend {
                DbBackend::Postgres => format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.6f+00:00")),
                DbBackend::MySql => format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.6f")),
                _ => format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.6f")),
            }
        });
        db.execute_script(&format!(
            "INSERT INTO task_instance (id, task_id, dag_id, run_id, state, queue, executor, queued_dttm) \
             VALUES ({id}, 'task_{n}', '{}', 'run_{n}', '{}', '{}', {executor}, {queued})",
            ti.dag, ti.state, ti.queue
        ))
        .await;
    }
}

fn rand_id(n: usize) -> u128 {
    0x5eed_0000_0000_0000_0000_0000_0000_0000 + n as u128 * 7919
}

fn uuid_form(hex: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[tokio::test]
async fn one_query_counts_queued_task_instances_per_executor_and_queue_on_every_backend() {
    for db in overseer_testkit::all_backends().await {
        let backend = db.backend;
        let ddl = task_instance_ddl(backend);
        assert!(
            !queued::has_table(&db.conn, false).await,
            "{backend:?}: no table yet"
        );
        db.execute_script(ddl).await;
        assert!(queued::has_table(&db.conn, false).await, "{backend:?}");

        let now = Utc::now();
        insert(
            &db,
            now,
            &[
                Ti {
                    dag: "dag",
                    state: "queued",
                    queue: "default",
                    executor: None,
                    age: Some(840),
                },
                Ti {
                    dag: "dag",
                    state: "queued",
                    queue: "default",
                    executor: None,
                    age: Some(100),
                },
                Ti {
                    dag: "dag",
                    state: "queued",
                    queue: "default",
                    executor: Some("CeleryExecutor"),
                    age: Some(30),
                },
                Ti {
                    dag: "dag",
                    state: "queued",
                    queue: "gpu",
                    executor: Some("CeleryExecutor"),
                    age: None,
                },
                Ti {
                    dag: "dag",
                    state: "queued",
                    queue: "default",
                    executor: Some("LocalExecutor"),
                    age: Some(400),
                },
                Ti {
                    dag: "dag",
                    state: "running",
                    queue: "default",
                    executor: None,
                    age: Some(9000),
                },
                Ti {
                    dag: "dag",
                    state: "success",
                    queue: "gpu",
                    executor: Some("CeleryExecutor"),
                    age: Some(9000),
                },
                Ti {
                    dag: "dag",
                    state: "scheduled",
                    queue: "default",
                    executor: None,
                    age: None,
                },
            ],
        )
        .await;

        let limits = [Duration::from_secs(60), Duration::from_secs(300)];
        let routes = Routes::new(["CeleryExecutor"]);
        let mut snapshot = queued::read(&db.conn, &limits, &routes, now).await.unwrap();
        snapshot
            .rows
            .sort_by(|a, b| (&a.executor, &a.queue).cmp(&(&b.executor, &b.queue)));
        let oldest: Vec<Option<i64>> = snapshot
            .rows
            .iter()
            .map(|r| r.oldest.map(|at| (now - at).num_seconds()))
            .collect();
        let row = |executor: Option<&str>, queue: &str, count, overdue: [u64; 2]| QueuedRow {
            executor: executor.map(str::to_owned),
            queue: queue.into(),
            team: None,
            owner: routes.route(executor, None),
            count,
            oldest: None,
            overdue: overdue.to_vec(),
        };
        let without_times: Vec<QueuedRow> = snapshot
            .rows
            .iter()
            .map(|r| QueuedRow {
                oldest: None,
                ..r.clone()
            })
            .collect();
        assert_eq!(
            without_times,
            vec![
                row(None, "default", 2, [2, 1]),
                row(Some("CeleryExecutor"), "default", 1, [0, 0]),
                row(Some("CeleryExecutor"), "gpu", 1, [0, 0]),
                row(Some("LocalExecutor"), "default", 1, [1, 1]),
            ],
            "{backend:?}"
        );
        // Ages to the second, whatever the backend's timestamp type.
        assert_eq!(
            oldest,
            vec![Some(840), Some(30), None, Some(400)],
            "{backend:?}: {:?}",
            snapshot.rows.iter().map(|r| r.oldest).collect::<Vec<_>>()
        );

        // The default executor's share: its null rows and its named ones.
        let share = snapshot.for_executor(0, Duration::from_secs(300));
        assert_eq!(share.count, 4, "{backend:?}");
        assert_eq!(share.oldest_seconds, Some(840), "{backend:?}");
        assert_eq!(
            share.queues,
            vec![
                QueuedOnQueue {
                    queue: "default".into(),
                    count: 3,
                    oldest_seconds: Some(840),
                    overdue: 1
                },
                QueuedOnQueue {
                    queue: "gpu".into(),
                    count: 1,
                    oldest_seconds: None,
                    overdue: 0
                },
            ],
            "{backend:?}"
        );
    }
}

/// On Postgres the query is served by Airflow's `ti_state` index: with a
/// table the size of a busy deployment's (mostly finished task instances), the
/// planner reads only the queued ones through it.
#[tokio::test]
async fn on_postgres_the_query_reads_through_the_ti_state_index() {
    let Some(db) = overseer_testkit::postgres().await else {
        return;
    };
    db.execute_script(task_instance_ddl(DbBackend::Postgres))
        .await;
    db.execute_script(
        "INSERT INTO task_instance (task_id, dag_id, run_id, state, queue, executor, queued_dttm) \
         SELECT 'task', 'dag_' || (n % 50), 'run_' || n, \
                CASE WHEN n % 1000 = 0 THEN 'queued' WHEN n % 7 = 0 THEN 'failed' ELSE 'success' END, \
                'default', NULL, now() - (n || ' seconds')::interval \
         FROM generate_series(1, 100000) AS n;
         ANALYZE task_instance",
    )
    .await;
    let sql = queued::query(
        DbBackend::Postgres,
        &[Duration::from_secs(300)],
        Utc::now(),
        false,
    );
    let plan: Vec<String> = db.strings(&format!("EXPLAIN {sql}")).await;
    let plan = plan.join("\n");
    println!("{sql}\n{plan}");
    assert!(
        plan.contains("ti_state"),
        "the query should read through ti_state:\n{plan}"
    );
    assert!(
        !plan.contains("Seq Scan"),
        "the query should not scan the whole table:\n{plan}"
    );
}

fn verdict_of(report: &HealthReport, executor: &str) -> Option<ExecutorHealth> {
    report
        .executor
        .as_ref()?
        .instances
        .iter()
        .find(|i| i.executor.as_deref() == Some(executor))
        .map(|i| i.health.clone())
}

/// An executor Overseer has no check for (the default LocalExecutor, a
/// KubernetesExecutor) gets a real verdict from Airflow's queued task
/// instances: healthy while nothing waits too long, unhealthy naming the
/// queue when something does, healthy again once it runs.
#[tokio::test]
async fn executors_without_a_check_are_judged_by_their_queued_task_instances() {
    for db in overseer_testkit::all_backends().await {
        let backend = db.backend;
        Migrator::up(&db.conn, None).await.unwrap();
        db.execute_script(task_instance_ddl(backend)).await;
        let overseer = quick(&db.url, "queued-host")
            .executor(
                Executor::unchecked("LocalExecutor").with_max_queued_age(Duration::from_secs(60)),
            )
            .executor(
                Executor::unchecked("KubernetesExecutor")
                    .with_max_queued_age(Duration::from_secs(60)),
            )
            .executor(Executor::unchecked("EdgeExecutor").with_max_queued_age(Duration::ZERO))
            .start()
            .await
            .unwrap();
        let report = report_until(&overseer, "nothing queued: healthy", |r| {
            verdict_of(r, "LocalExecutor") == Some(ExecutorHealth::Healthy)
                && verdict_of(r, "KubernetesExecutor") == Some(ExecutorHealth::Healthy)
        })
        .await;
        assert_eq!(
            verdict_of(&report, "EdgeExecutor"),
            Some(ExecutorHealth::unknown("no health check for EdgeExecutor")),
            "{backend:?}: max_queued_age = 0s turns the rule off, so no check means unknown"
        );

        // A task instance of the default executor (executor is null), queued
        // two minutes ago, and a fresh one for Kubernetes.
        let now = Utc::now();
        insert(
            &db,
            now,
            &[
                Ti {
                    dag: "dag",
                    state: "queued",
                    queue: "default",
                    executor: None,
                    age: Some(125),
                },
                Ti {
                    dag: "dag",
                    state: "queued",
                    queue: "kube",
                    executor: Some("KubernetesExecutor"),
                    age: Some(5),
                },
            ],
        )
        .await;
        let kube_queued = |r: &HealthReport| {
            r.executor
                .as_ref()?
                .instances
                .iter()
                .find(|i| i.executor.as_deref() == Some("KubernetesExecutor"))?
                .detail
                .as_ref()?
                .queued_tasks
                .as_ref()
                .map(|q| q.count)
        };
        // Each executor takes its share of a read at its own poll: wait for both.
        let report = report_until(&overseer, "a stuck task instance", |r| {
            matches!(
                verdict_of(r, "LocalExecutor"),
                Some(ExecutorHealth::Unhealthy { .. })
            ) && kube_queued(r) == Some(1)
        })
        .await;
        let ExecutorHealth::Unhealthy { reason } = verdict_of(&report, "LocalExecutor").unwrap()
        else {
            unreachable!()
        };
        assert_eq!(
            reason, "task instances queued longer than 1m on queue default",
            "{backend:?}"
        );
        assert_eq!(
            verdict_of(&report, "KubernetesExecutor"),
            Some(ExecutorHealth::Healthy)
        );
        let instances = &report.executor.as_ref().unwrap().instances;
        let kube = instances
            .iter()
            .find(|i| i.executor.as_deref() == Some("KubernetesExecutor"))
            .unwrap();
        let queued = kube
            .detail
            .as_ref()
            .and_then(|d| d.queued_tasks.clone())
            .expect("evidence");
        assert_eq!(
            (queued.count, queued.queues[0].queue.as_str()),
            (1, "kube"),
            "{backend:?}"
        );
        let json: serde_json::Value = serde_json::from_str(report.json()).unwrap();
        let local = json["executor"]["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["executor"] == "LocalExecutor")
            .unwrap()
            .clone();
        assert_eq!(local["detail"]["queued_tasks"]["count"], 1, "{backend:?}");
        assert_eq!(
            local["detail"]["queued_tasks"]["queues"][0]["overdue"], 1,
            "{backend:?}"
        );

        // The task runs: healthy again.
        db.execute_script("UPDATE task_instance SET state = 'running' WHERE executor IS NULL")
            .await;
        report_until(&overseer, "the task runs", |r| {
            verdict_of(r, "LocalExecutor") == Some(ExecutorHealth::Healthy)
        })
        .await;
        overseer.shutdown().await.unwrap();
    }
}

/// Airflow 3.3's teams: a task instance goes to the executor of its DAG's
/// team (the team of the DAG's bundle), so a team's stuck work makes that
/// team's executor unhealthy, not the global one of the same class, on every
/// backend.
#[tokio::test]
async fn a_team_s_queued_task_instances_are_its_own_executor_s() {
    for db in overseer_testkit::all_backends().await {
        let backend = db.backend;
        Migrator::up(&db.conn, None).await.unwrap();
        db.execute_script(task_instance_ddl(backend)).await;
        assert!(
            !queued::has_table(&db.conn, true).await,
            "{backend:?}: no team tables yet"
        );
        teams_ddl(
            &db,
            &[
                ("global_dags", None),
                ("a_dags", Some("team_a")),
                ("b_dags", Some("team_b")),
            ],
        )
        .await;
        assert!(queued::has_table(&db.conn, true).await, "{backend:?}");
        let now = Utc::now();
        let ti = |dag, queue, executor, age| Ti {
            dag,
            state: "queued",
            queue,
            executor,
            age: Some(age),
        };
        insert(
            &db,
            now,
            &[
                ti("global_dags", "default", None, 10),
                ti("a_dags", "default", None, 125),
                ti("a_dags", "gpu", Some("CeleryExecutor"), 20),
                ti("b_dags", "default", Some("CeleryExecutor"), 5),
                ti("b_dags", "default", Some("LocalExecutor"), 15),
            ],
        )
        .await;
        let routes = Routes::new([
            "LocalExecutor",
            "team_a=CeleryExecutor",
            "team_b=CeleryExecutor",
        ]);
        let limits = [Duration::from_secs(60)];
        let snapshot = queued::read(&db.conn, &limits, &routes, now).await.unwrap();
        let share = |index| {
            let share = snapshot.for_executor(index, limits[0]);
            share
                .queues
                .iter()
                .map(|q| (q.queue.clone(), q.count, q.overdue))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            share(0),
            vec![("default".to_owned(), 2, 0)],
            "{backend:?}: the global DAG's task, and team B's that names LocalExecutor"
        );
        assert_eq!(
            share(1),
            vec![("default".to_owned(), 1, 1), ("gpu".to_owned(), 1, 0)],
            "{backend:?}"
        );
        assert_eq!(share(2), vec![("default".to_owned(), 1, 0)], "{backend:?}");

        // End to end: team A's stuck task makes team A's executor unhealthy.
        let overseer = quick(&db.url, "queued-host")
            .executor(
                Executor::unchecked("LocalExecutor").with_max_queued_age(Duration::from_secs(60)),
            )
            .executor(
                Executor::unchecked("team_a=CeleryExecutor")
                    .with_max_queued_age(Duration::from_secs(60)),
            )
            .executor(
                Executor::unchecked("team_b=CeleryExecutor")
                    .with_max_queued_age(Duration::from_secs(60)),
            )
            .start()
            .await
            .unwrap();
        let report = report_until(&overseer, "team A's stuck task instance", |r| {
            matches!(
                verdict_of(r, "team_a=CeleryExecutor"),
                Some(ExecutorHealth::Unhealthy { .. })
            ) && verdict_of(r, "LocalExecutor") == Some(ExecutorHealth::Healthy)
                && verdict_of(r, "team_b=CeleryExecutor") == Some(ExecutorHealth::Healthy)
        })
        .await;
        assert_eq!(
            verdict_of(&report, "team_a=CeleryExecutor"),
            Some(ExecutorHealth::unhealthy(
                "task instances queued longer than 1m on queue default"
            )),
            "{backend:?}"
        );
        overseer.shutdown().await.unwrap();
    }
}

/// Overseer's own database (no `task_instance`): the rule waits, nothing is
/// judged from it, and no error is reported.
#[tokio::test]
async fn without_airflow_s_tables_an_executor_without_a_check_stays_unknown() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let overseer = quick(&db.url, "queued-host")
        .executor(Executor::unchecked("LocalExecutor"))
        .start()
        .await
        .unwrap();
    report_until(&overseer, "the executor's row", |r| {
        r.executor.as_ref().is_some_and(|e| e.instances.len() == 1)
    })
    .await;
    // Several polls later, still unknown and without evidence.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let report = overseer.report();
    let instance = &report.executor.as_ref().unwrap().instances[0];
    assert_eq!(
        instance.health,
        ExecutorHealth::unknown("no health check for LocalExecutor")
    );
    assert_eq!(instance.detail, None);
    overseer.shutdown().await.unwrap();
}
