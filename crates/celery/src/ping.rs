//! Celery's remote-control ping, as `celery inspect active_queues` sends it.
//!
//! A request is broadcast on the fanout exchange `{control_exchange}.pidbox`; every
//! worker answers on the direct exchange `reply.{control_exchange}.pidbox` with the
//! routing key of our reply queue, `{oid}.reply.{control_exchange}.pidbox`, carrying
//! the request's `ticket` in its headers and `{"celery@host": ...}` as body.
//! The wire forms (see `reference/celery-remote-control.md`) are each transport's:
//! - Redis (`redis/ping.rs`): the fanout exchange is a pub/sub channel, the reply
//!   queue a list that exists only while its binding does;
//! - AMQP (`amqp/ping.rs`): a real exclusive reply queue bound to the reply exchange.
//!
//! # Why `active_queues`, not `ping`
//! The request's method is [`METHOD`], `active_queues`, and not `ping`: a worker
//! answers both the same way (its pidbox consumer, in the worker's main process,
//! replies to either), so its answer proves it alive as a pong would, and it also
//! says which queues the worker consumes (`{"celery@host": [{"name": "default",
//! ...}, ...]}`). One request, not two, keeps one ticket and one answer per worker
//! (Redis stops early on that count), and it catches the worker that answers
//! `ping` while consuming nothing (Airflow issue 63580, after a Redis restart).
//!
//! Either way, everything the ping made is removed afterwards. The ping waits for its
//! whole window, as Celery does, to hear every worker; on Redis it stops early once
//! as many workers answered as `PUBLISH` said were listening.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use overseer_core::detail::WorkerDetail;
use serde_json::{Value, json};
use tokio::time::Instant;

/// Celery's `control_exchange` setting, by default.
pub const DEFAULT_CONTROL_EXCHANGE: &str = "celery";

/// The remote-control command the ping sends: its answer proves the worker alive
/// and names the queues it consumes (see the module's doc).
pub(crate) const METHOD: &str = "active_queues";

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

/// Why a broker's ping gave no answer to count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unsent {
    /// This host did not get the request set up and out before the window
    /// ended, on a broker that had just answered its check. A loaded host does
    /// that as often as a slow broker: it says nothing of the broker, nor of
    /// the workers, who were never asked.
    Late(String),
    /// The broker refused, closed or stopped answering what the ping asked of
    /// it: the broker's fault.
    Failed(String),
}

impl Unsent {
    /// What happened, for the detail and the reason.
    pub(crate) fn reason(&self) -> &str {
        match self {
            Self::Late(reason) | Self::Failed(reason) => reason,
        }
    }

    /// The same failure, its reason rewritten (prefixed with the broker, scrubbed).
    pub(crate) fn map(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            Self::Late(reason) => Self::Late(f(reason)),
            Self::Failed(reason) => Self::Failed(f(reason)),
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
            "method": METHOD,
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

/// The workers in an answer body (`{"celery@a": [{"name": "default", ...}]}`), each
/// with the queues it said it consumes; `None` when its answer is not such a list
/// (an error it returned, say). An answer that is not JSON (a deployment whose
/// replies are pickled) still counts as a worker, under a name that says so.
pub(crate) fn answers(body: &[u8], content_type: Option<&str>) -> Vec<WorkerDetail> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => map
            .into_iter()
            .map(|(name, queues)| WorkerDetail {
                name,
                queues: queue_names(&queues),
                state: None,
                concurrency: None,
                free_concurrency: None,
                heartbeat: None,
            })
            .collect(),
        _ => vec![WorkerDetail {
            name: format!(
                "(a worker whose answer is not JSON: {})",
                content_type.unwrap_or("no content type")
            ),
            queues: None,
            state: None,
            concurrency: None,
            free_concurrency: None,
            heartbeat: None,
        }],
    }
}

/// The `name` of each queue in one worker's `active_queues` answer.
fn queue_names(answer: &Value) -> Option<Vec<String>> {
    answer
        .as_array()?
        .iter()
        .map(|queue| queue.get("name")?.as_str().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::ping::tests::worker;

    #[test]
    fn an_answer_names_each_worker_and_its_queues() {
        let body = br#"{"celery@a": [{"name": "default", "exchange": {"name": "default",
            "type": "direct"}, "routing_key": "default"}, {"name": "gpu"}],
            "celery@b": [], "celery@c": {"error": "No such command"}}"#;
        assert_eq!(
            answers(body, Some("application/json")),
            [
                worker("celery@a", Some(&["default", "gpu"])),
                worker("celery@b", Some(&[])),
                worker("celery@c", None),
            ]
        );
        assert_eq!(
            answers(b"\x80\x04", Some("application/x-python-serialize")),
            [worker(
                "(a worker whose answer is not JSON: application/x-python-serialize)",
                None
            )]
        );
    }
}
