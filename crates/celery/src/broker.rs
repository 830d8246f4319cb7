//! What a broker check is, whatever its transport: [`BrokerProbe`], which the Redis
//! and RabbitMQ checks implement and [`crate::check`] calls for each broker of a URL,
//! and the reasons every transport words alike.

use std::sync::Arc;
use std::time::Duration;

use overseer_core::backoff::Backoff;
use overseer_core::check::Alarm;
use overseer_core::detail::WorkerDetail;
use overseer_core::duration;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::detail::QueueDepth;
use crate::events::WorkerEvents;
use crate::ping::{Pidbox, Unsent};

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
    /// Reconnects are spaced by [`Retry`], and made at once when a poll reaches
    /// the broker (`answers`): see [`Watched`]. A transport that cannot watch
    /// returns at once.
    async fn watch(&self, _alarm: Alarm, _answers: Answers) {}

    /// Follows Celery's worker events on this broker for as long as it runs
    /// ([`crate::events`]), over a connection of its own: tells `events` when
    /// the subscription of broker `index` is up and when it drops, and hands it
    /// every worker event. Reconnects are spaced by [`Retry`], and made at once
    /// when a poll reaches the broker (`answers`). A transport that cannot
    /// subscribe returns at once.
    async fn subscribe(&self, _index: usize, _events: Arc<WorkerEvents>, _answers: Answers) {}
}

/// The polls that reached one broker, counted, for the connections held to it
/// (its watch, its events subscription): one that is waiting to reconnect
/// tries again the moment a poll finds the broker answering, whatever its
/// back-off. Otherwise a broker back from a long outage could be found
/// healthy by a poll while its watch still waited (up to [`Retry::CEILING`]),
/// and a death in that gap would go unseen until the next poll.
#[derive(Debug, Clone)]
pub(crate) struct Answers(Arc<watch::Sender<u64>>);

impl Answers {
    pub(crate) fn new() -> Self {
        Self(Arc::new(watch::Sender::new(0)))
    }

    /// A poll reached the broker.
    pub(crate) fn answered(&self) {
        self.0.send_modify(|count| *count = count.wrapping_add(1));
    }
}

/// Why a [`Retry::wait`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// Its back-off ran out.
    Waited,
    /// A poll reached the broker.
    Answered,
}

/// The spacing of a held connection's reconnects (the watchers', the event
/// subscriptions'): half a second at first, so a broker's return is seen at
/// once, doubling to [`Retry::CEILING`] while it keeps failing (a wrong
/// password costs a connection every 30 s, not two a second), and back to the
/// start once a connection has held for [`Retry::HELD`].
///
/// A poll that reaches the broker ([`Answers`]) ends the wait, without
/// shortening the next, but never before [`Retry::FIRST`]: a connection that
/// the broker drops as soon as it is made, while polls find it answering, is
/// tried at most twice a second, not in a loop with the polls its watch rings
/// for.
#[derive(Debug)]
pub(crate) struct Retry {
    backoff: Backoff,
    answers: watch::Receiver<u64>,
}

impl Retry {
    const FIRST: Duration = Duration::from_millis(500);
    const CEILING: Duration = Duration::from_secs(30);
    const HELD: Duration = Duration::from_secs(10);

    pub(crate) fn new(answers: &Answers) -> Self {
        Self {
            backoff: Backoff::new(Self::FIRST, Self::CEILING),
            answers: answers.0.subscribe(),
        }
    }

    /// Waits before the next attempt; `held` is how long the last connection
    /// lasted (zero when none was made). The polls that reached the broker
    /// while a connection was held are old news; one since it was lost, or
    /// since the last attempt began, ends the wait.
    pub(crate) async fn wait(&mut self, held: Duration) -> Woken {
        if held >= Self::HELD {
            self.backoff.reset();
        }
        if !held.is_zero() {
            self.answers.borrow_and_update();
        }
        let started = Instant::now();
        let delay = self.backoff.next_delay();
        let answers = &mut self.answers;
        let answered = async move {
            if answers.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep_until(started + Self::FIRST).await;
        };
        // An answer that is due with the back-off's end still counts.
        let woken = tokio::select! {
            biased;
            () = answered => Woken::Answered,
            () = tokio::time::sleep(delay) => Woken::Waited,
        };
        // The next attempt begins: what a poll finds from now on is news.
        self.answers.borrow_and_update();
        woken
    }

    /// Waits out the back-off whatever the polls find: for an attempt that no
    /// poll's answer can make succeed (a broker that lacks what it needs).
    pub(crate) async fn wait_out(&mut self) {
        tokio::time::sleep(self.backoff.next_delay()).await;
    }
}

/// A broker watch's account of its held connection, which rings the alarm on
/// news: the connection lost (the broker died, stopped answering, or refused
/// the watch's command), a connection made again after that (it is back),
/// and a connection that cannot be made though a poll has just reached the
/// broker (it died again in between: that poll's verdict is already stale).
/// Each is a poll at once. A return a poll has already seen is no news; and
/// the last kind rings once until a connection is made again, so a broker
/// that answers polls but will not take the watch's connection (a full
/// `maxclients`) costs one extra poll, not a poll per poll.
pub(crate) struct Watched<'a> {
    alarm: &'a Alarm,
    identity: &'a str,
    retry: Retry,
    /// The held connection was lost, and none has been made since.
    lost: bool,
    /// The last wait was ended by a poll that reached the broker.
    answered: bool,
    /// It rang for a connection that could not be made after such a poll.
    told: bool,
}

impl<'a> Watched<'a> {
    pub(crate) fn new(alarm: &'a Alarm, identity: &'a str, answers: &Answers) -> Self {
        Self {
            alarm,
            identity,
            retry: Retry::new(answers),
            lost: false,
            answered: false,
            told: false,
        }
    }

    /// A connection is held.
    pub(crate) fn connected(&mut self) {
        if std::mem::take(&mut self.lost) && !self.answered {
            tracing::debug!(broker = %self.identity, "the broker takes connections again; polling at once");
            self.alarm.ring();
        }
        self.told = false;
    }

    /// The held connection closed, stopped answering, or its command was refused.
    pub(crate) fn lost(&mut self) {
        tracing::debug!(broker = %self.identity, "the watched connection closed or stopped answering; polling at once");
        self.alarm.ring();
        self.lost = true;
    }

    /// The broker answered the watch's command with an error (an ACL that
    /// refuses it, a demoted master's `READONLY`): it is there, but may have
    /// changed, so a poll looks; the next connection is no return.
    pub(crate) fn refused(&mut self) {
        tracing::debug!(broker = %self.identity, "the broker refused the watch's command; polling at once");
        self.alarm.ring();
    }

    /// No connection could be made.
    pub(crate) fn unreachable(&mut self) {
        if self.answered && !self.told {
            tracing::debug!(broker = %self.identity, "a poll reached the broker, but the watch cannot; polling at once");
            self.alarm.ring();
            self.told = true;
        }
        self.lost = true;
    }

    /// Waits out the back-off whatever the polls find ([`Retry::wait_out`]):
    /// after the broker refused the watch's command, which no poll's answer
    /// can change.
    pub(crate) async fn wait_out(&mut self) {
        self.answered = false;
        self.retry.wait_out().await;
    }

    /// Waits before the next attempt ([`Retry::wait`]).
    pub(crate) async fn wait(&mut self, held: Duration) {
        self.answered = self.retry.wait(held).await == Woken::Answered;
    }
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

#[cfg(test)]
mod table;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_poll_that_reaches_the_broker_ends_a_reconnect_wait_after_at_least_the_first_step() {
        let answers = Answers::new();
        let mut retry = Retry::new(&answers);
        // The back-off grows while attempts fail: 0.5 s, 1 s, 2 s, then 4 s.
        for _ in 0..3 {
            assert_eq!(retry.wait(Duration::ZERO).await, Woken::Waited);
        }
        let poll = answers.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            poll.answered();
            tokio::time::sleep(Duration::from_secs(1)).await;
            poll.answered();
        });
        // Answered at 0.2 s: the attempt comes at 0.5 s, not at 4 s.
        let waiting = Instant::now();
        assert_eq!(retry.wait(Duration::ZERO).await, Woken::Answered);
        assert_eq!(waiting.elapsed(), Retry::FIRST);
        // Answered 0.7 s into the next wait: at once, and the back-off
        // (8 s now) is not shortened by the answers.
        let waiting = Instant::now();
        assert_eq!(retry.wait(Duration::ZERO).await, Woken::Answered);
        assert_eq!(waiting.elapsed(), Duration::from_millis(700));
        let waiting = Instant::now();
        assert_eq!(retry.wait(Duration::ZERO).await, Woken::Waited);
        assert_eq!(waiting.elapsed(), Duration::from_secs(16));
    }

    #[tokio::test(start_paused = true)]
    async fn polls_while_a_connection_was_held_are_old_news_those_during_an_attempt_are_not() {
        let answers = Answers::new();
        let mut retry = Retry::new(&answers);
        // Polls answered while the connection held; then it was lost.
        answers.answered();
        answers.answered();
        let waiting = Instant::now();
        assert_eq!(retry.wait(Duration::from_secs(1)).await, Woken::Waited);
        assert_eq!(waiting.elapsed(), Retry::FIRST);
        // A poll answered while the next attempt failed: the broker is back
        // since it began, so the wait after it (1 s) ends at the first step.
        answers.answered();
        let waiting = Instant::now();
        assert_eq!(retry.wait(Duration::ZERO).await, Woken::Answered);
        assert_eq!(waiting.elapsed(), Retry::FIRST);
    }
}
