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

use crate::support;

use std::time::{Duration, Instant};

use overseer::config::duration;
use serde_json::Value;
use support::airflow::{CLI_DEADLINE, START_DEADLINE, STOP_GRACE};
use support::airflow_run::{Run, SCHEDULE_DEADLINE, Setup, try_get_json};
use support::procs::{Timings, group_gone_within, signal_group};

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

/// From the worker's death to `unknown`: five heartbeats, the scheduler's next look,
/// and Overseer's next poll.
const LOST_DEADLINE: Duration = Duration::from_secs(90);
/// Put in every process's environment, so a stray is found even when re-parented.
const MARKER_VAR: &str = "INTEROP_EDGE_RUN";

#[tokio::test]
async fn overseer_judges_a_real_edge_fleet() {
    let mut timings = Timings::new("interop-edge");

    // 1. install
    let started = Instant::now();
    let Some(venv) = support::airflow::venv() else {
        return;
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
    let mut run = Run::new(
        Setup {
            name: "interop-edge",
            marker_var: MARKER_VAR,
            executor: EDGE_EXECUTOR,
            dags: &[("overseer_edge_gpu.py", GPU_DAG)],
        },
        venv,
        &db.url,
    );
    configure(&mut run);
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
    run.wait_for_rows(
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
    let jobs = run
        .wait_for_rows(
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
    kill_worker(&mut run);
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

/// The Edge executor's configuration (the worker API in the api-server, where the
/// worker finds it, its heartbeat and job polls) and Overseer's quick supervisor.
fn configure(run: &mut Run) {
    let api = run.api_url("");
    run.env("AIRFLOW__EDGE__API_ENABLED", "True");
    run.env(
        "AIRFLOW__EDGE__API_URL",
        format!("{api}/edge_worker/v1/rpcapi"),
    );
    run.env(
        "AIRFLOW__EDGE__HEARTBEAT_INTERVAL",
        EDGE_HEARTBEAT_SECONDS.to_string(),
    );
    run.env("AIRFLOW__EDGE__JOB_POLL_INTERVAL", "1");
    run.overseer_env(
        "OVERSEER_SUPERVISOR__POLL_INTERVAL",
        duration::format(POLL_INTERVAL),
    );
    run.overseer_env(
        "OVERSEER_SUPERVISOR__POLL_TIMEOUT",
        duration::format(POLL_TIMEOUT),
    );
}

/// Airflow's three processes, one edge worker, and `overseer serve`; answers
/// Overseer's health URL.
fn start_up(run: &mut Run) -> String {
    run.start("scheduler", run.airflow(&["scheduler"]));
    run.start("dag-processor", run.airflow(&["dag-processor"]));
    run.start_api_server();
    let health = run.api_url("/api/v2/monitor/health");
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
    let address = run.start_overseer();
    format!("http://{address}/api/v2/monitor/health")
}

/// SIGKILL to the edge worker's whole process group, until none of it is left.
fn kill_worker(run: &mut Run) {
    run.procs.note_ours();
    let process = run
        .running(|name| name == "edge-worker")
        .expect("the edge worker runs");
    let pgid = process.child.id();
    signal_group(pgid, "KILL");
    let _ = process.child.wait();
    process.reaped = true;
    assert!(
        group_gone_within(pgid, Duration::from_secs(10)),
        "the edge worker's group outlived SIGKILL"
    );
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
