//! A real `airflow celery worker` (Airflow 3.3.2's Celery provider: a prefork
//! Celery 5.5.3 worker, one pool process, late acks, sending its heartbeats as
//! deployed) watched by two `overseer serve`s configured as the README
//! recommends: Airflow's own variables give the executor and its broker. One
//! runs on the defaults, as a new operator does, with no setting but a 2 s poll
//! interval (the workers from their heartbeats alone); the other pings them
//! (`OVERSEER_EXECUTORS` adds `min_workers = 1`, `worker_ping = true`). On a throwaway Redis and on a RabbitMQ virtual host of the test's own,
//! one worker goes through three faults, each a done-when of issue 24:
//!
//! 1. **Its consumer cancelled** (`celery control cancel_consumer default`), no
//!    task waiting: the pinging service says the worker answers but consumes no
//!    queue; `add_consumer default` makes it healthy again.
//! 2. **Frozen** (SIGSTOP to its whole process group) while a task arrives every
//!    second: both services turn unhealthy and, sampled every 250 ms until
//!    SIGCONT, never read healthy and never blame the broker. Then the broker
//!    stalls for 2.5 s mid-outage, so that two polls time out: on Redis the
//!    server itself (`CLIENT PAUSE`), on RabbitMQ the network between the
//!    services and it (a relay of the test's that stops carrying; the worker
//!    connects directly). Once it answers again the verdicts still never read
//!    healthy while the worker is frozen, and the reason is the worker's again.
//!    Thawed, it drains the queue and both services are healthy.
//! 3. **Killed** (SIGKILL to the whole group) with no task waiting: the
//!    service on defaults is unhealthy naming the worker and stays so.
//!
//! The faults run with every core saturated by busy processes of the test's own
//! (a scheduler host's normal state: the verdicts and their causes must not bend).
//! How long each verdict took is printed; the deadlines asserted are only how
//! long to wait on a loaded machine (speed is the bench's). The worker's whole
//! process group, the task sender and the brokers are ended by their pids
//! whatever the outcome. Needs the Airflow venv (PyPI the first time), Redis's
//! `redis-server` and `redis-cli`, and the machine's RabbitMQ (`rabbitmqctl`).

use crate::support;

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use overseer_testkit::rabbitmq::VirtualHost;
use overseer_testkit::throwaway::ThrowawayRedis;
use serde_json::Value;
use support::airflow::{clean_command, signal};
use support::procs::read;
use support::stall::StallRelay;
use support::{Serving, celery, health, overseer, workdir};

/// How often the pinging service polls; the ping's window is a third of 90 %
/// of the timeout (270 ms).
const POLL_INTERVAL: &str = "1s";
/// The one setting of the service on defaults: the README's example, 2 s.
const DEFAULTS_POLL_INTERVAL: &str = "2s";
const POLL_TIMEOUT: &str = "900ms";
/// How long a step may take before the test gives up: Airflow's worker from a
/// cold interpreter, a loaded machine. A deadline, not a measurement.
const STEP: Duration = Duration::from_secs(120);
/// How often a dashboard would sample the verdict.
const SAMPLE: Duration = Duration::from_millis(250);
/// How long a continuing fault is sampled.
const HOLD: Duration = Duration::from_secs(6);
/// The bound on the load generator's processes, should the test die first.
const LOADED_FOR: Duration = Duration::from_secs(600);

/// Airflow's environment for one broker: its home, its executor and broker.
struct AirflowEnv {
    venv: PathBuf,
    home: tempfile::TempDir,
    broker_url: String,
}

impl AirflowEnv {
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = clean_command(program, self.home.path(), &self.venv);
        command
            .env("AIRFLOW_HOME", self.home.path())
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env("AIRFLOW__CELERY__BROKER_URL", &self.broker_url)
            .env("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
            .env("PYTHONUNBUFFERED", "1");
        command
    }

    /// `celery control ARGS` on Airflow's own Celery app, to its end.
    fn control(&self, args: &[&str]) {
        let mut command = self.command(self.venv.join("bin/python"));
        command
            .args(["-m", "celery", "-A"])
            .arg("airflow.providers.celery.executors.celery_executor")
            .arg("control")
            .args(args);
        let out = command.output().expect("celery control runs");
        assert!(
            out.status.success(),
            "celery control {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A child process in a process group of its own, ended as a whole (thawed,
/// then SIGKILL) when dropped.
struct Group {
    child: Child,
    log: PathBuf,
}

impl Group {
    fn spawn(mut command: Command, log: PathBuf) -> Self {
        let file = std::fs::File::create(&log).expect("a log file");
        let child = command
            .process_group(0)
            .stdout(file.try_clone().expect("the log file"))
            .stderr(file)
            .spawn()
            .expect("the process starts");
        Self { child, log }
    }

    fn signal(&self, sig: &str) {
        signal(&format!("-{}", self.child.id()), sig);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = read(&self.log);
            eprintln!("{}:\n{}", self.log.display(), support::airflow::tail(&log));
        }
        self.signal("CONT");
        self.signal("KILL");
        let _ = self.child.wait();
    }
}

/// `airflow celery worker` as node `node`, consuming `default`, until ready.
fn start_worker(airflow: &AirflowEnv, node: &str) -> Group {
    let mut command = airflow.command(airflow.venv.join("bin/airflow"));
    command.args(support::airflow::celery_worker_args(node));
    let worker = Group::spawn(command, airflow.home.path().join("worker.log"));
    wait("the Airflow Celery worker says it is ready", || {
        read(&worker.log)
            .contains(&format!("{node} ready."))
            .then_some(())
    });
    worker
}

/// A task named `overseer.noop` (Airflow's worker knows no such task: once it
/// runs again it rejects each, and the queue drains) sent to `default` through
/// Airflow's own Celery app every second, until dropped.
fn keep_sending(airflow: &AirflowEnv) -> Group {
    let mut command = airflow.command(airflow.venv.join("bin/python"));
    command.args([
        "-c",
        "import sys, time\n\
         from airflow.providers.celery.executors.celery_executor import app\n\
         print('sending', flush=True)\n\
         while True:\n\
         \x20   app.send_task('overseer.noop', queue='default')\n\
         \x20   time.sleep(1)\n",
    ]);
    let sender = Group::spawn(command, airflow.home.path().join("sender.log"));
    wait("the task sender runs", || {
        read(&sender.log).contains("sending").then_some(())
    });
    sender
}

/// `overseer serve` on Airflow's variables (the broker at `broker_url`), as a
/// new operator runs it: no Overseer setting but the poll interval. The
/// workers are judged from their heartbeats alone.
fn serve_defaults(broker_url: &str, dir: &Path) -> Serving {
    Serving::start(
        overseer(dir)
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env("AIRFLOW__CELERY__BROKER_URL", broker_url)
            .env("OVERSEER_SUPERVISOR__POLL_INTERVAL", DEFAULTS_POLL_INTERVAL),
    )
}

/// `overseer serve` on Airflow's variables, pinging the workers with
/// `min_workers = 1` and quick intervals.
fn serve_pinging(broker_url: &str, dir: &Path) -> Serving {
    Serving::start(
        overseer(dir)
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env("AIRFLOW__CELERY__BROKER_URL", broker_url)
            .env("OVERSEER_SUPERVISOR__POLL_INTERVAL", POLL_INTERVAL)
            .env("OVERSEER_SUPERVISOR__POLL_TIMEOUT", POLL_TIMEOUT)
            .env("OVERSEER_SUPERVISOR__HEARTBEAT_INTERVAL", "500ms")
            .env("OVERSEER_SUPERVISOR__REFRESH_INTERVAL", "200ms")
            .env(
                "OVERSEER_EXECUTORS",
                "[{name = \"CeleryExecutor\", min_workers = 1, worker_ping = true}]",
            ),
    )
}

/// Reads `probe` until it answers, within [`STEP`].
fn wait<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    overseer_testkit::wait::until_within(what, STEP, || probe().ok_or("not yet"))
}

/// The Celery instance of a service's health now.
fn instance(serving: &Serving) -> Value {
    let json = health(serving);
    celery(&json)
        .cloned()
        .unwrap_or_else(|| panic!("no Celery instance: {json}"))
}

/// Waits until the service's Celery instance satisfies `done`; it, and how long.
fn until(serving: &Serving, what: &str, done: impl Fn(&Value) -> bool) -> (Value, Duration) {
    let started = Instant::now();
    let found = wait(what, || Some(instance(serving)).filter(&done));
    (found, started.elapsed())
}

fn reason(instance: &Value) -> &str {
    instance["reason"].as_str().unwrap_or_default()
}

/// The heartbeat-only service sees `node` by its heartbeats in `state`.
fn heard_as(instance: &Value, node: &str, state: &str) -> bool {
    instance["detail"]["workers"]
        .as_array()
        .is_some_and(|w| w.iter().any(|w| w["name"] == node && w["state"] == state))
}

/// The two services, by name.
type Services<'a> = [(&'a str, &'a Serving); 2];

/// Samples both services every [`SAMPLE`] until `done` holds of each (its
/// latest reading), `throughout` holding of every reading meanwhile; how long
/// after `started` each did.
fn until_each(
    services: Services<'_>,
    started: Instant,
    what: &str,
    done: impl Fn(&str, &Value) -> bool,
    mut throughout: impl FnMut(&str, &Value),
) -> [Duration; 2] {
    let mut took = [None; 2];
    while took.iter().any(Option::is_none) {
        for ((name, serving), took) in services.iter().zip(&mut took) {
            let now = instance(serving);
            throughout(name, &now);
            if took.is_none() && done(name, &now) {
                *took = Some(started.elapsed());
            }
        }
        assert!(started.elapsed() < STEP, "{what}: not within {STEP:?}");
        std::thread::sleep(SAMPLE);
    }
    took.map(Option::unwrap_or_default)
}

/// Samples both services every [`SAMPLE`] for `span`: each reading unhealthy,
/// and `check` holds of it; the readings' reasons.
fn hold_unhealthy(
    services: Services<'_>,
    span: Duration,
    check: impl Fn(&str, &Value),
) -> Vec<String> {
    let mut reasons = Vec::new();
    let until = Instant::now() + span;
    while Instant::now() < until {
        for (name, serving) in services {
            let now = instance(serving);
            unhealthy(name, &now);
            check(name, &now);
            reasons.push(reason(&now).to_owned());
        }
        std::thread::sleep(SAMPLE);
    }
    reasons
}

/// A reading while the fault continues.
fn unhealthy(name: &str, now: &Value) {
    assert_eq!(
        now["health"], "unhealthy",
        "{name}: healthy while the fault continues: {now}"
    );
}

/// Whether the reading blames the worker: the heartbeat-only service names it,
/// and neither names the broker nor a poll that went unanswered.
fn blames_the_worker(name: &str, node: &str, now: &Value) -> bool {
    let why = reason(now);
    !why.contains("broker")
        && !why.contains("no reply within")
        && (name != "heartbeats" || why.contains(node))
}

/// Pauses every client of the Redis on `port` for `span` (a stalled broker: it
/// neither closes nor answers).
fn stall_redis(port: u16, span: Duration) {
    let out = Command::new("redis-cli")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "CLIENT",
            "PAUSE",
        ])
        .arg(span.as_millis().to_string())
        .arg("ALL")
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli runs");
    assert!(
        String::from_utf8_lossy(&out.stdout).trim() == "OK",
        "CLIENT PAUSE: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How the broker is stalled mid-outage, as the services see it.
enum Stall {
    /// The Redis on this port pauses every client (`CLIENT PAUSE`).
    Redis(u16),
    /// The services reach the broker through this relay, which stops carrying.
    Relay(StallRelay),
}

impl Stall {
    /// The broker's URL for the services: through the relay, if any.
    fn url(&self, broker_url: &str, server: &str) -> String {
        match self {
            Self::Redis(_) => broker_url.to_owned(),
            Self::Relay(relay) => broker_url.replace(server, &format!("127.0.0.1:{}", relay.port)),
        }
    }

    fn stall_for(&self, span: Duration) {
        match self {
            Self::Redis(port) => stall_redis(*port, span),
            Self::Relay(relay) => relay.stall_for(span),
        }
    }
}

/// The three faults of the module's doc, one worker on `broker_url` (at
/// `server`, `host:port`), the broker stalled mid-outage by `stall`.
fn three_faults(venv: PathBuf, broker_url: String, server: &str, stall: Stall) {
    let airflow = AirflowEnv {
        venv,
        home: tempfile::Builder::new()
            .prefix("overseer-airflow-worker-")
            .tempdir()
            .expect("a home"),
        broker_url,
    };
    // At most 40 characters: reasons cut longer names.
    let node = format!("{}@overseer-test", overseer_testkit::unique_name("aw"));
    let worker = start_worker(&airflow, &node);
    let (heartbeats_dir, ping_dir) = (workdir(), workdir());
    let watched = stall.url(&airflow.broker_url, server);
    let heartbeats = serve_defaults(&watched, heartbeats_dir.path());
    let pinging = serve_pinging(&watched, ping_dir.path());
    until(&heartbeats, "heartbeats: the worker heard, healthy", |i| {
        i["health"] == "healthy" && heard_as(i, &node, "online")
    });
    until(&pinging, "ping: the worker answers, healthy", |i| {
        i["health"] == "healthy"
    });

    // The faults are judged on a loaded host, as a scheduler's is: every core
    // busy with processes of the test's own until the end.
    let load = overseer_testkit::load::Saturation::start(LOADED_FOR);

    // 1. Its consumer cancelled: it answers, consumes nothing, no task waits.
    // `celery control` imports Airflow first (seconds): the time printed is
    // from its start, an upper bound.
    let cancelled = Instant::now();
    airflow.control(&["cancel_consumer", "default", "--destination", &node]);
    let (now, _) = until(
        &pinging,
        "ping: unhealthy, the worker consumes no queue",
        |i| i["health"] == "unhealthy",
    );
    eprintln!(
        "{}: consumer cancelled, unhealthy within {:?} of `celery control` starting",
        overseer_core::secret::redact(&airflow.broker_url),
        cancelled.elapsed()
    );
    assert_eq!(
        reason(&now),
        format!("{node} answers but consumes no queue"),
        "{now}"
    );
    airflow.control(&["add_consumer", "default", "--destination", &node]);
    until(&pinging, "ping: healthy once it consumes again", |i| {
        i["health"] == "healthy"
    });

    // 2. Frozen while tasks arrive.
    worker.signal("STOP");
    let frozen = Instant::now();
    let sender = keep_sending(&airflow);
    let services = [("heartbeats", &heartbeats), ("ping", &pinging)];
    let took = until_each(
        services,
        frozen,
        "both unhealthy once frozen",
        |_, i| i["health"] == "unhealthy",
        |_, _| {},
    );
    eprintln!("frozen worker unhealthy after {took:?} (heartbeats, ping)");
    let blamed = |name: &str, now: &Value| {
        assert!(
            blames_the_worker(name, &node, now),
            "{name}: not the worker's fault: {now}"
        );
    };
    let readings = hold_unhealthy(services, HOLD, blamed);
    assert!(readings.len() >= 20, "{readings:?}");
    // Two polls time out mid-outage: while the broker stalls, any reason is
    // true; after it, the worker's fault reads as before, and never healthy.
    let span = Duration::from_millis(2500);
    stall.stall_for(span);
    let stalled = Instant::now();
    let mut readings = hold_unhealthy(services, span, |_, _| {});
    let took = until_each(
        services,
        stalled,
        "both blame the worker again after the stall",
        |name, i| blames_the_worker(name, &node, i),
        |name, now| {
            unhealthy(name, now);
            readings.push(reason(now).to_owned());
        },
    );
    eprintln!("from the stall's start, the worker blamed again after {took:?}");
    // The stall was real: polls went unanswered.
    assert!(
        readings
            .iter()
            .any(|r| r.contains("did not answer") || r.contains("no reply within")),
        "{readings:?}"
    );
    hold_unhealthy(services, HOLD, blamed);
    worker.signal("CONT");
    until_each(
        services,
        Instant::now(),
        "both healthy once thawed",
        |_, i| i["health"] == "healthy",
        |_, _| {},
    );
    drop(sender);

    // 3. Killed, nothing waiting: only its silence tells.
    until(&heartbeats, "heartbeats: healthy, the worker online", |i| {
        i["health"] == "healthy" && heard_as(i, &node, "online")
    });
    worker.signal("KILL");
    let killed = Instant::now();
    let (now, took) = until(&heartbeats, "heartbeats: unhealthy once silent", |i| {
        i["health"] == "unhealthy"
    });
    eprintln!(
        "heartbeats: SIGKILLed worker unhealthy after {took:?} (heartbeat every 2s, poll {DEFAULTS_POLL_INTERVAL})"
    );
    assert!(
        reason(&now).starts_with(&format!("{node} sent no heartbeat since ")),
        "{now}"
    );
    let left = HOLD.saturating_sub(killed.elapsed());
    let until_end = Instant::now() + left.max(Duration::from_secs(3));
    while Instant::now() < until_end {
        let now = instance(&heartbeats);
        assert_eq!(now["health"], "unhealthy", "{now}");
        assert!(heard_as(&now, &node, "gone"), "{now}");
        std::thread::sleep(SAMPLE);
    }
    drop(load);
}

fn airflow_venv() -> Option<PathBuf> {
    support::airflow::venv()
}

#[test]
fn redis_an_airflow_celery_worker_cancelled_frozen_and_killed_is_unhealthy_throughout() {
    let Some(venv) = airflow_venv() else { return };
    let Some(broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let server = format!("127.0.0.1:{}", broker.port);
    three_faults(
        venv,
        broker.url(None, 0),
        &server,
        Stall::Redis(broker.port),
    );
}

#[test]
fn rabbitmq_an_airflow_celery_worker_cancelled_frozen_and_killed_is_unhealthy_throughout() {
    let Some(venv) = airflow_venv() else { return };
    let vhost = match VirtualHost::create("overseer-airflow-worker") {
        Ok(vhost) => vhost,
        Err(e) => return overseer_testkit::unavailable("RabbitMQ (rabbitmqctl)", e).unwrap_or(()),
    };
    let server = overseer_testkit::rabbitmq::ADDRESS;
    let relay = StallRelay::start(server.parse().expect("an address"));
    three_faults(venv, vhost.url(), server, Stall::Relay(relay));
}
