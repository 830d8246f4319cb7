//! A queue nobody consumes, end to end: `overseer serve` configured through
//! Airflow's own variables (the executor, the broker, the metadata database)
//! with nothing but the poll interval, a real Celery 5.5.3 worker heartbeating
//! on a throwaway Redis and consuming `default` only, and the task instances
//! Airflow holds in a `task_instance` table on Postgres.
//!
//! Redis keeps no consumer count: the check asks the worker what it consumes
//! (`active_queues`, by default, when it comes online). A task is then sent to
//! queue `nowhere`, its task instance `queued` there: within two polls the
//! executor is unhealthy naming the queue, one reason throughout; a worker
//! that consumes `nowhere` takes the task, Airflow marks it done, healthy.

use crate::support;

use std::time::{Duration, Instant};

use overseer_testkit::celery::{DEFAULT_CONTROL_EXCHANGE, Worker, python};
use overseer_testkit::throwaway::ThrowawayRedis;
use support::{celery, health_until};

const NOWHERE: &str = "queue nowhere: work waiting, no worker consumes it";

#[tokio::test]
async fn a_task_sent_to_a_queue_no_worker_consumes_is_named_within_two_polls() {
    let Some(broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let Some(venv) = support::celery_venv() else {
        return;
    };
    let Some((db, airflow_db)) = support::airflow_task_instances().await else {
        return;
    };
    let url = broker.url(None, 0);
    let worker = Worker::start_heartbeating(&venv, &url, "default");
    let (serving, _dir) = support::serve_celery(
        &url,
        &[("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", &airflow_db)],
        "",
    );
    let node = worker.node.clone();
    let json = health_until(&serving, "the worker's queues known, by default", |j| {
        celery(j).is_some_and(|c| {
            c["detail"]["workers"].as_array().is_some_and(|ws| {
                ws.iter().any(|w| {
                    w["name"] == node.as_str() && w["queues"] == serde_json::json!(["default"])
                })
            })
        })
    });
    let instance = celery(&json).unwrap();
    assert_eq!(instance["health"], "healthy", "{instance}");
    assert_eq!(
        instance["detail"]["queues"][0]["consumers"], 1,
        "{instance}"
    );

    let mut send = python(&venv, &url, DEFAULT_CONTROL_EXCHANGE);
    send.arg("-c")
        .arg("from celery_app import add\nadd.apply_async(args=(1, 2), queue='nowhere')\n");
    overseer_testkit::venv::run(&mut send).expect("sending the task");
    db.execute_script(
        "INSERT INTO task_instance (queue, state, queued_dttm) VALUES ('nowhere', 'queued', now())",
    )
    .await;
    let sent = Instant::now();
    let json = health_until(&serving, "unhealthy: the queue nobody consumes", |j| {
        celery(j).is_some_and(|c| c["health"] == "unhealthy")
    });
    let named_after = sent.elapsed();
    let instance = celery(&json).unwrap();
    assert_eq!(instance["reason"], NOWHERE, "{instance}");
    eprintln!("queue nobody consumes named {named_after:?} after the task was sent");

    // The fault continues: one reason throughout, never healthy in between.
    let readings = support::celery_readings(&serving, Duration::from_secs(6));
    assert!(
        readings
            .iter()
            .all(|(health, reason)| *health == "unhealthy" && *reason == NOWHERE),
        "{readings:?}"
    );

    // A worker for nowhere takes it; Airflow records it done: healthy.
    let _nowhere = Worker::start_heartbeating(&venv, &url, "nowhere");
    db.execute_script("UPDATE task_instance SET state = 'success' WHERE queue = 'nowhere'")
        .await;
    health_until(&serving, "healthy once the task was taken", |j| {
        celery(j).is_some_and(|c| c["health"] == "healthy")
    });
}
