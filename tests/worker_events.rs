//! `overseer serve` configured as the README recommends (Airflow's own
//! variables, one `min_workers` line in `overseer.toml`), with a real Celery
//! 5.5.3 worker sending its heartbeats to a throwaway Redis and no remote
//! control: the worker shows on HTTP and `/metrics` from its heartbeats alone,
//! and once it is SIGKILLed, with no task waiting, the executor is unhealthy,
//! naming it, and stays so.

use crate::support;

use std::time::{Duration, Instant};

use overseer_testkit::celery::Worker;
use overseer_testkit::throwaway::ThrowawayRedis;
use support::{Serving, celery, health, health_until};

fn worker_up(serving: &Serving, node: &str) -> Option<String> {
    support::worker_sample(serving, "overseer_worker_up", node)
}

#[test]
fn a_worker_killed_with_nothing_waiting_is_named_from_its_silence() {
    let Some(broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let Some(venv) = support::celery_venv() else {
        return;
    };
    let url = broker.url(None, 0);
    let worker = Worker::start_heartbeating(&venv, &url, "default");
    let node = worker.node.clone();
    let (serving, _dir) = support::serve_celery(&url, &[], "min_workers = 1");
    let json = health_until(&serving, "the worker heard by its heartbeats", |j| {
        celery(j).is_some_and(|c| {
            c["detail"]["workers"].as_array().is_some_and(|w| {
                w.iter()
                    .any(|w| w["name"] == node.as_str() && w["state"] == "online")
            })
        })
    });
    let instance = celery(&json).unwrap();
    assert_eq!(instance["health"], "healthy", "{instance}");
    let heard = instance["detail"]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == node.as_str())
        .unwrap();
    assert_eq!(heard["heartbeat"]["every_ms"], 2000, "{heard}");
    assert_eq!(heard["heartbeat"]["software"], "py-celery 5.5.3", "{heard}");
    assert_eq!(worker_up(&serving, &node).as_deref(), Some("1"));

    worker.signal("KILL");
    let killed = Instant::now();
    let json = health_until(&serving, "unhealthy once the worker is silent", |j| {
        celery(j).is_some_and(|c| c["health"] == "unhealthy")
    });
    let took = killed.elapsed();
    let reason = celery(&json).unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reason.starts_with(&format!(
            "0 of at least 1 workers alive: {node} sent no heartbeat since"
        )),
        "{reason}"
    );
    eprintln!("SIGKILLed worker unhealthy on HTTP after {took:?}");
    assert_eq!(worker_up(&serving, &node).as_deref(), Some("0"));
    // The fault continues: sampled every 250 ms for 5 s, never healthy.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let json = health(&serving);
        let instance = celery(&json).unwrap();
        assert_eq!(instance["health"], "unhealthy", "{instance}");
        std::thread::sleep(Duration::from_millis(250));
    }
}
