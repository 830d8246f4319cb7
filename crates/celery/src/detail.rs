//! What one check found, in more detail than a verdict can carry: each broker's
//! answer, the depth of each configured queue, the workers that answered ping.
//!
//! [`ExecutorHealth`] has no room for this, so the check keeps the latest [`Probe`]
//! where the HTTP layer can read it ([`crate::CeleryCheck::latest`]). Every string in
//! it is safe to show: brokers appear by their identity, never with credentials.

use chrono::{DateTime, Utc};
use overseer_core::ExecutorHealth;
use serde::Serialize;

/// The outcome of one check of a Celery executor.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// The verdict `get_health` returns.
    #[serde(serialize_with = "health_str")]
    pub health: ExecutorHealth,
    /// Why: the verdict's reason when `unhealthy`; for `unknown`, which transport is
    /// not checked; for `healthy`, the failover brokers that did not answer, if any.
    pub reason: Option<String>,
    /// When the check started.
    pub checked_at: DateTime<Utc>,
    /// Each broker of the URL, in failover order.
    pub brokers: Vec<BrokerReport>,
    /// The worker ping, when `worker_ping` is on.
    pub workers: Option<WorkerPing>,
}

fn health_str<S: serde::Serializer>(health: &ExecutorHealth, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(health.as_str())
}

/// What one broker answered.
#[derive(Debug, Clone, Serialize)]
pub struct BrokerReport {
    /// The broker's identity (`redis://broker:6379/0`): no credentials.
    pub broker: String,
    /// Whether it answered.
    pub status: BrokerStatus,
    /// The configured queues' depths, when it answered.
    pub queues: Vec<QueueDepth>,
}

/// Whether a broker answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "reason", rename_all = "snake_case")]
pub enum BrokerStatus {
    /// It answered within the deadline, as a master that accepts writes.
    Answered,
    /// It did not, and this is why (plain words, naming the broker).
    Failed(String),
    /// It is not checked: its transport has no check yet, or needs TLS.
    Unchecked(String),
}

/// The depth of one configured queue on one broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueDepth {
    /// The queue's name, as configured.
    pub queue: String,
    /// Messages waiting (Redis: the queue's list plus its priority lists; RabbitMQ:
    /// ready messages). `None` when the queue could not be read.
    pub messages: Option<u64>,
    /// Consumers attached (RabbitMQ only; Redis cannot tell).
    pub consumers: Option<u32>,
    /// Anything worth knowing: a RabbitMQ queue that does not exist yet (no task
    /// was sent to it and no worker consumes it; not a broker failure).
    pub note: Option<String>,
}

/// The result of Celery's remote-control `ping`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WorkerPing {
    /// Node names that answered (`celery@host-a`), sorted, each once.
    pub answered: Vec<String>,
    /// How long the ping waited for answers, in milliseconds.
    pub window_ms: u64,
    /// Why a broker could not be pinged, when one could not.
    pub errors: Vec<String>,
}
