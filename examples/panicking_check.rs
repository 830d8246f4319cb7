//! An executor whose health check panics on every call, supervised for a minute
//! (or `EXAMPLE_RUN_FOR`): the process stays up, the verdict says the check
//! panicked, and past the restart limit (5 in 60 s) the actor backs off instead
//! of running the check every second.
//!
//! ```sh
//! cargo run --example panicking_check
//! ```

use std::time::Duration;

use overseer_core::{Executor, ExecutorHealth, HealthCheck, Overseer};
use overseer_migration::{Migrator, MigratorTrait};

/// A check with a bug: it panics every time.
#[derive(Clone)]
struct AlwaysPanics;

#[async_trait::async_trait]
impl HealthCheck for AlwaysPanics {
    async fn get_health(&self) -> ExecutorHealth {
        panic!("the broker client hit a bug")
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let run_for = std::env::var("EXAMPLE_RUN_FOR")
        .ok()
        .map(|s| humantime::parse_duration(&s))
        .transpose()?
        .unwrap_or(Duration::from_secs(60));
    // The check's panics print through the default hook; keep the output to our lines.
    std::panic::set_hook(Box::new(|_| {}));

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
        .executor(Executor::new("BuggyExecutor", AlwaysPanics))
        .poll_interval(Duration::from_secs(1))
        .poll_timeout(Duration::from_millis(500))
        .heartbeat_interval(Duration::from_millis(500))
        .refresh_interval(Duration::from_millis(200))
        .start()
        .await?;
    tokio::time::sleep(run_for).await;

    let report = overseer.report();
    if let Some(instance) = report.executor.as_ref().and_then(|e| e.instances.first()) {
        println!("verdict: {}", instance.health);
    }
    for (label, stats) in overseer.stats() {
        println!(
            "{label}: {} polls, {} panics, {} restarts, {} skipped",
            stats.polls, stats.panics, stats.restarts, stats.skipped
        );
    }
    overseer.shutdown().await?;
    println!("still up after {run_for:?}");
    Ok(())
}
