//! Where async checks run: a few `overseer-check` threads of Overseer's own,
//! watched, so that a check that blocks its thread cannot starve the others.
//!
//! An async check should only ever wait. One that blocks all the same (a
//! `std::thread::sleep`, a synchronous client inside an `async fn`) holds the
//! thread that polls it; on a plain runtime of two threads, two such checks
//! would stop every other async check. Here a watchdog looks at the pool's
//! threads every [`WATCH_EVERY`]:
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

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};
use std::thread::Thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::stats::ExecutorStats;

mod task;

use task::{AtomicState, Settled, State, Task};

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
    /// As plain tasks of a tokio runtime, unwatched.
    Tasks(tokio::runtime::Handle),
    /// Each run on the runtime's blocking threads, a `block_on` inside:
    /// `overseer-bench`'s comparison only.
    SpawnBlocking(tokio::runtime::Handle),
}

impl std::fmt::Debug for AsyncChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Runner::Pool(_) => "AsyncChecks::Pool",
            Runner::Tasks(_) => "AsyncChecks::Tasks",
            Runner::SpawnBlocking(_) => "AsyncChecks::SpawnBlocking",
        })
    }
}

impl AsyncChecks {
    /// Runs checks as plain tasks of `runtime`, with no watchdog: for tests whose
    /// clock is paused, which the pool's threads would not follow. A check that
    /// blocks stalls that runtime.
    pub fn tasks_of(runtime: tokio::runtime::Handle) -> Self {
        Self(Runner::Tasks(runtime))
    }

    /// Runs every check as `spawn_blocking(move || handle.block_on(check))` on
    /// `runtime`: a thread per check run, up to the runtime's
    /// `max_blocking_threads`, unwatched. It exists for `overseer-bench --only
    /// pool`, which measures the pool against it (see the header); not for use.
    #[doc(hidden)]
    pub fn spawn_blocking_on(runtime: tokio::runtime::Handle) -> Self {
        Self(Runner::SpawnBlocking(runtime))
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
            Runner::Tasks(runtime) => {
                runtime.spawn(guarded);
            }
            Runner::SpawnBlocking(runtime) => {
                let handle = runtime.clone();
                runtime.spawn_blocking(move || handle.block_on(guarded));
            }
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

/// The threads that own check threads: the pool's and the IO runtime. Ends
/// with the actors' thread.
pub(crate) struct CheckThreads {
    pool: Arc<Shared>,
    io: tokio::runtime::Runtime,
}

impl CheckThreads {
    /// Starts the IO runtime, `threads` pool threads and the watchdog.
    pub(crate) fn start(threads: usize) -> std::io::Result<Self> {
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(IO_THREADS)
            .thread_name("overseer-io")
            .enable_all()
            .build()?;
        let pool = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            workers: Mutex::new(Vec::new()),
            io: io.handle().clone(),
            watchdog: OnceLock::new(),
            live: Mutex::new(HashMap::new()),
        });
        let started = Self { pool, io };
        // Should a thread not start, those already running see the pool
        // stopped and end.
        let spawned = (0..threads)
            .try_for_each(|_| spawn_worker(&started.pool))
            .and_then(|()| {
                let watched = started.pool.clone();
                std::thread::Builder::new()
                    .name("overseer-watch".into())
                    .spawn(move || watch(&watched))
            });
        match spawned {
            Ok(watchdog) => {
                let _ = started.pool.watchdog.set(watchdog.thread().clone());
                Ok(started)
            }
            Err(e) => {
                started.shutdown_background();
                Err(e)
            }
        }
    }

    /// Where the actors start async checks.
    pub(crate) fn checks(&self) -> AsyncChecks {
        AsyncChecks(Runner::Pool(self.pool.clone()))
    }

    /// Stops the pool and the watchdog, drops every check not being polled
    /// (queued, or waiting for a wake), and shuts the IO runtime down without
    /// waiting: a check blocked in a poll keeps its thread, and nothing waits
    /// for it. A check being polled meanwhile is dropped when that poll ends,
    /// unless it answered.
    pub(crate) fn shutdown_background(self) {
        let queued = {
            let mut queue = lock(&self.pool.queue);
            queue.stopped = true;
            std::mem::take(&mut queue.tasks)
        };
        self.pool.work.notify_all();
        if let Some(watchdog) = self.pool.watchdog.get() {
            watchdog.unpark();
        }
        let waiting = std::mem::take(&mut *lock(&self.pool.live));
        for task in queued.into_iter().chain(waiting.into_values()) {
            task.cancel();
        }
        self.io.shutdown_background();
    }
}

/// What the pool's threads, the watchdog and the tasks share.
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a task is queued while a thread waits.
    work: Condvar,
    /// The threads that poll from the queue; a thread the watchdog gave to a
    /// check leaves it.
    workers: Mutex<Vec<Arc<Worker>>>,
    /// The runtime every check thread enters: IO, timers, spawned tasks.
    io: tokio::runtime::Handle,
    /// Unparked to stop.
    watchdog: OnceLock<Thread>,
    /// Every task that waited for a wake and is not done yet, by address: the
    /// pool owns them, as a runtime owns its tasks, so a check that waits on
    /// nothing (a future that never wakes) is held, not dropped, and ends only
    /// with the pool. (A queued task is the queue's, a running one its
    /// thread's; a check that answers at its first poll never enters here.)
    live: Mutex<HashMap<usize, Arc<Task>>>,
}

#[derive(Default)]
struct Queue {
    tasks: VecDeque<Arc<Task>>,
    /// Threads waiting for a task.
    idle: usize,
    /// Of those, how many were signalled and have not woken yet: a burst of
    /// tasks signals each waiting thread once, not once per task.
    waking: usize,
    stopped: bool,
}

impl Shared {
    fn push(&self, task: Arc<Task>) {
        let mut queue = lock(&self.queue);
        if queue.stopped {
            drop(queue);
            task.cancel();
            return;
        }
        queue.tasks.push_back(task);
        let wake = queue.idle > queue.waking;
        if wake {
            queue.waking += 1;
        }
        drop(queue);
        if wake {
            self.work.notify_one();
        }
    }

    /// The next task, waiting for one; `None` once the pool stopped.
    fn next(&self) -> Option<Arc<Task>> {
        let mut queue = lock(&self.queue);
        loop {
            if queue.stopped {
                return None;
            }
            if let Some(task) = queue.tasks.pop_front() {
                return Some(task);
            }
            queue.idle += 1;
            queue = self.work.wait(queue).unwrap_or_else(|e| e.into_inner());
            queue.idle -= 1;
            // (A spurious wake-up may take another's signal: one more is sent.)
            queue.waking = queue.waking.saturating_sub(1);
        }
    }
}

/// One pool thread, as the watchdog sees it.
struct Worker {
    thread: OnceLock<Thread>,
    slot: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    /// The task being polled, and since when.
    polling: Option<(Instant, Arc<Task>)>,
    /// The watchdog gave this thread to that task.
    given: bool,
}

/// Starts a pool thread (it joins the watchdog's list itself).
fn spawn_worker(pool: &Arc<Shared>) -> std::io::Result<()> {
    let worker = Arc::new(Worker {
        thread: OnceLock::new(),
        slot: Mutex::new(Slot::default()),
    });
    lock(&pool.workers).push(worker.clone());
    let shared = pool.clone();
    let spawned = std::thread::Builder::new()
        .name(CHECK_THREAD_NAME.into())
        .spawn(move || work(&shared, &worker));
    if let Err(e) = spawned {
        lock(&pool.workers).pop();
        return Err(e);
    }
    Ok(())
}

/// A pool thread: polls queued tasks until the pool stops, or until the
/// watchdog gives it to the task it is polling.
fn work(pool: &Shared, me: &Worker) {
    let _io = pool.io.enter();
    me.thread.get_or_init(std::thread::current);
    while let Some(task) = pool.next() {
        lock(&me.slot).polling = Some((Instant::now(), task.clone()));
        let ready = task.poll_once();
        let given = {
            let mut slot = lock(&me.slot);
            slot.polling = None;
            slot.given
        };
        // Settled only now: had the watchdog given this thread to the task,
        // its wakes already come here.
        match task.settle(ready) {
            Settled::Again if !given => pool.push(task),
            _ if given => {
                drive(&task);
                return;
            }
            _ => {}
        }
    }
}

/// Polls `task` on this thread, its home, until it is done.
fn drive(task: &Arc<Task>) {
    loop {
        match task.state.load() {
            State::Done => return,
            State::Scheduled => {
                let ready = task.poll_once();
                task.settle(ready);
            }
            _ => std::thread::park(),
        }
    }
}

/// Runs a task on a thread of its own from the start (its check blocks).
fn own_thread(task: Arc<Task>) {
    let pool = task.pool.clone();
    let mine = task.clone();
    let spawned = std::thread::Builder::new()
        .name(CHECK_THREAD_NAME.into())
        .spawn(move || {
            let _io = mine.pool.io.enter();
            // Before its first poll: nothing can wake it yet.
            *lock(&mine.home) = Some(std::thread::current());
            drive(&mine);
        });
    if let Err(e) = spawned {
        tracing::warn!(executor = %task.executor.label, error = %e, "cannot start a thread for a health check; it runs on the pool");
        pool.push(task);
    }
}

/// The watchdog: gives a thread whose poll overran [`STALL_AFTER`] to its task,
/// and puts a new thread in the pool in its place.
fn watch(pool: &Arc<Shared>) {
    loop {
        std::thread::park_timeout(WATCH_EVERY);
        if lock(&pool.queue).stopped {
            return;
        }
        let now = Instant::now();
        let mut given = 0;
        lock(&pool.workers).retain(|worker| {
            let mut slot = lock(&worker.slot);
            let (Some((since, task)), Some(thread)) = (&slot.polling, worker.thread.get()) else {
                return true;
            };
            let held = now.saturating_duration_since(*since);
            if held < STALL_AFTER {
                return true;
            }
            // Under the slot's lock, so the thread learns it before it settles
            // the task, and every later wake of the task comes to it.
            *lock(&task.home) = Some(thread.clone());
            task.executor.blocked(held);
            slot.given = true;
            given += 1;
            false
        });
        for _ in 0..given {
            if let Err(e) = spawn_worker(pool) {
                tracing::error!(error = %e, "cannot start a thread for the health-check pool");
            }
        }
    }
}

/// Locks, ignoring poisoning: nothing here panics while holding a lock (checks
/// are polled under [`Guarded`]'s `catch_unwind`).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
