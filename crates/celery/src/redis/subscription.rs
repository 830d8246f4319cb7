//! The workers' events on Redis: a pattern subscription to
//! `/{db}.celeryev/worker.*` (Celery makes `celeryev` a fanout on Redis, which
//! kombu publishes to such channels), over RESP3, on a connection of its own
//! that a `PING` every [`WATCH_WAIT`] proves alive. Each push is parsed and
//! recorded on the connection's own task ([`EventSink`]): nothing is queued in
//! this process, and a server that cannot keep up with a subscriber closes it
//! (Redis's `client-output-buffer-limit pubsub`), which the loop makes again.

use std::sync::Arc;
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;
use tokio::time::{Instant, timeout_at};

use super::{RedisCheck, WATCH_CONNECT, WATCH_GRACE, WATCH_WAIT};
use crate::broker::{Answers, Reason, Retry};
use crate::events::{self, Event, WorkerEvents};

/// Subscribes to the `worker` group of Celery's events: a pattern
/// subscription to `/{db}.celeryev/worker.*` (Celery makes `celeryev` a
/// fanout on Redis, which kombu publishes to such channels), over RESP3, on
/// a connection of its own that a `PING` every [`WATCH_WAIT`] proves alive.
pub(super) async fn run(
    check: &RedisCheck,
    index: usize,
    events: Arc<WorkerEvents>,
    answers: Answers,
) {
    let pattern = format!("/{}.{}/worker.*", check.db, events::EXCHANGE);
    let mut retry = Retry::new(&answers);
    let mut told = false;
    loop {
        let ended = Arc::new(Notify::new());
        let sink = EventSink {
            index,
            events: Arc::clone(&events),
            ended: Arc::clone(&ended),
        };
        let deadline = Instant::now() + WATCH_CONNECT;
        let subscribed = async {
            let mut conn = check
                .connect_pushing(deadline, WATCH_CONNECT, Some(sink))
                .await?;
            timeout_at(deadline, conn.psubscribe(&pattern))
                .await
                .map_err(|_| check.timed_out(WATCH_CONNECT))?
                .map_err(|e| check.describe(e, WATCH_CONNECT))?;
            Ok::<_, Reason>(conn)
        };
        let mut conn = match subscribed.await {
            Ok(conn) => conn,
            Err(reason) if no_resp3(&reason) => {
                // A Redis older than 6: it never will; said once, and
                // asked again only at the longest back-off.
                if !told {
                    told = true;
                    tracing::warn!(broker = %check.identity, %reason, "the broker cannot send the workers' heartbeats (they need RESP3: Redis 6 or later); min_workers needs worker_ping = true on it");
                }
                events.cannot_listen(
                    index,
                    format!(
                        "broker {} cannot send the workers' heartbeats (it does not speak RESP3: Redis 6 or later)",
                        check.identity
                    ),
                );
                retry.wait_out().await;
                continue;
            }
            Err(reason) if reason.contains("NOPERM") => {
                // An ACL user without the channel (new users get none):
                // no poll's answer changes that; said once, asked again
                // at the longest back-off.
                if !told {
                    told = true;
                    tracing::warn!(broker = %check.identity, %reason, "the broker refuses the subscription to the workers' heartbeats; gone workers are not watched on it");
                }
                events.cannot_listen(
                    index,
                    format!(
                        "broker {} refuses the subscription to the workers' heartbeats (NOPERM: the user may not read channel {pattern})",
                        check.identity
                    ),
                );
                retry.wait_out().await;
                continue;
            }
            Err(reason) => {
                tracing::debug!(broker = %check.identity, %reason, "could not subscribe to the workers' events");
                retry.wait(Duration::ZERO).await;
                continue;
            }
        };
        let connected = Instant::now();
        events.listening(index);
        loop {
            tokio::select! {
                () = ended.notified() => break,
                () = tokio::time::sleep(WATCH_WAIT) => {}
            }
            let pong = timeout_at(
                Instant::now() + WATCH_WAIT + WATCH_GRACE,
                redis::cmd("PING").query_async::<Value>(&mut conn),
            )
            .await;
            if !matches!(pong, Ok(Ok(_))) {
                break;
            }
        }
        events.deaf(index);
        tracing::debug!(broker = %check.identity, "the workers' events subscription ended");
        retry.wait(connected.elapsed()).await;
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
