//! The `executor` entry, bounded: whatever the fleet, its JSON stays within
//! [`ENTRY_BUDGET`], so that a probe, a dashboard or Airflow's UI reading it
//! every few seconds reads a few kilobytes, not one entry per worker.
//!
//! Each list of evidence beside a verdict (workers, queues, queued task
//! instances per queue, the canary's queues) shows its first [`LIST_CAPS`]
//! items, those at fault first ([`Detail::workers_at_fault_first`] and its
//! siblings), and says how many it left out (`workers_left_out`, ...). When
//! the entry is still too big (many executors), the lists are cut shorter,
//! down to none; when even that is too big, instances are left out, healthy
//! ones first, and `instances_left_out` says how many. Every worker and queue
//! stays at a route of its own, paged (`/api/v2/monitor/health/executor/workers`
//! and `/queues`), read from the same report; `/metrics` reads it whole.

use serde::Serialize;
use utoipa::ToSchema;

use super::{ExecutorEntry, ExecutorInstance};
use crate::detail::{
    BrokerDetail, CanaryDetail, CanaryOnQueue, CapacityDetail, Detail, EventsDetail, QueueDetail,
    QueuedOnQueue, QueuedTasks, WorkerDetail,
};
use crate::job::ExecutorHealth;

/// The most bytes the `executor` entry's JSON takes.
pub const ENTRY_BUDGET: usize = 16 * 1024;

/// How many items of each list the entry shows, tried in turn until the entry
/// fits its budget: 10 while few executors share it.
pub const LIST_CAPS: [usize; 4] = [10, 5, 2, 0];

/// The evidence of an executor instance's latest check as the entry shows it:
/// [`Detail`], each list cut to its first few items, at fault first, with how
/// many were left out. The whole lists are at the paged routes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ShownDetail {
    /// The queues at fault first ([`Detail::queues`]: each configured queue on
    /// each broker that answered, with its depth and consumers).
    pub queues: Vec<QueueDetail>,
    /// How many queues are not shown (see `/api/v2/monitor/health/executor/queues`).
    pub queues_left_out: usize,
    /// The workers at fault first (gone silent first, stopped cleanly last);
    /// `null` when the check does not list workers.
    pub workers: Option<Vec<WorkerDetail>>,
    /// How many workers are not shown (see `/api/v2/monitor/health/executor/workers`).
    pub workers_left_out: usize,
    /// Task instances Airflow holds in `queued` for this executor; `null` when
    /// not known.
    pub queued_tasks: Option<ShownQueuedTasks>,
    /// Each broker that answered, with what it holds delivered and when it started.
    pub brokers: Vec<BrokerDetail>,
    /// Each broker's subscription to the workers' heartbeats.
    pub worker_events: Vec<EventsDetail>,
    /// The canary's latest runs on this executor's queues; `null` when the
    /// canary DAG is not installed or Airflow's tables cannot be read.
    pub canary: Option<ShownCanary>,
    /// The executor's slots and the task instances taking them or waiting.
    pub capacity: Option<CapacityDetail>,
}

/// [`QueuedTasks`] as the entry shows it: its queues cut, most overdue first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ShownQueuedTasks {
    /// How many, on every queue.
    pub count: u64,
    /// The age of the oldest, in whole seconds; `null` when none is queued.
    pub oldest_seconds: Option<u64>,
    /// Per queue, the most overdue first.
    pub queues: Vec<QueuedOnQueue>,
    /// How many queues are not shown.
    pub queues_left_out: usize,
}

/// [`CanaryDetail`] as the entry shows it: its queues cut, those whose canary
/// has not succeeded first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ShownCanary {
    /// The DAG's id (`overseer_canary`).
    pub dag_id: String,
    /// `scheduled`, `paused`, `stale`, `import errors` or `not scheduled`.
    pub dag: String,
    /// Per queue its canary runs on, those not succeeding first.
    pub queues: Vec<CanaryOnQueue>,
    /// How many queues are not shown.
    pub queues_left_out: usize,
}

/// The first `cap` of `items`, cloned, and how many were left out.
fn first<T: Clone>(items: Vec<&T>, cap: usize) -> (Vec<T>, usize) {
    let left_out = items.len().saturating_sub(cap);
    (items.into_iter().take(cap).cloned().collect(), left_out)
}

impl ShownDetail {
    /// `detail` with each list cut to `cap` items, at fault first.
    pub fn of(detail: &Detail, cap: usize) -> Self {
        let (queues, queues_left_out) = first(detail.queues_at_fault_first(), cap);
        let (workers, workers_left_out) = match detail.workers_at_fault_first() {
            Some(workers) => {
                let (shown, left_out) = first(workers, cap);
                (Some(shown), left_out)
            }
            None => (None, 0),
        };
        Self {
            queues,
            queues_left_out,
            workers,
            workers_left_out,
            queued_tasks: detail.queued_tasks.as_ref().map(|q| shown_queued(q, cap)),
            brokers: detail.brokers.clone(),
            worker_events: detail.worker_events.clone(),
            canary: detail.canary.as_ref().map(|c| shown_canary(c, cap)),
            capacity: detail.capacity.clone(),
        }
    }
}

fn shown_queued(queued: &QueuedTasks, cap: usize) -> ShownQueuedTasks {
    let (queues, queues_left_out) = first(queued.queues_at_fault_first(), cap);
    ShownQueuedTasks {
        count: queued.count,
        oldest_seconds: queued.oldest_seconds,
        queues,
        queues_left_out,
    }
}

fn shown_canary(canary: &CanaryDetail, cap: usize) -> ShownCanary {
    let (queues, queues_left_out) = first(canary.queues_at_fault_first(), cap);
    ShownCanary {
        dag_id: canary.dag_id.clone(),
        dag: canary.dag.clone(),
        queues,
        queues_left_out,
    }
}

impl ExecutorEntry {
    /// Fits the entry's JSON within `budget` bytes: the lists of evidence cut
    /// shorter in turn ([`LIST_CAPS`]), then, when even none is too much,
    /// instances left out, those `unhealthy` kept first, then `unknown`
    /// (those shown keep their order).
    pub fn bound(&mut self, budget: usize) {
        for cap in LIST_CAPS {
            for instance in &mut self.instances {
                instance.shown = instance.detail.as_deref().map(|d| ShownDetail::of(d, cap));
                instance.left_out = false;
            }
            self.instances_left_out = 0;
            if size(&*self) <= budget {
                return;
            }
        }
        // Even without evidence it is too big: keep what is at fault.
        let instances = std::mem::take(&mut self.instances);
        self.instances_left_out = instances.len();
        let fixed = size(&*self);
        self.instances = instances;
        self.instances_left_out = 0;
        let mut order: Vec<usize> = (0..self.instances.len()).collect();
        order.sort_by_key(|&i| match self.instances[i].health {
            ExecutorHealth::Unhealthy { .. } => 0,
            ExecutorHealth::Unknown { .. } => 1,
            ExecutorHealth::Healthy => 2,
        });
        let mut room = budget.saturating_sub(fixed);
        for i in order {
            let instance = &mut self.instances[i];
            // Its JSON and the comma before it.
            let needs = size(&*instance) + 1;
            if needs <= room {
                room -= needs;
            } else {
                instance.left_out = true;
                self.instances_left_out += 1;
            }
        }
    }
}

/// The bytes of `value`'s JSON.
fn size<T: Serialize>(value: &T) -> usize {
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, value).expect("the entry always serializes");
    counter.0
}

/// A writer that only counts.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes the instances the entry shows (see [`ExecutorEntry::bound`]).
pub(super) fn shown_instances<S: serde::Serializer>(
    instances: &[ExecutorInstance],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(instances.iter().filter(|i| !i.left_out))
}

#[cfg(test)]
mod tests;
