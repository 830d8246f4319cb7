//! The HTTP API of the real service, against real SQLite and Postgres: the
//! health JSON for rows of every component (fresh, stale, ended, several hosts),
//! `?strict=true`, the SSE stream, `/metrics`, `/openapi.json`, and errors.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use overseer_testkit::TestDb;
use sea_orm::DbBackend;
use serde_json::Value;
use support::{Heartbeat, Serving, get, health_until, overseer, workdir};

/// Quick intervals, so a test sees several rounds within a second.
const QUICK: &str = r#"
[supervisor]
hostname = "sched-1"
poll_interval = "200ms"
poll_timeout = "100ms"
heartbeat_interval = "200ms"
refresh_interval = "100ms"

[[executors]]
name = "LocalExecutor"
"#;

/// A time `seconds` ago, with a non-zero microsecond part (Python's isoformat
/// prints six digits then).
fn ago(seconds: i64) -> DateTime<Utc> {
    let t = Utc::now() - chrono::Duration::seconds(seconds);
    let micros = t.nanosecond() / 1000;
    t.with_nanosecond((micros.max(1)) * 1000).unwrap()
}

/// A timestamp literal in the form Airflow stores on this backend.
fn stored(backend: DbBackend, at: DateTime<Utc>) -> String {
    match backend {
        DbBackend::Postgres => format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.6f+00")),
        _ => format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.6f")),
    }
}

/// The heartbeat as Airflow's JSON writes it: Python's `isoformat()`.
fn iso(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()
}

struct Scene {
    fresh_scheduler: DateTime<Utc>,
    ended_triggerer: DateTime<Utc>,
}

/// Rows as Airflow and a second Overseer would have written them:
/// - scheduler: a fresh one on sched-1, a stale one on sched-2 (a crash);
/// - triggerer: only an ended one (`success`);
/// - DAG processor: none;
/// - an executor row of another Overseer on sched-2, unhealthy, fresh.
async fn write_scene(db: &TestDb) -> Scene {
    let b = db.backend;
    let scene = Scene {
        fresh_scheduler: ago(2),
        ended_triggerer: ago(100),
    };
    let rows = format!(
        "INSERT INTO job (state, job_type, start_date, end_date, latest_heartbeat, executor_class, hostname, unixname) VALUES \
         ('running', 'SchedulerJob', {old}, NULL, {fresh}, 'CeleryExecutor', 'sched-1', 'airflow'), \
         ('running', 'SchedulerJob', {old}, NULL, {stale}, 'CeleryExecutor', 'sched-2', 'airflow'), \
         ('success', 'TriggererJob', {old}, {ended}, {ended}, NULL, 'trig-1', 'airflow')",
        old = stored(b, ago(3600)),
        fresh = stored(b, scene.fresh_scheduler),
        stale = stored(b, ago(300)),
        ended = stored(b, scene.ended_triggerer),
    );
    db.execute_script(&rows).await;
    let executor = format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, executor_class, hostname, unixname, \
         executor_health, executor_health_reason, executor_instance, executor_health_checked_at) VALUES \
         ('running', 'ExecutorJob', {start}, {start}, 'CeleryExecutor', 'sched-2', 'airflow', \
          'unhealthy', 'broker redis://broker:6379/0 refused the connection', 'redis://broker:6379/0', {start})",
        start = stored(b, ago(0)),
    );
    db.execute_script(&executor).await;
    scene
}

/// Keeps the other Overseer's row fresh, as that Overseer would, until dropped.
fn heartbeat_other(db: &TestDb) -> Heartbeat {
    Heartbeat::start(
        &db.url,
        db.backend,
        "hostname = 'sched-2' AND job_type = 'ExecutorJob'",
    )
}

fn start(db: &TestDb) -> (tempfile::TempDir, Serving) {
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    (dir, serving)
}

async fn health_json_follows_airflows_rules_and_adds_executors(db: TestDb) {
    overseer_migration_up(&db).await;
    let scene = write_scene(&db).await;
    let (_dir, serving) = start(&db);
    let _other = heartbeat_other(&db);

    let body = health_until(&serving, "both executor rows", |j| {
        j["executor"]["instances"]
            .as_array()
            .is_some_and(|i| i.len() == 2)
    });

    // Airflow's own fields, by Airflow's rules.
    assert_eq!(
        body["metadatabase"],
        serde_json::json!({"status": "healthy"})
    );
    assert_eq!(
        body["scheduler"]["status"], "healthy",
        "the running, freshest scheduler is alive"
    );
    assert_eq!(
        body["scheduler"]["latest_scheduler_heartbeat"],
        iso(scene.fresh_scheduler)
    );
    assert_eq!(
        body["triggerer"]["status"], "unhealthy",
        "its most recent job ended"
    );
    assert_eq!(
        body["triggerer"]["latest_triggerer_heartbeat"],
        iso(scene.ended_triggerer)
    );
    assert_eq!(body["dag_processor"]["status"], Value::Null, "never ran");
    assert_eq!(
        body["dag_processor"]["latest_dag_processor_heartbeat"],
        Value::Null
    );

    // Instances: only the live ones.
    let hosts: Vec<&str> = body["scheduler"]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["hostname"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["sched-1"], "the stale sched-2 is not an instance");
    assert_eq!(body["scheduler"]["detailed_status"], "healthy");

    // The executor entry: ours (unknown, no check) and the other host's (unhealthy).
    let executor = &body["executor"];
    assert_eq!(executor["status"], "unhealthy");
    assert_eq!(executor["detailed_status"], "degraded");
    let theirs = executor["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["hostname"] == "sched-2")
        .unwrap();
    assert_eq!(
        theirs["reason"],
        "broker redis://broker:6379/0 refused the connection"
    );
    assert_eq!(theirs["instance"], "redis://broker:6379/0");

    // strict: 503 while a component is unhealthy; 200 without it.
    let (status, _) = get(&serving.url("/api/v2/monitor/health?strict=true"));
    assert_eq!(status, 503);
    let (status, _) = get(&serving.url("/api/v2/monitor/health?strict=false"));
    assert_eq!(status, 200);

    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

async fn overseer_migration_up(db: &TestDb) {
    use overseer_migration::{Migrator, MigratorTrait};
    Migrator::up(&db.conn, None).await.unwrap();
}

#[tokio::test]
async fn health_on_sqlite() {
    health_json_follows_airflows_rules_and_adds_executors(overseer_testkit::sqlite().await).await;
}

#[tokio::test]
async fn health_on_postgres() {
    if let Some(db) = overseer_testkit::postgres().await {
        health_json_follows_airflows_rules_and_adds_executors(db).await;
    }
}

#[tokio::test]
async fn strict_is_200_when_everything_is_healthy() {
    let db = overseer_testkit::sqlite().await;
    overseer_migration_up(&db).await;
    db.execute_script(&format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname) VALUES \
         ('running', 'SchedulerJob', {now}, {now}, 'sched-1')",
        now = stored(db.backend, ago(0))
    ))
    .await;
    let (_dir, serving) = start(&db);
    health_until(&serving, "our executor row", |j| {
        j["executor"]["status"] == "healthy"
    });
    let (status, body) = get(&serving.url("/api/v2/monitor/health?strict=true"));
    assert_eq!(status, 200, "{body}");
}

/// Reads SSE events from a raw connection: (event name, data) pairs.
struct Events {
    reader: BufReader<std::net::TcpStream>,
}

impl Events {
    fn open(address: &str) -> Self {
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "GET /api/v2/monitor/health/stream HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        Self { reader }
    }

    /// The next `report` event's JSON.
    fn next_report(&mut self) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            self.reader
                .read_line(&mut line)
                .expect("an event within 30 s");
            if let Some(data) = line.trim_end().strip_prefix("data: ") {
                return serde_json::from_str(data).unwrap();
            }
        }
    }
}

#[tokio::test]
async fn the_stream_sends_the_report_and_each_change_without_reconnecting() {
    let db = overseer_testkit::sqlite().await;
    overseer_migration_up(&db).await;
    write_scene(&db).await;
    let (_dir, serving) = start(&db);
    let _other = heartbeat_other(&db);

    let mut events = Events::open(&serving.address);
    let first = events.next_report();
    assert!(first.get("metadatabase").is_some());

    // The other host's verdict turns healthy: the stream says so.
    db.execute_script("UPDATE job SET executor_health = 'healthy', executor_health_reason = NULL WHERE hostname = 'sched-2'")
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let report = events.next_report();
        let healthy = report["executor"]["instances"].as_array().is_some_and(|i| {
            i.iter()
                .any(|i| i["hostname"] == "sched-2" && i["health"] == "healthy")
        });
        if healthy {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the change never came"
        );
    }

    // A stream open at shutdown does not hold the service up.
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn metrics_expose_verdicts_and_counters_in_prometheus_format() {
    let db = overseer_testkit::sqlite().await;
    overseer_migration_up(&db).await;
    write_scene(&db).await;
    let (_dir, serving) = start(&db);
    let _other = heartbeat_other(&db);
    health_until(&serving, "both executor rows", |j| {
        j["executor"]["instances"]
            .as_array()
            .is_some_and(|i| i.len() == 2)
    });

    let (status, body) = get(&serving.url("/metrics"));
    assert_eq!(status, 200);
    for expected in [
        "# TYPE overseer_executor_health gauge",
        r#"overseer_executor_health{executor="CeleryExecutor",executor_instance="redis://broker:6379/0",hostname="sched-2"} 0"#,
        r#"overseer_executor_health{executor="LocalExecutor",executor_instance="",hostname="sched-1"} -1"#,
        "# TYPE overseer_poll_duration_seconds histogram",
        r#"overseer_poll_duration_seconds_bucket{executor="LocalExecutor",executor_instance="",le="+Inf"}"#,
        "# TYPE overseer_polls_skipped_total counter",
        r#"overseer_poll_timeouts_total{executor="LocalExecutor",executor_instance=""} 0"#,
        r#"overseer_check_panics_total{executor="LocalExecutor",executor_instance=""} 0"#,
        r#"overseer_executor_restarts_total{executor="LocalExecutor",executor_instance=""} 0"#,
        r#"overseer_check_stalls_total{executor="LocalExecutor",executor_instance=""} 0"#,
        "overseer_db_flush_failures_total 0",
        r#"overseer_component_healthy{component="scheduler"} 1"#,
        "# TYPE overseer_report_age_seconds gauge",
    ] {
        assert!(body.contains(expected), "missing {expected:?} in:\n{body}");
    }
    let polls: f64 = body
        .lines()
        .find(|l| l.starts_with(r#"overseer_polls_total{executor="LocalExecutor""#))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap();
    assert!(polls >= 1.0, "polls counted: {polls}");
}

#[tokio::test]
async fn openapi_describes_the_routes_and_errors_are_json() {
    let db = overseer_testkit::sqlite().await;
    let (_dir, serving) = start(&db);

    let (status, body) = get(&serving.url("/openapi.json"));
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&body).unwrap();
    for path in [
        "/api/v2/monitor/health",
        "/api/v2/monitor/health/stream",
        "/metrics",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} in the document");
    }
    let schema = &doc["components"]["schemas"]["HealthReport"];
    let required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        required,
        ["metadatabase", "scheduler", "triggerer", "dag_processor"]
    );

    assert_eq!(
        get(&serving.url("/no/such/route")),
        (404, r#"{"detail":"Not Found"}"#.into())
    );
    let post = ureq::post(&serving.url("/api/v2/monitor/health")).call();
    match post {
        Err(ureq::Error::Status(405, response)) => {
            assert_eq!(
                response.into_string().unwrap(),
                r#"{"detail":"Method Not Allowed"}"#
            )
        }
        other => panic!("POST answered {other:?}"),
    }
    let (status, body) = get(&serving.url("/api/v2/monitor/health?strict=maybe"));
    assert_eq!(status, 400);
    assert!(
        body.starts_with(r#"{"detail":"invalid query string:"#),
        "{body}"
    );

    // A request with 256 KiB of headers is refused, and the service keeps serving.
    let mut stream = std::net::TcpStream::connect(&serving.address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let huge = "x".repeat(256 * 1024);
    let _ = write!(
        stream,
        "GET /api/v2/monitor/health HTTP/1.1\r\nHost: x\r\nX-Huge: {huge}\r\n\r\n"
    );
    let mut answer = String::new();
    let _ = BufReader::new(stream).read_line(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    assert_eq!(get(&serving.url("/api/v2/monitor/health")).0, 200);

    let (status, page) = get(&serving.url("/"));
    assert_eq!(status, 200);
    for card in [
        "card-scheduler",
        "card-triggerer",
        "card-dag_processor",
        "card-executor",
    ] {
        assert!(page.contains(card), "{card}");
    }
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no outside resources"
    );
}

/// Sends `request` raw on a connection of its own and returns everything the
/// service answers until it closes. The request is written from a thread of its
/// own: the service may answer (and close) before it has read all of it.
fn raw_exchange(address: &str, request: Vec<u8>) -> String {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let writing = std::thread::spawn(move || {
        let _ = writer.write_all(&request);
    });
    let mut answer = Vec::new();
    let mut buf = [0; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    let _ = writing.join();
    String::from_utf8_lossy(&answer).into_owned()
}

/// The status line, the headers (names lowercased) and the body of a raw answer.
fn parse_answer(answer: &str) -> (String, Vec<(String, String)>, String) {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap_or_default().to_owned();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn requests_too_large_to_parse_get_the_json_error_every_other_error_has() {
    let db = overseer_testkit::sqlite().await;
    let (_dir, serving) = start(&db);

    // A 100 KB request line: longer than any URI may be.
    let long_line = format!(
        "GET /api/v2/monitor/health?x={} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    // A 1 MB header: far past what a request head may hold.
    let huge_header = format!(
        "GET /api/v2/monitor/health HTTP/1.1\r\nHost: x\r\nX-Huge: {}\r\n\r\n",
        "x".repeat(1024 * 1024)
    );
    for (request, status) in [(long_line, "400"), (huge_header, "431")] {
        let answer = raw_exchange(&serving.address, request.into_bytes());
        let (status_line, headers, body) = parse_answer(&answer);
        assert!(
            status_line.starts_with(&format!("HTTP/1.1 {status} ")),
            "{status_line:?}"
        );
        assert_eq!(
            header(&headers, "content-type"),
            Some("application/json"),
            "{answer:?}"
        );
        assert_eq!(
            header(&headers, "content-length"),
            Some(body.len().to_string().as_str()),
            "{answer:?}"
        );
        let json: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
        assert!(
            json["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{json}"
        );
    }
    // The service keeps serving, and its other answers are untouched.
    let (status, body) = get(&serving.url("/api/v2/monitor/health"));
    assert_eq!(status, 200);
    assert!(serde_json::from_str::<Value>(&body).is_ok());
}

#[tokio::test]
async fn head_on_the_stream_answers_its_headers_and_ends() {
    let db = overseer_testkit::sqlite().await;
    let (_dir, serving) = start(&db);
    let answer = raw_exchange(
        &serving.address,
        b"HEAD /api/v2/monitor/health/stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            .to_vec(),
    );
    let (status_line, headers, body) = parse_answer(&answer);
    assert!(status_line.starts_with("HTTP/1.1 200 "), "{answer:?}");
    assert_eq!(header(&headers, "content-type"), Some("text/event-stream"));
    assert_eq!(body, "", "HEAD has no body");
}
