//! Two real `overseer serve` on one Postgres database, one heartbeating every
//! second and one every five: the fast one's report of the other's rows stays
//! put (issue 10, item 4). Executor rows are judged by one threshold whoever
//! wrote them, 30 s by default, not by the reader's own heartbeat: judged by
//! `2.1 x 1 s`, the slow host's rows counted as dead between its heartbeats and
//! the report flapped. A second, shorter test sets that old threshold and sees
//! the flapping, so the counting is shown to catch it.

use crate::support;

use std::time::{Duration, Instant};

use overseer_testkit::TestDb;
use serde_json::Value;
use support::{Heartbeat, Serving, get, overseer, workdir};

/// The shared Redis on loopback: a broker that answers, so verdicts are healthy.
const BROKER: &str = "redis://127.0.0.1:6379/0";

/// How often the fast process's health is read.
const READ_EVERY: Duration = Duration::from_millis(250);

/// The hosts, and their heartbeat intervals.
const FAST: (&str, &str) = ("flap-fast", "1s");
const SLOW: (&str, &str) = ("flap-slow", "5s");

/// What a probe or a dashboard sees in one read; a change of any part is a transition.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    http: u16,
    status: String,
    detailed_status: String,
    instances: usize,
}

/// One read of `?strict=true`, and the hosts whose executor rows it lists.
fn read(serving: &Serving) -> (Seen, Vec<String>) {
    let (http, body) = get(&serving.url("/api/v2/monitor/health?strict=true"));
    let json: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let executor = &json["executor"];
    let instances = executor["instances"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut hosts: Vec<String> = instances
        .iter()
        .filter_map(|i| i["hostname"].as_str().map(str::to_owned))
        .collect();
    hosts.sort();
    let text = |v: &Value| v.as_str().unwrap_or("absent").to_owned();
    let seen = Seen {
        http,
        status: text(&executor["status"]),
        detailed_status: text(&executor["detailed_status"]),
        instances: instances.len(),
    };
    (seen, hosts)
}

/// Both supervisors, their working folders, and the scheduler row kept alive.
struct Pair {
    fast: Serving,
    slow: Serving,
    _scheduler: Heartbeat,
    _dirs: [tempfile::TempDir; 2],
}

/// Starts the two supervisors on `db`; `fast_threshold` sets the fast one's
/// `thresholds.executor`. A scheduler row heartbeats beside them, so `?strict=true`
/// answers 200 while the executors are healthy.
async fn start_pair(db: &TestDb, fast_threshold: Option<&str>) -> Pair {
    use overseer_migration::{Migrator, MigratorTrait};
    Migrator::up(&db.conn, None).await.unwrap();
    db.execute_script(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname) \
         VALUES ('running', 'SchedulerJob', now(), now(), 'sched-1')",
    )
    .await;
    let scheduler = Heartbeat::start(&db.url, db.backend, "job_type = 'SchedulerJob'");
    let dirs = [workdir(), workdir()];
    let serve = |dir: &tempfile::TempDir, (hostname, heartbeat): (&str, &str)| {
        let mut command = overseer(dir.path());
        command
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("OVERSEER_SUPERVISOR__HOSTNAME", hostname)
            .env("OVERSEER_SUPERVISOR__HEARTBEAT_INTERVAL", heartbeat)
            .env("OVERSEER_SUPERVISOR__POLL_INTERVAL", "2s")
            .env("OVERSEER_SUPERVISOR__POLL_TIMEOUT", "1s")
            .env("OVERSEER_SUPERVISOR__REFRESH_INTERVAL", "250ms")
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env("AIRFLOW__CELERY__BROKER_URL", BROKER);
        command
    };
    let mut fast = serve(&dirs[0], FAST);
    if let Some(threshold) = fast_threshold {
        fast.env("OVERSEER_THRESHOLDS__EXECUTOR", threshold);
    }
    let fast = Serving::start(&mut fast);
    let slow = Serving::start(&mut serve(&dirs[1], SLOW));
    for serving in [&fast, &slow] {
        let ignored: Vec<_> = serving
            .seen
            .iter()
            .filter(|l| l.contains("ignoring environment variable"))
            .collect();
        assert!(ignored.is_empty(), "a setting was not applied: {ignored:?}");
    }
    Pair {
        fast,
        slow,
        _scheduler: scheduler,
        _dirs: dirs,
    }
}

/// What [`watch`] saw.
#[derive(Debug)]
struct Watched {
    reads: usize,
    /// Each change, as (seconds into the window, before, after).
    transitions: Vec<(f64, Seen, Seen)>,
    first: Seen,
    first_hosts: Vec<String>,
}

/// Waits until the fast process lists both hosts healthy, then reads its health
/// every [`READ_EVERY`] for `window` and records every transition.
fn watch(serving: &Serving, window: Duration) -> Watched {
    let deadline = Instant::now() + support::START_DEADLINE;
    let both = [FAST.0.to_owned(), SLOW.0.to_owned()];
    let (first, first_hosts) = loop {
        let (seen, hosts) = read(serving);
        if hosts == both && seen.status == "healthy" && seen.detailed_status == "healthy" {
            break (seen, hosts);
        }
        assert!(
            Instant::now() < deadline,
            "both hosts never seen healthy: {seen:?} {hosts:?}"
        );
        std::thread::sleep(READ_EVERY);
    };
    let started = Instant::now();
    let mut last = first.clone();
    let mut reads = 1;
    let mut transitions = Vec::new();
    while started.elapsed() < window {
        std::thread::sleep(READ_EVERY);
        let (seen, _) = read(serving);
        reads += 1;
        if seen != last {
            transitions.push((started.elapsed().as_secs_f64(), last, seen.clone()));
            last = seen;
        }
    }
    Watched {
        reads,
        transitions,
        first,
        first_hosts,
    }
}

fn services_reachable() -> bool {
    std::net::TcpStream::connect("127.0.0.1:6379").is_ok()
        || overseer_testkit::unavailable::<()>("Redis on 127.0.0.1:6379", "connection refused")
            .is_some()
}

#[tokio::test]
async fn a_1s_and_a_5s_supervisor_on_one_database_report_steadily_for_60s() {
    if !services_reachable() {
        return;
    }
    let Some(db) = overseer_testkit::postgres().await else {
        return;
    };
    let pair = start_pair(&db, None).await;
    let watched = watch(&pair.fast, Duration::from_secs(60));
    println!(
        "default threshold: {} transitions in {} reads over 60 s",
        watched.transitions.len(),
        watched.reads
    );
    assert_eq!(
        watched.first,
        Seen {
            http: 200,
            status: "healthy".into(),
            detailed_status: "healthy".into(),
            instances: 2,
        }
    );
    assert_eq!(watched.first_hosts, [FAST.0, SLOW.0]);
    assert!(
        watched.transitions.is_empty(),
        "the report flapped: {:#?}",
        watched.transitions
    );
    // The slow host's own report lists both too (its default threshold is 30 s).
    let (seen, hosts) = read(&pair.slow);
    assert_eq!((seen.instances, hosts.len()), (2, 2), "{seen:?} {hosts:?}");
}

/// The old behaviour, set on purpose: the fast process judges every executor row
/// by its own `2.1 x 1 s`, so the slow host's rows (written every 5 s) count as
/// dead for about 3 s of every 5, and the report changes several times in 12 s.
#[tokio::test]
async fn judged_by_the_readers_own_2_1s_threshold_the_report_flaps() {
    if !services_reachable() {
        return;
    }
    let Some(db) = overseer_testkit::postgres().await else {
        return;
    };
    let pair = start_pair(&db, Some("2100ms")).await;
    let watched = watch(&pair.fast, Duration::from_secs(12));
    println!(
        "2100ms threshold: {} transitions in {} reads over 12 s",
        watched.transitions.len(),
        watched.reads
    );
    for (at, _, after) in &watched.transitions {
        println!("  at {at:.1} s: {after:?}");
    }
    assert!(
        watched.transitions.len() >= 2,
        "the old threshold should make the report flap: {watched:#?}"
    );
    assert!(
        watched
            .transitions
            .iter()
            .any(|(_, _, after)| after.instances == 1),
        "the slow host's row drops out between its heartbeats: {watched:#?}"
    );
    drop(pair);
}
