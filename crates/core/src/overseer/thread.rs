//! The `overseer-actors` thread: where the actors live, apart from the host's
//! threads and runtime, and how a handle starts and ends it.
//!
//! The thread also keeps the two core actors running. Each runs as a task of
//! its own, whose end the thread sees at once: an actor that stops ends its
//! task, and one that panics ends it too (tokio catches the panic in that task;
//! the thread and every other actor go on). The thread then logs why, counts
//! the restart (`overseer_actor_restarts_total`), and starts the actor again:
//!
//! - the **supervisor** is built anew from the executors' actors (their
//!   addresses and counters) and polls them at once; the aggregator keeps the
//!   verdicts meanwhile;
//! - the **aggregator** is built anew, takes its rows' verdicts back from the
//!   table and reads every other live row again; readers keep their channel
//!   (its sender is the thread's as much as the aggregator's). The supervisor
//!   is started again with it, to send its verdicts there, and reports every
//!   executor afresh.
//!
//! Restarts follow [`CORE_RESTART_POLICY`]: at once, unless an actor keeps
//! ending, then after a back-off.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::actors::CoreActor;
use crate::actors::aggregator::Finish;
use crate::actors::supervisor::StopPolling;
use crate::actors::{Aggregator, HealthSupervisor, NewVerdict, RestartPolicy};
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::report::HealthReport;
use crate::stats::AggregatorStats;

/// How often a core actor may be restarted at once before restarts back off:
/// 5 within a minute, then 1 s, doubling up to a minute, until one runs a
/// minute without ending.
pub const CORE_RESTART_POLICY: RestartPolicy = RestartPolicy {
    max_restarts: 5,
    window: Duration::from_secs(60),
    backoff: Duration::from_secs(1),
    max_backoff: Duration::from_secs(60),
};

/// Builds a supervisor that sends its verdicts to the recipient given.
pub(super) type MakeSupervisor = Box<dyn Fn(Recipient<NewVerdict>) -> HealthSupervisor>;

/// Builds an aggregator over this session's rows.
pub(super) type MakeAggregator = Box<dyn Fn() -> Aggregator>;

/// What the actors' thread needs to start the core actors, and start them
/// again, and the reports the aggregator publishes.
pub(super) struct Started {
    pub(super) supervisor: MakeSupervisor,
    pub(super) aggregator: MakeAggregator,
    /// Where restarts are counted.
    pub(super) stats: Arc<AggregatorStats>,
    pub(super) reports: watch::Receiver<Arc<HealthReport>>,
    /// Tasks of the actors' runtime besides the actors (the queued task
    /// reader): aborted, and awaited, before the runtime ends, so none is
    /// dropped mid-read where its pooled connection cannot be given back.
    pub(super) background: Vec<tokio::task::JoinHandle<()>>,
}

/// Starts `actor` as a task of its own, and returns its address and the task.
/// The task ends when the actor stops, or with the panic's payload when a
/// handler of it panics.
fn spawn_actor<A: Actor<Context = Context<A>>>(actor: A) -> (Addr<A>, JoinHandle<()>) {
    let context = Context::new();
    let address = context.address();
    let task = actix_rt::spawn(context.into_future(actor));
    (address, task)
}

/// One running core actor.
struct Running<A: Actor> {
    address: Addr<A>,
    task: JoinHandle<()>,
}

/// Restarts of one core actor, by [`CORE_RESTART_POLICY`].
#[derive(Debug)]
struct Restarts {
    recent: VecDeque<Instant>,
    backoff: Backoff,
}

impl Restarts {
    fn new() -> Self {
        Self {
            recent: VecDeque::new(),
            backoff: Backoff::new(CORE_RESTART_POLICY.backoff, CORE_RESTART_POLICY.max_backoff),
        }
    }

    /// Records a restart about to happen; how long to wait before it.
    fn delay(&mut self) -> Duration {
        let now = Instant::now();
        let policy = CORE_RESTART_POLICY;
        if self
            .recent
            .back()
            .is_some_and(|last| now.duration_since(*last) > policy.window)
        {
            // It ran a whole window without ending: a fresh start.
            self.backoff.reset();
        }
        self.recent.push_back(now);
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > policy.window)
        {
            self.recent.pop_front();
        }
        if self.recent.len() <= policy.max_restarts {
            return Duration::ZERO;
        }
        self.backoff.next_delay()
    }
}

/// The core actors' addresses, as of their latest start.
#[derive(Debug, Clone)]
#[cfg_attr(
    not(test),
    expect(dead_code, reason = "read by this crate's tests of restarts")
)]
pub(super) struct Addresses {
    pub(super) supervisor: Addr<HealthSupervisor>,
    pub(super) aggregator: Addr<Aggregator>,
}

/// The two core actors, kept running.
struct Core {
    make_supervisor: MakeSupervisor,
    make_aggregator: MakeAggregator,
    stats: Arc<AggregatorStats>,
    supervisor: Running<HealthSupervisor>,
    aggregator: Running<Aggregator>,
    supervisor_restarts: Restarts,
    aggregator_restarts: Restarts,
    /// Their addresses, sent again at every restart.
    addresses: watch::Sender<Addresses>,
}

impl Core {
    fn start(started: Started) -> (Self, watch::Receiver<Arc<HealthReport>>) {
        let Started {
            supervisor: make_supervisor,
            aggregator: make_aggregator,
            stats,
            reports,
            background: _,
        } = started;
        let (address, task) = spawn_actor(make_aggregator());
        let aggregator = Running { address, task };
        let (address, task) = spawn_actor(make_supervisor(aggregator.address.clone().recipient()));
        let (addresses, _) = watch::channel(Addresses {
            supervisor: address.clone(),
            aggregator: aggregator.address.clone(),
        });
        let core = Self {
            make_supervisor,
            make_aggregator,
            stats,
            supervisor: Running { address, task },
            aggregator,
            supervisor_restarts: Restarts::new(),
            aggregator_restarts: Restarts::new(),
            addresses,
        };
        (core, reports)
    }

    /// Waits until a core actor ends, and says which and how.
    async fn ended(&mut self) -> (CoreActor, std::result::Result<(), tokio::task::JoinError>) {
        tokio::select! {
            ended = &mut self.supervisor.task => (CoreActor::Supervisor, ended),
            ended = &mut self.aggregator.task => (CoreActor::Aggregator, ended),
        }
    }

    /// Logs how `actor` ended, counts its restart, and says how long to wait
    /// before it (by the restart policy).
    fn record(
        &mut self,
        actor: CoreActor,
        ended: std::result::Result<(), tokio::task::JoinError>,
    ) -> Duration {
        let (counter, restarts) = match actor {
            CoreActor::Supervisor => (
                &self.stats.restarts.supervisor,
                &mut self.supervisor_restarts,
            ),
            CoreActor::Aggregator => (
                &self.stats.restarts.aggregator,
                &mut self.aggregator_restarts,
            ),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let delay = restarts.delay();
        let after = crate::duration::short(delay);
        match ended {
            Ok(()) => {
                tracing::error!(actor = actor.name(), %after, "a core actor stopped; restarting it");
            }
            Err(e) => {
                let panic = match e.try_into_panic() {
                    Ok(payload) => {
                        crate::secret::scrub(&crate::check::panic_message(payload.as_ref()))
                    }
                    Err(e) => e.to_string(),
                };
                tracing::error!(actor = actor.name(), %panic, %after, "a core actor panicked; restarting it");
            }
        }
        delay
    }

    /// Starts `actor` again (and, for the aggregator, the supervisor with it).
    async fn restart(&mut self, actor: CoreActor) {
        if actor == CoreActor::Aggregator {
            let (address, task) = spawn_actor((self.make_aggregator)());
            self.aggregator = Running { address, task };
            // The supervisor sends to the aggregator it was built with.
            self.supervisor.task.abort();
            let _ = (&mut self.supervisor.task).await;
            self.stats
                .restarts
                .supervisor
                .fetch_add(1, Ordering::Relaxed);
        }
        let sink = self.aggregator.address.clone().recipient();
        let (address, task) = spawn_actor((self.make_supervisor)(sink));
        self.supervisor = Running { address, task };
        self.addresses.send_replace(Addresses {
            supervisor: self.supervisor.address.clone(),
            aggregator: self.aggregator.address.clone(),
        });
        tracing::info!(actor = actor.name(), "core actor restarted");
    }
}

/// The `overseer-actors` thread: an actix `System` on a runtime of its own, and
/// the two signals between it and the handle: `stop` (sent by
/// [`Overseer::shutdown`](super::Overseer::shutdown) or a drop) and `done` (the last verdicts written).
pub(super) struct ActorsThread {
    stop: Option<oneshot::Sender<()>>,
    done: Option<oneshot::Receiver<Result<()>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The core actors' current addresses (the tests make them stop or panic
    /// through these).
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "read by this crate's tests of restarts")
    )]
    addresses: watch::Receiver<Addresses>,
}

impl ActorsThread {
    /// Starts the thread, runs `start` on it, and returns once the actors run (or
    /// failed to start). `checks`, the async checks' threads, live and end with
    /// the thread.
    pub(super) async fn spawn<F>(
        checks: crate::check::pool::CheckThreads,
        mut ousted: watch::Receiver<Option<String>>,
        start: impl FnOnce() -> F + Send + 'static,
    ) -> Result<(Self, watch::Receiver<Arc<HealthReport>>)>
    where
        F: Future<Output = Result<Started>> + 'static,
    {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        let (done_tx, done_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("overseer-actors".into())
            .spawn(move || {
                let system = actix_rt::System::with_tokio_rt(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a runtime for the actors")
                });
                system.block_on(async move {
                    let started = match start().await {
                        Ok(started) => started,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let mut started = started;
                    let background = std::mem::take(&mut started.background);
                    let (mut core, reports) = Core::start(started);
                    let _ = ready_tx.send(Ok((reports, core.addresses.subscribe())));
                    // Run until asked to stop, or until the handle is dropped,
                    // or until another writer ended this session's rows; start
                    // a core actor again whenever one ends.
                    loop {
                        tokio::select! {
                            _ = &mut stop_rx => break,
                            Ok(_) = ousted.wait_for(Option::is_some) => break,
                            (actor, ended) = core.ended() => {
                                let delay = core.record(actor, ended);
                                tokio::select! {
                                    _ = &mut stop_rx => break,
                                    () = tokio::time::sleep(delay) => core.restart(actor).await,
                                }
                            }
                        }
                    }
                    let _ = core.supervisor.address.send(StopPolling).await;
                    let finished = core
                        .aggregator
                        .address
                        .send(Finish)
                        .await
                        .unwrap_or_else(|e| {
                            Err(Error::Runtime(format!("the aggregator is gone: {e}")))
                        });
                    for task in background {
                        task.abort();
                        let _ = task.await;
                    }
                    let _ = done_tx.send(finished);
                    System::current().stop();
                });
                // A hung check may hold a task forever: do not wait for it.
                checks.shutdown_background();
            })
            .map_err(|e| Error::Runtime(format!("cannot start the actors' thread: {e}")))?;
        let (reports, addresses) = ready_rx
            .await
            .map_err(|_| Error::Runtime("the actors' thread ended while starting".into()))??;
        Ok((
            Self {
                stop: Some(stop_tx),
                done: Some(done_rx),
                thread: Some(thread),
                addresses,
            },
            reports,
        ))
    }

    /// Asks the actors to finish, without waiting.
    pub(super) fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Asks the actors to finish, and waits for the last verdicts and the thread.
    pub(super) async fn stop(&mut self) -> Result<()> {
        self.signal_stop();
        let result = match self.done.take() {
            Some(done) => done
                .await
                .unwrap_or_else(|_| Err(Error::Runtime("the actors' thread ended early".into()))),
            None => Ok(()),
        };
        let joined = match self.thread.take() {
            Some(thread) => tokio::task::spawn_blocking(move || thread.join())
                .await
                .map_err(|e| e.to_string())
                .and_then(|joined| joined.map_err(|_| "it panicked".to_owned())),
            None => Ok(()),
        };
        // The actors' runtime ended badly (a panic while it wound down, seen on
        // stderr): say so, after any error of the last write.
        result.and(
            joined.map_err(|e| {
                Error::Runtime(format!("the actors' thread did not end cleanly: {e}"))
            }),
        )
    }
}

#[cfg(test)]
mod tests;
