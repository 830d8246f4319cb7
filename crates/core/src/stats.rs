//! Counters the actors keep per executor, the aggregator's, and the restarts
//! of the two core actors, read without asking the actors (they feed
//! `/metrics` and the tests).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// What happened to one executor's polls. Every field only grows, except
/// `checks_running`, which is how many checks are running right now.
#[derive(Debug, Default)]
pub struct ExecutorStats {
    /// `CheckHealth` messages sent.
    pub polls: AtomicU64,
    /// Ticks that sent nothing because the previous poll was still unanswered.
    pub skipped: AtomicU64,
    /// Polls not answered within `poll_timeout` by a check that ran for it
    /// (those this host ran too late are `host_late`).
    pub timeouts: AtomicU64,
    /// Answers that came after their poll had timed out (logged and dropped).
    pub late_replies: AtomicU64,
    /// Checks that panicked.
    pub panics: AtomicU64,
    /// Times the executor's actor was restarted by its supervisor.
    pub restarts: AtomicU64,
    /// Checks running now (tasks or threads held). At most one, by the in-flight guard.
    pub checks_running: AtomicU64,
    /// The most checks ever running at once.
    pub checks_running_max: AtomicU64,
    /// Polls of the async check that held a pool thread past
    /// [`STALL_AFTER`](crate::check::pool::STALL_AFTER): each cost the pool that
    /// thread (another took its place), and the check runs on threads of its
    /// own since the first.
    pub stalls: AtomicU64,
    /// Answered polls by duration: how many took at most each of
    /// [`POLL_BUCKETS_SECONDS`] (cumulative, as Prometheus histograms count).
    pub poll_buckets: [AtomicU64; POLL_BUCKETS_SECONDS.len()],
    /// Answered polls: the histogram's count.
    pub poll_count: AtomicU64,
    /// Their total duration in microseconds: the histogram's sum.
    pub poll_sum_micros: AtomicU64,
    /// The canary's pickup latencies (queued to started), per queue: each
    /// canary counted once, when a read first sees it started.
    pub canary_pickups: Mutex<BTreeMap<String, Pickups>>,
    /// Polls that timed out because Overseer's own host did not run their
    /// check in time (it started too late to answer, or not at all): judged
    /// `unknown`, never the executor's fault.
    pub host_late: AtomicU64,
    /// The latest check run to start: the tick of the poll it answers, when
    /// it began to run (on a pool thread, or a thread of its own), and the
    /// host's CPU stall then ([`crate::host::cpu_stall`]).
    started: Mutex<Option<Started>>,
    /// Its check's waits in the check pool's queue for a thread to poll it.
    queue: Mutex<QueueWait>,
}

/// How long an executor's check has waited in the check pool's queue.
#[derive(Debug, Default)]
struct QueueWait {
    /// Queued since then, not polled yet.
    since: Option<std::time::Instant>,
    /// Every wait that ended.
    total: std::time::Duration,
}

/// Upper bounds of the canary pickup histogram, in seconds: from a warm
/// worker's instant pickup to the default `canary_max_pickup` and beyond.
pub const PICKUP_BUCKETS_SECONDS: [f64; 10] =
    [0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0];

/// One queue's canary pickup latencies, as a Prometheus histogram counts them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pickups {
    /// How many took at most each of [`PICKUP_BUCKETS_SECONDS`] (cumulative).
    pub buckets: [u64; PICKUP_BUCKETS_SECONDS.len()],
    /// How many.
    pub count: u64,
    /// Their total, in seconds.
    pub sum: f64,
}

impl Pickups {
    fn observe(&mut self, seconds: f64) {
        self.count += 1;
        self.sum += seconds;
        for (bucket, bound) in self.buckets.iter_mut().zip(PICKUP_BUCKETS_SECONDS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
    }
}

/// Upper bounds of the poll-duration histogram, in seconds: from a loopback
/// PING (well under a millisecond) to the default 5 s timeout.
pub const POLL_BUCKETS_SECONDS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A copy of [`ExecutorStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// See [`ExecutorStats::polls`].
    pub polls: u64,
    /// See [`ExecutorStats::skipped`].
    pub skipped: u64,
    /// See [`ExecutorStats::timeouts`].
    pub timeouts: u64,
    /// See [`ExecutorStats::late_replies`].
    pub late_replies: u64,
    /// See [`ExecutorStats::panics`].
    pub panics: u64,
    /// See [`ExecutorStats::restarts`].
    pub restarts: u64,
    /// See [`ExecutorStats::checks_running`].
    pub checks_running: u64,
    /// See [`ExecutorStats::checks_running_max`].
    pub checks_running_max: u64,
    /// See [`ExecutorStats::stalls`].
    pub stalls: u64,
    /// Polls not judged because Overseer's host ran their check too late.
    pub host_late: u64,
}

impl ExecutorStats {
    /// Reads every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            polls: get(&self.polls),
            skipped: get(&self.skipped),
            timeouts: get(&self.timeouts),
            late_replies: get(&self.late_replies),
            panics: get(&self.panics),
            restarts: get(&self.restarts),
            checks_running: get(&self.checks_running),
            checks_running_max: get(&self.checks_running_max),
            stalls: get(&self.stalls),
            host_late: get(&self.host_late),
        }
    }

    /// Records one answered poll's duration.
    pub(crate) fn observe_poll(&self, took: std::time::Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.poll_count.fetch_add(1, Ordering::Relaxed);
        self.poll_sum_micros.fetch_add(micros, Ordering::Relaxed);
        let seconds = took.as_secs_f64();
        for (bucket, bound) in self.poll_buckets.iter().zip(POLL_BUCKETS_SECONDS) {
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Records canary pickups, `(queue, seconds)`.
    pub(crate) fn observe_pickups(&self, pickups: Vec<(String, f64)>) {
        if pickups.is_empty() {
            return;
        }
        let mut by_queue = self
            .canary_pickups
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (queue, seconds) in pickups {
            by_queue.entry(queue).or_default().observe(seconds);
        }
    }

    /// The canary's pickup histograms, per queue.
    pub fn pickups(&self) -> BTreeMap<String, Pickups> {
        self.canary_pickups
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The check run for the poll of `tick` has begun to run, now.
    pub(crate) fn mark_started(&self, tick: u64) {
        *self.started_lock() = Some(Started {
            tick,
            at: tokio::time::Instant::now(),
            stall: crate::host::cpu_stall(),
            queued: self.queue_waited(),
        });
    }

    /// Its check was put in the check pool's queue, to wait for a thread.
    pub(crate) fn queued(&self) {
        let mut queue = self.queue_lock();
        queue.since.get_or_insert_with(std::time::Instant::now);
    }

    /// A thread of the check pool polls its check now.
    pub(crate) fn dequeued(&self) {
        let mut queue = self.queue_lock();
        if let Some(since) = queue.since.take() {
            queue.total += since.elapsed();
        }
    }

    /// How long its checks have waited in the check pool's queue, the wait
    /// going on now included.
    pub(crate) fn queue_waited(&self) -> std::time::Duration {
        let queue = self.queue_lock();
        queue.total
            + queue
                .since
                .map_or_else(Default::default, |since| since.elapsed())
    }

    fn queue_lock(&self) -> std::sync::MutexGuard<'_, QueueWait> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The poll of `tick` joins the check already running (an earlier poll's):
    /// it started when that one did.
    pub(crate) fn mark_joined(&self, tick: u64) {
        if let Some(started) = self.started_lock().as_mut() {
            started.tick = tick;
        }
    }

    /// When the check run for the poll of `tick` began to run; `None` when it
    /// has not (yet).
    pub(crate) fn started_for(&self, tick: u64) -> Option<Started> {
        self.started_lock()
            .as_ref()
            .filter(|started| started.tick == tick)
            .cloned()
    }

    fn started_lock(&self) -> std::sync::MutexGuard<'_, Option<Started>> {
        self.started
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Marks a check as running until the returned guard is dropped.
    pub(crate) fn check_started(self: &std::sync::Arc<Self>) -> RunningCheck {
        let now = self.checks_running.fetch_add(1, Ordering::Relaxed) + 1;
        self.checks_running_max.fetch_max(now, Ordering::Relaxed);
        RunningCheck(self.clone())
    }
}

/// When a check run began, for the poll of `tick`.
#[derive(Debug, Clone)]
pub(crate) struct Started {
    pub(crate) tick: u64,
    pub(crate) at: tokio::time::Instant,
    /// The host's CPU stall then; `None` where the kernel does not say.
    stall: Option<std::time::Duration>,
    /// Its executor's checks' wait in the pool's queue then.
    queued: std::time::Duration,
}

impl Started {
    /// How long the check has had the host to itself since it began: the
    /// time since, less what it spent waiting in the check pool's queue for
    /// a thread, less the host's CPU stall meanwhile (time it may have spent
    /// waiting for a CPU, its probes' included).
    /// `stats` are its executor's, whose queue waits it reads.
    pub(crate) fn given(&self, stats: &ExecutorStats) -> std::time::Duration {
        let since = self.at.elapsed();
        let stalled = match (self.stall, crate::host::cpu_stall()) {
            (Some(then), Some(now)) => now.saturating_sub(then),
            _ => std::time::Duration::ZERO,
        };
        let queued = stats.queue_waited().saturating_sub(self.queued);
        since.saturating_sub(stalled).saturating_sub(queued)
    }
}

/// Held by a running check; counts it out when the check ends, however it ends.
pub(crate) struct RunningCheck(std::sync::Arc<ExecutorStats>);

impl Drop for RunningCheck {
    fn drop(&mut self) {
        self.0.checks_running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Restarts of the two core actors: each time one stopped or panicked and the
/// actors' thread started it again (see [`crate::overseer`]).
#[derive(Debug, Default)]
pub struct ActorRestarts {
    /// The `HealthSupervisor` (also restarted with the aggregator, to poll it).
    pub supervisor: AtomicU64,
    /// The `Aggregator`.
    pub aggregator: AtomicU64,
}

impl ActorRestarts {
    /// Each core actor's name, as `/metrics` labels it, with its count.
    pub fn by_actor(&self) -> [(&'static str, u64); 2] {
        [
            ("supervisor", self.supervisor.load(Ordering::Relaxed)),
            ("aggregator", self.aggregator.load(Ordering::Relaxed)),
        ]
    }
}

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
    /// [`MAX_PENDING`](crate::history::MAX_PENDING), a long outage), the oldest went first.
    pub transitions_dropped: AtomicU64,
    /// Transitions waiting for the database now.
    pub transitions_pending: AtomicU64,
    /// Prunes of the history that committed.
    pub history_prunes: AtomicU64,
    /// Reads of the history's latest transitions (one after each full read)
    /// that failed or timed out (the report keeps
    /// what it had; this session's transitions wait for the next).
    pub history_read_failures: AtomicU64,
}
