//! Embedding: [`Overseer::builder`] starts the actors on a thread of their own and
//! returns a handle to read the report, follow its changes, and shut down.
//!
//! ```no_run
//! # async fn example() -> overseer_core::Result<()> {
//! use std::time::Duration;
//! use overseer_core::{Executor, Overseer};
//!
//! let overseer = Overseer::builder()
//!     .database("sqlite://overseer.db?mode=rwc")
//!     .executor(Executor::unchecked("LocalExecutor"))
//!     .poll_interval(Duration::from_secs(10))
//!     .start()
//!     .await?;
//! println!("{}", overseer.report().json());
//! overseer.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! The host's own threads and runtime never run an actor or a check: the actors
//! live on the `overseer-actors` thread, async checks on a small pool of their
//! own (`overseer-check` threads, watched: one that blocks its thread is given
//! it, see [`crate::check::pool`]; their IO on `overseer-io` threads), blocking
//! checks on a thread each. So a hung executor can delay nothing of the host's.

mod owner;
mod start;
mod thread;

pub use crate::storage::ExecutorIdentity;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;

use crate::actors::aggregator::Ousted;
use crate::actors::{PollSettings, RestartPolicy};
use crate::check::pool::CheckThreads;
use crate::check::{AsyncChecks, Executor};
use crate::error::{Error, Result};
use crate::history::HistorySettings;
use crate::report::{HealthReport, Thresholds};
use crate::stats::AggregatorStats;
use crate::stats::{ExecutorStats, StatsSnapshot};
use start::start_actors;
use thread::ActorsThread;

/// Threads of the pool that polls async checks, kept free by its watchdog
/// (a thread a check blocks is replaced): checks mostly wait on the network,
/// so two serve thousands of executors.
pub const CHECK_THREADS: usize = 2;

/// Everything the actors need besides the database and the executors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `job.hostname` of this process's rows.
    pub hostname: String,
    /// `job.unixname` of this process's rows.
    pub unixname: String,
    /// How the supervisor polls: interval, timeout, damping.
    pub poll: PollSettings,
    /// How often verdicts and heartbeats are written: the rows' liveness clock.
    pub heartbeat_interval: Duration,
    /// How often the table is read back to publish a report.
    pub refresh_interval: Duration,
    /// Airflow's thresholds; the executor one follows `heartbeat_interval`.
    pub thresholds: Thresholds,
    /// How often a panicking check's actor may restart before it backs off.
    pub restart_policy: RestartPolicy,
    /// How long the history of verdict states is kept ([`crate::history`]).
    pub history: HistorySettings,
}

impl Default for Settings {
    fn default() -> Self {
        let heartbeat_interval = Duration::from_secs(5);
        Self {
            hostname: default_hostname(),
            unixname: default_unixname(),
            poll: PollSettings::default(),
            heartbeat_interval,
            refresh_interval: Duration::from_secs(1),
            thresholds: Thresholds::with_heartbeat_interval(heartbeat_interval),
            restart_policy: RestartPolicy::default(),
            history: HistorySettings::default(),
        }
    }
}

/// This machine's name, as the kernel gives it: the default `job.hostname`.
pub fn default_hostname() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// The user this process runs as, as Airflow's `getuser()` finds it.
fn default_unixname() -> String {
    ["LOGNAME", "USER", "LNAME", "USERNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "overseer".into())
}

/// Builds an [`Overseer`].
#[derive(Debug, Default)]
pub struct OverseerBuilder {
    database_url: Option<String>,
    executors: Vec<Executor>,
    settings: Settings,
    /// Where async checks run instead of the check pool ([`Self::async_checks`]).
    async_checks: Option<AsyncChecks>,
}

impl OverseerBuilder {
    /// The database holding the `job` table (migrated already), as a sea-orm URL.
    pub fn database(mut self, url: impl Into<String>) -> Self {
        self.database_url = Some(url.into());
        self
    }

    /// Adds an executor to supervise.
    pub fn executor(mut self, executor: Executor) -> Self {
        self.executors.push(executor);
        self
    }

    /// Adds executors to supervise.
    pub fn executors(mut self, executors: impl IntoIterator<Item = Executor>) -> Self {
        self.executors.extend(executors);
        self
    }

    /// Replaces every setting at once.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    pub fn hostname(mut self, hostname: impl Into<String>) -> Self {
        self.settings.hostname = hostname.into();
        self
    }

    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.settings.poll.poll_interval = interval;
        self
    }

    pub fn poll_timeout(mut self, timeout: Duration) -> Self {
        self.settings.poll.poll_timeout = timeout;
        self
    }

    /// Also sets the executor rows' liveness threshold to
    /// [`Thresholds::executor_default`] of it; [`Self::settings`] sets both freely.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.settings.heartbeat_interval = interval;
        self.settings.thresholds.executor = Thresholds::executor_default(interval);
        self
    }

    pub fn refresh_interval(mut self, interval: Duration) -> Self {
        self.settings.refresh_interval = interval;
        self
    }

    /// How long transitions are kept (zero: forever), and how often old ones
    /// are pruned.
    pub fn history(mut self, history: HistorySettings) -> Self {
        self.settings.history = history;
        self
    }

    /// Runs async checks on `checks` instead of Overseer's watched check pool
    /// (whose threads still start, idle): [`AsyncChecks::tasks_of`] a runtime
    /// of the program's own, or [`AsyncChecks::on`] any
    /// [`CheckRunner`](crate::check::CheckRunner). Nothing watches them there:
    /// an async check that blocks holds what it runs on (see
    /// [`crate::check::pool`] for what the pool does instead).
    pub fn async_checks(mut self, checks: AsyncChecks) -> Self {
        self.async_checks = Some(checks);
        self
    }

    /// Starts the actors: opens the database, closes the rows a crash of this host
    /// left open, inserts a `running` row per executor, reads a first report, and
    /// begins polling. Fails if the database cannot be opened or lacks the schema.
    pub async fn start(self) -> Result<Overseer> {
        let Self {
            database_url,
            executors,
            settings,
            async_checks,
        } = self;
        let url = database_url.ok_or_else(|| Error::Config("no database was given".into()))?;
        settings.check()?;
        let stats: Vec<(ExecutorIdentity, Arc<ExecutorStats>)> = executors
            .iter()
            .map(|e| (e.identity(), Arc::new(ExecutorStats::default())))
            .collect();
        let aggregator_stats = Arc::new(AggregatorStats::default());
        let checks = CheckThreads::start(CHECK_THREADS)
            .map_err(|e| Error::Runtime(format!("cannot start the check threads: {e}")))?;

        let executor_stats = stats.iter().map(|(_, s)| s.clone()).collect();
        let check_handle = async_checks.unwrap_or_else(|| checks.checks());
        let agg_stats = aggregator_stats.clone();
        let (ousted_tx, ousted) = Ousted::new();
        let (actors, reports) = ActorsThread::spawn(checks, ousted.clone(), move || {
            start_actors(
                url,
                executors,
                executor_stats,
                settings,
                check_handle,
                agg_stats,
                ousted_tx,
            )
        })
        .await?;
        Ok(Overseer {
            reports,
            stats,
            aggregator_stats,
            actors,
            ousted,
        })
    }
}

impl Settings {
    /// What the builder cannot take: a poll that outlives its tick, a zero interval.
    fn check(&self) -> Result<()> {
        if self.poll.poll_timeout >= self.poll.poll_interval {
            return Err(Error::Config(
                "poll_timeout must be shorter than poll_interval".into(),
            ));
        }
        for (name, interval) in [
            ("poll_timeout", self.poll.poll_timeout),
            ("heartbeat_interval", self.heartbeat_interval),
            ("refresh_interval", self.refresh_interval),
        ] {
            if interval.is_zero() {
                return Err(Error::Config(format!("{name} must be longer than zero")));
            }
        }
        Ok(())
    }
}

/// A running Overseer. Dropping it without [`Overseer::shutdown`] still ends the
/// rows gracefully, in the background.
pub struct Overseer {
    reports: watch::Receiver<Arc<HealthReport>>,
    stats: Vec<(ExecutorIdentity, Arc<ExecutorStats>)>,
    aggregator_stats: Arc<AggregatorStats>,
    /// The thread the actors run on, and how to end it.
    actors: ActorsThread,
    /// Why another writer's taking this session's rows stopped the actors.
    ousted: watch::Receiver<Option<String>>,
}

impl Overseer {
    /// Configures a new Overseer.
    pub fn builder() -> OverseerBuilder {
        OverseerBuilder::default()
    }

    /// The latest report. Never waits on the database or on an actor.
    pub fn report(&self) -> Arc<HealthReport> {
        self.reports.borrow().clone()
    }

    /// The report now, then each time it changes.
    pub fn subscribe(&self) -> WatchStream<Arc<HealthReport>> {
        WatchStream::new(self.reports.clone())
    }

    /// A receiver of report changes, for hosts that prefer `watch`.
    pub fn watch(&self) -> watch::Receiver<Arc<HealthReport>> {
        self.reports.clone()
    }

    /// Each executor's label and counters.
    pub fn stats(&self) -> Vec<(String, StatsSnapshot)> {
        self.stats
            .iter()
            .map(|(executor, stats)| (executor.label(), stats.snapshot()))
            .collect()
    }

    /// Each executor's identity and its live counters, for an exporter to read
    /// on every scrape.
    pub fn executor_stats(&self) -> Vec<(ExecutorIdentity, Arc<ExecutorStats>)> {
        self.stats.clone()
    }

    /// The aggregator's counters (flushes, failures, statements per flush).
    pub fn aggregator_stats(&self) -> Arc<AggregatorStats> {
        self.aggregator_stats.clone()
    }

    /// Resolves when another writer has ended this session's rows (an
    /// Overseer on another machine given the same hostname took them over),
    /// with why: the actors have stopped by then, as their verdicts would no
    /// longer land. A program embedding Overseer ends it ([`Self::shutdown`])
    /// and says so; `overseer serve` exits with the reason. Pending forever
    /// while the rows are this session's.
    pub async fn ousted(&self) -> String {
        let mut ousted = self.ousted.clone();
        match ousted.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            // The sender lives as long as the actors' settings: gone only
            // when they are, and then nothing ousts this session any more.
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops polling, writes the last verdicts, ends the rows with `success`, and
    /// waits for the actors' thread to finish.
    pub async fn shutdown(mut self) -> Result<()> {
        self.actors.stop().await
    }
}

impl Drop for Overseer {
    fn drop(&mut self) {
        self.actors.signal_stop();
    }
}
