//! What the Celery tests run against: the machine's Redis and RabbitMQ on loopback,
//! a real Celery 5.5.3 (client and worker) from a Python venv this module builds
//! once per machine, throwaway `redis-server`s, and listeners that never answer.
//!
//! The venv lives outside the clone (`$HOME/.cache/overseer/celery-5.5.3-venv`, or
//! `$OVERSEER_CELERY_VENV`); test processes racing to build it take turns through a
//! lock folder (`mkdir` is atomic), and a marker file says it is complete.
//!
//! Every child process is killed by its own pid when its value is dropped.
#![allow(dead_code, unused_imports)] // each test file uses its own part of this module, re-exports included

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use overseer_testkit::throwaway::{ThrowawayRedis, free_port};
use overseer_testkit::unavailable;
/// A name no other test (or test process) uses: queues, exchanges, worker names.
pub use overseer_testkit::unique_name;

/// The machine's Redis, as `.ci/run` starts it.
pub const REDIS_URL: &str = "redis://127.0.0.1:6379/0";
/// The machine's RabbitMQ, guest/guest on vhost `/`.
pub const RABBITMQ_URL: &str = "amqp://guest:guest@127.0.0.1:5672//";

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

pub use overseer_testkit::celery::{Worker, send_tasks};

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
    check_within(url, queues, POLL_TIMEOUT)
}

/// [`check`], polled within `poll_timeout`.
pub fn check_within(
    url: &str,
    queues: &[&str],
    poll_timeout: Duration,
) -> overseer_celery::CeleryCheck {
    let broker = overseer_celery::BrokerUrl::parse(url).expect("a valid URL");
    overseer_celery::CeleryCheck::new(
        &broker,
        overseer_celery::CheckSettings {
            queues: queues.iter().map(|q| q.to_string()).collect(),
            poll_timeout,
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
    // As the executor's actor does before a check's first run (once: again
    // is nothing).
    check.start();
    let probe = tokio::time::timeout(timeout, check.probe())
        .await
        .expect("the check answers within the poll's timeout, with its own reason");
    (probe.observation().health, probe)
}

/// Waits until a client's connection to loopback `port` is established (the
/// kernel completed it, whether or not the server took it), for at most `within`.
pub async fn until_connected(port: u16, within: Duration) {
    overseer_testkit::wait::until_true_async(
        &format!("a connection to port {port}"),
        within,
        || overseer_testkit::procs::established_to(port) > 0,
    )
    .await;
}
