//! Health checks: what an executor answers when asked how it is.
//!
//! An executor implements [`HealthCheck`] (async) or [`BlockingHealthCheck`] (a
//! plain function that may block), and is wrapped in an [`Executor`] for the
//! supervisor. Neither kind ever runs on the supervisor's own thread: an async
//! check runs on a small pool of threads of its own, watched so that one that
//! blocks its thread is given that thread and starves no other ([`pool`]); a
//! blocking one runs on a thread of its own.

pub mod alarm;
pub mod pool;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::detail::Observation;
use crate::job::ExecutorHealth;
use crate::rules::Settings as RuleSettings;

pub use alarm::Alarm;
pub use pool::{AsyncChecks, CheckRunner};

/// An asynchronous health check.
///
/// `get_health` has no default body: an implementation that forgot it would
/// otherwise compile into an executor that says `unknown` forever. An executor
/// with no real check says so on purpose, with [`NoCheck`] (or
/// [`Executor::unchecked`]).
///
/// ```compile_fail,E0046
/// struct Forgotten;
///
/// #[async_trait::async_trait]
/// impl overseer_core::HealthCheck for Forgotten {}
/// ```
///
/// A check must not block its thread; one that may (a synchronous client, a
/// subprocess) is a [`BlockingHealthCheck`] instead. One that blocks all the
/// same is found by the pool's watchdog and given a thread of its own from
/// then on ([`pool`]), with a warning.
#[async_trait::async_trait]
pub trait HealthCheck: Send + Sync + 'static {
    /// Asks the executor how it is. The supervisor bounds the wait
    /// (`poll_timeout`); the check need not.
    async fn get_health(&self) -> ExecutorHealth;

    /// The verdict with its evidence ([`Observation`]): what the executor's
    /// actor asks. By default the verdict of [`Self::get_health`] alone; a
    /// check that sees more (queue depths, workers) overrides this, and its
    /// `get_health` returns this verdict.
    async fn observe(&self) -> Observation {
        self.get_health().await.into()
    }

    /// Starts what the check holds between polls (a connection it keeps
    /// open to be told at once when it drops, a subscription), on the
    /// runtime its polls run on. The executor's actor calls it once per
    /// incarnation (its first start, every restart), at the start of that
    /// incarnation's first run, before [`Self::observe`]; what it starts
    /// should end when the check is dropped. By default nothing.
    async fn start(&self) {}
}

/// A health check that may block its thread; it runs on a thread of its own.
/// Like [`HealthCheck`], it has no default answer.
///
/// ```compile_fail,E0046
/// struct Forgotten;
///
/// impl overseer_core::BlockingHealthCheck for Forgotten {}
/// ```
pub trait BlockingHealthCheck: Send + Sync + 'static {
    /// Asks the executor how it is, blocking as long as it takes.
    fn get_health(&self) -> ExecutorHealth;

    /// The verdict with its evidence; by default [`Self::get_health`]'s verdict
    /// alone (see [`HealthCheck::observe`]).
    fn observe(&self) -> Observation {
        self.get_health().into()
    }
}

/// A check that always answers `unknown` (`no health check`): for executors
/// with no real check yet, so that they never show as dead.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCheck;

#[async_trait::async_trait]
impl HealthCheck for NoCheck {
    async fn get_health(&self) -> ExecutorHealth {
        ExecutorHealth::unknown("no health check")
    }
}

/// [`NoCheck`] for one executor kind: `no health check for KubernetesExecutor`.
#[derive(Debug, Clone)]
struct NoCheckFor(Arc<str>);

#[async_trait::async_trait]
impl HealthCheck for NoCheckFor {
    async fn get_health(&self) -> ExecutorHealth {
        ExecutorHealth::unknown(format!("no health check for {}", self.0))
    }
}

/// How a check runs.
#[derive(Clone)]
pub enum Check {
    /// On the watched pool of check threads ([`pool`]).
    Async(Arc<dyn HealthCheck>),
    /// On a thread of its own, one at most per executor.
    Blocking(Arc<dyn BlockingHealthCheck>),
}

/// Builds an executor's check: once when its actor starts, and again on every
/// restart, so a restarted actor starts from fresh state.
type CheckFactory = Arc<dyn Fn() -> Check + Send + Sync>;

/// One supervised executor: its name, its instance, and how to build its check.
#[derive(Clone)]
pub struct Executor {
    /// The executor's configured name, as Airflow writes it: `CeleryExecutor`,
    /// `alias:CeleryExecutor`. Becomes `job.executor_class`.
    pub executor_class: String,
    /// What counts as the instance (for Celery, the broker's URL without
    /// credentials). Becomes `job.executor_instance`. Never a credential.
    pub instance: Option<String>,
    /// How long work may wait (task instances in `queued`, messages in a queue
    /// that does not move) before the executor is unhealthy; `ZERO` turns those
    /// rules off ([`crate::rules`]).
    pub max_queued_age: Duration,
    /// How long a queued canary may wait for a worker before the executor is
    /// unhealthy; `ZERO` turns that rule off ([`crate::rules::canary`]).
    pub canary_max_pickup: Duration,
    /// Airflow's `[core] parallelism`: the slots this executor has per live
    /// scheduler ([`crate::rules::capacity`]).
    pub parallelism: u32,
    /// How long every slot may stay taken while tasks wait in `scheduled`
    /// before the executor is unhealthy; `ZERO` turns that rule off.
    pub max_at_capacity: Duration,
    /// Rung by a check that holds a connection, when it closes or stops
    /// answering: the supervisor polls the executor at once ([`alarm`]).
    pub alarm: Option<Alarm>,
    factory: CheckFactory,
}

impl Executor {
    /// An executor with an asynchronous check; each (re)start gets a fresh clone of it.
    pub fn new<C: HealthCheck + Clone>(executor_class: impl Into<String>, check: C) -> Self {
        Self::with_factory(executor_class, move || check.clone())
    }

    /// An executor whose asynchronous check is built anew by `factory` on each (re)start.
    pub fn with_factory<C: HealthCheck>(
        executor_class: impl Into<String>,
        factory: impl Fn() -> C + Send + Sync + 'static,
    ) -> Self {
        Self::made(
            executor_class.into(),
            Arc::new(move || Check::Async(Arc::new(factory()))),
        )
    }

    /// An executor whose check blocks; each (re)start gets a fresh clone of it.
    pub fn blocking<C: BlockingHealthCheck + Clone>(
        executor_class: impl Into<String>,
        check: C,
    ) -> Self {
        Self::made(
            executor_class.into(),
            Arc::new(move || Check::Blocking(Arc::new(check.clone()))),
        )
    }

    /// An executor of `factory`'s checks, every rule at its default.
    fn made(executor_class: String, factory: CheckFactory) -> Self {
        let rules = RuleSettings::default();
        Self {
            executor_class,
            instance: None,
            max_queued_age: rules.max_queued_age,
            canary_max_pickup: rules.canary_max_pickup,
            parallelism: rules.parallelism,
            max_at_capacity: rules.max_at_capacity,
            alarm: None,
            factory,
        }
    }

    /// What its rules are told ([`crate::rules::Rules::standard`]).
    pub fn rules(&self) -> RuleSettings {
        RuleSettings {
            max_queued_age: self.max_queued_age,
            canary_max_pickup: self.canary_max_pickup,
            parallelism: self.parallelism,
            max_at_capacity: self.max_at_capacity,
        }
    }

    /// An executor with no check: its verdict stays `unknown`
    /// (`no health check for KubernetesExecutor`), unless Airflow's queued task
    /// instances judge it ([`crate::rules`]).
    pub fn unchecked(executor_class: impl Into<String>) -> Self {
        let executor_class = executor_class.into();
        let check = NoCheckFor(Arc::from(executor_class.as_str()));
        Self::new(executor_class, check)
    }

    /// Names the instance (for Celery, the broker URL without credentials). A
    /// URL given with its password is redacted here ([`crate::secret::redact`]):
    /// the instance is written to the Jobs table and shown everywhere.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(crate::secret::redact(&instance.into()));
        self
    }

    /// The same executor, whose check rings `alarm` for a poll at once (the
    /// check holds a clone: give the same one to the check's factory).
    pub fn with_alarm(mut self, alarm: Alarm) -> Self {
        self.alarm = Some(alarm);
        self
    }

    /// Sets how long work may wait before the executor is unhealthy (`ZERO`: never).
    pub fn with_max_queued_age(mut self, max_queued_age: Duration) -> Self {
        self.max_queued_age = max_queued_age;
        self
    }

    /// Sets how long a queued canary may wait for a worker (`ZERO`: never judged).
    pub fn with_canary_max_pickup(mut self, max_pickup: Duration) -> Self {
        self.canary_max_pickup = max_pickup;
        self
    }

    /// Sets Airflow's `[core] parallelism` and how long every slot may stay
    /// taken while tasks wait (`ZERO`: never judged).
    pub fn with_capacity(mut self, parallelism: u32, max_at_capacity: Duration) -> Self {
        self.parallelism = parallelism;
        self.max_at_capacity = max_at_capacity;
        self
    }

    /// Its identity in the job table: its class and its instance.
    pub fn identity(&self) -> crate::storage::ExecutorIdentity {
        crate::storage::ExecutorIdentity {
            executor_class: self.executor_class.clone(),
            instance: self.instance.clone(),
        }
    }

    /// `class` or `class @ instance`, for logs ([`Self::identity`]'s label).
    pub fn label(&self) -> String {
        self.identity().label()
    }

    /// A fresh check.
    pub(crate) fn build_check(&self) -> Check {
        (self.factory)()
    }
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor")
            .field("executor_class", &self.executor_class)
            .field("instance", &self.instance)
            .field("max_queued_age", &self.max_queued_age)
            .field("canary_max_pickup", &self.canary_max_pickup)
            .field("parallelism", &self.parallelism)
            .field("max_at_capacity", &self.max_at_capacity)
            .finish_non_exhaustive()
    }
}

/// The text of a panic, as `panic!` was given it.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".into())
}
