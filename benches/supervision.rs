//! `just bench` (or `cargo bench --bench supervision`): the supervision core's
//! costs, side by side in one run.
//!
//! - The host's main loop (10 ms ticks): p99 and worst lateness with no Overseer,
//!   and beside Overseer with 100 hung async executors and 100 blocked ones.
//! - 10,000 executors polled every second: CPU seconds and peak RSS, on SQLite
//!   and on Postgres (each scenario in a process of its own, so peak RSS is its own).
//! - Database statements and time per flush, for 10 and 10,000 executors.
//!
//! `BENCH_SECONDS` sets each scenario's length (default 30; CI's smoke run uses 2).
//! Postgres scenarios use a fresh database on the loopback server and are
//! skipped, saying so, when it is unreachable.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use overseer_core::{BlockingHealthCheck, Executor, ExecutorHealth, HealthCheck, Overseer};
use overseer_migration::{Migrator, MigratorTrait};

/// The host loop's period.
const TICK: Duration = Duration::from_millis(10);

#[derive(Clone)]
struct Hangs;

#[async_trait::async_trait]
impl HealthCheck for Hangs {
    async fn get_health(&self) -> ExecutorHealth {
        std::future::pending().await
    }
}

#[derive(Clone)]
struct Blocks;

impl BlockingHealthCheck for Blocks {
    fn get_health(&self) -> ExecutorHealth {
        loop {
            std::thread::park();
        }
    }
}

#[derive(Clone)]
struct Healthy;

#[async_trait::async_trait]
impl HealthCheck for Healthy {
    async fn get_health(&self) -> ExecutorHealth {
        ExecutorHealth::Healthy
    }
}

fn seconds() -> u64 {
    std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
}

/// CPU seconds (user + system) this process has used.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| {
        f.iter().filter_map(|v| v.parse::<f64>().ok()).sum()
    });
    ticks / 100.0
}

/// Peak resident memory of this process, in MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

async fn sqlite_url(dir: &tempfile::TempDir) -> String {
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("bench.db").display()
    );
    let db = sea_orm::Database::connect(&url).await.unwrap();
    Migrator::up(&db, None).await.unwrap();
    db.close().await.unwrap();
    url
}

/// Runs the host's 10 ms loop for `run_for`; returns (p99, worst) lateness.
async fn host_loop(run_for: Duration) -> (Duration, Duration) {
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut expected = Instant::now();
    let mut lateness = Vec::new();
    while started.elapsed() < run_for {
        ticker.tick().await;
        let now = Instant::now();
        lateness.push(now.saturating_duration_since(expected));
        expected = now + TICK;
    }
    lateness.sort();
    (
        lateness[lateness.len() * 99 / 100],
        *lateness.last().unwrap(),
    )
}

fn builder(url: &str) -> overseer_core::OverseerBuilder {
    Overseer::builder()
        .database(url)
        .hostname("bench")
        .poll_interval(Duration::from_secs(1))
        .poll_timeout(Duration::from_millis(500))
        .heartbeat_interval(Duration::from_secs(1))
        .refresh_interval(Duration::from_secs(1))
}

/// One scenario, run in this process (the parent runs each in a child).
async fn scenario(name: &str, url: Option<String>) -> String {
    let run_for = Duration::from_secs(seconds());
    let dir = tempfile::tempdir().unwrap();
    let url = match url {
        Some(url) => url,
        None => sqlite_url(&dir).await,
    };
    match name {
        "loop-alone" => {
            let (p99, worst) = host_loop(run_for).await;
            format!("{p99:?}\t{worst:?}")
        }
        "loop-hung-async" | "loop-hung-blocking" => {
            let executors = (0..100).map(|i| {
                if name == "loop-hung-async" {
                    Executor::new(format!("Hung{i}"), Hangs)
                } else {
                    Executor::blocking(format!("Blocked{i}"), Blocks)
                }
            });
            let overseer = builder(&url).executors(executors).start().await.unwrap();
            let (p99, worst) = host_loop(run_for).await;
            overseer.shutdown().await.unwrap();
            format!("{p99:?}\t{worst:?}")
        }
        "scale" => {
            let count: usize = std::env::var("BENCH_EXECUTORS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(10_000);
            let executors =
                (0..count).map(|i| Executor::new(format!("e{i}:CeleryExecutor"), Healthy));
            let cpu_before = cpu_seconds();
            let overseer = builder(&url).executors(executors).start().await.unwrap();
            tokio::time::sleep(run_for).await;
            let stats = overseer.aggregator_stats();
            let line = format!(
                "{:.2}\t{:.1}\t{}\t{}\t{:.1}\t{}",
                cpu_seconds() - cpu_before,
                peak_rss_mib(),
                stats.last_flush_statements.load(Ordering::Relaxed),
                stats.last_flush_verdicts.load(Ordering::Relaxed),
                stats.last_flush_micros.load(Ordering::Relaxed) as f64 / 1000.0,
                stats.flushes.load(Ordering::Relaxed),
            );
            overseer.shutdown().await.unwrap();
            line
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// A fresh database on the loopback Postgres, or why there is none.
fn postgres_db() -> Result<String, String> {
    let name = format!("overseer_bench_{}", std::process::id());
    let created = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-q"])
        .args(["-c", &format!("DROP DATABASE IF EXISTS {name}")])
        .args(["-c", &format!("CREATE DATABASE {name}")])
        .output()
        .map_err(|e| format!("psql: {e}"))?;
    if !created.status.success() {
        return Err(String::from_utf8_lossy(&created.stderr).trim().to_owned());
    }
    let url = format!("postgres://postgres@127.0.0.1:5432/{name}");
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let db = sea_orm::Database::connect(&url)
            .await
            .map_err(|e| e.to_string())?;
        Migrator::up(&db, None).await.map_err(|e| e.to_string())?;
        db.close().await.map_err(|e| e.to_string())
    })?;
    Ok(url)
}

fn drop_postgres_db(url: &str) {
    if let Some(name) = url.rsplit('/').next() {
        let _ = Command::new("psql")
            .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qc"])
            .arg(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .output();
    }
}

/// Runs a scenario in a child process and returns its one result line.
fn child(name: &str, env: &[(&str, String)]) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--scenario")
        .arg(name)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--scenario") {
        let name = args[at + 1].clone();
        let url = std::env::var("BENCH_URL").ok();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        println!("{}", runtime.block_on(scenario(&name, url)));
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }

    let secs = seconds();
    println!("Overseer supervision benchmark: {secs} s per scenario, 2 cores, release build\n");
    println!("Host main loop (10 ms ticks), lateness:");
    println!("| beside | p99 | worst |");
    println!("| --- | --- | --- |");
    for (label, name) in [
        ("no Overseer", "loop-alone"),
        ("Overseer, 100 hung async executors", "loop-hung-async"),
        ("Overseer, 100 blocked executors", "loop-hung-blocking"),
    ] {
        let line = child(name, &[]);
        let mut fields = line.split('\t');
        println!(
            "| {label} | {} | {} |",
            fields.next().unwrap_or("?"),
            fields.next().unwrap_or("?")
        );
    }

    let postgres = postgres_db()
        .map_err(|e| println!("\n(Postgres at 127.0.0.1:5432 unusable, its rows are skipped: {e})"))
        .ok();
    println!(
        "\nExecutors polled every second for {secs} s (one flush and one refresh per second):"
    );
    println!(
        "| database | executors | CPU s | peak RSS MiB | statements per flush | verdicts in last flush | last flush ms | flushes |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for (database, url) in [("SQLite", None), ("Postgres", postgres.clone())] {
        if database == "Postgres" && url.is_none() {
            continue;
        }
        for count in [10, 10_000] {
            let mut env = vec![("BENCH_EXECUTORS", count.to_string())];
            if let Some(url) = &url {
                // Each run starts from an empty table.
                let _ = Command::new("psql")
                    .args([
                        "-h",
                        "127.0.0.1",
                        "-U",
                        "postgres",
                        "-d",
                        url.rsplit('/').next().unwrap(),
                        "-qc",
                        "DELETE FROM job",
                    ])
                    .output();
                env.push(("BENCH_URL", url.clone()));
            }
            let line = child("scale", &env);
            println!("| {database} | {count} | {} |", line.replace('\t', " | "));
        }
    }
    if let Some(url) = postgres {
        drop_postgres_db(&url);
    }
}
