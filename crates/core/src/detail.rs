//! The evidence beside a verdict: what a check saw of the work, not only
//! whether the executor answered.
//!
//! A check returns an [`Observation`]: its verdict and, when it can say more, a
//! [`Detail`] (the queues it read, the workers that answered). The executor's
//! actor adds what Airflow's own tables say ([`QueuedTasks`], from
//! `task_instance`) and judges whether work flows ([`crate::rules`]). The detail
//! travels to the report and `/metrics`, never to the Jobs table, whose verdict
//! columns stay as the seed defines them.
//!
//! Every string in it is safe to show: brokers appear by their identity, without
//! credentials, and the executor's actor scrubs the rest.

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use crate::job::ExecutorHealth;
use crate::reason::Reason;

/// What one check of an executor found: the verdict, and the evidence.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// The verdict.
    pub health: ExecutorHealth,
    /// The evidence, when the check has any to give.
    pub detail: Option<Detail>,
    /// Beside a `healthy` verdict, what is worth knowing all the same (a
    /// failover broker that does not answer, an edge worker gone quiet): shown
    /// as the instance's `reason` while it is healthy. Dropped with any other
    /// verdict, whose reason says what matters.
    pub note: Option<Reason>,
    /// The check has not heard enough yet to judge (a Celery check whose
    /// subscription to the workers' heartbeats is still warming up): the
    /// supervisor keeps the verdict it holds (before the first, the row's
    /// `not checked yet`) and takes only the evidence. An `unhealthy` verdict
    /// is never pending: what the check saw fail is reported at once.
    pub pending: bool,
    /// Overseer's own host kept the check from judging (its probe got no CPU
    /// in time: [`Observation::host_busy`]): nothing is said of the executor.
    /// The verdict is `unknown`, naming the host, unless the executor is
    /// `unhealthy` already, which it stays, with its reason.
    pub host_busy: bool,
}

impl Observation {
    /// A verdict with its evidence.
    pub fn new(health: ExecutorHealth, detail: Detail) -> Self {
        Self {
            health,
            detail: Some(detail),
            note: None,
            pending: false,
            host_busy: false,
        }
    }

    /// Overseer's own host kept the check from judging (`reason` says how:
    /// `not judged: ...`): `unknown`, never the executor's fault.
    pub fn host_busy(reason: impl Into<Reason>) -> Self {
        Self {
            host_busy: true,
            ..ExecutorHealth::unknown(reason).into()
        }
    }

    /// The same observation with a note beside its verdict (kept only while
    /// the verdict is `healthy`).
    pub fn with_note(mut self, note: impl Into<Reason>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// The note, when the verdict is `healthy`.
    pub fn healthy_note(&self) -> Option<&Reason> {
        matches!(self.health, ExecutorHealth::Healthy)
            .then_some(self.note.as_ref())
            .flatten()
    }
}

impl Observation {
    /// The same observation with any URL credentials in its detail masked
    /// ([`crate::secret::scrub`]): every name in it. Its reason and note,
    /// [`Reason`]s, were masked when made.
    pub fn scrubbed(self) -> Self {
        let scrub = |s: &mut String| *s = crate::secret::scrub(s);
        let detail = self.detail.map(|mut detail| {
            for queue in &mut detail.queues {
                scrub(&mut queue.name);
                scrub(&mut queue.broker);
            }
            for broker in &mut detail.brokers {
                scrub(&mut broker.broker);
            }
            for worker in detail.workers.iter_mut().flatten() {
                scrub(&mut worker.name);
                worker.queues.iter_mut().flatten().for_each(scrub);
                worker.state.iter_mut().for_each(scrub);
                if let Some(heartbeat) = &mut worker.heartbeat {
                    heartbeat.software.iter_mut().for_each(scrub);
                }
            }
            detail
        });
        Self { detail, ..self }
    }
}

impl From<ExecutorHealth> for Observation {
    fn from(health: ExecutorHealth) -> Self {
        Self {
            health,
            detail: None,
            note: None,
            pending: false,
            host_busy: false,
        }
    }
}

/// The evidence of one executor instance's latest check, beside its verdict in
/// the report (`detail`). A field the executor cannot tell about is `null`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct Detail {
    /// Each configured queue on each broker that answered, with its depth and
    /// consumers.
    pub queues: Vec<QueueDetail>,
    /// The workers that answered the remote-control ping, with the queues each
    /// consumes; `null` when the check does not ping workers.
    pub workers: Option<Vec<WorkerDetail>>,
    /// Task instances Airflow holds in `queued` for this executor, from its
    /// `task_instance` table; `null` when the database has none (Overseer's
    /// own SQLite) or could not be read.
    pub queued_tasks: Option<QueuedTasks>,
    /// Each broker that answered, with the messages it holds delivered to
    /// workers and not yet acknowledged, and when it started (a Celery check on
    /// Redis); empty when the transport cannot say.
    pub brokers: Vec<BrokerDetail>,
    /// Each broker's subscription to the workers' heartbeats (a Celery check
    /// with `worker_events`); empty when there is none.
    pub worker_events: Vec<EventsDetail>,
    /// The canary's latest runs on this executor's queues
    /// ([`crate::airflow::canary`]); `null` when the canary DAG is not installed, or
    /// Airflow's tables cannot be read.
    pub canary: Option<CanaryDetail>,
    /// The executor's slots and the task instances taking them or waiting
    /// ([`crate::airflow::capacity`]); `null` when Airflow's tables cannot be read.
    pub capacity: Option<CapacityDetail>,
}

impl Detail {
    /// True when there is nothing to show.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
            && self.workers.is_none()
            && self.queued_tasks.is_none()
            && self.brokers.is_empty()
            && self.worker_events.is_empty()
            && self.canary.is_none()
            && self.capacity.is_none()
    }
}

/// An executor's slots, and the task instances taking them or waiting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct CapacityDetail {
    /// `parallelism` times the live schedulers: what it may run or queue at once.
    pub slots: u64,
    /// Airflow's `[core] parallelism`: the slots each scheduler's executor has.
    pub parallelism: u32,
    /// The schedulers heartbeating within their threshold.
    pub schedulers: u32,
    /// Its task instances `running`.
    pub running: u64,
    /// Its task instances `queued`.
    pub queued: u64,
    /// Its task instances `scheduled`: waiting for a slot.
    pub scheduled: u64,
}

/// The canary DAG, and its latest runs on one executor's queues.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct CanaryDetail {
    /// The DAG's id (`overseer_canary`).
    pub dag_id: String,
    /// `scheduled`, `paused`, `stale` (its file is gone from the DAG folder),
    /// `import errors` or `not scheduled` (its next run is overdue, or it has none).
    pub dag: String,
    /// Per queue its canary runs on, by name.
    pub queues: Vec<CanaryOnQueue>,
}

/// The canary on one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct CanaryOnQueue {
    /// The queue (`task_instance.queue`).
    pub queue: String,
    /// The latest run's id.
    pub run_id: String,
    /// Its canary's state (`queued`, `running`, `success`, `failed`, ...);
    /// `null` before the scheduler gave it one.
    pub state: Option<String>,
    /// How long a canary has waited in `queued` for a worker, in whole
    /// seconds; `null` when none waits.
    pub waiting_seconds: Option<u64>,
    /// From queued to started, in seconds, of the latest canary a worker
    /// started.
    #[schema(value_type = Option<f64>)]
    pub pickup_seconds: Option<Seconds>,
    /// From started to ended, in seconds, of the latest that succeeded.
    #[schema(value_type = Option<f64>)]
    pub run_seconds: Option<Seconds>,
    /// When the latest that succeeded ended, among the runs read; `null`
    /// when none of them did.
    #[serde(serialize_with = "optional_timestamp")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_success: Option<DateTime<Utc>>,
}

/// Seconds (`3.25`), compared by their bits so that the detail they sit in
/// can be compared whole.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Seconds(pub f64);

impl PartialEq for Seconds {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Seconds {}

fn optional_timestamp<S: serde::Serializer>(
    at: &Option<DateTime<Utc>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => timestamp(at, serializer),
        None => serializer.serialize_none(),
    }
}

/// One broker's subscription to the workers' heartbeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct EventsDetail {
    /// The broker, without credentials (`amqp://broker:5672//`).
    pub broker: String,
    /// `listening` (up, and keeping up), `behind` (the broker drops events
    /// before they are read: nobody is blamed for a silence meanwhile),
    /// `down` (not up yet, or reconnecting) or `refused` (the broker refuses
    /// it, or cannot send pushes).
    pub state: String,
    /// Worker events read from it since Overseer started.
    pub received: u64,
    /// How many times it came up: more than one means it was lost and came
    /// back (each time, a warm-up of two heartbeats before a silence counts).
    pub subscribed: u64,
    /// How many times it fell behind.
    pub overflows: u64,
    /// Events waiting for it in the broker, as the broker last said
    /// (RabbitMQ); `null` where the broker keeps no queue for it (Redis).
    pub backlog: Option<u64>,
}

/// One queue on one broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct QueueDetail {
    /// The queue's name (`default`).
    pub name: String,
    /// The broker it is on, without credentials (`redis://broker:6379/0`).
    pub broker: String,
    /// Messages waiting in it; `null` when it could not be read.
    pub depth: Option<u64>,
    /// Workers consuming it: RabbitMQ counts its consumers; on Redis, the
    /// workers that answered `active_queues` naming it. `null` when the
    /// transport cannot say (Redis without `worker_ping`).
    pub consumers: Option<u32>,
}

/// What one broker holds beside its queues: the messages it delivered to
/// workers that have not acknowledged them yet, and when it started. Together
/// with the queues' depths, where the broker keeps every message a task
/// instance queued in Airflow has ([`crate::rules::lost`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct BrokerDetail {
    /// The broker, without credentials (`redis://broker:6379/0`).
    pub broker: String,
    /// Messages delivered to a worker and not acknowledged (kombu's `unacked`
    /// hash on Redis: prefetched, or running with `acks_late`); `null` when
    /// the transport cannot say (AMQP keeps the count from its clients).
    pub delivered: Option<u64>,
    /// When the broker started, by its own uptime; `null` when not known.
    #[serde(serialize_with = "optional_timestamp")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<DateTime<Utc>>,
}

/// One worker: a Celery worker that answered the ping, or an Edge worker
/// registered in Airflow's `edge_worker` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct WorkerDetail {
    /// Its name (`celery@host-a`, an Edge worker's `worker_name`).
    pub name: String,
    /// The queues it consumes, as it answered `active_queues`; `null` when it
    /// did not say (an Edge worker without queues: it takes every queue).
    pub queues: Option<Vec<String>>,
    /// Its state as its executor records it (an Edge worker's `idle`,
    /// `running`, `unknown`, `offline`, `maintenance mode`, ...); `null` when
    /// the executor keeps none (Celery).
    pub state: Option<String>,
    /// The tasks it can run at once (a Celery worker's concurrency, as
    /// Airflow's `[celery] worker_concurrency` starts it; an Edge worker's
    /// `concurrency`, as it reports); `null` when not known.
    pub concurrency: Option<u32>,
    /// The task slots it has free, as it last reported (a Celery worker: its
    /// concurrency less the tasks its latest heartbeat said it runs); `null`
    /// when not known.
    pub free_concurrency: Option<u32>,
    /// What its own heartbeats say (a Celery worker's `worker-heartbeat`
    /// events); `null` when none was heard (an Edge worker, a Celery check
    /// with `worker_events = false`).
    pub heartbeat: Option<WorkerHeartbeat>,
}

/// A worker's latest heartbeat, as it sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct WorkerHeartbeat {
    /// When it was received, as Airflow writes its timestamps.
    #[serde(serialize_with = "timestamp")]
    #[schema(value_type = String, format = DateTime)]
    pub last: DateTime<Utc>,
    /// How often the worker says it sends one, in milliseconds (Celery's
    /// `freq`, 2 s by default); it counts as gone after two of them without one.
    pub every_ms: u64,
    /// Tasks it is running.
    pub active: Option<u64>,
    /// Tasks it has run since it started.
    pub processed: Option<u64>,
    /// Its host's load averages over 1, 5 and 15 minutes, as it reported them.
    #[schema(value_type = Option<Vec<f64>>)]
    pub loadavg: Option<[LoadAverage; 3]>,
    /// Its software (`py-celery 5.5.3`).
    pub software: Option<String>,
}

fn timestamp<S: serde::Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&crate::timestamp::airflow_timestamp(*at))
}

/// One load average (`0.42`): a number that compares by its bits, so that the
/// detail it sits in can be compared whole.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LoadAverage(pub f64);

impl PartialEq for LoadAverage {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for LoadAverage {}

/// Task instances in state `queued` for one executor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct QueuedTasks {
    /// How many, on every queue.
    pub count: u64,
    /// The age of the oldest (from `queued_dttm`), in whole seconds; `null`
    /// when none is queued.
    pub oldest_seconds: Option<u64>,
    /// Per queue, by name.
    pub queues: Vec<QueuedOnQueue>,
}

/// Task instances in state `queued` on one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct QueuedOnQueue {
    /// The queue (`task_instance.queue`).
    pub queue: String,
    /// How many.
    pub count: u64,
    /// The age of the oldest, in whole seconds; `null` when no `queued_dttm`
    /// was recorded.
    pub oldest_seconds: Option<u64>,
    /// How many have been queued longer than the executor's `max_queued_age`
    /// (0 when that rule is off).
    pub overdue: u64,
}

/// The order lists of evidence are shown in, where they are cut (the health
/// entry shows the first few; the paged routes go on from there): what is at
/// fault first, so that a cut list still names the trouble. The order is
/// stable: within a rank, the check's own order.
impl Detail {
    /// The workers, those gone silent (or whose state their executor does not
    /// know) first, those stopped cleanly (`offline`) last; `None` when the
    /// check does not list workers.
    pub fn workers_at_fault_first(&self) -> Option<Vec<&WorkerDetail>> {
        let rank = |w: &WorkerDetail| match w.state.as_deref() {
            Some("gone" | "unknown") => 0,
            Some("offline") => 2,
            _ => 1,
        };
        self.workers.as_ref().map(|workers| by_rank(workers, rank))
    }

    /// The queues: work waiting that nobody consumes first (the deepest
    /// first), then those whose depth could not be read, then the rest.
    pub fn queues_at_fault_first(&self) -> Vec<&QueueDetail> {
        let rank = |q: &QueueDetail| match (q.depth, q.consumers) {
            (Some(depth), Some(0)) if depth > 0 => (0, std::cmp::Reverse(depth)),
            (None, _) => (1, std::cmp::Reverse(0)),
            _ => (2, std::cmp::Reverse(0)),
        };
        by_rank(&self.queues, rank)
    }
}

impl QueuedTasks {
    /// The queues, those with the most overdue first, then the oldest.
    pub fn queues_at_fault_first(&self) -> Vec<&QueuedOnQueue> {
        use std::cmp::Reverse;
        by_rank(&self.queues, |q| {
            (
                Reverse(q.overdue),
                Reverse(q.oldest_seconds),
                Reverse(q.count),
            )
        })
    }
}

impl CanaryDetail {
    /// The queues, those whose canary has not succeeded first (the longest
    /// waiting first).
    pub fn queues_at_fault_first(&self) -> Vec<&CanaryOnQueue> {
        use std::cmp::Reverse;
        by_rank(&self.queues, |q| {
            (
                q.state.as_deref() == Some("success"),
                Reverse(q.waiting_seconds),
            )
        })
    }
}

/// `items` sorted by `rank`, ties kept in their order.
fn by_rank<T, K: Ord>(items: &[T], rank: impl Fn(&T) -> K) -> Vec<&T> {
    let mut sorted: Vec<&T> = items.iter().collect();
    sorted.sort_by_key(|item| rank(item));
    sorted
}
