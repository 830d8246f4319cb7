//! [`CeleryCheck`]: the Celery executor's health check, over every broker of its URL.
//!
//! # Who bounds what
//! The supervisor gives each poll `poll_timeout` (5 s by default) and reports
//! `no reply within 5s` itself past it. This check answers first, with the real
//! reason, because every network wait in it is bounded by a deadline derived here:
//!
//! ```text
//! poll_timeout ─┬─ CHECK_SHARE (90 %) ─┬─ brokers: connect, PING/ROLE/LLEN or passive declares
//!               │                      └─ ping window: min(PING_WINDOW = 1 s, a third), if worker_ping
//!               └─ the margin (10 %) ──┬─ the ping's cleanup: min(CLEANUP_WAIT = 250 ms, half of it)
//!                                      └─ the rest: for the verdict to reach the supervisor
//! ```
//!
//! With the defaults: brokers get 3.5 s, the ping 1 s, its cleanup 0.25 s, and
//! 0.25 s is left over (4.5 s and 0.5 s without the ping).
//! Brokers of a failover list are probed at the same time, each within the same
//! deadline; the workers are pinged on every broker that answered.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use overseer_core::secret::SecretUrl;
use overseer_core::{Executor, ExecutorHealth, HealthCheck};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::amqp::AmqpCheck;
use crate::detail::{BrokerReport, BrokerStatus, Probe, QueueDepth, WorkerPing};
use crate::error::{BrokerUrlError, Result};
use crate::ping::{CLEANUP_WAIT, DEFAULT_CONTROL_EXCHANGE, PING_WINDOW, Pidbox};
use crate::redis::RedisCheck;
use crate::url::{BrokerUrl, Transport};

/// The share of `poll_timeout` this check spends at most; the rest is the margin
/// for the verdict to travel back before the supervisor's own timeout fires.
const CHECK_SHARE: f64 = 0.9;

/// The longest queue name AMQP can carry (a short string).
const AMQP_NAME_MAX: usize = 255;

/// Airflow's default queue (`[operators] default_queue`).
pub const AIRFLOW_DEFAULT_QUEUE: &str = "default";

/// How one check splits the poll's timeout (see the module's picture).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Budgets {
    /// For the brokers: connect, `PING`/`ROLE`/`LLEN`, passive declares.
    brokers: Duration,
    /// For the workers to answer the ping (zero when `worker_ping` is off).
    window: Duration,
    /// For the ping's cleanup, after the window, inside the margin.
    cleanup: Duration,
}

/// How a Celery executor is checked, beside its broker URL.
#[derive(Debug, Clone)]
pub struct CheckSettings {
    /// Queues whose depth is reported (Airflow's default is `default`).
    pub queues: Vec<String>,
    /// Also ping the workers with Celery's remote control.
    pub worker_ping: bool,
    /// Fewer workers answering the ping is `unhealthy` (needs `worker_ping`).
    pub min_workers: u32,
    /// The supervisor's `poll_timeout`: this check answers within it.
    pub poll_timeout: Duration,
    /// Celery's `control_exchange` (`celery`): the pidbox exchanges are named after it.
    pub control_exchange: String,
    /// Celery's `master_name` transport option, for `sentinel://` URLs that do not
    /// carry `?master_name=` themselves.
    pub sentinel_master_name: Option<String>,
}

impl Default for CheckSettings {
    fn default() -> Self {
        Self {
            queues: vec![AIRFLOW_DEFAULT_QUEUE.to_owned()],
            worker_ping: false,
            min_workers: 0,
            poll_timeout: Duration::from_secs(5),
            control_exchange: DEFAULT_CONTROL_EXCHANGE.to_owned(),
            sentinel_master_name: None,
        }
    }
}

/// One broker's check.
enum BrokerCheck {
    Redis(RedisCheck),
    Amqp(AmqpCheck),
    /// Not checked, and why (plain words).
    Unchecked(String),
}

/// A broker of the list, with its identity.
struct Target {
    identity: String,
    check: BrokerCheck,
}

/// What the clones of one check share.
struct Inner {
    targets: Vec<Target>,
    /// The URL it was built from, to build a fresh check for a restarted actor.
    broker: BrokerUrl,
    settings: CheckSettings,
    pidbox: Pidbox,
    /// The instance identity: every broker, no credentials.
    instance: String,
    /// The latest probe, for the HTTP layer; a std mutex, held only to copy in or out.
    latest: Mutex<Option<Probe>>,
}

/// The Celery executor's health check. Cloning it is cheap; clones share the
/// pooled broker connections and the latest [`Probe`].
#[derive(Clone)]
pub struct CeleryCheck {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CeleryCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CeleryCheck")
            .field("instance", &self.inner.instance)
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl CeleryCheck {
    /// A check of `broker` with `settings`. Fails on settings that can never work
    /// (a sentinel broker without a master name, a queue name AMQP cannot carry).
    pub fn new(broker: &BrokerUrl, settings: CheckSettings) -> Result<Self> {
        let has_amqp = broker
            .brokers()
            .iter()
            .any(|b| matches!(b.transport, Transport::Amqp(_)));
        for queue in &settings.queues {
            if queue.is_empty() {
                return Err(BrokerUrlError::EmptyQueueName);
            }
            if has_amqp && queue.len() > AMQP_NAME_MAX {
                return Err(BrokerUrlError::QueueNameTooLong {
                    name: queue.chars().take(40).collect(),
                });
            }
        }
        let mut targets = Vec::with_capacity(broker.brokers().len());
        for b in broker.brokers() {
            let id = b.identity.as_str();
            let check = match &b.transport {
                Transport::Redis(redis) if redis.tls.is_some() => BrokerCheck::Unchecked(format!(
                    "broker {id} uses TLS, which this check does not speak yet"
                )),
                Transport::Redis(redis) => BrokerCheck::Redis(RedisCheck::direct(redis, id)),
                Transport::Sentinel(sentinel) => {
                    let master = sentinel
                        .master_name
                        .as_deref()
                        .or(settings.sentinel_master_name.as_deref())
                        .ok_or(BrokerUrlError::MissingMasterName)?;
                    if sentinel.tls.is_some() {
                        BrokerCheck::Unchecked(format!(
                            "broker {id} uses TLS, which this check does not speak yet"
                        ))
                    } else {
                        BrokerCheck::Redis(RedisCheck::sentinel(sentinel, master, id))
                    }
                }
                Transport::Amqp(amqp) if amqp.tls.is_some() => BrokerCheck::Unchecked(format!(
                    "broker {id} uses TLS, which this check does not speak yet"
                )),
                Transport::Amqp(amqp) => BrokerCheck::Amqp(AmqpCheck::new(amqp, id)),
                Transport::Unsupported { scheme } => BrokerCheck::Unchecked(format!(
                    "the {scheme}:// transport has no health check yet"
                )),
            };
            targets.push(Target {
                identity: b.identity.clone(),
                check,
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                targets,
                broker: broker.clone(),
                pidbox: Pidbox::new(&settings.control_exchange),
                settings,
                instance: broker.identity(),
                latest: Mutex::new(None),
            }),
        })
    }

    /// The instance identity: the broker URL without credentials, `;`-separated.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// The latest probe, if one has finished.
    pub fn latest(&self) -> Option<Probe> {
        self.inner
            .latest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// This check as a supervised executor named `name`, its instance the broker's identity.
    pub fn executor(&self, name: &str) -> Executor {
        // The first actor gets this very check (so its holder sees its probes); an
        // actor restarted after a panic gets a fresh one, with new connections and
        // nothing carried over from the incarnation that panicked.
        let first = Mutex::new(Some(self.clone()));
        let (broker, settings) = (self.inner.broker.clone(), self.inner.settings.clone());
        Executor::with_factory(name.to_owned(), move || {
            let first = first
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take();
            first.unwrap_or_else(|| {
                CeleryCheck::new(&broker, settings.clone())
                    .expect("the same URL and settings built a check before")
            })
        })
        .with_instance(self.instance().to_owned())
    }

    /// How this check splits the poll's timeout.
    fn budgets(&self) -> Budgets {
        let timeout = self.inner.settings.poll_timeout;
        let total = timeout.mul_f64(CHECK_SHARE);
        // The ping's cleanup runs in the margin, and takes at most half of it.
        let cleanup = CLEANUP_WAIT.min((timeout - total) / 2);
        if !self.inner.settings.worker_ping {
            return Budgets {
                brokers: total,
                window: Duration::ZERO,
                cleanup,
            };
        }
        let window = PING_WINDOW.min(total / 3);
        Budgets {
            brokers: total - window,
            window,
            cleanup,
        }
    }

    /// Checks every broker, then (when asked) pings the workers, and returns what it
    /// found. Always answers within 90 % of `poll_timeout`.
    pub async fn probe(&self) -> Probe {
        let checked_at = Utc::now();
        let Budgets {
            brokers: budget,
            window,
            cleanup,
        } = self.budgets();
        let deadline = Instant::now() + budget;
        let queues = Arc::new(self.inner.settings.queues.clone());

        // Every broker at once; a task per broker, aborted if this future is dropped.
        let mut tasks = JoinSet::new();
        for index in 0..self.inner.targets.len() {
            let this = self.clone();
            let queues = Arc::clone(&queues);
            tasks.spawn(async move {
                let target = &this.inner.targets[index];
                let result = match &target.check {
                    BrokerCheck::Redis(check) => {
                        check.probe(&queues, deadline, budget).await.map_err(Some)
                    }
                    BrokerCheck::Amqp(check) => {
                        check.probe(&queues, deadline, budget).await.map_err(Some)
                    }
                    BrokerCheck::Unchecked(_) => Err(None),
                };
                (index, result)
            });
        }
        let mut results: Vec<Option<std::result::Result<Vec<QueueDepth>, Option<String>>>> =
            (0..self.inner.targets.len()).map(|_| None).collect();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((index, result)) => results[index] = Some(result),
                Err(e) => tracing::error!(error = %e, "a broker probe task failed"),
            }
        }

        let mut brokers = Vec::with_capacity(results.len());
        for (target, result) in self.inner.targets.iter().zip(results) {
            let (status, queues) = match (result, &target.check) {
                (_, BrokerCheck::Unchecked(why)) => {
                    (BrokerStatus::Unchecked(why.clone()), Vec::new())
                }
                (Some(Ok(queues)), _) => (BrokerStatus::Answered, queues),
                (Some(Err(Some(reason))), _) => (BrokerStatus::Failed(reason), Vec::new()),
                _ => (
                    BrokerStatus::Failed(format!("broker {}: the check failed", target.identity)),
                    Vec::new(),
                ),
            };
            brokers.push(BrokerReport {
                broker: target.identity.clone(),
                status,
                queues,
            });
        }

        let workers = if self.inner.settings.worker_ping {
            Some(self.ping(&brokers, window, cleanup).await)
        } else {
            None
        };
        let (health, reason) = self.verdict(&brokers, workers.as_ref(), window);
        Probe {
            health,
            reason,
            checked_at,
            brokers,
            workers,
        }
    }

    /// Pings the workers on every broker that answered, at the same time.
    async fn ping(
        &self,
        brokers: &[BrokerReport],
        window: Duration,
        cleanup: Duration,
    ) -> WorkerPing {
        // The window starts now: the broker phase may have ended well before its deadline.
        let window_end = Instant::now() + window;
        let mut tasks = JoinSet::new();
        for (index, report) in brokers.iter().enumerate() {
            if report.status != BrokerStatus::Answered {
                continue;
            }
            let this = self.clone();
            tasks.spawn(async move {
                let pidbox = &this.inner.pidbox;
                match &this.inner.targets[index].check {
                    BrokerCheck::Redis(check) => check.ping(pidbox, window_end, cleanup).await,
                    BrokerCheck::Amqp(check) => check.ping(pidbox, window_end, cleanup).await,
                    BrokerCheck::Unchecked(_) => Ok(Vec::new()),
                }
            });
        }
        let mut answered = BTreeSet::new();
        let mut errors = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(names)) => answered.extend(names),
                Ok(Err(reason)) => errors.push(reason),
                Err(e) => errors.push(format!("the ping task failed: {e}")),
            }
        }
        WorkerPing {
            answered: answered.into_iter().collect(),
            window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
            errors,
        }
    }

    /// The verdict and its reason, from what the brokers and workers answered.
    fn verdict(
        &self,
        brokers: &[BrokerReport],
        workers: Option<&WorkerPing>,
        window: Duration,
    ) -> (ExecutorHealth, Option<String>) {
        let failed: Vec<&str> = brokers
            .iter()
            .filter_map(|b| match &b.status {
                BrokerStatus::Failed(reason) => Some(reason.as_str()),
                _ => None,
            })
            .collect();
        let answered = brokers.iter().any(|b| b.status == BrokerStatus::Answered);
        if !answered && failed.is_empty() {
            let unchecked: Vec<&str> = brokers
                .iter()
                .filter_map(|b| match &b.status {
                    BrokerStatus::Unchecked(why) => Some(why.as_str()),
                    _ => None,
                })
                .collect();
            return (ExecutorHealth::Unknown, Some(unchecked.join("; ")));
        }
        if !answered {
            return (
                ExecutorHealth::unhealthy(failed.join("; ")),
                Some(failed.join("; ")),
            );
        }
        let min = self.inner.settings.min_workers;
        if let Some(ping) = workers {
            let count = ping.answered.len();
            if count < min as usize {
                let mut reason = format!(
                    "{count} of at least {min} workers answered ping within {}",
                    describe_duration(window)
                );
                if !ping.errors.is_empty() {
                    reason = format!("{reason} ({})", ping.errors.join("; "));
                }
                return (ExecutorHealth::unhealthy(reason.clone()), Some(reason));
            }
        }
        let note = (!failed.is_empty()).then(|| {
            format!(
                "healthy through failover; not answering: {}",
                failed.join("; ")
            )
        });
        (ExecutorHealth::Healthy, note)
    }
}

#[async_trait::async_trait]
impl HealthCheck for CeleryCheck {
    async fn get_health(&self) -> ExecutorHealth {
        let probe = self.probe().await;
        tracing::debug!(
            instance = %self.inner.instance,
            health = probe.health.as_str(),
            reason = probe.reason.as_deref().unwrap_or(""),
            detail = %serde_json::to_string(&probe).unwrap_or_default(),
            "celery check"
        );
        let health = probe.health.clone();
        *self
            .inner
            .latest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(probe);
        health
    }
}

/// The supervised executor for a Celery deployment: what the composition root calls.
///
/// `broker_url` is parsed as Celery would (see [`crate::url`]); the instance is the
/// URL without credentials. A malformed URL is an error whose `Display` is one line
/// without the password.
pub fn executor(
    name: &str,
    broker_url: &SecretUrl,
    queues: &[String],
    worker_ping: bool,
    min_workers: u32,
    poll_timeout: Duration,
) -> Result<Executor> {
    let settings = CheckSettings {
        queues: queues.to_vec(),
        worker_ping,
        min_workers,
        poll_timeout,
        ..CheckSettings::default()
    };
    executor_with(name, broker_url, settings)
}

/// [`executor`] with every setting (control exchange, sentinel master name).
pub fn executor_with(
    name: &str,
    broker_url: &SecretUrl,
    settings: CheckSettings,
) -> Result<Executor> {
    let broker = BrokerUrl::parse(broker_url.expose_secret())?;
    Ok(CeleryCheck::new(&broker, settings)?.executor(name))
}

/// A duration as an operator reads it in a reason: `1s`, `4.5s`, `800ms`.
pub(crate) fn describe_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        let tenths = (ms + 50) / 100;
        if tenths % 10 == 0 {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_plainly() {
        assert_eq!(describe_duration(Duration::from_secs(1)), "1s");
        assert_eq!(describe_duration(Duration::from_millis(4500)), "4.5s");
        assert_eq!(describe_duration(Duration::from_millis(3500)), "3.5s");
        assert_eq!(describe_duration(Duration::from_millis(800)), "800ms");
        assert_eq!(describe_duration(Duration::from_millis(1999)), "2s");
    }

    #[test]
    fn the_budgets_fit_inside_the_poll_timeout() {
        let url = BrokerUrl::parse("redis://h:6379/0").unwrap();
        for (timeout, ping, brokers, window, cleanup) in [
            (5_000, false, 4_500, 0, 250),
            (5_000, true, 3_500, 1_000, 250),
            (1_500, true, 900, 450, 75),
        ] {
            let check = CeleryCheck::new(
                &url,
                CheckSettings {
                    worker_ping: ping,
                    poll_timeout: Duration::from_millis(timeout),
                    ..CheckSettings::default()
                },
            )
            .unwrap();
            let b = check.budgets();
            assert_eq!(
                (
                    b.brokers.as_millis(),
                    b.window.as_millis(),
                    b.cleanup.as_millis()
                ),
                (brokers, window, cleanup),
                "{timeout} {ping}"
            );
            assert!(b.brokers + b.window + b.cleanup < Duration::from_millis(timeout));
        }
    }
}
