//! Whether work flows: the rules that turn a check's evidence into a verdict,
//! all of them here, for every executor kind.
//!
//! A check says whether the executor answers (a broker that accepts a
//! connection, workers that answer ping). The executor's actor then asks this
//! module whether work moves, from three kinds of evidence, each judged over
//! the executor's `max_queued_age` (default [`DEFAULT_MAX_QUEUED_AGE`], `0s`
//! turns every rule off):
//!
//! | evidence | unhealthy when | reason |
//! |---|---|---|
//! | Airflow's `task_instance` rows in `queued` ([`QueuedTasks`]) | some were queued longer than the limit | `task instances queued longer than 5m on queue default` |
//! | a queue with messages and no consumer | it stayed so for the limit | `queue gpu: messages waiting and no worker consumed it in 5m` |
//! | a queue with messages whose depth never went down | for the limit, consumers or not known | `queue default: messages waiting, none taken in 5m` |
//!
//! The canary ([`crate::canary`]), when the plugin's DAG is installed, adds its
//! findings (`canary on queue default failed`) to these, and a canary that
//! cannot run (paused, gone, not scheduled) makes an executor that would read
//! healthy `unknown`; so does the capacity ([`crate::capacity`]): every slot
//! taken while tasks wait in `scheduled`, for `max_at_capacity`; and the
//! workers' saturation ([`crate::saturation`]): every worker's slots taken
//! while work waits, for `max_at_capacity`. While every worker is full, a
//! queue whose depth does not go down waits for a slot: the stall rule leaves
//! it to the saturation's, which names the cause.
//!
//! A reason holds still while its fault continues: it names the queue and the
//! limit, never a count or an age that ticks from poll to poll (how many wait,
//! the oldest's age, the consumers), which are in the detail (`queues`,
//! `queued_tasks`). History, alerts and Airflow's copy of the entry then change
//! only when the fault does.
//!
//! Evidence survives a poll that could not see (a timeout, a broker that did
//! not answer, a depth or a consumer count that could not be read): what was
//! known stays as it was, the clocks keep running, and every queue is judged on
//! the evidence kept, so a continuing fault never reads healthy in between.
//! Unknown is neither zero nor a fresh start.
//!
//! An empty queue is never a finding (workers scaled to zero by an autoscaler
//! are fine while nothing waits). Findings combine with the check's verdict:
//! - the check says `unhealthy`: it stays so, the findings appended to its reason;
//! - the check says `healthy`: any finding makes it `unhealthy`;
//! - the check says `unknown` (no check for this executor kind, a transport not
//!   checked): with Airflow's queued task instances known, the verdict is theirs
//!   (`healthy` when nothing is overdue), so a LocalExecutor or a
//!   KubernetesExecutor gets a real verdict; without, `unknown` stays.
//!
//! The verdict that results is what the supervisor's damping
//! (`failures_before_unhealthy`, `successes_before_healthy`) counts, as any
//! other observation.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::canary::CanaryJudged;
use crate::detail::{CapacityDetail, Observation, QueueDetail, QueuedTasks};
use crate::duration;
use crate::job::ExecutorHealth;

/// How long work may wait before the executor is unhealthy, by default:
/// shorter than Airflow's `[scheduler] task_queued_timeout` (10 min, after which
/// Airflow fails the task) so that the operator hears first.
pub const DEFAULT_MAX_QUEUED_AGE: Duration = Duration::from_secs(300);

/// The evidence judged beside the check's and the queued task instances'.
#[derive(Debug, Default)]
pub struct Beside {
    /// What the canary says ([`crate::canary`]); `None`: not installed, or not known.
    pub canary: Option<CanaryJudged>,
    /// The executor's slots, and the finding when they stayed full
    /// ([`crate::capacity`]); `None`: not known.
    pub capacity: Option<(CapacityDetail, Option<String>)>,
    /// Every worker's slots taken while work waits now ([`crate::saturation`]),
    /// and the finding once that lasted `max_at_capacity`.
    pub saturation: Saturated,
}

/// What the workers' slots say ([`crate::saturation`]).
#[derive(Debug, Default)]
pub struct Saturated {
    /// Every worker taking work has no slot free while work waits, now: a
    /// queue whose messages are not taken is then waiting for a slot, not
    /// stalled, and the stall rule leaves it to this one.
    pub now: bool,
    /// The finding, once that lasted `max_at_capacity`.
    pub finding: Option<String>,
}

/// What one executor's actor remembers of its queues across polls.
#[derive(Debug, Default)]
pub struct FlowWatch {
    queues: HashMap<(String, String), QueueHistory>,
}

/// One queue's history: since when it made progress, since when nobody consumes it.
#[derive(Debug, Clone, Copy)]
struct QueueHistory {
    /// The depth last read.
    depth: u64,
    /// The last poll that found it empty or shallower than the one before
    /// (or first saw it).
    progress_at: Instant,
    /// Since when it has held messages with no consumer.
    unconsumed_since: Option<Instant>,
}

impl FlowWatch {
    /// Judges a check's observation at `now`, with the task instances Airflow
    /// holds queued for this executor (`None`: not known), over `max_age`
    /// (`ZERO`: the rules are off; the evidence is still shown).
    pub fn judge(
        &mut self,
        observation: Observation,
        queued: Option<QueuedTasks>,
        max_age: Duration,
        now: Instant,
    ) -> Observation {
        self.judge_all(observation, queued, Beside::default(), max_age, now)
    }

    /// [`Self::judge`], with the evidence `beside` it: the canary's findings
    /// and the capacity's make the executor unhealthy as the other rules' do,
    /// and a canary that cannot run makes an executor that would read healthy
    /// `unknown`.
    pub fn judge_all(
        &mut self,
        observation: Observation,
        queued: Option<QueuedTasks>,
        beside: Beside,
        max_age: Duration,
        now: Instant,
    ) -> Observation {
        let Beside {
            canary,
            capacity,
            saturation,
        } = beside;
        let Observation {
            health,
            detail,
            note,
            pending,
        } = observation;
        let mut detail = detail.unwrap_or_default();
        let mut findings = self.queue_findings(&detail.queues, max_age, saturation.now, now);
        if let Some(queued) = &queued {
            findings.splice(0..0, queued_findings(queued, max_age));
        }
        let mut blind = None;
        if let Some((capacity, finding)) = capacity {
            findings.extend(finding);
            detail.capacity = Some(capacity);
        }
        findings.extend(saturation.finding);
        if let Some(canary) = canary {
            findings.extend(canary.findings);
            blind = canary.blind;
            detail.canary = Some(canary.detail);
        }
        let rules_on = !max_age.is_zero();
        let health = match health {
            ExecutorHealth::Unhealthy { reason } if !findings.is_empty() => {
                ExecutorHealth::unhealthy(format!("{reason}; {}", findings.join("; ")))
            }
            unhealthy @ ExecutorHealth::Unhealthy { .. } => unhealthy,
            _ if !findings.is_empty() => ExecutorHealth::unhealthy(findings.join("; ")),
            ExecutorHealth::Unknown { .. } if rules_on && queued.is_some() => {
                ExecutorHealth::Healthy
            }
            other => other,
        };
        let health = match (health, blind) {
            (ExecutorHealth::Healthy, Some(why)) => ExecutorHealth::unknown(why),
            (health, _) => health,
        };
        detail.queued_tasks = queued;
        let note = note.filter(|_| health == ExecutorHealth::Healthy);
        // A finding is a verdict of its own: it does not wait.
        let pending = pending && !matches!(health, ExecutorHealth::Unhealthy { .. });
        Observation {
            health,
            detail: (!detail.is_empty()).then_some(detail),
            note,
            pending,
        }
    }

    /// Updates each queue's history and says which ones stopped moving.
    ///
    /// Evidence survives a poll that could not see: a queue missing from this
    /// observation (a poll that failed, a broker that did not answer) or whose
    /// depth could not be read keeps its history as it was, and consumers not
    /// known (`None`) neither start nor stop the no-consumer clock. The rules
    /// then judge every queue on the evidence kept, seen this time or not: a
    /// fault that continues through a blind poll goes on being reported from
    /// the clock it had, never from a fresh start, and never as healthy.
    fn queue_findings(
        &mut self,
        queues: &[QueueDetail],
        max_age: Duration,
        workers_full: bool,
        now: Instant,
    ) -> Vec<String> {
        // The queues seen now in the order the check gave them, then those it
        // did not report, in a stable order.
        let mut order: Vec<(String, String)> = Vec::with_capacity(self.queues.len());
        for queue in queues {
            let key = (queue.broker.clone(), queue.name.clone());
            if !order.contains(&key) {
                order.push(key.clone());
            }
            if let Some(depth) = queue.depth {
                self.observe(key, depth, queue.consumers, workers_full, now);
            }
        }
        let mut unseen: Vec<_> = self
            .queues
            .keys()
            .filter(|key| !order.contains(key))
            .cloned()
            .collect();
        unseen.sort();
        order.extend(unseen);
        if max_age.is_zero() {
            return Vec::new();
        }
        let several_brokers = order.iter().any(|(broker, _)| *broker != order[0].0);
        order
            .iter()
            .filter_map(|key| {
                let history = self.queues.get(key)?;
                let (broker, queue) = key;
                let name = if several_brokers {
                    format!("queue {queue} on {broker}")
                } else {
                    format!("queue {queue}")
                };
                history.finding(&name, max_age, now)
            })
            .collect()
    }

    /// A sighting of one queue: its depth, and its consumers when known. While
    /// every worker's slots are taken (`workers_full`) what waits waits for a
    /// slot, not for a stalled worker: the stall clock starts again once one
    /// frees.
    fn observe(
        &mut self,
        key: (String, String),
        depth: u64,
        consumers: Option<u32>,
        workers_full: bool,
        now: Instant,
    ) {
        let history = self.queues.entry(key).or_insert(QueueHistory {
            depth,
            progress_at: now,
            unconsumed_since: None,
        });
        if depth == 0 || depth < history.depth || workers_full {
            history.progress_at = now;
        }
        history.depth = depth;
        history.unconsumed_since = match (depth, consumers) {
            (0, _) | (_, Some(1..)) => None,
            (_, Some(0)) => Some(history.unconsumed_since.unwrap_or(now)),
            // Consumers not known: the clock keeps what it had.
            (_, None) => history.unconsumed_since,
        };
    }
}

impl QueueHistory {
    /// What is wrong with the queue at `now`, on the evidence kept. Both rules
    /// are asked every time: a no-consumer clock younger than the limit does not
    /// hide a queue that has taken nothing for longer (consumers unknown for
    /// minutes, then seen to be zero).
    fn finding(&self, name: &str, max_age: Duration, now: Instant) -> Option<String> {
        let unconsumed = self
            .unconsumed_since
            .is_some_and(|since| now.saturating_duration_since(since) >= max_age);
        if unconsumed {
            return Some(format!(
                "{name}: messages waiting and no worker consumed it in {}",
                duration::age(max_age)
            ));
        }
        if self.depth > 0 && now.saturating_duration_since(self.progress_at) >= max_age {
            return Some(format!(
                "{name}: messages waiting, none taken in {}",
                duration::age(max_age)
            ));
        }
        None
    }
}

/// The queues holding task instances queued longer than `max_age`.
fn queued_findings(queued: &QueuedTasks, max_age: Duration) -> Vec<String> {
    if max_age.is_zero() {
        return Vec::new();
    }
    queued
        .queues
        .iter()
        .filter(|q| q.overdue > 0)
        .map(|q| {
            format!(
                "task instances queued longer than {} on queue {}",
                duration::age(max_age),
                q.queue
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
