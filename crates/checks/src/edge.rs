//! [`EdgeCheck`]: Airflow's EdgeExecutor (`apache-airflow-providers-edge3`),
//! judged from the two tables it keeps in Airflow's metadata database.
//!
//! The Edge executor has no broker: the scheduler writes each task to
//! `edge_job` (`state = 'queued'`, its `queue`), and each `airflow edge worker`
//! heartbeats through the api-server into its `edge_worker` row (`state`,
//! `queues`, `sysinfo`). The scheduler marks a worker `unknown` when its row
//! has not moved for 5 of `[edge] heartbeat_interval`. Everything the check
//! knows is in those rows, read at each poll with two statements; the
//! *instance* is the deployment's edge fleet, named after the database that
//! holds it, without credentials (`edge_worker@db:5432/airflow`).
//!
//! | what the rows say | the verdict |
//! | --- | --- |
//! | a connected worker takes jobs from every queue where jobs wait | `healthy` |
//! | no worker connected while jobs wait | `unhealthy: no edge worker is connected while 3 jobs wait (default: 2, gpu: 1)` |
//! | every worker `unknown` or `offline`, jobs waiting or not | `unhealthy: every edge worker is unknown or offline (w1: unknown, w2: offline)` |
//! | a queue with waiting jobs that no connected worker serves | `unhealthy: queue gpu: 1 job waiting and no connected edge worker serves it` |
//! | ... whose connected workers are paused (maintenance, shutting down) | `unhealthy: queue gpu: 1 job waiting and its edge workers take no jobs (w1: maintenance mode)` |
//! | no worker and nothing waiting (a fleet scaled to zero) | `healthy` |
//! | no `edge_worker` table (the provider never migrated) | `unknown` |
//! | the database does not answer within the deadline, or refuses | `unhealthy: cannot read the edge_worker table: ...` |
//!
//! *Connected* and *takes jobs* mean what the provider means by them
//! ([`EdgeWorker::connected`], [`EdgeWorker::takes_jobs`]); what a reason
//! names besides, and the detail, are told where [`judge`] is (`rules`).
//!
//! # Waiting on the database
//! The connection pool (two connections, opened on the first poll and kept)
//! and both statements are bounded by one deadline (`budget`: 90 % of
//! `poll_timeout`), so a database that does not answer is this check's
//! reason, not the supervisor's `no reply within 5s`.
//!
//! # Layout
//! - this module: [`EdgeCheck`], the pool, the deadline, and the verdict when
//!   the rows cannot be read;
//! - `fleet`: [`Fleet`] and [`EdgeWorker`], the rows as both schemas hold
//!   them, read by [`read`];
//! - `python`: [`python_list`], a worker's `queues` read back as Python wrote it;
//! - `rules`: [`judge`], the verdict and detail from the rows.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use overseer_core::duration::short;
use overseer_core::reason;
use overseer_core::secret::SecretUrl;
use overseer_core::{Executor, ExecutorHealth, HealthCheck, Observation};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use tokio::sync::OnceCell;

use crate::budget;

mod fleet;
mod python;
mod rules;

pub use fleet::{EdgeWorker, Fleet, read};
pub use python::python_list;
pub use rules::judge;

/// Connections the check keeps open: it runs two statements one after the other.
const MAX_CONNECTIONS: u32 = 2;
/// What the composition root calls: an executor named `executor_class` judged
/// from the edge tables of the database at `database` (Airflow's metadata
/// database, which Overseer also writes to), answering within `poll_timeout`.
/// `queues` are listed in the detail even when nothing waits there.
pub fn executor(
    executor_class: &str,
    database: &SecretUrl,
    queues: &[String],
    poll_timeout: Duration,
) -> Executor {
    let check = EdgeCheck::new(database, queues, poll_timeout);
    let instance = check.instance().to_owned();
    Executor::new(executor_class, check).with_instance(instance)
}

/// A health check of an Edge fleet; cloning it shares its connection pool.
#[derive(Clone)]
pub struct EdgeCheck {
    /// Airflow's metadata database, with its password; shown only redacted.
    database: SecretUrl,
    /// `edge_worker@host:port/db`: what counts as the instance.
    instance: String,
    /// The configured queues, always in the detail.
    queues: Vec<String>,
    /// How long one poll may wait on the database.
    deadline: Duration,
    /// Opened on the first poll, kept for the next.
    db: Arc<OnceCell<DatabaseConnection>>,
    /// Whether the missing tables were already logged.
    warned_missing: Arc<AtomicBool>,
}

impl std::fmt::Debug for EdgeCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeCheck")
            .field("instance", &self.instance)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl EdgeCheck {
    /// A check of the edge tables in `database`, answering within `poll_timeout`.
    pub fn new(database: &SecretUrl, queues: &[String], poll_timeout: Duration) -> Self {
        Self {
            database: database.clone(),
            instance: instance(database),
            queues: queues.to_vec(),
            deadline: budget::deadline(poll_timeout),
            db: Arc::new(OnceCell::new()),
            warned_missing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// `edge_worker@host:port/db`: the instance.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The pool, opened lazily: connections are made by the statements, each
    /// within the deadline.
    async fn db(&self) -> Result<&DatabaseConnection, String> {
        self.db
            .get_or_try_init(|| async {
                let mut options = overseer_core::connect::options(self.database.expose_secret());
                options
                    .max_connections(MAX_CONNECTIONS)
                    .min_connections(0)
                    .connect_lazy(true);
                Database::connect(options).await
            })
            .await
            .map_err(|e| self.database.scrub(&e.to_string()))
    }

    /// One poll: read the rows, or say why not.
    async fn read(&self) -> Result<Option<Fleet>, String> {
        let db = self.db().await?;
        match read(db).await {
            Ok(fleet) => Ok(Some(fleet)),
            Err(e) => {
                // A database that answers but has no edge tables: not installed yet.
                let probe = Statement::from_string(db.get_database_backend(), "SELECT 1");
                if db.query_one_raw(probe).await.is_ok() {
                    if !self.warned_missing.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            instance = %self.instance,
                            error = %reason::sanitise(&self.database.scrub(&e.to_string())),
                            "the edge_worker and edge_job tables cannot be read: is the Edge \
                             provider installed and its tables migrated? The verdict stays unknown"
                        );
                    }
                    return Ok(None);
                }
                Err(self.database.scrub(&e.to_string()))
            }
        }
    }
}

#[async_trait::async_trait]
impl HealthCheck for EdgeCheck {
    async fn get_health(&self) -> ExecutorHealth {
        self.observe().await.health
    }

    /// The verdict of [`judge`], or why there is none (a [`overseer_core::Reason`],
    /// clean as made).
    async fn observe(&self) -> Observation {
        match tokio::time::timeout(self.deadline, self.read()).await {
            Ok(Ok(Some(fleet))) => judge(&fleet, &self.queues, &self.instance),
            Ok(Ok(None)) => ExecutorHealth::unknown(
                "the database has no edge_worker table (is the Edge provider installed and migrated?)",
            )
            .into(),
            Ok(Err(e)) => {
                ExecutorHealth::unhealthy(format!("cannot read the edge_worker table: {e}")).into()
            }
            Err(_) => ExecutorHealth::unhealthy(format!(
                "cannot read the edge_worker table: no answer within {}",
                short(self.deadline)
            ))
            .into(),
        }
    }
}

/// `edge_worker@host:port/db` of a database URL: no scheme, no user or
/// password, no query (a SQLite file is its path).
pub fn instance(database: &SecretUrl) -> String {
    let text = database.expose_secret();
    let rest = text.split_once("://").map_or(text, |(_, rest)| rest);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("edge_worker@{host}{path}")
}
#[cfg(test)]
mod tests;
