//! Whether each broker's subscription hears the workers now: up and keeping
//! up, down, refused, or behind what the broker sends; and what each has read.

use tokio::time::Instant;

use std::time::Duration;

use super::{Inner, State, WorkerEvents};

/// How long before a subscription is found behind its broker may have been
/// dropping events: the queue's TTL (5 s) and a status tick, with margin.
const MAY_HAVE_DROPPED: Duration = Duration::from_secs(8);

/// Whether one broker's subscription hears the workers now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Hearing {
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
pub(super) struct Subscription {
    pub(super) hearing: Hearing,
    /// Worker events taken from it.
    pub(super) received: u64,
    /// How many times it came up: one, unless it was lost and came back.
    pub(super) subscribed: u64,
    /// How many times it fell behind.
    pub(super) overflows: u64,
    /// Events waiting in the broker for it, as the broker last said (RabbitMQ).
    pub(super) backlog: Option<u64>,
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

impl Inner {
    /// Since when the workers are listened for continuously: the earliest
    /// subscription still up and keeping up.
    pub(super) fn since(&self) -> Option<Instant> {
        self.subscriptions
            .values()
            .filter_map(|s| match s.hearing {
                Hearing::Up(since) => Some(since),
                _ => None,
            })
            .min()
    }
}

impl WorkerEvents {
    fn hearing(&self, index: usize, hearing: Hearing) {
        self.lock().subscriptions.entry(index).or_default().hearing = hearing;
    }

    /// Broker `index`'s subscription is up.
    pub(crate) fn listening(&self, index: usize) {
        self.listening_at(index, Instant::now());
    }

    pub(super) fn listening_at(&self, index: usize, at: Instant) {
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
    pub(crate) fn behind(&self, index: usize, why: String, backlog: Option<u64>) {
        self.behind_at(index, why, backlog, Instant::now());
    }

    pub(super) fn behind_at(&self, index: usize, why: String, backlog: Option<u64>, now: Instant) {
        let mut inner = self.lock();
        let subscription = inner.subscriptions.entry(index).or_default();
        let fell = !matches!(subscription.hearing, Hearing::Behind(_));
        subscription.hearing = Hearing::Behind(why);
        if backlog.is_some() {
            subscription.backlog = backlog;
        }
        if fell {
            subscription.overflows += 1;
            // The broker may have dropped events for a while before this was
            // seen (at most a TTL's worth, and a tick): a worker found gone
            // meanwhile may have been silenced by it, so it is not blamed;
            // it has two heartbeats again once the subscription has caught up.
            for heard in inner.workers.values_mut() {
                if heard.state == State::Gone
                    && heard
                        .gone_at
                        .is_some_and(|at| now.saturating_duration_since(at) <= MAY_HAVE_DROPPED)
                {
                    heard.state = State::Online;
                    heard.gone_at = None;
                }
            }
        }
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
}
