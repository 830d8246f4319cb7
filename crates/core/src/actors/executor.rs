//! `ExecutorActor`: one per executor, supervised. It runs its check off its own
//! thread and answers each `CheckHealth` with a message back to whoever asked
//! ([`Answered`], carrying the poll's tick), never through a reply future: the
//! asker waits on nothing, so polling every executor costs it one message out
//! and one in per executor, whatever their number.
//!
//! Every poll is answered exactly once. The answer's way back is a `Reply`
//! inside the message: should the actor drop the poll unanswered (it stopped or
//! restarted with the poll queued or its check running, or its mailbox was
//! closed), the reply answers for it as it is dropped, `unhealthy: the
//! executor's actor did not answer: ...`, so the asker's in-flight guard always
//! clears.
//!
//! actix restarts an actor only when it stops, not when a handler panics, so the
//! check runs in a task (or thread) of its own: a panic there comes back as an
//! error, the actor answers `Unhealthy("health check panicked: ...")` and stops,
//! and its `Supervisor` restarts it with a fresh check. Restarts are limited by a
//! [`RestartPolicy`]; past the limit the actor backs off instead of spinning.
//!
//! An async check runs on the watched pool of check threads
//! ([`crate::check::pool`]): one that blocks its thread is given that thread,
//! and runs on threads of its own from then on (the actor keeps that across
//! restarts); a blocking check runs on a thread of its own at every poll.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::airflow::queued::QueuedBoard;
use crate::backoff::Backoff;
use crate::check::pool::Watched;
use crate::check::{AsyncChecks, Check, Executor, panic_message};
use crate::detail::{Detail, Observation};
use crate::duration;
use crate::job::ExecutorHealth;
use crate::reason::Reason;
use crate::rules::{Airflow, Rules};
use crate::stats::ExecutorStats;

/// Asks an executor for its health, for one poll. Answered with an
/// [`Answered`] sent to the reply's recipient; never with a reply future.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct CheckHealth {
    reply: Reply,
}

impl CheckHealth {
    /// A poll of executor `executor` (its index in the asker's list) sent at
    /// tick `tick`, to be answered to `to`.
    pub fn new(executor: usize, tick: u64, to: Arc<Recipient<Answered>>) -> Self {
        Self {
            reply: Reply {
                to: Some(to),
                executor,
                tick,
            },
        }
    }
}

/// An executor's answer to one poll.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct Answered {
    /// The executor's index, as the poll gave it.
    pub executor: usize,
    /// The tick of the poll answered.
    pub tick: u64,
    /// The verdict (scrubbed of credentials), judged with the evidence
    /// ([`crate::rules`]).
    pub health: ExecutorHealth,
    /// The evidence, when there is any.
    pub detail: Option<Arc<Detail>>,
    /// Beside a `healthy` verdict, what is worth knowing all the same.
    pub note: Option<Reason>,
    /// The check has not heard enough to judge yet ([`Observation::pending`]):
    /// the verdict held stays.
    pub pending: bool,
    /// Overseer's host kept the check from judging
    /// ([`Observation::host_busy`]): `unknown`, unless the verdict held is
    /// `unhealthy`, which stays.
    pub host_busy: bool,
}

/// The way back for one poll's answer. It answers once: with the verdict, or,
/// dropped unanswered, with `unhealthy: the executor's actor did not answer`.
#[derive(Debug)]
struct Reply {
    /// Shared by every poll (an `Arc` clone each, not a new channel sender).
    to: Option<Arc<Recipient<Answered>>>,
    executor: usize,
    tick: u64,
}

impl Reply {
    fn send(mut self, observation: Observation) {
        self.answer(observation);
    }

    fn answer(&mut self, observation: Observation) {
        if let Some(to) = self.to.take() {
            // A supervisor that is gone (stopped, restarted) needs no answer.
            to.do_send(Answered {
                executor: self.executor,
                tick: self.tick,
                note: observation.healthy_note().cloned(),
                pending: observation.pending,
                host_busy: observation.host_busy,
                health: observation.health,
                detail: observation.detail.map(Arc::new),
            });
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        self.answer(
            ExecutorHealth::unhealthy(
                "the executor's actor did not answer: it stopped with the poll unanswered",
            )
            .into(),
        );
    }
}

/// Where an executor's actor finds the task instances Airflow holds queued
/// ([`crate::airflow::queued`]), and which of them are its own.
#[derive(Debug, Clone)]
pub struct QueuedSource {
    /// The latest read of `task_instance`, shared by every executor.
    pub board: Arc<QueuedBoard>,
    /// This executor's index in the [`crate::airflow::routes::Routes`] the reads are routed by.
    pub index: usize,
    /// Whether it runs the task instances that name no executor (the
    /// canary's, unless told otherwise).
    pub default: bool,
}

/// How often a panicking check may restart its actor before it backs off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Restarts allowed within `window` before backing off.
    pub max_restarts: usize,
    /// The window restarts are counted in.
    pub window: Duration,
    /// The first back-off; each further one doubles, up to `max_backoff`.
    pub backoff: Duration,
    /// The longest back-off.
    pub max_backoff: Duration,
}

impl Default for RestartPolicy {
    /// 5 restarts in 60 s, then back off 30 s, doubling up to 10 min.
    fn default() -> Self {
        Self {
            max_restarts: 5,
            window: Duration::from_secs(60),
            backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(600),
        }
    }
}

/// The actor around one executor's check.
pub struct ExecutorActor {
    executor: Executor,
    /// The check of this incarnation; rebuilt on every restart.
    check: Check,
    stats: Arc<ExecutorStats>,
    policy: RestartPolicy,
    /// Recent restart times: policy state, kept across restarts.
    restarts: VecDeque<Instant>,
    /// Where it stands against the restart policy.
    standing: Standing,
    /// How long the next back-off lasts: the policy's, doubling.
    backoff: Backoff,
    /// Where async checks run: the watched pool of check threads, so that a
    /// check that blocks when it should not stalls neither the actors nor the
    /// other checks ([`AsyncChecks::tasks_of`] in tests with paused time).
    checks: AsyncChecks,
    /// This executor as the pool's watchdog knows it: whether its async check
    /// blocks its thread. Kept across restarts, as the check's code is.
    watched: Arc<Watched>,
    /// The rules on work flowing, with what each remembers; kept across
    /// restarts ([`crate::rules`]).
    rules: Rules,
    /// Airflow's tables as the refresh reads them, when the database has them.
    queued: Option<QueuedSource>,
    /// Whether a check of this incarnation runs.
    run: CheckRun,
    /// This incarnation's check has not run yet: its first run starts it
    /// ([`crate::HealthCheck::start`]).
    unstarted: bool,
}

/// Whether a check of the actor's incarnation runs.
enum CheckRun {
    /// None: the next poll starts one.
    Idle,
    /// One runs. `waiting` holds the polls that came meanwhile, answered with
    /// its verdict when it ends. The supervisor's guard sends no second poll
    /// while one is unanswered, so these come only from a supervisor
    /// restarted meanwhile (which knows of no poll in flight): a hung check is
    /// still run once, never once more per restart, and its answer reaches
    /// the new supervisor.
    Running { waiting: Vec<Reply> },
}

impl ExecutorActor {
    pub fn new(
        executor: Executor,
        stats: Arc<ExecutorStats>,
        policy: RestartPolicy,
        checks: AsyncChecks,
    ) -> Self {
        let check = executor.build_check();
        let watched = Watched::new(executor.label(), stats.clone());
        let rules = Rules::standard(&executor.rules());
        Self {
            checks,
            watched,
            executor,
            check,
            stats,
            policy,
            restarts: VecDeque::new(),
            standing: Standing::Within,
            backoff: Backoff::new(policy.backoff, policy.max_backoff),
            rules,
            queued: None,
            run: CheckRun::Idle,
            unstarted: true,
        }
    }

    /// Judges work flowing with the task instances Airflow holds queued, read
    /// from `source` at each poll.
    pub fn with_queued(mut self, source: QueuedSource) -> Self {
        self.queued = Some(source);
        self
    }

    /// The check's observation, judged by the rules on work flowing.
    fn judge(&mut self, observation: Observation) -> Observation {
        let snapshot = self
            .queued
            .as_ref()
            .and_then(|source| Some((source, source.board.latest()?)));
        let airflow = snapshot.as_ref().map(|(source, snapshot)| Airflow {
            snapshot,
            index: source.index,
            default: source.default,
        });
        self.rules
            .judge(observation, airflow, Some(&self.stats), Instant::now())
    }

    /// Starts the actor under an actix `Supervisor`, which restarts it when it stops.
    pub fn start_supervised(self) -> Addr<Self> {
        actix::Supervisor::start(move |_| self)
    }

    /// Runs the check off this actor's thread: an async check on the check pool
    /// (or on a thread of its own, once it was found blocking), a blocking check
    /// on a thread of its own. Resolves to the verdict, or to the panic's message.
    fn run_check(&mut self, tick: u64) -> CheckFuture {
        let running = self.stats.check_started();
        let start = std::mem::replace(&mut self.unstarted, false);
        let stats = self.stats.clone();
        match &self.check {
            Check::Async(check) => {
                let check = check.clone();
                let work = async move {
                    // When the host runs it: the supervisor tells a check
                    // that got no time from one that got no answer.
                    stats.mark_started(tick);
                    let _running = running;
                    if start {
                        check.start().await;
                    }
                    check.observe().await
                };
                Box::pin(self.checks.run(work, &self.watched))
            }
            Check::Blocking(check) => {
                let check = check.clone();
                let (tx, rx) = oneshot::channel();
                let spawned = std::thread::Builder::new()
                    .name("overseer-check".into())
                    .spawn(move || {
                        stats.mark_started(tick);
                        let _running = running;
                        let outcome =
                            std::panic::catch_unwind(AssertUnwindSafe(|| check.observe()))
                                .map_err(|payload| panic_message(payload.as_ref()));
                        let _ = tx.send(outcome);
                    });
                match spawned {
                    Ok(_) => Box::pin(async move {
                        rx.await.unwrap_or_else(|_| {
                            Err("the check's thread ended without an answer".into())
                        })
                    }),
                    Err(e) => {
                        let reason = format!("cannot start a thread for the health check: {e}");
                        Box::pin(std::future::ready(Ok(
                            ExecutorHealth::unhealthy(reason).into()
                        )))
                    }
                }
            }
        }
    }
}

/// Where an executor's actor stands against its restart policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Within the policy's restarts: a panic restarts it at once.
    Within,
    /// Past the limit: polls are answered unhealthy, without a check, until then.
    BackingOff { until: Instant },
    /// Past the limit, its back-off over: the next panic backs off again,
    /// twice as long; a check that answers brings it back within.
    Probation,
}

/// A check run, as the actor awaits it: its observation, or the panic's message.
type CheckFuture = std::pin::Pin<Box<dyn Future<Output = Result<Observation, String>>>>;

impl Actor for ExecutorActor {
    type Context = Context<Self>;
}

impl Supervised for ExecutorActor {
    fn restarting(&mut self, _: &mut Context<Self>) {
        ExecutorStats::bump(&self.stats.restarts);
        self.check = self.executor.build_check();
        self.unstarted = true;
        // The check that ran ended with the old incarnation; the polls waiting
        // on it answer that the actor did not (their `Reply`'s drop).
        self.run = CheckRun::Idle;

        let now = Instant::now();
        self.restarts.push_back(now);
        while self
            .restarts
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.policy.window)
        {
            self.restarts.pop_front();
        }
        // Past the limit, every further restart backs off, each time twice as
        // long, until the check answers once without panicking.
        if self.standing != Standing::Within || self.restarts.len() > self.policy.max_restarts {
            let backoff = self.backoff.next_delay();
            self.standing = Standing::BackingOff {
                until: now + backoff,
            };
            tracing::warn!(
                executor = %self.executor.label(),
                restarts = self.restarts.len(),
                backoff = %duration::short(backoff),
                "health check keeps panicking; backing off"
            );
        }
    }
}

impl Handler<CheckHealth> for ExecutorActor {
    type Result = ();

    /// Starts the check and answers when it ends; the actor's context holds that
    /// one future (the supervisor's guard sends no second poll meanwhile).
    fn handle(&mut self, poll: CheckHealth, ctx: &mut Context<Self>) {
        let reply = poll.reply;
        if let Standing::BackingOff { until } = self.standing {
            if Instant::now() < until {
                let reason = format!(
                    "health check panicked {} times within {}; not run again for {}s",
                    self.restarts.len(),
                    duration::short(self.policy.window),
                    (until - Instant::now()).as_secs_f64().ceil(),
                );
                reply.send(ExecutorHealth::unhealthy(reason).into());
                return;
            }
            self.standing = Standing::Probation;
        }
        if let CheckRun::Running { waiting } = &mut self.run {
            self.stats.mark_joined(reply.tick);
            waiting.push(reply);
            return;
        }
        self.run = CheckRun::Running {
            waiting: Vec::new(),
        };
        ctx.spawn(
            self.run_check(reply.tick)
                .into_actor(self)
                .map(move |outcome, act, ctx| {
                    let waiting = match std::mem::replace(&mut act.run, CheckRun::Idle) {
                        CheckRun::Running { waiting } => waiting,
                        CheckRun::Idle => Vec::new(),
                    };
                    // A reason is clean as made ([`crate::reason::Reason`]),
                    // flow findings and panics included.
                    let answer = match outcome {
                        Ok(observation) => {
                            act.standing = Standing::Within;
                            act.backoff.reset();
                            // Every verdict passes here on its way to the table
                            // and the report: a check that quotes a URL in its
                            // detail loses its credentials here, whoever wrote
                            // the check.
                            act.judge(observation.scrubbed())
                        }
                        Err(message) => {
                            // One line in the log too: a panic's text may hold newlines.
                            let message = Reason::new(&message);
                            ExecutorStats::bump(&act.stats.panics);
                            tracing::error!(executor = %act.executor.label(), panic = %message, "health check panicked; restarting its actor");
                            ctx.stop();
                            ExecutorHealth::unhealthy(format!("health check panicked: {message}"))
                                .into()
                        }
                    };
                    reply.send(answer.clone());
                    for waiting in waiting {
                        waiting.send(answer.clone());
                    }
                }),
        );
    }
}
