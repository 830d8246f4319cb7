//! The canary on `/metrics` ([`overseer_core::airflow::canary`]): per executor and
//! queue the canary runs on, how long workers took to start it (a histogram,
//! each canary counted once), how long one waits now, and when one last
//! succeeded.
//!
//! | metric | one sample per | absent when |
//! | --- | --- | --- |
//! | `overseer_canary_pickup_seconds` (histogram) | queue a canary of the executor was started on, since Overseer started | no canary was started yet |
//! | `overseer_canary_waiting_seconds` | queue of the canary's latest runs | the canary DAG is not installed, or its tables cannot be read |
//! | `overseer_canary_last_success_timestamp_seconds` | the same | none of the runs read succeeded |

use std::sync::Arc;

use overseer_core::overseer::ExecutorIdentity;
use overseer_core::stats::{ExecutorStats, PICKUP_BUCKETS_SECONDS};
use prometheus::proto::{MetricFamily, MetricType};

use super::evidence::Detailed;
use super::polls::histogram_of;
use super::{executor_labels, family, gauge};

/// `executor`, `executor_instance` and `queue`.
fn on_queue(executor: &str, instance: Option<&str>, queue: &str) -> Vec<(&'static str, String)> {
    executor_labels(executor, instance, [("queue", queue.to_owned())])
}

/// The pickup histogram from this process's executor actors, and the gauges
/// from the canary's detail beside this host's verdicts.
pub(super) fn canary(
    executors: &[(ExecutorIdentity, Arc<ExecutorStats>)],
    detailed: &[Detailed],
) -> Vec<MetricFamily> {
    let pickups = executors
        .iter()
        .flat_map(|(identity, stats)| {
            stats.pickups().into_iter().map(move |(queue, pickups)| {
                let pairs = on_queue(
                    &identity.executor_class,
                    identity.instance.as_deref(),
                    &queue,
                );
                let buckets = PICKUP_BUCKETS_SECONDS.into_iter().zip(pickups.buckets);
                histogram_of(pairs, pickups.count, pickups.sum, buckets)
            })
        })
        .collect();
    let queues: Vec<_> = detailed
        .iter()
        .filter_map(|(i, detail)| Some((*i, detail.canary.as_ref()?)))
        .flat_map(|(i, canary)| canary.queues.iter().map(move |q| (i, q)))
        .collect();
    let labelled = |i: &overseer_core::report::ExecutorInstance, queue: &str| {
        on_queue(
            i.executor.as_deref().unwrap_or_default(),
            i.instance.as_deref(),
            queue,
        )
    };
    vec![
        family(
            "overseer_canary_pickup_seconds",
            "How long the canary waited in queued before a worker started it, per queue: each canary run counted once.",
            MetricType::HISTOGRAM,
            pickups,
        ),
        family(
            "overseer_canary_waiting_seconds",
            "How long the canary has waited in queued for a worker now, in seconds (0 when none waits).",
            MetricType::GAUGE,
            queues
                .iter()
                .map(|(i, q)| gauge(labelled(i, &q.queue), q.waiting_seconds.unwrap_or(0) as f64))
                .collect(),
        ),
        family(
            "overseer_canary_last_success_timestamp_seconds",
            "When the latest canary that succeeded on the queue ended, as a Unix time; absent when none of the runs read did.",
            MetricType::GAUGE,
            queues
                .iter()
                .filter_map(|(i, q)| {
                    let at = q.last_success?;
                    Some(gauge(
                        labelled(i, &q.queue),
                        at.timestamp_micros() as f64 / 1e6,
                    ))
                })
                .collect(),
        ),
    ]
}
