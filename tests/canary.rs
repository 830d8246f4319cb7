//! The canary (issue 36, item 1) beside a real Airflow 3.3.2: its scheduler,
//! DAG processor and api-server, a Redis broker of the test's own, and real
//! `airflow celery worker`s. The DAG folder holds the one line the plugin's
//! README gives (`from overseer_airflow.canary import dag`, a copy of the
//! plugin's package on the `PYTHONPATH`, where an installed plugin puts it), the canary runs every 20 s
//! (`AIRFLOW__OVERSEER__CANARY_EVERY`), and `overseer serve` reads Airflow's
//! own environment, with a 2 s poll and `canary_max_pickup = "30s"`. In order:
//!
//! 1. **work flows**: a worker on `default` runs the canary; the executor is
//!    `healthy`, `detail.canary` shows the DAG `scheduled` and the queue's
//!    pickup latency, and `/metrics` has `overseer_canary_pickup_seconds`.
//! 2. **nobody takes the queue**: that worker stopped, one consuming only
//!    queue `other` (heartbeating, consuming, answering): the executor turns
//!    `unhealthy` naming the cause, `queue default: work waiting, no worker
//!    consumes it` (the workers' queues asked by default) before the canary
//!    has waited `canary_max_pickup`, then `canary on queue default: no
//!    worker started it within 30s` beside it, with no other task waiting.
//! 3. **a worker that cannot run tasks**: the stuck canary taken by a worker
//!    on `default` whose `execution_api_server_url` points at a closed port
//!    (Airflow 3's workers report through the api-server's execution API): the
//!    canary fails, the reason says so. From phase 2's verdict to the end of
//!    this one, sampled every 500 ms, the executor never reads healthy.
//! 4. **recovered**: a good worker again; `healthy` once a canary succeeds.
//! 5. **paused**: `airflow dags pause overseer_canary`: `unknown`, saying so.
//! 6. **what a fault cost** (issue 36, item 3): the broker killed (the test's
//!    own Redis, by its pid), a DAG of three tasks triggered meanwhile: the
//!    scheduler cannot send them and fails them; the broker started again,
//!    the history's transition out of `unhealthy` counts the three, as the
//!    `task_instance` table holds them.
//! 7. **at capacity** (issue 36, item 2): `[core] parallelism = 2`, four tasks
//!    of two minutes triggered, a worker running one at a time: once both
//!    slots have been taken for `max_at_capacity` (20 s) with tasks waiting in
//!    `scheduled`, `unhealthy`, naming the slots; `detail.capacity` and
//!    `/metrics` count them.
//!
//! Phases 2 and 3 run with every core saturated by busy processes of the
//! test's own. Each phase's time is printed (the deadlines are only how long
//! to wait on a loaded 2-core machine). Needs the Airflow venv (PyPI the first
//! time), Postgres on loopback and `redis-server`; without them it says
//! SKIPPED, and fails under `CI`.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::airflow_run::{Run, Setup, first_executor, get, reason_of, try_get_json};
use support::procs::Timings;

/// The DAG folder's one file: the plugin's canary, as its README says to add it.
const CANARY_FILE: &str = "from overseer_airflow.canary import dag  # noqa: F401  (Airflow DAG)\n";
/// The capacity phase's DAG: four tasks that sleep, triggered once.
const CAPACITY_DAG: &str = "\
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

with DAG(dag_id=\"overseer_capacity\", schedule=None, catchup=False, is_paused_upon_creation=False):
    for n in range(4):
        BashOperator(task_id=f\"sleep_{n}\", bash_command=\"sleep 120\")
";
/// The fault phase's DAG: three tasks, no retries, triggered while the
/// broker is down.
const FAULT_DAG: &str = "\
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

with DAG(dag_id=\"overseer_fault\", schedule=None, catchup=False, is_paused_upon_creation=False):
    for n in range(3):
        BashOperator(task_id=f\"step_{n}\", bash_command=\"true\", retries=0)
";
/// Airflow's `[core] parallelism` here: two slots for the one scheduler.
const PARALLELISM: &str = "2";
/// Overseer's `max_at_capacity` here.
const MAX_AT_CAPACITY: &str = "20s";
/// How often the canary runs here (Airflow's `[overseer] canary_every`).
const CANARY_EVERY: &str = "20s";
/// Overseer's `canary_max_pickup` here.
const MAX_PICKUP: &str = "30s";
/// How long a phase may take on 2 busy cores: a cold worker, a canary period,
/// the scheduler's loop. A deadline, not a measurement.
const PHASE: Duration = Duration::from_secs(300);
const SAMPLE: Duration = Duration::from_millis(500);
const MARKER_VAR: &str = "CANARY_AIRFLOW_RUN";
/// The bound on the load generator's processes, should the test die first.
const LOADED_FOR: Duration = Duration::from_secs(900);

#[tokio::test]
async fn the_canary_proves_work_flows_through_each_queue() {
    let mut timings = Timings::new("canary");
    let Some((venv, db)) = support::airflow::venv_redis_and_db().await else {
        return;
    };
    let mut run = Run::new(
        Setup {
            name: "canary",
            marker_var: MARKER_VAR,
            executor: "CeleryExecutor",
            dags: &[
                ("overseer_canary.py", CANARY_FILE),
                ("overseer_capacity.py", CAPACITY_DAG),
                ("overseer_fault.py", FAULT_DAG),
            ],
        },
        venv,
        &db.url,
    );
    run.plugin_on_path();
    run.env("AIRFLOW__OVERSEER__CANARY_EVERY", CANARY_EVERY);
    run.env("AIRFLOW__CORE__PARALLELISM", PARALLELISM);
    let broker_port = run.redis_broker();
    run.overseer_env("OVERSEER_SUPERVISOR__POLL_INTERVAL", "2s");
    run.overseer_env(
        "OVERSEER_EXECUTORS",
        format!(
            "[{{name = \"CeleryExecutor\", canary_max_pickup = \"{MAX_PICKUP}\", \
             max_at_capacity = \"{MAX_AT_CAPACITY}\"}}]"
        ),
    );
    eprintln!("canary: run folder {}", run.dir().display());
    run.migrate_overseer();

    run.start("redis", run.redis_server(broker_port));
    run.start("scheduler", run.airflow(&["scheduler"]));
    run.start("dag-processor", run.airflow(&["dag-processor"]));
    run.start_api_server();
    let address = run.start_overseer();
    let health = format!("http://{address}/api/v2/monitor/health");
    let metrics = format!("http://{address}/metrics");

    // 1. work flows
    let started = Instant::now();
    run.start_celery_worker("good", "default", &[]);
    let flowing = run.wait_until(
        "a canary on queue default succeeded and Overseer shows its pickup",
        PHASE,
        || {
            let instance = first_executor(&health)?;
            let queue = canary_queue(&instance, "default")?;
            (instance["health"] == "healthy"
                && queue["state"] == "success"
                && queue["pickup_seconds"].is_number())
            .then_some(instance)
        },
    );
    let canary = &flowing["detail"]["canary"];
    assert_eq!(canary["dag_id"], "overseer_canary", "{canary}");
    assert_eq!(canary["dag"], "scheduled", "{canary}");
    eprintln!("canary: flowing: {canary}");
    let (status, text) = get(&metrics);
    assert_eq!(status, 200);
    let count = text
        .lines()
        .find(|l| {
            l.starts_with("overseer_canary_pickup_seconds_count{")
                && l.contains("queue=\"default\"")
                && l.contains("executor=\"CeleryExecutor\"")
        })
        .unwrap_or_else(|| panic!("no pickup histogram on /metrics:\n{text}"));
    let counted: f64 = count.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(counted >= 1.0, "{count}");
    timings.add("work flows (until a canary succeeded)", started.elapsed());

    // 2. nobody takes the queue
    let load = overseer_testkit::load::Saturation::start(LOADED_FOR);
    let started = Instant::now();
    run.stop_celery_worker("good");
    run.start_celery_worker("other", "other", &[]);
    // The cause, not the symptom: the queue nobody consumes (the workers'
    // queues asked by default), before the canary has waited 30 s.
    let nobody = "queue default: work waiting, no worker consumes it";
    let stuck = run.wait_until(
        "unhealthy, no worker consumes the canary's queue",
        PHASE,
        || first_executor(&health).filter(|i| reason_of(i).contains(nobody)),
    );
    assert_eq!(stuck["health"], "unhealthy", "{stuck}");
    eprintln!("canary: stuck: {}", reason_of(&stuck));
    // Then the canary's own finding beside it, once it waited its limit: the
    // next phase starts from a canary overdue, as it did when only the
    // canary could tell.
    let pickup = format!("canary on queue default: no worker started it within {MAX_PICKUP}");
    let overdue = run.wait_until("the canary overdue too", PHASE, || {
        first_executor(&health).filter(|i| reason_of(i).contains(&pickup))
    });
    assert!(reason_of(&overdue).contains(nobody), "{overdue}");
    timings.add(
        "nobody takes the queue (until unhealthy)",
        started.elapsed(),
    );

    // 3. a worker that cannot run tasks; sampled from here on.
    let started = Instant::now();
    run.stop_celery_worker("other");
    let closed = overseer_testkit::throwaway::free_port();
    let unreachable = format!("http://127.0.0.1:{closed}/execution/");
    run.start_celery_worker(
        "broken",
        "default",
        &[("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", &unreachable)],
    );
    let mut seen = Vec::new();
    let until = Instant::now() + PHASE;
    let failed = loop {
        let instance = first_executor(&health);
        if let Some(instance) = &instance {
            assert_ne!(
                instance["health"], "healthy",
                "read healthy while no worker could run the canary: {instance}"
            );
            let reason = reason_of(instance);
            if seen.last() != Some(&reason) {
                seen.push(reason.clone());
            }
            if reason.contains("canary on queue default failed") {
                break instance.clone();
            }
        }
        assert!(
            Instant::now() < until,
            "the canary's failure was never told; reasons: {seen:#?}\n{}",
            run.procs.tails()
        );
        run.procs.check_ours("a broken worker fails the canary");
        std::thread::sleep(SAMPLE);
    };
    eprintln!("canary: reasons while broken, in order: {seen:#?}");
    assert_eq!(failed["health"], "unhealthy", "{failed}");
    timings.add(
        "a worker that cannot run tasks (until told)",
        started.elapsed(),
    );
    drop(load);

    // 4. recovered
    let started = Instant::now();
    run.stop_celery_worker("broken");
    run.start_celery_worker("good-again", "default", &[]);
    run.wait_until("healthy once a canary succeeds again", PHASE, || {
        first_executor(&health).filter(|i| i["health"] == "healthy")
    });
    timings.add("recovered (until healthy)", started.elapsed());
    // The history's transition out of `unhealthy` counts the canaries the
    // broken worker failed.
    let history = format!("{health}/history?executor=CeleryExecutor");
    let recovery = run.wait_until("the recovery's cost in the history", PHASE, || {
        let history = try_get_json(&history)?;
        let latest = history["transitions"].as_array()?.first()?.clone();
        (latest["to"] == "healthy" && latest["cost"].is_object()).then_some(latest)
    });
    assert_eq!(recovery["from"], "unhealthy", "{recovery}");
    assert!(
        recovery["cost"]["failed"].as_u64() >= Some(1),
        "the broken worker's canaries: {recovery}"
    );

    // 5. paused
    let started = Instant::now();
    run.airflow_cli(&["dags", "pause", "overseer_canary"]);
    let paused = run.wait_until("unknown, the canary paused", PHASE, || {
        first_executor(&health).filter(|i| i["health"] == "unknown")
    });
    assert_eq!(
        reason_of(&paused),
        "canary DAG overseer_canary is paused",
        "{paused}"
    );
    assert_eq!(paused["detail"]["canary"]["dag"], "paused");
    timings.add("paused (until unknown)", started.elapsed());

    // 6. what a fault cost: the broker killed, a DAG run failed meanwhile.
    let started = Instant::now();
    let killed = chrono::Utc::now();
    run.kill("redis");
    let down = run.wait_until("unhealthy, the broker killed", PHASE, || {
        first_executor(&health).filter(|i| i["health"] == "unhealthy")
    });
    eprintln!("canary: broker down: {}", reason_of(&down));
    run.airflow_cli(&["dags", "trigger", "overseer_fault"]);
    let failed = "SELECT task_id FROM task_instance WHERE dag_id = 'overseer_fault' \
                  AND state = 'failed' ORDER BY task_id";
    let until = Instant::now() + PHASE;
    loop {
        let ids = db.strings(failed).await;
        if ids.len() == 3 {
            break;
        }
        assert!(
            Instant::now() < until,
            "the scheduler never failed the tasks it could not send: {ids:?}\n{}",
            run.procs.tails()
        );
        let instance = first_executor(&health);
        assert!(
            instance.as_ref().is_none_or(|i| i["health"] == "unhealthy"),
            "the broker is down: {instance:?}"
        );
        tokio::time::sleep(SAMPLE).await;
    }
    let failing = started.elapsed();
    run.start("redis-again", run.redis_server(broker_port));
    let recovery = run.wait_until(
        "the transition out of unhealthy, with its cost",
        PHASE,
        || {
            let history = try_get_json(&history)?;
            // Newest first; phase 4's recovery (the broken worker's failed
            // canaries its cost) is before the kill.
            history["transitions"]
                .as_array()?
                .iter()
                .find(|t| {
                    t["from"] == "unhealthy"
                        && t["at"]
                            .as_str()
                            .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                            .is_some_and(|at| at > killed)
                })
                .cloned()
        },
    );
    eprintln!("canary: recovered: {recovery}");
    assert_eq!(
        recovery["cost"],
        serde_json::json!({"failed": 3, "up_for_retry": 0}),
        "{recovery}"
    );
    // The canary is paused: out of `unhealthy` into `unknown`, saying so.
    assert_eq!(recovery["to"], "unknown", "{recovery}");
    timings.add("what a fault cost (kill until the tasks failed)", failing);
    timings.add(
        "what a fault cost (kill until the cost is told)",
        started.elapsed(),
    );

    // 7. at capacity: four tasks of two minutes, two slots, a worker that
    // runs one at a time (the second waits queued in the broker).
    let started = Instant::now();
    run.airflow_cli(&["dags", "trigger", "overseer_capacity"]);
    let full = run.wait_until("unhealthy at capacity", PHASE, || {
        first_executor(&health).filter(|i| reason_of(i).contains("at capacity"))
    });
    assert_eq!(
        reason_of(&full),
        format!(
            "at capacity: 2 of 2 slots taken (parallelism 2 × 1 scheduler) for {MAX_AT_CAPACITY}, \
             tasks waiting in scheduled"
        ),
        "{full}"
    );
    let capacity = &full["detail"]["capacity"];
    assert_eq!(capacity["slots"], 2, "{capacity}");
    assert_eq!(capacity["parallelism"], 2, "{capacity}");
    assert_eq!(capacity["schedulers"], 1, "{capacity}");
    assert_eq!(
        capacity["running"].as_u64().unwrap() + capacity["queued"].as_u64().unwrap(),
        2,
        "{capacity}"
    );
    assert!(capacity["scheduled"].as_u64().unwrap() >= 1, "{capacity}");
    let (_, text) = get(&metrics);
    assert!(
        text.lines()
            .any(|l| l.starts_with("overseer_executor_slots{") && l.ends_with(" 2")),
        "{text}"
    );
    eprintln!("canary: at capacity: {capacity}");
    timings.add("at capacity (trigger until unhealthy)", started.elapsed());

    run.stop_celery_worker("good-again");
    let strays = run.procs.stop_all(support::airflow::STOP_GRACE);
    assert!(strays.is_empty(), "processes left behind: {strays:?}");
    drop(run);
    drop(db);
    eprintln!("canary: phase timings\n{}", timings.render());
}

/// The canary on `queue` in an instance's detail.
fn canary_queue<'a>(instance: &'a Value, queue: &str) -> Option<&'a Value> {
    instance["detail"]["canary"]["queues"]
        .as_array()?
        .iter()
        .find(|q| q["queue"] == queue)
}
