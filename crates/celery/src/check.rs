//! [`CeleryCheck`]: the Celery executor's health check, over every broker of its URL.
//!
//! Every network wait in it is bounded by a deadline derived from the supervisor's
//! `poll_timeout` (the picture is in `budget`), so it answers with the real reason
//! before the supervisor would say `no reply within 5s`. Brokers of a failover list
//! are probed at the same time, each through its transport's `BrokerProbe` (`redis`,
//! `amqp`); the workers are pinged on every broker that answered; `verdict` judges
//! what they said.
//!
//! The check reports the evidence and judges only what it saw answer: whether work
//! flows (a queue nobody consumes, a queue that does not go down) is judged by the
//! executor's actor from the [`Detail`](overseer_core::Detail) it returns
//! ([`overseer_core::flow`]). A queue's consumers come from RabbitMQ's own count, or,
//! on Redis, which keeps none, from the workers' answers to the ping (`active_queues`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::Utc;
use overseer_core::check::Alarm;
use overseer_core::detail::{EventsDetail, WorkerDetail};
use overseer_core::secret::SecretUrl;
use overseer_core::{Executor, ExecutorHealth, HealthCheck, Observation, reason};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::amqp::AmqpCheck;
use crate::backend::{BackendProbe, ResultBackend};
use crate::broker::{Answers, BrokerProbe, Reason};
use crate::budget::Budgets;
use crate::detail::{BrokerReport, BrokerStatus, Probe, QueueDepth, WorkerPing};
use crate::error::{BrokerUrlError, Result};
use crate::events::WorkerEvents;
use crate::ping::{DEFAULT_CONTROL_EXCHANGE, Pidbox, Unsent};
use crate::redis::RedisCheck;
use crate::tls::Verification;
use crate::url::{Broker, BrokerUrl, RedisAddress, TlsOptions, Transport};
use crate::verdict::{HeldPing, Workers, verdict};

/// The longest queue name AMQP can carry (a short string).
const AMQP_NAME_MAX: usize = 255;

/// Airflow's `[celery] worker_concurrency` by default.
pub const DEFAULT_WORKER_CONCURRENCY: u32 = 16;

/// Airflow's default queue (`[operators] default_queue`).
pub const AIRFLOW_DEFAULT_QUEUE: &str = "default";

/// How a Celery executor is checked, beside its broker URL.
#[derive(Debug, Clone)]
pub struct CheckSettings {
    /// Queues whose depth is reported (Airflow's default is `default`).
    pub queues: Vec<String>,
    /// Also ping the workers with Celery's remote control.
    pub worker_ping: bool,
    /// Follow the workers' own heartbeats (Celery's `worker` events): each
    /// worker's state, tasks and load in the detail, and `min_workers` counted
    /// without remote control. On by default.
    pub worker_events: bool,
    /// Fewer live workers is `unhealthy`: those answering the ping with
    /// `worker_ping`, else those whose heartbeats are heard (`worker_events`).
    pub min_workers: u32,
    /// The tasks each worker runs at once, as Airflow starts it (`[celery]
    /// worker_concurrency`, or the largest of `worker_autoscale`): against the
    /// tasks its heartbeats say it runs, its free slots.
    pub worker_concurrency: Option<u32>,
    /// The supervisor's `poll_timeout`: this check answers within it.
    pub poll_timeout: Duration,
    /// Celery's `control_exchange` (`celery`): the pidbox exchanges are named after it.
    pub control_exchange: String,
    /// Celery's `master_name` transport option, for `sentinel://` URLs that do not
    /// carry `?master_name=` themselves.
    pub sentinel_master_name: Option<String>,
    /// Celery's `broker_use_ssl` (what Airflow's `[celery] ssl_active`, `ssl_key`,
    /// `ssl_cert` and `ssl_cacert` become): TLS for every Redis, sentinel and AMQP
    /// broker of the URL, these options over the URL's own `ssl_*` ones.
    pub broker_use_ssl: Option<TlsOptions>,
    /// Airflow's `[celery] result_backend`, when it is set and can be asked
    /// ([`crate::backend`]).
    pub result_backend: Option<ResultBackend>,
}

impl Default for CheckSettings {
    fn default() -> Self {
        Self {
            queues: vec![AIRFLOW_DEFAULT_QUEUE.to_owned()],
            worker_ping: false,
            worker_events: true,
            min_workers: 0,
            worker_concurrency: Some(DEFAULT_WORKER_CONCURRENCY),
            poll_timeout: Duration::from_secs(5),
            control_exchange: DEFAULT_CONTROL_EXCHANGE.to_owned(),
            sentinel_master_name: None,
            broker_use_ssl: None,
            result_backend: None,
        }
    }
}

/// One broker's check.
enum BrokerCheck {
    /// Checked by its transport's probe.
    Probed(Arc<dyn BrokerProbe>),
    /// Not checked, and why (plain words).
    Unchecked(String),
}

impl BrokerCheck {
    /// The check of `broker`: its transport's probe, or why it has none.
    fn of(broker: &Broker, settings: &CheckSettings) -> Result<Self> {
        let id = broker.identity.as_str();
        Ok(match &broker.transport {
            Transport::Redis(redis)
                if redis.tls.is_some() && matches!(redis.address, RedisAddress::Unix(_)) =>
            {
                Self::Unchecked(format!(
                    "broker {id} asks for TLS over a Unix socket, which this check does not speak"
                ))
            }
            Transport::Redis(redis) => Self::Probed(Arc::new(RedisCheck::direct(redis, id))),
            Transport::Sentinel(sentinel) => {
                let master = sentinel
                    .master_name
                    .as_deref()
                    .or(settings.sentinel_master_name.as_deref())
                    .ok_or(BrokerUrlError::MissingMasterName)?;
                Self::Probed(Arc::new(RedisCheck::sentinel(sentinel, master, id)))
            }
            Transport::Amqp(amqp)
                if amqp
                    .tls
                    .as_ref()
                    .is_some_and(|t| Verification::of(t) != Verification::Full) =>
            {
                Self::Unchecked(format!(
                    "broker {id}: ssl_cert_reqs=none or ssl_check_hostname=false over AMQP is not \
                     checked (the AMQP client always verifies the certificate and its name)"
                ))
            }
            Transport::Amqp(amqp) => Self::Probed(Arc::new(AmqpCheck::new(amqp, id))),
            Transport::Unsupported { scheme } => {
                Self::Unchecked(format!("the {scheme}:// transport has no health check yet"))
            }
        })
    }
}

/// A broker of the list, with its identity.
struct Target {
    identity: String,
    check: BrokerCheck,
    /// The polls that reached it, for the connections held to it.
    answers: Answers,
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
    /// The latest probe, for the check's holder (the report gets its detail through
    /// `observe`); a std mutex, held only to copy in or out.
    latest: Mutex<Option<Probe>>,
    /// The last ping that said something of the workers ([`HeldPing`]).
    last_ping: Mutex<HeldPing>,
    /// The executor's alarm, when this check is an executor's: its brokers are
    /// then watched, each over a connection of its own.
    alarm: OnceLock<Alarm>,
    /// The watchers, started at the first probe (on the checks' runtime) and
    /// stopped when the last clone of this check goes (a restarted actor's
    /// check starts its own).
    watchers: OnceLock<Watchers>,
    /// The workers as their events tell them, with `worker_events`.
    events: Option<Arc<WorkerEvents>>,
    /// The event subscriptions, a task per broker, started at the first probe.
    subscriptions: OnceLock<Watchers>,
    /// The result backend, asked at each poll beside the brokers.
    backend: Option<BackendProbe>,
}

/// The tasks holding a connection to each of a check's brokers (watchers,
/// event subscriptions), aborted when dropped.
struct Watchers(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Watchers {
    fn drop(&mut self) {
        for watcher in &self.0 {
            watcher.abort();
        }
    }
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
        let broker = &match &settings.broker_use_ssl {
            Some(ssl) => broker.with_tls(ssl),
            None => broker.clone(),
        };
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
            targets.push(Target {
                identity: b.identity.clone(),
                check: BrokerCheck::of(b, &settings)?,
                answers: Answers::new(),
            });
        }
        let settings_events = settings
            .worker_events
            .then(|| Arc::new(WorkerEvents::default()));
        let backend = settings.result_backend.clone().map(BackendProbe::new);
        Ok(Self {
            inner: Arc::new(Inner {
                targets,
                broker: broker.clone(),
                pidbox: Pidbox::new(&settings.control_exchange),
                settings,
                instance: broker.identity(),
                latest: Mutex::new(None),
                last_ping: Mutex::new(HeldPing::default()),
                alarm: OnceLock::new(),
                watchers: OnceLock::new(),
                events: settings_events,
                subscriptions: OnceLock::new(),
                backend,
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
        // Every incarnation rings the executor's one alarm.
        let alarm = Alarm::new();
        let _ = self.inner.alarm.set(alarm.clone());
        let first = Mutex::new(Some(self.clone()));
        let (broker, settings) = (self.inner.broker.clone(), self.inner.settings.clone());
        let rings = alarm.clone();
        Executor::with_factory(name.to_owned(), move || {
            let first = first
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take();
            first.unwrap_or_else(|| {
                let check = CeleryCheck::new(&broker, settings.clone())
                    .expect("the same URL and settings built a check before");
                let _ = check.inner.alarm.set(rings.clone());
                check
            })
        })
        .with_instance(self.instance().to_owned())
        .with_alarm(alarm)
    }

    /// Checks every broker, then (when asked) pings the workers, and returns what it
    /// found. Always answers within 90 % of `poll_timeout`.
    pub async fn probe(&self) -> Probe {
        self.watch_brokers();
        self.subscribe_events();
        let checked_at = Utc::now();
        let settings = &self.inner.settings;
        let Budgets {
            brokers: budget,
            window,
            cleanup,
        } = Budgets::new(settings.poll_timeout, settings.worker_ping);
        let deadline = Instant::now() + budget;
        let backend = async {
            match &self.inner.backend {
                Some(backend) => backend.finding(budget).await,
                None => None,
            }
        };
        let (mut brokers, backend) = tokio::join!(self.probe_brokers(deadline, budget), backend);
        let workers = if settings.worker_ping {
            Some(self.ping(&mut brokers, window, cleanup).await)
        } else {
            None
        };
        let judged_ping = workers.as_ref().map(|fresh| {
            self.inner
                .last_ping
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .judged(fresh, Instant::now())
        });
        let events = self.inner.events.as_deref();
        let heard = events.and_then(WorkerEvents::workers);
        let not_up = events.and_then(WorkerEvents::unheard);
        let warming = not_up.is_none() && heard.is_none() && events.is_some();
        // Deaf for a moment that ends by itself (warming up, reconnecting
        // after the broker came back), or for good (refused).
        let passing = events.is_some_and(|events| !events.refused());
        let unheard = not_up.or_else(|| {
            warming.then(|| {
                "the workers' heartbeats have not been listened for long enough yet".to_owned()
            })
        });
        let (health, reason) = verdict(
            &brokers,
            Workers {
                ping: judged_ping.as_ref(),
                heard: heard.as_deref(),
                unheard: unheard.as_deref(),
                passing,
            },
            window,
            settings.min_workers,
        );
        // A result backend that does not answer is a fault of its own, whatever
        // the brokers and workers say.
        let (health, reason) = match (backend, health) {
            (None, health) => (health, reason),
            (Some(finding), ExecutorHealth::Unhealthy { reason }) => {
                let both = format!("{reason}; {finding}");
                (ExecutorHealth::unhealthy(both.clone()), Some(both))
            }
            (Some(finding), _) => (ExecutorHealth::unhealthy(finding.clone()), Some(finding)),
        };
        // Until the heartbeats can say whether a worker is gone, a verdict that
        // a broker's answer would make healthy (or unknown for the workers'
        // count alone) waits (bounded: `SETTLE_WITHIN`). One no broker was
        // checked for, or an unhealthy one, has nothing to wait for.
        let answered = brokers.iter().any(|b| b.status == BrokerStatus::Answered);
        let pending = answered
            && !matches!(health, ExecutorHealth::Unhealthy { .. })
            && heard.is_none()
            && events.is_some_and(WorkerEvents::pending);
        let subscriptions = events
            .map(WorkerEvents::subscriptions)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|s| {
                Some(EventsDetail {
                    broker: self.inner.targets.get(s.index)?.identity.clone(),
                    state: s.state.to_owned(),
                    received: s.received,
                    subscribed: s.subscribed,
                    overflows: s.overflows,
                    backlog: s.backlog,
                })
            })
            .collect();
        Probe {
            health,
            reason,
            pending,
            checked_at,
            brokers,
            workers,
            subscriptions,
            heartbeats: heard.map(|heard| {
                heard
                    .into_iter()
                    .map(|worker| {
                        let concurrency = settings.worker_concurrency;
                        let free =
                            concurrency
                                .zip(worker.heartbeat.active)
                                .map(|(slots, active)| {
                                    slots.saturating_sub(u32::try_from(active).unwrap_or(u32::MAX))
                                });
                        WorkerDetail {
                            name: worker.name,
                            queues: None,
                            state: Some(worker.state.as_str().to_owned()),
                            concurrency,
                            free_concurrency: free,
                            heartbeat: Some(worker.heartbeat),
                        }
                    })
                    .collect()
            }),
        }
    }

    /// Subscribes to the workers' events on every checked broker, once, with
    /// `worker_events`: a task per broker, on the runtime the probe runs on
    /// ([`BrokerProbe::subscribe`]).
    fn subscribe_events(&self) {
        let Some(events) = &self.inner.events else {
            return;
        };
        self.inner.subscriptions.get_or_init(|| {
            Watchers(
                self.inner
                    .targets
                    .iter()
                    .enumerate()
                    .filter_map(|(index, target)| match &target.check {
                        BrokerCheck::Probed(probe) => {
                            Some((index, Arc::clone(probe), target.answers.clone()))
                        }
                        BrokerCheck::Unchecked(_) => None,
                    })
                    .map(|(index, probe, answers)| {
                        let events = Arc::clone(events);
                        tokio::spawn(async move { probe.subscribe(index, events, answers).await })
                    })
                    .chain(self.inner.alarm.get().map(|alarm| {
                        let (events, alarm) = (Arc::clone(events), alarm.clone());
                        tokio::spawn(async move { ring_on_worker_news(&events, &alarm).await })
                    }))
                    .collect(),
            )
        });
    }

    /// Starts watching every checked broker, once, when this check has an alarm
    /// to ring (it is an executor's): a task per broker, on the runtime the
    /// probe runs on, each holding a connection of its own ([`BrokerProbe::watch`]).
    fn watch_brokers(&self) {
        let Some(alarm) = self.inner.alarm.get() else {
            return;
        };
        self.inner.watchers.get_or_init(|| {
            Watchers(
                self.inner
                    .targets
                    .iter()
                    .filter_map(|target| match &target.check {
                        BrokerCheck::Probed(probe) => {
                            Some((Arc::clone(probe), target.answers.clone()))
                        }
                        BrokerCheck::Unchecked(_) => None,
                    })
                    .map(|(probe, answers)| {
                        let alarm = alarm.clone();
                        tokio::spawn(async move { probe.watch(alarm, answers).await })
                    })
                    .collect(),
            )
        });
    }

    /// Probes every broker at once, each before `deadline`; a task per broker,
    /// aborted if this future is dropped.
    async fn probe_brokers(&self, deadline: Instant, budget: Duration) -> Vec<BrokerReport> {
        let queues = Arc::new(self.inner.settings.queues.clone());
        let mut tasks = JoinSet::new();
        for index in 0..self.inner.targets.len() {
            let this = self.clone();
            let queues = Arc::clone(&queues);
            tasks.spawn(async move {
                let target = &this.inner.targets[index];
                let result = match &target.check {
                    BrokerCheck::Probed(probe) => {
                        probe.probe(&queues, deadline, budget).await.map_err(Some)
                    }
                    BrokerCheck::Unchecked(_) => Err(None),
                };
                if result.is_ok() {
                    target.answers.answered();
                }
                (index, result)
            });
        }
        let mut results: Vec<Option<std::result::Result<Vec<QueueDepth>, Option<Reason>>>> =
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
        brokers
    }

    /// Pings the workers on every broker that answered, at the same time, and
    /// counts each broker's consumers that it could not count itself from the
    /// workers that answered on it.
    async fn ping(
        &self,
        brokers: &mut [BrokerReport],
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
                let workers = match &this.inner.targets[index].check {
                    BrokerCheck::Probed(probe) => probe.ping(pidbox, window_end, cleanup).await,
                    BrokerCheck::Unchecked(_) => Ok(Vec::new()),
                };
                (index, workers)
            });
        }
        let mut answered = BTreeMap::new();
        let (mut errors, mut failed, mut sent) = (Vec::new(), Vec::new(), false);
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((index, Ok(workers))) => {
                    sent = true;
                    count_consumers(&mut brokers[index].queues, &workers);
                    // Listed once, even when heard on two brokers of a failover list.
                    for worker in workers {
                        let queues = answered.entry(worker.name).or_insert(None);
                        if queues.is_none() {
                            *queues = worker.queues;
                        }
                    }
                }
                Ok((_, Err(unsent))) => {
                    errors.push(unsent.reason().to_owned());
                    if let Unsent::Failed(reason) = unsent {
                        failed.push(reason);
                    }
                }
                // Overseer's own fault: it says nothing of the broker.
                Err(e) => errors.push(format!("the ping task failed: {e}")),
            }
        }
        WorkerPing {
            answered: answered
                .into_iter()
                .map(|(name, queues)| WorkerDetail {
                    name,
                    queues,
                    state: None,
                    concurrency: None,
                    free_concurrency: None,
                    heartbeat: None,
                })
                .collect(),
            window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
            errors,
            sent,
            failed,
        }
    }
}

/// Fills in the consumers of each queue its broker could not count (Redis keeps no
/// count; RabbitMQ's own is kept), from the workers that answered the ping on that
/// broker: how many named the queue. Left unknown when one of them did not say
/// which queues it consumes, since a count without it could be too low, and a
/// queue that could not be read stays unknown too.
fn count_consumers(queues: &mut [QueueDepth], workers: &[WorkerDetail]) {
    let Some(consumed) = workers
        .iter()
        .map(|w| w.queues.as_deref())
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    for queue in queues
        .iter_mut()
        .filter(|q| q.consumers.is_none() && q.messages.is_some())
    {
        let count = consumed
            .iter()
            .filter(|names| names.contains(&queue.queue))
            .count();
        queue.consumers = Some(u32::try_from(count).unwrap_or(u32::MAX));
    }
}

/// Workers heard by their heartbeats, counted by state: `3 online, 1 gone`.
fn workers_by_state(workers: &[overseer_core::detail::WorkerDetail]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for worker in workers {
        let state = worker.state.as_deref().unwrap_or("unknown");
        *counts.entry(state).or_default() += 1;
    }
    if counts.is_empty() {
        return "none".to_owned();
    }
    counts
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[async_trait::async_trait]
impl HealthCheck for CeleryCheck {
    /// The verdict of [`Self::observe`].
    async fn get_health(&self) -> ExecutorHealth {
        self.observe().await.health
    }

    /// Probes the brokers (and pings the workers), keeps the probe as the latest
    /// ([`CeleryCheck::latest`]), and returns its verdict with its [`Probe::detail`].
    async fn observe(&self) -> Observation {
        let probe = self.probe().await;
        // The brokers in full (as many as configured); the workers counted, not
        // listed: there may be 10,000 of them, and a line per poll of megabytes.
        tracing::debug!(
            instance = %self.inner.instance,
            health = probe.health.as_str(),
            reason = probe.reason.as_deref().unwrap_or(""),
            brokers = %serde_json::to_string(&probe.brokers).unwrap_or_default(),
            pinged = %probe.workers.as_ref().map_or_else(
                || "off".to_owned(),
                |p| format!("{} answered, {} errors", p.answered.len(), p.errors.len())
            ),
            heard = %probe.heartbeats.as_deref().map_or_else(|| "not yet".to_owned(), workers_by_state),
            "celery check"
        );
        let detail = probe.detail();
        // A healthy verdict's reason is a note: the failover brokers that did
        // not answer.
        let note = (probe.health == ExecutorHealth::Healthy)
            .then(|| probe.reason.clone())
            .flatten();
        // The reason and note were sanitised by `verdict`; again here, at the
        // check's exit, whatever path made them.
        let observation = reason::sanitise_observation(Observation {
            health: probe.health.clone(),
            detail: (!detail.is_empty()).then_some(detail),
            note,
            pending: probe.pending,
        });
        *self
            .inner
            .latest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(probe);
        observation
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

/// Rings the executor's alarm once the workers' heartbeats can be judged
/// (warmed up, refused, or [`crate::events::SETTLE_WITHIN`] passed): the
/// verdict that waited for them is made then, not at the next tick, which
/// may be an hour away. Then rings it each time a worker falls silent for two
/// of its heartbeats: its death is judged then, not up to a poll later.
async fn ring_on_worker_news(events: &WorkerEvents, alarm: &Alarm) {
    loop {
        tokio::time::sleep(SETTLE_LOOK_EVERY).await;
        // Asking for the workers warms them up once listened long enough.
        let _ = events.workers();
        if !events.pending() {
            alarm.ring();
            break;
        }
    }
    loop {
        tokio::time::sleep(SETTLE_LOOK_EVERY).await;
        if events.fell_silent() {
            alarm.ring();
        }
    }
}

/// How often [`ring_on_worker_news`] looks.
const SETTLE_LOOK_EVERY: Duration = Duration::from_millis(250);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn depth(queue: &str, messages: Option<u64>, consumers: Option<u32>) -> QueueDepth {
        QueueDepth {
            queue: queue.into(),
            messages,
            consumers,
            note: None,
        }
    }

    /// A worker that answered the ping, with the queues it said (`None`: not said).
    pub(crate) fn worker(name: &str, queues: Option<&[&str]>) -> WorkerDetail {
        WorkerDetail {
            name: name.into(),
            queues: queues.map(|q| q.iter().map(|s| s.to_string()).collect()),
            state: None,
            concurrency: None,
            free_concurrency: None,
            heartbeat: None,
        }
    }

    #[test]
    fn consumers_are_counted_from_the_workers_only_where_the_broker_could_not() {
        let queues = || {
            vec![
                depth("a", Some(0), None),
                depth("b", Some(4), None),
                depth("counted", Some(1), Some(3)),
                depth("unread", None, None),
            ]
        };
        let two = [
            worker("celery@1", Some(&["a", "b"])),
            worker("celery@2", Some(&["a"])),
        ];
        let mut counted = queues();
        count_consumers(&mut counted, &two);
        assert_eq!(
            counted.iter().map(|q| q.consumers).collect::<Vec<_>>(),
            [Some(2), Some(1), Some(3), None]
        );

        let mut none_answered = queues();
        count_consumers(&mut none_answered, &[]);
        assert_eq!(
            none_answered
                .iter()
                .map(|q| q.consumers)
                .collect::<Vec<_>>(),
            [Some(0), Some(0), Some(3), None]
        );

        let mut one_silent = queues();
        count_consumers(
            &mut one_silent,
            &[worker("celery@1", Some(&["a"])), worker("celery@2", None)],
        );
        assert_eq!(
            one_silent.iter().map(|q| q.consumers).collect::<Vec<_>>(),
            [None, None, Some(3), None]
        );
    }
}
