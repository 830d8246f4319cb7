//! The workers' events on Redis: a pattern subscription to
//! `/{db}.celeryev/worker.*` (Celery makes `celeryev` a fanout on Redis, which
//! kombu publishes to such channels), over RESP3, on a connection of its own
//! that a `PING` every [`WATCH_WAIT`] proves alive. Each push is parsed and
//! recorded on the connection's own task ([`EventSink`]): nothing is queued in
//! this process, and a server that cannot keep up with a subscriber closes it
//! (Redis's `client-output-buffer-limit pubsub`), which the driver
//! ([`crate::broker::held`]) makes again.

use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;
use tokio::time::{Instant, timeout_at};

use super::RedisCheck;
use super::watch::{WATCH_CONNECT, WATCH_GRACE, WATCH_WAIT};
use crate::broker::Reason;
use crate::broker::held::{Ended, Link, Refusal};
use crate::events::{Event, WorkerEvents};

/// The subscription's connection to one broker, for broker `index`'s events.
pub(super) struct Subscription<'a> {
    pub(super) check: &'a RedisCheck,
    pub(super) index: usize,
    pub(super) events: Arc<WorkerEvents>,
    /// `/{db}.celeryev/worker.*`.
    pub(super) pattern: String,
}

impl Link for Subscription<'_> {
    /// The connection, and the notice of its end its pushes give.
    type Conn = (MultiplexedConnection, Arc<Notify>);

    async fn connect(&mut self) -> Result<Self::Conn, Ended> {
        let check = self.check;
        let ended = Arc::new(Notify::new());
        let sink = EventSink {
            index: self.index,
            events: Arc::clone(&self.events),
            ended: Arc::clone(&ended),
        };
        let deadline = Instant::now() + WATCH_CONNECT;
        let subscribed = async {
            let mut conn = check
                .connect_pushing(deadline, WATCH_CONNECT, Some(sink))
                .await?;
            timeout_at(deadline, conn.psubscribe(&self.pattern))
                .await
                .map_err(|_| check.timed_out(WATCH_CONNECT))?
                .map_err(|e| check.describe(e, WATCH_CONNECT))?;
            Ok::<_, Reason>(conn)
        };
        match subscribed.await {
            Ok(conn) => Ok((conn, ended)),
            // A Redis older than 6: it never will.
            Err(reason) if no_resp3(&reason) => Err(Ended::Refused(Refusal {
                reason,
                warning: "the broker cannot send the workers' heartbeats (they need RESP3: \
                          Redis 6 or later); min_workers needs worker_ping = true on it",
                note: format!(
                    "broker {} cannot send the workers' heartbeats (it does not speak RESP3: \
                     Redis 6 or later)",
                    check.identity
                ),
            })),
            // An ACL user without the channel (new users get none).
            Err(reason) if reason.contains("NOPERM") => Err(Ended::Refused(Refusal {
                reason,
                warning: "the broker refuses the subscription to the workers' heartbeats; gone \
                          workers are not watched on it",
                note: format!(
                    "broker {} refuses the subscription to the workers' heartbeats (NOPERM: the \
                     user may not read channel {})",
                    check.identity, self.pattern
                ),
            })),
            Err(reason) => Err(Ended::Gone(Some(reason))),
        }
    }

    /// Until the connection ends, or a `PING` every [`WATCH_WAIT`] is not
    /// answered in time.
    async fn hold(&mut self, (mut conn, ended): Self::Conn) -> Ended {
        loop {
            tokio::select! {
                () = ended.notified() => return Ended::Gone(None),
                () = tokio::time::sleep(WATCH_WAIT) => {}
            }
            let pong = timeout_at(
                Instant::now() + WATCH_WAIT + WATCH_GRACE,
                redis::cmd("PING").query_async::<Value>(&mut conn),
            )
            .await;
            if !matches!(pong, Ok(Ok(_))) {
                return Ended::Gone(None);
            }
        }
    }
}

/// Whether a connection failed because the server has no `HELLO`, so no
/// RESP3 and no pushes (Redis before 6 answers `unknown command 'HELLO'`).
fn no_resp3(reason: &str) -> bool {
    reason.contains("unknown command") && reason.to_ascii_uppercase().contains("HELLO")
}

/// Where a subscription's pushes go: each `pmessage` that is a worker event
/// to the events, and the connection's end to `ended`. It runs on the
/// connection's own task, so it only parses and records.
pub(in crate::redis) struct EventSink {
    /// Which broker's subscription this is.
    index: usize,
    events: Arc<WorkerEvents>,
    ended: Arc<Notify>,
}

impl redis::aio::AsyncPushSender for EventSink {
    fn send(&self, info: PushInfo) -> Result<(), redis::aio::SendError> {
        match info.kind {
            PushKind::PMessage => {
                if let Some(Value::BulkString(message)) = info.data.get(2)
                    && let Some(event) = Event::from_redis_envelope(message)
                {
                    self.events.heard(self.index, event);
                }
            }
            PushKind::Disconnection => self.ended.notify_one(),
            _ => {}
        }
        Ok(())
    }
}
