//! Celery's worker ping (`active_queues`) over a Redis broker (the exchange of
//! messages is in [`crate::ping`]).
//!
//! The request is published on the pub/sub channel `/{db}.{exchange}`, as a JSON
//! envelope with a base64 body. The reply queue is a list (plus its three priority
//! lists) that exists only while its binding is in `_kombu.binding.{reply exchange}`.
//! Everything made is removed afterwards, even when the ping is cancelled (the
//! cleanup then runs as a task of its own). The ping stops early once as many
//! workers answered as `PUBLISH` said were listening.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use overseer_core::detail::WorkerDetail;
use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};
use tokio::time::{Instant, timeout_at};

use super::{REDIS_TIMEOUT_LAG, SEP, queue_keys};
use crate::ping::{Pidbox, Request, Unsent, answers};

/// The shortest `BRPOP` wait worth sending: `0` would mean "forever" to Redis.
const MIN_BRPOP_WAIT: Duration = Duration::from_millis(10);

/// Pings the workers of a Redis broker on `conn` (database `db`) until `window_end`:
/// the workers that answered, with the queues each consumes.
///
/// Every round trip is bounded by `window_end`, and the cleanup after it by `cleanup`.
pub(super) async fn ping(
    conn: &mut MultiplexedConnection,
    db: i64,
    pidbox: &Pidbox,
    window_end: Instant,
    cleanup: Duration,
) -> Result<Vec<WorkerDetail>, Unsent> {
    let request = Request::new(pidbox, window_end);
    let reply = ReplyQueue::new(pidbox, &request);
    let mut guard = Cleanup {
        conn: Some(conn.clone()),
        reply: reply.clone(),
    };
    let result = async {
        let listeners = publish(conn, db, pidbox, &request, &reply, window_end).await?;
        collect(conn, &reply.keys, &request.ticket, listeners, window_end)
            .await
            .map_err(Unsent::Failed)
    }
    .await;
    guard.run(cleanup).await;
    result
}

/// Where the workers answer one request, as kombu's Redis transport names it.
#[derive(Clone, Default)]
struct ReplyQueue {
    /// The set of the reply exchange's bindings: `_kombu.binding.{reply exchange}`.
    binding_key: String,
    /// Our queue's entry in that set: routing key, pattern (none), queue.
    binding: String,
    /// The queue's lists: the queue and its priority steps.
    keys: [String; 4],
}

impl ReplyQueue {
    fn new(pidbox: &Pidbox, request: &Request) -> Self {
        Self {
            binding_key: format!("_kombu.binding.{}", pidbox.reply_exchange),
            binding: format!(
                "{oid}{SEP}{SEP}{queue}",
                oid = request.oid,
                queue = request.reply_queue
            ),
            keys: queue_keys(&request.reply_queue),
        }
    }
}

/// Binds the reply queue and broadcasts the request, both before `deadline`;
/// answers how many workers were listening (what `PUBLISH` says).
async fn publish(
    conn: &mut MultiplexedConnection,
    db: i64,
    pidbox: &Pidbox,
    request: &Request,
    reply: &ReplyQueue,
    deadline: Instant,
) -> Result<i64, Unsent> {
    let (_, listeners): (i64, i64) = timeout_at(
        deadline,
        redis::pipe()
            .cmd("SADD")
            .arg(&reply.binding_key)
            .arg(&reply.binding)
            .cmd("PUBLISH")
            .arg(format!("/{db}.{}", pidbox.exchange))
            .arg(envelope(pidbox, request))
            .query_async(conn),
    )
    .await
    .map_err(|_| Unsent::Late("could not send the ping in time".to_owned()))?
    .map_err(|e| Unsent::Failed(format!("could not send the ping: {e}")))?;
    Ok(listeners)
}

/// The request as kombu's Redis transport sends it: a JSON envelope, base64 body.
fn envelope(pidbox: &Pidbox, request: &Request) -> String {
    json!({
        "body": BASE64.encode(&request.body),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"clock": 1, "expires": request.expires},
        "properties": {
            "delivery_mode": 2,
            "delivery_info": {"exchange": pidbox.exchange, "routing_key": ""},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": uuid::Uuid::new_v4().to_string(),
        },
    })
    .to_string()
}

/// Pops answers from the reply lists `keys` until `listeners` answered `ticket` or
/// `deadline` passes; the workers that answered.
async fn collect(
    conn: &mut MultiplexedConnection,
    keys: &[String; 4],
    ticket: &str,
    listeners: i64,
    deadline: Instant,
) -> Result<Vec<WorkerDetail>, String> {
    let mut answered = Vec::new();
    let mut count = 0;
    while count < listeners {
        let left = deadline.saturating_duration_since(Instant::now());
        // Sent shorter than the time left, so that Redis's empty answer lands
        // before the deadline: a worker that does not answer is never taken for
        // a broker that stopped answering (with a frozen worker, Overseer's own
        // timer used to fire first in 42 of 48 pings).
        let wait = left.saturating_sub(REDIS_TIMEOUT_LAG);
        if wait < MIN_BRPOP_WAIT {
            break;
        }
        // BRPOP's own timeout ends the wait, its answer due by the deadline even
        // from a server that notices late; ours, at the deadline, fires only for a
        // server that stopped answering altogether.
        let popped: Option<(String, Vec<u8>)> = timeout_at(
            deadline,
            redis::cmd("BRPOP")
                .arg(keys)
                .arg(wait.as_secs_f64())
                .query_async(conn),
        )
        .await
        .map_err(|_| "the broker stopped answering during the ping".to_owned())?
        .map_err(|e| format!("could not read the answers: {e}"))?;
        let Some((_, raw)) = popped else { break };
        if let Some(workers) = answer(&raw, ticket) {
            count += 1;
            answered.extend(workers);
        }
    }
    Ok(answered)
}

/// The workers in one Redis answer envelope, if it answers `ticket`.
fn answer(raw: &[u8], ticket: &str) -> Option<Vec<WorkerDetail>> {
    let envelope: Value = serde_json::from_slice(raw).ok()?;
    if envelope.pointer("/headers/ticket").and_then(Value::as_str) != Some(ticket) {
        return None;
    }
    let body = envelope.get("body")?.as_str()?;
    let body = match envelope
        .pointer("/properties/body_encoding")
        .and_then(Value::as_str)
    {
        Some("base64") => BASE64.decode(body).ok()?,
        _ => body.as_bytes().to_vec(),
    };
    Some(answers(
        &body,
        envelope.get("content-type").and_then(Value::as_str),
    ))
}

/// Removes the reply binding and lists of a ping; if dropped before it ran (the
/// ping was cancelled), it runs as a task of its own.
struct Cleanup {
    conn: Option<MultiplexedConnection>,
    reply: ReplyQueue,
}

impl Cleanup {
    /// Cleans up now, for at most `bound`; past it, the rest runs as a task of its own.
    async fn run(&mut self, bound: Duration) {
        if let Some(mut conn) = self.conn.clone() {
            let removed = tokio::time::timeout(bound, Self::remove(&mut conn, &self.reply)).await;
            if removed.is_ok() {
                self.conn = None; // done: nothing left for Drop
            }
        }
    }

    async fn remove(conn: &mut MultiplexedConnection, reply: &ReplyQueue) {
        // The binding first: a worker answering now finds no binding and drops the answer.
        let result: redis::RedisResult<()> = redis::pipe()
            .cmd("SREM")
            .arg(&reply.binding_key)
            .arg(&reply.binding)
            .ignore()
            .cmd("DEL")
            .arg(&reply.keys)
            .ignore()
            .query_async(conn)
            .await;
        if let Err(e) = result {
            tracing::debug!(error = %e, "could not remove the ping's reply queue");
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let reply = std::mem::take(&mut self.reply);
        runtime.spawn(async move { Self::remove(&mut conn, &reply).await });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redis_answer_is_matched_by_its_ticket() {
        let body = BASE64.encode(r#"{"celery@a": [{"name": "default"}]}"#);
        let raw = json!({"body": body, "headers": {"ticket": "t-1", "clock": 3},
            "content-type": "application/json", "properties": {"body_encoding": "base64"}})
        .to_string();
        assert_eq!(
            answer(raw.as_bytes(), "t-1"),
            Some(vec![WorkerDetail {
                name: "celery@a".into(),
                queues: Some(vec!["default".into()]),
                state: None,
                concurrency: None,
                free_concurrency: None,
                heartbeat: None,
            }])
        );
        assert_eq!(answer(raw.as_bytes(), "t-2"), None);
        assert_eq!(answer(b"not json", "t-1"), None);
    }
}
