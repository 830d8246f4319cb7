//! Lost work, end to end: `overseer serve` configured through Airflow's own
//! variables (the executor, the broker, the metadata database) with nothing
//! but the poll interval, a real Celery 5.5.3 worker heartbeating on a
//! throwaway Redis (one slot, prefetching one, acknowledging late, as Airflow
//! starts its workers), and the task instances Airflow holds for its work in a
//! `task_instance` table on Postgres.
//!
//! Three tasks of a minute: one runs (its message delivered, unacknowledged),
//! two wait in the broker; Airflow holds one `running` and two `queued`.
//! Healthy. The broker is killed and started again at once, empty (it keeps
//! nothing on disk): the two queued task instances' messages are gone. Within
//! two polls of its return the executor is unhealthy naming them, the queue,
//! the broker and its restart; every reading after says the same (never a
//! capacity reason, never healthy in between) until Airflow requeues them
//! (their state set back to `scheduled`, as its `task_queued_timeout` does),
//! then healthy.

use crate::support;

use std::time::{Duration, Instant};

use overseer_testkit::celery::{DEFAULT_CONTROL_EXCHANGE, Worker, python};
use overseer_testkit::throwaway::ThrowawayRedis;
use serde_json::Value;
use support::{celery, health_until};

/// How long each task runs: longer than the test.
const TASK_SECONDS: u64 = 120;

/// The instance's reason, or `""`.
fn reason(instance: &Value) -> &str {
    instance["reason"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_broker_restarted_empty_names_the_task_instances_whose_messages_it_lost() {
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let Some(venv) = support::celery_venv() else {
        return;
    };
    let Some((db, airflow_db)) = support::airflow_task_instances().await else {
        return;
    };
    let url = broker.url(None, 0);
    let _worker = Worker::start_with_slots(&venv, &url, "default", 1);
    let mut send = python(&venv, &url, DEFAULT_CONTROL_EXCHANGE);
    send.arg("-c").arg(format!(
        "from celery_app import sleep\n\
         for _ in range(3):\n    sleep.apply_async(args=({TASK_SECONDS},), queue='default')\n"
    ));
    overseer_testkit::venv::run(&mut send).expect("sending the tasks");
    db.execute_script(
        "INSERT INTO task_instance (queue, state, queued_dttm) VALUES \
         ('default', 'running', now() - interval '60 seconds'), \
         ('default', 'queued', now() - interval '60 seconds'), \
         ('default', 'queued', now() - interval '60 seconds')",
    )
    .await;
    let (serving, _dir) = support::serve_celery(
        &url,
        &[("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", &airflow_db)],
        "",
    );
    let json = health_until(&serving, "healthy, one running and two waiting", |j| {
        celery(j).is_some_and(|c| {
            c["health"] == "healthy"
                && c["detail"]["queues"][0]["depth"] == 2
                && c["detail"]["brokers"][0]["delivered"] == 1
                && c["detail"]["queued_tasks"]["count"] == 2
        })
    });
    let before = celery(&json).unwrap()["detail"]["brokers"][0]["started_at"].clone();

    // Killed and started again at once, empty.
    broker.kill();
    broker
        .resume()
        .expect("the broker starts again on its port");
    let returned = Instant::now();
    let lost = format!(
        "2 task instances lost on queue default: their messages are gone from broker {url} \
         (it restarted at "
    );
    // Its death is seen first (the broker refused a poll, or the watch's
    // connection closed), then, once it is back, what it lost.
    let json = health_until(&serving, "unhealthy: the task instances lost", |j| {
        celery(j).is_some_and(|c| c["health"] == "unhealthy" && reason(c).starts_with(&lost))
    });
    let named_after = returned.elapsed();
    let instance = celery(&json).unwrap().clone();
    let said = reason(&instance).to_owned();
    assert!(said.starts_with(&lost), "{instance}");
    assert!(
        said.ends_with("UTC); Airflow requeues them after its task_queued_timeout"),
        "{instance}"
    );
    let started = &instance["detail"]["brokers"][0]["started_at"];
    assert_ne!(*started, before, "the broker's new start: {instance}");
    assert_eq!(instance["detail"]["queues"][0]["depth"], 0, "{instance}");
    eprintln!("lost work named {named_after:?} after the broker returned: {said}");

    // The fault continues: one reason throughout, never healthy in between.
    let readings = support::celery_readings(&serving, Duration::from_secs(8));
    assert!(
        readings
            .iter()
            .all(|(health, reason)| *health == "unhealthy" && *reason == said.as_str()),
        "{readings:?}"
    );

    // Airflow requeues them (its task_queued_timeout): healthy again.
    db.execute_script("UPDATE task_instance SET state = 'scheduled' WHERE state = 'queued'")
        .await;
    health_until(&serving, "healthy once Airflow requeued them", |j| {
        celery(j).is_some_and(|c| c["health"] == "healthy")
    });
}
