//! The reader of Airflow's tables: one task per process that, every poll
//! interval, reads for every executor together what Airflow's database says
//! of work flowing: the task instances queued ([`crate::airflow::queued`]), the slots
//! taken and waiting ([`crate::airflow::capacity`]) and the canary's latest runs
//! ([`crate::airflow::canary`]). It runs off the report's path (a task of its own on
//! the actors' runtime, each read in a task of its own bounded by a timeout)
//! and leaves what it read on the [`QueuedBoard`], where each executor's actor
//! takes its share at every poll. Each kind of evidence fails alone: the
//! queued task instances are judged whatever the others' reads did.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use crate::airflow::queued::{QueuedBoard, has_table, read};
use crate::airflow::routes::Routes;
use crate::airflow::{canary, capacity};

/// How often a database without `task_instance` is asked again whether it
/// has one now (Airflow's `db migrate` may run after Overseer started).
pub const TABLE_PROBE_EVERY: Duration = Duration::from_secs(60);

/// The reader: every `interval`, one read of the table (and of the canary's
/// runs and the executors' slots, the schedulers counted live within
/// `scheduler_threshold`) onto `board`, each in
/// a task of its own bounded by `timeout` (a driver that panics or a
/// database that does not answer costs that read, and the board says
/// "not known" until the next one succeeds). Runs until its runtime stops.
pub async fn run(
    db: sea_orm::DatabaseConnection,
    board: Arc<QueuedBoard>,
    routes: Arc<Routes>,
    limits: Vec<Duration>,
    interval: Duration,
    timeout: Duration,
    scheduler_threshold: Duration,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut present = false;
    let mut probed: Option<tokio::time::Instant> = None;
    let mut queued = Reads::new("queued task instances", "their rule");
    let mut slots = Reads::new("the executors' slots", "their rule");
    let mut canaries = Reads::new("the canary's task instances", "its rule");
    loop {
        ticks.tick().await;
        if !present {
            if probed.is_some_and(|at| at.elapsed() < TABLE_PROBE_EVERY) {
                continue;
            }
            probed = Some(tokio::time::Instant::now());
            let (db, by_team) = (db.clone(), routes.by_team());
            present = tokio::time::timeout(timeout, async move { has_table(&db, by_team).await })
                .await
                .unwrap_or(false);
            if !present {
                board.set(None);
                continue;
            }
            tracing::info!("reading queued task instances from Airflow's task_instance table");
        }
        let (db, limits, routes) = (db.clone(), limits.clone(), routes.clone());
        let read = actix_rt::spawn(async move {
            tokio::time::timeout(timeout, async {
                let now = Utc::now();
                let snapshot = read(&db, &limits, &routes, now).await?;
                let capacity = capacity::read(&db, &routes, scheduler_threshold, now).await;
                let canary = canary::read(&db, &routes, now).await;
                Ok::<_, crate::error::Error>((snapshot, capacity, canary))
            })
            .await
        })
        .await;
        match read {
            Ok(Ok(Ok((mut snapshot, capacity, canary)))) => {
                queued.answered();
                // Each of the others is evidence of its own: one that cannot
                // be read leaves the queued task instances judged.
                snapshot.capacity = slots.take(capacity);
                snapshot.canary = canaries.take(canary);
                board.set(Some(snapshot));
            }
            outcome => {
                let why = match outcome {
                    Ok(Ok(Err(e))) => e.to_string(),
                    Ok(Err(_)) => format!(
                        "the database did not answer within {}",
                        crate::duration::short(timeout)
                    ),
                    Err(e) => format!("the read ended early: {e}"),
                    Ok(Ok(Ok(_))) => unreachable!("matched above"),
                };
                queued.failed(&why);
                board.set(None);
            }
        }
    }
}

/// The reads of one kind of evidence: a run of failures is logged once, at
/// WARN with the first error, and its end once, at INFO.
struct Reads {
    /// What is read (`queued task instances`).
    what: &'static str,
    /// Whose rule waits while it cannot be read (`their rule`).
    rule: &'static str,
    failing: bool,
}

impl Reads {
    fn new(what: &'static str, rule: &'static str) -> Self {
        Self {
            what,
            rule,
            failing: false,
        }
    }

    fn answered(&mut self) {
        if std::mem::take(&mut self.failing) {
            tracing::info!("{} can be read again", self.what);
        }
    }

    fn failed(&mut self, error: &str) {
        if !std::mem::replace(&mut self.failing, true) {
            tracing::warn!(error = %crate::secret::scrub(error), "cannot read {}; {} waits", self.what, self.rule);
        }
    }

    /// What a read gave, or `None` (the failure told) when it failed.
    fn take<T>(&mut self, read: crate::error::Result<T>) -> Option<T> {
        match read {
            Ok(value) => {
                self.answered();
                Some(value)
            }
            Err(e) => {
                self.failed(&e.to_string());
                None
            }
        }
    }
}
