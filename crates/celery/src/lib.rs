//! # overseer-celery
//!
//! The Celery executor's health check: the broker (Redis or RabbitMQ) is the
//! instance, since Celery workers come and go. It implements `overseer-core`'s
//! [`HealthCheck`](overseer_core::HealthCheck) and knows no HTTP.
//!
//! ```no_run
//! # fn main() -> Result<(), overseer_celery::BrokerUrlError> {
//! use std::time::Duration;
//! use overseer_core::secret::SecretUrl;
//!
//! let url = SecretUrl::new("redis://:secret@broker:6379/0");
//! let executor = overseer_celery::executor(
//!     "CeleryExecutor", &url, &["default".into()], false, 0, Duration::from_secs(5))?;
//! assert_eq!(executor.instance.as_deref(), Some("redis://broker:6379/0"));
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`url`]: broker URLs as kombu parses them ([`BrokerUrl::parse`]), failover lists,
//!   sentinel lists, the instance identity.
//! - [`check`]: [`CeleryCheck`], which probes every broker of a URL at once, pings the
//!   workers, and returns what it found as a [`Probe`], its verdict with the evidence
//!   (core's `Detail`: queues, consumers, workers); and [`executor`], what the
//!   composition root calls.
//! - `budget`: the deadlines one check derives from `poll_timeout`, and who bounds what.
//! - `verdict`: the verdict over a failover list, from what brokers and workers answered.
//! - `broker`: `BrokerProbe`, what every transport's check implements, and the
//!   reasons they share; `broker/held.rs`, the one driver of a connection held
//!   between polls (each transport's watch and event subscription), its life
//!   as an enum whose transitions say when to ring, with its transition table.
//! - `redis`: the Redis broker check (`PING`, `ROLE`, queue depth with priority lists);
//!   `redis/sentinel.rs`, the master found through its sentinels; `redis/ping.rs`, the
//!   worker ping over Redis.
//! - `amqp`: the RabbitMQ broker check (passive `queue.declare`); `amqp/ping.rs`, the
//!   worker ping over AMQP.
//! - `events`: the workers from their own heartbeats (Celery's `worker` event
//!   group), each transport's subscription feeding one record per worker.
//! - `ping`: Celery's remote control itself (`active_queues`, which proves a worker alive
//!   and names its queues): the pidbox names, the request, the answers, whatever the
//!   transport.
//! - `tls`: kombu's `ssl_*` options as rustls settings, and TLS failures in plain words.
//! - [`detail`]: [`Probe`], what a check found beyond its verdict, and its projection
//!   onto core's `Detail`.
//! - [`error`]: [`BrokerUrlError`], this crate's one error type.

#![warn(missing_docs)]

mod amqp;
pub mod backend;
mod broker;
mod budget;
pub mod check;
pub mod detail;
pub mod error;
mod events;
mod ping;
mod redis;
mod tls;
pub mod url;
mod verdict;

pub use backend::ResultBackend;
pub use check::{
    AIRFLOW_DEFAULT_QUEUE, CeleryCheck, CheckSettings, DEFAULT_WORKER_CONCURRENCY, executor,
    executor_with,
};
pub use detail::{BrokerReport, BrokerStatus, Probe, QueueDepth, WorkerPing};
pub use error::{BrokerUrlError, Position, Result};
pub use ping::{DEFAULT_CONTROL_EXCHANGE, PING_WINDOW};
pub use url::{AIRFLOW_DEFAULT_BROKER_URL, Broker, BrokerUrl, CertReqs, TlsOptions, Transport};
