//! No worker online while work waits.
//!
//! Workers scaled to zero are no fault while nothing waits; with work waiting
//! (messages in a queue the check read, or task instances Airflow holds in
//! `queued` for the executor) nobody will run it, however healthy the broker
//! is: the last worker stopped cleanly (`worker-offline`, a scale-down, a
//! deploy), or none came up. Seen on two polls in a row (one poll may catch a
//! message on its way to a worker that is just starting), it is a finding:
//! `no worker online while work waits`.
//!
//! A worker takes work as the saturation rule says (a Celery worker heard
//! `online`; an Edge worker `idle`, `running` or `starting`; one whose
//! executor keeps no state, taken at its word). The rule needs workers known
//! and none taking work: a check that lists none (`detail.workers` `null` or
//! empty: no heartbeats heard, no ping; workers started `--without-heartbeat`
//! are never heard) cannot tell "none" from "none heard", and a queue whose
//! broker counts a consumer on it (RabbitMQ) has a worker, heard or not. A
//! poll that cannot see the workers keeps what the last one found, so a
//! continuing fault never reads healthy in between.
//!
//! While the check itself says `unhealthy` it has named the cause (the last
//! worker gone without a goodbye, the broker down): the rule keeps counting
//! but adds nothing, so the reason holds still.

use super::saturation::takes_work;
use super::{Found, Poll, Rule};
use crate::job::ExecutorHealth;

/// The polls in a row that must see work waiting with no worker online.
pub const POLLS: u32 = 2;

/// The finding, as it reads.
pub const FINDING: &str = "no worker online while work waits";

/// The rule, with the polls in a row that saw no worker online while work waited.
#[derive(Debug, Default)]
pub struct NoWorkerOnline {
    polls: u32,
}

impl Rule for NoWorkerOnline {
    fn judge(&mut self, poll: &mut Poll<'_>, found: &mut Found) {
        let consumed = poll.detail.queues.iter().any(|q| q.consumers > Some(0));
        if let Some(workers) = poll.detail.workers.as_deref().filter(|w| !w.is_empty()) {
            let none_online = !workers.iter().any(takes_work) && !consumed;
            self.polls = if none_online && poll.work_waits() {
                self.polls.saturating_add(1)
            } else {
                0
            };
        } else if consumed {
            self.polls = 0;
        }
        let stated = matches!(poll.check, ExecutorHealth::Unhealthy { .. });
        if self.polls >= POLLS && !stated {
            found.findings.push(FINDING.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detail::{Detail, QueueDetail, WorkerDetail};
    use crate::rules::Rules;
    use crate::{ExecutorHealth, Observation};
    use tokio::time::Instant;

    fn worker(state: &str) -> WorkerDetail {
        WorkerDetail {
            name: "celery@a".into(),
            queues: None,
            state: Some(state.into()),
            concurrency: Some(16),
            free_concurrency: Some(16),
            heartbeat: None,
        }
    }

    /// One poll's observation: the check's verdict, the workers it lists
    /// (`None`: it could not see them) and the default queue's depth.
    fn seen(check: ExecutorHealth, workers: Option<Vec<WorkerDetail>>, depth: u64) -> Observation {
        Observation::new(
            check,
            Detail {
                queues: vec![QueueDetail {
                    name: "default".into(),
                    broker: "redis://127.0.0.1:6379/0".into(),
                    depth: Some(depth),
                    consumers: None,
                }],
                workers,
                ..Detail::default()
            },
        )
    }

    #[test]
    fn work_waiting_with_no_worker_online_is_named_on_the_second_poll_and_held() {
        let healthy = ExecutorHealth::Healthy;
        let finding = ExecutorHealth::unhealthy(FINDING);
        let online = || Some(vec![worker("online")]);
        let offline = || Some(vec![worker("offline")]);
        // (what the check saw, the verdict)
        let polls = [
            // A worker online, work waiting: it is being taken.
            (seen(healthy.clone(), online(), 4), healthy.clone()),
            // It said goodbye; nothing waits: scaled to zero, no fault.
            (seen(healthy.clone(), offline(), 0), healthy.clone()),
            // Work arrives: one poll may catch it on its way.
            (seen(healthy.clone(), offline(), 3), healthy.clone()),
            (seen(healthy.clone(), offline(), 3), finding.clone()),
            // A poll that cannot see the workers keeps the finding; so does
            // one that hears none (it cannot tell none from none heard).
            (seen(healthy.clone(), None, 5), finding.clone()),
            (seen(healthy.clone(), Some(vec![]), 5), finding.clone()),
            // The check names a cause of its own: the reason stays its alone.
            (
                seen(ExecutorHealth::unhealthy("broker down"), offline(), 5),
                ExecutorHealth::unhealthy("broker down"),
            ),
            (seen(healthy.clone(), offline(), 5), finding.clone()),
            // A worker comes online: healthy at once.
            (seen(healthy.clone(), online(), 5), healthy.clone()),
        ];
        let mut rules = Rules::standard(&crate::rules::Settings::default());
        let now = Instant::now();
        for (i, (observation, expected)) in polls.into_iter().enumerate() {
            let judged = rules.judge(observation, None, None, now);
            assert_eq!(judged.health, expected, "poll {i}");
        }
    }

    #[test]
    fn workers_never_heard_or_a_consumer_the_broker_counts_are_no_finding() {
        let seen = |workers: Option<Vec<crate::detail::WorkerDetail>>, consumers: Option<u32>| {
            Observation::new(
                ExecutorHealth::Healthy,
                Detail {
                    queues: vec![QueueDetail {
                        name: "default".into(),
                        broker: "amqp://127.0.0.1:5672//".into(),
                        depth: Some(7),
                        consumers,
                    }],
                    workers,
                    ..Detail::default()
                },
            )
        };
        let mut rules = Rules::standard(&crate::rules::Settings::default());
        let now = Instant::now();
        for (workers, consumers) in [
            // Workers started --without-heartbeat: none heard, work waits.
            (Some(vec![]), None),
            (Some(vec![]), None),
            (None, None),
            // A consumer RabbitMQ counts, though no worker is heard online.
            (Some(vec![]), Some(1)),
            (Some(vec![]), Some(1)),
        ] {
            let judged = rules.judge(seen(workers, consumers), None, None, now);
            assert_eq!(judged.health, ExecutorHealth::Healthy);
        }
    }
}
