//! Alerts on transitions: each `[[alerts]]` target is told, by webhook, when an
//! executor instance this host supervises turns `unhealthy` and stays so for
//! the target's `min_duration` (`firing`), and, with `send_resolved`, when it is
//! `healthy` again after that (`resolved`). The README's "Alerts" section is
//! the operator's account: keys, rules and the JSON body.
//!
//! # How it runs
//! - The notifier reads the published reports ([`Overseer::watch`]), as the
//!   HTTP API does: one tokio task per target, on the service's runtime, never
//!   on the actors' thread. Its [`Tracker`] holds each instance's state and
//!   says which alerts are due; a timer wakes it when a state will have held
//!   `min_duration` (see `tracker` for the rules, as a table).
//! - Only this host's rows are alerted on (their `hostname` is
//!   `supervisor.hostname`): every Overseer sharing a database alerts on the
//!   verdicts it makes, so one outage is one alert per target, however many
//!   Overseers report it.
//! - Delivery is on a thread per target (`delivery`: a bounded queue, a
//!   timeout per attempt, back-off, a bounded time to retry), fed by
//!   `try_send`: a webhook that is down or slow delays neither the notifier nor
//!   polling.
//! - The state lives in memory, and is rebuilt at start from the history of
//!   verdict transitions ([`overseer_core::history`]): an alert still firing
//!   when the service stopped is open again in the next run, which resolves it
//!   once the instance is `healthy` (see `tracker`, "Across restarts"). When
//!   the history cannot be read then (logged), a target starts from `unknown`,
//!   as before.
//!
//! # Layout
//! - `tracker`: [`Tracker`], states and transitions, pure and table-tested.
//! - `delivery`: the threads that post, their retries, the bodies.
//! - this module: [`Notifier`], wiring the three, and [`AlertStats`] for `/metrics`.

mod delivery;
mod tracker;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::Duration;

use overseer_api::metrics::{CounterFamily, ExtraMetrics};
use overseer_core::HealthReport;
use overseer_core::Overseer;
use overseer_core::airflow::cost::FaultCost;
use overseer_core::history::{HistoryFilter, HistoryReader, MAX_LIMIT};
use overseer_core::report::ExecutorHealthKind;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use delivery::{ATTEMPT_TIMEOUT, FIRST_BACKOFF, MAX_BACKOFF, QUEUE_CAPACITY, body, slack_text};
pub use tracker::{Alert, AlertStatus, InstanceKey, LeftBehind, Observed, Rules, Tracker};

use crate::config::AlertConfig;
/// The alerts' settings, read with the configuration ([`crate::config`]).
pub use crate::config::{AlertFormat, WebhookUrl};
use delivery::{Target, TargetStats};

/// How long stopping waits for the delivery threads to end (one may be in the
/// middle of an attempt, bounded by [`ATTEMPT_TIMEOUT`]); what is left is
/// dropped with the process.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// Every target's counters: `overseer_alerts_sent_total{target,status}`,
/// `overseer_alert_failures_total{target}`, `overseer_alerts_dropped_total{target}`.
#[derive(Debug, Default)]
pub struct AlertStats {
    targets: Vec<Arc<TargetStats>>,
}

impl ExtraMetrics for AlertStats {
    fn counters(&self) -> Vec<CounterFamily> {
        let target = |t: &TargetStats| vec![("target", t.label.clone())];
        let each = |value: fn(&TargetStats) -> u64| {
            self.targets
                .iter()
                .map(|t| (target(t), value(t)))
                .collect::<Vec<_>>()
        };
        vec![
            CounterFamily {
                name: "overseer_alerts_sent_total",
                help: "Alerts delivered to the target (a 2xx answer), by status: firing or resolved.",
                samples: self
                    .targets
                    .iter()
                    .flat_map(|t| {
                        [
                            ("firing", t.firing_sent.load(Ordering::Relaxed)),
                            ("resolved", t.resolved_sent.load(Ordering::Relaxed)),
                        ]
                        .map(|(status, value)| {
                            let mut labels = target(t);
                            labels.push(("status", status.to_owned()));
                            (labels, value)
                        })
                    })
                    .collect(),
            },
            CounterFamily {
                name: "overseer_alert_failures_total",
                help: "Attempts to deliver an alert to the target that failed (each retry counts).",
                samples: each(|t| t.failures.load(Ordering::Relaxed)),
            },
            CounterFamily {
                name: "overseer_alerts_dropped_total",
                help: "Alerts given up on: not delivered within retry_for, a full queue, or the service stopping.",
                samples: each(|t| t.dropped.load(Ordering::Relaxed)),
            },
        ]
    }
}

/// One target at work: its watcher task and its delivery thread.
struct Running {
    watcher: JoinHandle<()>,
    /// Closing it ends the delivery thread's wait between retries.
    stop: mpsc::Sender<()>,
    /// Signalled when the delivery thread ends.
    done: mpsc::Receiver<()>,
}

/// The running notifier: stop it with [`Notifier::stop`].
pub struct Notifier {
    stats: Arc<AlertStats>,
    running: Vec<Running>,
}

impl Notifier {
    /// Starts a watcher and a delivery thread for each of `alerts`, alerting on
    /// `hostname`'s rows of the reports `overseer` publishes, from the states
    /// earlier runs left in the history `history` reads. Call within the
    /// tokio runtime. With no targets, nothing runs.
    pub fn start(
        alerts: &[AlertConfig],
        hostname: &str,
        overseer: &Overseer,
        history: Option<HistoryReader>,
    ) -> Self {
        Self::start_with(alerts, hostname, &overseer.watch(), history)
    }

    /// [`Notifier::start`] on any stream of reports.
    pub fn start_with(
        alerts: &[AlertConfig],
        hostname: &str,
        reports: &watch::Receiver<Arc<HealthReport>>,
        history: Option<HistoryReader>,
    ) -> Self {
        let mut stats = AlertStats::default();
        let mut running = Vec::new();
        for config in alerts {
            let target_stats = Arc::new(TargetStats {
                label: config.target_label(),
                ..TargetStats::default()
            });
            stats.targets.push(target_stats.clone());
            let target = Target::new(
                config.url.clone(),
                config.format,
                config.retry_for,
                target_stats.clone(),
            );
            let (queue_tx, queue) = mpsc::sync_channel(QUEUE_CAPACITY);
            let (stop, stop_rx) = mpsc::channel();
            let (done_tx, done) = mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("overseer-alerts".into())
                .spawn(move || {
                    delivery::run(&target, &queue, &stop_rx);
                    let _ = done_tx.send(());
                });
            if let Err(e) = spawned {
                tracing::error!(
                    "cannot start the delivery thread for alerts to {}: {e}; its alerts are not sent",
                    target_stats.label
                );
                continue;
            }
            let rules = Rules {
                min_duration: config.min_duration,
                send_resolved: config.send_resolved,
            };
            let watcher = tokio::spawn(watch_reports(
                reports.clone(),
                hostname.to_owned(),
                Tracker::new(rules),
                history.clone(),
                queue_tx,
                target_stats,
            ));
            running.push(Running {
                watcher,
                stop,
                done,
            });
        }
        Self {
            stats: Arc::new(stats),
            running,
        }
    }

    /// The counters for `/metrics`.
    pub fn stats(&self) -> Arc<AlertStats> {
        self.stats.clone()
    }

    /// Stops watching, and ends the delivery threads: an alert waiting for a
    /// retry or in a queue is dropped (counted, and said once per target).
    /// Waits at most [`STOP_GRACE`] for them.
    pub async fn stop(self) {
        let mut done = Vec::new();
        for running in self.running {
            running.watcher.abort();
            let _ = running.watcher.await;
            drop(running.stop);
            done.push(running.done);
        }
        let _ = tokio::task::spawn_blocking(move || {
            let deadline = std::time::Instant::now() + STOP_GRACE;
            for done in done {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let _ = done.recv_timeout(left);
            }
        })
        .await;
    }
}

/// One target's watcher: first the states earlier runs left (from
/// `history`), then each new report, and each moment a state will have held
/// `min_duration`, asks the tracker for the alerts due and queues them.
async fn watch_reports(
    mut reports: watch::Receiver<Arc<HealthReport>>,
    hostname: String,
    mut tracker: Tracker,
    history: Option<HistoryReader>,
    queue: SyncSender<Alert>,
    stats: Arc<TargetStats>,
) {
    if let Some(history) = &history {
        let left = left_behind(history, &hostname, &stats.label).await;
        tracker.restore(left, tokio::time::Instant::now(), chrono::Utc::now());
    }
    loop {
        let report = reports.borrow_and_update().clone();
        let now = tokio::time::Instant::now();
        let alerts = tracker.observe(observed(&report, &hostname), now, chrono::Utc::now());
        for mut alert in alerts {
            if alert.status == AlertStatus::Resolved
                && let Some(history) = &history
            {
                alert.cost = cost_of(history, &alert).await;
            }
            if !enqueue(&queue, alert, &stats) {
                return;
            }
        }
        let deadline = tracker.next_deadline();
        tokio::select! {
            changed = reports.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = sleep_until(deadline) => {}
        }
    }
}

/// How earlier runs left `hostname`'s instances, as the history says; none
/// (logged) when it cannot be read, bounded by the reader's timeout.
async fn left_behind(history: &HistoryReader, hostname: &str, target: &str) -> Vec<LeftBehind> {
    match history.left_by_earlier_runs(hostname).await {
        Ok(left) => left
            .into_iter()
            .map(|left| {
                let t = left.transition;
                LeftBehind {
                    key: InstanceKey {
                        executor: t.executor,
                        instance: t.instance.unwrap_or_default(),
                        hostname: t.hostname,
                    },
                    health: t.to,
                    previous: t.from,
                    reason: t.reason,
                    since: t.at,
                    last_seen: left.last_seen,
                }
            })
            .collect(),
        Err(e) => {
            tracing::warn!(
                alert_target = target,
                error = %e,
                "cannot read the history: alerts start from no state, and one left firing by the last run is not resolved"
            );
            Vec::new()
        }
    }
}

/// How long a resolved alert waits for the history to hold the transition
/// that ends its outage (the aggregator writes it at the first flush after
/// the recovery, one `heartbeat_interval` at most, and counts its cost first,
/// 2 s at most): only a `min_duration` shorter than that waits at all.
pub const COST_WAIT: Duration = Duration::from_secs(10);

/// What the outage a resolved alert ends cost, as the history's transitions
/// out of `unhealthy` between its start and its end count it (more than one
/// when the outage passed through `unknown`): `None` when the history has no
/// count (the read failed, the cost could not be counted, or the transition
/// was not written within [`COST_WAIT`]).
async fn cost_of(history: &HistoryReader, alert: &Alert) -> Option<FaultCost> {
    let key = &alert.key;
    let filter = HistoryFilter {
        executor: Some(key.executor.clone()),
        instance: (!key.instance.is_empty()).then(|| key.instance.clone()),
        since: Some(alert.unhealthy_since),
        limit: MAX_LIMIT,
    };
    // The database may round a time to its precision.
    let end = alert.since + chrono::Duration::seconds(1);
    let waited = tokio::time::Instant::now();
    loop {
        let transitions = match history.transitions(&filter).await {
            Ok(transitions) => transitions,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read what the outage cost: the resolved alert goes without it");
                return None;
            }
        };
        let ends: Vec<_> = transitions
            .into_iter()
            .filter(|t| {
                t.hostname == key.hostname
                    && t.instance.as_deref().unwrap_or_default() == key.instance
                    && t.from == ExecutorHealthKind::Unhealthy
                    && t.to != ExecutorHealthKind::Unhealthy
                    && t.at <= end
            })
            .collect();
        let recovered = ends.iter().any(|t| t.to == alert.health);
        if recovered || waited.elapsed() >= COST_WAIT {
            return ends
                .into_iter()
                .filter_map(|t| t.cost)
                .reduce(|sum, cost| FaultCost {
                    failed: sum.failed + cost.failed,
                    up_for_retry: sum.up_for_retry + cost.up_for_retry,
                });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Queues `alert` without waiting; a full queue drops it (counted, logged).
/// `false` when the delivery thread is gone.
fn enqueue(queue: &SyncSender<Alert>, alert: Alert, stats: &TargetStats) -> bool {
    match queue.try_send(alert) {
        Ok(()) => true,
        Err(TrySendError::Full(alert)) => {
            stats.drop_one();
            tracing::warn!(
                alert_target = stats.label,
                "dropping a {} alert for {} @ {} on {}: {QUEUE_CAPACITY} alerts to {} wait already",
                alert.status.as_str(),
                alert.key.executor,
                alert.key.instance,
                alert.key.hostname,
                stats.label
            );
            true
        }
        Err(TrySendError::Disconnected(_)) => false,
    }
}

/// This host's executor instances in `report`.
pub fn observed(report: &HealthReport, hostname: &str) -> Vec<Observed> {
    report
        .executor
        .iter()
        .flat_map(|e| e.instances.iter())
        .filter(|i| i.hostname.as_deref() == Some(hostname))
        .map(|i| Observed {
            key: InstanceKey {
                executor: i.executor.clone().unwrap_or_default(),
                instance: i.instance.clone().unwrap_or_default(),
                hostname: hostname.to_owned(),
            },
            health: overseer_core::report::ExecutorHealthKind::of(&i.health),
            reason: i.health.reason().map(str::to_owned),
            since: i.since,
        })
        .collect()
}
