//! `Aggregator`: keeps the latest verdict per executor, writes verdicts and
//! heartbeats to the Jobs table, and publishes the [`HealthReport`].
//!
//! - Every `heartbeat_interval` it writes every changed verdict and this
//!   session's heartbeats in one transaction of at most two statements.
//! - Every `refresh_interval` it reads the rows a report needs and publishes a new
//!   report on a `watch` channel; readers never wait on the database or on this
//!   actor's mailbox.
//! - When the database is unreachable it keeps every verdict, logs once per
//!   outage, retries with back-off, and writes the latest verdicts when the
//!   database returns. Nothing is lost and nothing panics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::prelude::*;
use chrono::Utc;
use sea_orm::DatabaseConnection;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::job::ExecutorHealth;
use crate::report::{HealthReport, JobRows, Thresholds};
use crate::storage::{self, Session, VerdictRow};

use super::supervisor::NewVerdict;

/// The longest wait between two write attempts while the database is down.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(30);

/// Counters of the aggregator's work, read without asking it.
#[derive(Debug, Default)]
pub struct AggregatorStats {
    /// Flushes that committed.
    pub flushes: AtomicU64,
    /// Flushes that failed (the database was unreachable or refused).
    pub flush_failures: AtomicU64,
    /// Statements the last committed flush ran.
    pub last_flush_statements: AtomicU64,
    /// Verdicts the last committed flush wrote.
    pub last_flush_verdicts: AtomicU64,
    /// How long the last committed flush took, in microseconds.
    pub last_flush_micros: AtomicU64,
    /// Reads that failed (the report then says `metadatabase` unhealthy).
    pub refresh_failures: AtomicU64,
}

/// How often the aggregator writes and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregatorSettings {
    /// How often verdicts and this session's heartbeats are written.
    pub heartbeat_interval: Duration,
    /// How often the table is read back and a report published.
    pub refresh_interval: Duration,
    /// How old a row may be before its component counts as dead.
    pub thresholds: Thresholds,
}

/// One executor's row and its latest verdict.
#[derive(Debug, Clone)]
struct ExecutorRow {
    job_id: i32,
    health: ExecutorHealth,
    checked_at: Option<chrono::DateTime<Utc>>,
    /// Bumped by every verdict; the row needs writing while it differs from `written`.
    version: u64,
    written: u64,
}

/// An outage as seen by one kind of work (writes or reads).
#[derive(Debug, Default)]
struct Outage {
    since: Option<Instant>,
    next_attempt: Option<Instant>,
    backoff: Duration,
}

impl Outage {
    fn ready(&self) -> bool {
        self.next_attempt.is_none_or(|at| Instant::now() >= at)
    }

    /// Records a failure; true the first time in an outage (log it then only).
    fn failed(&mut self, base: Duration) -> bool {
        let first = self.since.is_none();
        self.since.get_or_insert_with(Instant::now);
        self.backoff = if first {
            base
        } else {
            (self.backoff * 2).min(MAX_RETRY_BACKOFF)
        };
        self.next_attempt = Some(Instant::now() + self.backoff);
        first
    }

    /// Records a success; the outage's length if one just ended.
    fn succeeded(&mut self) -> Option<Duration> {
        self.next_attempt = None;
        self.since.take().map(|since| since.elapsed())
    }
}

/// The actor that owns this session's rows and publishes the report.
pub struct Aggregator {
    db: DatabaseConnection,
    session: Session,
    settings: AggregatorSettings,
    rows: Vec<ExecutorRow>,
    reports: watch::Sender<Arc<HealthReport>>,
    /// The rows of the last successful read, kept when a read fails.
    last_read: JobRows,
    flushing: bool,
    refreshing: bool,
    writes: Outage,
    reads: Outage,
    stats: Arc<AggregatorStats>,
}

impl Aggregator {
    /// An aggregator for rows already registered (`job_ids`, in executor order).
    pub fn new(
        db: DatabaseConnection,
        session: Session,
        settings: AggregatorSettings,
        job_ids: Vec<i32>,
        reports: watch::Sender<Arc<HealthReport>>,
        last_read: JobRows,
        stats: Arc<AggregatorStats>,
    ) -> Self {
        let rows = job_ids
            .into_iter()
            .map(|job_id| ExecutorRow {
                job_id,
                health: ExecutorHealth::Unknown,
                checked_at: None,
                version: 0,
                written: 0,
            })
            .collect();
        Self {
            db,
            session,
            settings,
            rows,
            reports,
            last_read,
            flushing: false,
            refreshing: false,
            writes: Outage::default(),
            reads: Outage::default(),
            stats,
        }
    }

    /// The verdicts not yet written, with the version each one carries.
    fn pending(&self) -> Vec<(usize, u64, VerdictRow)> {
        self.rows
            .iter()
            .enumerate()
            .filter(|(_, row)| row.version != row.written)
            .filter_map(|(index, row)| {
                row.checked_at.map(|checked_at| {
                    (
                        index,
                        row.version,
                        VerdictRow {
                            id: row.job_id,
                            health: row.health.clone(),
                            checked_at,
                        },
                    )
                })
            })
            .collect()
    }

    /// Writes heartbeats and pending verdicts, unless a flush is running or the
    /// database is in back-off.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        if self.flushing || !self.writes.ready() {
            return;
        }
        self.flushing = true;
        let pending = self.pending();
        let db = self.db.clone();
        let session = self.session.clone();
        let started = Instant::now();
        let write = async move {
            let verdicts: Vec<VerdictRow> = pending.iter().map(|(_, _, v)| v.clone()).collect();
            let result = storage::flush(&db, &session, Utc::now(), &verdicts).await;
            (pending, result)
        };
        ctx.spawn(
            write
                .into_actor(self)
                .map(move |(pending, result), act, _| {
                    act.flushing = false;
                    act.flushed(pending, result, started.elapsed());
                }),
        );
    }

    fn flushed(
        &mut self,
        pending: Vec<(usize, u64, VerdictRow)>,
        result: crate::Result<usize>,
        took: Duration,
    ) {
        match result {
            Ok(statements) => {
                for (index, version, _) in &pending {
                    self.rows[*index].written = *version;
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
                if let Some(outage) = self.writes.succeeded() {
                    tracing::info!(
                        after = ?outage,
                        verdicts = pending.len(),
                        "the database is back; latest verdicts written"
                    );
                }
            }
            Err(e) => {
                self.stats.flush_failures.fetch_add(1, Ordering::Relaxed);
                if self.writes.failed(self.settings.heartbeat_interval) {
                    tracing::error!(error = %e, "cannot write to the database; keeping verdicts and retrying");
                } else {
                    tracing::debug!(error = %e, "write retry failed");
                }
            }
        }
    }

    /// Reads the rows and publishes a new report.
    fn refresh(&mut self, ctx: &mut Context<Self>) {
        if self.refreshing || !self.reads.ready() {
            return;
        }
        self.refreshing = true;
        let db = self.db.clone();
        let horizon = self.settings.thresholds.longest();
        let read = async move { storage::report_rows(&db, Utc::now(), horizon).await };
        ctx.spawn(read.into_actor(self).map(|result, act, _| {
            act.refreshing = false;
            let ok = match result {
                Ok(rows) => {
                    act.last_read = rows;
                    if let Some(outage) = act.reads.succeeded() {
                        tracing::info!(after = ?outage, "the database answers reads again");
                    }
                    true
                }
                Err(e) => {
                    act.stats.refresh_failures.fetch_add(1, Ordering::Relaxed);
                    if act.reads.failed(act.settings.refresh_interval) {
                        tracing::error!(error = %e, "cannot read the job table; reporting metadatabase unhealthy");
                    }
                    false
                }
            };
            act.publish(ok);
        }));
    }

    fn publish(&mut self, metadatabase_ok: bool) {
        let report = HealthReport::build(
            &self.last_read,
            metadatabase_ok,
            &self.settings.thresholds,
            Utc::now(),
        );
        self.reports.send_if_modified(|current| {
            if current.json() == report.json() {
                false
            } else {
                *current = Arc::new(report);
                true
            }
        });
    }
}

impl Actor for Aggregator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.settings.heartbeat_interval, |act, ctx| act.flush(ctx));
        ctx.run_interval(self.settings.refresh_interval, |act, ctx| act.refresh(ctx));
    }
}

impl Handler<NewVerdict> for Aggregator {
    type Result = ();

    fn handle(&mut self, verdict: NewVerdict, _: &mut Context<Self>) {
        let Some(row) = self.rows.get_mut(verdict.executor) else {
            return;
        };
        row.health = verdict.health;
        row.checked_at = Some(verdict.checked_at);
        row.version += 1;
    }
}

/// Graceful end: write the last verdicts, then end this session's rows with
/// `success` and `end_date`. The actor stops afterwards.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "crate::Result<()>")]
pub struct Finish;

impl Handler<Finish> for Aggregator {
    type Result = ResponseActFuture<Self, crate::Result<()>>;

    fn handle(&mut self, _: Finish, _: &mut Context<Self>) -> Self::Result {
        let pending = self.pending();
        let db = self.db.clone();
        let session = self.session.clone();
        let finish = async move {
            let verdicts: Vec<VerdictRow> = pending.into_iter().map(|(_, _, v)| v).collect();
            storage::flush(&db, &session, Utc::now(), &verdicts).await?;
            let ended = storage::finish(&db, &session, Utc::now()).await?;
            tracing::info!(rows = ended, "executor rows ended with success");
            Ok(())
        };
        Box::pin(finish.into_actor(self).map(|result, _, ctx| {
            ctx.stop();
            result
        }))
    }
}
