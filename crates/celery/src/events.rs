//! The workers from their own heartbeats: Celery's event stream, `worker` group
//! only.
//!
//! Every Celery worker sends `worker-heartbeat` every `freq` seconds (2 s by
//! default, also without `-E`: heartbeats belong to the `worker` group, on
//! unless `--without-heartbeat`), `worker-online` when it starts and
//! `worker-offline` when it stops cleanly, each carrying `active`, `processed`,
//! `loadavg` and its software. Celery's own monitor (`celery.events.state`,
//! Flower) counts a worker gone two `freq`s after its last heartbeat; so does
//! this one. Task events are never asked for.
//!
//! Each broker's transport subscribes (`BrokerProbe::subscribe`): on Redis,
//! where Celery makes the `celeryev` exchange a fanout, a pattern subscription
//! to `/{db}.celeryev/worker.*`; on RabbitMQ, an exclusive auto-delete queue of
//! Overseer's own bound to the `celeryev` topic exchange for `worker.#`. Both
//! hand each message to [`WorkerEvents::heard`], which keeps one entry per
//! worker. The check reads them ([`WorkerEvents::workers`]) at each poll.
//!
//! What is known only counts while it is listened for:
//! - nothing is said of the workers until a subscription has been up for
//!   [`WARM_UP`] (two default heartbeats): every live worker has spoken by then;
//!   meanwhile, for at most [`SETTLE_WITHIN`] from the first poll, the check
//!   says its verdict is still pending ([`WorkerEvents::pending`]), so that a
//!   restart during a worker outage does not read healthy for a moment;
//! - a worker is judged gone only while a subscription is up, and stays gone
//!   until it speaks again: a subscription that drops and comes back neither
//!   blames a worker for heartbeats it could not hear nor forgets one already
//!   found gone;
//! - while no subscription is up (the broker down, the subscription refused
//!   or reconnecting), a worker last heard alive is `unknown`, never `online`:
//!   no heartbeat could arrive, so nothing is known of it;
//! - a gone worker is forgotten an hour after it was last heard, unless no
//!   worker is online then: the last worker's death is never forgotten.
//!
//! A broker that cannot be subscribed to at all (a Redis older than 6 has no
//! RESP3, so no pushes; a user the broker does not allow to read Celery's
//! events: a Redis ACL without the channel, a RabbitMQ user refused
//! `celeryev`) is said so ([`WorkerEvents::cannot_listen`]): the verdict then
//! says that the workers are not counted, and why, rather than leave them
//! silently unjudged.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use overseer_core::detail::{LoadAverage, WorkerHeartbeat};
use tokio::time::Instant;

pub(crate) use event::Event;
use event::Kind;
use hearing::{Hearing, Subscription};

mod event;
mod hearing;

/// Celery's `event_exchange`.
pub(crate) const EXCHANGE: &str = "celeryev";

/// The routing keys of the `worker` group (`worker.heartbeat`, ...), as an
/// AMQP topic binding.
pub(crate) const WORKER_KEYS: &str = "worker.#";

/// Celery's default heartbeat interval (`freq`), for workers not yet heard.
const DEFAULT_FREQ: Duration = Duration::from_secs(2);

/// How long a subscription must be up before its silence means anything.
pub(crate) const WARM_UP: Duration = Duration::from_secs(4);

/// How long after the first poll the check may keep its verdict pending
/// while no subscription has warmed up: a subscription that cannot come up
/// by then (the broker refuses it, or it keeps failing) does not keep the
/// executor unjudged; the verdict then says the workers are not counted.
pub(crate) const SETTLE_WITHIN: Duration = Duration::from_secs(10);

/// The most workers kept: a stream that names more (a hostile publisher) is
/// not followed past it. Past it, a tenth goes at once: the names heard only
/// once by a heartbeat first (a flood of forged names is that), the
/// oldest-heard of them first, and a worker heard more than once (or that
/// announced itself with `worker-online`) only when those do not make a
/// tenth; so a flood of new names never pushes out a worker that heartbeats,
/// whose death is then still seen.
const MAX_WORKERS: usize = 10_000;

/// How long a worker gone or offline is still shown before it is forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// The shortest and longest `freq` believed: a worker that claims less or
/// more is held to them. Celery sends 2 s unless `--heartbeat-interval` says
/// otherwise; a forged `1e300` would keep a name online for ages, a forged
/// `1e-9` would mark it gone at once.
const MIN_FREQ: Duration = Duration::from_secs(1);
const MAX_FREQ: Duration = Duration::from_secs(120);

/// What was last heard of one worker.
#[derive(Debug, Clone)]
struct Heard {
    last: Instant,
    last_at: DateTime<Utc>,
    freq: Duration,
    active: Option<u64>,
    processed: Option<u64>,
    loadavg: Option<[f64; 3]>,
    software: Option<String>,
    state: State,
    /// It said `worker-offline` since its last heartbeat.
    said_offline: bool,
    /// When a heartbeat last came after it had said `worker-offline`: its
    /// heartbeats contradict the goodbye, and win while they continue.
    contradicted: Option<Instant>,
    /// It was heard more than once, or announced itself (`worker-online`, as
    /// a worker sends when it starts): a worker, not a name that one forged
    /// heartbeat made up.
    confirmed: bool,
    /// When its silence made it gone (while listened for).
    gone_at: Option<Instant>,
}

/// A worker's state as its events tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Heard within two of its heartbeats.
    Online,
    /// No heartbeat for two of them, while listened for.
    Gone,
    /// It said `worker-offline`: stopped cleanly.
    Offline,
    /// Heard alive, but no subscription is up now: nothing can be known of it.
    Unknown,
}

impl State {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Online => "online",
            Self::Gone => "gone",
            Self::Offline => "offline",
            Self::Unknown => "unknown",
        }
    }
}

/// One worker as the events tell it, at a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Worker {
    pub(crate) name: String,
    pub(crate) state: State,
    /// How long since its last event.
    pub(crate) silent_for: Duration,
    pub(crate) freq: Duration,
    pub(crate) heartbeat: WorkerHeartbeat,
    /// Heard more than once, or announced by `worker-online`: a worker, not a
    /// name one forged heartbeat made up. Only such a worker's silence is a fault.
    pub(crate) confirmed: bool,
}

/// Every worker heard on a check's brokers, and whether anyone listens.
#[derive(Debug, Default)]
pub(crate) struct WorkerEvents {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    workers: BTreeMap<String, Heard>,
    /// Each broker's subscription, by index.
    subscriptions: BTreeMap<usize, Subscription>,
    /// Whether a subscription was ever up for [`WARM_UP`].
    warmed: bool,
    /// When the check first asked ([`WorkerEvents::pending`]).
    first_asked: Option<Instant>,
}

impl Inner {
    /// Whether anything can be said of the workers: a subscription has been
    /// up for [`WARM_UP`] (now, or once: then it stays so).
    fn warm(&mut self, now: Instant) -> bool {
        if self
            .since()
            .is_some_and(|since| now.saturating_duration_since(since) >= WARM_UP)
        {
            self.warmed = true;
        }
        self.warmed
    }

    /// Marks gone each worker online but silent for two of its heartbeats
    /// while listened for; whether one heard more than once was among them.
    fn mark_gone(&mut self, now: Instant) -> bool {
        let Some(since) = self.since() else {
            return false;
        };
        let mut confirmed = false;
        for heard in self.workers.values_mut() {
            if heard.state == State::Online
                && now.saturating_duration_since(heard.last.max(since)) > heard.freq * 2
            {
                heard.state = State::Gone;
                heard.gone_at = Some(now);
                confirmed |= heard.confirmed;
            }
        }
        confirmed
    }
}

impl WorkerEvents {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the verdict should wait: nothing can be said of the workers
    /// yet, no broker has refused the subscription (or left it behind), and
    /// the first poll was less than [`SETTLE_WITHIN`] ago. The first call
    /// starts that clock.
    pub(crate) fn pending(&self) -> bool {
        self.pending_at(Instant::now())
    }

    fn pending_at(&self, now: Instant) -> bool {
        let mut inner = self.lock();
        let first = *inner.first_asked.get_or_insert(now);
        let said = inner
            .subscriptions
            .values()
            .any(|s| matches!(s.hearing, Hearing::Refused(_) | Hearing::Behind(_)));
        !inner.warmed && !said && now.saturating_duration_since(first) < SETTLE_WITHIN
    }

    /// An event was received now, on broker `index`'s subscription.
    pub(crate) fn heard(&self, index: usize, event: Event) {
        self.heard_at(index, event, Instant::now(), Utc::now());
    }

    fn heard_at(&self, index: usize, event: Event, now: Instant, now_at: DateTime<Utc>) {
        let mut inner = self.lock();
        inner.subscriptions.entry(index).or_default().received += 1;
        if !inner.workers.contains_key(&event.hostname) && inner.workers.len() >= MAX_WORKERS {
            // A tenth goes at once (see MAX_WORKERS): one pass over the map
            // per tenth of the cap's new names, not one per name (a flood of
            // new names scanned the whole map for each, under this lock).
            let mut by_age: Vec<(bool, Instant, String)> = inner
                .workers
                .iter()
                .map(|(name, heard)| (heard.confirmed, heard.last, name.clone()))
                .collect();
            let evict = (MAX_WORKERS / 10).max(1);
            by_age.select_nth_unstable_by_key(evict - 1, |(again, last, _)| (*again, *last));
            for (_, _, name) in by_age.into_iter().take(evict) {
                inner.workers.remove(&name);
            }
        }
        let claimed = event
            .freq
            .filter(|f| f.is_finite() && *f > 0.0)
            .map_or(DEFAULT_FREQ, |f| {
                Duration::from_secs_f64(f.clamp(MIN_FREQ.as_secs_f64(), MAX_FREQ.as_secs_f64()))
            });
        let state = match event.kind {
            Kind::Offline => State::Offline,
            Kind::Heartbeat | Kind::Online => State::Online,
        };
        let since = inner.since();
        let Some(heard) = inner.workers.get_mut(&event.hostname) else {
            let freq = claimed;
            inner.workers.insert(
                event.hostname,
                Heard {
                    last: now,
                    last_at: now_at,
                    freq,
                    active: event.active,
                    processed: event.processed,
                    loadavg: event.loadavg,
                    software: event.software,
                    state,
                    said_offline: state == State::Offline,
                    contradicted: None,
                    confirmed: event.kind == Kind::Online,
                    gone_at: None,
                },
            );
            return;
        };
        // A worker that runs on says each start with `worker-online`: then
        // its claim stands (a restart with another --heartbeat-interval).
        // Otherwise a longer freq is believed only as far as the worker's own
        // heartbeats are spaced: one forged heartbeat claiming 120 s between
        // two real ones 2 s apart does not put its death off by four minutes.
        let restarted = event.kind == Kind::Online && heard.state != State::Online;
        let freq = if restarted {
            claimed
        } else {
            claimed.min(heard.freq.max(now.saturating_duration_since(heard.last)))
        };
        if state == State::Offline {
            // A goodbye from a worker whose heartbeats contradicted the last
            // one, and still arrive: the heartbeats win.
            if heard
                .contradicted
                .is_some_and(|at| now.saturating_duration_since(at) < heard.freq * 2)
            {
                heard.said_offline = true;
                return;
            }
            // A goodbye from a worker already gone by its own silence (two
            // heartbeats missed, while listened for) does not unsay its death:
            // a worker stopping cleanly says so while it still heartbeats.
            let silent_since = since.map(|since| heard.last.max(since));
            if heard.state == State::Gone
                || silent_since
                    .is_some_and(|from| now.saturating_duration_since(from) > heard.freq * 2)
            {
                return;
            }
            heard.said_offline = true;
        } else if heard.said_offline {
            heard.said_offline = false;
            heard.contradicted = Some(now);
        }
        // What this event does not say, the last one did.
        heard.confirmed = true;
        heard.last = now;
        heard.last_at = now_at;
        heard.freq = freq;
        heard.state = state;
        heard.gone_at = None;
        heard.active = event.active.or(heard.active);
        heard.processed = event.processed.or(heard.processed);
        heard.loadavg = event.loadavg.or(heard.loadavg);
        if event.software.is_some() {
            heard.software = event.software;
        }
    }

    /// Whether a worker heard more than once (or that announced itself) has
    /// fallen silent for two of its heartbeats, while listened for, since the
    /// last look: marked gone now, so that the check can be asked for at once
    /// rather than at the next poll.
    pub(crate) fn fell_silent(&self) -> bool {
        self.fell_silent_at(Instant::now())
    }

    fn fell_silent_at(&self, now: Instant) -> bool {
        let mut inner = self.lock();
        inner.warm(now) && inner.mark_gone(now)
    }

    /// Every worker heard, judged now; `None` while nothing can be said (no
    /// subscription has been up for [`WARM_UP`] yet).
    pub(crate) fn workers(&self) -> Option<Vec<Worker>> {
        self.workers_at(Instant::now())
    }

    fn workers_at(&self, now: Instant) -> Option<Vec<Worker>> {
        let mut inner = self.lock();
        if !inner.warm(now) {
            return None;
        }
        // The last worker's death is not forgotten while none is online.
        let any_online = inner.workers.values().any(|h| h.state == State::Online);
        inner.workers.retain(|_, heard| {
            heard.state == State::Online
                || (heard.state == State::Gone && !any_online)
                || now.saturating_duration_since(heard.last) < FORGET_AFTER
        });
        inner.mark_gone(now);
        let since = inner.since();
        let mut workers = Vec::with_capacity(inner.workers.len());
        for (name, heard) in &inner.workers {
            let every_ms = u64::try_from(heard.freq.as_millis()).unwrap_or(u64::MAX);
            let state = match heard.state {
                State::Online if since.is_none() => State::Unknown,
                state => state,
            };
            workers.push(Worker {
                name: name.clone(),
                state,
                confirmed: heard.confirmed,
                silent_for: now.saturating_duration_since(heard.last),
                freq: heard.freq,
                heartbeat: WorkerHeartbeat {
                    last: heard.last_at,
                    every_ms,
                    active: heard.active,
                    processed: heard.processed,
                    loadavg: heard.loadavg.map(|l| l.map(LoadAverage)),
                    software: heard.software.clone(),
                },
            });
        }
        Some(workers)
    }
}

#[cfg(test)]
mod tests;
