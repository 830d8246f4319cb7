//! The pool's threads and its watchdog: the queue the actors push checks
//! on, the `overseer-check` threads that poll them, the thread a check found
//! blocking is given, and the watchdog that finds it (see [`super`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::Thread;
use std::time::Instant;

use super::task::{Settled, State, Task};
use super::{AsyncChecks, CHECK_THREAD_NAME, IO_THREADS, Runner, STALL_AFTER, WATCH_EVERY, lock};

/// The threads that own check threads: the pool's and the IO runtime. Ends
/// with the actors' thread.
pub(crate) struct CheckThreads {
    pub(super) pool: Arc<Shared>,
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
            polling: AtomicUsize::new(0),
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
pub(super) struct Shared {
    pub(super) queue: Mutex<Queue>,
    /// Signalled when a task is queued while a thread waits.
    work: Condvar,
    /// The threads that poll from the queue; a thread the watchdog gave to a
    /// check leaves it.
    pub(super) workers: Mutex<Vec<Arc<Worker>>>,
    /// The runtime every check thread enters: IO, timers, spawned tasks.
    pub(super) io: tokio::runtime::Handle,
    /// Unparked to stop, and when a poll starts while none ran.
    watchdog: OnceLock<Thread>,
    /// Polls running now on the pool's threads: while none does, the
    /// watchdog has nothing to watch and sleeps without a timer.
    polling: AtomicUsize,
    /// Every task that waited for a wake and is not done yet, by address: the
    /// pool owns them, as a runtime owns its tasks, so a check that waits on
    /// nothing (a future that never wakes) is held, not dropped, and ends only
    /// with the pool. (A queued task is the queue's, a running one its
    /// thread's; a check that answers at its first poll never enters here.)
    pub(super) live: Mutex<HashMap<usize, Arc<Task>>>,
}

#[derive(Default)]
pub(super) struct Queue {
    tasks: VecDeque<Arc<Task>>,
    /// Threads waiting for a task.
    idle: usize,
    /// Of those, how many were signalled and have not woken yet: a burst of
    /// tasks signals each waiting thread once, not once per task.
    waking: usize,
    pub(super) stopped: bool,
}

impl Shared {
    pub(super) fn push(&self, task: Arc<Task>) {
        let mut queue = lock(&self.queue);
        if queue.stopped {
            drop(queue);
            task.cancel();
            return;
        }
        task.executor.stats.queued();
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
pub(super) struct Worker {
    pub(super) thread: OnceLock<Thread>,
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
        pool.poll_started();
        let ready = task.poll_once();
        let given = {
            let mut slot = lock(&me.slot);
            slot.polling = None;
            slot.given
        };
        pool.polling.fetch_sub(1, Ordering::AcqRel);
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
pub(super) fn own_thread(task: Arc<Task>) {
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

impl Shared {
    /// A pool thread begins a poll: the first of several wakes the watchdog.
    fn poll_started(&self) {
        if self.polling.fetch_add(1, Ordering::AcqRel) == 0
            && let Some(watchdog) = self.watchdog.get()
        {
            watchdog.unpark();
        }
    }
}

/// The watchdog: gives a thread whose poll overran [`STALL_AFTER`] to its task,
/// and puts a new thread in the pool in its place. It looks every
/// [`WATCH_EVERY`] while a poll runs, and sleeps without a timer while none
/// does (an idle Overseer's checks poll for microseconds every few seconds):
/// the first poll to start wakes it (an unpark before its park is kept, so
/// none is missed).
fn watch(pool: &Arc<Shared>) {
    loop {
        if pool.polling.load(Ordering::Acquire) == 0 {
            std::thread::park();
        } else {
            std::thread::park_timeout(WATCH_EVERY);
        }
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
