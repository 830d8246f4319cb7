//! The reader of Airflow's tables: one task per process that, every poll
//! interval, reads for every executor together what Airflow's database says
//! of work flowing: the task instances queued ([`crate::queued`]), the slots
//! taken and waiting ([`crate::capacity`]) and the canary's latest runs
//! ([`crate::canary`]). It runs off the report's path (a task of its own on
//! the actors' runtime, each read in a task of its own bounded by a timeout)
//! and leaves what it read on the [`QueuedBoard`], where each executor's actor
//! takes its share at every poll. Each kind of evidence fails alone: the
//! queued task instances are judged whatever the others' reads did.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use crate::queued::{QueuedBoard, Routes, has_table, read};
use crate::{canary, capacity};

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
    let mut failing = false;
    let mut canary_failing = false;
    let mut capacity_failing = false;
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
                if failing {
                    tracing::info!("queued task instances can be read again");
                    failing = false;
                }
                // Each of the others is evidence of its own: one that cannot
                // be read leaves the queued task instances judged.
                snapshot.capacity = match capacity {
                    Ok(capacity) => Some(capacity),
                    Err(e) => {
                        if !capacity_failing {
                            tracing::warn!(error = %crate::secret::scrub(&e.to_string()), "cannot count the executors' slots; their rule waits");
                            capacity_failing = true;
                        }
                        None
                    }
                };
                capacity_failing &= snapshot.capacity.is_none();
                snapshot.canary = match canary {
                    Ok(canary) => {
                        if canary_failing {
                            tracing::info!("the canary's task instances can be read again");
                            canary_failing = false;
                        }
                        Some(canary)
                    }
                    Err(e) => {
                        if !canary_failing {
                            tracing::warn!(error = %crate::secret::scrub(&e.to_string()), "cannot read the canary's task instances; its rule waits");
                            canary_failing = true;
                        }
                        None
                    }
                };
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
                if !failing {
                    tracing::warn!(error = %crate::secret::scrub(&why), "cannot read queued task instances; their rule waits");
                    failing = true;
                }
                board.set(None);
            }
        }
    }
}
