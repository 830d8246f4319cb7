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

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, Utc};
use overseer_core::detail::{LoadAverage, WorkerHeartbeat};
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;

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

/// One event of the `worker` group, as a worker sent it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    /// `worker-heartbeat`, `worker-online` or `worker-offline`.
    kind: Kind,
    /// Its node name (`celery@host`).
    hostname: String,
    freq: Option<f64>,
    active: Option<u64>,
    processed: Option<u64>,
    loadavg: Option<[f64; 3]>,
    software: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Heartbeat,
    Online,
    Offline,
}

impl Event {
    /// The event in a message body (Celery's JSON), if it is one of the
    /// `worker` group's. Read into a struct of borrowed fields, every other
    /// field skipped unread: a thousand workers send 500 of these a second.
    pub(crate) fn from_body(body: &[u8]) -> Option<Self> {
        let event: RawEvent<'_> = serde_json::from_slice(body).ok()?;
        let kind = match &*event.kind {
            "worker-heartbeat" => Kind::Heartbeat,
            "worker-online" => Kind::Online,
            "worker-offline" => Kind::Offline,
            _ => return None,
        };
        let hostname = event.hostname;
        if hostname.is_empty() || hostname.len() > 255 {
            return None;
        }
        let loadavg = event
            .loadavg
            .as_ref()
            .and_then(Value::as_array)
            .and_then(
                |l| match l.iter().map(Value::as_f64).collect::<Option<Vec<_>>>()?[..] {
                    [a, b, c] => Some([a, b, c]),
                    _ => None,
                },
            );
        let text = |v: &Option<Value>| v.as_ref().and_then(Value::as_str).map(str::to_owned);
        let software = match (text(&event.sw_ident), text(&event.sw_ver)) {
            (Some(ident), Some(ver)) => Some(format!("{ident} {ver}")),
            (None, Some(ver)) => Some(ver),
            _ => None,
        }
        .map(|s| s.chars().take(64).collect());
        let number = |v: &Option<Value>| v.as_ref().and_then(Value::as_u64);
        Some(Self {
            kind,
            hostname: hostname.into_owned(),
            freq: event.freq.as_ref().and_then(Value::as_f64),
            active: number(&event.active),
            processed: number(&event.processed),
            loadavg,
            software,
        })
    }

    /// The event in a kombu Redis envelope (a JSON message whose `body` is the
    /// event, base64-encoded).
    pub(crate) fn from_redis_envelope(raw: &[u8]) -> Option<Self> {
        let envelope: Envelope<'_> = serde_json::from_slice(raw).ok()?;
        match envelope.properties.and_then(|p| p.body_encoding).as_deref() {
            Some("base64") => Self::from_body(&BASE64.decode(envelope.body.as_bytes()).ok()?),
            _ => Self::from_body(envelope.body.as_bytes()),
        }
    }
}

/// The fields of a Celery event this module reads; any other is skipped.
/// Those a worker might send in another shape are kept as values, so that one
/// odd field never loses the whole heartbeat.
#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    hostname: Cow<'a, str>,
    freq: Option<Value>,
    active: Option<Value>,
    processed: Option<Value>,
    loadavg: Option<Value>,
    sw_ident: Option<Value>,
    sw_ver: Option<Value>,
}

/// Kombu's Redis envelope, as far as this module reads it.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    body: Cow<'a, str>,
    #[serde(borrow)]
    properties: Option<Properties<'a>>,
}

#[derive(Deserialize)]
struct Properties<'a> {
    #[serde(borrow)]
    body_encoding: Option<Cow<'a, str>>,
}

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
    /// Since when the workers are listened for continuously: the earliest
    /// subscription still up and keeping up.
    fn since(&self) -> Option<Instant> {
        self.subscriptions
            .values()
            .filter_map(|s| match s.hearing {
                Hearing::Up(since) => Some(since),
                _ => None,
            })
            .min()
    }

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
                confirmed |= heard.confirmed;
            }
        }
        confirmed
    }
}

/// Whether one broker's subscription hears the workers now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Hearing {
    /// Not up: not yet, or lost and reconnecting.
    #[default]
    Down,
    /// Up since then, and keeping up with what the broker sends.
    Up(Instant),
    /// Up, but behind what the broker sends, so that the broker drops events
    /// before they are taken (why, naming the broker): a silence then may be
    /// the broker's doing, so it blames nobody until the subscription has
    /// caught up and listened for [`WARM_UP`] again.
    Behind(String),
    /// Refused, for a reason that retrying will not change (why, naming the
    /// broker).
    Refused(String),
}

/// One broker's subscription: what it hears now and what it has taken.
#[derive(Debug, Default)]
struct Subscription {
    hearing: Hearing,
    /// Worker events taken from it.
    received: u64,
    /// How many times it came up: one, unless it was lost and came back.
    subscribed: u64,
    /// How many times it fell behind.
    overflows: u64,
    /// Events waiting in the broker for it, as the broker last said (RabbitMQ).
    backlog: Option<u64>,
}

/// One broker's subscription, as the check shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubscriptionState {
    /// Which broker, by index.
    pub(crate) index: usize,
    /// `listening`, `behind`, `down` or `refused`.
    pub(crate) state: &'static str,
    pub(crate) received: u64,
    pub(crate) subscribed: u64,
    pub(crate) overflows: u64,
    pub(crate) backlog: Option<u64>,
}

impl WorkerEvents {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hearing(&self, index: usize, hearing: Hearing) {
        self.lock().subscriptions.entry(index).or_default().hearing = hearing;
    }

    /// Broker `index`'s subscription is up.
    pub(crate) fn listening(&self, index: usize) {
        self.listening_at(index, Instant::now());
    }

    fn listening_at(&self, index: usize, at: Instant) {
        let mut inner = self.lock();
        let subscription = inner.subscriptions.entry(index).or_default();
        subscription.hearing = Hearing::Up(at);
        subscription.subscribed += 1;
        subscription.backlog = None;
    }

    /// Broker `index` cannot be subscribed to, for a reason that retrying
    /// will not change (`why`, naming the broker).
    pub(crate) fn cannot_listen(&self, index: usize, why: String) {
        self.hearing(index, Hearing::Refused(why));
    }

    /// Broker `index`'s subscription is up but the broker drops events before
    /// it takes them (`why`, naming the broker), `backlog` of them waiting.
    /// Until it has [`caught_up`](Self::caught_up), nobody is blamed for a
    /// silence on it.
    pub(crate) fn behind(&self, index: usize, why: String, backlog: u64) {
        let mut inner = self.lock();
        let subscription = inner.subscriptions.entry(index).or_default();
        if !matches!(subscription.hearing, Hearing::Behind(_)) {
            subscription.overflows += 1;
        }
        subscription.hearing = Hearing::Behind(why);
        subscription.backlog = Some(backlog);
    }

    /// Broker `index`'s subscription, behind, has `backlog` events waiting:
    /// fewer than made it behind, but more than it keeps up with.
    pub(crate) fn behind_still(&self, index: usize, backlog: u64) {
        self.lock().subscriptions.entry(index).or_default().backlog = Some(backlog);
    }

    /// Broker `index` has `backlog` events waiting for its subscription, no
    /// more than it keeps up with. A subscription that was behind listens
    /// again from now: its silence counts after a new [`WARM_UP`].
    pub(crate) fn caught_up(&self, index: usize, backlog: u64) {
        let mut inner = self.lock();
        let subscription = inner.subscriptions.entry(index).or_default();
        if matches!(subscription.hearing, Hearing::Behind(_)) {
            subscription.hearing = Hearing::Up(Instant::now());
        }
        subscription.backlog = Some(backlog);
    }

    /// Broker `index`'s subscription dropped.
    pub(crate) fn deaf(&self, index: usize) {
        self.hearing(index, Hearing::Down);
    }

    /// Whether broker `index`'s subscription is behind now.
    pub(crate) fn is_behind(&self, index: usize) -> bool {
        self.lock()
            .subscriptions
            .get(&index)
            .is_some_and(|s| matches!(s.hearing, Hearing::Behind(_)))
    }

    /// Each broker's subscription, by index.
    pub(crate) fn subscriptions(&self) -> Vec<SubscriptionState> {
        self.lock()
            .subscriptions
            .iter()
            .map(|(index, s)| SubscriptionState {
                index: *index,
                state: match s.hearing {
                    Hearing::Down => "down",
                    Hearing::Up(_) => "listening",
                    Hearing::Behind(_) => "behind",
                    Hearing::Refused(_) => "refused",
                },
                received: s.received,
                subscribed: s.subscribed,
                overflows: s.overflows,
                backlog: s.backlog,
            })
            .collect()
    }

    /// Why the workers cannot be heard now, while no subscription is up and
    /// keeping up: the reason a broker cannot be subscribed to, if one
    /// cannot, else why one is behind, else that the subscription is not up
    /// (yet, or again).
    pub(crate) fn unheard(&self) -> Option<String> {
        let inner = self.lock();
        let all = || inner.subscriptions.values().map(|s| &s.hearing);
        if all().any(|h| matches!(h, Hearing::Up(_))) {
            return None;
        }
        let refused = all().find_map(|h| match h {
            Hearing::Refused(why) => Some(why),
            _ => None,
        });
        let behind = all().find_map(|h| match h {
            Hearing::Behind(why) => Some(why),
            _ => None,
        });
        Some(
            refused.or(behind).cloned().unwrap_or_else(|| {
                "the subscription to the workers' heartbeats is not up".to_owned()
            }),
        )
    }

    /// Whether the heartbeats cannot be heard for a reason worth saying (a
    /// broker refused the subscription, cannot send pushes, or sends more
    /// than is taken), rather than for a moment that ends by itself (warming
    /// up, reconnecting).
    pub(crate) fn refused(&self) -> bool {
        let inner = self.lock();
        let all = || inner.subscriptions.values().map(|s| &s.hearing);
        !all().any(|h| matches!(h, Hearing::Up(_)))
            && all().any(|h| matches!(h, Hearing::Refused(_) | Hearing::Behind(_)))
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
        let freq = event
            .freq
            .filter(|f| f.is_finite() && *f > 0.0)
            .map_or(DEFAULT_FREQ, |f| {
                Duration::from_secs_f64(f.clamp(MIN_FREQ.as_secs_f64(), MAX_FREQ.as_secs_f64()))
            });
        let state = match event.kind {
            Kind::Offline => State::Offline,
            Kind::Heartbeat | Kind::Online => State::Online,
        };
        let Some(heard) = inner.workers.get_mut(&event.hostname) else {
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
                },
            );
            return;
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
mod tests {
    use super::*;

    const HEARTBEAT: &str = r#"{"hostname": "celery@w1", "utcoffset": 0, "pid": 6656,
        "clock": 2, "freq": 2.0, "active": 1, "processed": 7, "loadavg": [0.5, 0.25, 0.1],
        "sw_ident": "py-celery", "sw_ver": "5.5.3", "sw_sys": "Linux",
        "timestamp": 1796145862.926931, "type": "worker-heartbeat"}"#;

    fn event(kind: &str, host: &str) -> Event {
        Event::from_body(
            format!(r#"{{"hostname": "{host}", "freq": 2.0, "type": "worker-{kind}"}}"#).as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn a_heartbeat_reads_as_celery_sends_it_bare_or_in_kombus_redis_envelope() {
        let event = Event::from_body(HEARTBEAT.as_bytes()).unwrap();
        assert_eq!(event.kind, Kind::Heartbeat);
        assert_eq!(event.hostname, "celery@w1");
        assert_eq!(event.freq, Some(2.0));
        assert_eq!((event.active, event.processed), (Some(1), Some(7)));
        assert_eq!(event.loadavg, Some([0.5, 0.25, 0.1]));
        assert_eq!(event.software.as_deref(), Some("py-celery 5.5.3"));

        // As captured from a real Celery 5.5.3 worker on Redis.
        let envelope = serde_json::json!({
            "body": BASE64.encode(HEARTBEAT),
            "content-encoding": "utf-8", "content-type": "application/json",
            "headers": {"hostname": "celery@w1"},
            "properties": {"delivery_mode": 1, "delivery_info": {"exchange": "celeryev",
                "routing_key": "worker.heartbeat"}, "priority": 0, "body_encoding": "base64",
                "delivery_tag": "6cc3ab7b-b65f-4142-b900-ff564cbcb8bb"}
        });
        assert_eq!(
            Event::from_redis_envelope(envelope.to_string().as_bytes()),
            Some(event)
        );
        // Task events, other groups and noise are not worker events.
        for body in [
            r#"{"hostname": "celery@w1", "type": "task-received"}"#,
            r#"{"type": "worker-heartbeat"}"#,
            r#"{"hostname": "", "type": "worker-heartbeat"}"#,
            "not json",
        ] {
            assert_eq!(Event::from_body(body.as_bytes()), None, "{body}");
        }
    }

    #[test]
    fn nothing_is_said_until_a_subscription_has_listened_for_two_heartbeats() {
        let events = WorkerEvents::default();
        let start = Instant::now();
        assert_eq!(events.workers_at(start), None, "nobody listens");
        events.listening_at(0, start);
        events.heard_at(0, event("heartbeat", "celery@w1"), start, Utc::now());
        assert_eq!(events.workers_at(start + Duration::from_secs(3)), None);
        let workers = events.workers_at(start + WARM_UP).unwrap();
        assert_eq!(workers.len(), 1);
        assert_eq!(workers[0].state, State::Online);
    }

    #[test]
    fn a_worker_is_gone_after_two_heartbeats_missed_while_listened_for_and_stays_gone() {
        let events = WorkerEvents::default();
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let state = |now| events.workers_at(now).unwrap()[0].state;
        events.listening_at(0, t0);
        events.heard_at(0, event("online", "celery@w1"), at(0.0), Utc::now());
        events.heard_at(0, event("heartbeat", "celery@w1"), at(4.0), Utc::now());
        assert_eq!(state(at(5.0)), State::Online);
        assert_eq!(state(at(8.0)), State::Online, "exactly two heartbeats late");
        assert_eq!(state(at(8.1)), State::Gone);

        // The subscription drops and comes back: the silence it could not hear
        // does not clear the verdict, nor does the new subscription's warm-up.
        events.deaf(0);
        assert_eq!(state(at(20.0)), State::Gone);
        events.listening_at(0, at(30.0));
        assert_eq!(state(at(30.5)), State::Gone);
        events.heard_at(0, event("heartbeat", "celery@w1"), at(31.0), Utc::now());
        assert_eq!(state(at(31.0)), State::Online, "it spoke again");
    }

    #[test]
    fn a_worker_falling_silent_is_told_once_the_moment_it_is_two_heartbeats_long() {
        let events = WorkerEvents::default();
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        events.listening_at(0, t0);
        events.heard_at(0, event("online", "celery@w1"), at(0.0), Utc::now());
        // One forged heartbeat: a name heard once, whose silence is no fault.
        events.heard_at(0, event("heartbeat", "celery@once"), at(3.0), Utc::now());
        events.heard_at(0, event("heartbeat", "celery@w1"), at(4.0), Utc::now());
        assert!(!events.fell_silent_at(at(2.0)), "not warmed up yet");
        assert!(
            !events.fell_silent_at(at(7.9)),
            "still within two heartbeats"
        );
        assert!(!events.fell_silent_at(at(7.1)));
        assert!(
            events.fell_silent_at(at(8.1)),
            "w1 silent for two heartbeats"
        );
        assert!(!events.fell_silent_at(at(8.4)), "told once");
        let workers = events.workers_at(at(8.5)).unwrap();
        assert!(
            workers.iter().all(|w| w.state == State::Gone),
            "{workers:?}"
        );
        // While nobody listens, a silence is nobody's: nothing is told.
        events.heard_at(0, event("heartbeat", "celery@w1"), at(9.0), Utc::now());
        events.deaf(0);
        assert!(!events.fell_silent_at(at(20.0)));
    }

    #[test]
    fn silence_while_nobody_listens_is_no_fault_of_the_worker() {
        let events = WorkerEvents::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        events.listening_at(0, t0);
        events.heard_at(0, event("heartbeat", "celery@w1"), at(5), Utc::now());
        assert_eq!(events.workers_at(at(6)).unwrap()[0].state, State::Online);
        // Deaf from 7 s to 20 s: nothing judged meanwhile, and nothing known:
        // the worker is unknown, not online, and the reason is said.
        events.deaf(0);
        assert_eq!(events.workers_at(at(15)).unwrap()[0].state, State::Unknown);
        assert_eq!(
            events.unheard().as_deref(),
            Some("the subscription to the workers' heartbeats is not up")
        );
        // Listening again at 20 s: the worker has two heartbeats from then on.
        events.listening_at(0, at(20));
        assert_eq!(events.workers_at(at(23)).unwrap()[0].state, State::Online);
        assert_eq!(events.unheard(), None);
        assert_eq!(events.workers_at(at(25)).unwrap()[0].state, State::Gone);
    }

    #[test]
    fn a_subscription_behind_blames_nobody_until_it_has_caught_up_and_listened_again() {
        let events = WorkerEvents::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        events.listening_at(0, t0);
        events.heard_at(0, event("online", "celery@w1"), at(1), Utc::now());
        assert_eq!(events.workers_at(at(4)).unwrap()[0].state, State::Online);
        // The broker drops events from 5 s on: w1's heartbeats among them.
        let why = "broker amqp://rabbit:5672// drops the workers' events before they are read";
        events.behind(0, why.to_owned(), 10_000);
        events.behind(0, why.to_owned(), 9_950);
        assert_eq!(events.workers_at(at(30)).unwrap()[0].state, State::Unknown);
        assert_eq!(events.unheard().as_deref(), Some(why));
        assert!(events.refused(), "said beside the verdict, not passed over");
        // Less waits, but more than it keeps up with: still behind.
        events.behind_still(0, 5_000);
        assert_eq!(events.unheard().as_deref(), Some(why));
        // Caught up: listening again from now, so the silence while behind
        // is nobody's fault and the worker has two heartbeats from here.
        events.caught_up(0, 0);
        let now = Instant::now();
        assert_eq!(events.unheard(), None);
        assert_eq!(events.workers_at(now).unwrap()[0].state, State::Online);
        assert_eq!(
            events.workers_at(now + Duration::from_secs(5)).unwrap()[0].state,
            State::Gone,
            "a silence heard in full counts again"
        );
        let [subscription] = &events.subscriptions()[..] else {
            panic!("one subscription");
        };
        assert_eq!(
            subscription,
            &SubscriptionState {
                index: 0,
                state: "listening",
                received: 1,
                subscribed: 1,
                overflows: 1,
                backlog: Some(0),
            },
            "one fall behind counted once, the events read counted"
        );
    }

    #[test]
    fn a_refused_subscription_is_said_and_ends_the_wait() {
        let events = WorkerEvents::default();
        let t0 = Instant::now();
        assert!(
            events.pending_at(t0),
            "the first poll waits for the heartbeats"
        );
        assert!(events.pending_at(t0 + SETTLE_WITHIN - Duration::from_millis(1)));
        assert!(
            !events.pending_at(t0 + SETTLE_WITHIN),
            "the wait is bounded"
        );

        let refused = WorkerEvents::default();
        assert!(refused.pending_at(t0));
        let why =
            "broker redis://b:6379/0 refused the subscription to the workers' heartbeats: NOPERM";
        refused.cannot_listen(0, why.to_owned());
        assert!(
            !refused.pending_at(t0),
            "a refusal will not warm up: no wait"
        );
        assert_eq!(refused.unheard().as_deref(), Some(why));
        // Listening after all (the ACL was fixed): the refusal is forgotten.
        refused.listening(0);
        assert_eq!(refused.unheard(), None);
    }

    #[test]
    fn the_last_worker_gone_is_not_forgotten_while_none_is_online() {
        let events = WorkerEvents::default();
        let t0 = Instant::now();
        events.listening_at(0, t0);
        events.heard_at(0, event("heartbeat", "celery@a"), t0, Utc::now());
        let later = t0 + FORGET_AFTER * 2;
        let workers = events.workers_at(later).unwrap();
        assert_eq!(workers.len(), 1);
        assert_eq!(workers[0].state, State::Gone);
        // Another worker comes online: the old one is forgotten in time.
        events.heard_at(0, event("heartbeat", "celery@b"), later, Utc::now());
        let names: Vec<_> = events
            .workers_at(later + Duration::from_secs(1))
            .unwrap()
            .into_iter()
            .map(|w| w.name)
            .collect();
        assert_eq!(names, ["celery@b"]);
    }

    #[test]
    fn an_offline_worker_is_offline_and_forgotten_after_an_hour() {
        let events = WorkerEvents::default();
        let t0 = Instant::now();
        events.listening_at(0, t0);
        events.heard_at(0, event("heartbeat", "celery@a"), t0, Utc::now());
        events.heard_at(0, event("offline", "celery@b"), t0, Utc::now());
        let workers = events.workers_at(t0 + WARM_UP * 2).unwrap();
        let states: Vec<_> = workers.iter().map(|w| (w.name.as_str(), w.state)).collect();
        assert_eq!(
            states,
            [("celery@a", State::Gone), ("celery@b", State::Offline)]
        );
        // An hour on, the clean stop is forgotten; the death is not, while no
        // worker is online (see the next test).
        let names: Vec<_> = events
            .workers_at(t0 + FORGET_AFTER + Duration::from_secs(1))
            .unwrap()
            .into_iter()
            .map(|w| (w.name, w.state))
            .collect();
        assert_eq!(names, [("celery@a".to_owned(), State::Gone)]);
    }

    #[test]
    fn forged_events_are_weighed_not_obeyed() {
        let events = WorkerEvents::default();
        let t0 = Instant::now();
        // Listened for long enough already: every reading below says something.
        events.listening_at(0, t0.checked_sub(WARM_UP * 2).unwrap());
        let with_freq = |host: &str, freq: &str| {
            Event::from_body(
                format!(r#"{{"hostname": "{host}", "freq": {freq}, "type": "worker-heartbeat"}}"#)
                    .as_bytes(),
            )
            .unwrap()
        };
        // A freq past what Celery sends is held to the documented range.
        events.heard_at(0, with_freq("celery@huge", "1e300"), t0, Utc::now());
        events.heard_at(0, with_freq("celery@tiny", "1e-9"), t0, Utc::now());
        let state = |at: Instant, name: &str| {
            events
                .workers_at(at)
                .unwrap()
                .into_iter()
                .find(|w| w.name == name)
                .map(|w| (w.state, w.freq))
        };
        let soon = t0 + Duration::from_millis(500);
        assert_eq!(state(soon, "celery@tiny"), Some((State::Online, MIN_FREQ)));
        let later = t0 + MAX_FREQ * 2 + Duration::from_secs(1);
        assert_eq!(state(later, "celery@huge"), Some((State::Gone, MAX_FREQ)));

        // A live worker heartbeating every 2 s while forged goodbyes arrive
        // every 100 ms: after its first heartbeat contradicts one, it stays online.
        let w = "celery@live";
        let mut offline_reads = 0;
        for tick in 0..100u64 {
            let at = t0 + Duration::from_millis(100 * tick);
            if tick % 20 == 0 {
                events.heard_at(0, event("heartbeat", w), at, Utc::now());
            } else {
                events.heard_at(0, event("offline", w), at, Utc::now());
            }
            if tick > 20 && state(at, w).map(|(s, _)| s) != Some(State::Online) {
                offline_reads += 1;
            }
        }
        assert_eq!(offline_reads, 0, "forged goodbyes won over live heartbeats");

        // A clean stop (no heartbeat since) is still offline at once.
        events.heard_at(0, event("heartbeat", "celery@stop"), t0, Utc::now());
        events.heard_at(
            0,
            event("offline", "celery@stop"),
            t0 + Duration::from_millis(50),
            Utc::now(),
        );
        assert_eq!(
            state(t0 + Duration::from_millis(60), "celery@stop").map(|(s, _)| s),
            Some(State::Offline)
        );
    }

    #[test]
    fn a_flood_of_names_keeps_at_most_max_workers() {
        let events = WorkerEvents::default();
        let t0 = Instant::now();
        for i in 0..MAX_WORKERS + 5 {
            let at = t0 + Duration::from_millis(i as u64);
            events.heard_at(
                0,
                event("heartbeat", &format!("celery@w{i}")),
                at,
                Utc::now(),
            );
        }
        let inner = events.lock();
        assert!(inner.workers.len() <= MAX_WORKERS);
        assert!(
            !inner.workers.contains_key("celery@w0"),
            "the oldest went first"
        );
        let newest = format!("celery@w{}", MAX_WORKERS + 4);
        assert!(inner.workers.contains_key(&newest), "the newest stays");
        assert!(
            inner
                .workers
                .contains_key(&format!("celery@w{}", MAX_WORKERS / 10 + 1)),
            "only the oldest tenth went"
        );
    }

    /// A real worker heartbeats every 2 s while a flood names 20,000 new
    /// workers a second: the flood's names go, the worker stays, and its
    /// death is still seen two heartbeats later.
    #[test]
    fn a_flood_of_new_names_never_pushes_out_a_worker_that_heartbeats() {
        let events = WorkerEvents::default();
        let t0 = Instant::now();
        events.listening_at(0, t0);
        let real = "celery@real";
        let mut forged = 0;
        // 12 s: the real worker at 0, 2, ... 10 s; from 3 s on (it was heard
        // twice by then), 200 forged names every 10 ms.
        for tick in 0..1_200u64 {
            let at = t0 + Duration::from_millis(tick * 10);
            if tick % 200 == 0 {
                events.heard_at(0, event("heartbeat", real), at, Utc::now());
            }
            for _ in 0..if tick < 300 { 0 } else { 200 } {
                events.heard_at(
                    0,
                    event("heartbeat", &format!("celery@forged{forged}")),
                    at,
                    Utc::now(),
                );
                forged += 1;
            }
            assert!(events.lock().workers.len() <= MAX_WORKERS);
            assert!(
                events.lock().workers.contains_key(real),
                "pushed out at {tick}0 ms"
            );
        }
        let state = |at| {
            events
                .workers_at(at)
                .unwrap()
                .into_iter()
                .find(|w| w.name == real)
                .map(|w| w.state)
        };
        assert_eq!(
            state(t0 + Duration::from_millis(11_990)),
            Some(State::Online)
        );
        // Last heard at 10 s: gone past 14 s.
        assert_eq!(state(t0 + Duration::from_millis(14_100)), Some(State::Gone));

        // Confirmed: heard twice, or announced by worker-online; not one heartbeat.
        let events = WorkerEvents::default();
        events.listening_at(0, t0);
        events.heard_at(0, event("heartbeat", "celery@once"), t0, Utc::now());
        events.heard_at(0, event("online", "celery@started"), t0, Utc::now());
        let confirmed: Vec<(String, bool)> = events
            .workers_at(t0 + WARM_UP)
            .unwrap()
            .into_iter()
            .map(|w| (w.name, w.confirmed))
            .collect();
        assert_eq!(
            confirmed,
            [
                ("celery@once".to_owned(), false),
                ("celery@started".to_owned(), true)
            ]
        );
    }
}
