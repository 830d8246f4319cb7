//! The evidence beside this host's verdicts on `/metrics` (see the parent
//! module's table): the workers heard by their heartbeats and the
//! subscriptions that hear them, the queues on each broker, the task
//! instances Airflow holds queued.

use std::collections::BTreeMap;

use overseer_core::detail::{
    CapacityDetail, Detail, EventsDetail, QueueDetail, QueuedOnQueue, WorkerDetail, WorkerHeartbeat,
};
use overseer_core::report::ExecutorInstance;
use prometheus::proto::{Metric, MetricFamily, MetricType};

use super::{counter, family, gauge, row_labels};

/// The evidence beside this host's verdicts (see the module's table) comes
/// from the rows that carry a [`Detail`].
pub(super) type Detailed<'a> = (&'a ExecutorInstance, &'a Detail);

/// A worker heard by its heartbeats: its labels, itself, its latest heartbeat.
type Heard<'a> = (
    Vec<(&'static str, String)>,
    &'a WorkerDetail,
    &'a WorkerHeartbeat,
);

/// Per worker heard by its heartbeats: up, its active and processed tasks;
/// per worker that says them (heard, or an Edge worker): its concurrency and
/// free slots.
pub(super) fn workers(detailed: &[Detailed]) -> Vec<MetricFamily> {
    let all: Vec<(Vec<(&'static str, String)>, &WorkerDetail)> = detailed
        .iter()
        .flat_map(|(i, detail)| detail.workers.iter().flatten().map(move |w| (*i, w)))
        .map(|(i, w)| (row_labels(i, [("worker", w.name.clone())]), w))
        .collect();
    let heard: Vec<Heard> = all
        .iter()
        .filter_map(|(pairs, w)| Some((pairs.clone(), *w, w.heartbeat.as_ref()?)))
        .collect();
    let slots = |of: fn(&WorkerDetail) -> Option<u32>| -> Vec<Metric> {
        all.iter()
            .filter_map(|(pairs, w)| Some(gauge(pairs.clone(), f64::from(of(w)?))))
            .collect()
    };
    vec![
        family(
            "overseer_worker_concurrency",
            "Tasks the worker runs at once: a Celery worker's concurrency as Airflow starts it ([celery] worker_concurrency), an Edge worker's as it reports.",
            MetricType::GAUGE,
            slots(|w| w.concurrency),
        ),
        family(
            "overseer_worker_free_slots",
            "Task slots the worker has free: a Celery worker's concurrency less the tasks its latest heartbeat said it runs; an Edge worker's as it reports. 0 on every worker while work waits is saturation.",
            MetricType::GAUGE,
            slots(|w| w.free_concurrency),
        ),
        family(
            "overseer_worker_up",
            "1 while the worker's heartbeats arrive (Celery's worker events), 0 once it is gone (two heartbeats missed) or offline; no sample while its heartbeats cannot be heard (unknown).",
            MetricType::GAUGE,
            heard
                .iter()
                .filter_map(|(pairs, w, _)| {
                    let up = match w.state.as_deref() {
                        Some("online") => 1.0,
                        Some("gone" | "offline") => 0.0,
                        // Not known now (no subscription up): neither up nor down.
                        _ => return None,
                    };
                    Some(gauge(pairs.clone(), up))
                })
                .collect(),
        ),
        family(
            "overseer_worker_active_tasks",
            "Tasks the worker is running, as its latest heartbeat said.",
            MetricType::GAUGE,
            heard
                .iter()
                .filter_map(|(pairs, _, h)| Some(gauge(pairs.clone(), h.active? as f64)))
                .collect(),
        ),
        family(
            "overseer_worker_processed_tasks_total",
            "Tasks the worker has run since it started, as its latest heartbeat said.",
            MetricType::COUNTER,
            heard
                .iter()
                .filter_map(|(pairs, _, h)| Some(counter(pairs.clone(), h.processed?)))
                .collect(),
        ),
    ]
}

/// One sample from a labelled item, or none when it cannot tell.
type SampleOf<T> = dyn Fn(Vec<(&'static str, String)>, &T) -> Option<Metric>;

/// Per broker subscribed to for the workers' heartbeats: whether it hears
/// them now, what it has read, how often it came up and fell behind, and what
/// waits for it in the broker.
pub(super) fn worker_events(detailed: &[Detailed]) -> Vec<MetricFamily> {
    let subscriptions: Vec<_> = detailed
        .iter()
        .flat_map(|(i, detail)| {
            detail.worker_events.iter().map(move |s| {
                let pairs = row_labels(i, [("broker", s.broker.clone())]);
                (pairs, s)
            })
        })
        .collect();
    let each = |metric: &SampleOf<EventsDetail>| {
        subscriptions
            .iter()
            .filter_map(|(pairs, s)| metric(pairs.clone(), s))
            .collect()
    };
    vec![
        family(
            "overseer_worker_events_listening",
            "1 while the subscription to the workers' heartbeats is up and keeps up with the broker; 0 while it is down, refused, or behind (the broker drops events before they are read: no worker is blamed for silence then).",
            MetricType::GAUGE,
            each(&|pairs, s| Some(gauge(pairs, f64::from(u8::from(s.state == "listening"))))),
        ),
        family(
            "overseer_worker_events_received_total",
            "Worker events read from the broker's subscription.",
            MetricType::COUNTER,
            each(&|pairs, s| Some(counter(pairs, s.received))),
        ),
        family(
            "overseer_worker_events_subscriptions_total",
            "Times the subscription to the workers' heartbeats came up: a rate above zero after the start is a subscription lost and made again.",
            MetricType::COUNTER,
            each(&|pairs, s| Some(counter(pairs, s.subscribed))),
        ),
        family(
            "overseer_worker_events_overflows_total",
            "Times the subscription fell behind: the broker dropped events before they were read.",
            MetricType::COUNTER,
            each(&|pairs, s| Some(counter(pairs, s.overflows))),
        ),
        family(
            "overseer_worker_events_backlog",
            "Worker events waiting in the broker for the subscription, as the broker last said (RabbitMQ).",
            MetricType::GAUGE,
            each(&|pairs, s| Some(gauge(pairs, s.backlog? as f64))),
        ),
    ]
}

/// Per queue on each broker: its depth and its consumers.
pub(super) fn queues(detailed: &[Detailed]) -> Vec<MetricFamily> {
    let on_broker = |i: &ExecutorInstance, broker: &str, queue: &str| {
        row_labels(
            i,
            [("broker", broker.to_owned()), ("queue", queue.to_owned())],
        )
    };
    let queue_gauge = |value: fn(&QueueDetail) -> Option<f64>| {
        detailed
            .iter()
            .flat_map(|(i, detail)| {
                detail
                    .queues
                    .iter()
                    .filter_map(move |q| Some(gauge(on_broker(i, &q.broker, &q.name), value(q)?)))
            })
            .collect()
    };
    vec![
        family(
            "overseer_queue_depth",
            "Messages waiting in the queue on the broker, at this host's latest check of the executor.",
            MetricType::GAUGE,
            queue_gauge(|q| q.depth.map(|d| d as f64)),
        ),
        family(
            "overseer_queue_consumers",
            "Workers consuming the queue on the broker; absent when the broker cannot say (Redis without worker_ping).",
            MetricType::GAUGE,
            queue_gauge(|q| q.consumers.map(f64::from)),
        ),
    ]
}

/// Per queue: each queue with task instances queued, and each configured
/// queue with none (known to be empty, so 0 rather than no sample).
pub(super) fn queued_tasks(detailed: &[Detailed]) -> Vec<MetricFamily> {
    let on_queue = |i: &ExecutorInstance, queue: &str| row_labels(i, [("queue", queue.to_owned())]);
    let queued: Vec<(&ExecutorInstance, &str, Option<&QueuedOnQueue>)> = detailed
        .iter()
        .filter_map(|(i, detail)| Some((*i, *detail, detail.queued_tasks.as_ref()?)))
        .flat_map(|(i, detail, tasks)| {
            let mut by_queue: BTreeMap<&str, Option<&QueuedOnQueue>> = detail
                .queues
                .iter()
                .map(|q| (q.name.as_str(), None))
                .collect();
            by_queue.extend(tasks.queues.iter().map(|q| (q.queue.as_str(), Some(q))));
            by_queue
                .into_iter()
                .map(move |(queue, tasks)| (i, queue, tasks))
        })
        .collect();
    let queued_gauge = |value: fn(Option<&QueuedOnQueue>) -> Option<f64>| {
        queued
            .iter()
            .filter_map(|(i, queue, tasks)| Some(gauge(on_queue(i, queue), value(*tasks)?)))
            .collect()
    };
    vec![
        family(
            "overseer_queued_tasks",
            "Task instances Airflow holds in state queued for the executor, on the queue.",
            MetricType::GAUGE,
            queued_gauge(|tasks| Some(tasks.map_or(0.0, |t| t.count as f64))),
        ),
        family(
            "overseer_overdue_queued_tasks",
            "Task instances queued on the queue for longer than the executor's max_queued_age (0 when that rule is off).",
            MetricType::GAUGE,
            queued_gauge(|tasks| Some(tasks.map_or(0.0, |t| t.overdue as f64))),
        ),
        family(
            "overseer_oldest_queued_task_seconds",
            "How long the oldest task instance queued on the queue has waited, in seconds, at the latest check.",
            MetricType::GAUGE,
            queued_gauge(|tasks| tasks?.oldest_seconds.map(|s| s as f64)),
        ),
    ]
}

/// Per executor: its slots, those taken, and the task instances waiting for one.
pub(super) fn capacity(detailed: &[Detailed]) -> Vec<MetricFamily> {
    let of = |value: fn(&CapacityDetail) -> u64| {
        detailed
            .iter()
            .filter_map(|(i, detail)| {
                let capacity = detail.capacity.as_ref()?;
                let pairs = row_labels(i, []);
                Some(gauge(pairs, value(capacity) as f64))
            })
            .collect()
    };
    vec![
        family(
            "overseer_executor_slots",
            "The executor's slots: Airflow's [core] parallelism times the live schedulers.",
            MetricType::GAUGE,
            of(|c| c.slots),
        ),
        family(
            "overseer_executor_slots_taken",
            "The executor's task instances running or queued: the slots taken.",
            MetricType::GAUGE,
            of(|c| c.running + c.queued),
        ),
        family(
            "overseer_scheduled_tasks",
            "The executor's task instances in state scheduled: waiting for a slot.",
            MetricType::GAUGE,
            of(|c| c.scheduled),
        ),
    ]
}
