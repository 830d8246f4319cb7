//! No worker online while work waits, end to end: `overseer serve` configured
//! through Airflow's own variables with nothing but the poll interval,
//! supervising a real Celery 5.5.3 worker on a throwaway Redis, heartbeating as
//! a deployed worker does.
//!
//! The only worker stops cleanly (SIGTERM: its `worker-offline` said): with
//! nothing waiting that is a scale to zero, healthy. Tasks are then sent to its
//! queue: the executor turns unhealthy naming it within two polls, holds that
//! one reason for as long as nobody is there to take them, and is healthy again
//! once a worker comes back and takes them.

use crate::support;

use std::time::{Duration, Instant};

use overseer_testkit::celery::{Worker, send_tasks};
use overseer_testkit::throwaway::ThrowawayRedis;
use support::{celery, health_until};

/// The reason, as the rule gives it ([`overseer_core::rules::no_worker`]).
const NO_WORKER: &str = "no worker online while work waits";

#[test]
fn work_sent_after_the_last_worker_stopped_cleanly_is_named_within_two_polls() {
    let Some(broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let Some(venv) = support::celery_venv() else {
        return;
    };
    let url = broker.url(None, 0);
    let mut first = Worker::start_heartbeating(&venv, &url, "default");
    let node = first.node.clone();
    let (serving, _dir) = support::serve_celery(&url, &[], "");
    let online = |state: &'static str| {
        let node = node.clone();
        move |j: &serde_json::Value| {
            celery(j).is_some_and(|c| {
                c["detail"]["workers"]
                    .as_array()
                    .is_some_and(|ws| ws.iter().any(|w| w["name"] == node && w["state"] == state))
            })
        }
    };
    let json = health_until(&serving, "the worker heard online", online("online"));
    assert_eq!(celery(&json).unwrap()["health"], "healthy", "{json}");

    // Scaled to zero with nothing waiting: no fault.
    first.stop();
    let json = health_until(&serving, "the worker heard offline", online("offline"));
    let instance = celery(&json).unwrap();
    assert_eq!(instance["health"], "healthy", "{instance}");

    send_tasks(&venv, &url, "default", 3, None);
    let sent = Instant::now();
    let json = health_until(&serving, "unhealthy: no worker online", |j| {
        celery(j).is_some_and(|c| c["health"] == "unhealthy")
    });
    let named_after = sent.elapsed();
    let instance = celery(&json).unwrap();
    assert_eq!(instance["reason"], NO_WORKER, "{instance}");
    assert_eq!(instance["detail"]["queues"][0]["depth"], 3, "{instance}");
    eprintln!("no worker online named {named_after:?} after the tasks were sent");

    // The fault continues: one reason throughout, never healthy in between.
    let readings = support::celery_readings(&serving, Duration::from_secs(6));
    assert!(
        readings
            .iter()
            .all(|(health, reason)| *health == "unhealthy" && *reason == NO_WORKER),
        "{readings:?}"
    );

    // A worker comes back and takes the work: healthy, nothing waiting.
    let _second = Worker::start_heartbeating(&venv, &url, "default");
    health_until(&serving, "healthy once a worker took the work", |j| {
        celery(j)
            .is_some_and(|c| c["health"] == "healthy" && c["detail"]["queues"][0]["depth"] == 0)
    });
}
