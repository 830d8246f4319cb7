//! The probe of the brokers: each broker of the URL with its transport's
//! [`BrokerProbe`] (or why it has none), all probed at once before one deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{CeleryCheck, CheckSettings};
use crate::amqp::AmqpCheck;
use crate::broker::{Answers, BrokerProbe, Reason};
use crate::detail::{BrokerRead, BrokerReport, BrokerStatus};
use crate::error::{BrokerUrlError, Result};
use crate::redis::RedisCheck;
use crate::tls::Verification;
use crate::url::{Broker, RedisAddress, Transport};

/// One broker's check.
enum BrokerCheck {
    /// Checked by its transport's probe.
    Probed(Arc<dyn BrokerProbe>),
    /// Not checked, and why (plain words).
    Unchecked(String),
}

impl BrokerCheck {
    /// The check of `broker`: its transport's probe, or why it has none.
    fn of(broker: &Broker, settings: &CheckSettings) -> Result<Self> {
        let id = broker.identity.as_str();
        Ok(match &broker.transport {
            Transport::Redis(redis)
                if redis.tls.is_some() && matches!(redis.address, RedisAddress::Unix(_)) =>
            {
                Self::Unchecked(format!(
                    "broker {id} asks for TLS over a Unix socket, which this check does not speak"
                ))
            }
            Transport::Redis(redis) => Self::Probed(Arc::new(RedisCheck::direct(redis, id))),
            Transport::Sentinel(sentinel) => {
                let master = sentinel
                    .master_name
                    .as_deref()
                    .or(settings.sentinel_master_name.as_deref())
                    .ok_or(BrokerUrlError::MissingMasterName)?;
                Self::Probed(Arc::new(RedisCheck::sentinel(sentinel, master, id)))
            }
            Transport::Amqp(amqp)
                if amqp
                    .tls
                    .as_ref()
                    .is_some_and(|t| Verification::of(t) != Verification::Full) =>
            {
                Self::Unchecked(format!(
                    "broker {id}: ssl_cert_reqs=none or ssl_check_hostname=false over AMQP is not \
                     checked (the AMQP client always verifies the certificate and its name)"
                ))
            }
            Transport::Amqp(amqp) => Self::Probed(Arc::new(AmqpCheck::new(amqp, id))),
            Transport::Unsupported { scheme } => {
                Self::Unchecked(format!("the {scheme}:// transport has no health check yet"))
            }
        })
    }
}

/// A broker of the list, with its identity.
pub(super) struct Target {
    /// Its identity, safe to show.
    pub(super) identity: String,
    check: BrokerCheck,
    /// The polls that reached it, for the connections held to it.
    pub(super) answers: Answers,
    /// Its last probe ran out its budget without an answer ([`Probed::late`]).
    late: AtomicBool,
}

impl Target {
    /// The target of `broker`, with a check of its own (fresh connections).
    pub(super) fn of(broker: &Broker, settings: &CheckSettings) -> Result<Self> {
        Ok(Self {
            identity: broker.identity.clone(),
            check: BrokerCheck::of(broker, settings)?,
            answers: Answers::new(),
            late: AtomicBool::new(false),
        })
    }

    /// Its transport's probe, when it is checked.
    pub(super) fn probed(&self) -> Option<&Arc<dyn BrokerProbe>> {
        match &self.check {
            BrokerCheck::Probed(probe) => Some(probe),
            BrokerCheck::Unchecked(_) => None,
        }
    }
}

/// What the probe of the brokers found.
pub(super) struct Probed {
    /// Each broker's answer, in failover order.
    pub(super) brokers: Vec<BrokerReport>,
    /// A broker that answered its last probe (or was not probed yet) ran out
    /// this one's budget without a word. Once is not yet the broker's fault:
    /// on a loaded host the wait may have been this host's, not the broker's
    /// (`super::CeleryCheck::probe` asks again at once). A broker that refused
    /// or closed the connection said so itself, and is never late.
    pub(super) late: bool,
}

impl CeleryCheck {
    /// Probes every broker at once, each before `deadline`; a task per broker,
    /// aborted if this future is dropped.
    pub(super) async fn probe_brokers(&self, deadline: Instant, budget: Duration) -> Probed {
        let queues = Arc::new(self.inner.settings.queues.clone());
        let mut tasks = JoinSet::new();
        for index in 0..self.inner.targets.len() {
            let this = self.clone();
            let queues = Arc::clone(&queues);
            tasks.spawn(async move {
                let target = &this.inner.targets[index];
                let result = match &target.check {
                    BrokerCheck::Probed(probe) => {
                        probe.probe(&queues, deadline, budget).await.map_err(Some)
                    }
                    BrokerCheck::Unchecked(_) => Err(None),
                };
                if result.is_ok() {
                    target.answers.answered();
                }
                // Failed at its deadline: the wait ran out, nothing was said.
                let late = matches!(result, Err(Some(_))) && Instant::now() >= deadline;
                let was = target.late.swap(late, Ordering::Relaxed);
                (index, result, late && !was)
            });
        }
        let mut results: Vec<Option<std::result::Result<BrokerRead, Option<Reason>>>> =
            (0..self.inner.targets.len()).map(|_| None).collect();
        let mut newly_late = false;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((index, result, late)) => {
                    results[index] = Some(result);
                    newly_late |= late;
                }
                Err(e) => tracing::error!(error = %e, "a broker probe task failed"),
            }
        }

        let mut brokers = Vec::with_capacity(results.len());
        for (target, result) in self.inner.targets.iter().zip(results) {
            let (status, read) = match (result, &target.check) {
                (_, BrokerCheck::Unchecked(why)) => {
                    (BrokerStatus::Unchecked(why.clone()), BrokerRead::default())
                }
                (Some(Ok(read)), _) => (BrokerStatus::Answered, read),
                (Some(Err(Some(reason))), _) => {
                    (BrokerStatus::Failed(reason), BrokerRead::default())
                }
                _ => (
                    BrokerStatus::Failed(format!("broker {}: the check failed", target.identity)),
                    BrokerRead::default(),
                ),
            };
            brokers.push(BrokerReport {
                broker: target.identity.clone(),
                status,
                queues: read.queues,
                delivered: read.delivered,
                started_at: read.started_at,
            });
        }
        Probed {
            brokers,
            late: newly_late,
        }
    }
}
