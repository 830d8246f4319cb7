//! The reads: the first read of an aggregator (every live row, its own rows'
//! verdicts after a restart, the history's latest transitions), then, every
//! `refresh_interval`, the rows of other sessions that changed (every
//! [`FULL_READ_EVERY`], every live row), and after each full read the
//! history's latest transitions, apart.

use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::connect;
use crate::entity::job;
use crate::history::{self, Transition};
use crate::job::JobState;
use crate::storage::{self, RowsRead};

use super::{Aggregator, in_task};

/// How far before the previous read's start a read looks for changed rows:
/// a write whose time was taken before that read but which committed after
/// it, or a writer whose clock runs a little behind this one's.
pub const READ_LOOKBACK: Duration = Duration::from_secs(1);

/// How often a refresh reads every live row instead of the changed ones: what
/// the changed rows cannot show (a writer's clock further behind than
/// [`READ_LOOKBACK`], a state changed without a time) shows by then. A third of
/// Airflow's 30 s thresholds, so that no live row looks dead meanwhile.
pub const FULL_READ_EVERY: Duration = Duration::from_secs(10);

/// What the first read of an aggregator brings: the other rows, and, after a
/// restart, this session's rows as the table holds them (their verdicts).
type FirstRead = (
    crate::Result<RowsRead>,
    crate::Result<Option<Vec<job::Model>>>,
    crate::Result<Vec<Transition>>,
);

/// [`READ_LOOKBACK`] as chrono counts it.
fn lookback() -> chrono::Duration {
    chrono::Duration::from_std(READ_LOOKBACK).unwrap_or_default()
}

impl Aggregator {
    /// The first read of this aggregator: every live row of other sessions, and,
    /// when it is a restarted one, this session's own rows (to take their
    /// verdicts back; at the first start they are as registered). Nothing is
    /// published before it ends.
    pub(super) fn start_first_read(&mut self, ctx: &mut Context<Self>) {
        // Nothing runs before the first read: both start.
        self.reads.start();
        self.history_read.start();
        let restarted = self.stats.restarts.aggregator.load(Ordering::Relaxed) > 0;
        let (db, session) = (self.db.clone(), self.session.clone());
        let horizon = self.settings.thresholds.longest();
        let timeout = connect::full_read_timeout(self.settings.refresh_interval);
        let started = Utc::now();
        let (tasks, own_tasks) = (self.tasks.clone(), self.tasks.clone());
        // The first report waits for the history (at most its timeout), so that
        // this session's first transitions and the rows' `since` are in it.
        let history = self.latest_transitions();
        let read = async move {
            let (others, own) = (db.clone(), session.clone());
            let others = in_task(&tasks, "read", timeout, async move {
                storage::read_for_report(&others, &session, None, started, horizon).await
            });
            let own = async move {
                if restarted {
                    in_task(&own_tasks, "read", timeout, async move {
                        storage::session_rows(&db, &own).await
                    })
                    .await
                    .map(Some)
                } else {
                    Ok(None)
                }
            };
            let read: FirstRead = tokio::join!(others, own, history);
            read
        };
        ctx.spawn(
            read.into_actor(self)
                .map(move |read, act, _| act.on_first_read_done(read, started)),
        );
    }

    /// Takes the first read in, then publishes the first report.
    fn on_first_read_done(&mut self, (others, own, history): FirstRead, started: DateTime<Utc>) {
        self.take_back(own);
        self.on_rows_read(others, started);
        self.on_history_read_done(history);
        self.stage.first_read_done();
        self.publish();
    }

    /// Reads what changed in other sessions' rows (or every live row, when a
    /// full read is due) and publishes the report.
    pub(super) fn start_refresh(&mut self, ctx: &mut Context<Self>) {
        if !self.stage.refreshes() || !self.reads.start() {
            return;
        }
        let full_due = self
            .last_full_read
            .is_none_or(|at| at.elapsed() >= FULL_READ_EVERY);
        let since = match self.read_since {
            Some(since) if !full_due => Some(since - lookback()),
            _ => None,
        };
        let (db, session) = (self.db.clone(), self.session.clone());
        let horizon = self.settings.thresholds.longest();
        let timeout = match since {
            Some(_) => connect::read_timeout(self.settings.refresh_interval),
            None => connect::full_read_timeout(self.settings.refresh_interval),
        };
        let started = Utc::now();
        let tasks = self.tasks.clone();
        let read = in_task(&tasks, "read", timeout, async move {
            storage::read_for_report(&db, &session, since, started, horizon).await
        });
        ctx.spawn(
            read.into_actor(self)
                .map(move |result, act, ctx| act.on_refresh_done(ctx, result, started)),
        );
    }

    /// Takes a refresh in: after a full read the history is read, the report
    /// is published soon, and a read that ends an outage brings a write at once.
    fn on_refresh_done(
        &mut self,
        ctx: &mut Context<Self>,
        result: crate::Result<RowsRead>,
        started: DateTime<Utc>,
    ) {
        let full = matches!(&result, Ok(read) if read.full);
        let back = self.on_rows_read(result, started);
        if full {
            self.start_history_read(ctx);
        }
        self.publish_soon(ctx);
        // Reads went through again: the database is back, so writes that
        // were backing off are made at once (a heartbeat, every verdict held).
        if back && self.writes.database_back() {
            self.heartbeat(ctx);
        }
    }

    /// Reads the history's latest transitions, after each full read but the
    /// first (which waits for them): other hosts' rows' `since` and
    /// `previous`, and, until one succeeds, the state the history holds for
    /// this session's rows. A task of its own with a timeout of its own, apart
    /// from the read of the rows: its work grows with the
    /// history (2.3 s for 2,000,000 transitions on this project's Postgres), and
    /// a history slow or failing to read must hold up neither the report nor
    /// `metadatabase`. Until it is read, rows keep the `since` they had and
    /// this session's transitions wait (they are worked out once the state the
    /// history holds is known); it is tried again at the next full read.
    fn start_history_read(&mut self, ctx: &mut Context<Self>) {
        if self.stage.is_finished() || !self.history_read.start() {
            return;
        }
        let read = self.latest_transitions();
        ctx.spawn(read.into_actor(self).map(|result, act, ctx| {
            if act.on_history_read_done(result) {
                act.publish_soon(ctx);
            }
        }));
    }

    /// The read of the history's latest transitions, started now as a task of
    /// its own, with the full read's timeout.
    fn latest_transitions(&self) -> impl Future<Output = crate::Result<Vec<Transition>>> + 'static {
        let db = self.db.clone();
        let timeout = connect::full_read_timeout(self.settings.refresh_interval);
        in_task(&self.tasks, "history read", timeout, async move {
            history::latest(&db).await
        })
    }

    /// Takes a read of the history's latest transitions in, or records its
    /// failure. True when it was taken in.
    fn on_history_read_done(&mut self, result: crate::Result<Vec<Transition>>) -> bool {
        match result {
            Ok(latest) => {
                if self.history_read.succeeded() {
                    tracing::info!("the history's latest transitions are read again");
                }
                self.take_history(latest);
                true
            }
            Err(e) => {
                self.stats
                    .history_read_failures
                    .fetch_add(1, Ordering::Relaxed);
                if self.history_read.failed() {
                    tracing::warn!(error = %e, "cannot read the history's latest transitions; `since` and `previous` wait for them");
                }
                false
            }
        }
    }

    /// Takes a read's rows in, or records its failure (`metadatabase` is then
    /// unhealthy until a read succeeds). True when it ended an outage of reads.
    fn on_rows_read(&mut self, result: crate::Result<RowsRead>, started: DateTime<Utc>) -> bool {
        match result {
            Ok(read) => {
                let stats = &self.stats;
                stats.reads.fetch_add(1, Ordering::Relaxed);
                stats
                    .last_read_rows
                    .store(read.rows.len() as u64, Ordering::Relaxed);
                if read.full {
                    self.others.clear();
                    self.last_full_read = Some(Instant::now());
                }
                // Each type's most recent row is read at every refresh: it is
                // also an instance, as fresh as the top-level heartbeat it gives,
                // so that a component and its instances agree in one report
                // (a heartbeat whose commit came later than the read's lookback
                // would otherwise wait for the next full read).
                let newest = read.most_recent.iter().flatten().filter(|latest| {
                    self.others.get(&latest.id).is_none_or(|kept| {
                        kept.latest_heartbeat < latest.latest_heartbeat
                            || kept.executor_health_checked_at < latest.executor_health_checked_at
                    })
                });
                let newest: Vec<job::Model> = newest
                    .filter(|latest| !read.rows.iter().any(|r| r.id == latest.id))
                    .cloned()
                    .collect();
                self.most_recent = read.most_recent;
                for row in read.rows.into_iter().chain(newest) {
                    let open = row.state.as_deref() == Some(JobState::Running.as_str())
                        && row.end_date.is_none()
                        && row.latest_heartbeat.is_some();
                    if open && !self.own_ids.contains_key(&row.id) {
                        self.others.insert(row.id, row);
                    } else {
                        self.others.remove(&row.id);
                    }
                }
                // Rows past the longest threshold are dead whatever their type.
                let horizon = chrono::Duration::from_std(self.settings.thresholds.longest())
                    .unwrap_or(chrono::Duration::MAX);
                self.others
                    .retain(|_, row| row.latest_heartbeat.is_some_and(|h| started - h < horizon));
                self.read_since = Some(started);
                let ended = self.reads.succeeded();
                if let Some(outage) = ended {
                    tracing::info!(after = ?outage, "the database answers reads again");
                }
                ended.is_some()
            }
            Err(e) => {
                self.stats.refresh_failures.fetch_add(1, Ordering::Relaxed);
                if self.reads.failed() {
                    tracing::error!(error = %e, "cannot read the job table; reporting metadatabase unhealthy");
                }
                false
            }
        }
    }
}
