//! The result backend: where the Celery executor reads what its tasks did.
//!
//! Airflow's Celery executor learns each task's state from `[celery]
//! result_backend`; when it does not answer, the executor cannot tell what its
//! tasks did, and the broker and the workers may all look fine. Each poll asks
//! it, beside the brokers and within their budget, over a connection held
//! across polls (made again after a failure):
//!
//! | `result_backend` | asked |
//! | --- | --- |
//! | `redis://`, `rediss://` | `PING` |
//! | `db+postgresql://`, `db+mysql://`, `db+sqlite://` (any driver) | `SELECT 1` |
//! | `rpc://` (replies over the broker) | nothing more: the broker is checked |
//! | anything else (`cache+memcached://`, `mongodb://`, `sentinel://`, ...) | not checked (said once at start) |
//!
//! Unset, Airflow uses its metadata database (`db+` its `sql_alchemy_conn`),
//! which Overseer reads itself: its health is the report's `metadatabase`.
//!
//! A backend that does not answer makes the executor `unhealthy`, one reason
//! for as long as it lasts: `result backend redis://h:6379/1 does not answer`
//! (the driver's error at WARN, once per change, without credentials).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use overseer_core::secret::SecretUrl;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection};
use tokio::sync::Mutex;

/// What the check asks, made from `[celery] result_backend`.
#[derive(Debug, Clone)]
pub enum ResultBackend {
    /// A Redis server: `PING`.
    Redis(SecretUrl),
    /// A database through SQLAlchemy (`db+...`): `SELECT 1`, on the URL sea-orm
    /// takes (`postgres://`, `mysql://`, `sqlite://`), shown as configured.
    Database {
        /// As configured (`db+postgresql+psycopg2://...`).
        configured: SecretUrl,
        /// As sea-orm connects.
        url: SecretUrl,
    },
}

impl ResultBackend {
    /// How it is shown: as configured, without credentials.
    pub fn shown(&self) -> &str {
        match self {
            Self::Redis(url) => url.redacted(),
            Self::Database { configured, .. } => configured.redacted(),
        }
    }
}

/// The connection held to the result backend across polls.
#[derive(Debug)]
pub(crate) struct BackendProbe {
    backend: ResultBackend,
    held: Mutex<Held>,
    /// Whether the last poll found it failing: what is logged is the change.
    failing: AtomicBool,
}

#[derive(Debug, Default)]
enum Held {
    #[default]
    None,
    Redis(::redis::aio::MultiplexedConnection),
    Database(DatabaseConnection),
}

impl BackendProbe {
    pub(crate) fn new(backend: ResultBackend) -> Self {
        Self {
            backend,
            held: Mutex::new(Held::None),
            failing: AtomicBool::new(false),
        }
    }

    /// Asks the backend within `budget`: `None` when it answered, else the
    /// finding (stable while the fault lasts).
    pub(crate) async fn finding(&self, budget: Duration) -> Option<String> {
        let asked = tokio::time::timeout(budget, self.ask()).await;
        let error = match asked {
            Ok(Ok(())) => {
                self.tell(None);
                return None;
            }
            Ok(Err(e)) => e,
            Err(_) => format!(
                "no answer within {}",
                overseer_core::duration::short(budget)
            ),
        };
        // A connection that failed (or timed out mid-question) is made again.
        if let Ok(mut held) = self.held.try_lock() {
            *held = Held::None;
        }
        self.tell(Some(&error));
        Some(format!(
            "result backend {} does not answer",
            self.backend.shown()
        ))
    }

    async fn ask(&self) -> Result<(), String> {
        let mut held = self.held.lock().await;
        let scrub = |e: &dyn std::fmt::Display| self.scrub(&e.to_string());
        match (&self.backend, &mut *held) {
            (ResultBackend::Redis(_), Held::Redis(conn)) => {
                ::redis::cmd("PING")
                    .query_async::<String>(conn)
                    .await
                    .map_err(|e| scrub(&e))?;
            }
            (ResultBackend::Redis(url), slot) => {
                let client = ::redis::Client::open(url.expose_secret()).map_err(|e| scrub(&e))?;
                let mut conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| scrub(&e))?;
                ::redis::cmd("PING")
                    .query_async::<String>(&mut conn)
                    .await
                    .map_err(|e| scrub(&e))?;
                *slot = Held::Redis(conn);
            }
            (ResultBackend::Database { .. }, Held::Database(db)) => {
                db.execute_unprepared("SELECT 1")
                    .await
                    .map_err(|e| scrub(&e))?;
            }
            (ResultBackend::Database { url, .. }, slot) => {
                let mut options = sea_orm::ConnectOptions::new(overseer_core::connect::named(
                    url.expose_secret(),
                ));
                options
                    .max_connections(1)
                    .min_connections(0)
                    .sqlx_logging(false);
                let db = Database::connect(options).await.map_err(|e| scrub(&e))?;
                db.execute_unprepared("SELECT 1")
                    .await
                    .map_err(|e| scrub(&e))?;
                *slot = Held::Database(db);
            }
        }
        Ok(())
    }

    fn scrub(&self, text: &str) -> String {
        match &self.backend {
            ResultBackend::Redis(url) => url.scrub(text),
            ResultBackend::Database { configured, url } => url.scrub(&configured.scrub(text)),
        }
    }

    /// Logs a change: the backend failing (WARN, with the driver's error), or
    /// answering again (INFO).
    fn tell(&self, error: Option<&str>) {
        let was_failing = self.failing.swap(error.is_some(), Ordering::Relaxed);
        let shown = self.backend.shown();
        match error {
            Some(error) if !was_failing => {
                tracing::warn!(backend = %shown, %error, "the result backend does not answer");
            }
            None if was_failing => {
                tracing::info!(backend = %shown, "the result backend answers again");
            }
            _ => {}
        }
    }
}
