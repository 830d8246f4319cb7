//! Overseer's Edge check beside a real Airflow 3.3.2 with the Edge provider
//! (`apache-airflow-providers-edge3`) and a real `airflow edge worker`, on loopback.
//!
//! One test, in phases, each timed and printed:
//! 1. **install**: the cached Airflow venv (`overseer_testkit::venv::airflow`, which
//!    holds the Edge provider); a fresh Postgres database with the schema `airflow db
//!    migrate` makes, the provider's `edge_worker` and `edge_job` tables included
//!    (copied from a template: `support::airflow::migrated_db`).
//! 2. **start-up**: Airflow's `scheduler`, `dag-processor` and `api-server` (the Edge
//!    worker API enabled) with `AIRFLOW__CORE__EXECUTOR` naming the EdgeExecutor by
//!    its module path, one `airflow edge worker` serving queue `default`, and
//!    `overseer serve` reading Airflow's own environment.
//! 3. **healthy**: Overseer's EdgeExecutor instance is `healthy`, its detail names the
//!    worker (state `idle`, its queue, its free concurrency).
//! 4. **unserved queue**: a DAG whose one task runs on queue `gpu` is triggered; its
//!    job waits in `edge_job`, and Overseer says `unhealthy`, naming queue `gpu`.
//! 5. **worker lost**: the worker's process group is killed (SIGKILL: a lost machine,
//!    not a shutdown); once Airflow's scheduler marks it `unknown` (no heartbeat for 5
//!    of `[edge] heartbeat_interval`), Overseer's reason says so. The time from the
//!    kill to each is printed.
//! 6. **stop**: every process stopped by pid (groups as a whole), none left behind,
//!    the database dropped. On failure the tail of every log is printed and the run's
//!    folder kept.
//!
//! Needs Postgres on loopback, `python3`, and PyPI the first time; without them it
//! says SKIPPED, and fails under `CI`.

mod support;

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use overseer::config::duration;
use overseer_testkit::TestDb;
use serde_json::Value;
use support::procs::{
    Process, Processes, Timings, proc_table, read, signal_group, tail, wait_deadline,
};

/// The binary under test.
const OVERSEER: &str = env!("CARGO_BIN_EXE_overseer");
/// How Airflow 3.3.2 loads the Edge executor (it knows no short name for it).
const EDGE_EXECUTOR: &str = "airflow.providers.edge3.executors.EdgeExecutor";
/// A DAG with one task on a queue no edge worker serves.
const GPU_DAG: &str = r#"
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

with DAG(dag_id="overseer_edge_gpu", schedule=None, catchup=False, is_paused_upon_creation=False):
    BashOperator(task_id="on_gpu", bash_command="echo gpu", queue="gpu")
"#;
const GPU_DAG_ID: &str = "overseer_edge_gpu";
/// The edge worker's name (`--edge-hostname`) and the queue it serves.
const WORKER: &str = "overseer-edge-1";

/// Overseer's supervisor, quick.
const POLL_INTERVAL: Duration = Duration::from_secs(2);
const POLL_TIMEOUT: Duration = Duration::from_secs(1);
/// `[edge] heartbeat_interval`, in seconds: the worker's, and the scheduler's liveness
/// rule (5 of them without a heartbeat is `unknown`).
const EDGE_HEARTBEAT_SECONDS: u64 = 2;

const CLI_DEADLINE: Duration = Duration::from_secs(120);
const START_DEADLINE: Duration = Duration::from_secs(240);
const SCHEDULE_DEADLINE: Duration = Duration::from_secs(120);
/// From the worker's death to `unknown`: five heartbeats, the scheduler's next look,
/// and Overseer's next poll.
const LOST_DEADLINE: Duration = Duration::from_secs(90);
const STOP_GRACE: Duration = Duration::from_secs(20);
/// Put in every process's environment, so a stray is found even when re-parented.
const MARKER_VAR: &str = "INTEROP_EDGE_RUN";

#[tokio::test]
async fn overseer_judges_a_real_edge_fleet() {
    let mut timings = Timings::new("interop-edge");

    // 1. install
    let started = Instant::now();
    let venv = match overseer_testkit::venv::airflow() {
        Ok(venv) if venv.join("bin/airflow").exists() => venv,
        Ok(venv) => {
            overseer_testkit::unavailable::<()>(
                "the Airflow 3.3.2 venv (pip install from PyPI)",
                format!("{} has no bin/airflow", venv.display()),
            );
            return;
        }
        Err(e) => {
            overseer_testkit::unavailable::<()>(
                "the Airflow 3.3.2 venv (pip install from PyPI)",
                tail(&e, 30),
            );
            return;
        }
    };
    timings.add("install (cached after the first run)", started.elapsed());
    // Airflow's schema, as `airflow db migrate` leaves it (the Edge provider's
    // tables too): copied from the template the first Airflow test made.
    let started = Instant::now();
    let Some(db) = support::airflow::migrated_db(&venv).await else {
        return;
    };
    timings.add(
        "Airflow's schema (airflow db migrate, once per server)",
        started.elapsed(),
    );
    let mut run = Run::new(venv, &db.url);
    eprintln!("interop-edge: run folder {}", run.dir().display());
    let edge_columns = db.column_names("edge_worker").await;
    eprintln!("interop-edge: edge_worker after airflow db migrate: {edge_columns:?}");

    // 2. start-up
    let started = Instant::now();
    let overseer = start_up(&mut run);
    timings.add("start-up", started.elapsed());

    // 3. healthy, the worker named
    let started = Instant::now();
    let healthy = run.wait_until(
        "Overseer says the edge fleet is healthy, naming the worker",
        START_DEADLINE,
        || {
            edge_instance(&try_get_json(&overseer)?).filter(|i| {
                i["health"] == "healthy"
                    && workers(i)
                        .iter()
                        .any(|w| w["name"] == WORKER && w["state"] == "idle")
            })
        },
    );
    eprintln!("interop-edge: healthy: {healthy}");
    let expected_instance =
        overseer_checks::edge::instance(&overseer_core::secret::SecretUrl::new(db.url.as_str()));
    assert_eq!(healthy["instance"], expected_instance.as_str());
    let worker = workers(&healthy)
        .into_iter()
        .find(|w| w["name"] == WORKER)
        .expect("the worker");
    assert_eq!(worker["queues"], serde_json::json!(["default"]));
    assert_eq!(worker["free_concurrency"], 2, "{worker}");
    let default = queue(&healthy, "default").expect("queue default in the detail");
    assert_eq!(default["consumers"], 1, "{default}");
    timings.add("healthy", started.elapsed());

    // 4. a job on a queue nobody serves
    let started = Instant::now();
    wait_for_rows(
        &mut run,
        &db,
        "the DAG processor stored the gpu DAG, unpaused",
        SCHEDULE_DEADLINE,
        &format!("SELECT is_paused::text FROM dag WHERE dag_id = '{GPU_DAG_ID}'"),
        |rows| rows == ["false"],
    )
    .await;
    let trigger = run.finish(
        run.airflow(&["dags", "trigger", GPU_DAG_ID]),
        "airflow-dags-trigger",
        CLI_DEADLINE,
    );
    assert!(
        trigger.status.success(),
        "airflow dags trigger failed:\n{}",
        trigger.log
    );
    let jobs = wait_for_rows(
        &mut run,
        &db,
        "the EdgeExecutor wrote the job to edge_job",
        SCHEDULE_DEADLINE,
        "SELECT queue || ' ' || state FROM edge_job",
        |rows| !rows.is_empty(),
    )
    .await;
    eprintln!("interop-edge: edge_job rows: {jobs:?}");
    let unserved = run.wait_until(
        "Overseer says unhealthy, naming queue gpu",
        Duration::from_secs(30),
        || {
            edge_instance(&try_get_json(&overseer)?).filter(|i| {
                i["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("queue gpu"))
            })
        },
    );
    assert_eq!(unserved["health"], "unhealthy");
    assert_eq!(
        unserved["reason"],
        "queue gpu: 1 job waiting and no connected edge worker serves it"
    );
    let gpu = queue(&unserved, "gpu").expect("queue gpu in the detail");
    assert_eq!((&gpu["depth"], &gpu["consumers"]), (&1.into(), &0.into()));
    timings.add("trigger until unhealthy (queue gpu)", started.elapsed());

    // 5. the worker lost
    let killed = Instant::now();
    run.kill_worker();
    let lost = run.wait_until(
        "Overseer's reason says the worker is unknown",
        LOST_DEADLINE,
        || {
            edge_instance(&try_get_json(&overseer)?).filter(|i| {
                i["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains(&format!("{WORKER}: unknown")))
            })
        },
    );
    let took = killed.elapsed();
    eprintln!("interop-edge: after the kill: {lost}");
    assert_eq!(lost["health"], "unhealthy");
    assert_eq!(
        lost["reason"],
        format!(
            "every edge worker is unknown or offline ({WORKER}: unknown) while 1 job waits (gpu: 1)"
        )
    );
    let states = db
        .strings(&format!(
            "SELECT state FROM edge_worker WHERE worker_name = '{WORKER}'"
        ))
        .await;
    assert_eq!(states, ["unknown"], "Airflow marked the worker");
    timings.add("worker killed until the reason says unknown", took);

    // 6. stop
    let started = Instant::now();
    let strays = run.procs.stop_all(STOP_GRACE);
    assert!(strays.is_empty(), "processes left behind: {strays:?}");
    timings.add("stop", started.elapsed());
    drop(run);
    drop(db);
    eprintln!("interop-edge: phase timings\n{}", timings.render());
}

/// Airflow's three processes, one edge worker, and `overseer serve`; answers
/// Overseer's health URL.
fn start_up(run: &mut Run) -> String {
    let api_port = run.api_port.to_string();
    run.start("scheduler", run.airflow(&["scheduler"]));
    run.start("dag-processor", run.airflow(&["dag-processor"]));
    run.start(
        "api-server",
        run.airflow(&[
            "api-server",
            "--host",
            "127.0.0.1",
            "--port",
            &api_port,
            "--workers",
            "1",
        ]),
    );
    let health = format!("http://127.0.0.1:{api_port}/api/v2/monitor/health");
    run.wait_until("Airflow's api-server answers", START_DEADLINE, || {
        try_get_json(&health)
    });
    let worker = run.airflow(&[
        "edge",
        "worker",
        "--queues",
        "default",
        "--edge-hostname",
        WORKER,
        "--concurrency",
        "2",
    ]);
    run.start_group("edge-worker", worker);
    let overseer = run.overseer(&["serve", "--bind", "127.0.0.1:0"]);
    run.start("overseer", overseer);
    let log = run.log_path("overseer");
    let address = run.wait_until(
        "overseer serve says it is running",
        Duration::from_secs(60),
        || {
            read(&log)
                .split("listening on http://")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_owned)
        },
    );
    format!("http://{address}/api/v2/monitor/health")
}

/// Overseer's EdgeExecutor instance, if listed.
fn edge_instance(report: &Value) -> Option<Value> {
    report["executor"]["instances"]
        .as_array()?
        .iter()
        .find(|i| i["executor"] == EDGE_EXECUTOR)
        .cloned()
}

fn workers(instance: &Value) -> Vec<Value> {
    instance["detail"]["workers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn queue(instance: &Value, name: &str) -> Option<Value> {
    instance["detail"]["queues"]
        .as_array()?
        .iter()
        .find(|q| q["name"] == name)
        .cloned()
}

/// Polls `sql` until `accept` takes its rows.
async fn wait_for_rows(
    run: &mut Run,
    db: &TestDb,
    what: &str,
    deadline: Duration,
    sql: &str,
    accept: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let until = Instant::now() + deadline;
    loop {
        let rows = db.strings(sql).await;
        if accept(&rows) {
            return rows;
        }
        run.procs.check_ours(what);
        assert!(
            Instant::now() < until,
            "{what}: not within {deadline:?}; last read {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One run: its folder, its processes, the environment they share. Dropping it stops
/// every process (also when an assertion failed).
struct Run {
    dir: Option<tempfile::TempDir>,
    venv: PathBuf,
    sql_alchemy_conn: String,
    api_port: u16,
    jwt_secret: String,
    /// What the run started, and every process of theirs seen.
    procs: Processes,
}

struct Finished {
    status: ExitStatus,
    log: String,
}

impl Run {
    fn new(venv: PathBuf, db_url: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("overseer-interop-edge-")
            .tempdir()
            .expect("a run folder");
        for sub in ["dags", "airflow-home", "logs"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("dags/overseer_edge_gpu.py"), GPU_DAG).unwrap();
        let sql_alchemy_conn = match db_url.split_once("://") {
            Some((_, rest)) => format!("postgresql+psycopg2://{rest}"),
            None => panic!("a Postgres URL: {db_url}"),
        };
        let marker = overseer_testkit::unique_name("interop_edge");
        Self {
            dir: Some(dir),
            venv,
            sql_alchemy_conn,
            api_port: overseer_testkit::throwaway::free_port(),
            jwt_secret: format!("overseer-interop-edge-{marker}"),
            procs: Processes::new(MARKER_VAR, marker),
        }
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("the run folder").path()
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir().join("logs").join(format!("{name}.log"))
    }

    /// A command with a clean environment: the basics, the venv first on the PATH, the
    /// run's marker, and Airflow's configuration (which Overseer reads too).
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        command
            .current_dir(self.dir())
            .env_clear()
            .stdin(Stdio::null());
        for var in ["HOME", "TMPDIR", "LANG"] {
            if let Ok(value) = std::env::var(var) {
                command.env(var, value);
            }
        }
        let path = std::env::var("PATH").unwrap_or_default();
        let api = format!("http://127.0.0.1:{}", self.api_port);
        command
            .env(
                "PATH",
                format!("{}:{path}", self.venv.join("bin").display()),
            )
            .env(MARKER_VAR, &self.procs.marker)
            .env("PYTHONUNBUFFERED", "1")
            .env("AIRFLOW_HOME", self.dir().join("airflow-home"))
            .env(
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                &self.sql_alchemy_conn,
            )
            .env("AIRFLOW__CORE__EXECUTOR", EDGE_EXECUTOR)
            .env("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
            .env("AIRFLOW__CORE__DAGS_FOLDER", self.dir().join("dags"))
            .env(
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
                format!("{api}/execution/"),
            )
            .env("AIRFLOW__API_AUTH__JWT_SECRET", &self.jwt_secret)
            .env("AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES", "1")
            // The Edge worker API in the api-server, and where the worker finds it.
            .env("AIRFLOW__EDGE__API_ENABLED", "True")
            .env(
                "AIRFLOW__EDGE__API_URL",
                format!("{api}/edge_worker/v1/rpcapi"),
            )
            .env(
                "AIRFLOW__EDGE__HEARTBEAT_INTERVAL",
                EDGE_HEARTBEAT_SECONDS.to_string(),
            )
            .env("AIRFLOW__EDGE__JOB_POLL_INTERVAL", "1");
        command
    }

    fn airflow(&self, args: &[&str]) -> Command {
        let mut command = self.command(self.venv.join("bin/airflow"));
        command.args(args);
        command
    }

    fn overseer(&self, args: &[&str]) -> Command {
        let mut command = self.command(OVERSEER);
        command
            .args(args)
            .env("RUST_LOG", "info")
            .env(
                "OVERSEER_SUPERVISOR__POLL_INTERVAL",
                duration::format(POLL_INTERVAL),
            )
            .env(
                "OVERSEER_SUPERVISOR__POLL_TIMEOUT",
                duration::format(POLL_TIMEOUT),
            );
        command
    }

    fn start(&mut self, name: &str, command: Command) {
        self.launch(name, command, false);
    }

    fn start_group(&mut self, name: &str, mut command: Command) {
        command.process_group(0);
        self.launch(name, command, true);
    }

    fn launch(&mut self, name: &str, mut command: Command, group: bool) {
        let log = self.log_path(name);
        let file = std::fs::File::create(&log).expect("a log file");
        let child = command
            .stdout(file.try_clone().expect("the log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        self.procs.started.push(Process {
            name: name.to_owned(),
            child,
            log,
            group,
            reaped: false,
        });
        self.procs.note_ours();
    }

    fn finish(&mut self, mut command: Command, name: &str, deadline: Duration) -> Finished {
        let log = self.log_path(name);
        let file = std::fs::File::create(&log).expect("a log file");
        let mut child = command
            .stdout(file.try_clone().expect("the log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        let status = wait_deadline(&mut child, deadline);
        let log = read(&log);
        match status {
            Some(status) => Finished { status, log },
            None => panic!(
                "{name} did not finish within {deadline:?}:\n{}",
                tail(&log, 40)
            ),
        }
    }

    /// SIGKILL to the edge worker's whole process group, until none of it is left.
    fn kill_worker(&mut self) {
        self.procs.note_ours();
        let process = self
            .procs
            .started
            .iter_mut()
            .find(|p| p.name == "edge-worker" && !p.reaped)
            .expect("the edge worker runs");
        let pgid = process.child.id();
        signal_group(pgid, "KILL");
        let _ = process.child.wait();
        process.reaped = true;
        let until = Instant::now() + Duration::from_secs(10);
        let in_group = || {
            proc_table()
                .into_iter()
                .any(|p| p.pgrp == pgid && p.state != 'Z')
        };
        while in_group() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(!in_group(), "the edge worker's group outlived SIGKILL");
    }

    /// Polls `probe` every 250 ms until it answers; fails at `deadline`, or at once
    /// when a process of ours died meanwhile.
    fn wait_until<T>(
        &mut self,
        what: &str,
        deadline: Duration,
        mut probe: impl FnMut() -> Option<T>,
    ) -> T {
        let until = Instant::now() + deadline;
        loop {
            if let Some(answer) = probe() {
                return answer;
            }
            self.procs.check_ours(what);
            assert!(Instant::now() < until, "{what}: not within {deadline:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let tails = self.procs.tails();
            eprintln!("interop-edge: the test failed; the last lines of each process:\n{tails}");
        }
        if !self.procs.stopped {
            let strays = self.procs.stop_all(STOP_GRACE);
            if !strays.is_empty() {
                eprintln!("interop-edge: could not stop {strays:?}");
            }
        }
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("interop-edge: kept the run folder {}", dir.keep().display());
        }
    }
}

/// A health report, or `None` while the server does not answer 200 with JSON.
fn try_get_json(url: &str) -> Option<Value> {
    let response = ureq::get(url)
        .timeout(Duration::from_secs(10))
        .call()
        .ok()?;
    serde_json::from_str(&response.into_string().ok()?).ok()
}
