//! `Aggregator`: keeps the latest verdict per executor, writes verdicts and
//! heartbeats to the Jobs table, and publishes the [`HealthReport`].
//!
//! - **Its own rows from memory.** The report shows this process's executor rows
//!   as the aggregator holds them (the latest verdicts and heartbeats, written
//!   yet or not), merged over what it last read of every other row. So a
//!   verdict that changed is in the report (HTTP, SSE, `/metrics`) within
//!   [`PUBLISH_DELAY`] of being made, whatever `heartbeat_interval` and
//!   `refresh_interval` are, and while the database is away too.
//! - **Writes follow the change.** Every `heartbeat_interval` one transaction
//!   writes this session's heartbeats (one statement, which also moves every
//!   held verdict's `executor_health_checked_at`) and, in a second statement,
//!   only the verdicts that changed (health or reason). See [`storage`] for
//!   what `executor_health_checked_at` means.
//! - **Reads follow the change.** Every `refresh_interval` it reads the rows of
//!   other sessions that changed since its last read (heartbeat, end or verdict
//!   at or after that read's start, less [`READ_LOOKBACK`]), never its own; every
//!   [`FULL_READ_EVERY`] it reads every live row again. The JSON is rendered
//!   only when the report says something new.
//! - **Outages.** Each write and read has a timeout of its own
//!   ([`connect::read_timeout`] for a refresh, longer ones for a flush and a full
//!   read, whose work grows with the executors), so a database that stops
//!   answering turns `metadatabase` unhealthy within a refresh and its read's
//!   timeout, not after the pool's 10 s. The aggregator keeps every verdict,
//!   logs once per outage, retries with back-off, and writes the latest
//!   verdicts when the database returns.
//! - **Recovery as quick as failure.** Back-off only spaces attempts while the
//!   database is down. Reads back off to at most [`read_backoff_ceiling`] (two
//!   refreshes), so `metadatabase` is healthy again within a refresh or two of
//!   the database's return; and either kind of work that succeeds proves the
//!   database is back, so the other, if it was backing off, is tried at once
//!   (a write that goes through brings a read at once, and the reverse).
//! - **History.** A new verdict whose state (`healthy`, `unhealthy`,
//!   `unknown`; not its reason) differs from the one the history holds for the
//!   row queues a transition ([`crate::history`]); the next flush inserts the
//!   queue in the verdict's own transaction, and a failed flush keeps it (at
//!   most [`history::MAX_PENDING`]). The queue is [`UnwrittenTransitions`],
//!   kept by the actors' thread: an aggregator that stops or panics leaves it
//!   to the one started in its place, which writes it. After each full read the history's
//!   latest transitions are read apart, with a timeout of their own, so a
//!   history slow to read holds up neither the report nor `metadatabase`: the
//!   first gives the state the history holds for this session's rows (so
//!   `since` and `previous` survive restarts), each gives other hosts' rows
//!   theirs. Old transitions are pruned by a flush, at most once every
//!   `prune_every`.
//! - **Risky work in tasks of its own.** Each database call runs as a task of its
//!   own: a driver that panics fails that write or read, not the aggregator.
//!   Should the aggregator itself stop or panic, the actors' thread starts a new
//!   one ([`crate::overseer`]), which takes its own rows' verdicts back from the
//!   table, or from the last published report when that shows a later one (made,
//!   and not yet written, by the aggregator that stopped) or the table cannot be
//!   read; and the transitions it had queued ([`UnwrittenTransitions`]).

//!
//! # Layout
//! One module per job, each an `impl Aggregator` block over the fields below:
//! - [`own`]: this session's rows and their cache (what needs writing, the
//!   verdicts a restarted aggregator takes back).
//! - [`flush`]: the heartbeat and the flush (`start_flush`, `on_flush_done`),
//!   and the last write at shutdown.
//! - [`read`]: the first read, the refreshes and the read of the history
//!   (`start_*`, `on_*_done`).
//! - [`transitions`]: the queue of transitions for the history, and what the
//!   history's latest transitions tell.
//! - [`publish`]: building the report and spacing its publication.
//! - [`outage`]: one kind of database work as a phase with its back-off.
//!
//! # Phases
//! Each activity has a phase, changed only by its own methods:
//!
//! ```text
//! stage:       FirstRead ──first read done──▶ Serving ──Finish──▶ Finished
//!                  └────────────Finish────────────────────────────▲
//! writes/reads: Idle ──start──▶ Running ──succeeded──▶ Idle
//!                                  └──failed──▶ FailedUntil(t) ──start, t passed──▶ Running
//!                               FailedUntil(t) ──the other kind succeeded──▶ Idle
//! history read: Idle/Failed ──start──▶ Running ──▶ Idle (read) | Failed (logged once)
//! publishing:   Idle ──publish_soon──▶ Scheduled ──PUBLISH_DELAY or spacing──▶ Idle
//! ```
//! `metadatabase` in the report is whether the reads and the writes are both out
//! of an outage.

mod flush;
mod outage;
mod own;
mod publish;
mod read;
mod transitions;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use chrono::{DateTime, Utc};
use sea_orm::DatabaseConnection;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::airflow::routes::Routes;
use crate::entity::job;
use crate::history::HistorySettings;
use crate::report::{ExecutorHealthKind, HealthReport, Thresholds};
use crate::stats::AggregatorStats;
use crate::storage::{self, ExecutorIdentity, Session};

use super::supervisor::NewVerdict;
use outage::Attempts;
use own::OwnRow;
use publish::Publishing;
use transitions::HistoryRead;

pub use outage::{MAX_RETRY_BACKOFF, read_backoff_ceiling};
pub use publish::{PUBLISH_DELAY, PUBLISH_SPACING};
pub use read::{FULL_READ_EVERY, READ_LOOKBACK};
pub use transitions::UnwrittenTransitions;

/// How often the aggregator writes and reads, and what it needs to know of
/// the executors' task instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregatorSettings {
    /// How often verdicts and this session's heartbeats are written.
    pub heartbeat_interval: Duration,
    /// How often the table is read back and a report published.
    pub refresh_interval: Duration,
    /// How old a row may be before its component counts as dead.
    pub thresholds: Thresholds,
    /// How long transitions are kept, and how often old ones are pruned.
    pub history: HistorySettings,
    /// Which executor runs each task instance: to count what an `unhealthy`
    /// span cost ([`crate::airflow::cost`]).
    pub routes: Arc<Routes>,
    /// Where the aggregator says that another writer ended this session's
    /// rows.
    pub ousted: Ousted,
}

/// Whether another writer ended this session's rows (an Overseer on another
/// machine given the same hostname took them over): said once, with why, and
/// the actors' thread and [`crate::Overseer::ousted`] act on it.
#[derive(Debug, Clone)]
pub struct Ousted(Arc<watch::Sender<Option<String>>>);

impl Ousted {
    /// A new one, not ousted, and what watches it.
    pub fn new() -> (Self, watch::Receiver<Option<String>>) {
        let (tx, rx) = watch::channel(None);
        (Self(Arc::new(tx)), rx)
    }

    /// Says why this session's rows are gone; true the first time.
    fn say(&self, why: String) -> bool {
        self.0.send_if_modified(|held| {
            let first = held.is_none();
            if first {
                *held = Some(why);
            }
            first
        })
    }
}

impl PartialEq for Ousted {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Ousted {}

/// Where the aggregator is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The first read runs: nothing is published, and no refresh starts.
    FirstRead,
    /// Writes, reads and publishes.
    Serving,
    /// `Finish` came: no more writes or reads. Reports are still published
    /// once the first read is in (`first_read_done`).
    Finished { first_read_done: bool },
}

impl Stage {
    /// The first read is in (its rows merged, own verdicts taken back).
    fn first_read_done(&mut self) {
        *self = match *self {
            Self::FirstRead | Self::Serving => Self::Serving,
            Self::Finished { .. } => Self::Finished {
                first_read_done: true,
            },
        };
    }

    /// `Finish` came.
    fn finish(&mut self) {
        *self = Self::Finished {
            first_read_done: self.publishes(),
        };
    }

    fn is_finished(self) -> bool {
        matches!(self, Self::Finished { .. })
    }

    /// Reports may be published: the first read is in.
    fn publishes(self) -> bool {
        matches!(
            self,
            Self::Serving
                | Self::Finished {
                    first_read_done: true
                }
        )
    }

    /// Refreshes may start.
    fn refreshes(self) -> bool {
        self == Self::Serving
    }
}

/// The actor that owns this session's rows and publishes the report.
pub struct Aggregator {
    db: DatabaseConnection,
    session: Session,
    settings: AggregatorSettings,
    /// Where the aggregator is in its life.
    stage: Stage,
    /// This session's rows, in executor order.
    own: Vec<OwnRow>,
    /// The index in `own` of each of this session's row ids.
    own_ids: HashMap<i32, usize>,
    /// Where reports go. Shared with the actors' thread, so that readers keep
    /// their channel when the aggregator is restarted.
    reports: Arc<watch::Sender<Arc<HealthReport>>>,
    /// Every other session's rows that may be live, by id, as last read.
    others: BTreeMap<i32, job::Model>,
    /// The most recent job of each type, as last read (this session's included).
    most_recent: [Option<job::Model>; 4],
    /// When the last successful read started (this process's clock): the next
    /// read asks for what changed since then. `None`: read every live row.
    read_since: Option<DateTime<Utc>>,
    /// When the last full read was made.
    last_full_read: Option<Instant>,
    /// The flushes: one at a time, spaced while the database is down.
    writes: Attempts,
    /// `Finish` waits on this for the flush running when it came.
    flush_waiter: Option<oneshot::Sender<()>>,
    /// The reads of the rows: one at a time, spaced while the database is
    /// down. Out of an outage, `metadatabase` is healthy.
    reads: Attempts,
    /// The read of the history's latest transitions.
    history_read: HistoryRead,
    /// Whether a publish is scheduled, and what the last one cost.
    publishing: Publishing,
    /// Every database read and write running (each a task of its own): `Finish`
    /// waits for them, so none is cut off when the actors' runtime ends, which
    /// would drop its pooled connection where no runtime can take it back.
    tasks: TaskTracker,
    stats: Arc<AggregatorStats>,
    /// Transitions not yet written: kept by the actors' thread, so that the
    /// aggregator started after this one writes what this one could not.
    unwritten: Arc<UnwrittenTransitions>,
    /// When the history was last pruned (`None`: not yet by this aggregator).
    last_prune: Option<Instant>,
    /// Other sessions' rows, by id: the latest transition the last full read
    /// found for each (`to`, `from`, `at`), for `since` and `previous`.
    others_since: HashMap<i32, (ExecutorHealthKind, ExecutorHealthKind, DateTime<Utc>)>,
}

impl Aggregator {
    /// An aggregator for rows already registered: `executors` gives each
    /// executor's row id and key, in executor order. `unwritten` holds what
    /// an aggregator before this one queued for the history and could not write.
    pub fn new(
        db: DatabaseConnection,
        session: Session,
        settings: AggregatorSettings,
        executors: Vec<(i32, ExecutorIdentity)>,
        reports: Arc<watch::Sender<Arc<HealthReport>>>,
        stats: Arc<AggregatorStats>,
        unwritten: Arc<UnwrittenTransitions>,
    ) -> Self {
        let own: Vec<OwnRow> = executors
            .into_iter()
            .map(|(id, key)| OwnRow::registered(id, key, &session))
            .collect();
        let own_ids = own
            .iter()
            .enumerate()
            .map(|(index, o)| (o.row.id, index))
            .collect();
        let (refresh, heartbeat) = (settings.refresh_interval, settings.heartbeat_interval);
        Self {
            db,
            session,
            settings,
            stage: Stage::FirstRead,
            own,
            own_ids,
            reports,
            others: BTreeMap::new(),
            most_recent: Default::default(),
            read_since: None,
            last_full_read: None,
            writes: Attempts::new(heartbeat, MAX_RETRY_BACKOFF),
            flush_waiter: None,
            reads: Attempts::new(refresh, read_backoff_ceiling(refresh)),
            history_read: HistoryRead::Idle,
            publishing: Publishing::default(),
            tasks: TaskTracker::new(),
            stats,
            unwritten,
            last_prune: None,
            others_since: HashMap::new(),
        }
    }
}

/// Runs database work as a task of its own on the actors' runtime, bounded by
/// `timeout`: a driver that panics, or a database that does not answer, fails
/// this write or read and nothing else (the timed-out work is dropped with its
/// task, which rolls its transaction back). The task starts at once, tracked
/// by `tasks`.
fn in_task<T: 'static>(
    tasks: &TaskTracker,
    what: &'static str,
    timeout: Duration,
    work: impl Future<Output = crate::Result<T>> + 'static,
) -> impl Future<Output = crate::Result<T>> + 'static {
    let task = tasks.spawn_local(async move {
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or_else(|_| {
                Err(crate::Error::Runtime(format!(
                    "the database did not answer a {what} within {}",
                    crate::duration::short(timeout)
                )))
            })
    });
    async move {
        task.await.unwrap_or_else(|e| {
            Err(crate::Error::Runtime(format!(
                "the database {what} ended early: {e}"
            )))
        })
    }
}

impl Actor for Aggregator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.start_first_read(ctx);
        ctx.run_interval(self.settings.heartbeat_interval, |act, ctx| {
            act.heartbeat(ctx)
        });
        ctx.run_interval(self.settings.refresh_interval, |act, ctx| {
            act.start_refresh(ctx)
        });
    }
}

impl Handler<NewVerdict> for Aggregator {
    type Result = ();

    /// A verdict equal to the one held (same health and reason, or note)
    /// changes nothing: it is neither written nor published again, and its
    /// `checked_at` moves with the next heartbeat. Any other is shown soon and
    /// written at the next flush.
    fn handle(&mut self, verdict: NewVerdict, ctx: &mut Context<Self>) {
        let Some(own) = self.own.get_mut(verdict.executor) else {
            return;
        };
        let unchanged = own.row.executor_health_checked_at.is_some()
            && own.holds(&verdict.health, verdict.note.as_ref());
        let new_detail = own.detail != verdict.detail;
        if new_detail {
            own.detail = verdict.detail;
        }
        if unchanged {
            if new_detail {
                self.publish_soon(ctx);
            }
            return;
        }
        let made_at = storage::to_micros(verdict.checked_at);
        own.set(&verdict.health, verdict.note.as_ref(), Some(made_at));
        own.made_at = Some(made_at);
        own.fresh = true;
        own.version += 1;
        self.note_state(verdict.executor);
        self.publish_soon(ctx);
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
        self.stage.finish();
        // A flush still running finishes first (its verdicts and transitions
        // are then done, not written twice); the last write follows.
        let flush_done = self.writes.is_running().then(|| {
            let (done, wait) = oneshot::channel();
            self.flush_waiter = Some(done);
            wait
        });
        let waited = async move {
            if let Some(wait) = flush_done {
                let _ = wait.await;
            }
        };
        Box::pin(
            waited
                .into_actor(self)
                .then(|(), act, _| act.last_write().into_actor(act))
                .then(|result, act, _| {
                    // Reads still running end within their timeouts.
                    let tasks = act.tasks.clone();
                    tasks.close();
                    async move {
                        tasks.wait().await;
                        result
                    }
                    .into_actor(act)
                })
                .map(|result, _, ctx| {
                    ctx.stop();
                    result
                }),
        )
    }
}
