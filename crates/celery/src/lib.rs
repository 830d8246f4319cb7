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
//! - [`check`]: [`CeleryCheck`], the deadlines derived from `poll_timeout`, the
//!   verdict over a failover list, and [`executor`], what the composition root calls.
//! - `redis`: the Redis broker check (`PING`, `ROLE`, queue depth with priority lists).
//! - `amqp`: the RabbitMQ broker check (passive `queue.declare`).
//! - `ping`: Celery's remote-control `ping` over the pidbox, on Redis and AMQP.
//! - [`detail`]: [`Probe`], what a check found beyond its verdict.
//! - [`error`]: [`BrokerUrlError`], this crate's one error type.

#![warn(missing_docs)]

mod amqp;
pub mod check;
pub mod detail;
pub mod error;
mod ping;
mod redis;
pub mod url;

pub use check::{AIRFLOW_DEFAULT_QUEUE, CeleryCheck, CheckSettings, executor, executor_with};
pub use detail::{BrokerReport, BrokerStatus, Probe, QueueDepth, WorkerPing};
pub use error::{BrokerUrlError, Position, Result};
pub use ping::{DEFAULT_CONTROL_EXCHANGE, PING_WINDOW};
pub use url::{AIRFLOW_DEFAULT_BROKER_URL, Broker, BrokerUrl, Transport};
