//! One owner per (hostname, executor): at start-up, an open row of this
//! hostname for one of our executors is either a crash's leftover, closed as
//! `failed`, or the live row of another Overseer given the same hostname, and
//! then this one refuses to start, naming it. (Closing a live owner's rows, as
//! start-up once did, left that one running with its heartbeats landing
//! nowhere, and logging nothing.)
//!
//! Told apart by the heartbeat: a row whose last heartbeat is older than
//! [`window`] is a crash's. A fresher one is watched for that long (on this
//! process's monotonic clock, so another host's clock does not matter): a
//! heartbeat that moves is a live owner's; one that does not is a crash's
//! (a restart at once after a `SIGKILL` waits at most that long).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;

use crate::error::{Error, Result};
use crate::storage::{self, ExecutorIdentity, OpenRow};

/// How long a live owner's heartbeat may stand still: two of its intervals
/// (taken to be ours) and a second for a slow flush.
pub(super) fn window(heartbeat_interval: Duration) -> Duration {
    heartbeat_interval * 2 + Duration::from_secs(1)
}

/// The open rows of this hostname for `executors` that a crash left: every
/// one, once none of them is found heartbeating; or the error that names the
/// live owner.
pub(super) async fn crashed_rows(
    db: &impl ConnectionTrait,
    hostname: &str,
    executors: &[ExecutorIdentity],
    heartbeat_interval: Duration,
    now: DateTime<Utc>,
) -> Result<Vec<i32>> {
    let window = window(heartbeat_interval);
    let first = storage::open_rows(db, hostname, executors).await?;
    let fresh = |row: &OpenRow| {
        row.latest_heartbeat
            .is_some_and(|beat| (now - beat).to_std().map_or(true, |age| age < window))
    };
    if !first.iter().any(fresh) {
        return Ok(first.into_iter().map(|row| row.id).collect());
    }
    tracing::info!(
        hostname,
        "a row of this hostname left open heartbeat less than {0} ago: watching it \
         for {0} to tell a crash's rows from another Overseer's",
        crate::duration::short(window),
    );
    let started = Instant::now();
    let step =
        (heartbeat_interval / 4).clamp(Duration::from_millis(50), Duration::from_millis(500));
    loop {
        tokio::time::sleep(step).await;
        let now_rows = storage::open_rows(db, hostname, executors).await?;
        if let Some((was, is)) = now_rows.iter().find_map(|is| {
            let was = first.iter().find(|was| was.id == is.id)?;
            (is.latest_heartbeat > was.latest_heartbeat).then_some((was, is))
        }) {
            return Err(live_owner(hostname, was, is));
        }
        if started.elapsed() >= window {
            return Ok(now_rows.into_iter().map(|row| row.id).collect());
        }
    }
}

fn live_owner(hostname: &str, was: &OpenRow, is: &OpenRow) -> Error {
    let at = |beat: Option<DateTime<Utc>>| {
        beat.map_or_else(
            || "never".to_owned(),
            |b| b.format("%H:%M:%S%.3f").to_string(),
        )
    };
    Error::Runtime(format!(
        "another Overseer with hostname {hostname:?} supervises {}: its row {} heartbeat \
         at {} and again at {} UTC; give this one a hostname of its own ([supervisor] \
         hostname) or stop that one",
        is.key.label(),
        is.id,
        at(was.latest_heartbeat),
        at(is.latest_heartbeat),
    ))
}
