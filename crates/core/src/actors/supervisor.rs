//! `HealthSupervisor`: polls every executor on its own timer, under three guards
//! that keep a slow or hung executor from ever delaying it:
//!
//! 1. the check runs off this actor's thread (see [`ExecutorActor`]), an async
//!    one on a watched pool where a check that blocks its thread is given that
//!    thread and starves no other ([`crate::check::pool`]);
//! 2. the timeout is the supervisor's: no answer within `poll_timeout` is
//!    `Unhealthy("no reply within 5s")`, whatever the executor does, once
//!    its check has run for that long: a check this host did not start in
//!    time (its threads busy, a CPU short) is not the executor's fault, and
//!    reads `unknown` naming the host (see [`HealthSupervisor::expire`]);
//! 3. the in-flight guard: while a poll is unanswered, later ticks send that
//!    executor nothing (and count the skip), so each executor has at most one
//!    `CheckHealth` queued or running, ever. A late answer clears the guard; its
//!    verdict is logged and dropped, and the next tick polls again.
//!
//! Polling costs the same per executor at ten executors as at fifty thousand.
//! A poll is one message out, `CheckHealth` (carrying its tick), and one in,
//! [`Answered`] (the same tick): this actor's context holds no future per poll
//! (its context would poll every one of them at each wake, a cost that grows
//! with the square of the executors), only its interval and one timer per
//! tick. The handler of an answer is O(1): the guard is cleared only by the
//! answer to the poll it guards (the tick matches). The timer's `expire` pass
//! is one O(n) walk per tick. An executor's actor that drops a poll unanswered
//! answers all the same (see [`ExecutorActor`]), so the guard never sticks on
//! a poll nobody runs.
//!
//! Verdicts go, as [`NewVerdict`] messages, to a recipient (the
//! [`Aggregator`](super::Aggregator)): when the verdict held changes (past the
//! damping), and when only its evidence ([`Detail`]) does, then with the
//! verdict held.
//!
//! The log says what an operator acts on, once: a verdict that turns `unhealthy`
//! is one `WARN` line naming the executor, its instance and the reason; the
//! return to `healthy` is one `INFO` line. Repeated verdicts, timeouts and late
//! answers (each poll's detail) are `DEBUG`.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::detail::Detail;
use crate::job::ExecutorHealth;
use crate::reason::Reason;
use crate::stats::ExecutorStats;

use super::executor::{Answered, CheckHealth, ExecutorActor};
use crate::check::alarm::AlarmBoard;

/// The message carrying an executor's verdict, by the executor's index in the
/// supervisor's list: sent when a new verdict passed the damping thresholds,
/// or when the evidence changed under the verdict held.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct NewVerdict {
    /// The executor's index, in the order executors were given.
    pub executor: usize,
    /// The verdict held.
    pub health: ExecutorHealth,
    /// When it was made.
    pub checked_at: DateTime<Utc>,
    /// The latest poll's evidence (`None` when it gave none, or timed out).
    pub detail: Option<Arc<Detail>>,
    /// Beside a `healthy` verdict held, the note its poll gave.
    pub note: Option<Reason>,
}

/// How many timeouts a check may run, its host starved or not, before its
/// silence is its executor's all the same: a host starved for good still
/// names a hung executor, at worst this many timeouts after its check began.
pub const HOST_LATE_LIMIT: u32 = 8;

/// How the supervisor polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollSettings {
    /// How often each executor is polled.
    pub poll_interval: Duration,
    /// How long an answer may take before the executor is unhealthy.
    pub poll_timeout: Duration,
    /// Consecutive failures before a verdict turns `unhealthy` (as a Kubernetes
    /// probe's `failureThreshold`); 1 reports the first.
    pub failures_before_unhealthy: u32,
    /// Consecutive successes before a verdict turns `healthy`; 1 reports the first.
    pub successes_before_healthy: u32,
}

impl Default for PollSettings {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(10),
            poll_timeout: Duration::from_secs(5),
            failures_before_unhealthy: 1,
            successes_before_healthy: 1,
        }
    }
}

/// One poll that has been sent and not yet answered.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    /// The tick that sent it.
    tick: u64,
    sent: Instant,
    /// What its answer will be taken for.
    awaits: Awaits,
    /// The executor's alarm rang while it was in flight: what it answers may
    /// predate the ring, so one more poll follows its answer.
    rung: bool,
}

/// What the answer to a poll in flight will be taken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaits {
    /// The executor's verdict, observed as it comes.
    Verdict,
    /// A late answer: the poll's timeout was reported (`no reply within`), so
    /// the answer is counted late and dropped.
    Late,
    /// The poll timed out because this host did not run its check in time:
    /// its answer, whenever it comes, is the verdict; once the check has run
    /// for the whole timeout without one, its silence is the executor's after
    /// all ([`HealthSupervisor::rejudge`]). `said`: `unknown` naming the host
    /// was reported for it.
    HostLate { said: bool },
}

/// One executor, as the supervisor sees it.
struct Polled {
    addr: Addr<ExecutorActor>,
    stats: Arc<ExecutorStats>,
    label: String,
    in_flight: Option<InFlight>,
    /// The verdict last reported, and the run of equal observations behind it.
    reported: ExecutorHealth,
    /// When `reported` took its state (`healthy`, `unhealthy`, `unknown`), for the
    /// line that ends it.
    since: Instant,
    failures: u32,
    successes: u32,
    /// When `reported` was made; `None` before the first verdict.
    reported_at: Option<DateTime<Utc>>,
    /// The evidence last sent.
    detail: Option<Arc<Detail>>,
    /// The note of the verdict held.
    note: Option<Reason>,
}

/// The actor that polls every executor.
pub struct HealthSupervisor {
    settings: PollSettings,
    executors: Vec<Polled>,
    sink: Recipient<NewVerdict>,
    tick: u64,
    /// Where executors answer: this actor, once started. Every poll carries a
    /// clone of the `Arc` (one channel sender for all).
    answers: Option<Arc<Recipient<Answered>>>,
    /// The executors whose checks rang their alarm ([`crate::check::alarm`]):
    /// each is polled at once, out of turn. Shared with the supervisor that
    /// replaces this one, so no ring is lost to a restart.
    alarms: Option<Arc<AlarmBoard>>,
}

impl HealthSupervisor {
    /// A supervisor over executor actors given with their stats and a label for logs.
    pub fn new(
        settings: PollSettings,
        executors: Vec<(Addr<ExecutorActor>, Arc<ExecutorStats>, String)>,
        sink: Recipient<NewVerdict>,
    ) -> Self {
        let executors = executors
            .into_iter()
            .map(|(addr, stats, label)| Polled {
                addr,
                stats,
                label,
                in_flight: None,
                reported: ExecutorHealth::default(),
                since: Instant::now(),
                failures: 0,
                successes: 0,
                reported_at: None,
                detail: None,
                note: None,
            })
            .collect();
        Self {
            settings,
            executors,
            sink,
            tick: 0,
            answers: None,
            alarms: None,
        }
    }

    /// The same supervisor, polling at once the executors rung on `alarms`.
    pub(crate) fn with_alarms(mut self, alarms: Arc<AlarmBoard>) -> Self {
        self.alarms = Some(alarms);
        self
    }

    /// One tick: poll every executor that has no poll in flight.
    fn poll_all(&mut self, ctx: &mut Context<Self>) {
        let Some(answers) = self.answers.clone() else {
            return;
        };
        self.tick += 1;
        let tick = self.tick;
        let now = Instant::now();
        self.rejudge();
        for (index, executor) in self.executors.iter_mut().enumerate() {
            if executor.in_flight.is_some() {
                ExecutorStats::bump(&executor.stats.skipped);
                continue;
            }
            executor.in_flight = Some(InFlight {
                tick,
                sent: now,
                awaits: Awaits::Verdict,
                rung: false,
            });
            ExecutorStats::bump(&executor.stats.polls);
            // The guard keeps at most one poll in the executor's mailbox, so it
            // is never full. Should it be closed (the actor is gone), the poll
            // comes back in the error and is dropped here: its reply answers
            // `did not answer` at once.
            let poll = CheckHealth::new(index, tick, answers.clone());
            if let Err(refused) = executor.addr.try_send(poll) {
                drop(refused);
            }
        }
        // Every poll of this tick was sent now, so one timer covers them all.
        ctx.run_later(self.settings.poll_timeout, move |act, _| act.expire(tick));
    }

    /// An alarm: polls executor `index` now, out of turn, under the same guard
    /// and with the same timeout. A poll in flight is left to answer, and one
    /// more follows its answer (what it says may predate the ring). The poll
    /// takes a tick number of its own, so its timer expires it alone.
    fn poll_now(&mut self, index: usize, ctx: &mut Context<Self>) {
        let Some(answers) = self.answers.clone() else {
            return;
        };
        let Some(executor) = self.executors.get_mut(index) else {
            return;
        };
        if let Some(in_flight) = executor.in_flight.as_mut() {
            in_flight.rung = true;
            return;
        }
        self.tick += 1;
        let tick = self.tick;
        executor.in_flight = Some(InFlight {
            tick,
            sent: Instant::now(),
            awaits: Awaits::Verdict,
            rung: false,
        });
        ExecutorStats::bump(&executor.stats.polls);
        tracing::debug!(executor = %executor.label, "alarm: polling at once");
        if let Err(refused) = executor
            .addr
            .try_send(CheckHealth::new(index, tick, answers))
        {
            drop(refused);
        }
        ctx.run_later(self.settings.poll_timeout, move |act, _| act.expire(tick));
    }

    /// Waits for the next ring of any executor's alarm (one future for them
    /// all: the board's), polls those rung, and waits again.
    fn listen(&mut self, ctx: &mut Context<Self>) {
        let Some(board) = self.alarms.clone() else {
            return;
        };
        ctx.spawn(
            async move { board.rung().await }
                .into_actor(self)
                .map(|rung, act, ctx| {
                    for index in rung {
                        act.poll_now(index, ctx);
                    }
                    act.listen(ctx);
                }),
        );
    }

    /// The polls of `tick` still unanswered are reported unhealthy, unless
    /// Overseer's own host did not run their check in time; their guard stays.
    ///
    /// A check that began to run within the first half of the timeout, and
    /// had the host for at least half of it since ([`given`](crate::stats::Started::given): the
    /// time less the host's CPU stall), had the time to answer: its silence
    /// is the executor's (`no reply within 5s`). One that began later, or not
    /// at all, or was starved since, was kept waiting by this host (its check
    /// threads busy, its runtime starved, its CPUs short), which says nothing
    /// of the executor: the verdict held stays (before the first, it is
    /// `unknown`, naming the host), and the poll is judged again at the next
    /// ticks ([`Self::rejudge`]) or by its answer, whenever it comes.
    fn expire(&mut self, tick: u64) {
        let timeout = self.settings.poll_timeout;
        for index in 0..self.executors.len() {
            let executor = &mut self.executors[index];
            let Some(in_flight) = executor.in_flight.as_mut() else {
                continue;
            };
            if in_flight.tick != tick || in_flight.awaits != Awaits::Verdict {
                continue;
            }
            let started = executor.stats.started_for(tick);
            let had_its_time = started.as_ref().is_some_and(|started| {
                started.at.duration_since(in_flight.sent) <= timeout / 2
                    && started.given(&executor.stats) >= timeout / 2
            });
            if had_its_time {
                self.timed_out(index);
                continue;
            }
            in_flight.awaits = Awaits::HostLate { said: false };
            ExecutorStats::bump(&executor.stats.host_late);
            tracing::debug!(
                executor = %executor.label,
                started_after = ?started.as_ref().map(|s| s.at.duration_since(in_flight.sent)),
                given = ?started.as_ref().map(|s| s.given(&executor.stats)),
                load = %crate::host::load(),
                "this host did not run the check in time; the executor is not judged by this poll"
            );
            if executor.reported_at.is_none() {
                self.host_late(index);
            }
        }
    }

    /// The poll in flight of executor `index` timed out, its check having had
    /// its time: `no reply within 5s`, the executor's fault. Its answer, when
    /// it comes, is counted late and dropped.
    fn timed_out(&mut self, index: usize) {
        let reason = format!(
            "no reply within {}",
            crate::duration::short(self.settings.poll_timeout)
        );
        let executor = &mut self.executors[index];
        if let Some(in_flight) = executor.in_flight.as_mut() {
            in_flight.awaits = Awaits::Late;
        }
        ExecutorStats::bump(&executor.stats.timeouts);
        // The verdict's line says it, once; a poll's timeout is detail.
        tracing::debug!(executor = %executor.label, "{reason}");
        self.observe(index, ExecutorHealth::unhealthy(reason), None, None, false);
    }

    /// Says executor `index` is `unknown` because this host did not run its
    /// check in time, unless it is `unhealthy` already: a fault that continues
    /// keeps its verdict and its reason while the host is busy.
    fn host_late(&mut self, index: usize) {
        let executor = &mut self.executors[index];
        if let Some(in_flight) = executor.in_flight.as_mut() {
            in_flight.awaits = Awaits::HostLate { said: true };
        }
        if matches!(executor.reported, ExecutorHealth::Unhealthy { .. }) {
            return;
        }
        let reason = format!(
            "not judged: Overseer's host did not run the check in time to answer within {}",
            crate::duration::short(self.settings.poll_timeout)
        );
        self.observe(index, ExecutorHealth::unknown(reason), None, None, false);
    }

    /// At each tick, the polls this host ran late that are still unanswered.
    /// One whose check has had the host for a whole timeout since it began
    /// ([`given`](crate::stats::Started::given)), or [`HOST_LATE_LIMIT`] timeouts whatever the host (a host
    /// starved for good must still name a hung executor), had its time, and
    /// its silence is the executor's (`no reply within 5s`). One whose check
    /// has still not started a whole timeout after it expired is `unknown`,
    /// naming the host ([`Self::host_late`]).
    fn rejudge(&mut self) {
        let timeout = self.settings.poll_timeout;
        for index in 0..self.executors.len() {
            let executor = &mut self.executors[index];
            let Some(in_flight) = executor.in_flight.as_mut() else {
                continue;
            };
            let Awaits::HostLate { said } = in_flight.awaits else {
                continue;
            };
            match executor.stats.started_for(in_flight.tick) {
                Some(started)
                    if started.given(&executor.stats) >= timeout
                        || started.at.elapsed() >= timeout * HOST_LATE_LIMIT =>
                {
                    self.timed_out(index);
                }
                None if !said && in_flight.sent.elapsed() >= timeout * 2 => self.host_late(index),
                _ => {}
            }
        }
    }

    /// An executor's answer: clears the guard it answers (the tick matches),
    /// and is observed, or, after its poll timed out, counted and dropped.
    /// Whether the executor's alarm rang while that poll was in flight.
    fn answered(&mut self, answer: Answered) -> bool {
        let Answered {
            executor: index,
            tick,
            health,
            detail,
            note,
            mut pending,
            host_busy,
        } = answer;
        let Some(executor) = self.executors.get_mut(index) else {
            return false;
        };
        // An answer to a poll not in flight (none is, or another tick's) is
        // not this supervisor's to count.
        let Some(in_flight) = executor.in_flight.filter(|f| f.tick == tick) else {
            return false;
        };
        executor.in_flight = None;
        if in_flight.awaits == Awaits::Late {
            ExecutorStats::bump(&executor.stats.late_replies);
            tracing::debug!(
                executor = %executor.label,
                verdict = %health,
                after = ?in_flight.sent.elapsed(),
                "answer came after the poll timed out; dropped"
            );
            return in_flight.rung;
        }
        executor.stats.observe_poll(in_flight.sent.elapsed());
        if host_busy {
            // Not the executor's fault: a fault it has keeps its reason.
            ExecutorStats::bump(&executor.stats.host_late);
            pending |= matches!(executor.reported, ExecutorHealth::Unhealthy { .. });
        }
        self.observe(index, health, detail, note, pending);
        in_flight.rung
    }

    /// Applies the damping thresholds, and reports the verdict that results;
    /// or, when the verdict held stays, the evidence if it changed. A pending
    /// observation (the check cannot judge yet) changes no verdict and counts
    /// toward none: before the first verdict it is not reported at all (the
    /// row stays `not checked yet`), after it only its evidence is.
    fn observe(
        &mut self,
        index: usize,
        observed: ExecutorHealth,
        detail: Option<Arc<Detail>>,
        note: Option<Reason>,
        pending: bool,
    ) {
        let settings = self.settings;
        let executor = &mut self.executors[index];
        if pending && executor.reported_at.is_none() {
            return;
        }
        let report = !pending
            && match &observed {
                ExecutorHealth::Healthy => {
                    executor.failures = 0;
                    executor.successes = executor.successes.saturating_add(1);
                    executor.reported == ExecutorHealth::Healthy
                        || executor.successes >= settings.successes_before_healthy
                }
                ExecutorHealth::Unhealthy { .. } => {
                    executor.successes = 0;
                    executor.failures = executor.failures.saturating_add(1);
                    matches!(executor.reported, ExecutorHealth::Unhealthy { .. })
                        || executor.failures >= settings.failures_before_unhealthy
                }
                ExecutorHealth::Unknown { .. } => {
                    executor.failures = 0;
                    executor.successes = 0;
                    true
                }
            };
        if !report {
            if executor.detail != detail {
                executor.detail = detail.clone();
                self.sink.do_send(NewVerdict {
                    executor: index,
                    health: executor.reported.clone(),
                    checked_at: executor.reported_at.unwrap_or_else(Utc::now),
                    detail,
                    note: executor.note.clone(),
                });
            }
            return;
        }
        log_change(
            &executor.label,
            &executor.reported,
            &observed,
            executor.since.elapsed(),
        );
        if executor.reported.as_str() != observed.as_str() {
            executor.since = Instant::now();
        }
        // Never before an earlier verdict's stamp: a wall clock stepped back
        // would put the history's transitions out of order.
        let now = crate::clock::now();
        executor.reported = observed.clone();
        executor.reported_at = Some(now);
        executor.detail = detail.clone();
        executor.note = note.clone();
        self.sink.do_send(NewVerdict {
            executor: index,
            health: observed,
            checked_at: now,
            detail,
            note,
        });
    }
}

/// One line per change of state, none per poll: `WARN` when an executor turns
/// unhealthy (with the reason), `INFO` when it is healthy (again) or unknown,
/// and when it stays unhealthy for another reason (both reasons said: a fault
/// that changed its cause, or a second one beside it; reasons hold still while
/// a fault lasts, so this is one line per change of cause, not per poll).
/// `lasted` is how long `before`'s state lasted.
fn log_change(executor: &str, before: &ExecutorHealth, after: &ExecutorHealth, lasted: Duration) {
    use ExecutorHealth::{Healthy, Unhealthy, Unknown};
    match (before, after) {
        (Unhealthy { reason: old }, Unhealthy { reason }) => {
            if old != reason {
                tracing::info!(executor = %executor, %reason, previous = %old, "executor still unhealthy, for another reason");
            }
        }
        (_, Unhealthy { reason }) => {
            tracing::warn!(executor = %executor, %reason, "executor turned unhealthy");
        }
        (Unhealthy { .. }, Healthy) => {
            let unhealthy_for = format!("{}s", lasted.as_secs_f64().round());
            tracing::info!(executor = %executor, %unhealthy_for, "executor is healthy again");
        }
        (Unknown { .. }, Healthy) => tracing::info!(executor = %executor, "executor is healthy"),
        (Healthy, Healthy) | (Unknown { .. }, Unknown { .. }) => {}
        (_, Unknown { reason }) => {
            tracing::info!(executor = %executor, %reason, "executor's verdict is unknown");
        }
    }
}

impl Actor for HealthSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.answers = Some(Arc::new(ctx.address().recipient()));
        self.poll_all(ctx);
        ctx.run_interval(self.settings.poll_interval, |act, ctx| act.poll_all(ctx));
        self.listen(ctx);
    }
}

impl Handler<Answered> for HealthSupervisor {
    type Result = ();

    fn handle(&mut self, answer: Answered, ctx: &mut Context<Self>) {
        let index = answer.executor;
        // A ring during the poll just answered: poll again, now.
        if self.answered(answer) {
            self.poll_now(index, ctx);
        }
    }
}

/// Stops polling (on shutdown); in-flight polls are abandoned.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct StopPolling;

impl Handler<StopPolling> for HealthSupervisor {
    type Result = ();

    fn handle(&mut self, _: StopPolling, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
