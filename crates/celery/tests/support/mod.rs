//! What the Celery tests run against: the machine's Redis and RabbitMQ on loopback,
//! a real Celery 5.5.3 (client and worker) from a Python venv this module builds
//! once per machine, throwaway `redis-server`s, and listeners that never answer.
//!
//! The venv lives outside the clone (`$HOME/.cache/overseer/celery-5.5.3-venv`, or
//! `$OVERSEER_CELERY_VENV`); test processes racing to build it take turns through a
//! lock folder (`mkdir` is atomic), and a marker file says it is complete.
//!
//! Every child process is killed by its own pid when its value is dropped.
#![allow(dead_code)] // each test file uses its own part of this module

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use overseer_testkit::throwaway::{ThrowawayRedis, free_port};
use overseer_testkit::unavailable;
/// A name no other test (or test process) uses: queues, exchanges, worker names.
pub use overseer_testkit::unique_name;

/// The machine's Redis, as `.ci/run` starts it.
pub const REDIS_URL: &str = "redis://127.0.0.1:6379/0";
/// The machine's RabbitMQ, guest/guest on vhost `/`.
pub const RABBITMQ_URL: &str = "amqp://guest:guest@127.0.0.1:5672//";

/// How long a Celery worker may take to say it is ready.
const WORKER_START_DEADLINE: Duration = Duration::from_secs(90);
/// How long a stopped worker or server may take to go.
const STOP_DEADLINE: Duration = Duration::from_secs(20);

fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)).is_ok()
}

/// True when the machine's Redis answers; else skipped (or failed under CI).
pub fn redis_up() -> bool {
    port_open(6379) || unavailable::<()>("Redis", "127.0.0.1:6379 refuses connections").is_some()
}

/// True when the machine's RabbitMQ answers; else skipped (or failed under CI).
pub fn rabbitmq_up() -> bool {
    port_open(5672) || unavailable::<()>("RabbitMQ", "127.0.0.1:5672 refuses connections").is_some()
}

/// A connection to a Redis for the test's own reads and writes.
pub fn redis_conn(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

/// The Celery venv, built once per machine, or `None` (skipped) when it cannot be.
pub fn venv() -> Option<PathBuf> {
    match overseer_testkit::venv::celery() {
        Ok(path) => Some(path),
        Err(e) => unavailable("a Python venv with Celery 5.5.3", e),
    }
}

/// This folder: the Celery app lives here.
fn support_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support")
}

/// The venv's Python, set up to import the test app against `broker`.
fn python(venv: &Path, broker: &str, control_exchange: &str) -> Command {
    let mut command = Command::new(venv.join("bin/python"));
    command
        .current_dir(support_dir())
        .env("PYTHONPATH", support_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("OVERSEER_TEST_BROKER", broker)
        .env("OVERSEER_TEST_CONTROL_EXCHANGE", control_exchange)
        .stdin(Stdio::null());
    command
}

/// Sends `count` tasks to `queue` with the real Celery client (no worker consumes it).
pub fn send_tasks(venv: &Path, broker: &str, queue: &str, count: u32, priority: Option<u8>) {
    let mut command = python(venv, broker, "celery");
    command
        .arg("send_tasks.py")
        .arg(queue)
        .arg(count.to_string());
    if let Some(priority) = priority {
        command.arg(priority.to_string());
    }
    overseer_testkit::venv::run(&mut command).unwrap_or_else(|e| panic!("sending tasks: {e}"));
}

/// A real Celery worker, consuming one queue of its own, with a control exchange of
/// its own so that only this test's pings reach it.
pub struct Worker {
    child: Child,
    /// Its node name, as it answers ping (`celery@...`).
    pub node: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Worker {
    /// Starts a worker and waits until it says it is ready.
    pub fn start(venv: &Path, broker: &str, control_exchange: &str, queue: &str) -> Worker {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let log = dir.path().join("worker.log");
        let node = format!("{}@overseer-test", unique_name("w"));
        let child = python(venv, broker, control_exchange)
            .args([
                "-m",
                "celery",
                "-A",
                "celery_app",
                "worker",
                "--pool",
                "solo",
            ])
            .args([
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
            ])
            .args(["--loglevel", "INFO", "-n", &node, "-Q", queue, "--logfile"])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting a Celery worker");
        let worker = Worker {
            child,
            node,
            log,
            _dir: dir,
        };
        worker.wait_ready();
        worker
    }

    fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains(&format!("{} ready.", self.node)) {
                return;
            }
            assert!(
                started.elapsed() < WORKER_START_DEADLINE,
                "the Celery worker did not become ready; its log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the worker (SIGTERM, then SIGKILL) and waits until it is gone.
    pub fn stop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let started = Instant::now();
        while started.elapsed() < STOP_DEADLINE {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A Redis Sentinel of the test's own, watching one master under `name`.
pub struct ThrowawaySentinel {
    server: ThrowawayRedis,
}

impl ThrowawaySentinel {
    /// Starts a sentinel that knows `name` as the master on `master_port`.
    pub fn start(name: &str, master_port: u16) -> Option<Self> {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let conf = dir.path().join("sentinel.conf");
        // Sentinel rewrites its configuration file: it must be writable, and its own.
        std::fs::write(
            &conf,
            format!(
                "sentinel monitor {name} 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds {name} 60000\n"
            ),
        )
        .expect("writing sentinel.conf");
        let port = free_port();
        let args = vec![
            conf.display().to_string(),
            "--sentinel".into(),
            "--port".into(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
        ];
        let mut server = ThrowawayRedis::prepared(port, args, dir);
        match server.resume() {
            Ok(()) => Some(Self { server }),
            Err(e) => unavailable("redis-server --sentinel (a throwaway one)", e),
        }
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.server.port
    }
}

/// A loopback listener that accepts connections and never says a word: a broker
/// that hangs. It lives until the test ends.
pub struct SilentListener {
    /// Its loopback port.
    pub port: u16,
}

impl SilentListener {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming().flatten() {
                held.push(stream); // keep it open, say nothing
            }
        });
        Self { port }
    }
}

/// A loopback port where nothing listens.
pub fn closed_port() -> u16 {
    free_port()
}

/// Everything logged through `tracing` while the test runs, as text.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Installs a subscriber for the whole test process that writes every event,
    /// at every level, here.
    pub fn capture() -> Self {
        let logs = Self::default();
        let writer = logs.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        logs
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Deletes a test's queue from the machine's Redis: the list, its priority lists, and
/// the binding Celery's client registered for it.
pub fn delete_redis_queue(url: &str, queue: &str) {
    let mut conn = redis_conn(url);
    for key in [
        queue.to_owned(),
        format!("{queue}\x06\x163"),
        format!("{queue}\x06\x166"),
        format!("{queue}\x06\x169"),
        format!("_kombu.binding.{queue}"),
    ] {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(key).query(&mut conn);
    }
}

/// The names of the queues on the machine's RabbitMQ (read-only `rabbitmqctl list_queues`).
pub fn rabbitmq_queue_names() -> Vec<String> {
    let out = Command::new("rabbitmqctl")
        .args(["list_queues", "--quiet", "--no-table-headers", "name"])
        .output()
        .expect("rabbitmqctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Prints a line to the test's output (shown on failure).
pub fn note(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// The supervisor's timeout in the broker tests: the check must answer within it.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(2);

/// A check of `url` reporting the depth of `queues`, polled within [`POLL_TIMEOUT`].
pub fn check(url: &str, queues: &[&str]) -> overseer_celery::CeleryCheck {
    let broker = overseer_celery::BrokerUrl::parse(url).expect("a valid URL");
    overseer_celery::CeleryCheck::new(
        &broker,
        overseer_celery::CheckSettings {
            queues: queues.iter().map(|q| q.to_string()).collect(),
            poll_timeout: POLL_TIMEOUT,
            ..overseer_celery::CheckSettings::default()
        },
    )
    .expect("valid settings")
}

/// One poll, as the supervisor makes it: no answer within `timeout` would be its
/// own `no reply within ...`, so the check must answer first, with its own reason.
pub async fn poll_within(
    check: &overseer_celery::CeleryCheck,
    timeout: Duration,
) -> (overseer_core::ExecutorHealth, overseer_celery::Probe) {
    use overseer_core::HealthCheck;
    let health = tokio::time::timeout(timeout, check.get_health())
        .await
        .expect("the check answers within the poll's timeout, with its own reason");
    (health, check.latest().expect("a probe after a poll"))
}
