//! Overseer inside a plain `#[tokio::main]` program that runs its own 10 ms main
//! loop, while one of its executors hangs forever (and another blocks its thread
//! forever). The loop prints how late it ever was: Overseer's actors, checks and
//! database writes never run on the host's threads, so a hung executor cannot
//! make it late.
//!
//! ```sh
//! cargo run --example tokio_main_loop            # runs 10 s
//! EXAMPLE_RUN_FOR=3s cargo run --example tokio_main_loop
//! ```

use std::time::{Duration, Instant};

use overseer_core::{BlockingHealthCheck, Executor, ExecutorHealth, HealthCheck, Overseer};
use overseer_migration::{Migrator, MigratorTrait};

/// The host's own loop period.
const TICK: Duration = Duration::from_millis(10);

/// How much longer than `EXAMPLE_RUN_FOR` the loop runs while a verdict is
/// still missing from the report (a check's first answer, or its timeout).
const VERDICTS_WITHIN: Duration = Duration::from_secs(30);

/// An executor whose check never answers.
#[derive(Clone)]
struct HangsForever;

#[async_trait::async_trait]
impl HealthCheck for HangsForever {
    async fn get_health(&self) -> ExecutorHealth {
        std::future::pending().await
    }
}

/// An executor whose check blocks its thread forever.
#[derive(Clone)]
struct BlocksForever;

impl BlockingHealthCheck for BlocksForever {
    fn get_health(&self) -> ExecutorHealth {
        loop {
            std::thread::park();
        }
    }
}

/// A healthy executor beside them.
#[derive(Clone)]
struct Fine;

#[async_trait::async_trait]
impl HealthCheck for Fine {
    async fn get_health(&self) -> ExecutorHealth {
        ExecutorHealth::Healthy
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let run_for = std::env::var("EXAMPLE_RUN_FOR")
        .ok()
        .map(|s| humantime::parse_duration(&s))
        .transpose()?
        .unwrap_or(Duration::from_secs(10));

    let dir = tempfile::tempdir()?;
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("example.db").display()
    );
    let db = sea_orm::Database::connect(&url).await?;
    Migrator::up(&db, None).await?;
    db.close().await?;

    let overseer = Overseer::builder()
        .database(&url)
        .hostname("example-host")
        .executor(Executor::new("HungExecutor", HangsForever))
        .executor(Executor::blocking("BlockedExecutor", BlocksForever))
        .executor(Executor::new("CeleryExecutor", Fine).with_instance("redis://broker:6379/0"))
        .poll_interval(Duration::from_millis(500))
        .poll_timeout(Duration::from_millis(250))
        .heartbeat_interval(Duration::from_millis(500))
        .refresh_interval(Duration::from_millis(200))
        .start()
        .await?;

    // The host's main loop: one tick every 10 ms, measuring how late each is. It
    // runs for `run_for`, and on until the report has every executor's verdict
    // (for at most `VERDICTS_WITHIN` more).
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut expected = Instant::now();
    let mut lateness = Vec::new();
    let (reports, executors) = (overseer.watch(), overseer.stats().len());
    let every_verdict = || {
        reports.borrow().executor.as_ref().is_some_and(|e| {
            e.instances.len() == executors && e.instances.iter().all(|i| i.checked_at.is_some())
        })
    };
    while started.elapsed() < run_for
        || (!every_verdict() && started.elapsed() < run_for + VERDICTS_WITHIN)
    {
        ticker.tick().await;
        let now = Instant::now();
        lateness.push(now.saturating_duration_since(expected));
        expected = now + TICK;
    }
    lateness.sort();
    let p99 = lateness[lateness.len() * 99 / 100];
    let worst = lateness.last().copied().unwrap_or_default();
    println!("ticks: {}", lateness.len());
    println!("main loop lateness: p99 {p99:?}, worst {worst:?}");

    if let Some(executor) = &overseer.report().executor {
        for instance in &executor.instances {
            println!(
                "{}: {}{}",
                instance.executor.as_deref().unwrap_or("?"),
                instance.health.as_str(),
                instance
                    .health
                    .reason()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            );
        }
    }
    for (label, stats) in overseer.stats() {
        println!(
            "{label}: {} polls, {} skipped, {} checks running",
            stats.polls, stats.skipped, stats.checks_running
        );
    }
    overseer.shutdown().await?;
    Ok(())
}
