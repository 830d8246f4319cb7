//! `GET /metrics`: Prometheus' text format, encoded by the `prometheus` crate.
//!
//! The numbers live where they are made (the actors' atomic counters, the
//! published report); a scrape reads them and builds the metric families, so
//! nothing is recorded twice and a scrape takes no lock an actor waits on.
//! The evidence's families (below: every worker, queue and broker) depend on
//! the published report alone, so they are encoded once per report, as the
//! health JSON is rendered once, and a scrape between two reports copies them;
//! what ages with the clock (the verdicts' and the components' ages) and the
//! counters are read at every scrape.
//!
//! # The executor's instance: `executor_instance`
//!
//! Every per-executor sample (the verdicts, the poll counters and histogram, the
//! evidence below) names the executor's instance, its broker URL without
//! credentials, in `executor_instance`, as the Jobs table's column does. Never in
//! `instance`: that is Prometheus's own target label (the scraped Overseer's
//! address), which a scrape would otherwise rename to `exported_instance` or,
//! with `honor_labels: true`, let this one overwrite.
//!
//! # The evidence beside the verdicts
//!
//! This host's executor rows carry the evidence of their latest check
//! ([`Detail`]); other hosts' rows carry none, so these gauges are this
//! process's own (each Overseer is scraped for its own executors):
//!
//! | gauge | labels | one sample per | absent when |
//! | --- | --- | --- | --- |
//! | `overseer_queue_depth` | `executor`, `executor_instance`, `broker`, `queue` | configured queue on a broker that answered | the depth could not be read |
//! | `overseer_queue_consumers` | `executor`, `executor_instance`, `broker`, `queue` | the same | the transport cannot say (Redis without `worker_ping`) |
//! | `overseer_queued_tasks` | `executor`, `executor_instance`, `queue` | queue with task instances queued, and every configured queue (0 when none) | Airflow's `task_instance` cannot be read |
//! | `overseer_overdue_queued_tasks` | `executor`, `executor_instance`, `queue` | the same | the same |
//! | `overseer_oldest_queued_task_seconds` | `executor`, `executor_instance`, `queue` | queue with task instances queued | none on the queue has a `queued_dttm` |
//! | `overseer_worker_up` | `executor`, `executor_instance`, `worker` | worker heard by its heartbeats (Celery's `worker` events) | `worker_events` is off, or not listened for long enough yet; for `overseer_worker_up`, while its heartbeats cannot be heard (`unknown`) |
//! | `overseer_worker_active_tasks` | `executor`, `executor_instance`, `worker` | the same | the worker did not say |
//! | `overseer_worker_processed_tasks_total` (counter) | `executor`, `executor_instance`, `worker` | the same | the same |
//! | `overseer_worker_concurrency` | `executor`, `executor_instance`, `worker` | worker heard by its heartbeats (with the executor's `worker_concurrency`), or an Edge worker that reports it | not known |
//! | `overseer_worker_free_slots` | `executor`, `executor_instance`, `worker` | the same, with the tasks it runs | not known |
//! | `overseer_worker_events_listening` | `executor`, `executor_instance`, `broker` | broker subscribed to for the workers' heartbeats (`worker_events`) | never |
//! | `overseer_worker_events_received_total` (counter) | `executor`, `executor_instance`, `broker` | the same | never |
//! | `overseer_worker_events_subscriptions_total` (counter) | `executor`, `executor_instance`, `broker` | the same | never |
//! | `overseer_worker_events_overflows_total` (counter) | `executor`, `executor_instance`, `broker` | the same | never |
//! | `overseer_worker_events_backlog` | `executor`, `executor_instance`, `broker` | the same | the broker keeps no queue for the subscription (Redis) |
//! | `overseer_executor_slots`, `overseer_executor_slots_taken`, `overseer_scheduled_tasks` | `executor`, `executor_instance` | executor | Airflow's tables cannot be read |
//! | `overseer_canary_*` ([`canary`]) | `executor`, `executor_instance`, `queue` | queue the canary runs on | the canary DAG is not installed |
//!
//! A queue is labelled by its `broker` as well as its `executor_instance`: a
//! failover list is one instance (`redis://a:6379/0;redis://b:6379/0`) whose
//! brokers each hold a copy of the queue, with a depth of their own. Task instances are
//! Airflow's rows, on no broker, so they have no `broker` label. A value that
//! cannot be told is no sample, never a zero. Ages are as of the check.
//!
//! # Counters made outside the actors
//!
//! The program that serves these routes may keep counters of its own (the
//! `overseer` binary's alert notifier: `overseer_alerts_sent_total` and its
//! kin). It hands them in as an [`ExtraMetrics`]
//! ([`ApiState::with_extra_metrics`](crate::ApiState::with_extra_metrics)), read
//! at each scrape like the actors' counters: this crate knows no alert.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

mod canary;
mod evidence;
mod polls;

use actix_web::HttpResponse;
use actix_web::web::{Bytes, Data};
use chrono::{DateTime, Utc};
use overseer_core::detail::Detail;
use overseer_core::overseer::ExecutorIdentity;
use overseer_core::report::{ExecutorInstance, Status};
use overseer_core::secret::scrub;
use overseer_core::stats::AggregatorStats;
use overseer_core::stats::ExecutorStats;
use overseer_core::{ExecutorHealth, HealthReport};
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};
use tokio::sync::watch;

use crate::ApiState;

/// One counter family kept outside the actors, as an [`ExtraMetrics`] gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterFamily {
    /// The metric's name, `overseer_..._total`.
    pub name: &'static str,
    /// Its `# HELP` line.
    pub help: &'static str,
    /// One sample per label set: the labels (name, value) and the count. Label
    /// values are scrubbed of credentials like every other label.
    pub samples: Vec<(Vec<(&'static str, String)>, u64)>,
}

/// Counters of the serving program's own, shown on `/metrics` beside the
/// actors'. Read at each scrape, so they live where they are counted (atomics)
/// and reading them must neither block nor wait on anything.
pub trait ExtraMetrics: Send + Sync {
    /// Every family, as of now; a family with no sample is left out.
    fn counters(&self) -> Vec<CounterFamily>;
}

/// What `/metrics` reads on every scrape.
pub struct Metrics {
    executors: Vec<(ExecutorIdentity, Arc<ExecutorStats>)>,
    aggregator: Arc<AggregatorStats>,
    reports: watch::Receiver<Arc<HealthReport>>,
    /// The serving program's own counters (see [`ExtraMetrics`]).
    extra: Vec<Arc<dyn ExtraMetrics>>,
    /// The evidence's families, encoded for the report they were read from.
    evidence: Arc<Mutex<Option<Encoded>>>,
}

/// The families that the published report alone decides (the evidence: every
/// worker, queue and broker this host's checks read), encoded once per report
/// as the health JSON is rendered once: with 1,000 workers they are nearly
/// all of a scrape, and a scrape between two reports copies them.
struct Encoded {
    /// The report they were read from (the same `Arc` while it is current).
    report: Arc<HealthReport>,
    text: Arc<[u8]>,
}

impl Metrics {
    pub fn new(
        executors: Vec<(ExecutorIdentity, Arc<ExecutorStats>)>,
        aggregator: Arc<AggregatorStats>,
        reports: watch::Receiver<Arc<HealthReport>>,
    ) -> Self {
        Self {
            executors,
            aggregator,
            reports,
            extra: Vec::new(),
            evidence: Arc::default(),
        }
    }

    /// The same numbers, and `extra`'s counters too.
    pub fn with_extra(&self, extra: Arc<dyn ExtraMetrics>) -> Self {
        let mut all = self.extra.clone();
        all.push(extra);
        Self {
            executors: self.executors.clone(),
            aggregator: self.aggregator.clone(),
            reports: self.reports.clone(),
            extra: all,
            evidence: self.evidence.clone(),
        }
    }

    /// The scrape's body in Prometheus' text format: the evidence's families
    /// as encoded for the current report, then the rest (the verdicts and
    /// their ages, the components, the counters, `more`) encoded now.
    pub fn render(&self, more: Vec<MetricFamily>) -> prometheus::Result<Vec<u8>> {
        let (evidence, live) = self.pieces(more)?;
        let mut body = Vec::with_capacity(evidence.len() + live.len());
        body.extend_from_slice(&evidence);
        body.extend_from_slice(&live);
        Ok(body)
    }

    /// [`Self::render`]'s body in its two pieces, uncopied: the evidence's
    /// text, shared by every scrape of the same report (hundreds of
    /// kilobytes with a large fleet), and the rest, encoded now.
    pub fn pieces(&self, more: Vec<MetricFamily>) -> prometheus::Result<(Arc<[u8]>, Vec<u8>)> {
        let report = self.reports.borrow().clone();
        let evidence = self.evidence_text(&report)?;
        let mut live = self.live(&report);
        live.extend(more);
        live.retain(|f| !f.get_metric().is_empty());
        let mut rest = Vec::with_capacity(16 * 1024);
        TextEncoder::new().encode(&live, &mut rest)?;
        Ok((evidence, rest))
    }

    /// The evidence's families of `report`, encoded: kept from an earlier
    /// scrape of the same report, else encoded now and kept.
    fn evidence_text(&self, report: &Arc<HealthReport>) -> prometheus::Result<Arc<[u8]>> {
        if let Some(kept) = self
            .evidence
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            && Arc::ptr_eq(&kept.report, report)
        {
            return Ok(kept.text.clone());
        }
        // Encoded outside the lock: a scrape that finds another encoding waits
        // for no one, and two that race encode the same bytes.
        let mut families = evidence_of(report);
        families.retain(|f| !f.get_metric().is_empty());
        let mut text = Vec::new();
        TextEncoder::new().encode(&families, &mut text)?;
        let text: Arc<[u8]> = text.into();
        *self.evidence.lock().unwrap_or_else(|e| e.into_inner()) = Some(Encoded {
            report: report.clone(),
            text: text.clone(),
        });
        Ok(text)
    }

    /// The families read at each scrape: what ages with the clock (the
    /// verdicts' and the components' ages) and the counters.
    fn live(&self, report: &HealthReport) -> Vec<MetricFamily> {
        let now = Utc::now();
        let rows: Vec<&ExecutorInstance> = report
            .executor
            .iter()
            .flat_map(|e| e.instances.iter())
            .collect();
        let detailed: Vec<(&ExecutorInstance, &Detail)> = rows
            .iter()
            .filter_map(|i| Some((*i, i.detail.as_deref()?)))
            .collect();
        [
            verdicts(&rows, now),
            canary::canary(&self.executors, &detailed),
            components(report, now),
            polls::executors(&self.executors),
            aggregator(&self.aggregator),
            extra(&self.extra),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// The families `report`'s evidence alone decides (no clock, no counter).
fn evidence_of(report: &HealthReport) -> Vec<MetricFamily> {
    let detailed: Vec<(&ExecutorInstance, &Detail)> = report
        .executor
        .iter()
        .flat_map(|e| e.instances.iter())
        .filter_map(|i| Some((i, i.detail.as_deref()?)))
        .collect();
    [
        evidence::workers(&detailed),
        evidence::worker_events(&detailed),
        evidence::queues(&detailed),
        evidence::queued_tasks(&detailed),
        evidence::capacity(&detailed),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The labels that name an executor instance on every per-executor series,
/// `executor` and `executor_instance` (empty when it has none), then `more`:
/// one pair, spelled once.
pub(super) fn executor_labels<const N: usize>(
    executor: &str,
    instance: Option<&str>,
    more: [(&'static str, String); N],
) -> Vec<(&'static str, String)> {
    let mut labels = Vec::with_capacity(2 + N);
    labels.push(("executor", executor.to_owned()));
    labels.push(("executor_instance", instance.unwrap_or_default().to_owned()));
    labels.extend(more);
    labels
}

/// [`executor_labels`] of an executor row of the report.
pub(super) fn row_labels<const N: usize>(
    row: &ExecutorInstance,
    more: [(&'static str, String); N],
) -> Vec<(&'static str, String)> {
    executor_labels(
        row.executor.as_deref().unwrap_or_default(),
        row.instance.as_deref(),
        more,
    )
}

/// Every live executor row's verdict, and its age.
fn verdicts(rows: &[&ExecutorInstance], now: DateTime<Utc>) -> Vec<MetricFamily> {
    let with_host = |i: &ExecutorInstance| {
        row_labels(i, [("hostname", i.hostname.clone().unwrap_or_default())])
    };
    vec![
        family(
            "overseer_executor_health",
            "The executor's verdict: 1 healthy, 0 unhealthy, -1 unknown.",
            MetricType::GAUGE,
            rows.iter()
                .map(|i| {
                    let value = match i.health {
                        ExecutorHealth::Healthy => 1.0,
                        ExecutorHealth::Unhealthy { .. } => 0.0,
                        ExecutorHealth::Unknown { .. } => -1.0,
                    };
                    gauge(with_host(i), value)
                })
                .collect(),
        ),
        family(
            "overseer_executor_seconds_since_check",
            "Seconds since the executor's verdict was made.",
            MetricType::GAUGE,
            rows.iter()
                .filter_map(|i| {
                    let checked = i.checked_at?;
                    Some(gauge(
                        with_host(i),
                        (now - checked).as_seconds_f64().max(0.0),
                    ))
                })
                .collect(),
        ),
    ]
}

/// The report's components, and the report's own age.
fn components(report: &HealthReport, now: DateTime<Utc>) -> Vec<MetricFamily> {
    let components = [
        ("metadatabase", Some(report.metadatabase)),
        ("scheduler", report.scheduler.status),
        ("triggerer", report.triggerer.status),
        ("dag_processor", report.dag_processor.status),
        ("executor", report.executor.as_ref().and_then(|e| e.status)),
    ];
    vec![
        family(
            "overseer_component_healthy",
            "1 when the component's status is healthy, 0 when unhealthy; absent when null.",
            MetricType::GAUGE,
            components
                .into_iter()
                .filter_map(|(name, status)| {
                    status.map(|s| {
                        gauge(
                            vec![("component", name.to_owned())],
                            f64::from(s == Status::Healthy),
                        )
                    })
                })
                .collect(),
        ),
        family(
            "overseer_report_age_seconds",
            "Seconds since the published report was built.",
            MetricType::GAUGE,
            vec![gauge(
                vec![],
                (now - report.generated_at).as_seconds_f64().max(0.0),
            )],
        ),
    ]
}

/// The aggregator's counters: writes, reads, the history's queue, and the
/// core actors' restarts.
fn aggregator(aggregator: &AggregatorStats) -> Vec<MetricFamily> {
    let counters = [
        (
            "overseer_db_flushes_total",
            "Verdict and heartbeat writes that committed.",
            &aggregator.flushes,
        ),
        (
            "overseer_db_flush_failures_total",
            "Verdict and heartbeat writes that failed (kept and retried).",
            &aggregator.flush_failures,
        ),
        (
            "overseer_db_read_failures_total",
            "Reads of the Jobs table that failed (metadatabase unhealthy).",
            &aggregator.refresh_failures,
        ),
        (
            "overseer_db_history_read_failures_total",
            "Reads of the verdict history's latest transitions that failed or timed out \
             (the report goes on; since and previous wait for the next).",
            &aggregator.history_read_failures,
        ),
        (
            "overseer_history_transitions_dropped_total",
            "Transitions of a verdict's state dropped unwritten: more waited for the \
             database than the history's queue holds (the oldest went first).",
            &aggregator.transitions_dropped,
        ),
    ];
    let mut families: Vec<MetricFamily> = counters
        .into_iter()
        .map(|(name, help, value)| {
            family(
                name,
                help,
                MetricType::COUNTER,
                vec![counter(vec![], value.load(Ordering::Relaxed))],
            )
        })
        .collect();
    families.push(family(
        "overseer_actor_restarts_total",
        "Core actors started again after they stopped or panicked.",
        MetricType::COUNTER,
        aggregator
            .restarts
            .by_actor()
            .into_iter()
            .map(|(actor, restarts)| counter(vec![("actor", actor.to_owned())], restarts))
            .collect(),
    ));
    families
}

/// The serving program's own counters.
fn extra(extra: &[Arc<dyn ExtraMetrics>]) -> Vec<MetricFamily> {
    extra
        .iter()
        .flat_map(|extra| extra.counters())
        .map(|c| {
            family(
                c.name,
                c.help,
                MetricType::COUNTER,
                c.samples
                    .into_iter()
                    .map(|(pairs, value)| counter(pairs, value))
                    .collect(),
            )
        })
        .collect()
}

fn labels(pairs: Vec<(&str, String)>) -> Vec<proto::LabelPair> {
    pairs
        .into_iter()
        .map(|(name, value)| {
            let mut label = proto::LabelPair::default();
            label.set_name(name.to_owned());
            // Belt and braces: a label value never carries a credential, nor
            // a control character (a forged worker name's ESC, BEL or NUL),
            // which a terminal or a scraper would act on.
            label.set_value(scrub(&value).chars().filter(|c| !c.is_control()).collect());
            label
        })
        .collect()
}

fn gauge(pairs: Vec<(&str, String)>, value: f64) -> proto::Metric {
    let mut gauge = proto::Gauge::default();
    gauge.set_value(value);
    let mut metric = proto::Metric::default();
    metric.set_label(labels(pairs));
    metric.set_gauge(gauge);
    metric
}

fn counter(pairs: Vec<(&str, String)>, value: u64) -> proto::Metric {
    let mut counter = proto::Counter::default();
    counter.set_value(value as f64);
    let mut metric = proto::Metric::default();
    metric.set_label(labels(pairs));
    metric.set_counter(counter);
    metric
}

fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<proto::Metric>) -> MetricFamily {
    let mut family = MetricFamily::default();
    family.set_name(name.to_owned());
    family.set_help(help.to_owned());
    family.set_field_type(kind);
    family.set_metric(metrics);
    family
}

/// `GET /metrics`.
#[utoipa::path(
    get,
    tag = "monitor",
    path = "/metrics",
    responses((status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String))
)]
pub async fn metrics(state: Data<ApiState>) -> HttpResponse {
    let streams = family(
        "overseer_stream_clients",
        "Server-Sent Events clients connected now (at most api.max_stream_clients).",
        MetricType::GAUGE,
        vec![gauge(vec![], state.stream_places.open() as f64)],
    );
    match state.metrics.pieces(vec![streams]) {
        Ok((evidence, rest)) => HttpResponse::Ok()
            .content_type(TextEncoder::new().format_type())
            .body(Pieces([
                Some(Bytes::from_owner(evidence)),
                Some(Bytes::from(rest)),
            ])),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            HttpResponse::InternalServerError().finish()
        }
    }
}

/// A body of two pieces sent one after the other, its length known (so it
/// goes out with `Content-Length`, as any other): the shared evidence's text
/// is never copied per scrape.
struct Pieces([Option<Bytes>; 2]);

impl actix_web::body::MessageBody for Pieces {
    type Error = std::convert::Infallible;

    fn size(&self) -> actix_web::body::BodySize {
        let len = self.0.iter().flatten().map(Bytes::len).sum::<usize>();
        actix_web::body::BodySize::Sized(len as u64)
    }

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Bytes, Self::Error>>> {
        std::task::Poll::Ready(self.0.iter_mut().find_map(Option::take).map(Ok))
    }
}
