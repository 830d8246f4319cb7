//! What a broker check is, whatever its transport: [`BrokerProbe`], which the Redis
//! and RabbitMQ checks implement and [`crate::check`] calls for each broker of a URL,
//! and the reasons every transport words alike. The connections a check holds
//! between polls (its watch, its events subscription) are driven by [`held`].

pub(crate) mod held;

use std::sync::Arc;
use std::time::Duration;

use overseer_core::check::Alarm;
use overseer_core::detail::WorkerDetail;
use overseer_core::duration;
use tokio::time::Instant;

use crate::detail::BrokerRead;
use crate::events::WorkerEvents;
use crate::ping::{Pidbox, Unsent};
pub(crate) use held::Answers;

/// Why a probe or a ping failed: the reason, already in plain words, naming the broker.
pub(crate) type Reason = String;

/// One broker's check, over a connection it keeps across polls.
///
/// Both waits are bounded by the caller's deadlines (see [`crate::budget`]): a
/// broker that hangs costs its budget, never more.
#[async_trait::async_trait]
pub(crate) trait BrokerProbe: Send + Sync {
    /// Checks the broker serves as the master Celery sends tasks to, and reads the
    /// depth of `queues` (and, where the transport can say, the messages it
    /// delivered unacknowledged and when it started), all before `deadline`
    /// (`budget` is the same bound, as a length, for reasons).
    async fn probe(
        &self,
        queues: &[String],
        deadline: Instant,
        budget: Duration,
    ) -> Result<BrokerRead, Reason>;

    /// Celery's remote-control ping (`active_queues`, see [`crate::ping`]) on this
    /// broker, on the connection the probe left open: answers until `window_end`, then
    /// at most `cleanup` to remove what it made. The workers that answered, each with
    /// the queues it said it consumes; else why none could be counted.
    async fn ping(
        &self,
        pidbox: &Pidbox,
        window_end: Instant,
        cleanup: Duration,
    ) -> Result<Vec<WorkerDetail>, Unsent>;

    /// Holds a connection of its own to the broker for as long as it runs, and
    /// rings `alarm` the moment that connection closes or stops answering (and
    /// again when the broker takes a connection after that), so the executor is
    /// polled at once instead of at its next tick ([`overseer_core::check::alarm`]).
    /// Reconnects are spaced by [`held::Retry`], and made at once when a poll
    /// reaches the broker (`answers`): see [`held::Life`]. A transport that cannot watch
    /// returns at once.
    async fn watch(&self, _alarm: Alarm, _answers: Answers) {}

    /// Follows Celery's worker events on this broker for as long as it runs
    /// ([`crate::events`]), over a connection of its own: tells `events` when
    /// the subscription of broker `index` is up and when it drops, and hands it
    /// every worker event. Reconnects are spaced by [`held::Retry`], and made at once
    /// when a poll reaches the broker (`answers`). A transport that cannot
    /// subscribe returns at once.
    async fn subscribe(&self, _index: usize, _events: Arc<WorkerEvents>, _answers: Answers) {}
}

/// The reason for a wait on `who` (`broker redis://...`, or one of its sentinels)
/// that outlived its bound.
pub(crate) fn timed_out(who: &str, budget: Duration) -> Reason {
    format!("{who} did not answer within {}", duration::short(budget))
}

/// The reason for a connection `who` refused: no listener on its port.
pub(crate) fn refused(who: &str) -> Reason {
    format!("{who} refused the connection")
}

/// Whether `host:port` refuses a bare TCP connection now. Asked after a plain
/// connection was closed before the broker said a word: a TLS listener does that
/// to bytes that are not TLS, and so does a broker that dies under the attempt (a
/// killed server's kernel resets the connections it had not answered, then
/// refuses). A refusal tells the two apart: the broker is down, and the reason is
/// the one every poll after this one gets, not a hint about TLS. Not refused (the
/// port still takes connections, or `deadline` came first): the hint stands.
pub(crate) async fn refuses(host: &str, port: u16, deadline: Instant) -> bool {
    matches!(
        tokio::time::timeout_at(deadline, tokio::net::TcpStream::connect((host, port))).await,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// The reason for a ping on a broker whose probe left no connection open.
pub(crate) fn not_connected(identity: &str) -> Reason {
    format!("broker {identity} is not connected")
}
