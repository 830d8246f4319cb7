//! Where async checks run: a few `overseer-check` threads of Overseer's own,
//! watched, so that a check that blocks its thread cannot starve the others.
//!
//! An async check should only ever wait. One that blocks all the same (a
//! `std::thread::sleep`, a synchronous client inside an `async fn`) holds the
//! thread that polls it; on a plain runtime of two threads, two such checks
//! would stop every other async check. Here a watchdog looks at the pool's
//! threads every [`WATCH_EVERY`] while a poll runs on them (and sleeps, with no
//! timer, while none does):
//!
//! - a poll that has run longer than [`STALL_AFTER`] gives its thread to its
//!   check, for good: the thread polls that check alone until it ends (a thread
//!   of its own, as a blocking check has), then ends too;
//! - a new thread takes its place in the pool at once, so [`CHECK_THREADS`]
//!   threads poll the other checks again within `STALL_AFTER + WATCH_EVERY`
//!   of a thread blocking;
//! - the executor is marked (`WARN` once, counted in `stalls`): its later runs
//!   start on a thread of their own and never enter the pool again.
//!
//! With the supervisor's in-flight guard, a check that blocks forever therefore
//! holds one thread forever, and nothing else; one that blocks for a while costs a
//! thread per run, as a [`BlockingHealthCheck`](super::BlockingHealthCheck) does.
//!
//! The pool only polls. IO, timers and the tasks a check spawns belong to a
//! small tokio runtime (`overseer-io` threads) that every pool thread enters;
//! those spawned tasks are not watched (Overseer's own checks spawn only tasks
//! that wait).
//!
//! Paused-time tests cannot use threads of their own (their clock would not
//! follow): [`AsyncChecks::tasks_of`] runs checks as plain tasks of a runtime.
//!
//! # Why a pool of its own
//!
//! Overseer runs checks it did not write, and must keep answering for the
//! others when one hangs. What it needs: a bounded number of threads for the
//! checks that only wait (thousands of them on [`CHECK_THREADS`]), a check
//! that blocks never holding up the others, and a hung one never piling up
//! threads (one per executor at most, with the supervisor's in-flight guard).
//! What tokio offers instead:
//!
//! - async checks as tasks of a runtime (the actors' or one of their own): a
//!   check that blocks holds its worker thread, tokio neither notices nor
//!   replaces it, and as many blocking checks as the runtime has workers stop
//!   every other check;
//! - every check on `spawn_blocking` (a `block_on` inside): a thread per check
//!   run, so the blocking pool grows with the checks in flight, up to 512
//!   threads (tokio's default `max_blocking_threads`), past which the next runs
//!   queue behind whatever holds those threads, hung checks among them; and a
//!   closure it started cannot be cancelled, nor its thread taken back.
//!
//! The pool polls what waits on its few threads, and only a check found
//! blocking costs a thread of its own, for as long as it blocks. The stress
//! tests in `pool/tests.rs` hold it to that: many checks, wakes from threads
//! outside the pool, the pool stopped during polls; each answers (or is
//! cancelled) exactly once, on no more threads than the pool's.
//!
//! Measured against both (`overseer-bench --only pool`, BENCHMARKS.md
//! section 9, 2 runs on 2 cores): beside 1,000 async checks that block for
//! ever, 10 healthy executors had every poll answered from 51–53 s on with the
//! pool (none before: it takes the blocked checks off its threads at ~20 a
//! second), and never in 90 s with `spawn_blocking` (512 threads held, the
//! rest queued behind them) or as tasks (both workers held); 10,000 checks
//! waiting 5 ms on a timer cost 14% of a core on 7 threads with the pool, 17%
//! on 7 as tasks, 33% on 519 with `spawn_blocking`. So the pool stays.
//!
//! [`CHECK_THREADS`]: crate::overseer::CHECK_THREADS

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::stats::ExecutorStats;

mod task;
mod threads;

use task::{AtomicState, State, Task};
pub(crate) use threads::CheckThreads;
use threads::{Shared, own_thread};

/// How long one poll of an async check may hold its thread before the
/// watchdog gives the thread to that check and puts a new one in the pool. A
/// poll that only waits takes microseconds; a tenth of a second is a check
/// that blocks.
pub const STALL_AFTER: Duration = Duration::from_millis(100);

/// How often the watchdog looks at the pool's threads: a blocked thread is
/// replaced within `STALL_AFTER + WATCH_EVERY`.
pub const WATCH_EVERY: Duration = Duration::from_millis(25);

/// Worker threads of the tokio runtime under the pool: its IO and timer
/// drivers, and the tasks checks spawn (the Celery check's broker probes).
const IO_THREADS: usize = 2;

/// The name of every thread that polls checks, in the pool or of its own.
const CHECK_THREAD_NAME: &str = "overseer-check";

/// The outcome of a check run: its value, or its panic's message.
pub(crate) type Outcome<T> = Result<T, String>;

/// Where async checks run. Cheap to clone.
#[derive(Clone)]
pub struct AsyncChecks(Runner);

#[derive(Clone)]
enum Runner {
    /// On the watched pool.
    Pool(Arc<Shared>),
    /// Elsewhere, unwatched: see [`CheckRunner`].
    Elsewhere(Arc<dyn CheckRunner>),
}

/// Somewhere other than the check pool to run async checks, for
/// [`crate::OverseerBuilder::async_checks`]: a program that wants its checks
/// as tasks of its own runtime, a test whose clock is paused (the pool's
/// threads would not follow it), a benchmark comparing runners. Whatever runs
/// there is not watched: a check that blocks holds whatever it runs on.
pub trait CheckRunner: Send + Sync + 'static {
    /// Runs `check` to its end. It answers through a channel of its own, and
    /// never panics (a panic of the check it wraps is caught and answered):
    /// dropping it unfinished answers that the check was cancelled.
    fn run(&self, check: Pin<Box<dyn Future<Output = ()> + Send>>);
}

/// A tokio runtime runs each check as a task of its own.
impl CheckRunner for tokio::runtime::Handle {
    fn run(&self, check: Pin<Box<dyn Future<Output = ()> + Send>>) {
        self.spawn(check);
    }
}

impl std::fmt::Debug for AsyncChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Runner::Pool(_) => "AsyncChecks::Pool",
            Runner::Elsewhere(_) => "AsyncChecks::Elsewhere",
        })
    }
}

impl AsyncChecks {
    /// Runs checks as plain tasks of `runtime`, with no watchdog: for tests whose
    /// clock is paused, which the pool's threads would not follow. A check that
    /// blocks stalls that runtime.
    pub fn tasks_of(runtime: tokio::runtime::Handle) -> Self {
        Self::on(runtime)
    }

    /// Runs checks on `runner` instead of the pool ([`CheckRunner`]).
    pub fn on(runner: impl CheckRunner) -> Self {
        Self(Runner::Elsewhere(Arc::new(runner)))
    }

    /// Starts `check`: on the pool, or on a thread of its own if `executor`'s
    /// check was found blocking its thread before. Resolves to its value, or to
    /// its panic's message; to `Err` as well if it was dropped unfinished (the
    /// pool stopped).
    pub(crate) fn run<F>(
        &self,
        check: F,
        executor: &Arc<Watched>,
    ) -> impl Future<Output = Outcome<F::Output>> + use<F>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let guarded = Guarded {
            check: Box::pin(check),
            answer: Some(answer),
        };
        match &self.0 {
            Runner::Pool(pool) => {
                let task = Arc::new(Task {
                    state: AtomicState::new(State::Scheduled),
                    future: Mutex::new(Some(Box::pin(guarded))),
                    home: Mutex::new(None),
                    pool: pool.clone(),
                    executor: executor.clone(),
                    waits: AtomicBool::new(false),
                });
                if executor.blocks.load(SeqCst) {
                    own_thread(task);
                } else {
                    pool.push(task);
                }
            }
            Runner::Elsewhere(runner) => runner.run(Box::pin(guarded)),
        }
        async move {
            answered
                .await
                .unwrap_or_else(|_| Err("the check was cancelled".into()))
        }
    }
}

/// One executor's check, as the watchdog knows it.
pub(crate) struct Watched {
    /// The executor, for the log.
    label: String,
    stats: Arc<ExecutorStats>,
    /// It blocked a pool thread once: its runs start on a thread of their own.
    blocks: AtomicBool,
}

impl Watched {
    pub(crate) fn new(label: String, stats: Arc<ExecutorStats>) -> Arc<Self> {
        Arc::new(Self {
            label,
            stats,
            blocks: AtomicBool::new(false),
        })
    }

    /// The watchdog found one of its polls holding a thread for `held`.
    ///
    /// The log says what was measured, and blames no check: a poll that held
    /// its thread may be a check that blocks, or a poll that waited for a CPU on
    /// a busy machine (Overseer's own checks only wait, and are seen so when
    /// the machine is short of CPU), and the watchdog cannot tell them apart.
    fn blocked(&self, held: Duration) {
        ExecutorStats::bump(&self.stats.stalls);
        if !self.blocks.swap(true, SeqCst) {
            tracing::warn!(
                executor = %self.label,
                held = %crate::duration::short(held),
                limit = %crate::duration::short(STALL_AFTER),
                "a poll of this executor's async health check held its thread longer \
                 than the limit (the check blocked it, or the machine was short of CPU); \
                 its runs go on a thread of their own from now on"
            );
        }
    }
}

/// A check with the way back for its outcome: catches its panic, so that a
/// pool thread never unwinds.
struct Guarded<F: Future> {
    check: Pin<Box<F>>,
    answer: Option<oneshot::Sender<Outcome<F::Output>>>,
}

impl<F: Future> Future for Guarded<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let outcome =
            match std::panic::catch_unwind(AssertUnwindSafe(|| this.check.as_mut().poll(cx))) {
                Ok(Poll::Pending) => return Poll::Pending,
                Ok(Poll::Ready(value)) => Ok(value),
                Err(payload) => Err(super::panic_message(payload.as_ref())),
            };
        if let Some(answer) = this.answer.take() {
            let _ = answer.send(outcome);
        }
        Poll::Ready(())
    }
}

/// Locks, ignoring poisoning: nothing here panics while holding a lock (checks
/// are polled under [`Guarded`]'s `catch_unwind`).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
