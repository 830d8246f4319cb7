//! The verdict's assembly: what one run gathered (the brokers' answers, the
//! ping, the result backend) judged with the workers' heartbeats into a [`Probe`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use overseer_core::detail::{EventsDetail, WorkerDetail};
use overseer_core::{ExecutorHealth, Reason};
use tokio::time::Instant;

use super::CeleryCheck;
use crate::detail::{BrokerReport, BrokerStatus, Probe, WorkerPing};
use crate::events::WorkerEvents;
use crate::verdict::{Workers, verdict};

/// What one run gathered, before it is judged.
pub(super) struct Gathered {
    /// When the run started.
    pub(super) checked_at: DateTime<Utc>,
    /// Each broker's answer, in failover order.
    pub(super) brokers: Vec<BrokerReport>,
    /// The worker ping, with `worker_ping`.
    pub(super) workers: Option<WorkerPing>,
    /// The result backend's fault, when it has one.
    pub(super) backend: Option<String>,
    /// How long the ping listened for answers.
    pub(super) window: Duration,
}

impl CeleryCheck {
    /// Judges what one run gathered, with the ping held from earlier runs and
    /// the workers as their heartbeats tell them.
    pub(super) fn assemble(&self, gathered: Gathered) -> Probe {
        let Gathered {
            checked_at,
            brokers,
            workers,
            backend,
            window,
        } = gathered;
        let settings = &self.inner.settings;
        let judged_ping = workers.as_ref().map(|fresh| {
            self.inner
                .last_ping
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .judged(fresh, Instant::now())
        });
        let events = self.inner.events.as_deref();
        let heard = events.and_then(WorkerEvents::workers);
        let not_up = events.and_then(WorkerEvents::unheard);
        let warming = not_up.is_none() && heard.is_none() && events.is_some();
        // Deaf for a moment that ends by itself (warming up, reconnecting
        // after the broker came back), or for good (refused).
        let passing = events.is_some_and(|events| !events.refused());
        let unheard = not_up.or_else(|| {
            warming.then(|| {
                "the workers' heartbeats have not been listened for long enough yet".to_owned()
            })
        });
        let (health, reason) = verdict(
            &brokers,
            Workers {
                ping: judged_ping.as_ref(),
                heard: heard.as_deref(),
                unheard: unheard.as_deref(),
                passing,
            },
            window,
            settings.min_workers,
        );
        // A result backend that does not answer is a fault of its own, whatever
        // the brokers and workers say.
        let (health, reason) = match (backend, health) {
            (None, health) => (health, reason),
            (Some(finding), ExecutorHealth::Unhealthy { reason }) => {
                let both = reason.join("; ", &finding);
                (ExecutorHealth::unhealthy(both.clone()), Some(both))
            }
            (Some(finding), _) => {
                let finding = Reason::from(finding);
                (ExecutorHealth::unhealthy(finding.clone()), Some(finding))
            }
        };
        // Until the heartbeats can say whether a worker is gone, a verdict that
        // a broker's answer would make healthy (or unknown for the workers'
        // count alone) waits (bounded: `SETTLE_WITHIN`). One no broker was
        // checked for, or an unhealthy one, has nothing to wait for.
        let answered = brokers.iter().any(|b| b.status == BrokerStatus::Answered);
        let pending = answered
            && !matches!(health, ExecutorHealth::Unhealthy { .. })
            && heard.is_none()
            && events.is_some_and(WorkerEvents::pending);
        let subscriptions = events
            .map(WorkerEvents::subscriptions)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|s| {
                Some(EventsDetail {
                    broker: self.inner.targets.get(s.index)?.identity.clone(),
                    state: s.state.to_owned(),
                    received: s.received,
                    subscribed: s.subscribed,
                    overflows: s.overflows,
                    backlog: s.backlog,
                })
            })
            .collect();
        Probe {
            health,
            reason,
            pending,
            checked_at,
            brokers,
            workers,
            subscriptions,
            heartbeats: heard.map(|heard| {
                let inquiry = self
                    .inner
                    .inquiry
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                heard
                    .into_iter()
                    .map(|worker| {
                        let concurrency = settings.worker_concurrency;
                        let free =
                            concurrency
                                .zip(worker.heartbeat.active)
                                .map(|(slots, active)| {
                                    slots.saturating_sub(u32::try_from(active).unwrap_or(u32::MAX))
                                });
                        WorkerDetail {
                            queues: inquiry.queues_of(&worker.name),
                            name: worker.name,
                            state: Some(worker.state.as_str().to_owned()),
                            concurrency,
                            free_concurrency: free,
                            heartbeat: Some(worker.heartbeat),
                        }
                    })
                    .collect()
            }),
        }
    }
}
