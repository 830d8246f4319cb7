//! A real Celery 5.5.3 for tests: its Python (from [`crate::venv::celery`]) set
//! up to import the Celery crate's test app (`crates/celery/tests/support`:
//! `celery_app.py`, `send_tasks.py`), tasks sent through the real client, and
//! workers started and stopped by pid. Shared by the Celery crate's tests and
//! the binary's.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a Celery worker may take to say it is ready.
const WORKER_START_DEADLINE: Duration = Duration::from_secs(90);
/// How long a stopped worker may take to go.
const STOP_DEADLINE: Duration = Duration::from_secs(20);

/// Celery's default `control_exchange`.
pub const DEFAULT_CONTROL_EXCHANGE: &str = "celery";

/// The folder of the Celery test app.
pub fn app_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../celery/tests/support")
}

/// The venv's Python, set up to import the test app against `broker`, with
/// Celery's `control_exchange`.
pub fn python(venv: &Path, broker: &str, control_exchange: &str) -> Command {
    let mut command = Command::new(venv.join("bin/python"));
    command
        .current_dir(app_dir())
        .env("PYTHONPATH", app_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("OVERSEER_TEST_BROKER", broker)
        .env("OVERSEER_TEST_CONTROL_EXCHANGE", control_exchange)
        .stdin(Stdio::null());
    command
}

/// Sends `count` tasks to `queue` with the real Celery client (at `priority`
/// when given).
pub fn send_tasks(venv: &Path, broker: &str, queue: &str, count: u32, priority: Option<u8>) {
    let mut command = python(venv, broker, DEFAULT_CONTROL_EXCHANGE);
    command
        .arg("send_tasks.py")
        .arg(queue)
        .arg(count.to_string());
    if let Some(priority) = priority {
        command.arg(priority.to_string());
    }
    crate::venv::run(&mut command).unwrap_or_else(|e| panic!("sending tasks: {e}"));
}

/// A node name no other worker has (`w_...@overseer-test`).
pub fn node_name() -> String {
    format!("{}@overseer-test", crate::unique_name("w"))
}

/// A real Celery worker consuming one queue, in one process (`--pool solo`, so
/// that SIGSTOP freezes all of it). Dropping it thaws and kills it.
pub struct Worker {
    child: Child,
    /// Its node name, as it answers ping (`celery@...`).
    pub node: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Worker {
    /// Starts a worker with a node name of its own and waits until it is ready.
    pub fn start(venv: &Path, broker: &str, control_exchange: &str, queue: &str) -> Self {
        Self::start_named(venv, broker, control_exchange, queue, &node_name())
    }

    /// Starts worker `node` and waits until it says it is ready. It sends no
    /// heartbeats (`--without-heartbeat`): workers of parallel tests on one
    /// broker are never heard by each other's event subscriptions.
    pub fn start_named(
        venv: &Path,
        broker: &str,
        control_exchange: &str,
        queue: &str,
        node: &str,
    ) -> Self {
        Self::spawn(
            venv,
            broker,
            control_exchange,
            queue,
            node,
            false,
            &["--pool", "solo"],
        )
    }

    /// Starts a worker that sends Celery's `worker` events as a deployed one
    /// does (online, a heartbeat every 2 s, offline), with a node name of its
    /// own; give it a broker no other test's heartbeating worker uses.
    pub fn start_heartbeating(venv: &Path, broker: &str, queue: &str) -> Self {
        Self::heartbeating(venv, broker, queue, &["--pool", "solo"])
    }

    /// Starts a heartbeating worker (as [`Self::start_heartbeating`]) that runs
    /// `concurrency` tasks at once, in threads (its heartbeats go on while they
    /// run), and prefetches no more than that (`--prefetch-multiplier 1`, as
    /// Airflow starts its workers): with every slot taken, the next tasks wait
    /// in the broker.
    pub fn start_with_slots(venv: &Path, broker: &str, queue: &str, concurrency: u32) -> Self {
        let concurrency = concurrency.to_string();
        let pool = [
            "--pool",
            "threads",
            "--concurrency",
            &concurrency,
            "--prefetch-multiplier",
            "1",
        ];
        Self::heartbeating(venv, broker, queue, &pool)
    }

    /// A heartbeating worker with a node name of its own, its pool as `pool` says.
    fn heartbeating(venv: &Path, broker: &str, queue: &str, pool: &[&str]) -> Self {
        let node = node_name();
        Self::spawn(
            venv,
            broker,
            DEFAULT_CONTROL_EXCHANGE,
            queue,
            &node,
            true,
            pool,
        )
    }

    fn spawn(
        venv: &Path,
        broker: &str,
        control_exchange: &str,
        queue: &str,
        node: &str,
        heartbeat: bool,
        pool: &[&str],
    ) -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let log = dir.path().join("worker.log");
        let child = python(venv, broker, control_exchange)
            .args(["-m", "celery", "-A", "celery_app", "worker"])
            .args(pool)
            .args(if heartbeat {
                &["--without-gossip", "--without-mingle"][..]
            } else {
                &[
                    "--without-heartbeat",
                    "--without-gossip",
                    "--without-mingle",
                ][..]
            })
            .args(["--loglevel", "INFO", "-n", node, "-Q", queue, "--logfile"])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting a Celery worker");
        let worker = Self {
            child,
            node: node.to_owned(),
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

    /// Sends `signal` (`STOP`, `CONT`, `KILL`) to the worker's process, by its pid.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} failed");
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
            // Thawed first: a stopped process takes SIGKILL too, but a thawed
            // one leaves no doubt, whatever the test's outcome.
            let _ = Command::new("kill")
                .args(["-CONT", &self.child.id().to_string()])
                .status();
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
