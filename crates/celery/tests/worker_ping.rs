//! Celery's remote-control ping against a real Celery 5.5.3 worker, on Redis and on
//! RabbitMQ: the worker's node name comes back; once it is stopped, `min_workers = 1`
//! turns the verdict `unhealthy`; and no reply key, binding or queue is left behind.
//! A frozen worker (SIGSTOP) is reported as a worker that did not answer, never
//! as the broker that stopped answering.
//!
//! Each test gives its worker a control exchange of its own (Celery's
//! `control_exchange`), so parallel tests never hear each other's workers.

use crate::support;

use std::time::Duration;

use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
use overseer_celery::{BrokerUrl, CeleryCheck, CheckSettings, Probe};
use overseer_core::ExecutorHealth;
use support::Worker;

/// The supervisor's default timeout: leaves the ping its full 1 s window.
const POLL_TIMEOUT: Duration = Duration::from_secs(5);

fn check(url: &str, control_exchange: &str, queue: &str) -> CeleryCheck {
    CeleryCheck::new(
        &BrokerUrl::parse(url).expect("a valid URL"),
        CheckSettings {
            queues: vec![queue.to_owned()],
            worker_ping: true,
            // The ping alone: the events have tests of their own (worker_events.rs).
            worker_events: false,
            min_workers: 1,
            worker_concurrency: None,
            poll_timeout: POLL_TIMEOUT,
            control_exchange: control_exchange.to_owned(),
            sentinel_master_name: None,
            broker_use_ssl: None,
            result_backend: None,
        },
    )
    .expect("valid settings")
}

async fn poll(check: &CeleryCheck) -> (ExecutorHealth, Probe) {
    support::poll_within(check, POLL_TIMEOUT).await
}

fn answered(probe: &Probe) -> Vec<String> {
    probe
        .workers
        .as_ref()
        .expect("worker_ping is on")
        .answered
        .iter()
        .map(|w| w.name.clone())
        .collect()
}

/// The reply keys and bindings a ping on `control_exchange` could have left in Redis.
fn redis_leftovers(control_exchange: &str) -> Vec<String> {
    let mut conn = support::redis_conn(support::REDIS_URL);
    let mut left: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*.reply.{control_exchange}.pidbox*"))
        .query(&mut conn)
        .unwrap();
    let bindings: Vec<String> = redis::cmd("SMEMBERS")
        .arg(format!("_kombu.binding.reply.{control_exchange}.pidbox"))
        .query(&mut conn)
        .unwrap();
    left.extend(bindings);
    left
}

#[tokio::test]
async fn redis_ping_hears_the_worker_and_notices_when_it_is_gone() {
    if !support::redis_up() {
        return;
    }
    let Some(venv) = support::venv() else { return };
    let exchange = support::unique_name("overseer-ce");
    let queue = support::unique_name("overseer-ping");
    let mut worker = Worker::start(&venv, support::REDIS_URL, &exchange, &queue);
    let check = check(support::REDIS_URL, &exchange, &queue);

    let (health, probe) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    assert_eq!(answered(&probe), [worker.node.clone()]);
    assert_eq!(redis_leftovers(&exchange), Vec::<String>::new());

    worker.stop();
    let (health, probe) = poll(&check).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy("0 of at least 1 workers answered ping within 1s")
    );
    assert_eq!(answered(&probe), Vec::<String>::new());
    assert_eq!(redis_leftovers(&exchange), Vec::<String>::new());

    // What the worker itself registered.
    let mut conn = support::redis_conn(support::REDIS_URL);
    let _: redis::RedisResult<()> = redis::cmd("DEL")
        .arg(format!("_kombu.binding.{exchange}.pidbox"))
        .arg(format!("_kombu.binding.{queue}"))
        .query(&mut conn);
}

#[tokio::test]
async fn rabbitmq_ping_hears_the_worker_and_notices_when_it_is_gone() {
    if !support::rabbitmq_up() {
        return;
    }
    let Some(venv) = support::venv() else { return };
    let exchange = support::unique_name("overseer-ce");
    let queue = support::unique_name("overseer-ping");
    let mut worker = Worker::start(&venv, support::RABBITMQ_URL, &exchange, &queue);
    let check = check(support::RABBITMQ_URL, &exchange, &queue);
    let reply_queues = |names: Vec<String>| -> Vec<String> {
        names
            .into_iter()
            .filter(|n| n.ends_with(&format!(".reply.{exchange}.pidbox")))
            .collect()
    };

    let (health, probe) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    assert_eq!(answered(&probe), [worker.node.clone()]);
    // Asked while our connection is still open: the queue was deleted, not just orphaned.
    assert_eq!(
        reply_queues(support::rabbitmq_queue_names()),
        Vec::<String>::new()
    );

    worker.stop();
    let (health, probe) = poll(&check).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy("0 of at least 1 workers answered ping within 1s")
    );
    assert_eq!(answered(&probe), Vec::<String>::new());
    assert_eq!(
        reply_queues(support::rabbitmq_queue_names()),
        Vec::<String>::new()
    );

    // What the worker and Celery declared for this test.
    let conn = lapin::Connection::connect(support::RABBITMQ_URL, Default::default())
        .await
        .expect("RabbitMQ");
    let channel = conn.create_channel().await.expect("a channel");
    let _ = channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    for name in [
        queue.clone(),
        format!("{exchange}.pidbox"),
        format!("reply.{exchange}.pidbox"),
    ] {
        let _ = channel
            .exchange_delete(name.as_str().into(), ExchangeDeleteOptions::default())
            .await;
    }
}

/// A real worker on a control exchange and queue of its own, and a check that
/// found it answering.
struct Answering {
    worker: Worker,
    check: CeleryCheck,
    venv: std::path::PathBuf,
    exchange: String,
    queue: String,
}

/// [`Answering`] on `url`, or `None` (skipped) without the Celery venv.
async fn answering(url: &str) -> Option<Answering> {
    let venv = support::venv()?;
    let exchange = support::unique_name("overseer-ce");
    let queue = support::unique_name("overseer-ping");
    let worker = Worker::start(&venv, url, &exchange, &queue);
    let check = check(url, &exchange, &queue);
    let (health, probe) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    Some(Answering {
        worker,
        check,
        venv,
        exchange,
        queue,
    })
}

/// Pings a frozen worker (SIGSTOP: its pidbox subscription stays, so the broker
/// counts it as listening) `POLLS` times on `url`: every verdict is that the
/// worker did not answer, none that the broker stopped answering.
async fn a_frozen_worker_is_blamed_and_never_the_broker(url: &str) {
    const POLLS: usize = 5;
    let Some(Answering {
        mut worker, check, ..
    }) = answering(url).await
    else {
        return;
    };
    worker.signal("STOP");
    let mut verdicts = Vec::with_capacity(POLLS);
    for _ in 0..POLLS {
        verdicts.push(poll(&check).await.0);
    }
    worker.signal("CONT");
    worker.stop();
    let expected = ExecutorHealth::unhealthy("0 of at least 1 workers answered ping within 1s");
    assert!(
        verdicts.iter().all(|v| *v == expected),
        "a frozen worker, polled {POLLS} times: {verdicts:#?}"
    );
}

#[tokio::test]
async fn redis_a_frozen_worker_is_never_taken_for_a_broker_that_stopped_answering() {
    if !support::redis_up() {
        return;
    }
    a_frozen_worker_is_blamed_and_never_the_broker(support::REDIS_URL).await;
}

#[tokio::test]
async fn rabbitmq_a_frozen_worker_is_never_taken_for_a_broker_that_stopped_answering() {
    if !support::rabbitmq_up() {
        return;
    }
    a_frozen_worker_is_blamed_and_never_the_broker(support::RABBITMQ_URL).await;
}

/// `celery control cancel_consumer` on the only worker (apache/airflow#63580's
/// state, reached on purpose): it still answers the ping, with no queue, and
/// the verdict names it at the next poll, with no task waiting.
async fn a_worker_that_consumes_no_queue_is_named(url: &str) {
    let Some(Answering {
        mut worker,
        check,
        venv,
        exchange,
        queue,
    }) = answering(url).await
    else {
        return;
    };
    let mut cancel = overseer_testkit::celery::python(&venv, url, &exchange);
    cancel.args([
        "-m",
        "celery",
        "-A",
        "celery_app",
        "control",
        "cancel_consumer",
        &queue,
        "--destination",
        &worker.node,
    ]);
    overseer_testkit::venv::run(&mut cancel).expect("celery control cancel_consumer");
    let (health, probe) = poll(&check).await;
    worker.stop();
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "{} answers but consumes no queue",
            overseer_core::reason::name(&worker.node)
        )),
        "{probe:?}"
    );
}

#[tokio::test]
async fn redis_a_worker_that_consumes_no_queue_is_named_at_once() {
    if !support::redis_up() {
        return;
    }
    a_worker_that_consumes_no_queue_is_named(support::REDIS_URL).await;
}

#[tokio::test]
async fn rabbitmq_a_worker_that_consumes_no_queue_is_named_at_once() {
    if !support::rabbitmq_up() {
        return;
    }
    a_worker_that_consumes_no_queue_is_named(support::RABBITMQ_URL).await;
}
