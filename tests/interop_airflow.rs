//! Overseer beside a real Airflow 3.3.2 (issue 6, part 1): the gap it closes,
//! shown against Airflow itself.
//!
//! One test, in phases, each timed and printed, each a function named after what it
//! shows (`migrate`, `start_up`, `reports_agree`, `work_stuck`, `broker_down`, ...):
//! 1. **install**: a venv with `apache-airflow[postgres]==3.3.2`, the Celery provider and
//!    `celery<5.6`, made once per machine outside the clone by
//!    `overseer_testkit::venv::airflow` (cached, behind a lock folder).
//! 2. **migrate**: a fresh Postgres database with Airflow's schema (`airflow db
//!    migrate`'s, copied from a template the first Airflow test on the server made
//!    with this venv: `support::airflow::migrated_db`), then `EXPLAIN` of
//!    Overseer's queued-task query on Airflow's real schema (the query and its plan
//!    printed; only that it runs is asserted: an empty table's plan is not
//!    representative), then `overseer migrate` on the same database (Overseer adds its
//!    four columns to Airflow's `job` table).
//! 3. **start-up**: a Redis broker of the test's own, Airflow's `scheduler`, `triggerer`,
//!    `dag-processor` and `api-server` with `CeleryExecutor`, and `overseer serve` reading
//!    Airflow's own environment variables (plus `OVERSEER_EXECUTORS` giving the Celery
//!    executor a `MAX_QUEUED_AGE` of 10 s); until Airflow's `/api/v2/monitor/health`
//!    says all three components are healthy.
//! 4. **agree**: Airflow's health JSON and Overseer's agree on every field Airflow has;
//!    Overseer adds an `executor` entry, `healthy`, whose instance is the broker.
//! 5. **work stuck**: no Celery worker runs; the DAG `overseer_interop_flow` (one quick
//!    task) is triggered with `airflow dags trigger`; its task instance sits in `queued`
//!    (read from `task_instance`); Overseer says the executor is `unhealthy` with
//!    `task instances queued longer than 10s on queue default` and
//!    `detail.queued_tasks` counting it, `/metrics` has `overseer_queued_tasks` for it,
//!    while Airflow's own endpoint says all is healthy. The time from the task
//!    instance's `queued_dttm` to the verdict is printed.
//! 6. **work flows**: `airflow celery worker` (concurrency 1) starts in a process group
//!    of its own, the task instance reaches `success`, Overseer says `healthy` again with
//!    nothing queued; the worker is stopped (its whole group) before the next phase.
//! 7. **broker down**: the broker killed, Overseer says `unhealthy` with a plain reason
//!    within a poll interval plus the timeout (plus the write and the refresh), while
//!    Airflow's own endpoint keeps saying everything is healthy; the broker back on the
//!    same port, `healthy` again.
//! 8. **Airflow unharmed**: with Overseer's columns in its table, Airflow's scheduler keeps
//!    heartbeating and `airflow jobs check --job-type SchedulerJob` passes (and
//!    `overseer jobs check` says the same); the DAG `overseer_interop` never ran.
//! 9. **stop**: SIGTERM, SIGKILL after a grace period, no process left behind (checked),
//!    the database dropped. A guard does the same when an assertion fails, prints the
//!    tail of every log and keeps the run's folder.
//!
//! Needs Postgres on loopback, `redis-server` and `python3` on the PATH, and PyPI the
//! first time; without them it says SKIPPED, and fails under `CI`.
//!
//! Longer than this project's ~400 lines per file, for a reason: nine phases, each
//! with the checks that say what it shows. The harness (`support::airflow_run::Run`:
//! Airflow's processes started, watched and stopped by pid, their logs, the check
//! that none is left behind) is shared with `interop_edge.rs`; what only this test
//! starts (the Redis broker, the Celery worker) is here.

use crate::support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use chrono::{DateTime, FixedOffset, Utc};
use overseer::config::duration;
use overseer_testkit::TestDb;
use sea_orm::DbBackend;
use serde_json::Value;
use support::airflow::{CLI_DEADLINE, START_DEADLINE, STOP_GRACE};
use support::airflow_run::{Run, SCHEDULE_DEADLINE, Setup, get, get_json, try_get_json};
use support::procs::{Timings, group_gone_within, read, signal, signal_group, wait_deadline};

/// The DAG folder's first file: a DAG that never runs.
const DAG: &str = include_str!("interop/dags/overseer_interop.py");
/// The DAG folder's second file: one quick task, run when the test triggers it.
const FLOW_DAG: &str = include_str!("interop/dags/overseer_interop_flow.py");
/// The triggered DAG, its run and its one task.
const FLOW_DAG_ID: &str = "overseer_interop_flow";
const FLOW_RUN_ID: &str = "overseer_interop_stuck_then_flowing";
const FLOW_TASK_ID: &str = "say_ok";

/// Overseer's supervisor, quick enough that a dead broker shows within seconds.
const POLL_INTERVAL: Duration = Duration::from_secs(2);
const POLL_TIMEOUT: Duration = Duration::from_secs(1);
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(1000);
const REFRESH_INTERVAL: Duration = Duration::from_millis(500);
/// The Celery executor's `max_queued_age`, given through `OVERSEER_EXECUTORS`: short, so
/// that a task instance with no worker to run it makes the executor unhealthy soon.
const MAX_QUEUED_AGE: Duration = Duration::from_secs(10);
/// How its reason spells the limit (`duration::age`).
const MAX_QUEUED_AGE_SHOWN: &str = "10s";

/// How often Airflow's scheduler, triggerer and DAG processor heartbeat: Airflow's defaults
/// (`[scheduler] scheduler_heartbeat_sec`, `[triggerer] job_heartbeat_sec`,
/// `[scheduler] job_heartbeat_sec`, all 5 s), which this test leaves alone.
const AIRFLOW_HEARTBEAT: Duration = Duration::from_secs(5);
/// How far apart the two reports' heartbeats may be: Overseer's report is up to one
/// refresh old, so it may hold the heartbeat before the one Airflow just read; and
/// Airflow's loops heartbeat when they get round to it, not on the dot (gaps of 6 s are
/// usual on 2 busy cores), hence one more second.
const HEARTBEAT_TOLERANCE: Duration = Duration::from_millis(
    AIRFLOW_HEARTBEAT.as_millis() as u64 + REFRESH_INTERVAL.as_millis() as u64 + 1000,
);
/// How long a verdict may take to reach Overseer's report: the next poll, its timeout,
/// the aggregator's write, the report's refresh, plus 2 s of slack for a debug build on
/// a 2-core machine next to four busy Airflow processes.
const VERDICT_DEADLINE: Duration = Duration::from_millis(
    (POLL_INTERVAL.as_millis()
        + POLL_TIMEOUT.as_millis()
        + HEARTBEAT_INTERVAL.as_millis()
        + REFRESH_INTERVAL.as_millis()
        + 2000) as u64,
);
/// How long the broker stays down while both endpoints are watched (the design measured
/// Airflow over 40 s; this is long enough to outlast several of Overseer's polls and
/// several of Airflow's heartbeats).
const BROKER_DOWN_FOR: Duration = Duration::from_secs(15);

/// A cold `airflow celery worker` starting, taking the task and running it to `success`
/// (a fresh interpreter for the task too) on 2 busy cores.
const RUN_DEADLINE: Duration = Duration::from_secs(240);

/// Every process this test starts carries `INTEROP_AIRFLOW_RUN=<run id>` in its
/// environment, and so do their children: how strays are found at the end. (Not
/// `OVERSEER_*`: Overseer would take it for configuration and refuse to start.)
const MARKER_VAR: &str = "INTEROP_AIRFLOW_RUN";

/// The Celery worker's name among the run's processes (and its log's).
const WORKER: &str = "celery-worker";

#[tokio::test]
async fn overseer_beside_a_real_airflow_reports_what_airflow_cannot() {
    let mut timings = Timings::new("interop");

    // 1. install
    let Some(venv) = airflow_venv(&mut timings) else {
        return;
    };
    if let Err(e) = Command::new("redis-server").arg("--version").output() {
        overseer_testkit::unavailable::<()>("redis-server", e);
        return;
    }
    // Airflow's schema, as `airflow db migrate` leaves it: copied from the
    // template database the first Airflow test on this server made.
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
            name: "interop",
            marker_var: MARKER_VAR,
            executor: "CeleryExecutor",
            dags: &[
                ("overseer_interop.py", DAG),
                ("overseer_interop_flow.py", FLOW_DAG),
            ],
        },
        venv,
        &db.url,
    );
    let broker_port = run.redis_broker();
    configure(&mut run);
    eprintln!("interop: run folder {}", run.dir().display());

    // 2. migrate
    migrate(&mut run, &db, &mut timings).await;

    // 3. start-up
    let started = Instant::now();
    let (urls, executor) = start_up(&mut run, broker_port);
    timings.add("start-up (until healthy)", started.elapsed());

    // 4. agree
    let started = Instant::now();
    let last_scheduler_heartbeat = reports_agree(&run, &urls, &executor);
    timings.add("reports agree", started.elapsed());

    // 5. work stuck
    let started = Instant::now();
    let queued_to_unhealthy = work_stuck(&mut run, &db, &urls).await;
    timings.add("work stuck (trigger until unhealthy)", started.elapsed());

    // 6. work flows
    let started = Instant::now();
    work_flows(&mut run, &db, &urls).await;
    timings.add("work flows (worker until healthy)", started.elapsed());

    // 7. broker down
    let started = Instant::now();
    let killed = broker_down(&mut run, &urls);
    broker_stays_down(&urls, killed);
    broker_back(&mut run, &urls);
    timings.add("broker down and back", started.elapsed());

    // 8. Airflow unharmed
    let started = Instant::now();
    scheduler_heartbeats_again(&mut run, &urls, last_scheduler_heartbeat);
    airflow_rows_take_the_columns_default(&db).await;
    dag_processor_stored_the_dag(&db).await;
    the_idle_dag_never_ran(&db).await;
    jobs_check_finds_the_scheduler(&mut run);
    timings.add("Airflow unharmed", started.elapsed());

    // 9. stop
    let started = Instant::now();
    stop(&mut run, &db).await;
    timings.add("stop", started.elapsed());
    drop(run);
    drop(db);
    eprintln!("interop: phase timings\n{}", timings.render());
    eprintln!(
        "interop: time from a task becoming stuck (its queued_dttm) to unhealthy: {queued_to_unhealthy:.1?}, with max_queued_age {}",
        MAX_QUEUED_AGE_SHOWN
    );
}

/// Where the two health reports are read.
struct Urls {
    /// Airflow's `/api/v2/monitor/health`.
    airflow: String,
    /// Overseer's `/api/v2/monitor/health`.
    overseer: String,
    /// The broker, as Overseer names the Celery executor's instance.
    broker: String,
    /// The broker's loopback port.
    broker_port: u16,
    /// Overseer's `/metrics`.
    metrics: String,
}

/// `overseer migrate` on a database Airflow migrated: Overseer's four columns
/// land in Airflow's `job` table.
async fn migrate(run: &mut Run, db: &TestDb, timings: &mut Timings) {
    let started = Instant::now();
    explain_the_queued_query(db).await;
    timings.add("EXPLAIN the queued-task query", started.elapsed());
    let started = Instant::now();
    run.migrate_overseer();
    timings.add("overseer migrate", started.elapsed());
    let columns = db.column_names("job").await;
    for column in [
        "executor_health",
        "executor_health_reason",
        "executor_instance",
        "executor_health_checked_at",
    ] {
        assert!(
            columns.iter().any(|c| c == column),
            "{column} is not in Airflow's job table: {columns:?}"
        );
    }
}

/// `EXPLAIN` of the one statement Overseer reads `task_instance` with, on Airflow's real
/// schema, in both forms: alone, and joined to each DAG's bundle's team (for
/// executors with teams). Just migrated, the table is empty: the plans are printed for
/// the record, and only that the statements run is asserted (an empty table's plan
/// says little about a busy one's).
async fn explain_the_queued_query(db: &TestDb) {
    for by_team in [false, true] {
        let sql = overseer_core::airflow::queued::query(
            DbBackend::Postgres,
            &[MAX_QUEUED_AGE],
            Utc::now(),
            by_team,
        );
        let plan = db.strings(&format!("EXPLAIN {sql}")).await;
        assert!(!plan.is_empty(), "EXPLAIN gave no plan for {sql}");
        eprintln!(
            "interop: Overseer's queued-task query on Airflow's schema:\n  {sql}\ninterop: its plan (EXPLAIN, empty table):\n  {}",
            plan.join("\n  ")
        );
    }
}

/// The broker, Airflow's four processes and `overseer serve`, until Airflow says its
/// three components are healthy and Overseer has a verdict on the executor (which
/// it answers, with the URLs of both reports).
fn start_up(run: &mut Run, broker_port: u16) -> (Urls, Value) {
    start_broker(run, broker_port);
    run.start("scheduler", run.airflow(&["scheduler"]));
    run.start(
        "triggerer",
        run.airflow(&["triggerer", "--skip-serve-logs"]),
    );
    run.start("dag-processor", run.airflow(&["dag-processor"]));
    run.start_api_server();
    let overseer_addr = run.start_overseer();
    let urls = Urls {
        airflow: run.api_url("/api/v2/monitor/health"),
        overseer: format!("http://{overseer_addr}/api/v2/monitor/health"),
        broker: format!("redis://127.0.0.1:{broker_port}/0"),
        broker_port,
        metrics: format!("http://{overseer_addr}/metrics"),
    };
    let airflow = run.wait_until(
        "Airflow's health says scheduler, triggerer and dag_processor are healthy",
        START_DEADLINE,
        || try_get_json(&urls.airflow).filter(all_healthy),
    );
    eprintln!("interop: Airflow healthy: {airflow}");
    let executor = run.wait_until(
        "Overseer's executor entry has a verdict",
        START_DEADLINE,
        || {
            try_get_json(&urls.overseer)
                .and_then(|o| celery_instance(&o))
                .filter(|i| i["health"] != "unknown")
        },
    );
    // Overseer's report is up to one refresh older than Airflow's answer: wait until it,
    // too, has seen all three components' rows before comparing the two.
    run.wait_until(
        "Overseer's report shows Airflow's components healthy",
        Duration::from_secs(30),
        || try_get_json(&urls.overseer).filter(all_healthy),
    );
    (urls, executor)
}

/// Airflow's health JSON and Overseer's agree on every field Airflow has, until each
/// component's heartbeat has read identically in both; Overseer adds a healthy
/// `executor` entry whose instance is the broker. Answers the scheduler's latest
/// heartbeat.
fn reports_agree(run: &Run, urls: &Urls, executor: &Value) -> DateTime<FixedOffset> {
    // The health endpoint is public (no credentials sent); Airflow's other routes are not.
    let (status, _) = get(&urls.airflow);
    assert_eq!(
        status, 200,
        "Airflow's health endpoint needs no credentials"
    );
    let (dags_status, _) = get(&run.api_url("/api/v2/dags"));
    assert_eq!(dags_status, 401, "Airflow's other routes want credentials");
    assert_eq!(executor["health"], "healthy", "{executor}");
    let mut seen_equal = BTreeSet::new();
    let mut last_scheduler_heartbeat = None;
    for sample in 0..15 {
        let overseer = get_json(&urls.overseer);
        let airflow = get_json(&urls.airflow);
        let problems = disagreements(&airflow, &overseer, &mut seen_equal);
        assert!(
            problems.is_empty(),
            "the reports disagree:\n{}\nAirflow:  {airflow}\nOverseer: {overseer}",
            problems.join("\n")
        );
        assert!(
            airflow.get("executor").is_none(),
            "Airflow 3.3.2 has no executor entry: {airflow}"
        );
        one_healthy_broker_instance(&overseer, &urls.broker);
        last_scheduler_heartbeat = Some(heartbeat(&airflow, "scheduler"));
        if seen_equal.len() == 3 {
            eprintln!("interop: reports agree; every heartbeat seen identical by sample {sample}");
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert_eq!(
        seen_equal.len(),
        3,
        "each component's heartbeat should read identically in both reports at least once (Overseer reads the same row); only {seen_equal:?} did"
    );
    last_scheduler_heartbeat.expect("a scheduler heartbeat was read")
}

/// Overseer's `executor` entry: healthy, with one instance, the Celery executor on
/// `broker`, healthy and without a reason.
fn one_healthy_broker_instance(overseer: &Value, broker: &str) {
    assert_eq!(overseer["executor"]["status"], "healthy", "{overseer}");
    let instances = overseer["executor"]["instances"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(instances.len(), 1, "one executor instance: {overseer}");
    let instance = &instances[0];
    assert_eq!(instance["executor"], "CeleryExecutor", "{instance}");
    assert_eq!(
        instance["instance"], broker,
        "the instance is the broker: {instance}"
    );
    assert_eq!(instance["health"], "healthy", "{instance}");
    assert!(instance["reason"].is_null(), "{instance}");
}

/// Triggers the flow DAG while no Celery worker runs: its task instance sits in `queued`
/// and, once queued longer than [`MAX_QUEUED_AGE`], Overseer says the executor is
/// unhealthy and why, counts it in `detail.queued_tasks` and `/metrics`, while Airflow's
/// own endpoint says all is well. Answers the time from the task instance's
/// `queued_dttm` to the first report seen saying so.
async fn work_stuck(run: &mut Run, db: &TestDb, urls: &Urls) -> Duration {
    assert!(
        !run.procs
            .started
            .iter()
            .any(|p| p.name == WORKER && !p.reaped),
        "no Celery worker runs yet"
    );
    run.wait_for_rows(
        db,
        "the DAG processor stored the flow DAG, unpaused",
        SCHEDULE_DEADLINE,
        &format!("SELECT is_paused::text FROM dag WHERE dag_id = '{FLOW_DAG_ID}'"),
        |rows| rows == ["false"],
    )
    .await;
    let trigger = run.finish(
        run.airflow(&["dags", "trigger", FLOW_DAG_ID, "--run-id", FLOW_RUN_ID]),
        "airflow-dags-trigger",
        CLI_DEADLINE,
    );
    assert!(
        trigger.status.success(),
        "airflow dags trigger failed:\n{}",
        trigger.log
    );
    let queued = wait_for_task(
        run,
        db,
        "the scheduler queued the task instance",
        SCHEDULE_DEADLINE,
        |state| !matches!(state, "" | "scheduled"),
    )
    .await;
    assert_eq!(queued.state, "queued", "with no worker, the task waits");
    let queued_dttm = queued
        .queued_dttm
        .expect("a queued task instance has queued_dttm");
    eprintln!("interop: task instance {FLOW_DAG_ID}.{FLOW_TASK_ID} queued at {queued_dttm}");

    // Until the limit, the task instance is counted and the executor still healthy
    // (printed, not asserted: when the first report comes depends on the polls).
    let mut counted_while_healthy: Option<Value> = None;
    let report = run.wait_until(
        "Overseer says the executor is unhealthy: a task instance queued too long",
        // The queued-task reader's next read, then the executor's next poll.
        MAX_QUEUED_AGE + 2 * POLL_INTERVAL + VERDICT_DEADLINE,
        || {
            let report = try_get_json(&urls.overseer)?;
            let instance = celery_instance(&report)?;
            let count = instance["detail"]["queued_tasks"]["count"].as_u64();
            if instance["health"] == "healthy" && count >= Some(1) {
                counted_while_healthy.get_or_insert(instance.clone());
            }
            let reason = instance["reason"].as_str().unwrap_or_default();
            (instance["health"] == "unhealthy" && names_overdue(reason) && count >= Some(1))
                .then_some(report)
        },
    );
    let seen_at = Utc::now();
    let to_unhealthy = (seen_at - queued_dttm).to_std().unwrap_or_default();
    let instance = celery_instance(&report).expect("the Celery instance is listed");
    match &counted_while_healthy {
        Some(young) => eprintln!(
            "interop: before the limit, Overseer counted it and still said healthy: {}",
            young["detail"]["queued_tasks"]
        ),
        None => eprintln!("interop: no report counted it before the limit"),
    }
    eprintln!(
        "interop: Overseer said unhealthy {to_unhealthy:.1?} after queued_dttm (max_queued_age {MAX_QUEUED_AGE_SHOWN}): {instance}"
    );

    assert_eq!(report["executor"]["status"], "unhealthy", "{report}");
    let reason = instance["reason"].as_str().unwrap_or_default();
    assert!(
        !reason.contains('\n') && names_overdue(reason),
        "the reason says a task instance was queued longer than {MAX_QUEUED_AGE_SHOWN} on queue default: {reason:?}"
    );
    let tasks = &instance["detail"]["queued_tasks"];
    assert!(tasks["count"].as_u64() >= Some(1), "{tasks}");
    assert!(
        tasks["oldest_seconds"].as_u64() >= Some(MAX_QUEUED_AGE.as_secs()),
        "the oldest was queued at least max_queued_age ago: {tasks}"
    );
    let default_queue = tasks["queues"]
        .as_array()
        .and_then(|queues| queues.iter().find(|q| q["queue"] == "default"))
        .unwrap_or_else(|| panic!("queue default in queued_tasks: {tasks}"));
    assert!(
        default_queue["count"].as_u64() >= Some(1) && default_queue["overdue"].as_u64() >= Some(1),
        "{default_queue}"
    );
    let airflow = get_json(&urls.airflow);
    assert!(
        all_healthy(&airflow) && airflow.get("executor").is_none(),
        "Airflow's own endpoint says all is well with work stuck (the gap): {airflow}"
    );
    let still = wait_for_task(run, db, "the task instance", CLI_DEADLINE, |_| true).await;
    assert_eq!(
        still.state, "queued",
        "no worker runs: the task still waits"
    );

    let value = run.wait_until(
        "/metrics: overseer_queued_tasks counts the queued task instance",
        VERDICT_DEADLINE,
        || queued_gauge(&get(&urls.metrics).1).filter(|v| *v >= 1.0),
    );
    eprintln!("interop: /metrics: overseer_queued_tasks on queue default = {value}");
    to_unhealthy
}

/// A Celery worker starts: the task instance runs to `success` and Overseer says the
/// executor is healthy again, with nothing queued. The worker (its whole process group)
/// is stopped afterwards, so that the broker-down phase finds only Airflow's own
/// processes talking to the broker.
async fn work_flows(run: &mut Run, db: &TestDb, urls: &Urls) {
    let starting = Instant::now();
    start_worker(run);
    eprintln!(
        "interop: the Celery worker is ready after {:.1?}",
        starting.elapsed()
    );
    let started = Instant::now();
    let ran = wait_for_task(
        run,
        db,
        "the worker ran the task instance",
        RUN_DEADLINE,
        |state| {
            matches!(
                state,
                "success" | "failed" | "upstream_failed" | "skipped" | "removed"
            )
        },
    )
    .await;
    assert_eq!(ran.state, "success", "the task ran and succeeded");
    eprintln!(
        "interop: the task instance reached success {:.1?} after the worker was ready",
        started.elapsed()
    );
    let reached_success = Instant::now();
    let report = run.wait_until(
        "Overseer says the executor is healthy again, nothing queued",
        POLL_INTERVAL + VERDICT_DEADLINE,
        || {
            try_get_json(&urls.overseer).filter(|o| {
                celery_instance(o).is_some_and(|i| {
                    i["health"] == "healthy" && i["detail"]["queued_tasks"]["count"] == 0
                })
            })
        },
    );
    eprintln!(
        "interop: Overseer said healthy {:.1?} after the task instance's success: {}",
        reached_success.elapsed(),
        report["executor"]
    );
    assert_eq!(report["executor"]["status"], "healthy", "{report}");
    let instance = celery_instance(&report).expect("the Celery instance is listed");
    assert!(instance["reason"].is_null(), "{instance}");
    assert_eq!(instance["instance"], urls.broker.as_str(), "{instance}");
    run.wait_until(
        "/metrics: overseer_queued_tasks back to 0",
        VERDICT_DEADLINE,
        || queued_gauge(&get(&urls.metrics).1).filter(|v| *v == 0.0),
    );
    let status = stop_worker(run);
    eprintln!("interop: the Celery worker stopped ({status}), its process group empty");
}

/// The task instances of the DAG that never runs: none, and no DAG run either.
async fn the_idle_dag_never_ran(db: &TestDb) {
    for table in ["dag_run", "task_instance"] {
        let rows = db
            .strings(&format!(
                "SELECT COUNT(*)::text FROM {table} WHERE dag_id = 'overseer_interop'"
            ))
            .await;
        assert_eq!(rows, ["0"], "the DAG overseer_interop never ran: {table}");
    }
}

/// The triggered task instance, as `task_instance` holds it.
struct TaskInstance {
    /// Its state; empty while it has none.
    state: String,
    queued_dttm: Option<DateTime<Utc>>,
}

/// Reads the triggered task instance until `accept` takes its state.
async fn wait_for_task(
    run: &mut Run,
    db: &TestDb,
    what: &str,
    deadline: Duration,
    accept: impl Fn(&str) -> bool,
) -> TaskInstance {
    let sql = format!(
        "SELECT COALESCE(state, '') || ' ' || COALESCE(EXTRACT(EPOCH FROM queued_dttm)::text, '') \
         FROM task_instance WHERE dag_id = '{FLOW_DAG_ID}' AND run_id = '{FLOW_RUN_ID}' AND task_id = '{FLOW_TASK_ID}'"
    );
    let rows = run
        .wait_for_rows(db, what, deadline, &sql, |rows| {
            rows.first()
                .is_some_and(|row| accept(row.split(' ').next().unwrap_or_default()))
        })
        .await;
    let (state, epoch) = rows[0].split_once(' ').unwrap_or((&rows[0], ""));
    let queued_dttm = epoch.parse::<f64>().ok().map(|seconds| {
        DateTime::from_timestamp_micros((seconds * 1e6).round() as i64)
            .unwrap_or_else(|| panic!("queued_dttm {epoch}"))
    });
    TaskInstance {
        state: state.to_owned(),
        queued_dttm,
    }
}

/// Whether one of a reason's findings says task instances were queued longer
/// than [`MAX_QUEUED_AGE`] on queue `default` (`task instances queued longer
/// than 10s on queue default`): the count and the oldest's age are in the
/// detail, not in the reason, which holds still while the fault lasts.
fn names_overdue(reason: &str) -> bool {
    let finding =
        format!("task instances queued longer than {MAX_QUEUED_AGE_SHOWN} on queue default");
    reason.split("; ").any(|f| f == finding)
}

/// The `overseer_queued_tasks` sample of the Celery executor's queue `default`.
fn queued_gauge(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|line| line.starts_with("overseer_queued_tasks{"))
        .filter(|line| {
            line.contains("executor=\"CeleryExecutor\"") && line.contains("queue=\"default\"")
        })
        .find_map(|line| line.rsplit_once(' ')?.1.parse().ok())
}

/// Kills the broker: within a poll interval plus the timeout (plus the write and the
/// refresh) Overseer says `unhealthy`, with a plain reason naming the broker, while
/// Airflow's own endpoint still says all is well. Answers when the broker died.
fn broker_down(run: &mut Run, urls: &Urls) -> Instant {
    kill_broker(run, urls.broker_port);
    let killed = Instant::now();
    let down = run.wait_until(
        "Overseer says the executor is unhealthy",
        VERDICT_DEADLINE,
        || try_get_json(&urls.overseer).filter(|o| o["executor"]["status"] == "unhealthy"),
    );
    let noticed_after = killed.elapsed();
    let airflow = get_json(&urls.airflow);
    eprintln!(
        "interop: broker killed; Overseer said unhealthy after {noticed_after:.1?}: {}",
        down["executor"]
    );
    let instance = celery_instance(&down).expect("the Celery instance is still listed");
    assert_eq!(instance["health"], "unhealthy", "{instance}");
    assert_eq!(down["executor"]["detailed_status"], "down", "{down}");
    let reason = instance["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&urls.broker) && reason.contains("refused") && !reason.contains('\n'),
        "a plain one-line reason naming the broker: {reason:?}"
    );
    assert!(
        all_healthy(&airflow),
        "Airflow's own endpoint still says all is well (the gap): {airflow}"
    );
    assert!(airflow.get("executor").is_none(), "{airflow}");
    killed
}

/// While the broker stays down ([`BROKER_DOWN_FOR`]), Overseer keeps saying so and
/// Airflow keeps saying nothing is wrong, in every sample.
fn broker_stays_down(urls: &Urls, killed: Instant) {
    let until = Instant::now() + BROKER_DOWN_FOR;
    let mut samples = 0;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_secs(2));
        let overseer = get_json(&urls.overseer);
        let airflow = get_json(&urls.airflow);
        assert_eq!(
            overseer["executor"]["status"], "unhealthy",
            "the broker is still down: {overseer}"
        );
        assert!(
            all_healthy(&airflow),
            "Airflow still says all is well with the broker down: {airflow}"
        );
        samples += 1;
    }
    eprintln!(
        "interop: broker down for {:.0?}: {samples} samples, Overseer unhealthy and Airflow healthy in each",
        killed.elapsed()
    );
}

/// The broker back on the same port: Overseer says `healthy` again, same instance.
fn broker_back(run: &mut Run, urls: &Urls) {
    start_broker(run, urls.broker_port);
    let restarted = Instant::now();
    let up = run.wait_until(
        "Overseer says the executor is healthy again",
        VERDICT_DEADLINE,
        || try_get_json(&urls.overseer).filter(|o| o["executor"]["status"] == "healthy"),
    );
    eprintln!(
        "interop: broker back; Overseer said healthy after {:.1?}",
        restarted.elapsed()
    );
    let instance = celery_instance(&up).expect("the Celery instance is listed");
    assert_eq!(instance["health"], "healthy", "{instance}");
    assert!(instance["reason"].is_null(), "{instance}");
    assert_eq!(instance["instance"], urls.broker.as_str(), "{instance}");
}

/// With Overseer's columns in its table, Airflow's scheduler heartbeats after
/// `before`, and Airflow still says all is healthy.
fn scheduler_heartbeats_again(run: &mut Run, urls: &Urls, before: DateTime<FixedOffset>) {
    let airflow = run.wait_until(
        "Airflow's scheduler heartbeats again",
        Duration::from_secs(60),
        || try_get_json(&urls.airflow).filter(|a| heartbeat(a, "scheduler") > before),
    );
    assert!(all_healthy(&airflow), "{airflow}");
}

/// Airflow's own rows, written after Overseer's columns were added, take the
/// columns' default.
async fn airflow_rows_take_the_columns_default(db: &TestDb) {
    let rows = db
        .strings(
            "SELECT job_type || ' ' || state || ' ' || executor_health FROM job \
             WHERE end_date IS NULL AND job_type <> 'ExecutorJob' ORDER BY job_type",
        )
        .await;
    assert_eq!(
        rows,
        [
            "DagProcessorJob running unknown",
            "SchedulerJob running unknown",
            "TriggererJob running unknown"
        ],
        "Airflow's own rows, written after Overseer's columns were added, take the columns' default"
    );
}

/// The DAG processor parsed the test's DAG and wrote it (it does so at start-up).
async fn dag_processor_stored_the_dag(db: &TestDb) {
    let until = Instant::now() + Duration::from_secs(60);
    while db
        .strings("SELECT dag_id FROM dag WHERE dag_id = 'overseer_interop'")
        .await
        .is_empty()
    {
        assert!(
            Instant::now() < until,
            "Airflow's DAG processor never stored the test's DAG"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `airflow jobs check --job-type SchedulerJob` passes, and `overseer jobs check`
/// says the same.
fn jobs_check_finds_the_scheduler(run: &mut Run) {
    let args = ["jobs", "check", "--job-type", "SchedulerJob"];
    for (program, command) in [
        ("airflow", run.airflow(&args)),
        ("overseer", run.overseer(&args)),
    ] {
        let check = run.finish(command, &format!("{program}-jobs-check"), CLI_DEADLINE);
        assert!(
            check.status.success(),
            "{program} jobs check --job-type SchedulerJob: {}\n{}",
            check.status,
            check.log
        );
        assert!(check.log.contains("Found one alive job."), "{}", check.log);
    }
}

/// SIGTERM to `overseer serve`, which ends its row; then every other process, and
/// none is left behind.
async fn stop(run: &mut Run, db: &TestDb) {
    let status = stop_overseer(run);
    assert!(
        status.success(),
        "overseer serve ends cleanly on SIGTERM: {status}"
    );
    let executor_rows = db
        .strings("SELECT state || ' ' || (end_date IS NOT NULL)::text FROM job WHERE job_type = 'ExecutorJob'")
        .await;
    assert_eq!(executor_rows, ["success true"], "Overseer ended its row");
    let strays = run.procs.stop_all(STOP_GRACE);
    assert!(strays.is_empty(), "processes left behind: {strays:?}");
}

/// The cached venv, made (or waited for) by the testkit's venv builder; `None` when
/// it cannot be made here (skipped, or a failure under CI).
fn airflow_venv(timings: &mut Timings) -> Option<PathBuf> {
    let started = Instant::now();
    let built = support::airflow::venv();
    timings.add("install (cached after the first run)", started.elapsed());
    let venv = built?;
    let seconds = std::fs::read_to_string(venv.join(".install-seconds")).unwrap_or_default();
    eprintln!(
        "interop: Airflow venv {} (its install took {}s; this run waited {:.1?})",
        venv.display(),
        seconds.trim(),
        started.elapsed()
    );
    Some(venv)
}

/// Overseer's supervisor, quick, with the Celery executor's [`MAX_QUEUED_AGE`] beside
/// Airflow's variables (which give this executor its broker: [`Run::redis_broker`]).
fn configure(run: &mut Run) {
    for (key, value) in [
        ("OVERSEER_SUPERVISOR__POLL_INTERVAL", POLL_INTERVAL),
        ("OVERSEER_SUPERVISOR__POLL_TIMEOUT", POLL_TIMEOUT),
        (
            "OVERSEER_SUPERVISOR__HEARTBEAT_INTERVAL",
            HEARTBEAT_INTERVAL,
        ),
        ("OVERSEER_SUPERVISOR__REFRESH_INTERVAL", REFRESH_INTERVAL),
    ] {
        run.overseer_env(key, duration::format(value));
    }
    run.overseer_env(
        "OVERSEER_EXECUTORS",
        format!(
            "[{{name = \"CeleryExecutor\", max_queued_age = \"{}\"}}]",
            duration::format(MAX_QUEUED_AGE)
        ),
    );
}

/// The test's own Redis on `port`, started (again) and answering.
fn start_broker(run: &mut Run, port: u16) {
    // A restart logs to a file of its own, beside the first broker's.
    let starts = run
        .procs
        .started
        .iter()
        .filter(|p| p.name.starts_with("redis"))
        .count();
    let name = if starts == 0 {
        "redis".to_owned()
    } else {
        format!("redis-{}", starts + 1)
    };
    let mut command = run.command("redis-server");
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(run.dir());
    run.start(&name, command);
    run.wait_until(
        "the test's Redis accepts connections",
        Duration::from_secs(30),
        || std::net::TcpStream::connect(("127.0.0.1", port)).ok(),
    );
}

/// Kills the test's Redis on `port` (SIGKILL: the broker dies, it does not shut down)
/// and waits until its port is closed.
fn kill_broker(run: &mut Run, port: u16) {
    let process = run
        .running(|name| name.starts_with("redis"))
        .expect("the broker runs");
    signal(process.child.id(), "KILL");
    let _ = process.child.wait();
    process.reaped = true;
    run.wait_until(
        "the broker's port is closed",
        Duration::from_secs(10),
        || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .is_err()
                .then_some(())
        },
    );
}

/// Starts `airflow celery worker` (one pool process, queue `default`, no log server),
/// in a process group of its own, and waits until Celery says it is ready.
fn start_worker(run: &mut Run) {
    let command = run.airflow(&support::airflow::celery_worker_args("overseer-interop@%h"));
    run.start_group(WORKER, command);
    let log = run.log_path(WORKER);
    run.wait_until("the Celery worker is ready", RUN_DEADLINE, || {
        read(&log).contains(" ready.").then_some(())
    });
}

/// SIGTERM to the Celery worker's process group (SIGKILL after the grace period),
/// until none of the group is left; the worker's exit status.
fn stop_worker(run: &mut Run) -> ExitStatus {
    run.procs.note_ours();
    let process = run
        .running(|name| name == WORKER)
        .expect("the Celery worker runs");
    let pgid = process.child.id();
    signal_group(pgid, "TERM");
    let status = wait_deadline(&mut process.child, STOP_GRACE);
    process.reaped = true;
    let mut gone = group_gone_within(pgid, STOP_GRACE);
    if status.is_none() || !gone {
        signal_group(pgid, "KILL");
        gone = group_gone_within(pgid, Duration::from_secs(5));
    }
    assert!(gone, "the Celery worker's process group outlived SIGKILL");
    status.unwrap_or_else(|| panic!("the Celery worker ignored SIGTERM for {STOP_GRACE:?}"))
}

/// SIGTERM to `overseer serve`, and its exit status.
fn stop_overseer(run: &mut Run) -> ExitStatus {
    let process = run
        .running(|name| name == "overseer")
        .expect("overseer runs");
    signal(process.child.id(), "TERM");
    let status = wait_deadline(&mut process.child, STOP_GRACE);
    let status = status.unwrap_or_else(|| {
        signal(process.child.id(), "KILL");
        process.child.wait().expect("overseer is reaped")
    });
    process.reaped = true;
    status
}

/// Airflow's three components, as the health JSON names them.
const COMPONENTS: [&str; 3] = ["scheduler", "triggerer", "dag_processor"];

/// The metadatabase and all three components healthy.
fn all_healthy(report: &Value) -> bool {
    report["metadatabase"]["status"] == "healthy"
        && COMPONENTS.iter().all(|c| report[c]["status"] == "healthy")
}

/// A component's latest heartbeat in a report.
fn heartbeat(report: &Value, component: &str) -> DateTime<FixedOffset> {
    let text = report[component][format!("latest_{component}_heartbeat")].as_str();
    text.and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .unwrap_or_else(|| panic!("{component} has no heartbeat: {report}"))
}

/// Overseer's Celery executor instance, if listed.
fn celery_instance(report: &Value) -> Option<Value> {
    support::celery(report).cloned()
}

/// Where Overseer's report differs from Airflow's on a field Airflow has. Heartbeats may
/// differ by [`HEARTBEAT_TOLERANCE`] (the two were read at different moments); the
/// components whose heartbeats were identical (same text) go into `seen_equal`.
fn disagreements(
    airflow: &Value,
    overseer: &Value,
    seen_equal: &mut BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(components) = airflow.as_object() else {
        return vec![format!("Airflow's report is not an object: {airflow}")];
    };
    for (component, fields) in components {
        let Some(fields) = fields.as_object() else {
            problems.push(format!("Airflow's {component} is not an object"));
            continue;
        };
        for (field, theirs) in fields {
            let Some(ours) = overseer.get(component).and_then(|c| c.get(field)) else {
                problems.push(format!(
                    "{component}.{field}: missing from Overseer's report"
                ));
                continue;
            };
            if !field.ends_with("_heartbeat") {
                if theirs != ours {
                    problems.push(format!(
                        "{component}.{field}: Airflow {theirs}, Overseer {ours}"
                    ));
                }
                continue;
            }
            let parse = |v: &Value| {
                v.as_str()
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            };
            match (parse(theirs), parse(ours)) {
                (Some(a), Some(o)) => {
                    let apart = (a - o).abs().to_std().unwrap_or_default();
                    if apart > HEARTBEAT_TOLERANCE {
                        problems.push(format!(
                            "{component}.{field}: Airflow {theirs}, Overseer {ours}: {apart:?} apart, more than {HEARTBEAT_TOLERANCE:?}"
                        ));
                    } else if theirs == ours {
                        seen_equal.insert(component.clone());
                    } else if a == o {
                        problems.push(format!("{component}.{field}: the same instant written differently: Airflow {theirs}, Overseer {ours}"));
                    }
                }
                _ => problems.push(format!(
                    "{component}.{field}: Airflow {theirs}, Overseer {ours}: not both timestamps"
                )),
            }
        }
    }
    problems
}
