//! An executor whose health check panics on every call: the process stays up,
//! the verdict says the check panicked, and past the restart limit (5 restarts
//! within 60 s) the actor backs off instead of running the check at every poll.
//!
//! It runs until it has shown all three (the sixth panic, then
//! [`POLLS_BACKED_OFF`] polls that did not run the check, then the back-off
//! verdict in the report), and gives up after `EXAMPLE_RUN_FOR` (default 60 s).
//!
//! ```sh
//! cargo run --example panicking_check
//! ```

use std::time::Duration;

use anyhow::bail;
use overseer_core::actors::RestartPolicy;
use overseer_core::stats::StatsSnapshot;
use overseer_core::{Executor, ExecutorHealth, HealthCheck, Overseer};
use overseer_migration::{Migrator, MigratorTrait};
use tokio::time::Instant;

/// Polls watched after the restart limit, none of which may run the check.
const POLLS_BACKED_OFF: u64 = 10;

/// How often the example looks at the counters while it waits.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// A check with a bug: it panics every time.
#[derive(Clone)]
struct AlwaysPanics;

#[async_trait::async_trait]
impl HealthCheck for AlwaysPanics {
    async fn get_health(&self) -> ExecutorHealth {
        panic!("the broker client hit a bug")
    }
}

/// Waits until the executor's counters satisfy `done`, or fails at `deadline`.
async fn counters_until(
    overseer: &Overseer,
    deadline: Instant,
    what: &str,
    done: impl Fn(&StatsSnapshot) -> bool,
) -> anyhow::Result<StatsSnapshot> {
    loop {
        let (_, stats) = overseer.stats()[0].clone();
        if done(&stats) {
            return Ok(stats);
        }
        if Instant::now() >= deadline {
            bail!("{what}: not seen in time; {stats:?}");
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let run_for = std::env::var("EXAMPLE_RUN_FOR")
        .ok()
        .map(|s| humantime::parse_duration(&s))
        .transpose()?
        .unwrap_or(Duration::from_secs(60));
    let deadline = Instant::now() + run_for;
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
        .poll_interval(Duration::from_millis(200))
        .poll_timeout(Duration::from_millis(100))
        .heartbeat_interval(Duration::from_millis(200))
        .refresh_interval(Duration::from_millis(100))
        .start()
        .await?;

    // Every panic restarts the actor; the restart past the limit starts the back-off.
    let limit = RestartPolicy::default().max_restarts as u64;
    let tripped = counters_until(&overseer, deadline, "the restart limit", |s| {
        s.restarts > limit
    })
    .await?;
    let backed_off = counters_until(&overseer, deadline, "polls while backing off", |s| {
        s.polls >= tripped.polls + POLLS_BACKED_OFF
    })
    .await?;
    println!(
        "backed off: {} polls ran the check {} times",
        backed_off.polls - tripped.polls,
        backed_off.panics - tripped.panics
    );

    let mut reports = overseer.watch();
    let verdict = tokio::time::timeout_at(deadline, async {
        loop {
            let report = reports.borrow_and_update().clone();
            let health = report
                .executor
                .as_ref()
                .and_then(|e| e.instances.first())
                .map(|i| i.health.clone());
            if let Some(health) =
                health.filter(|h| h.reason().is_some_and(|r| r.contains("not run again")))
            {
                return Ok::<_, anyhow::Error>(health);
            }
            reports.changed().await?;
        }
    })
    .await
    .unwrap_or_else(|_| bail!("the back-off verdict: not in the report in time"))?;
    println!("verdict: {verdict}");

    for (label, stats) in overseer.stats() {
        println!(
            "{label}: {} polls, {} panics, {} restarts, {} skipped",
            stats.polls, stats.panics, stats.restarts, stats.skipped
        );
    }
    overseer.shutdown().await?;
    println!("still up");
    Ok(())
}
