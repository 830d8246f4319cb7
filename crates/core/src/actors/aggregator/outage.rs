//! The outage back-off: one kind of database work (the flush, or the read of
//! the rows) as a phase, so that at most one attempt runs at a time and,
//! while the database is down, attempts are spaced by a [`Backoff`].
//!
//! ```text
//!            start()                 succeeded()
//!   Idle ───────────────▶ Running ───────────────▶ Idle
//!    ▲                     │   ▲
//!    │ database_back()     │   │ start(), once the back-off has passed
//!    │                     ▼   │
//!    └──────────────── FailedUntil(t)
//!                failed()
//! ```

use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;

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

/// What one kind of database work is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// No attempt runs; the next may start at once.
    Idle,
    /// An attempt runs: no other starts before it ends.
    Running,
    /// The last attempt failed: the next may start at this moment.
    FailedUntil(Instant),
}

/// One kind of database work (writes or reads): its phase, and the outage
/// it sees, if any. Its methods are the only way to change either.
#[derive(Debug)]
pub(super) struct Attempts {
    phase: Phase,
    /// When the outage began: the first failure since the last success.
    outage_since: Option<Instant>,
    backoff: Backoff,
}

impl Attempts {
    /// Attempts that wait `first` after a first failure, then twice as long
    /// each time, up to `ceiling` (never less than `first`).
    pub(super) fn new(first: Duration, ceiling: Duration) -> Self {
        Self {
            phase: Phase::Idle,
            outage_since: None,
            backoff: Backoff::new(first, ceiling.max(first)),
        }
    }

    /// Starts an attempt, unless one runs or the back-off has not passed.
    /// True when it started.
    pub(super) fn start(&mut self) -> bool {
        match self.phase {
            Phase::Running => false,
            Phase::FailedUntil(at) if Instant::now() < at => false,
            Phase::Idle | Phase::FailedUntil(_) => {
                self.phase = Phase::Running;
                true
            }
        }
    }

    /// An attempt runs.
    pub(super) fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// The last attempt failed and none has succeeded since.
    pub(super) fn in_outage(&self) -> bool {
        self.outage_since.is_some()
    }

    /// The attempt running succeeded; the outage's length if one just ended.
    pub(super) fn succeeded(&mut self) -> Option<Duration> {
        self.phase = Phase::Idle;
        self.backoff.reset();
        self.outage_since.take().map(|since| since.elapsed())
    }

    /// The attempt running failed: the next waits out the back-off. True the
    /// first time in an outage (log it then only).
    pub(super) fn failed(&mut self) -> bool {
        let first = self.outage_since.is_none();
        let now = Instant::now();
        self.outage_since.get_or_insert(now);
        self.phase = Phase::FailedUntil(now + self.backoff.next_delay());
        first
    }

    /// The other kind of work just succeeded, so the database is back: the
    /// back-off ends, and the next attempt may be made at once. True when this
    /// kind was in an outage (then make that attempt now).
    pub(super) fn database_back(&mut self) -> bool {
        if let Phase::FailedUntil(_) = self.phase {
            self.phase = Phase::Idle;
        }
        self.backoff.reset();
        self.in_outage()
    }
}
