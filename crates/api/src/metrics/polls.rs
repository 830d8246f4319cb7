//! This process's executor actors on `/metrics`: their polls' counters and
//! durations, and the checks running now.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use overseer_core::overseer::ExecutorIdentity;
use overseer_core::stats::{ExecutorStats, POLL_BUCKETS_SECONDS};
use prometheus::proto::{self, MetricFamily, MetricType};

use super::{counter, executor_labels, family, gauge, labels};

/// Picks one counter out of an executor's stats.
type CounterField = fn(&ExecutorStats) -> &AtomicU64;

/// The counters of this process's executor actors, their checks running and
/// how long their polls took.
pub(super) fn executors(executors: &[(ExecutorIdentity, Arc<ExecutorStats>)]) -> Vec<MetricFamily> {
    let local = |identity: &ExecutorIdentity| {
        executor_labels(&identity.executor_class, identity.instance.as_deref(), [])
    };
    let counters: [(&str, &str, CounterField); 8] = [
        ("overseer_polls_total", "Health checks asked for.", |s| {
            &s.polls
        }),
        (
            "overseer_polls_skipped_total",
            "Ticks that asked nothing because the last poll was unanswered.",
            |s| &s.skipped,
        ),
        (
            "overseer_poll_timeouts_total",
            "Polls not answered within poll_timeout.",
            |s| &s.timeouts,
        ),
        (
            "overseer_checks_started_late_total",
            "Polls whose check this host did not run in time to answer within poll_timeout (started late, \
             or not at all): not the executor's fault, never unhealthy; a rate is Overseer's host short of CPU.",
            |s| &s.host_late,
        ),
        (
            "overseer_late_replies_total",
            "Answers that came after their poll timed out.",
            |s| &s.late_replies,
        ),
        (
            "overseer_check_panics_total",
            "Health checks that panicked.",
            |s| &s.panics,
        ),
        (
            "overseer_executor_restarts_total",
            "Executor actors restarted.",
            |s| &s.restarts,
        ),
        (
            "overseer_check_stalls_total",
            "Polls of async health checks that held their thread over the limit (the check blocked it, \
             or the machine was short of CPU); the executor's checks run on threads of their own from then on.",
            |s| &s.stalls,
        ),
    ];
    let mut families: Vec<MetricFamily> = counters
        .into_iter()
        .map(|(name, help, field)| {
            family(
                name,
                help,
                MetricType::COUNTER,
                executors
                    .iter()
                    .map(|(identity, stats)| {
                        counter(local(identity), field(stats).load(Ordering::Relaxed))
                    })
                    .collect(),
            )
        })
        .collect();
    families.push(family(
        "overseer_checks_running",
        "Health checks running now (at most one per executor).",
        MetricType::GAUGE,
        executors
            .iter()
            .map(|(identity, stats)| {
                gauge(
                    local(identity),
                    stats.checks_running.load(Ordering::Relaxed) as f64,
                )
            })
            .collect(),
    ));
    families.push(family(
        "overseer_poll_duration_seconds",
        "How long answered polls took.",
        MetricType::HISTOGRAM,
        executors
            .iter()
            .map(|(identity, stats)| histogram(local(identity), stats))
            .collect(),
    ));
    families
}

fn histogram(pairs: Vec<(&str, String)>, stats: &ExecutorStats) -> proto::Metric {
    let buckets = stats.poll_buckets.iter().map(|c| c.load(Ordering::Relaxed));
    histogram_of(
        pairs,
        stats.poll_count.load(Ordering::Relaxed),
        stats.poll_sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        POLL_BUCKETS_SECONDS.into_iter().zip(buckets),
    )
}

/// A histogram sample: its count, its sum and its cumulative `(bound, count)` buckets.
pub(super) fn histogram_of(
    pairs: Vec<(&str, String)>,
    count: u64,
    sum: f64,
    buckets: impl Iterator<Item = (f64, u64)>,
) -> proto::Metric {
    let mut histogram = proto::Histogram::default();
    histogram.set_sample_count(count);
    histogram.set_sample_sum(sum);
    histogram.set_bucket(
        buckets
            .map(|(bound, count)| {
                let mut bucket = proto::Bucket::default();
                bucket.set_upper_bound(bound);
                bucket.set_cumulative_count(count);
                bucket
            })
            .collect(),
    );
    let mut metric = proto::Metric::default();
    metric.set_label(labels(pairs));
    metric.set_histogram(histogram);
    metric
}
