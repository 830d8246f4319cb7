//! Running the real `overseer` binary in a folder of its own, with a clean environment.

#![allow(dead_code)]

pub mod airflow;
pub mod airflow_run;
pub mod browser;
pub mod procs;
pub mod stall;

use std::path::Path;
use std::process::{Command, Output};

/// The binary under test, built by cargo for this test run.
pub const OVERSEER: &str = env!("CARGO_BIN_EXE_overseer");

/// `overseer` run in `dir` with none of the caller's `OVERSEER_*` or `AIRFLOW__*`
/// variables, so only what the test sets is configuration.
pub fn overseer(dir: &Path) -> Command {
    let mut command = Command::new(OVERSEER);
    command.current_dir(dir).env_clear();
    for var in ["PATH", "TMPDIR", "LANG"] {
        if let Ok(value) = std::env::var(var) {
            command.env(var, value);
        }
    }
    // Airflow's configuration is found from the home folder too
    // (~/airflow/airflow.cfg): the test's folder, so this machine's is never read.
    command.env("HOME", dir);
    command.env("RUST_LOG", "info");
    command
}

/// What a finished run printed, and how it ended.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(command: &mut Command) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().expect("overseer runs");
    Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// A folder of its own for one run.
pub fn workdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary folder")
}

/// `overseer serve` running in the background, with its log lines and address.
pub struct Serving {
    pub child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    pub seen: Vec<String>,
    /// `host:port` it listens on, from its "listening on" line.
    pub address: String,
}

/// How long `serve` may take to report that it runs (a debug build, a cold
/// database), and any state of Overseer's own to settle: the one deadline.
pub use overseer_testkit::wait::PATIENCE as START_DEADLINE;

impl Serving {
    /// Starts `serve --bind 127.0.0.1:0` (a free port of its own) and waits until
    /// it says it runs.
    pub fn start(command: &mut Command) -> Self {
        Self::attach(command.args(["serve", "--bind", "127.0.0.1:0"]))
    }

    /// Starts `command`, a `serve` with its arguments as given (its address from
    /// its configuration), and waits until it says it runs.
    pub fn attach(command: &mut Command) -> Self {
        use std::io::BufRead;
        let mut child = command
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("overseer serve starts");
        let stderr = child.stderr.take().unwrap();
        let (lines_tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = lines_tx.send(line);
            }
        });
        let mut serving = Self {
            child,
            lines,
            seen: Vec::new(),
            address: String::new(),
        };
        let line = serving.wait_for("overseer is running");
        serving.address = line
            .split("listening on http://")
            .nth(1)
            // A plain line ends the address at white space, a JSON one at its quote.
            .and_then(|rest| rest.split(|c: char| c.is_whitespace() || c == '"').next())
            .unwrap_or_default()
            .to_owned();
        serving
    }

    /// Waits for a log line containing `text`, and returns it.
    pub fn wait_for(&mut self, text: &str) -> String {
        let deadline = std::time::Instant::now() + START_DEADLINE;
        loop {
            if let Some(line) = self.seen.iter().find(|l| l.contains(text)) {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("serve did not log {text:?}: {:?}", self.seen),
            }
        }
    }

    /// `http://host:port/path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Sends SIGTERM and waits for the exit code.
    pub fn terminate(self) -> (Option<i32>, Vec<String>) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.exited()
    }

    /// Waits (at most [`START_DEADLINE`]) for it to exit by itself, and
    /// returns its exit code and every line it logged.
    pub fn exited(mut self) -> (Option<i32>, Vec<String>) {
        let deadline = std::time::Instant::now() + START_DEADLINE;
        let exit = loop {
            match self.child.try_wait().unwrap() {
                Some(exit) => break exit,
                None if std::time::Instant::now() > deadline => {
                    panic!("serve did not exit: {:?}", self.seen)
                }
                None => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        };
        let mut seen = std::mem::take(&mut self.seen);
        // The reader ends at the child's end of output; take every line up to it.
        while let Ok(line) = self.lines.recv_timeout(START_DEADLINE) {
            seen.push(line);
        }
        (exit.code(), seen)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET, answered with its status and body (any status).
pub fn get(url: &str) -> (u16, String) {
    match ureq::get(url)
        .timeout(std::time::Duration::from_secs(10))
        .call()
    {
        Ok(response) => (response.status(), response.into_string().unwrap()),
        Err(ureq::Error::Status(status, response)) => (status, response.into_string().unwrap()),
        Err(e) => panic!("GET {url}: {e}"),
    }
}

/// Keeps rows of another process heartbeating, as that process would, until
/// dropped: every 100 ms it sets `latest_heartbeat` to now on the rows `filter`
/// selects (an SQL condition), in the form Airflow stores on `backend`.
pub struct Heartbeat {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    pub fn start(url: &str, backend: sea_orm::DbBackend, filter: &str) -> Self {
        use sea_orm::ConnectionTrait;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (url, filter, stopping) = (url.to_owned(), filter.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let db = sea_orm::Database::connect(&url)
                    .await
                    .expect("the test database");
                while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                    let now = chrono::Utc::now();
                    let at = match backend {
                        sea_orm::DbBackend::Postgres => {
                            now.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string()
                        }
                        _ => now.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
                    };
                    let _ = db
                        .execute_unprepared(&format!(
                            "UPDATE job SET latest_heartbeat = '{at}' WHERE {filter}"
                        ))
                        .await;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                let _ = db.close().await;
            });
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The Celery executor's instance in a health report.
pub fn celery(json: &serde_json::Value) -> Option<&serde_json::Value> {
    json["executor"]["instances"]
        .as_array()?
        .iter()
        .find(|i| i["executor"] == "CeleryExecutor")
}

/// `overseer serve` configured as the README recommends for a Celery
/// deployment: Airflow's own variables (`CeleryExecutor` on `broker`, and
/// `airflow`'s other `AIRFLOW__*` pairs), polling every second, with the
/// executor's `overseer.toml` lines `executor` (`min_workers = 1`, ...).
pub fn serve_celery(
    broker: &str,
    airflow: &[(&str, &str)],
    executor: &str,
) -> (Serving, tempfile::TempDir) {
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            "[supervisor]\npoll_interval = \"1s\"\npoll_timeout = \"500ms\"\n\
             heartbeat_interval = \"500ms\"\nrefresh_interval = \"200ms\"\n\n\
             [[executors]]\nname = \"CeleryExecutor\"\n{executor}\n"
        ),
    )
    .unwrap();
    let mut command = overseer(dir.path());
    command
        .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
        .env("AIRFLOW__CELERY__BROKER_URL", broker);
    for (key, value) in airflow {
        command.env(key, value);
    }
    (Serving::start(&mut command), dir)
}

/// The Celery venv, or `None` (skipped, or failed under `CI`) when it cannot
/// be built.
pub fn celery_venv() -> Option<std::path::PathBuf> {
    match overseer_testkit::venv::celery() {
        Ok(path) => Some(path),
        Err(e) => overseer_testkit::unavailable("a Python venv with Celery 5.5.3", e),
    }
}

/// The value `/metrics` gives `family` for worker `node`, as text.
pub fn worker_sample(serving: &Serving, family: &str, node: &str) -> Option<String> {
    let (status, body) = get(&serving.url("/metrics"));
    assert_eq!(status, 200);
    body.lines()
        .find(|l| {
            l.starts_with(&format!("{family}{{")) && l.contains(&format!("worker=\"{node}\""))
        })
        .map(|l| l.rsplit(' ').next().unwrap_or_default().to_owned())
}

/// The service's health JSON (any status but an error is a failure).
pub fn health(serving: &Serving) -> serde_json::Value {
    let (status, body) = get(&serving.url("/api/v2/monitor/health"));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The Celery instance's `(health, reason)`, read every 250 ms for `span`:
/// what an operator watching the endpoint through a fault would have seen.
pub fn celery_readings(
    serving: &Serving,
    span: std::time::Duration,
) -> Vec<(serde_json::Value, serde_json::Value)> {
    let started = std::time::Instant::now();
    let mut readings = Vec::new();
    while started.elapsed() < span {
        let json = health(serving);
        let instance = celery(&json).expect("the Celery instance");
        readings.push((instance["health"].clone(), instance["reason"].clone()));
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    readings
}

/// A fresh Postgres database standing in for Airflow's, with its
/// `task_instance` table (the columns Overseer reads), and the URL Airflow's
/// `sql_alchemy_conn` would give for it; `None` when Postgres is unreachable
/// (skipped, or failed under `CI`).
pub async fn airflow_task_instances() -> Option<(overseer_testkit::TestDb, String)> {
    let db = overseer_testkit::postgres().await?;
    db.execute_script(
        "CREATE TABLE task_instance (id SERIAL PRIMARY KEY, executor VARCHAR(1000), \
         queue VARCHAR(256), state VARCHAR(20), queued_dttm TIMESTAMPTZ)",
    )
    .await;
    let url = db.url.replacen("postgres://", "postgresql://", 1);
    Some((db, url))
}

/// GETs the health until `done` holds (the report refreshes every few hundred
/// ms in these tests), and returns it.
pub fn health_until(
    serving: &Serving,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    overseer_testkit::wait::until(what, || {
        let json = health(serving);
        if done(&json) { Ok(json) } else { Err(json) }
    })
}
