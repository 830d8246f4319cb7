//! Worker saturation, end to end: `overseer serve` configured through Airflow's
//! own variables (`[celery] worker_concurrency = 2`, as the worker is started)
//! supervising a real Celery 5.5.3 worker on a throwaway Redis, the worker
//! heartbeating (no remote control), running two tasks at once in threads and
//! prefetching no more (as Airflow starts its workers, acks late).
//!
//! Four 20 s tasks: two run, two wait in the broker. The executor turns
//! unhealthy naming the workers at capacity (after `max_at_capacity`, 5 s
//! here), never the queue as stalled; the reason holds still while the two
//! wait; the detail and `/metrics` show the worker's 2 slots, none free. Once
//! the first two end and the last two take their slots, nothing waits: healthy
//! again, without a reason other than the saturation's in between.

use crate::support;

use std::time::{Duration, Instant};

use overseer_testkit::celery::{DEFAULT_CONTROL_EXCHANGE, Worker, python};
use overseer_testkit::throwaway::ThrowawayRedis;
use serde_json::Value;
use support::{celery, health, health_until};

/// How long each task runs.
const TASK_SECONDS: u64 = 20;
/// What the reason says once every slot stayed taken for `max_at_capacity`.
const SATURATED: &str = "workers at capacity: all 2 slots taken on 1 worker for 5s, work waiting";

/// The worker `node` in the instance's detail.
fn worker<'a>(instance: &'a Value, node: &str) -> Option<&'a Value> {
    instance["detail"]["workers"]
        .as_array()?
        .iter()
        .find(|w| w["name"] == node)
}

#[test]
fn a_worker_whose_slots_are_all_taken_while_tasks_wait_is_named_at_capacity() {
    let Some(broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let Some(venv) = support::celery_venv() else {
        return;
    };
    let url = broker.url(None, 0);
    let running = Worker::start_with_slots(&venv, &url, "default", 2);
    let node = running.node.clone();
    let (serving, _dir) = support::serve_celery(
        &url,
        &[("AIRFLOW__CELERY__WORKER_CONCURRENCY", "2")],
        "max_at_capacity = \"5s\"",
    );
    let idle = health_until(&serving, "the worker heard, its 2 slots free", |j| {
        celery(j)
            .and_then(|c| worker(c, &node))
            .is_some_and(|w| w["state"] == "online" && w["free_concurrency"] == 2)
    });
    let instance = celery(&idle).unwrap();
    assert_eq!(instance["health"], "healthy", "{instance}");
    assert_eq!(worker(instance, &node).unwrap()["concurrency"], 2);

    let mut send = python(&venv, &url, DEFAULT_CONTROL_EXCHANGE);
    send.arg("-c").arg(format!(
        "from celery_app import sleep\n\
         for _ in range(4):\n    sleep.apply_async(args=({TASK_SECONDS},), queue='default')\n"
    ));
    // Timed from before the sender starts: on a loaded host its interpreter
    // may take seconds to exit after the tasks are on their way, and a clock
    // started after that saw the first two finish "early".
    let sent = Instant::now();
    overseer_testkit::venv::run(&mut send).expect("sending the tasks");

    let json = health_until(&serving, "unhealthy: the workers at capacity", |j| {
        celery(j).is_some_and(|c| c["health"] == "unhealthy")
    });
    let instance = celery(&json).unwrap();
    assert_eq!(instance["reason"], SATURATED, "{instance}");
    let full = worker(instance, &node).expect("the worker in the detail");
    assert_eq!(full["concurrency"], 2, "{full}");
    assert_eq!(full["free_concurrency"], 0, "{full}");
    assert_eq!(full["heartbeat"]["active"], 2, "{full}");
    let depth = &instance["detail"]["queues"][0];
    assert_eq!(
        (&depth["name"], &depth["depth"]),
        (&"default".into(), &2.into()),
        "{instance}"
    );
    assert_eq!(
        support::worker_sample(&serving, "overseer_worker_free_slots", &node).as_deref(),
        Some("0")
    );
    assert_eq!(
        support::worker_sample(&serving, "overseer_worker_concurrency", &node).as_deref(),
        Some("2")
    );

    // Every reading until it is healthy again says the same: the saturation,
    // never a stalled queue, never healthy in between.
    let mut readings = Vec::new();
    let healthy = loop {
        let json = health(&serving);
        let instance = celery(&json).unwrap().clone();
        if instance["health"] == "healthy" {
            break instance;
        }
        readings.push((instance["health"].clone(), instance["reason"].clone()));
        assert!(
            sent.elapsed() < Duration::from_secs(TASK_SECONDS * 2 + 60),
            "still unhealthy: {instance}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        readings
            .iter()
            .all(|(health, reason)| *health == "unhealthy" && *reason == SATURATED),
        "{readings:?}"
    );
    // Healthy once nothing waits: the last two run, the queue is empty.
    assert!(
        sent.elapsed() >= Duration::from_secs(TASK_SECONDS),
        "{healthy}"
    );
    assert_eq!(healthy["detail"]["queues"][0]["depth"], 0, "{healthy}");
}
