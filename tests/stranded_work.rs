//! Stranded work beside a real Airflow 3.3.2 (issue 49's done-when): its
//! scheduler, DAG processor and api-server (Overseer's plugin loaded from
//! Airflow's plugins folder, so Airflow's own endpoint carries the executor
//! entry), a Redis broker of the test's own and a real `airflow celery worker`
//! (one slot, as `--concurrency 1`). `overseer serve` reads Airflow's own
//! environment with **no setting but the poll interval** (2 s): what a new
//! operator runs. Airflow's side sets only what makes its own clocks fit a
//! test (`task_queued_timeout` 30 s, checked every 10 s; the DAG folder
//! listed every 5 s; the canary every 10 s). In order, each fault read on
//! Overseer's endpoint and on Airflow's:
//!
//! 1. **work flows**: three tasks of 20 s; one runs, two wait in the broker.
//!    Healthy.
//! 2. **the broker restarted empty with work inside**: Redis killed by its pid
//!    and started again at once on its port, keeping nothing: the two waiting
//!    messages and the running one's are gone. Unhealthy naming the lost task
//!    instances, their queue and the restart; sampled every 500 ms until
//!    healthy, every unhealthy reading gives the one reason (never a capacity
//!    reason, never healthy in between); healthy once Airflow's
//!    `task_queued_timeout` has requeued them and the worker ran them.
//! 3. **the only worker stopped cleanly, then work sent**: unhealthy, no worker
//!    online while work waits; the worker back, healthy.
//! 4. **a task sent to a queue no worker consumes** (`queue='nowhere'`):
//!    unhealthy naming the queue; a worker for it, healthy.
//! 5. **the scheduler killed**: the canary (the plugin's DAG, its one line put
//!    in the DAG folder) stops running; Overseer says so as `unknown`, naming
//!    the scheduler, never `success` by silence.
//!
//! Phases 2 to 5 run with every core saturated by busy processes of the
//! test's own. Each fault's time to its verdict is printed (the deadlines
//! asserted are only how long to wait on a loaded 2-core machine; speed is the
//! bench's). Needs
//! the Airflow venv (PyPI the first time), Postgres on loopback and
//! `redis-server`; without them it says SKIPPED, and fails under `CI`.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::airflow_run::{Run, Setup, first_executor, reason_of};
use support::procs::Timings;

/// Three tasks of 20 s on the default queue, no retries.
const WORK_DAG: &str = "\
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

with DAG(dag_id=\"overseer_work\", schedule=None, catchup=False, is_paused_upon_creation=False):
    for n in range(3):
        BashOperator(task_id=f\"sleep_{n}\", bash_command=\"sleep 20\", retries=0)
";
/// One quick task on the default queue.
const QUICK_DAG: &str = "\
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

with DAG(dag_id=\"overseer_quick\", schedule=None, catchup=False, is_paused_upon_creation=False):
    BashOperator(task_id=\"quick\", bash_command=\"true\", retries=0)
";
/// One quick task on a queue no worker consumes until the test starts one.
const NOWHERE_DAG: &str = "\
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

with DAG(dag_id=\"overseer_nowhere\", schedule=None, catchup=False, is_paused_upon_creation=False):
    BashOperator(task_id=\"lost_sheep\", bash_command=\"true\", retries=0, queue=\"nowhere\")
";
/// The canary's one line, as the plugin's README gives it; written in phase 5.
const CANARY_FILE: &str = "from overseer_airflow.canary import dag  # noqa: F401  (Airflow DAG)\n";
/// The plugins folder's one line: Airflow loads the plugin class it finds.
const PLUGIN_FILE: &str =
    "from overseer_airflow.plugin import OverseerPlugin  # noqa: F401  (Airflow plugin)\n";
/// How long a phase may take on 2 busy cores. A deadline, not a measurement.
const PHASE: Duration = Duration::from_secs(300);
const SAMPLE: Duration = Duration::from_millis(500);
const MARKER_VAR: &str = "STRANDED_AIRFLOW_RUN";
/// The bound on the load generator's processes, should the test die first.
const LOADED_FOR: Duration = Duration::from_secs(900);

#[tokio::test]
async fn stranded_work_is_named_beside_a_real_airflow_on_the_defaults() {
    let mut timings = Timings::new("stranded");
    let Some((venv, db)) = support::airflow::venv_redis_and_db().await else {
        return;
    };
    let mut run = Run::new(
        Setup {
            name: "stranded",
            marker_var: MARKER_VAR,
            executor: "CeleryExecutor",
            dags: &[
                ("overseer_work.py", WORK_DAG),
                ("overseer_quick.py", QUICK_DAG),
                ("overseer_nowhere.py", NOWHERE_DAG),
            ],
        },
        venv,
        &db.url,
    );
    // The plugin's package on the path, and the plugins folder's one line.
    run.plugin_on_path();
    let plugins = run.dir().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(plugins.join("overseer_plugin.py"), PLUGIN_FILE).unwrap();
    run.env("AIRFLOW__CORE__PLUGINS_FOLDER", plugins);
    run.env("AIRFLOW__OVERSEER__CANARY_EVERY", "10s");
    run.env("AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT", "30");
    run.env(
        "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL",
        "10",
    );
    run.env("AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL", "5");
    let broker_port = run.redis_broker();
    run.overseer_env("OVERSEER_SUPERVISOR__POLL_INTERVAL", "2s");
    eprintln!("stranded: run folder {}", run.dir().display());
    run.migrate_overseer();

    run.start("redis", run.redis_server(broker_port));
    run.start("scheduler", run.airflow(&["scheduler"]));
    run.start("dag-processor", run.airflow(&["dag-processor"]));
    run.start_api_server();
    let address = run.start_overseer();
    let ends = Ends {
        overseer: format!("http://{address}/api/v2/monitor/health"),
        airflow: run.api_url("/api/v2/monitor/health"),
    };

    // 1. work flows: one task runs, two wait in the broker.
    let started = Instant::now();
    run.start_celery_worker("default", "default", &[]);
    run.airflow_cli(&["dags", "trigger", "overseer_work"]);
    // A task instance the scheduler has not looked at yet has no state.
    let states = "SELECT COALESCE(state, 'none') FROM task_instance WHERE dag_id = 'overseer_work' ORDER BY 1";
    run.wait_for_rows(&db, "one task running, two queued", PHASE, states, |rows| {
        rows == ["queued", "queued", "running"]
    })
    .await;
    let flowing = run.wait_until("healthy on both endpoints", PHASE, || {
        ends.both(|i| i["health"] == "healthy")
    });
    eprintln!("stranded: flowing: {}", flowing.0);
    timings.add("work flows (until healthy)", started.elapsed());

    // 2. the broker restarted empty with work inside. From here to the end,
    // every core is kept busy by processes of the test's own: a scheduler
    // host's normal state, which must bend neither the verdicts nor their causes.
    let load = overseer_testkit::load::Saturation::start(LOADED_FOR);
    run.kill("redis");
    run.start("redis-again", run.redis_server(broker_port));
    let returned = Instant::now();
    let lost = run.wait_until("unhealthy, naming the lost work", PHASE, || {
        first_executor(&ends.overseer).filter(|i| reason_of(i).contains("lost on queue default"))
    });
    let named_after = returned.elapsed();
    let lost_reason = reason_of(&lost);
    eprintln!("stranded: lost after {named_after:?}: {lost_reason}");
    assert_eq!(lost["health"], "unhealthy", "{lost}");
    assert!(lost_reason.contains("restarted at"), "{lost_reason}");
    assert!(lost_reason.contains("task_queued_timeout"), "{lost_reason}");
    timings.add("broker restarted empty (return until named)", named_after);
    let mut seen_airflow = false;
    let mut reasons: Vec<String> = Vec::new();
    let until = Instant::now() + PHASE;
    loop {
        let ours = first_executor(&ends.overseer);
        if let Some(ours) = &ours {
            if ours["health"] == "healthy" {
                break;
            }
            let now = reason_of(ours);
            assert!(!now.contains("capacity"), "a capacity reason: {now}");
            if reasons.last() != Some(&now) {
                reasons.push(now);
            }
        }
        if first_executor(&ends.airflow).is_some_and(|i| reason_of(&i) == lost_reason) {
            seen_airflow = true;
        }
        assert!(
            Instant::now() < until,
            "never healthy after Airflow requeued the lost work; reasons: {reasons:#?}\n{}",
            run.procs.tails()
        );
        run.procs.check_ours("the lost work requeued");
        std::thread::sleep(SAMPLE);
    }
    eprintln!("stranded: reasons until requeued: {reasons:#?}");
    assert_eq!(
        reasons,
        std::slice::from_ref(&lost_reason),
        "one fault, one reason, until healthy"
    );
    assert!(seen_airflow, "Airflow's endpoint never gave the lost work");
    timings.add(
        "broker restarted empty (return until healthy)",
        returned.elapsed(),
    );
    run.wait_for_rows(&db, "the work done", PHASE, states, |rows| {
        rows == ["success", "success", "success"]
    })
    .await;

    // 3. the only worker stopped cleanly, then work sent.
    run.stop_celery_worker("default");
    let started = Instant::now();
    run.airflow_cli(&["dags", "trigger", "overseer_quick"]);
    let nobody = "no worker online while work waits";
    let (ours, theirs) = run.wait_until("unhealthy: no worker online", PHASE, || {
        ends.both(|i| reason_of(i).contains(nobody))
    });
    eprintln!(
        "stranded: no worker: {} / Airflow's: {}",
        reason_of(&ours),
        reason_of(&theirs)
    );
    assert_eq!(ours["health"], "unhealthy", "{ours}");
    timings.add(
        "no worker online (trigger until named on both)",
        started.elapsed(),
    );
    run.start_celery_worker("default-again", "default", &[]);
    run.wait_until("healthy, the worker back", PHASE, || {
        ends.both(|i| i["health"] == "healthy")
    });

    // 4. a task sent to a queue no worker consumes.
    let started = Instant::now();
    run.airflow_cli(&["dags", "trigger", "overseer_nowhere"]);
    let unconsumed = "queue nowhere: work waiting, no worker consumes it";
    let (ours, _) = run.wait_until("unhealthy, naming the queue", PHASE, || {
        ends.both(|i| reason_of(i).contains(unconsumed))
    });
    eprintln!("stranded: unconsumed: {}", reason_of(&ours));
    assert_eq!(ours["health"], "unhealthy", "{ours}");
    timings.add(
        "queue nobody consumes (trigger until named on both)",
        started.elapsed(),
    );
    run.start_celery_worker("nowhere", "nowhere", &[]);
    run.wait_until("healthy, a worker for the queue", PHASE, || {
        ends.both(|i| i["health"] == "healthy")
    });

    // 5. the scheduler killed: the canary by the clock.
    let dags = run.dir().join("dags");
    std::fs::write(dags.join("overseer_canary.py"), CANARY_FILE).unwrap();
    let runs =
        "SELECT COALESCE(state, 'none') FROM dag_run WHERE dag_id = 'overseer_canary' ORDER BY 1";
    run.wait_for_rows(&db, "two canary runs succeeded", PHASE, runs, |rows| {
        rows.iter().filter(|s| *s == "success").count() >= 2
    })
    .await;
    run.wait_until("healthy, the canary flowing", PHASE, || {
        first_executor(&ends.overseer)
            .filter(|i| i["health"] == "healthy" && i["detail"]["canary"]["dag"] == "scheduled")
    });
    let started = Instant::now();
    run.kill("scheduler");
    let dead = "the scheduler is not running";
    let until = Instant::now() + PHASE;
    let (ours, theirs) = loop {
        let ours = first_executor(&ends.overseer);
        if let Some(ours) = &ours {
            let canary = &ours["detail"]["canary"];
            assert!(
                ours["health"] != "healthy" || canary["dag"] == "scheduled",
                "healthy while the canary is {canary}: {ours}"
            );
        }
        if let Some(both) = ends.both(|i| reason_of(i).contains(dead)) {
            break both;
        }
        assert!(
            Instant::now() < until,
            "the dead scheduler was never named: {ours:?}\n{}",
            run.procs.tails()
        );
        run.procs.check_ours("the canary by the clock");
        std::thread::sleep(SAMPLE);
    };
    eprintln!(
        "stranded: scheduler dead: {} / Airflow's: {}",
        reason_of(&ours),
        reason_of(&theirs)
    );
    assert_eq!(ours["health"], "unknown", "{ours}");
    assert_eq!(ours["detail"]["canary"]["dag"], "not running", "{ours}");
    timings.add(
        "scheduler killed (kill until named on both)",
        started.elapsed(),
    );

    drop(load);
    for name in ["default-again", "nowhere"] {
        run.stop_celery_worker(name);
    }
    let strays = run.procs.stop_all(support::airflow::STOP_GRACE);
    assert!(strays.is_empty(), "processes left behind: {strays:?}");
    drop(run);
    drop(db);
    eprintln!("stranded: phase timings\n{}", timings.render());
}

/// Overseer's health endpoint and Airflow's, the plugin's entry on the latter.
struct Ends {
    overseer: String,
    airflow: String,
}

impl Ends {
    /// Both endpoints' executor instance, when both pass `accept`.
    fn both(&self, accept: impl Fn(&Value) -> bool) -> Option<(Value, Value)> {
        let ours = first_executor(&self.overseer).filter(&accept)?;
        let theirs = first_executor(&self.airflow).filter(&accept)?;
        Some((ours, theirs))
    }
}
