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
//! ([`overseer_core::rules`]). A queue's consumers come from RabbitMQ's own count, or,
//! on Redis, which keeps none, from the workers' answers to `active_queues`: the
//! ping's, with `worker_ping`, else the `inquiry`'s, made by default when a worker
//! comes online and every few minutes.
//!
//! # Construction
//!
//! [`CeleryCheck::new`] builds everything a check is from its URL and settings
//! (a probe per broker, the pidbox, the record of the workers' events), and
//! starts nothing. An executor's check ([`executor`]) is built the same way, with
//! the executor's alarm, by its actor's factory at each start and restart: every
//! incarnation has its own, nothing carried over from one that panicked.
//!
//! What it holds between polls (the broker watches, the event subscriptions:
//! `held`) is started by [`CeleryCheck::start`], which the executor's actor
//! calls ([`HealthCheck::start`]) at the start of each incarnation's first
//! run, on the runtime the runs are on: core builds a check on the actors'
//! thread and runs it on the checks' own runtime (the pool's `overseer-io`
//! threads, or a runner given to the builder). That runtime outlives the
//! check; the held tasks stop with the check's last clone. A program that
//! probes a check itself calls `start` first.
//!
//! # Layout
//! - `settings`: [`CheckSettings`], Airflow's defaults, the queues refused.
//! - `brokers`: each broker with its transport's probe, probed at once.
//! - `ping`: the workers pinged on every broker that answered.
//! - `inquiry`: which queues each worker consumes, asked rarely, by default.
//! - `assemble`: what a run gathered judged into a [`Probe`].
//! - `held`: the connections held between polls.
//! - `executor`: the check as a supervised executor ([`executor`], [`executor_with`]).

mod assemble;
mod brokers;
mod executor;
mod held;
mod inquiry;
pub(crate) mod ping;
mod settings;

use std::sync::{Arc, Mutex, OnceLock};

use chrono::Utc;
use overseer_core::check::Alarm;
use overseer_core::{ExecutorHealth, HealthCheck, Observation};
use tokio::time::Instant;

use crate::backend::BackendProbe;
use crate::budget::Budgets;
use crate::detail::Probe;
use crate::error::Result;
use crate::events::{State, WorkerEvents};
use crate::ping::Pidbox;
use crate::url::BrokerUrl;
use crate::verdict::HeldPing;

use assemble::Gathered;
use brokers::Target;
use held::Held;
use inquiry::Inquiry;

pub use executor::{executor, executor_with};
pub use settings::{AIRFLOW_DEFAULT_QUEUE, CheckSettings, DEFAULT_WORKER_CONCURRENCY};

/// What the clones of one check share.
struct Inner {
    /// The URL it was built from (TLS settings merged), to build the checks
    /// of its executor's incarnations.
    broker: BrokerUrl,
    settings: CheckSettings,
    /// The instance identity: every broker, no credentials.
    instance: String,
    /// Each broker of the URL with its probe.
    targets: Vec<Target>,
    /// Celery's remote-control names, for the ping.
    pidbox: Pidbox,
    /// The result backend, asked at each poll beside the brokers.
    backend: Option<BackendProbe>,
    /// The last ping that said something of the workers ([`HeldPing`]).
    last_ping: Mutex<HeldPing>,
    /// The last run's probe, to stand for one run whose broker was late
    /// ([`CeleryCheck::late`]).
    last_run: Mutex<Option<Probe>>,
    /// Which queues each worker consumes, without `worker_ping` (`inquiry`).
    inquiry: Mutex<Inquiry>,
    /// The workers as their events tell them, with `worker_events`.
    events: Option<Arc<WorkerEvents>>,
    /// The executor's alarm, when this check is an executor's: its brokers are
    /// then watched, each over a connection of its own.
    alarm: Option<Alarm>,
    /// The connections held between polls, started by the first run (`held`).
    held: OnceLock<Held>,
}

/// The Celery executor's health check. Cloning it is cheap; clones share the
/// pooled broker connections and the connections it holds.
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
        Self::build(broker, settings, None)
    }

    /// [`Self::new`], ringing `alarm` (an executor's) when a held connection
    /// says its broker is lost.
    fn build(broker: &BrokerUrl, settings: CheckSettings, alarm: Option<Alarm>) -> Result<Self> {
        let broker = match &settings.broker_use_ssl {
            Some(ssl) => broker.with_tls(ssl),
            None => broker.clone(),
        };
        settings.check_queues(&broker)?;
        let targets = broker
            .brokers()
            .iter()
            .map(|b| Target::of(b, &settings))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            inner: Arc::new(Inner {
                instance: broker.identity(),
                targets,
                pidbox: Pidbox::new(&settings.control_exchange),
                backend: settings.result_backend.clone().map(BackendProbe::new),
                last_ping: Mutex::new(HeldPing::default()),
                last_run: Mutex::new(None),
                inquiry: Mutex::new(Inquiry::default()),
                events: settings
                    .worker_events
                    .then(|| Arc::new(WorkerEvents::default())),
                alarm,
                held: OnceLock::new(),
                broker,
                settings,
            }),
        })
    }

    /// The instance identity: the broker URL without credentials, `;`-separated.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// Starts the connections this check holds between polls (`held`): a
    /// watch per checked broker (with an alarm), a subscription to the
    /// workers' events per broker (`worker_events`), on the current runtime,
    /// once; they end with the check's last clone. The executor's actor calls
    /// it ([`HealthCheck::start`]) on the runtime the check's runs are on;
    /// the module's header says why not when the check is built.
    pub fn start(&self) {
        let inner = &self.inner;
        inner.held.get_or_init(|| {
            Held::start(
                &tokio::runtime::Handle::current(),
                &inner.targets,
                inner.alarm.as_ref(),
                inner.events.as_ref(),
            )
        });
    }

    /// One run: checks every broker, then (when asked) pings the workers, and
    /// returns what it found; [`Probe::observation`] is what the executor's
    /// actor gets of it. Always answers within 90 % of `poll_timeout`. The
    /// connections the check holds between runs are [`Self::start`]'s: without
    /// them no broker's loss rings, and no worker's heartbeat is heard.
    pub async fn probe(&self) -> Probe {
        let inner = &self.inner;
        let checked_at = Utc::now();
        let settings = &inner.settings;
        // Without the ping, the workers heard online are asked what they
        // consume when one is new, and rarely besides (`inquiry`).
        let heard = inner.events.as_deref().and_then(WorkerEvents::workers);
        let online: Vec<&str> = heard
            .iter()
            .flatten()
            .filter(|w| w.state == State::Online)
            .map(|w| w.name.as_str())
            .collect();
        let inquire = !settings.worker_ping
            && heard.is_some()
            && lock(&inner.inquiry).start(online.iter().copied(), Instant::now());
        let Budgets {
            brokers: budget,
            window,
            cleanup,
        } = Budgets::new(settings.poll_timeout, settings.worker_ping);
        let deadline = Instant::now() + budget;
        let backend = async {
            match &inner.backend {
                Some(backend) => backend.finding(budget).await,
                None => None,
            }
        };
        let (probed, backend) = tokio::join!(self.probe_brokers(deadline, budget), backend);
        if probed.late
            && let Some(held) = self.late(checked_at)
        {
            return held;
        }
        let mut brokers = probed.brokers;
        let workers = if settings.worker_ping {
            Some(self.ping(&mut brokers, window, cleanup).await)
        } else {
            if inquire {
                self.inquire(brokers.clone());
            }
            let mut inquiry = lock(&inner.inquiry);
            if let Some(heard) = &heard {
                inquiry.keep_only(heard.iter().map(|w| w.name.as_str()));
            }
            inquiry.count_consumers(&mut brokers, &online);
            None
        };
        let probe = self.assemble(Gathered {
            checked_at,
            brokers,
            workers,
            backend,
            window,
        });
        self.log(&probe);
        *lock(&inner.last_run) = Some(probe.clone());
        probe
    }

    /// A run whose broker, having answered the last one, ran out its budget
    /// without a word ([`brokers::Probed::late`]): on a loaded host the wait
    /// may have been this host's as much as the broker's, so the last run's
    /// probe stands for this one, and the executor's alarm asks for another
    /// run at once (the supervisor polls again as soon as this one answers).
    /// If that one is late too, the broker is: its reason is the verdict.
    /// A frozen broker is named one budget later; a host too slow for one
    /// poll fails nobody. `None` before any run finished (nothing to stand).
    fn late(&self, checked_at: chrono::DateTime<Utc>) -> Option<Probe> {
        let mut probe = lock(&self.inner.last_run).clone()?;
        probe.checked_at = checked_at;
        tracing::debug!(
            instance = %self.inner.instance,
            "a broker did not answer within its budget; the last run's verdict stands while it is asked again at once"
        );
        if let Some(alarm) = &self.inner.alarm {
            alarm.ring();
        }
        Some(probe)
    }

    /// Asks the workers what they consume, in a task of its own with a window
    /// of its own ([`inquiry::WINDOW`]), past this poll: its answers serve the
    /// polls after it. It counts no consumers itself (a worker that does not
    /// answer would be one missing): the inquiry counts from what it kept.
    fn inquire(&self, mut brokers: Vec<crate::detail::BrokerReport>) {
        let this = self.clone();
        tokio::spawn(async move {
            // Ends the inquiry however the task ends.
            let asking = inquiry::Asking(&this.inner.inquiry);
            let answers = this
                .ping(&mut brokers, inquiry::WINDOW, crate::ping::CLEANUP_WAIT)
                .await;
            asking.answered(&answers);
        });
    }

    /// The run's line at DEBUG.
    fn log(&self, probe: &Probe) {
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
    }
}

/// A lock that a panic elsewhere does not make unusable: what it guards is
/// whole after every call.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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

    /// Probes the brokers (and pings the workers) and returns the probe's
    /// verdict with its detail ([`Probe::observation`]).
    async fn observe(&self) -> Observation {
        self.probe().await.observation()
    }

    /// [`CeleryCheck::start`].
    async fn start(&self) {
        CeleryCheck::start(self);
    }
}
