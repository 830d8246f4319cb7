//! `ExecutorActor`: one per executor, supervised. It runs its check off its own
//! thread and answers `CheckHealth` with the verdict.
//!
//! actix restarts an actor only when it stops, not when a handler panics, so the
//! check runs in a task (or thread) of its own: a panic there comes back as an
//! error, the actor answers `Unhealthy("health check panicked: ...")` and stops,
//! and its `Supervisor` restarts it with a fresh check. Restarts are limited by a
//! [`RestartPolicy`]; past the limit the actor backs off instead of spinning.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::check::{Check, Executor};
use crate::duration;
use crate::job::ExecutorHealth;
use crate::stats::ExecutorStats;

/// Asks an executor for its health. Answered with the verdict; never an error.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "ExecutorHealth")]
pub struct CheckHealth;

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
    /// While backing off: until when, and how long the next back-off lasts.
    backoff_until: Option<Instant>,
    next_backoff: Duration,
    /// The restart limit was passed and no check has answered since.
    tripped: bool,
    /// Where async checks run: a dedicated runtime, so a check that blocks when it
    /// should not cannot stall the actors; `None` runs them as tasks on the actors'
    /// own runtime (used by tests with paused time).
    runtime: Option<tokio::runtime::Handle>,
}

impl ExecutorActor {
    pub fn new(
        executor: Executor,
        stats: Arc<ExecutorStats>,
        policy: RestartPolicy,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Self {
        let check = executor.build_check();
        Self {
            runtime,
            executor,
            check,
            stats,
            policy,
            restarts: VecDeque::new(),
            backoff_until: None,
            next_backoff: policy.backoff,
            tripped: false,
        }
    }

    /// Starts the actor under an actix `Supervisor`, which restarts it when it stops.
    pub fn start_supervised(self) -> Addr<Self> {
        actix::Supervisor::start(move |_| self)
    }

    /// Runs the check off this actor's thread: an async check as a task of its own
    /// (on the dedicated check runtime when there is one), a blocking check on a
    /// thread of its own. Resolves to the verdict, or to the panic's message.
    fn run_check(&self) -> Outcome {
        let running = self.stats.check_started();
        match &self.check {
            Check::Async(check) => {
                let check = check.clone();
                let work = async move {
                    let _running = running;
                    check.get_health().await
                };
                let task = match &self.runtime {
                    Some(handle) => handle.spawn(work),
                    None => tokio::spawn(work),
                };
                Box::pin(async move {
                    task.await.map_err(|e| match e.try_into_panic() {
                        Ok(payload) => panic_message(payload.as_ref()),
                        Err(e) => format!("the check was cancelled: {e}"),
                    })
                })
            }
            Check::Blocking(check) => {
                let check = check.clone();
                let (tx, rx) = oneshot::channel();
                let spawned = std::thread::Builder::new()
                    .name("overseer-check".into())
                    .spawn(move || {
                        let _running = running;
                        let outcome =
                            std::panic::catch_unwind(AssertUnwindSafe(|| check.get_health()))
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
                        Box::pin(std::future::ready(Ok(ExecutorHealth::unhealthy(reason))))
                    }
                }
            }
        }
    }
}

/// A running check: the verdict, or the panic's message.
type Outcome = std::pin::Pin<Box<dyn Future<Output = Result<ExecutorHealth, String>>>>;

/// The text of a panic, as `panic!` was given it.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".into())
}

impl Actor for ExecutorActor {
    type Context = Context<Self>;
}

impl Supervised for ExecutorActor {
    fn restarting(&mut self, _: &mut Context<Self>) {
        ExecutorStats::bump(&self.stats.restarts);
        self.check = self.executor.build_check();

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
        if self.tripped || self.restarts.len() > self.policy.max_restarts {
            self.tripped = true;
            let backoff = self.next_backoff;
            self.backoff_until = Some(now + backoff);
            self.next_backoff = (backoff * 2).min(self.policy.max_backoff);
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
    type Result = ResponseActFuture<Self, ExecutorHealth>;

    fn handle(&mut self, _: CheckHealth, _: &mut Context<Self>) -> Self::Result {
        if let Some(until) = self.backoff_until {
            if Instant::now() < until {
                let reason = format!(
                    "health check panicked {} times within {}; not run again for {}s",
                    self.restarts.len(),
                    duration::short(self.policy.window),
                    (until - Instant::now()).as_secs_f64().ceil(),
                );
                return Box::pin(actix::fut::ready(ExecutorHealth::unhealthy(reason)));
            }
            self.backoff_until = None;
        }
        Box::pin(self.run_check().into_actor(self).map(|outcome, act, ctx| match outcome {
            Ok(health) => {
                act.tripped = false;
                act.next_backoff = act.policy.backoff;
                // Every verdict passes here on its way to the table and the
                // report: a check that quotes a URL in its reason loses its
                // credentials here, whoever wrote the check.
                health.scrubbed()
            }
            Err(message) => {
                let message = crate::secret::scrub(&message);
                ExecutorStats::bump(&act.stats.panics);
                tracing::error!(executor = %act.executor.label(), panic = %message, "health check panicked; restarting its actor");
                ctx.stop();
                ExecutorHealth::unhealthy(format!("health check panicked: {message}"))
            }
        }))
    }
}
