//! What a broker check is, whatever its transport: [`BrokerProbe`], which the Redis
//! and RabbitMQ checks implement and [`crate::check`] calls for each broker of a URL,
//! and the reasons every transport words alike.

use std::sync::Arc;
use std::time::Duration;

use overseer_core::backoff::Backoff;
use overseer_core::check::Alarm;
use overseer_core::detail::WorkerDetail;
use overseer_core::duration;
use tokio::time::Instant;

use crate::detail::QueueDepth;
use crate::events::WorkerEvents;
use crate::ping::Pidbox;

/// Why a probe or a ping failed: the reason, already in plain words, naming the broker.
pub(crate) type Reason = String;

/// One broker's check, over a connection it keeps across polls.
///
/// Both waits are bounded by the caller's deadlines (see [`crate::budget`]): a
/// broker that hangs costs its budget, never more.
#[async_trait::async_trait]
pub(crate) trait BrokerProbe: Send + Sync {
    /// Checks the broker serves as the master Celery sends tasks to, and reads the
    /// depth of `queues`, all before `deadline` (`budget` is the same bound, as a
    /// length, for reasons).
    async fn probe(
        &self,
        queues: &[String],
        deadline: Instant,
        budget: Duration,
    ) -> Result<Vec<QueueDepth>, Reason>;

    /// Celery's remote-control ping (`active_queues`, see [`crate::ping`]) on this
    /// broker, on the connection the probe left open: answers until `window_end`, then
    /// at most `cleanup` to remove what it made. The workers that answered, each with
    /// the queues it said it consumes.
    async fn ping(
        &self,
        pidbox: &Pidbox,
        window_end: Instant,
        cleanup: Duration,
    ) -> Result<Vec<WorkerDetail>, Reason>;

    /// Holds a connection of its own to the broker for as long as it runs, and
    /// rings `alarm` the moment that connection closes or stops answering (and
    /// again when the broker takes a connection after that), so the executor is
    /// polled at once instead of at its next tick ([`overseer_core::check::alarm`]).
    /// A transport that cannot watch returns at once.
    async fn watch(&self, _alarm: Alarm) {}

    /// Follows Celery's worker events on this broker for as long as it runs
    /// ([`crate::events`]), over a connection of its own: tells `events` when
    /// the subscription of broker `index` is up and when it drops, and hands it
    /// every worker event. Reconnects are spaced by [`Retry`]. A transport that
    /// cannot subscribe returns at once.
    async fn subscribe(&self, _index: usize, _events: Arc<WorkerEvents>) {}
}

/// The spacing of a held connection's reconnects (the watchers', the event
/// subscriptions'): half a second at first, so a broker's return is seen at
/// once, doubling to [`Retry::CEILING`] while it keeps failing (a wrong
/// password costs a connection every 30 s, not two a second), and back to the
/// start once a connection has held for [`Retry::HELD`].
#[derive(Debug)]
pub(crate) struct Retry(Backoff);

impl Retry {
    const FIRST: Duration = Duration::from_millis(500);
    const CEILING: Duration = Duration::from_secs(30);
    const HELD: Duration = Duration::from_secs(10);

    pub(crate) fn new() -> Self {
        Self(Backoff::new(Self::FIRST, Self::CEILING))
    }

    /// Waits before the next attempt; `held` is how long the last connection
    /// lasted (zero when it failed).
    pub(crate) async fn wait(&mut self, held: Duration) {
        if held >= Self::HELD {
            self.0.reset();
        }
        tokio::time::sleep(self.0.next_delay()).await;
    }
}

/// The reason for a wait on `who` (`broker redis://...`, or one of its sentinels)
/// that outlived its bound.
pub(crate) fn timed_out(who: &str, budget: Duration) -> Reason {
    format!("{who} did not answer within {}", duration::short(budget))
}

/// The reason for a ping on a broker whose probe left no connection open.
pub(crate) fn not_connected(identity: &str) -> Reason {
    format!("broker {identity} is not connected")
}
