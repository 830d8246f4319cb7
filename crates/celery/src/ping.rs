//! Celery's remote-control `ping`, as `celery inspect ping` sends it.
//!
//! A request is broadcast on the fanout exchange `{control_exchange}.pidbox`; every
//! worker answers on the direct exchange `reply.{control_exchange}.pidbox` with the
//! routing key of our reply queue, `{oid}.reply.{control_exchange}.pidbox`, carrying
//! the request's `ticket` in its headers and `{"celery@host": {"ok": "pong"}}` as body.
//! The wire forms (see `reference/celery-remote-control.md`) are each transport's:
//! - Redis (`redis/ping.rs`): the fanout exchange is a pub/sub channel, the reply
//!   queue a list that exists only while its binding does;
//! - AMQP (`amqp/ping.rs`): a real exclusive reply queue bound to the reply exchange.
//!
//! Either way, everything the ping made is removed afterwards. The ping waits for its
//! whole window, as Celery does, to hear every worker; on Redis it stops early once
//! as many workers answered as `PUBLISH` said were listening.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::time::Instant;

/// Celery's `control_exchange` setting, by default.
pub const DEFAULT_CONTROL_EXCHANGE: &str = "celery";

/// How long `celery inspect ping` waits for answers by default (`--timeout 1.0`),
/// and so our ping's window when the poll's timeout leaves room for it.
pub const PING_WINDOW: Duration = Duration::from_secs(1);

/// How long the cleanup after a ping may take (removing the reply binding and lists,
/// or deleting the reply queue). It runs after the window, inside the margin the check
/// keeps before the supervisor's timeout (see `budget`), and is cut to fit it.
pub const CLEANUP_WAIT: Duration = Duration::from_millis(250);

/// The names one ping uses, from Celery's `control_exchange`.
#[derive(Debug, Clone)]
pub(crate) struct Pidbox {
    /// `{control_exchange}.pidbox`: the fanout exchange workers listen on.
    pub(crate) exchange: String,
    /// `reply.{control_exchange}.pidbox`: where workers answer.
    pub(crate) reply_exchange: String,
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
pub(crate) struct Request {
    /// The id of our reply queue (the routing key workers answer to).
    pub(crate) oid: String,
    /// Matches answers to this request.
    pub(crate) ticket: String,
    /// The reply queue's name.
    pub(crate) reply_queue: String,
    /// The JSON body Celery's `Mailbox._broadcast` sends.
    pub(crate) body: String,
    /// When workers should drop the request (epoch seconds).
    pub(crate) expires: f64,
}

impl Request {
    /// A fresh request, with ids of its own, that workers drop after `window_end`.
    pub(crate) fn new(pidbox: &Pidbox, window_end: Instant) -> Self {
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
pub(crate) fn node_names(body: &[u8], content_type: Option<&str>) -> Vec<String> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => map.keys().cloned().collect(),
        _ => vec![format!(
            "(a worker whose answer is not JSON: {})",
            content_type.unwrap_or("no content type")
        )],
    }
}
