//! `just bench` (or `cargo bench --bench http`): the health endpoint under load,
//! beside a static route of the same server, in the same run.
//!
//! The release binary serves a Jobs table with rows of every component; wrk
//! (Debian's package) drives each route at 64 connections. Requests per second
//! and p99 latency for both, and their ratio: the health endpoint only reads a
//! pre-rendered report, so it should come within 80% of the static route.
//! `BENCH_SECONDS` sets each run's length (default 10).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Connections wrk keeps open.
const CONNECTIONS: u32 = 64;

fn seconds() -> u64 {
    std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10)
}

/// (requests per second, p99 latency) from wrk's `--latency` output.
fn wrk(url: &str) -> (f64, String) {
    let out = Command::new("wrk")
        .args([
            "-t2",
            &format!("-c{CONNECTIONS}"),
            &format!("-d{}s", seconds()),
            "--latency",
            url,
        ])
        .output()
        .expect("wrk runs (apt-get install wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in:\n{text}"));
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .map(|v| v.trim().to_owned())
        .unwrap_or_default();
    let errors = text
        .lines()
        .find(|l| l.contains("Non-2xx") || l.contains("Socket errors"));
    if let Some(errors) = errors {
        println!("  ({url}: {})", errors.trim());
    }
    (rps, p99)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if Command::new("wrk").arg("--version").output().is_err() {
        println!("wrk is not installed (apt-get install wrk): the HTTP benchmark is skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bench.db");
    let now = chrono::Utc::now().format("%Y-%m-%d %H:%M:%S%.6f");
    let url = format!("sqlite://{}?mode=rwc", db.display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_overseer"))
        .args(["serve", "--bind", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env("OVERSEER_DATABASE__URL", &url)
        .env("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
        .env(
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD",
            "3600",
        )
        .env("RUST_LOG", "warn,overseer::serve=info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("overseer serve starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let address = loop {
        let line = lines.next().expect("serve logs its address").unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    // A scheduler row, so the report has instances to render.
    std::thread::sleep(Duration::from_millis(500));
    let rows = format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, unixname) \
         VALUES ('running', 'SchedulerJob', '{now}', '{now}', 'sched-1', 'airflow')"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use sea_orm::ConnectionTrait;
        let conn = sea_orm::Database::connect(&url).await.unwrap();
        conn.execute_unprepared(&rows).await.unwrap();
        conn.close().await.unwrap();
    });
    std::thread::sleep(Duration::from_secs(2));

    println!(
        "HTTP benchmark: wrk -t2 -c{CONNECTIONS} -d{}s, release build, 2 cores shared with wrk\n",
        seconds()
    );
    println!("| route | requests/s | p99 latency |");
    println!("| --- | --- | --- |");
    let (static_rps, static_p99) = wrk(&format!("http://{address}/api/v2/version"));
    println!("| GET /api/v2/version (static) | {static_rps:.0} | {static_p99} |");
    let (health_rps, health_p99) = wrk(&format!("http://{address}/api/v2/monitor/health"));
    println!("| GET /api/v2/monitor/health | {health_rps:.0} | {health_p99} |");
    println!(
        "\nhealth / static throughput: {:.0}%",
        100.0 * health_rps / static_rps
    );

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}
