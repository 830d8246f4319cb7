//! Whether work flows, end to end: `overseer serve` supervising a CeleryExecutor
//! whose broker answers and whose workers answer, while its work does not move.
//! Real Celery 5.5.3 workers on the machine's Redis and RabbitMQ; the rules are
//! core's (`overseer_core::rules`), the evidence the Celery check's.
//!
//! - A queue nobody consumes: a worker consumes A only, tasks wait in B. The
//!   executor turns unhealthy naming B within two polls, and its `detail` shows B's depth with no
//!   consumer (Redis counts consumers from the workers' `active_queues` answers,
//!   RabbitMQ from its own count).
//! - A worker frozen with SIGSTOP while tasks arrive on its queue: its consumer
//!   stays (RabbitMQ still counts it; Redis without `worker_ping` cannot tell), so
//!   it is the stall rule that fires ("none taken"); after SIGCONT the worker drains
//!   the queue and the executor is healthy again.
//!
//! The service pings with Celery's default control exchange (`celery`), so each
//! Redis test has a database of its own (`/11`, `/12`, ...: the pidbox channel is
//! per database), and every test has queues of its own. The worker is this file's
//! own process (`--pool solo`: one process, no pool children), frozen, thawed and
//! killed by its pid; a guard thaws and kills it whatever the test's outcome.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use overseer_testkit::celery::{DEFAULT_CONTROL_EXCHANGE, Worker, node_name, python, send_tasks};
use serde_json::Value;
use support::{Serving, celery, celery_venv as venv, overseer, workdir};

/// The machine's RabbitMQ, guest/guest on vhost `/`.
const RABBITMQ_URL: &str = "amqp://guest:guest@127.0.0.1:5672//";
/// The same broker as the service shows it: no credentials.
const RABBITMQ_INSTANCE: &str = "amqp://127.0.0.1:5672//";

/// How long a message may wait before the executor is unhealthy, in these tests.
const MAX_QUEUED_AGE: Duration = Duration::from_secs(3);
/// How often the service polls the executor (its `poll_timeout` is 90 % of it,
/// which leaves the ping a window of 270 ms).
const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Beyond `MAX_QUEUED_AGE` and one poll, what the verdict may take to show: the
/// poll that first sees the messages, the table write and the report's refresh,
/// and a loaded machine. A deadline to wait within, not a measurement.
const SLACK: Duration = Duration::from_secs(15);
/// How many tasks are sent where they wait.
const TASKS: u32 = 20;

/// True when `port` on loopback accepts connections; else skipped (or failed under CI).
fn service_up(service: &str, port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        || overseer_testkit::unavailable::<()>(service, format!("127.0.0.1:{port} refuses"))
            .is_some()
}

/// A broker for one test: where the worker and the service connect, what the
/// service shows as the instance, and how to remove the test's queues afterwards.
#[derive(Clone, Copy)]
enum Broker {
    /// The machine's Redis, database `db` (the test's own).
    Redis {
        db: u8,
    },
    RabbitMq,
}

impl Broker {
    fn url(self) -> String {
        match self {
            Self::Redis { db } => format!("redis://127.0.0.1:6379/{db}"),
            Self::RabbitMq => RABBITMQ_URL.to_owned(),
        }
    }

    fn instance(self) -> String {
        match self {
            Self::Redis { .. } => self.url(),
            Self::RabbitMq => RABBITMQ_INSTANCE.to_owned(),
        }
    }

    /// True when the broker answers; else skipped (or failed under CI).
    fn up(self) -> bool {
        match self {
            Self::Redis { .. } => service_up("Redis", 6379),
            Self::RabbitMq => service_up("RabbitMQ", 5672),
        }
    }

    /// Removes what Celery made for this test's `queues` and `worker`: on Redis the
    /// queues' lists and bindings and the worker's pidbox binding, on RabbitMQ the
    /// queues and their exchanges (best effort: a failure only leaves names behind).
    fn clean_up(self, venv: &Path, queues: &[String], worker: &str) {
        let script = match self {
            Self::Redis { .. } => {
                "import os, sys, redis\n\
                 r = redis.Redis.from_url(os.environ['OVERSEER_TEST_BROKER'])\n\
                 *queues, worker = sys.argv[1:]\n\
                 sep = '\\x06\\x16'\n\
                 for q in queues:\n\
                 \x20   r.delete(q, *(q + sep + p for p in '369'), '_kombu.binding.' + q)\n\
                 r.srem('_kombu.binding.celery.pidbox', sep + sep + worker + '.celery.pidbox')\n"
            }
            Self::RabbitMq => {
                "import sys\n\
                 from celery_app import app\n\
                 with app.connection_for_write() as conn:\n\
                 \x20   channel = conn.default_channel\n\
                 \x20   for q in sys.argv[1:-1]:\n\
                 \x20       channel.queue_delete(q)\n\
                 \x20       channel.exchange_delete(q)\n"
            }
        };
        let mut command = python(venv, &self.url(), DEFAULT_CONTROL_EXCHANGE);
        command.arg("-c").arg(script).args(queues).arg(worker);
        if let Err(e) = overseer_testkit::venv::run(&mut command) {
            eprintln!("could not remove the test's queues: {e}");
        }
    }
}

/// Removes a test's queues and worker binding when dropped, whatever the test's
/// outcome; declared before the worker, so it runs once the worker is gone.
struct Cleanup {
    broker: Broker,
    venv: PathBuf,
    queues: Vec<String>,
    node: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.broker.clean_up(&self.venv, &self.queues, &self.node);
    }
}

/// `overseer serve` supervising one CeleryExecutor on `broker` with `queues`.
fn serve(broker: Broker, queues: &[&str], worker_ping: bool) -> (Serving, tempfile::TempDir) {
    let dir = workdir();
    let queues = queues
        .iter()
        .map(|q| format!("{q:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let config = format!(
        "[supervisor]\n\
         hostname = \"sched-1\"\n\
         poll_interval = \"{poll}ms\"\n\
         poll_timeout = \"{timeout}ms\"\n\
         heartbeat_interval = \"200ms\"\n\
         refresh_interval = \"100ms\"\n\
         \n\
         [[executors]]\n\
         name = \"CeleryExecutor\"\n\
         broker_url = \"{url}\"\n\
         queues = [{queues}]\n\
         worker_ping = {worker_ping}\n\
         max_queued_age = \"{age}s\"\n",
        poll = POLL_INTERVAL.as_millis(),
        timeout = POLL_INTERVAL.as_millis() * 9 / 10,
        url = broker.url(),
        age = MAX_QUEUED_AGE.as_secs(),
    );
    std::fs::write(dir.path().join("overseer.toml"), config).unwrap();
    (Serving::start(&mut overseer(dir.path())), dir)
}

/// The instance's reason, or `""`.
fn reason(instance: &Value) -> &str {
    instance["reason"].as_str().unwrap_or_default()
}

/// Queue `name` in the instance's detail.
fn queue<'a>(instance: &'a Value, name: &str) -> Option<&'a Value> {
    instance["detail"]["queues"]
        .as_array()?
        .iter()
        .find(|q| q["name"] == name)
}

/// Waits (within `deadline`) until the Celery instance satisfies `done`.
fn instance_until(
    serving: &Serving,
    what: &str,
    deadline: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let json = support::health(serving);
        if let Some(instance) = celery(&json).filter(|i| done(i)) {
            return instance.clone();
        }
        assert!(started.elapsed() < deadline, "{what}: last {json}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A worker consumes A only; tasks wait in B: unhealthy, naming B, with B's depth
/// and no consumer in the detail, and the worker listed with the queue it consumes.
fn a_queue_nobody_consumes_is_named(broker: Broker) {
    if !broker.up() {
        return;
    }
    let Some(venv) = venv() else { return };
    let a = overseer_testkit::unique_name("overseer-a");
    let b = overseer_testkit::unique_name("overseer-b");
    let node = node_name();
    let _cleanup = Cleanup {
        broker,
        venv: venv.clone(),
        queues: vec![a.clone(), b.clone()],
        node: node.clone(),
    };
    let worker = Worker::start_named(&venv, &broker.url(), DEFAULT_CONTROL_EXCHANGE, &a, &node);
    send_tasks(&venv, &broker.url(), &b, TASKS, None);
    let (serving, _dir) = serve(broker, &[&a, &b], true);

    // Named within two polls by the rule on queues nobody consumes, not
    // after max_queued_age by the stall rule, which leaves B to it.
    let waiting = format!("queue {b}: work waiting, no worker consumes it");
    let instance = instance_until(
        &serving,
        "unhealthy, naming the queue nobody consumes",
        support::START_DEADLINE,
        |i| i["health"] == "unhealthy" && reason(i).contains(&waiting),
    );
    assert_eq!(instance["instance"], broker.instance().as_str());
    assert!(!reason(&instance).contains(&a), "{instance}");
    let stuck = queue(&instance, &b).expect("queue B in the detail");
    assert_eq!(stuck["depth"], TASKS, "{instance}");
    assert_eq!(stuck["consumers"], 0, "{instance}");
    let consumed = queue(&instance, &a).expect("queue A in the detail");
    assert_eq!(consumed["consumers"], 1, "{instance}");
    let workers = instance["detail"]["workers"]
        .as_array()
        .expect("workers, with worker_ping on");
    // Only this test's worker consumes A (other workers may share the pidbox).
    assert!(
        workers
            .iter()
            .any(|w| w["name"] == worker.node.as_str() && w["queues"] == serde_json::json!([a])),
        "{instance}"
    );
}

/// The only worker of A is frozen while tasks arrive: unhealthy once nothing was
/// taken for `MAX_QUEUED_AGE`, saying so; thawed, it drains A and the executor is
/// healthy again.
fn a_frozen_worker_stalls_its_queue_until_thawed(broker: Broker, worker_ping: bool) {
    if !broker.up() {
        return;
    }
    let Some(venv) = venv() else { return };
    let a = overseer_testkit::unique_name("overseer-a");
    let node = node_name();
    let _cleanup = Cleanup {
        broker,
        venv: venv.clone(),
        queues: vec![a.clone()],
        node: node.clone(),
    };
    let worker = Worker::start_named(&venv, &broker.url(), DEFAULT_CONTROL_EXCHANGE, &a, &node);
    let (serving, _dir) = serve(broker, &[&a], worker_ping);
    instance_until(
        &serving,
        "healthy with an empty queue",
        support::START_DEADLINE,
        |i| i["health"] == "healthy" && queue(i, &a).is_some_and(|q| q["depth"] == 0),
    );

    worker.signal("STOP");
    send_tasks(&venv, &broker.url(), &a, TASKS, None);
    let stalled = instance_until(
        &serving,
        "unhealthy within max_queued_age and a poll (and slack)",
        MAX_QUEUED_AGE + POLL_INTERVAL + SLACK,
        |i| i["health"] == "unhealthy",
    );
    let why = reason(&stalled);
    assert!(why.contains(&format!("queue {a}: ")), "{stalled}");
    assert!(
        why.contains(&format!(
            "messages waiting, none taken in {}s",
            MAX_QUEUED_AGE.as_secs()
        )),
        "{stalled}"
    );
    // The consumer is still there (RabbitMQ counts it) or not known (Redis without
    // the ping): it is the stall rule that fires, not the one for no consumer.
    assert!(!why.contains("no worker consumed it"), "{stalled}");
    if let Broker::RabbitMq = broker {
        assert!(
            queue(&stalled, &a).is_some_and(|q| q["consumers"] == 1),
            "{stalled}"
        );
    }
    assert!(
        queue(&stalled, &a).is_some_and(|q| q["depth"].as_u64() > Some(0)),
        "{stalled}"
    );

    worker.signal("CONT");
    instance_until(
        &serving,
        "healthy again once the worker drained its queue",
        support::START_DEADLINE,
        |i| i["health"] == "healthy" && queue(i, &a).is_some_and(|q| q["depth"] == 0),
    );
}

#[test]
fn redis_a_queue_nobody_consumes_makes_the_executor_unhealthy() {
    a_queue_nobody_consumes_is_named(Broker::Redis { db: 11 });
}

#[test]
fn rabbitmq_a_queue_nobody_consumes_makes_the_executor_unhealthy() {
    a_queue_nobody_consumes_is_named(Broker::RabbitMq);
}

/// Without `worker_ping`, Redis cannot count consumers: only the stall rule can fire.
#[test]
fn redis_a_frozen_worker_stalls_its_queue_until_thawed() {
    a_frozen_worker_stalls_its_queue_until_thawed(Broker::Redis { db: 12 }, false);
}

/// With `worker_ping`, the frozen worker does not answer, but RabbitMQ still counts
/// its consumer: the stall rule fires, not the one for a queue nobody consumes.
#[test]
fn rabbitmq_a_frozen_worker_stalls_its_queue_until_thawed() {
    a_frozen_worker_stalls_its_queue_until_thawed(Broker::RabbitMq, true);
}
