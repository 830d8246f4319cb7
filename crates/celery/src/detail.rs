//! What one check found, in more detail than a verdict can carry: each broker's
//! answer, the depth and consumers of each configured queue, the workers that
//! answered the ping and the queues each consumes.
//!
//! One model, two views. A run of the check makes a [`Probe`] whole
//! ([`crate::CeleryCheck::probe`]: what the tests and the benchmark read), with
//! what only this crate knows (each broker's status, the ping's errors). What the
//! executor's actor judges and the report shows is core's [`Detail`], projected
//! from the probe ([`Probe::detail`]) and returned with the verdict
//! ([`Probe::observation`], what [`overseer_core::HealthCheck::observe`] returns);
//! it is derived, never kept beside.
//! Every string in either is safe to show: brokers appear by their identity, never
//! with credentials.

use chrono::{DateTime, Utc};
use overseer_core::detail::{BrokerDetail, Detail, EventsDetail, QueueDetail, WorkerDetail};
use overseer_core::{ExecutorHealth, Observation, Reason};
use serde::Serialize;

/// The outcome of one check of a Celery executor.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// The verdict `get_health` returns.
    #[serde(serialize_with = "health_str")]
    pub health: ExecutorHealth,
    /// Why: the verdict's reason when `unhealthy`; for `unknown`, which transport is
    /// not checked; for `healthy`, the failover brokers that did not answer, if any.
    pub reason: Option<Reason>,
    /// The verdict waits: the brokers answer, but the workers' heartbeats
    /// have not been listened for long enough yet to say whether one is gone
    /// ([`crate::events`]); the verdict held stays meanwhile.
    pub pending: bool,
    /// When the check started.
    pub checked_at: DateTime<Utc>,
    /// Each broker of the URL, in failover order.
    pub brokers: Vec<BrokerReport>,
    /// The worker ping, when `worker_ping` is on.
    pub workers: Option<WorkerPing>,
    /// Every worker as its own events tell it (`state`: `online`, `gone`,
    /// `offline`; its latest heartbeat), with `worker_events`; `None` until a
    /// subscription has listened long enough to say.
    pub heartbeats: Option<Vec<WorkerDetail>>,
    /// Each broker's subscription to the workers' heartbeats, with
    /// `worker_events`: whether it hears them now, and what it has read.
    pub subscriptions: Vec<EventsDetail>,
}

impl Probe {
    /// What the executor's actor gets of this probe: its verdict and its
    /// [`Self::detail`], and for a healthy verdict its reason as a note (the
    /// failover brokers that did not answer). Both were cleaned where they
    /// were made ([`Reason`]).
    pub fn observation(&self) -> Observation {
        let detail = self.detail();
        let note = (self.health == ExecutorHealth::Healthy)
            .then(|| self.reason.clone())
            .flatten();
        Observation {
            health: self.health.clone(),
            detail: (!detail.is_empty()).then_some(detail),
            note,
            pending: self.pending,
            host_busy: false,
        }
    }

    /// The evidence for core's rules on work flowing ([`overseer_core::rules`]) and
    /// the report: each configured queue on each broker that answered, and, when the
    /// ping heard from at least one broker, the workers that answered it. Airflow's
    /// queued task instances are not the check's to give (`queued_tasks` is `None`).
    pub fn detail(&self) -> Detail {
        let answered = || {
            self.brokers
                .iter()
                .filter(|b| b.status == BrokerStatus::Answered)
        };
        let queues = answered()
            .flat_map(|b| {
                b.queues.iter().map(|q| QueueDetail {
                    name: q.queue.clone(),
                    broker: b.broker.clone(),
                    depth: q.messages,
                    consumers: q.consumers,
                })
            })
            .collect();
        // Every broker that answered was pinged once, and each ping that failed left
        // one error: with as many errors as brokers, no worker could have been heard,
        // and an empty list would say "none answered" when the truth is "not known".
        let pinged = answered().count();
        let ping = self
            .workers
            .as_ref()
            .filter(|ping| ping.errors.len() < pinged)
            .map(|ping| ping.answered.as_slice());
        let workers = match (&self.heartbeats, ping) {
            (Some(heard), ping) => Some(merged(heard, ping.unwrap_or_default())),
            (None, ping) => ping.map(<[WorkerDetail]>::to_vec),
        };
        let brokers = answered()
            .filter(|b| b.delivered.is_some() || b.started_at.is_some())
            .map(|b| BrokerDetail {
                broker: b.broker.clone(),
                delivered: b.delivered,
                started_at: b.started_at,
            })
            .collect();
        Detail {
            queues,
            workers,
            queued_tasks: None,
            brokers,
            worker_events: self.subscriptions.clone(),
            canary: None,
            capacity: None,
        }
    }
}

/// The workers heard by their events, each with the queues it answered the
/// ping with, and then those that answered the ping without ever being heard
/// (a worker started `--without-heartbeat`), by name.
fn merged(heard: &[WorkerDetail], pinged: &[WorkerDetail]) -> Vec<WorkerDetail> {
    let mut workers: Vec<WorkerDetail> = heard
        .iter()
        .map(|worker| WorkerDetail {
            // What the ping heard, else what the inquiry last heard.
            queues: pinged
                .iter()
                .find(|p| p.name == worker.name)
                .and_then(|p| p.queues.clone())
                .or_else(|| worker.queues.clone()),
            ..worker.clone()
        })
        .collect();
    workers.extend(
        pinged
            .iter()
            .filter(|p| !heard.iter().any(|h| h.name == p.name))
            .cloned(),
    );
    workers.sort_by(|a, b| a.name.cmp(&b.name));
    workers
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
    /// Messages it delivered unacknowledged, when it answered and can say.
    pub delivered: Option<u64>,
    /// When it started, when it answered and can say.
    pub started_at: Option<DateTime<Utc>>,
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

/// What one probe read of a broker that answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerRead {
    /// The configured queues' depths.
    pub queues: Vec<QueueDepth>,
    /// Messages delivered to workers and not yet acknowledged (Redis: kombu's
    /// `unacked` hash); `None` where the transport cannot say (AMQP).
    pub delivered: Option<u64>,
    /// When the broker started, by its own uptime (Redis: `INFO server`, held
    /// still while its `run_id` is the same); `None` when not known.
    pub started_at: Option<DateTime<Utc>>,
}

/// The depth of one configured queue on one broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueDepth {
    /// The queue's name, as configured.
    pub queue: String,
    /// Messages waiting (Redis: the queue's list plus its priority lists; RabbitMQ:
    /// ready messages). `None` when the queue could not be read.
    pub messages: Option<u64>,
    /// Consumers attached. RabbitMQ counts them (the passive declare); on Redis,
    /// which cannot, the workers that answered the ping naming this queue among
    /// those they consume. `None` when neither can tell: Redis without
    /// `worker_ping`, a ping that failed, a worker that did not say its queues.
    pub consumers: Option<u32>,
    /// Anything worth knowing: a RabbitMQ queue that does not exist yet (no task
    /// was sent to it and no worker consumes it; not a broker failure).
    pub note: Option<String>,
}

/// The result of the workers' ping (Celery's remote-control `active_queues`, see
/// `ping`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WorkerPing {
    /// The workers that answered (`celery@host-a`), sorted by name, each once, with
    /// the queues each said it consumes.
    pub answered: Vec<WorkerDetail>,
    /// How long the ping waited for answers, in milliseconds.
    pub window_ms: u64,
    /// Why a broker could not be pinged, when one could not.
    pub errors: Vec<String>,
    /// Whether the request went out on a broker: only then does a worker's
    /// silence mean anything.
    #[serde(skip)]
    pub sent: bool,
    /// The `errors` that were the brokers' own (refused, closed, stopped
    /// answering), not a ping this host did not get out in time.
    #[serde(skip)]
    pub failed: Vec<String>,
}

impl WorkerPing {
    /// Whether it says anything of the workers: it went out, or a broker
    /// failed it. A ping that was only late was never heard by any worker.
    pub fn conclusive(&self) -> bool {
        self.sent || !self.failed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(broker: &str, status: BrokerStatus, queues: Vec<QueueDepth>) -> BrokerReport {
        BrokerReport {
            broker: broker.into(),
            status,
            queues,
            delivered: None,
            started_at: None,
        }
    }

    fn probe(brokers: Vec<BrokerReport>, workers: Option<WorkerPing>) -> Probe {
        Probe {
            health: ExecutorHealth::Healthy,
            reason: None,
            pending: false,
            checked_at: Utc::now(),
            brokers,
            workers,
            heartbeats: None,
            subscriptions: Vec::new(),
        }
    }

    #[test]
    fn the_detail_shows_the_queues_of_brokers_that_answered_and_the_workers_heard() {
        let depth = QueueDepth {
            queue: "default".into(),
            messages: Some(4),
            consumers: Some(0),
            note: None,
        };
        let worker = WorkerDetail {
            name: "celery@a".into(),
            queues: Some(vec!["gpu".into()]),
            state: None,
            concurrency: None,
            free_concurrency: None,
            heartbeat: None,
        };
        let brokers = vec![
            report("redis://a:6379/0", BrokerStatus::Answered, vec![depth]),
            report(
                "redis://b:6379/0",
                BrokerStatus::Failed("down".into()),
                vec![],
            ),
        ];
        let heard = WorkerPing {
            answered: vec![worker.clone()],
            ..WorkerPing::default()
        };
        let failed = WorkerPing {
            errors: vec!["broker redis://a:6379/0: could not send the ping".into()],
            ..WorkerPing::default()
        };

        let detail = probe(brokers.clone(), Some(heard)).detail();
        assert_eq!(
            detail.queues,
            [QueueDetail {
                name: "default".into(),
                broker: "redis://a:6379/0".into(),
                depth: Some(4),
                consumers: Some(0),
            }]
        );
        assert_eq!(detail.workers, Some(vec![worker]));
        assert_eq!(detail.queued_tasks, None);
        // A ping that failed on every broker pinged is "not known", not "none".
        assert_eq!(probe(brokers.clone(), Some(failed)).detail().workers, None);
        assert_eq!(probe(brokers, None).detail().workers, None);
    }
}
