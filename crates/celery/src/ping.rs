//! Celery's remote-control `ping`, as `celery inspect ping` sends it.
//!
//! A request is broadcast on the fanout exchange `{control_exchange}.pidbox`; every
//! worker answers on the direct exchange `reply.{control_exchange}.pidbox` with the
//! routing key of our reply queue, `{oid}.reply.{control_exchange}.pidbox`, carrying
//! the request's `ticket` in its headers and `{"celery@host": {"ok": "pong"}}` as body.
//! The wire forms (see `reference/celery-remote-control.md`):
//! - Redis: the fanout exchange is the pub/sub channel `/{db}.{exchange}`; the
//!   envelope is JSON with a base64 body; the reply queue is a list (plus its three
//!   priority lists) that exists only while its binding is in
//!   `_kombu.binding.{reply exchange}`. Everything made is removed afterwards, even
//!   when the ping is cancelled (the cleanup then runs as a task of its own).
//! - AMQP: a real exclusive reply queue bound to the reply exchange, deleted afterwards
//!   (and by RabbitMQ itself when our connection closes, or after `x-expires`).
//!
//! The ping waits for its whole window, as Celery does, to hear every worker; on Redis
//! it stops early once as many workers answered as `PUBLISH` said were listening.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use serde_json::{Value, json};
use tokio::time::{Instant, timeout_at};
use tokio_stream::StreamExt as _;

/// Celery's `control_exchange` setting, by default.
pub const DEFAULT_CONTROL_EXCHANGE: &str = "celery";

/// How long `celery inspect ping` waits for answers by default (`--timeout 1.0`),
/// and so our ping's window when the poll's timeout leaves room for it.
pub const PING_WINDOW: Duration = Duration::from_secs(1);

/// kombu's Redis separator between a queue and its priority, and within bindings.
pub(crate) const SEP: &str = "\x06\x16";

/// kombu's Redis priority steps: a queue `q` is the lists `q`, `q\x06\x163`,
/// `q\x06\x166`, `q\x06\x169`.
pub(crate) const PRIORITY_SUFFIXES: [&str; 3] = ["3", "6", "9"];

/// How long the cleanup after a ping may take (removing the reply binding and lists,
/// or deleting the reply queue). It runs after the window, inside the margin the check
/// keeps before the supervisor's timeout (see [`crate::check`]), and is cut to fit it.
pub const CLEANUP_WAIT: Duration = Duration::from_millis(250);

/// The shortest `BRPOP` wait worth sending: `0` would mean "forever" to Redis.
const MIN_BRPOP_WAIT: Duration = Duration::from_millis(10);

/// The Redis lists that make up queue `name` (kombu's `_q_for_pri` for every step).
pub(crate) fn redis_queue_keys(name: &str) -> [String; 4] {
    [
        name.to_owned(),
        format!("{name}{SEP}{}", PRIORITY_SUFFIXES[0]),
        format!("{name}{SEP}{}", PRIORITY_SUFFIXES[1]),
        format!("{name}{SEP}{}", PRIORITY_SUFFIXES[2]),
    ]
}

/// The names one ping uses, from Celery's `control_exchange`.
#[derive(Debug, Clone)]
pub(crate) struct Pidbox {
    /// `{control_exchange}.pidbox`: the fanout exchange workers listen on.
    exchange: String,
    /// `reply.{control_exchange}.pidbox`: where workers answer.
    reply_exchange: String,
}

impl Pidbox {
    pub(crate) fn new(control_exchange: &str) -> Self {
        Self {
            exchange: format!("{control_exchange}.pidbox"),
            reply_exchange: format!("reply.{control_exchange}.pidbox"),
        }
    }
}

/// One ping request: its ids and body.
struct Request {
    /// The id of our reply queue (the routing key workers answer to).
    oid: String,
    /// Matches answers to this request.
    ticket: String,
    /// The reply queue's name.
    reply_queue: String,
    /// The JSON body Celery's `Mailbox._broadcast` sends.
    body: String,
    /// When workers should drop the request (epoch seconds).
    expires: f64,
}

impl Request {
    fn new(pidbox: &Pidbox, window_end: Instant) -> Self {
        let oid = uuid::Uuid::new_v4().to_string();
        let ticket = uuid::Uuid::new_v4().to_string();
        let body = json!({
            "method": "ping",
            "arguments": {},
            "destination": null,
            "pattern": null,
            "matcher": null,
            "ticket": ticket,
            "reply_to": {"exchange": pidbox.reply_exchange, "routing_key": oid},
        })
        .to_string();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let window = window_end.saturating_duration_since(Instant::now());
        Self {
            reply_queue: format!("{oid}.{}", pidbox.reply_exchange),
            oid,
            ticket,
            body,
            expires: (now + window).as_secs_f64(),
        }
    }
}

/// The node names in an answer body (`{"celery@a": {"ok": "pong"}}`).
fn node_names(body: &[u8], content_type: Option<&str>) -> Vec<String> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => map.keys().cloned().collect(),
        _ => vec![format!(
            "(a worker whose answer is not JSON: {})",
            content_type.unwrap_or("no content type")
        )],
    }
}

/// Pings the workers of a Redis broker on `conn` (database `db`) until `window_end`.
///
/// Every round trip is bounded by `window_end`, and the cleanup after it by `cleanup`.
pub(crate) async fn over_redis(
    conn: &mut redis::aio::MultiplexedConnection,
    db: i64,
    pidbox: &Pidbox,
    window_end: Instant,
    cleanup: Duration,
) -> Result<Vec<String>, String> {
    let request = Request::new(pidbox, window_end);
    let binding_key = format!("_kombu.binding.{}", pidbox.reply_exchange);
    let binding = format!(
        "{oid}{SEP}{SEP}{queue}",
        oid = request.oid,
        queue = request.reply_queue
    );
    let reply_keys = redis_queue_keys(&request.reply_queue);
    let mut guard = RedisCleanup {
        conn: Some(conn.clone()),
        binding_key: binding_key.clone(),
        binding: binding.clone(),
        keys: reply_keys.clone(),
    };
    let result = async {
        let envelope = json!({
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
        .to_string();
        let deadline = window_end;
        let (_, listeners): (i64, i64) = timeout_at(
            deadline,
            redis::pipe()
                .cmd("SADD")
                .arg(&binding_key)
                .arg(&binding)
                .cmd("PUBLISH")
                .arg(format!("/{db}.{}", pidbox.exchange))
                .arg(envelope)
                .query_async(conn),
        )
        .await
        .map_err(|_| "could not send the ping in time".to_owned())?
        .map_err(|e| format!("could not send the ping: {e}"))?;
        let mut answered = BTreeSet::new();
        let mut answers = 0;
        while answers < listeners {
            let left = deadline.saturating_duration_since(Instant::now());
            if left < MIN_BRPOP_WAIT {
                break;
            }
            // BRPOP's own timeout ends the wait; ours, a little later, covers a server
            // that stops answering altogether.
            let popped: Option<(String, Vec<u8>)> = timeout_at(
                deadline + MIN_BRPOP_WAIT,
                redis::cmd("BRPOP")
                    .arg(&reply_keys)
                    .arg(left.as_secs_f64())
                    .query_async(conn),
            )
            .await
            .map_err(|_| "the broker stopped answering during the ping".to_owned())?
            .map_err(|e| format!("could not read the answers: {e}"))?;
            let Some((_, raw)) = popped else { break };
            if let Some(names) = redis_answer(&raw, &request.ticket) {
                answers += 1;
                answered.extend(names);
            }
        }
        Ok(answered.into_iter().collect())
    }
    .await;
    guard.run(cleanup).await;
    result
}

/// The node names in one Redis answer envelope, if it answers `ticket`.
fn redis_answer(raw: &[u8], ticket: &str) -> Option<Vec<String>> {
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
    Some(node_names(
        &body,
        envelope.get("content-type").and_then(Value::as_str),
    ))
}

/// Removes the reply binding and lists of a Redis ping; if dropped before it ran
/// (the ping was cancelled), it runs as a task of its own.
struct RedisCleanup {
    conn: Option<redis::aio::MultiplexedConnection>,
    binding_key: String,
    binding: String,
    keys: [String; 4],
}

impl RedisCleanup {
    /// Cleans up now, for at most `bound`; past it, the rest runs as a task of its own.
    async fn run(&mut self, bound: Duration) {
        if let Some(mut conn) = self.conn.clone() {
            let removed = tokio::time::timeout(
                bound,
                Self::remove(&mut conn, &self.binding_key, &self.binding, &self.keys),
            )
            .await;
            if removed.is_ok() {
                self.conn = None; // done: nothing left for Drop
            }
        }
    }

    async fn remove(
        conn: &mut redis::aio::MultiplexedConnection,
        binding_key: &str,
        binding: &str,
        keys: &[String; 4],
    ) {
        // The binding first: a worker answering now finds no binding and drops the answer.
        let result: redis::RedisResult<()> = redis::pipe()
            .cmd("SREM")
            .arg(binding_key)
            .arg(binding)
            .ignore()
            .cmd("DEL")
            .arg(keys)
            .ignore()
            .query_async(conn)
            .await;
        if let Err(e) = result {
            tracing::debug!(error = %e, "could not remove the ping's reply queue");
        }
    }
}

impl Drop for RedisCleanup {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (binding_key, binding, keys) = (
            std::mem::take(&mut self.binding_key),
            std::mem::take(&mut self.binding),
            std::mem::take(&mut self.keys),
        );
        runtime.spawn(async move { Self::remove(&mut conn, &binding_key, &binding, &keys).await });
    }
}

/// Pings the workers of a RabbitMQ broker on `conn` until `window_end`.
///
/// Every round trip is bounded by `window_end`, and the cleanup after it by `cleanup`.
/// Were the cleanup cut short, RabbitMQ still removes the reply queue: it is exclusive
/// to our connection and expires (`x-expires`) 10 s after its last use.
pub(crate) async fn over_amqp(
    conn: &lapin::Connection,
    pidbox: &Pidbox,
    window_end: Instant,
    cleanup: Duration,
) -> Result<Vec<String>, String> {
    let request = Request::new(pidbox, window_end);
    let deadline = window_end;
    let channel = timeout_at(deadline, conn.create_channel())
        .await
        .map_err(|_| "could not open a channel in time".to_owned())?
        .map_err(|e| format!("could not open a channel: {e}"))?;
    let mut answered = BTreeSet::new();
    let mut published = false;
    let exchange = timeout_at(deadline, async {
        // Exactly Celery's flags: anything else is refused (406) by an existing exchange.
        let flags = ExchangeDeclareOptions {
            durable: false,
            auto_delete: false,
            ..ExchangeDeclareOptions::default()
        };
        channel
            .exchange_declare(
                pidbox.reply_exchange.as_str().into(),
                ExchangeKind::Direct,
                flags,
                FieldTable::default(),
            )
            .await
            .map_err(|e| format!("could not declare {}: {e}", pidbox.reply_exchange))?;
        channel
            .exchange_declare(
                pidbox.exchange.as_str().into(),
                ExchangeKind::Fanout,
                flags,
                FieldTable::default(),
            )
            .await
            .map_err(|e| format!("could not declare {}: {e}", pidbox.exchange))?;
        let mut arguments = FieldTable::default();
        arguments.insert("x-message-ttl".into(), AMQPValue::LongInt(300_000));
        arguments.insert("x-expires".into(), AMQPValue::LongInt(10_000));
        channel
            .queue_declare(
                request.reply_queue.as_str().into(),
                QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..QueueDeclareOptions::default()
                },
                arguments,
            )
            .await
            .map_err(|e| format!("could not declare the reply queue: {e}"))?;
        channel
            .queue_bind(
                request.reply_queue.as_str().into(),
                pidbox.reply_exchange.as_str().into(),
                request.oid.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| format!("could not bind the reply queue: {e}"))?;
        let mut answers = channel
            .basic_consume(
                request.reply_queue.as_str().into(),
                "".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| format!("could not read the reply queue: {e}"))?;
        let mut headers = FieldTable::default();
        headers.insert("clock".into(), AMQPValue::LongLongInt(1));
        headers.insert("expires".into(), AMQPValue::Double(request.expires));
        channel
            .basic_publish(
                pidbox.exchange.as_str().into(),
                "".into(),
                BasicPublishOptions::default(),
                request.body.as_bytes(),
                BasicProperties::default()
                    .with_content_type("application/json".into())
                    .with_content_encoding("utf-8".into())
                    .with_headers(headers)
                    .with_delivery_mode(1)
                    .with_priority(0),
            )
            .await
            .map_err(|e| format!("could not send the ping: {e}"))?;
        published = true;
        // Until `timeout_at` above ends the whole block at `window_end`: answers are
        // collected into `answered` as they come, so none is lost when it does.
        while let Some(Ok(delivery)) = answers.next().await {
            let ticket = delivery
                .properties
                .headers()
                .as_ref()
                .and_then(|h| h.inner().get("ticket").cloned());
            let matches = match ticket {
                Some(AMQPValue::LongString(t)) => t.as_bytes() == request.ticket.as_bytes(),
                Some(AMQPValue::ShortString(t)) => t.as_str() == request.ticket,
                _ => false,
            };
            if matches {
                let content_type = delivery
                    .properties
                    .content_type()
                    .as_ref()
                    .map(|c| c.as_str().to_owned());
                answered.extend(node_names(&delivery.data, content_type.as_deref()));
            }
        }
        Ok::<(), String>(())
    })
    .await;
    let result = match exchange {
        // The window ended (or the consumer did): what was heard is the answer.
        Ok(Ok(())) => Ok(answered.into_iter().collect()),
        Err(_) if published => Ok(answered.into_iter().collect()),
        Err(_) => Err("the broker did not set the ping up in time".to_owned()),
        Ok(Err(e)) => Err(e),
    };
    // Deleting the queue also cancels its consumer; closing the channel frees it.
    let _ = tokio::time::timeout(cleanup, async {
        let _ = channel
            .queue_delete(
                request.reply_queue.as_str().into(),
                QueueDeleteOptions::default(),
            )
            .await;
        let _ = channel.close(200, "OK".into()).await;
    })
    .await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_keys_use_kombus_separator() {
        assert_eq!(
            redis_queue_keys("default"),
            [
                "default".to_owned(),
                "default\x06\x163".to_owned(),
                "default\x06\x166".to_owned(),
                "default\x06\x169".to_owned()
            ]
        );
    }

    #[test]
    fn a_redis_answer_is_matched_by_its_ticket() {
        let body = BASE64.encode(r#"{"celery@a": {"ok": "pong"}}"#);
        let raw = json!({"body": body, "headers": {"ticket": "t-1", "clock": 3},
            "content-type": "application/json", "properties": {"body_encoding": "base64"}})
        .to_string();
        assert_eq!(
            redis_answer(raw.as_bytes(), "t-1"),
            Some(vec!["celery@a".to_owned()])
        );
        assert_eq!(redis_answer(raw.as_bytes(), "t-2"), None);
        assert_eq!(redis_answer(b"not json", "t-1"), None);
    }
}
