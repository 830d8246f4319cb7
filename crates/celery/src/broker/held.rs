//! One driver for a connection held to a broker: its watch (which rings the
//! executor's alarm) and its events subscription (which tells the workers'
//! record), on Redis and RabbitMQ alike.
//!
//! Each transport gives only a [`Link`]: a connection made within a deadline
//! of its own, and a wait on it until it is lost or refused. The driver keeps
//! the connection's [`Life`], whose transitions are the only way to change it,
//! each saying whether to ask for a poll (ring) and whether to warn:
//!
//! | from | event | to | ring | warn |
//! | --- | --- | --- | --- | --- |
//! | connecting | connected | held | after a loss, unless a poll's answer brought the attempt (that poll saw the return) | |
//! | connecting | no connection | lost | when a poll's answer brought the attempt (its healthy is stale), once while answers keep bringing attempts | |
//! | connecting | refused | refused | yes | the first of a run |
//! | held | lost | lost | yes | |
//! | held | refused | refused | yes | the first of a run |
//! | lost | back-off out, or a poll's answer | connecting | | |
//! | refused | back-off out | connecting | | |
//!
//! A run of refusals ends when a connection holds until it is lost. Waits
//! are [`Retry`]'s: a lost connection's ends early when a poll reaches the
//! broker ([`Answers`]), never before half a second; a refused one's never
//! does, since no poll's answer changes a refusal.

use std::sync::Arc;
use std::time::Duration;

use overseer_core::backoff::Backoff;
use overseer_core::check::Alarm;
use tokio::sync::watch;
use tokio::time::Instant;

use super::Reason;
use crate::events::WorkerEvents;

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

/// The spacing of a held connection's reconnects: half a second at first, so
/// a broker's return is seen at once, doubling to [`Retry::CEILING`] while it
/// keeps failing (a wrong password costs a connection every 30 s, not two a
/// second), and back to the start once a connection has held for
/// [`Retry::HELD`].
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
    pub(super) const FIRST: Duration = Duration::from_millis(500);
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
    /// poll's answer can make succeed (a broker that refuses what it is asked).
    pub(crate) async fn wait_out(&mut self) {
        tokio::time::sleep(self.backoff.next_delay()).await;
    }
}

/// What a transport gives the driver.
pub(crate) trait Link: Send {
    /// A connection held, and whatever its wait needs beside it.
    type Conn: Send;

    /// Makes a connection (and whatever it holds it for: a subscription),
    /// within a deadline of the transport's own.
    fn connect(&mut self) -> impl Future<Output = Result<Self::Conn, Ended>> + Send;

    /// Waits until `conn` is lost (it closed, or stopped answering) or the
    /// broker refuses what it is held for.
    fn hold(&mut self, conn: Self::Conn) -> impl Future<Output = Ended> + Send;
}

/// How an attempt failed, or a held connection ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The broker is not there: no connection could be made, or the held one
    /// closed or stopped answering. Why, when known (said at DEBUG: the polls
    /// say why in the verdict).
    Gone(Option<Reason>),
    /// The broker answered with a refusal that no poll's answer changes (an
    /// ACL without the command or channel, a user who may not use an
    /// exchange, a server too old).
    Refused(Refusal),
}

/// A broker's refusal, as the log and the workers' record say it.
#[derive(Debug)]
pub(crate) struct Refusal {
    /// The broker's answer, in plain words naming it.
    pub(crate) reason: Reason,
    /// What it costs, warned at the first of a run.
    pub(crate) warning: &'static str,
    /// What the verdict notes, for a subscription.
    pub(crate) note: String,
}

/// Who hears of the connection's life.
pub(crate) enum Listener {
    /// A broker's watch: its rings ask the executor's alarm for a poll.
    Watch(Alarm),
    /// Broker `index`'s events subscription: the workers' record is told
    /// when it is up, down or refused.
    Events {
        index: usize,
        events: Arc<WorkerEvents>,
    },
}

impl Listener {
    /// What it holds the connection for, in the log.
    fn what(&self) -> &'static str {
        match self {
            Self::Watch(_) => "the watch",
            Self::Events { .. } => "the workers' events subscription",
        }
    }

    fn ring(&self, identity: &str, why: &str) {
        if let Self::Watch(alarm) = self {
            tracing::debug!(broker = %identity, "{why}; polling at once");
            alarm.ring();
        }
    }

    fn up(&self) {
        if let Self::Events { index, events } = self {
            events.listening(*index);
        }
    }

    fn down(&self) {
        if let Self::Events { index, events } = self {
            events.deaf(*index);
        }
    }

    fn refused(&self, refusal: &Refusal) {
        if let Self::Events { index, events } = self {
            events.cannot_listen(*index, refusal.note.clone());
        }
    }
}

/// What an attempt to connect follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// Nothing: the first attempt. A connection made is no news.
    Start,
    /// A loss: a held connection lost, or attempts that failed. A connection
    /// made is the broker's return. `told`: it rang for an attempt a poll's
    /// answer brought that failed, and answers have brought every attempt
    /// since (so the poll it rang for may be what brings the next).
    /// `warned`: a refusal before the loss was warned, and no connection has
    /// held since.
    Lost { told: bool, warned: bool },
    /// A refusal, warned: the broker is there, so a connection made is no
    /// return.
    Refused,
}

impl After {
    fn warned(self) -> bool {
        match self {
            Self::Start => false,
            Self::Lost { warned, .. } => warned,
            Self::Refused => true,
        }
    }
}

/// A held connection's life. Only its transitions change it; each returns
/// what to do ([`Said`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Life {
    /// An attempt to connect is under way, after `after`, brought by `woken`
    /// (a back-off that ran out, or a poll that reached the broker).
    Connecting { after: After, woken: Woken },
    /// A connection is held. `warned`: the refusal before it was warned.
    Held { warned: bool },
    /// No connection (lost, or none made): waiting for the back-off, or for a
    /// poll's answer ([`Retry::wait`]). `told`, `warned`: as [`After::Lost`].
    Lost { told: bool, warned: bool },
    /// The broker refused: waiting out the back-off ([`Retry::wait_out`]).
    Refused,
}

/// What a transition says to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Said {
    /// Ask for a poll now, and why (for the log).
    pub(crate) ring: Option<&'static str>,
    /// Warn of the refusal: the first of a run.
    pub(crate) warn: bool,
}

impl Life {
    pub(crate) fn new() -> Self {
        Self::Connecting {
            after: After::Start,
            woken: Woken::Waited,
        }
    }

    /// The attempt made a connection: the broker's return is news unless a
    /// poll's answer brought the attempt (that poll saw it back).
    pub(crate) fn connected(&mut self) -> Said {
        let Self::Connecting { after, woken } = *self else {
            return self.misstep("connected");
        };
        *self = Self::Held {
            warned: after.warned(),
        };
        let back = matches!(after, After::Lost { .. }) && woken == Woken::Waited;
        Said {
            ring: back.then_some("the broker takes connections again"),
            warn: false,
        }
    }

    /// The attempt made no connection. If a poll's answer brought it, the
    /// broker died again since that poll said healthy: news, told once while
    /// answers keep bringing attempts (a broker that answers polls but takes
    /// no more connections, a full `maxclients`, costs one extra poll, not a
    /// poll per poll); a wait that runs its back-off out ends that.
    pub(crate) fn failed(&mut self) -> Said {
        let Self::Connecting { after, woken } = *self else {
            return self.misstep("failed");
        };
        let answered = woken == Woken::Answered;
        let told = matches!(after, After::Lost { told: true, .. });
        *self = Self::Lost {
            told: answered,
            warned: after.warned(),
        };
        Said {
            ring: (answered && !told)
                .then_some("a poll reached the broker, but no connection can be made"),
            warn: false,
        }
    }

    /// The broker refused the attempt, or what the held connection was for:
    /// it is there, but may have changed, so a poll looks.
    pub(crate) fn refused(&mut self) -> Said {
        let warned = match *self {
            Self::Connecting { after, .. } => after.warned(),
            Self::Held { warned } => warned,
            Self::Lost { .. } | Self::Refused => return self.misstep("refused"),
        };
        *self = Self::Refused;
        Said {
            ring: Some("the broker refused"),
            warn: !warned,
        }
    }

    /// The held connection closed or stopped answering.
    pub(crate) fn lost(&mut self) -> Said {
        let Self::Held { .. } = *self else {
            return self.misstep("lost");
        };
        *self = Self::Lost {
            told: false,
            warned: false,
        };
        Said {
            ring: Some("the held connection closed or stopped answering"),
            warn: false,
        }
    }

    /// Whether a poll's answer may end the wait before the next attempt.
    pub(crate) fn hastened(&self) -> bool {
        matches!(self, Self::Lost { .. })
    }

    /// The wait before the next attempt ended, `woken` so.
    pub(crate) fn woken(&mut self, woken: Woken) {
        *self = match *self {
            Self::Lost { told, warned } => Self::Connecting {
                after: After::Lost { told, warned },
                woken,
            },
            Self::Refused => Self::Connecting {
                after: After::Refused,
                woken: Woken::Waited,
            },
            Self::Connecting { .. } | Self::Held { .. } => {
                self.misstep("woken");
                return;
            }
        };
    }

    /// A transition its state does not have: the driver never asks for one,
    /// so nothing changes and nothing is said.
    fn misstep(&self, transition: &str) -> Said {
        debug_assert!(false, "{transition} from {self:?}");
        Said::default()
    }
}

/// Holds a connection over `link` for as long as it runs, telling `listener`
/// of its life, reconnecting as [`Life`] and [`Retry`] say.
pub(crate) async fn drive(
    mut link: impl Link,
    listener: Listener,
    identity: &str,
    answers: &Answers,
) {
    let mut retry = Retry::new(answers);
    let mut life = Life::new();
    let say = |said: Said, refusal: Option<&Refusal>| {
        if let Some(why) = said.ring {
            listener.ring(identity, why);
        }
        if let Some(refusal) = refusal {
            if said.warn {
                tracing::warn!(broker = %identity, reason = %refusal.reason, "{}", refusal.warning);
            }
            listener.refused(refusal);
        }
    };
    loop {
        let held = match link.connect().await {
            Ok(conn) => {
                say(life.connected(), None);
                listener.up();
                let since = Instant::now();
                let ended = link.hold(conn).await;
                listener.down();
                log_end(identity, &format!("{} ended", listener.what()), &ended);
                match &ended {
                    Ended::Gone(_) => say(life.lost(), None),
                    Ended::Refused(refusal) => say(life.refused(), Some(refusal)),
                }
                since.elapsed()
            }
            Err(ended) => {
                log_end(
                    identity,
                    &format!("{} could not connect", listener.what()),
                    &ended,
                );
                match &ended {
                    Ended::Gone(_) => say(life.failed(), None),
                    Ended::Refused(refusal) => say(life.refused(), Some(refusal)),
                }
                Duration::ZERO
            }
        };
        let woken = if life.hastened() {
            retry.wait(held).await
        } else {
            retry.wait_out().await;
            Woken::Waited
        };
        life.woken(woken);
    }
}

/// Says at DEBUG what `happened` to the connection, and why when it is known.
fn log_end(identity: &str, happened: &str, ended: &Ended) {
    let reason = match ended {
        Ended::Gone(reason) => reason.as_deref(),
        Ended::Refused(refusal) => Some(refusal.reason.as_str()),
    };
    match reason {
        Some(reason) => tracing::debug!(broker = %identity, %reason, "{happened}"),
        None => tracing::debug!(broker = %identity, "{happened}"),
    }
}

#[cfg(test)]
mod tests;
