//! A queue nobody consumes: work waiting on a queue that no worker
//! taking work consumes, on two polls in a row.
//!
//! A task sent to a queue no worker listens on (`queue='nowhere'`, a typo, a
//! worker pool scaled away) waits forever while every part answers. The
//! evidence, where it is known:
//!
//! - a queue the check reads, holding messages, whose consumers are counted
//!   and are none (RabbitMQ counts them; on Redis, the workers heard online
//!   that said what they consume, `active_queues`);
//! - task instances Airflow holds in `queued` on a queue the check does not
//!   read, while every worker taking work has said what it consumes and none
//!   consumes it.
//!
//! Either, on two polls in a row (a worker may be starting), is a finding per
//! queue: `queue nowhere: work waiting, no worker consumes it`. It needs a
//! worker taking work (with none, "no worker online" is the finding), and it
//! never guesses: a worker that has not said what it consumes leaves the
//! queue unjudged. A poll that cannot see keeps the findings it had. While
//! the check itself says `unhealthy` it has named the cause, and the rule
//! adds nothing (it keeps counting). The
//! queues it names are left out of the later rules (queued too long, the
//! stalled queue), which would name the same fault by its wait.

use std::collections::{BTreeMap, BTreeSet};

use super::saturation::takes_work;
use super::{Found, Poll, Rule};

/// The polls in a row that must find a queue with work and no consumer.
pub const POLLS: u32 = 2;

/// The rule's memory: per queue, the polls in a row that found it so.
#[derive(Debug, Default)]
pub struct Unconsumed {
    polls: BTreeMap<String, u32>,
}

/// What one poll tells of the queues.
struct Sight {
    /// Holding work that no worker consumes.
    unconsumed: BTreeSet<String>,
    /// Holding work, with consumers not known this time: judged on what was
    /// known before.
    unjudged: BTreeSet<String>,
}

impl Unconsumed {
    /// The queues holding work, told apart, when this poll can tell.
    fn sight(poll: &Poll<'_>) -> Option<Sight> {
        let workers = poll.detail.workers.as_deref()?;
        let taking: Vec<_> = workers.iter().filter(|w| takes_work(w)).collect();
        if taking.is_empty() {
            return None;
        }
        let mut sight = Sight {
            unconsumed: BTreeSet::new(),
            unjudged: BTreeSet::new(),
        };
        // A worker taking work that says it consumes the queue, where the
        // broker counts none: the evidence disagrees (a worker killed a moment
        // ago, its consumer gone before its heartbeats stop); its heartbeats
        // will tell, not this rule.
        let claimed = |queue: &str| {
            taking.iter().any(|w| {
                w.queues
                    .as_ref()
                    .is_some_and(|q| q.iter().any(|n| n == queue))
            })
        };
        for queue in poll.detail.queues.iter().filter(|q| q.depth > Some(0)) {
            match queue.consumers {
                Some(0) if claimed(&queue.name) => sight.unjudged.insert(queue.name.clone()),
                Some(0) => sight.unconsumed.insert(queue.name.clone()),
                Some(_) => false,
                None => sight.unjudged.insert(queue.name.clone()),
            };
        }
        // Airflow's queued work on a queue the check does not read, judged
        // when every worker taking work said what it consumes.
        let consumed: Option<Vec<&Vec<String>>> =
            taking.iter().map(|w| w.queues.as_ref()).collect();
        let unread = poll
            .queued()
            .into_iter()
            .flat_map(|q| &q.queues)
            .filter(|q| q.count > 0)
            .filter(|q| !poll.detail.queues.iter().any(|read| read.name == q.queue));
        for queue in unread {
            match &consumed {
                Some(consumed) if !consumed.iter().any(|names| names.contains(&queue.queue)) => {
                    sight.unconsumed.insert(queue.queue.clone());
                }
                Some(_) => {}
                None => {
                    sight.unjudged.insert(queue.queue.clone());
                }
            }
        }
        Some(sight)
    }
}

impl Rule for Unconsumed {
    fn judge(&mut self, poll: &mut Poll<'_>, found: &mut Found) {
        if let Some(sight) = Self::sight(poll) {
            self.polls.retain(|queue, _| {
                sight.unconsumed.contains(queue) || sight.unjudged.contains(queue)
            });
            for queue in sight.unconsumed {
                *self.polls.entry(queue).or_default() += 1;
            }
        }
        // A check that says unhealthy named its cause (an Edge executor's
        // "every worker offline while jobs wait"): the count goes on, the
        // reason stays the check's.
        let stated = matches!(poll.check, crate::ExecutorHealth::Unhealthy { .. });
        for (queue, polls) in &self.polls {
            if *polls >= POLLS && !stated {
                found.findings.push(format!(
                    "queue {queue}: work waiting, no worker consumes it"
                ));
                poll.explained.push(queue.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::detail::{Detail, QueueDetail, QueuedOnQueue, QueuedTasks, WorkerDetail};
    use crate::rules::Rules;
    use crate::rules::Settings;
    use crate::{Executor, ExecutorHealth, Observation};
    use tokio::time::Instant;

    fn worker(queues: Option<&[&str]>) -> WorkerDetail {
        WorkerDetail {
            name: "celery@a".into(),
            queues: queues.map(|q| q.iter().map(|s| (*s).to_owned()).collect()),
            state: Some("online".into()),
            concurrency: Some(16),
            free_concurrency: Some(16),
            heartbeat: None,
        }
    }

    /// One poll: the workers, `default`'s depth and consumers, and Airflow's
    /// queued task instances on `nowhere` (a queue the check does not read),
    /// `overdue` of them queued past `max_queued_age`.
    fn seen(
        workers: Option<Vec<WorkerDetail>>,
        consumers: Option<u32>,
        nowhere: u64,
        overdue: u64,
    ) -> (Observation, Option<QueuedTasks>) {
        let observation = Observation::new(
            ExecutorHealth::Healthy,
            Detail {
                queues: vec![QueueDetail {
                    name: "default".into(),
                    broker: "redis://127.0.0.1:6379/0".into(),
                    depth: Some(2),
                    consumers,
                }],
                workers,
                ..Detail::default()
            },
        );
        let queued = QueuedTasks {
            count: nowhere,
            oldest_seconds: Some(1),
            queues: vec![QueuedOnQueue {
                queue: "nowhere".into(),
                count: nowhere,
                oldest_seconds: Some(1),
                overdue,
            }],
        };
        (observation, Some(queued))
    }

    #[test]
    fn work_on_a_queue_nobody_consumes_is_named_on_the_second_poll_and_held() {
        let nowhere =
            ExecutorHealth::unhealthy("queue nowhere: work waiting, no worker consumes it");
        let default = || Some(vec![worker(Some(&["default"]))]);
        let polls = [
            // A worker consuming default; nothing on nowhere.
            (seen(default(), Some(1), 0, 0), ExecutorHealth::Healthy),
            // A task instance queued on nowhere: one poll may catch a worker starting.
            (seen(default(), Some(1), 1, 0), ExecutorHealth::Healthy),
            (seen(default(), Some(1), 1, 0), nowhere.clone()),
            // Still nobody, and past max_queued_age: one reason, the cause.
            (seen(default(), Some(1), 1, 1), nowhere.clone()),
            // A poll that cannot see the workers keeps it.
            (seen(None, None, 1, 1), nowhere.clone()),
            // A worker that has not said its queues: not judged, kept.
            (seen(Some(vec![worker(None)]), None, 1, 1), nowhere.clone()),
            // A worker consuming nowhere comes online: healthy.
            (
                seen(
                    Some(vec![worker(Some(&["default", "nowhere"]))]),
                    Some(1),
                    1,
                    0,
                ),
                ExecutorHealth::Healthy,
            ),
        ];
        let executor = Executor::unchecked("CeleryExecutor");
        let mut rules = Rules::standard(&executor.rules());
        let now = Instant::now();
        for (i, ((observation, queued), expected)) in polls.into_iter().enumerate() {
            let judged = rules.judge_with(observation, queued, None, None, now);
            assert_eq!(judged.health, expected, "poll {i}");
        }
    }

    #[test]
    fn a_read_queue_with_no_consumer_counted_is_named_and_no_worker_at_all_is_another_rule_s() {
        let mut rules = Rules::standard(&Settings::default());
        let now = Instant::now();
        let gpu_only = || Some(vec![worker(Some(&["gpu"]))]);
        for expected in [
            ExecutorHealth::Healthy,
            ExecutorHealth::unhealthy("queue default: work waiting, no worker consumes it"),
        ] {
            let (observation, _) = seen(gpu_only(), Some(0), 0, 0);
            let judged = rules.judge_with(observation, None, None, None, now);
            assert_eq!(judged.health, expected);
        }
        // A worker online that says it consumes default, where the broker
        // counts no consumer (killed a moment ago): not this rule's to say.
        let mut rules = Rules::standard(&Settings::default());
        for _ in 0..3 {
            let (observation, _) = seen(Some(vec![worker(Some(&["default"]))]), Some(0), 0, 0);
            let judged = rules.judge_with(observation, None, None, None, now);
            assert_eq!(judged.health, ExecutorHealth::Healthy);
        }
        // No worker taking work at all: this rule says nothing.
        let mut rules = Rules::standard(&Settings::default());
        let offline = || {
            Some(vec![WorkerDetail {
                state: Some("offline".into()),
                ..worker(Some(&["default"]))
            }])
        };
        for expected in [
            ExecutorHealth::Healthy,
            ExecutorHealth::unhealthy("no worker online while work waits"),
            ExecutorHealth::unhealthy("no worker online while work waits"),
        ] {
            let (observation, _) = seen(offline(), Some(0), 0, 0);
            let judged = rules.judge_with(observation, None, None, None, now);
            assert_eq!(judged.health, expected);
        }
    }
}
