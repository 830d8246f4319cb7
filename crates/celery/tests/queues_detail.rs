//! The evidence a Celery check reports beside its verdict, against a real Celery
//! 5.5.3 worker on Redis and on RabbitMQ: a worker consumes queue A only while tasks
//! wait in queue B. The detail shows B deep with no consumer, A with its one
//! consumer, and the worker with the queues it said it consumes (`active_queues`).
//! Judging that (B is stuck) is core's `flow`, not this check's: the verdict here
//! stays `healthy`.
//!
//! Each test gives its worker a control exchange and queues of its own, so parallel
//! tests never hear each other's workers or read each other's queues.

use crate::support;

use std::time::Duration;

use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
use overseer_celery::{BrokerUrl, CeleryCheck, CheckSettings};
use overseer_core::ExecutorHealth;
use overseer_core::detail::{Detail, QueueDetail, WorkerDetail};
use support::Worker;

/// The supervisor's default timeout: leaves the ping its full 1 s window.
const POLL_TIMEOUT: Duration = Duration::from_secs(5);
/// How many tasks wait in the queue nobody consumes.
const WAITING: u32 = 3;

/// One test's names: its control exchange, the queue its worker consumes, the one
/// it does not.
struct Names {
    exchange: String,
    consumed: String,
    unconsumed: String,
}

impl Names {
    fn new() -> Self {
        Self {
            exchange: support::unique_name("overseer-ce"),
            consumed: support::unique_name("overseer-a"),
            unconsumed: support::unique_name("overseer-b"),
        }
    }
}

fn check(url: &str, names: &Names) -> CeleryCheck {
    CeleryCheck::new(
        &BrokerUrl::parse(url).expect("a valid URL"),
        CheckSettings {
            queues: vec![names.consumed.clone(), names.unconsumed.clone()],
            worker_ping: true,
            poll_timeout: POLL_TIMEOUT,
            control_exchange: names.exchange.clone(),
            ..CheckSettings::default()
        },
    )
    .expect("valid settings")
}

/// The detail one poll gives, after checking its verdict is the broker's alone.
async fn observed_detail(check: &CeleryCheck) -> Detail {
    check.start();
    let probe = tokio::time::timeout(POLL_TIMEOUT, check.probe())
        .await
        .expect("the check answers within the poll's timeout");
    let observation = probe.observation();
    assert_eq!(observation.health, ExecutorHealth::Healthy, "{probe:?}");
    observation
        .detail
        .expect("a detail with queues and workers")
}

/// The detail without its heartbeat subscriptions, each of which must be on
/// `broker`: their state and counts depend on when the subscription came up
/// and on other tests' workers on the shared broker.
fn without_subscriptions(mut detail: Detail, broker: &str) -> Detail {
    for subscription in detail.worker_events.drain(..) {
        assert_eq!(subscription.broker, broker, "{subscription:?}");
    }
    // What the broker delivered and its start are another test's
    // (`redis_broker`): here only that they name the broker.
    for held in detail.brokers.drain(..) {
        assert_eq!(held.broker, broker, "{held:?}");
    }
    detail
}

/// What both brokers must show: A consumed by the worker, B waiting for nobody.
fn expected(broker: &str, names: &Names, worker: &Worker) -> Detail {
    let queue = |name: &str, depth: u64, consumers: u32| QueueDetail {
        name: name.to_owned(),
        broker: broker.to_owned(),
        depth: Some(depth),
        consumers: Some(consumers),
    };
    Detail {
        queues: vec![
            queue(&names.consumed, 0, 1),
            queue(&names.unconsumed, u64::from(WAITING), 0),
        ],
        workers: Some(vec![WorkerDetail {
            name: worker.node.clone(),
            queues: Some(vec![names.consumed.clone()]),
            state: None,
            concurrency: None,
            free_concurrency: None,
            heartbeat: None,
        }]),
        queued_tasks: None,
        brokers: Vec::new(),
        worker_events: Vec::new(),
        canary: None,
        capacity: None,
    }
}

#[tokio::test]
async fn redis_detail_counts_consumers_from_the_workers_answers() {
    if !support::redis_up() {
        return;
    }
    let Some(venv) = support::venv() else { return };
    let names = Names::new();
    let url = support::REDIS_URL;
    let worker = Worker::start(&venv, url, &names.exchange, &names.consumed);
    support::send_tasks(&venv, url, &names.unconsumed, WAITING, None);

    let broker = "redis://127.0.0.1:6379/0";
    let detail = observed_detail(&check(url, &names)).await;
    assert_eq!(
        without_subscriptions(detail, broker),
        expected(broker, &names, &worker)
    );

    drop(worker);
    for queue in [&names.consumed, &names.unconsumed] {
        support::delete_redis_queue(url, queue);
    }
    let mut conn = support::redis_conn(url);
    let _: redis::RedisResult<()> = redis::cmd("DEL")
        .arg(format!("_kombu.binding.{}.pidbox", names.exchange))
        .query(&mut conn);
}

#[tokio::test]
async fn rabbitmq_detail_takes_consumers_from_the_broker_and_queues_from_the_workers() {
    if !support::rabbitmq_up() {
        return;
    }
    let Some(venv) = support::venv() else { return };
    let names = Names::new();
    let url = support::RABBITMQ_URL;
    let worker = Worker::start(&venv, url, &names.exchange, &names.consumed);
    support::send_tasks(&venv, url, &names.unconsumed, WAITING, None);

    let broker = "amqp://127.0.0.1:5672//";
    let detail = observed_detail(&check(url, &names)).await;
    assert_eq!(
        without_subscriptions(detail, broker),
        expected(broker, &names, &worker)
    );

    drop(worker);
    // What the worker and Celery's client declared for this test.
    let conn = lapin::Connection::connect(url, Default::default())
        .await
        .expect("RabbitMQ");
    let channel = conn.create_channel().await.expect("a channel");
    for queue in [&names.consumed, &names.unconsumed] {
        let _ = channel
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    for exchange in [
        names.consumed.clone(),
        names.unconsumed.clone(),
        format!("{}.pidbox", names.exchange),
        format!("reply.{}.pidbox", names.exchange),
    ] {
        let _ = channel
            .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
            .await;
    }
}
