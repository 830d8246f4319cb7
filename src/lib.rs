//! # overseer
//!
//! The `overseer` binary and its composition root: configuration in, executors
//! and actors wired, HTTP out. The domain lives in `overseer-core`; this crate
//! only puts the pieces together.
//!
//! # Layout
//! - [`alerts`]: webhooks told when an executor turns unhealthy and healthy again.
//! - [`cli`]: the command line (clap): `serve`, `migrate`, `config`.
//! - [`config`]: the layered configuration and its checks.
//! - [`secret`]: URLs whose passwords never show (from `overseer-core`).
//! - [`db`]: opening the metadata database, with errors that name no secret.
//! - [`limits`]: the open-file limit raised at start, and the HTTP connection
//!   and SSE stream caps that keep probes answering near it.
//! - [`logging`]: tracing to stderr, plain or JSON.
//! - [`probe`]: `overseer health` and `overseer jobs check`.
//! - [`serve`]: the running service, until SIGTERM or Ctrl-C.

pub mod alerts;
pub mod cli;
pub mod config;
pub mod db;
pub mod limits;
pub mod logging;
pub mod probe;
pub mod serve;

pub use overseer_core::secret;
