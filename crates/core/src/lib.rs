//! # overseer-core
//!
//! The domain of Overseer: executor health as Airflow's Jobs table records it.
//! It knows no executor kind (Celery lives in `overseer-celery`) and no HTTP
//! (that is `overseer-api`).
//!
//! # Layout
//! - [`job`]: the words of the Jobs table as Rust types: [`JobState`], [`JobType`],
//!   [`ExecutorHealth`], with the strings Airflow stores for them.
//! - [`entity`]: the sea-orm entity of Airflow's `job` table plus Overseer's four
//!   executor columns, and of Overseer's own history table.
//! - [`storage`]: plain async functions over `&DatabaseConnection` that read and
//!   write job rows; they know nothing of actors or HTTP.
//! - [`check`]: the [`HealthCheck`] and [`BlockingHealthCheck`] traits, and
//!   [`Executor`], one supervised executor.
//! - [`detail`]: the evidence beside a verdict ([`Observation`], [`Detail`]):
//!   queues, workers, task instances queued.
//! - [`rules`]: whether work flows: the rules that turn the evidence into a
//!   verdict, one module each, registered in one list.
//! - [`airflow`]: what is read from Airflow's tables: which executor runs a
//!   task ([`airflow::routes`]), the task instances queued, the canary's runs,
//!   the slots, the one reader of them all, and what an `unhealthy` span cost.
//! - [`actors`]: `ExecutorActor`, `HealthSupervisor` and `Aggregator` (actix).
//! - [`history`]: every change of a verdict's state, in a table of Overseer's
//!   own: written with the verdict, read by the API, pruned.
//! - [`report`]: the [`HealthReport`], built by pure functions from job rows.
//! - [`stats`]: counters the actors keep (polls, skips, timeouts, panics, restarts;
//!   the aggregator's flushes, reads and transitions).
//! - [`backoff`]: exponential back-off, the one copy every retry uses.
//! - [`overseer`]: embedding: [`Overseer::builder`] and the running handle.
//! - [`secret`]: URLs whose passwords never show, and scrubbing them from text.
//! - [`reason`]: the one sanitiser of every reason: one line, capped, lists counted.
//! - [`connect`]: the database pool's options, one set for every caller.
//! - [`timestamp`]: times as Airflow's JSON writes them; [`clock`]: this
//!   process's wall clock, never running backwards (what verdicts are stamped
//!   with).
//! - [`duration`]: durations as reasons and logs write them (`5s`, `4.5s`, `800ms`); cutoffs
//!   that never overflow ([`duration::before`]).
//! - [`error`]: this crate's one error type and its `Result` alias.
//! - [`file`]: the one reader of every file Overseer opens: regular files only,
//!   bounded in size and time.

pub mod actors;
pub mod airflow;
pub mod backoff;
pub mod check;
pub mod clock;
pub mod connect;
pub mod detail;
pub mod duration;
pub mod entity;
pub mod error;
pub mod file;
pub mod history;
pub mod host;
pub mod job;
pub mod overseer;
pub mod reason;
pub mod report;
pub mod rules;
pub mod secret;
pub mod stats;
pub mod storage;
pub mod timestamp;

pub use check::{BlockingHealthCheck, Executor, HealthCheck, NoCheck};
pub use detail::{Detail, Observation};
pub use error::{Error, Result};
pub use job::{ExecutorHealth, JobState, JobType};
pub use overseer::{Overseer, OverseerBuilder, Settings};
pub use reason::Reason;
pub use report::{HealthReport, Thresholds};
