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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix::prelude::*;
use chrono::{DateTime, Utc};
use sea_orm::DatabaseConnection;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::connect;
use crate::detail::Detail;
use crate::entity::job;
use crate::history::{self, HistorySettings, RowKey, Transition};
use crate::job::{ExecutorHealth, JobState, JobType};
use crate::report::{ExecutorHealthKind, HealthReport, RowExtras, Thresholds, type_index};
use crate::stats::ActorRestarts;
use crate::storage::{self, ExecutorKey, HistoryWrite, RowsRead, Session, VerdictRow};

use super::supervisor::NewVerdict;

/// The longest wait between two write attempts while the database is down
/// (and nothing else succeeds: a read that does ends the wait at once).
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(30);

/// The longest wait between two read attempts while the database is down: two
/// refreshes (within [`MAX_RETRY_BACKOFF`]). A read costs no more than the
/// refresh it stands for, and `metadatabase` must not stay unhealthy for long
/// once the database is back, so reads never back off further than this.
pub fn read_backoff_ceiling(refresh_interval: Duration) -> Duration {
    (refresh_interval * 2).min(MAX_RETRY_BACKOFF)
}

/// How long after a verdict changes the report that shows it is published.
/// Verdicts that change together (a broker that serves many executors dies)
/// are published together, in one report, not one report each.
pub const PUBLISH_DELAY: Duration = Duration::from_millis(5);

/// A publish waits at least this many times as long as the last one took, so
/// building and rendering the report takes at most a fifth of the actors'
/// thread however often verdicts change. At ten thousand instances a report
/// takes milliseconds and this changes nothing; at fifty thousand whose polls
/// time out and flap, each change would otherwise render the whole fleet
/// again, and the renders would take the thread the polls need.
pub const PUBLISH_SPACING: u32 = 4;

/// How far before the previous read's start a read looks for changed rows:
/// a write whose time was taken before that read but which committed after
/// it, or a writer whose clock runs a little behind this one's.
pub const READ_LOOKBACK: Duration = Duration::from_secs(1);

/// How often a refresh reads every live row instead of the changed ones: what
/// the changed rows cannot show (a writer's clock further behind than
/// [`READ_LOOKBACK`], a state changed without a time) shows by then. A third of
/// Airflow's 30 s thresholds, so that no live row looks dead meanwhile.
pub const FULL_READ_EVERY: Duration = Duration::from_secs(10);

/// Counters of the aggregator's work, and of both core actors' restarts, read
/// without asking the actors.
#[derive(Debug, Default)]
pub struct AggregatorStats {
    /// Flushes that committed.
    pub flushes: AtomicU64,
    /// Flushes that failed (the database was unreachable, refused, or did not
    /// answer within the write timeout).
    pub flush_failures: AtomicU64,
    /// Statements the last committed flush ran.
    pub last_flush_statements: AtomicU64,
    /// Verdicts the last committed flush wrote.
    pub last_flush_verdicts: AtomicU64,
    /// How long the last committed flush took, in microseconds.
    pub last_flush_micros: AtomicU64,
    /// Reads that failed (the report then says `metadatabase` unhealthy).
    pub refresh_failures: AtomicU64,
    /// Reads that succeeded.
    pub reads: AtomicU64,
    /// Of those, reads of every live row (at start, then every [`FULL_READ_EVERY`]).
    pub full_reads: AtomicU64,
    /// Rows (besides the most recent job of each type) the last read returned.
    pub last_read_rows: AtomicU64,
    /// Reports whose JSON was rendered (and published): only those that changed.
    pub renders: AtomicU64,
    /// How long the last report took to build (and render, if it changed), in
    /// microseconds.
    pub last_publish_micros: AtomicU64,
    /// Restarts of the core actors after they stopped or panicked.
    pub restarts: ActorRestarts,
    /// Transitions of a verdict's state this process saw (queued for the history).
    pub transitions_recorded: AtomicU64,
    /// Of those, written to the history table.
    pub transitions_written: AtomicU64,
    /// Transitions dropped unwritten: the queue was full (over
    /// [`history::MAX_PENDING`], a long outage), the oldest went first.
    pub transitions_dropped: AtomicU64,
    /// Transitions waiting for the database now.
    pub transitions_pending: AtomicU64,
    /// Prunes of the history that committed.
    pub history_prunes: AtomicU64,
    /// Reads of the history's latest transitions that succeeded (one after
    /// each full read).
    pub history_reads: AtomicU64,
    /// Of those reads, the ones that failed or timed out (the report keeps
    /// what it had; this session's transitions wait for the next).
    pub history_read_failures: AtomicU64,
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
    /// How long transitions are kept, and how often old ones are pruned.
    pub history: HistorySettings,
}

/// One of this session's executor rows, as this process holds it.
#[derive(Debug, Clone)]
struct OwnRow {
    /// The row as the report shows it: the latest verdict, its
    /// `checked_at`, and the latest heartbeat.
    row: job::Model,
    /// The verdict changed since the last heartbeat: its `checked_at` is still
    /// the moment it was made, and the next heartbeat leaves it there.
    fresh: bool,
    /// Bumped by every changed verdict; the row needs writing while it differs
    /// from `written`.
    version: u64,
    written: u64,
    /// The latest evidence beside the verdict: shown in the report, never written.
    detail: Option<Arc<Detail>>,
    /// The state the history holds as the row's current one (its latest
    /// transition's, else the registered `unknown`): a verdict of another
    /// state is a transition. `None` until the history has been read.
    known: Option<ExecutorHealthKind>,
    /// When `known` began, if the history says.
    since: Option<DateTime<Utc>>,
    /// The state before `known`, if the history says.
    previous: Option<ExecutorHealthKind>,
    /// When this aggregator's latest verdict for the row was made (`None`:
    /// none yet, or only one taken back after a restart).
    made_at: Option<DateTime<Utc>>,
}

impl OwnRow {
    fn health(&self) -> ExecutorHealth {
        self.row
            .executor_health()
            .unwrap_or_else(|e| ExecutorHealth::unhealthy(e.to_string()))
    }

    /// The row's identity in the history.
    fn key(&self) -> RowKey {
        (
            self.row.hostname.clone().unwrap_or_default(),
            self.row.executor_class.clone().unwrap_or_default(),
            self.row.executor_instance.clone(),
        )
    }

    /// `since` and `previous` as the report shows them: only while the row
    /// holds the state they are about.
    fn extras(&self) -> RowExtras {
        let current = ExecutorHealthKind::of(&self.health());
        let (since, previous) = if self.known == Some(current) {
            (self.since, self.previous)
        } else {
            (None, None)
        };
        RowExtras {
            detail: self.detail.clone(),
            since,
            previous,
        }
    }

    /// Holds a verdict: `executor_health_reason` is its reason, or, for a
    /// healthy one, its note.
    fn set(
        &mut self,
        health: &ExecutorHealth,
        note: Option<&str>,
        checked_at: Option<DateTime<Utc>>,
    ) {
        self.row.executor_health = health.as_str().to_owned();
        self.row.executor_health_reason = reason_column(health, note);
        self.row.executor_health_checked_at = checked_at;
    }
}

/// What `executor_health_reason` holds for a verdict: its reason, or, for a
/// healthy one, the note beside it.
fn reason_column(health: &ExecutorHealth, note: Option<&str>) -> Option<String> {
    match health {
        ExecutorHealth::Healthy => note.map(str::to_owned),
        other => other.reason().map(str::to_owned),
    }
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

    /// Records a failure: the next attempt waits `base` the first time, then
    /// twice as long each time, up to `ceiling`. True the first time in an
    /// outage (log it then only).
    fn failed(&mut self, base: Duration, ceiling: Duration) -> bool {
        let first = self.since.is_none();
        self.since.get_or_insert_with(Instant::now);
        self.backoff = (self.backoff * 2).clamp(base, ceiling.max(base));
        self.next_attempt = Some(Instant::now() + self.backoff);
        first
    }

    /// Records a success; the outage's length if one just ended.
    fn succeeded(&mut self) -> Option<Duration> {
        self.next_attempt = None;
        self.backoff = Duration::ZERO;
        self.since.take().map(|since| since.elapsed())
    }

    /// The other kind of work just succeeded, so the database is back: the
    /// back-off ends, and the next attempt may be made at once. True when this
    /// kind was in an outage (then make that attempt now).
    fn database_back(&mut self) -> bool {
        self.next_attempt = None;
        self.backoff = Duration::ZERO;
        self.since.is_some()
    }
}

/// The transitions queued for the history and not yet written, oldest first,
/// each with its sequence number. Made by the actors' thread and handed to
/// every aggregator it starts, as the report's channel is: so it outlives an
/// aggregator that stops or panics, and the one started in its place writes
/// what it had queued. Only the aggregator running uses it.
#[derive(Debug, Default)]
pub struct UnwrittenTransitions(Mutex<TransitionQueue>);

#[derive(Debug, Default)]
struct TransitionQueue {
    /// Oldest first, each with its sequence number.
    queued: VecDeque<(u64, Transition)>,
    /// The sequence number of the next transition queued.
    next: u64,
}

impl UnwrittenTransitions {
    /// The queue. An aggregator that panicked never held the lock then (no
    /// code that may panic runs under it), so a poisoned lock is taken as is.
    fn lock(&self) -> MutexGuard<'_, TransitionQueue> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the first read of an aggregator brings: the other rows, and, after a
/// restart, this session's rows as the table holds them (their verdicts).
type FirstRead = (
    crate::Result<RowsRead>,
    crate::Result<Option<Vec<job::Model>>>,
    crate::Result<Vec<Transition>>,
);

/// The actor that owns this session's rows and publishes the report.
pub struct Aggregator {
    db: DatabaseConnection,
    session: Session,
    settings: AggregatorSettings,
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
    /// Whether the last read succeeded: `metadatabase` in the report.
    metadatabase_ok: bool,
    /// The first read is done (its rows merged, own verdicts taken back):
    /// nothing is published before.
    ready: bool,
    flushing: bool,
    /// `Finish` waits on this for the flush running when it came.
    flush_waiter: Option<oneshot::Sender<()>>,
    refreshing: bool,
    /// A read of the history's latest transitions is running.
    history_reading: bool,
    /// The last read of the history failed (logged once, until one succeeds).
    history_unreadable: bool,
    publish_scheduled: bool,
    /// How long the last publish took: the next one waits
    /// [`PUBLISH_SPACING`] times as long.
    publish_cost: Duration,
    /// `Finish` ran: no more writes or reads.
    finished: bool,
    /// Every database read and write running (each a task of its own): `Finish`
    /// waits for them, so none is cut off when the actors' runtime ends, which
    /// would drop its pooled connection where no runtime can take it back.
    tasks: TaskTracker,
    writes: Outage,
    reads: Outage,
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
        executors: Vec<(i32, ExecutorKey)>,
        reports: Arc<watch::Sender<Arc<HealthReport>>>,
        stats: Arc<AggregatorStats>,
        unwritten: Arc<UnwrittenTransitions>,
    ) -> Self {
        let own: Vec<OwnRow> = executors
            .into_iter()
            .map(|(id, (class, instance))| OwnRow {
                row: job::Model {
                    id,
                    dag_id: None,
                    state: Some(JobState::Running.as_str().to_owned()),
                    job_type: Some(JobType::ExecutorJob.as_str().to_owned()),
                    start_date: Some(session.started),
                    end_date: None,
                    latest_heartbeat: Some(session.started),
                    executor_class: Some(class),
                    hostname: Some(session.hostname.clone()),
                    unixname: Some(session.unixname.clone()),
                    executor_health: ExecutorHealth::default().as_str().to_owned(),
                    executor_health_reason: None,
                    executor_instance: instance,
                    executor_health_checked_at: None,
                },
                fresh: false,
                version: 0,
                written: 0,
                detail: None,
                known: None,
                since: None,
                previous: None,
                made_at: None,
            })
            .collect();
        let own_ids = own
            .iter()
            .enumerate()
            .map(|(index, o)| (o.row.id, index))
            .collect();
        Self {
            db,
            session,
            settings,
            own,
            own_ids,
            reports,
            others: BTreeMap::new(),
            most_recent: Default::default(),
            read_since: None,
            last_full_read: None,
            metadatabase_ok: true,
            ready: false,
            flushing: false,
            flush_waiter: None,
            refreshing: false,
            history_reading: false,
            history_unreadable: false,
            publish_scheduled: false,
            publish_cost: Duration::ZERO,
            finished: false,
            tasks: TaskTracker::new(),
            writes: Outage::default(),
            reads: Outage::default(),
            stats,
            unwritten,
            last_prune: None,
            others_since: HashMap::new(),
        }
    }

    /// Queues a transition when the row's verdict, made by this aggregator,
    /// holds another state than the one the history knows.
    fn note_state(&mut self, index: usize) {
        let hostname = self.session.hostname.clone();
        let own = &mut self.own[index];
        let (Some(known), Some(at)) = (own.known, own.made_at) else {
            return;
        };
        let health = own.health();
        let current = ExecutorHealthKind::of(&health);
        if current == known {
            return;
        }
        let transition = Transition {
            executor: own.row.executor_class.clone().unwrap_or_default(),
            instance: own.row.executor_instance.clone(),
            hostname,
            from: known,
            to: current,
            reason: health.reason().map(str::to_owned),
            at,
        };
        own.known = Some(current);
        own.previous = Some(known);
        own.since = Some(at);
        self.queue(transition);
    }

    /// Queues a transition for the next flush; past [`history::MAX_PENDING`]
    /// the oldest is dropped.
    fn queue(&mut self, transition: Transition) {
        let mut unwritten = self.unwritten.lock();
        if unwritten.queued.len() >= history::MAX_PENDING {
            unwritten.queued.pop_front();
            let dropped = self
                .stats
                .transitions_dropped
                .fetch_add(1, Ordering::Relaxed);
            if dropped == 0 {
                tracing::warn!(
                    max = history::MAX_PENDING,
                    "too many transitions wait for the database: dropping the oldest"
                );
            }
        }
        let seq = unwritten.next;
        unwritten.queued.push_back((seq, transition));
        unwritten.next += 1;
        self.stats
            .transitions_recorded
            .fetch_add(1, Ordering::Relaxed);
        self.stats
            .transitions_pending
            .store(unwritten.queued.len() as u64, Ordering::Relaxed);
    }

    /// Takes in the latest transitions a full read found: other sessions'
    /// rows' `since`, and, the first time, the state the history holds for
    /// each of this session's rows.
    fn take_history(&mut self, latest: Vec<Transition>) {
        let mut latest: HashMap<RowKey, Transition> =
            latest.into_iter().map(|t| (t.key(), t)).collect();
        // Transitions an aggregator before this one queued and could not write
        // are later than any the table holds: the rows are in their states.
        for (_, queued) in &self.unwritten.lock().queued {
            latest.insert(queued.key(), queued.clone());
        }
        self.others_since = self
            .others
            .iter()
            .filter_map(|(id, row)| {
                let key = (
                    row.hostname.clone().unwrap_or_default(),
                    row.executor_class.clone().unwrap_or_default(),
                    row.executor_instance.clone(),
                );
                latest.get(&key).map(|t| (*id, (t.to, t.from, t.at)))
            })
            .collect();
        for index in 0..self.own.len() {
            let own = &mut self.own[index];
            if own.known.is_some() {
                continue;
            }
            match latest.get(&own.key()) {
                Some(t) => {
                    own.known = Some(t.to);
                    own.since = Some(t.at);
                    own.previous = Some(t.from);
                }
                // No transition yet: the row holds the state it was registered with.
                None => own.known = Some(ExecutorHealthKind::Unknown),
            }
            self.note_state(index);
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
                .and_then(|retention| now.checked_sub_signed(retention))
        } else {
            None
        };
        let unwritten = self.unwritten.lock();
        let write = HistoryWrite {
            transitions: unwritten.queued.iter().map(|(_, t)| t.clone()).collect(),
            prune_before,
        };
        (write, unwritten.queued.back().map(|(seq, _)| *seq))
    }

    /// The verdicts not yet written, with the version each one carries.
    fn pending(&self) -> Vec<(usize, u64, VerdictRow)> {
        self.own
            .iter()
            .enumerate()
            .filter(|(_, own)| own.version != own.written)
            .filter_map(|(index, own)| {
                own.row.executor_health_checked_at.map(|checked_at| {
                    (
                        index,
                        own.version,
                        VerdictRow {
                            id: own.row.id,
                            health: own.health(),
                            note: own.row.executor_health_reason.clone(),
                            checked_at,
                        },
                    )
                })
            })
            .collect()
    }

    /// One heartbeat: this session's rows are alive now, and every verdict that
    /// held since the last heartbeat is checked as of now. Then the rows are
    /// written, and the report shows them at once.
    fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        if self.finished {
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
        self.flush(ctx, now);
    }

    /// Writes heartbeats and pending verdicts, unless a flush is running or the
    /// database is in back-off.
    fn flush(&mut self, ctx: &mut Context<Self>, now: DateTime<Utc>) {
        if self.flushing || !self.writes.ready() {
            return;
        }
        self.flushing = true;
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
            storage::flush_with_history(&db, &session, now, &verdicts, &history).await
        });
        ctx.spawn(write.into_actor(self).map(move |result, act, ctx| {
            act.flushing = false;
            let back = act.flushed(pending, written, result, started.elapsed());
            if let Some(waiter) = act.flush_waiter.take() {
                let _ = waiter.send(());
            }
            // Writes went through again: the database is back, so reads that
            // were backing off are tried at once, not at the end of their back-off.
            if back && act.reads.database_back() {
                act.refresh(ctx);
            }
        }));
    }

    /// Takes a flush's result: on success the verdicts and transitions it
    /// wrote are done (`written`: the last transition's sequence number,
    /// how many, and whether it pruned); on failure all stay for the next.
    /// True when it ended an outage of writes.
    fn flushed(
        &mut self,
        pending: Vec<(usize, u64, VerdictRow)>,
        written: (Option<u64>, usize, bool),
        result: crate::Result<usize>,
        took: Duration,
    ) -> bool {
        match result {
            Ok(statements) => {
                for (index, version, _) in &pending {
                    self.own[*index].written = *version;
                }
                let (last_transition, transitions, pruned) = written;
                let mut unwritten = self.unwritten.lock();
                if let Some(last) = last_transition {
                    unwritten.queued.retain(|(seq, _)| *seq > last);
                }
                let left = unwritten.queued.len();
                drop(unwritten);
                self.stats
                    .transitions_written
                    .fetch_add(transitions as u64, Ordering::Relaxed);
                self.stats
                    .transitions_pending
                    .store(left as u64, Ordering::Relaxed);
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
                if self
                    .writes
                    .failed(self.settings.heartbeat_interval, MAX_RETRY_BACKOFF)
                {
                    tracing::error!(error = %e, "cannot write to the database; keeping verdicts and retrying");
                } else {
                    tracing::debug!(error = %e, "write retry failed");
                }
                false
            }
        }
    }

    /// Reads what changed in other sessions' rows (or every live row, when a
    /// full read is due) and publishes the report.
    fn refresh(&mut self, ctx: &mut Context<Self>) {
        if self.refreshing || !self.reads.ready() || self.finished || !self.ready {
            return;
        }
        self.refreshing = true;
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
        ctx.spawn(read.into_actor(self).map(move |result, act, ctx| {
            act.refreshing = false;
            let full = matches!(&result, Ok(read) if read.full);
            let back = act.read(result, started);
            if full {
                act.read_history(ctx);
            }
            act.publish_soon(ctx);
            // Reads went through again: the database is back, so writes that
            // were backing off are made at once (a heartbeat, every verdict held).
            if back && act.writes.database_back() {
                act.heartbeat(ctx);
            }
        }));
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
    fn read_history(&mut self, ctx: &mut Context<Self>) {
        if self.history_reading || self.finished {
            return;
        }
        self.history_reading = true;
        let read = self.latest_transitions();
        ctx.spawn(read.into_actor(self).map(|result, act, ctx| {
            act.history_reading = false;
            if act.history_read(result) {
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
    fn history_read(&mut self, result: crate::Result<Vec<Transition>>) -> bool {
        match result {
            Ok(latest) => {
                self.stats.history_reads.fetch_add(1, Ordering::Relaxed);
                if std::mem::take(&mut self.history_unreadable) {
                    tracing::info!("the history's latest transitions are read again");
                }
                self.take_history(latest);
                true
            }
            Err(e) => {
                self.stats
                    .history_read_failures
                    .fetch_add(1, Ordering::Relaxed);
                if !std::mem::replace(&mut self.history_unreadable, true) {
                    tracing::warn!(error = %e, "cannot read the history's latest transitions; `since` and `previous` wait for them");
                }
                false
            }
        }
    }

    /// Takes a read's rows in, or records its failure. True when it ended an
    /// outage of reads.
    fn read(&mut self, result: crate::Result<RowsRead>, started: DateTime<Utc>) -> bool {
        match result {
            Ok(read) => {
                let stats = &self.stats;
                stats.reads.fetch_add(1, Ordering::Relaxed);
                stats
                    .last_read_rows
                    .store(read.rows.len() as u64, Ordering::Relaxed);
                if read.full {
                    stats.full_reads.fetch_add(1, Ordering::Relaxed);
                    self.others.clear();
                    self.last_full_read = Some(Instant::now());
                }
                self.most_recent = read.most_recent;
                for row in read.rows {
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
                self.metadatabase_ok = true;
                let ended = self.reads.succeeded();
                if let Some(outage) = ended {
                    tracing::info!(after = ?outage, "the database answers reads again");
                }
                ended.is_some()
            }
            Err(e) => {
                self.stats.refresh_failures.fetch_add(1, Ordering::Relaxed);
                self.metadatabase_ok = false;
                let refresh = self.settings.refresh_interval;
                if self.reads.failed(refresh, read_backoff_ceiling(refresh)) {
                    tracing::error!(error = %e, "cannot read the job table; reporting metadatabase unhealthy");
                }
                false
            }
        }
    }

    /// The first read of this aggregator: every live row of other sessions, and,
    /// when it is a restarted one, this session's own rows (to take their
    /// verdicts back; at the first start they are as registered). Nothing is
    /// published before it ends.
    fn first_read(&mut self, ctx: &mut Context<Self>) {
        self.refreshing = true;
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
                .map(move |(others, own, history), act, _| {
                    act.refreshing = false;
                    act.take_back(own);
                    act.read(others, started);
                    act.history_read(history);
                    act.ready = true;
                    act.publish();
                }),
        );
    }

    /// Takes back the verdicts of this session's rows that no verdict has
    /// replaced yet: from the table, unless the last published report shows a
    /// later one (the aggregator before this one made it and stopped before
    /// writing it), or, when the table cannot be read, from that report; a
    /// verdict taken from the report is written again. At the first start
    /// there is nothing to take back: the rows are as registered.
    fn take_back(&mut self, table: crate::Result<Option<Vec<job::Model>>>) {
        let rows = match table {
            Ok(None) => return,
            Ok(Some(rows)) => rows,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read this session's rows back; taking the verdicts from the last report");
                Vec::new()
            }
        };
        let table: HashMap<i32, job::Model> = rows.into_iter().map(|r| (r.id, r)).collect();
        let report = self.reports.borrow().clone();
        for own in self.own.iter_mut().filter(|o| o.version == 0) {
            let shown = report.executor.iter().flat_map(|e| &e.instances).find(|i| {
                i.checked_at.is_some()
                    && i.hostname == own.row.hostname
                    && i.executor == own.row.executor_class
                    && i.instance == own.row.executor_instance
            });
            let written = table.get(&own.row.id);
            match (shown, written) {
                (Some(shown), written)
                    if written.is_none_or(|w| shown.checked_at > w.executor_health_checked_at) =>
                {
                    own.set(&shown.health, shown.reason.as_deref(), shown.checked_at);
                    own.version = 1;
                }
                (_, Some(written)) => {
                    own.row.executor_health = written.executor_health.clone();
                    own.row.executor_health_reason = written.executor_health_reason.clone();
                    own.row.executor_health_checked_at = written.executor_health_checked_at;
                }
                (_, None) => {}
            }
        }
    }

    /// Publishes a report soon, with every change made until then: after
    /// [`PUBLISH_DELAY`], or [`PUBLISH_SPACING`] times as long as the last
    /// report took to build, if that is longer.
    fn publish_soon(&mut self, ctx: &mut Context<Self>) {
        if self.publish_scheduled {
            return;
        }
        self.publish_scheduled = true;
        let delay = PUBLISH_DELAY.max(self.publish_cost * PUBLISH_SPACING);
        ctx.run_later(delay, |act, _| {
            act.publish_scheduled = false;
            act.publish();
        });
    }

    /// Builds the report from this session's rows as held and the other rows as
    /// last read, and publishes it (rendering its JSON) if it says something new.
    fn publish(&mut self) {
        if !self.ready {
            return;
        }
        let started = Instant::now();
        self.build_and_publish();
        self.publish_cost = started.elapsed();
        let micros = u64::try_from(self.publish_cost.as_micros()).unwrap_or(u64::MAX);
        self.stats
            .last_publish_micros
            .store(micros, Ordering::Relaxed);
    }

    fn build_and_publish(&mut self) {
        let now = Utc::now();
        let live: Vec<&job::Model> = self
            .others
            .values()
            .chain(self.own.iter().map(|o| &o.row))
            .collect();
        let mut most_recent = self.most_recent.each_ref().map(Option::as_ref);
        let executor = type_index(JobType::ExecutorJob);
        most_recent[executor] = self.most_recent_executor();
        let own_ids = &self.own_ids;
        let own = &self.own;
        let others_since = &self.others_since;
        let extras = |row: &job::Model| {
            if let Some(&index) = own_ids.get(&row.id) {
                return own[index].extras();
            }
            match others_since.get(&row.id) {
                Some((to, from, at)) if to.as_str() == row.executor_health => RowExtras {
                    detail: None,
                    since: Some(*at),
                    previous: Some(*from),
                },
                _ => RowExtras::default(),
            }
        };
        let mut report = HealthReport::assemble_with(
            most_recent,
            &live,
            &extras,
            self.metadatabase_ok,
            &self.settings.thresholds,
            now,
        );
        if report.same_content(&self.reports.borrow()) {
            return;
        }
        report.render();
        self.stats.renders.fetch_add(1, Ordering::Relaxed);
        self.reports.send_replace(Arc::new(report));
    }

    /// Airflow's most recent executor job (running first, then the latest
    /// heartbeat), with this session's rows as held: the one read, unless it is
    /// one of this session's (then as held) or one of this session's rows is
    /// more recent.
    fn most_recent_executor(&self) -> Option<&job::Model> {
        let read = self.most_recent[type_index(JobType::ExecutorJob)].as_ref();
        let read = match read.and_then(|r| self.own_ids.get(&r.id)) {
            Some(&index) => Some(&self.own[index].row),
            None => read,
        };
        let rank = |row: &job::Model| {
            (
                row.state.as_deref() == Some(JobState::Running.as_str()),
                row.latest_heartbeat,
            )
        };
        let own = self.own.first().map(|o| &o.row);
        match (read, own) {
            (Some(read), Some(own)) if rank(own) > rank(read) => Some(own),
            (Some(read), _) => Some(read),
            (None, own) => own,
        }
    }
}

/// [`READ_LOOKBACK`] as chrono counts it.
fn lookback() -> chrono::Duration {
    chrono::Duration::from_std(READ_LOOKBACK).unwrap_or_default()
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
        self.first_read(ctx);
        ctx.run_interval(self.settings.heartbeat_interval, |act, ctx| {
            act.heartbeat(ctx)
        });
        ctx.run_interval(self.settings.refresh_interval, |act, ctx| act.refresh(ctx));
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
            && own.health() == verdict.health
            && own.row.executor_health_reason
                == reason_column(&verdict.health, verdict.note.as_deref());
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
        own.set(&verdict.health, verdict.note.as_deref(), Some(made_at));
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
        self.finished = true;
        // A flush still running finishes first (its verdicts and transitions
        // are then done, not written twice); the last write follows.
        let flush_done = self.flushing.then(|| {
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

impl Aggregator {
    /// The last write at shutdown: the verdicts and transitions not yet
    /// written, then this session's rows ended with `success`.
    fn last_write(&mut self) -> impl Future<Output = crate::Result<()>> + use<> {
        let pending = self.pending();
        let (history, _) = self.history_write(Utc::now(), false);
        let (db, session) = (self.db.clone(), self.session.clone());
        let timeout = connect::write_timeout(self.settings.heartbeat_interval);
        let tasks = self.tasks.clone();
        async move {
            let verdicts: Vec<VerdictRow> = pending.into_iter().map(|(_, _, v)| v).collect();
            let (flush_db, flush_session) = (db.clone(), session.clone());
            in_task(&tasks, "write", timeout, async move {
                storage::flush_with_history(
                    &flush_db,
                    &flush_session,
                    Utc::now(),
                    &verdicts,
                    &history,
                )
                .await
            })
            .await?;
            let ended = in_task(&tasks, "write", timeout, async move {
                storage::finish(&db, &session, Utc::now()).await
            })
            .await?;
            tracing::info!(rows = ended, "executor rows ended with success");
            Ok(())
        }
    }
}

#[cfg(test)]
pub(crate) mod test_hooks {
    //! Test-only: makes the aggregator stop or panic on demand, so that the
    //! tests of [`crate::overseer`] can see it restarted. Compiled only into
    //! this crate's own unit tests.

    use super::*;

    /// How a core actor is made to end, in tests.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
    #[rtype(result = "()")]
    pub(crate) enum Crash {
        /// `ctx.stop()`, as an actor that decides to end.
        Stop,
        /// A panic inside a handler.
        Panic,
    }

    impl Handler<Crash> for Aggregator {
        type Result = ();

        fn handle(&mut self, crash: Crash, ctx: &mut Context<Self>) {
            match crash {
                Crash::Stop => ctx.stop(),
                Crash::Panic => panic!("the aggregator panicked on purpose (a test)"),
            }
        }
    }
}
