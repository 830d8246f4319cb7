//! The flush: every `heartbeat_interval` one transaction writes this session's
//! heartbeats, the verdicts that changed and the transitions queued (and, at
//! most once every `prune_every`, prunes the history). A failed flush keeps
//! everything for the next; [`Attempts`](super::outage::Attempts) spaces the
//! retries while the database is down.

use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::history::{self, HistoryWrite};
use crate::storage::{self, Flushed, VerdictRow};
use crate::{connect, duration};

use super::{Aggregator, in_task};

/// How long the last write at shutdown is asked again while the database does
/// not take it: within the 30 s that systemd's `TimeoutStopSec` allows by
/// default (and the Debian unit sets), leaving the rest of the stop its time.
pub const LAST_WRITE_FOR: Duration = Duration::from_secs(20);

/// What a flush wrote to the history: the last transition's sequence number,
/// how many transitions, and whether it pruned.
type HistoryWritten = (Option<u64>, usize, bool);

impl Aggregator {
    /// One heartbeat: this session's rows are alive now, and every verdict that
    /// held since the last heartbeat is checked as of now. Then the rows are
    /// written, and the report shows them at once.
    pub(super) fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        if self.stage.is_finished() {
            return;
        }
        let now = storage::to_micros(Utc::now());
        for own in &mut self.own {
            own.row.latest_heartbeat = Some(now);
            if own.fresh {
                own.fresh = false;
            } else if own.row.executor_health_checked_at.is_some() {
                own.row.executor_health_checked_at = Some(now);
            }
        }
        self.publish_soon(ctx);
        self.start_flush(ctx, now);
    }

    /// Writes heartbeats and pending verdicts, unless a flush is running or the
    /// database is in back-off.
    fn start_flush(&mut self, ctx: &mut Context<Self>, now: DateTime<Utc>) {
        if !self.writes.start() {
            return;
        }
        let pending = self.pending();
        let verdicts: Vec<VerdictRow> = pending.iter().map(|(_, _, v)| v.clone()).collect();
        let (history, last_transition) = self.history_write(now, true);
        if history.prune_before.is_some() {
            // Counted from the attempt: a prune that fails (or outlasts the
            // write's timeout) is tried again in `prune_every`, not at every
            // flush, so it can never keep the heartbeats from being written.
            self.last_prune = Some(Instant::now());
        }
        let written = (
            last_transition,
            history.transitions.len(),
            history.prune_before.is_some(),
        );
        let (db, session) = (self.db.clone(), self.session.clone());
        let timeout = connect::write_timeout(self.settings.heartbeat_interval);
        let started = Instant::now();
        let tasks = self.tasks.clone();
        let write = in_task(&tasks, "write", timeout, async move {
            history::flush_with_history(&db, &session, now, &verdicts, &history).await
        });
        ctx.spawn(write.into_actor(self).map(move |result, act, ctx| {
            let back = act.on_flush_done(pending, written, result, started.elapsed());
            if let Some(waiter) = act.flush_waiter.take() {
                let _ = waiter.send(());
            }
            // Writes went through again: the database is back, so reads that
            // were backing off are tried at once, not at the end of their back-off.
            if back && act.reads.database_back() {
                act.start_refresh(ctx);
            }
        }));
    }

    /// Takes a flush's result: on success the verdicts and transitions it
    /// wrote are done; on failure all stay for the next. True when it ended
    /// an outage of writes.
    fn on_flush_done(
        &mut self,
        pending: Vec<(usize, u64, VerdictRow)>,
        (last_transition, transitions, pruned): HistoryWritten,
        result: crate::Result<Flushed>,
        took: Duration,
    ) -> bool {
        match result {
            Ok(Flushed { statements, open }) => {
                let registered = self.own.len() as u64;
                if open < registered {
                    self.ousted(registered - open, registered);
                }
                for (index, version, _) in &pending {
                    self.own[*index].written = *version;
                }
                self.written_up_to(last_transition, transitions);
                if pruned {
                    self.stats.history_prunes.fetch_add(1, Ordering::Relaxed);
                }
                let stats = &self.stats;
                stats.flushes.fetch_add(1, Ordering::Relaxed);
                stats
                    .last_flush_statements
                    .store(statements as u64, Ordering::Relaxed);
                stats
                    .last_flush_verdicts
                    .store(pending.len() as u64, Ordering::Relaxed);
                stats.last_flush_micros.store(
                    u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
                    Ordering::Relaxed,
                );
                let ended = self.writes.succeeded();
                if let Some(outage) = ended {
                    tracing::info!(
                        after = ?outage,
                        verdicts = pending.len(),
                        "the database is back; latest verdicts written"
                    );
                }
                ended.is_some()
            }
            Err(e) => {
                self.stats.flush_failures.fetch_add(1, Ordering::Relaxed);
                if self.writes.failed() {
                    tracing::error!(error = %e, "cannot write to the database; keeping verdicts and retrying");
                } else {
                    tracing::debug!(error = %e, "write retry failed");
                }
                false
            }
        }
    }

    /// Another writer ended `ended` of this session's `registered` rows: its
    /// verdicts would no longer land, so it says so, loudly and once, and
    /// the actors' thread stops (the service exits with the same words).
    fn ousted(&self, ended: u64, registered: u64) {
        let hostname = &self.session.hostname;
        let why = format!(
            "another writer ended {ended} of the {registered} executor rows this Overseer \
             keeps for hostname {hostname:?} (another Overseer given the same hostname took \
             them over?): this one stops, as its verdicts would no longer be written; give \
             each Overseer a hostname of its own ([supervisor] hostname)"
        );
        if self.settings.ousted.say(why.clone()) {
            tracing::error!("{why}");
        }
    }

    /// Whether this flush should prune the history.
    fn prune_due(&self) -> bool {
        let settings = self.settings.history;
        !settings.retention.is_zero()
            && self
                .last_prune
                .is_none_or(|at| at.elapsed() >= settings.prune_every)
    }

    /// What the next flush writes to the history: every transition queued
    /// (and the sequence number of the last), and a prune when one is due.
    fn history_write(&self, now: DateTime<Utc>, prune: bool) -> (HistoryWrite, Option<u64>) {
        let prune_before = if prune && self.prune_due() {
            chrono::Duration::from_std(self.settings.history.retention)
                .ok()
                .and_then(|retention| steady(now).checked_sub_signed(retention))
        } else {
            None
        };
        let unwritten = self.unwritten.lock();
        let write = HistoryWrite {
            transitions: unwritten
                .queued
                .iter()
                .map(|q| q.transition.clone())
                .collect(),
            costs: unwritten
                .queued
                .iter()
                .enumerate()
                .filter_map(|(position, q)| q.span.map(|span| (position, span)))
                .collect(),
            routes: Some(self.settings.routes.clone()),
            prune_before,
        };
        (write, unwritten.queued.back().map(|q| q.seq))
    }

    /// The last write at shutdown: the verdicts and transitions not yet
    /// written, then this session's rows ended with `success`. A database
    /// that does not take it (locked, away) is asked again for
    /// [`LAST_WRITE_FOR`]; past that the error says the rows stay `running`.
    pub(super) fn last_write(&mut self) -> impl Future<Output = crate::Result<()>> + use<> {
        let pending = self.pending();
        let (history, _) = self.history_write(Utc::now(), false);
        let (db, session) = (self.db.clone(), self.session.clone());
        let timeout = connect::write_timeout(self.settings.heartbeat_interval);
        let tasks = self.tasks.clone();
        async move {
            let verdicts: Vec<VerdictRow> = pending.into_iter().map(|(_, _, v)| v).collect();
            let started = Instant::now();
            let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(2));
            let (mut flushed, mut warned) = (false, false);
            loop {
                let attempt = async {
                    if !flushed {
                        let (db, session) = (db.clone(), session.clone());
                        let (verdicts, history) = (verdicts.clone(), history.clone());
                        in_task(&tasks, "write", timeout, async move {
                            history::flush_with_history(
                                &db,
                                &session,
                                Utc::now(),
                                &verdicts,
                                &history,
                            )
                            .await
                        })
                        .await?;
                        flushed = true;
                    }
                    let (db, session) = (db.clone(), session.clone());
                    in_task(&tasks, "write", timeout, async move {
                        storage::finish(&db, &session, Utc::now()).await
                    })
                    .await
                };
                let error = match attempt.await {
                    Ok(ended) => {
                        tracing::info!(rows = ended, "executor rows ended with success");
                        return Ok(());
                    }
                    Err(error) => error,
                };
                let left = LAST_WRITE_FOR.saturating_sub(started.elapsed());
                if left.is_zero() {
                    tracing::error!(
                        error = %crate::secret::scrub(&error.to_string()),
                        "the last write did not succeed within {}: this session's rows stay \
                         running until the next start ends them as failed",
                        duration::short(LAST_WRITE_FOR)
                    );
                    return Err(error);
                }
                if !warned {
                    warned = true;
                    tracing::warn!(
                        error = %crate::secret::scrub(&error.to_string()),
                        "the last write failed; asking again for up to {}",
                        duration::short(LAST_WRITE_FOR)
                    );
                }
                tokio::time::sleep(backoff.next_delay().min(left)).await;
            }
        }
    }
}

/// `now` as the prune counts it: never later than this process's first
/// reading of the wall clock plus the monotonic time since. A wall clock
/// stepped forward past the retention (set right, a VM resumed) once made the
/// next prune delete the whole history; stepped back, `now` is earlier and
/// the prune deletes less, never more.
fn steady(now: DateTime<Utc>) -> DateTime<Utc> {
    static ANCHOR: std::sync::OnceLock<(DateTime<Utc>, std::time::Instant)> =
        std::sync::OnceLock::new();
    let &(wall, mono) = ANCHOR.get_or_init(|| (Utc::now(), std::time::Instant::now()));
    steady_from(now, wall, mono.elapsed())
}

/// [`steady`] with its anchor given: the earlier of `now` and `wall` +
/// `elapsed`.
fn steady_from(now: DateTime<Utc>, wall: DateTime<Utc>, elapsed: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(elapsed)
        .ok()
        .and_then(|elapsed| wall.checked_add_signed(elapsed))
        .map_or(now, |counted| now.min(counted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_clock_stepped_forward_does_not_age_the_history() {
        let wall = DateTime::parse_from_rfc3339("2026-12-06T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let hour = Duration::from_secs(3600);
        let later = wall + chrono::Duration::hours(1);
        // The clock as it should be: as read.
        assert_eq!(steady_from(later, wall, hour), later);
        // Stepped 30 days ahead an hour in: counted as an hour in.
        let stepped = later + chrono::Duration::days(30);
        assert_eq!(steady_from(stepped, wall, hour), later);
        // Stepped back: the earlier reading, so the prune deletes less.
        let back = wall - chrono::Duration::days(1);
        assert_eq!(steady_from(back, wall, hour), back);
    }
}
