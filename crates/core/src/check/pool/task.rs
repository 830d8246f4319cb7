//! One async check run on the pool, and its waker: a small state machine
//! ([`State`]: idle, scheduled, running, notified, done) that makes sure only
//! one thread polls a task at a time and that a wake during a poll is not lost.

use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::thread::Thread;

use super::{Shared, Watched, lock};

/// A task's state: only the thread that moved a task to `Running` polls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum State {
    /// Waits for a wake.
    Idle = 0,
    /// Due for a poll: in the queue, or on its own thread.
    Scheduled = 1,
    Running = 2,
    /// Woken while running: poll again.
    Notified = 3,
    Done = 4,
}

impl State {
    const ALL: [Self; 5] = [
        Self::Idle,
        Self::Scheduled,
        Self::Running,
        Self::Notified,
        Self::Done,
    ];
}

/// A [`State`] that threads change together: every move is one atomic
/// operation (sequentially consistent), so the states above are the only
/// values it ever holds.
pub(super) struct AtomicState(AtomicU8);

impl AtomicState {
    pub(super) fn new(state: State) -> Self {
        Self(AtomicU8::new(state as u8))
    }

    pub(super) fn load(&self) -> State {
        Self::state(self.0.load(SeqCst))
    }

    pub(super) fn store(&self, state: State) {
        self.0.store(state as u8, SeqCst);
    }

    /// Moves it from `current` to `new`, or says what it is instead.
    pub(super) fn compare_exchange(&self, current: State, new: State) -> Result<State, State> {
        self.0
            .compare_exchange(current as u8, new as u8, SeqCst, SeqCst)
            .map(Self::state)
            .map_err(Self::state)
    }

    fn state(value: u8) -> State {
        State::ALL[usize::from(value)]
    }
}

/// One check run on the pool.
pub(super) struct Task {
    pub(super) state: AtomicState,
    pub(super) future: Mutex<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>,
    /// The thread that owns it, once it has one; until then, the pool's queue.
    pub(super) home: Mutex<Option<Thread>>,
    pub(super) pool: Arc<Shared>,
    pub(super) executor: Arc<Watched>,
    /// It waited for a wake once, so the pool's `live` holds it (only its
    /// poller reads and writes this).
    pub(super) waits: AtomicBool,
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.state.load();
        loop {
            let next = match state {
                State::Idle => State::Scheduled,
                State::Running => State::Notified,
                _ => return,
            };
            match self.state.compare_exchange(state, next) {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        if state == State::Idle {
            // Scheduled by this wake: to its own thread, or to the queue. (Its
            // home changes only while it runs, so not meanwhile.)
            let home = lock(&self.home).clone();
            match home {
                Some(thread) => thread.unpark(),
                None => self.pool.push(self.clone()),
            }
        }
    }
}

/// What a task is after a poll.
pub(super) enum Settled {
    Done,
    /// Waits for a wake.
    Waiting,
    /// Was woken during the poll: due again.
    Again,
}

impl Task {
    /// Its key among the pool's live tasks.
    pub(super) fn key(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Polls it once, if it is still due (the pool may have stopped since it
    /// was queued). True when it is done.
    pub(super) fn poll_once(self: &Arc<Self>) -> bool {
        if self
            .state
            .compare_exchange(State::Scheduled, State::Running)
            .is_err()
        {
            return true;
        }
        self.executor.stats.dequeued();
        let waker = Waker::from(self.clone());
        let mut future = lock(&self.future);
        let ready = match future.as_mut() {
            Some(f) => f.as_mut().poll(&mut Context::from_waker(&waker)).is_ready(),
            None => true,
        };
        if ready {
            *future = None;
        }
        ready
    }

    /// After a poll, and after its thread learned whose it is now.
    pub(super) fn settle(self: &Arc<Self>, ready: bool) -> Settled {
        if ready {
            self.state.store(State::Done);
            if self.waits.load(SeqCst) {
                let done = lock(&self.pool.live).remove(&self.key());
                drop(done);
            }
            return Settled::Done;
        }
        // Owned by the pool before it may wait: once idle, another thread may
        // wake it, run it and finish it at any moment.
        if !self.waits.swap(true, SeqCst) {
            lock(&self.pool.live).insert(self.key(), self.clone());
        }
        match self.state.compare_exchange(State::Running, State::Idle) {
            Ok(_) => {
                // The pool may have stopped during this poll, after it
                // cancelled the tasks it held: then nothing else would cancel
                // this one, and its check would wait for ever, answering
                // nothing. (Before the stop, it was in `live` for the pool to
                // cancel.)
                if lock(&self.pool.queue).stopped {
                    self.cancel();
                }
                Settled::Waiting
            }
            Err(_) => {
                self.state.store(State::Scheduled);
                Settled::Again
            }
        }
    }
}

impl Task {
    /// Drops its check unless a thread is polling it (the pool stopped), and
    /// lets go of it if the pool held it.
    pub(super) fn cancel(&self) {
        for from in [State::Idle, State::Scheduled] {
            if self.state.compare_exchange(from, State::Done).is_ok() {
                let check = lock(&self.future).take();
                drop(check);
                if self.waits.load(SeqCst) {
                    let held = lock(&self.pool.live).remove(&self.key());
                    drop(held);
                }
                // A thread of its own, parked until a wake, sees it done.
                if let Some(thread) = &*lock(&self.home) {
                    thread.unpark();
                }
                return;
            }
        }
    }
}
