//! What one poll reads: the `edge_worker` rows and the jobs waiting per
//! queue in `edge_job`, as [`Fleet`] and [`EdgeWorker`].
//!
//! A worker with no `queues` (null or empty) fetches jobs of every queue, as
//! the provider's `jobs/fetch` route does. A worker is *connected* unless its
//! state is `unknown`, `offline` or `offline maintenance` (the provider's own
//! `edge_worker.connected` metric); a connected worker *takes jobs* unless it
//! is in maintenance (`maintenance request`, `maintenance pending`,
//! `maintenance mode`) or stopping (`shutdown request`, `terminating`).
//!
//! # Both schemas
//! Providers before 3.5.0 keep `sysinfo` as a JSON string in a `VARCHAR(256)`
//! and have `jobs_taken`, `jobs_success`, `jobs_failed`; 3.5.0 made `sysinfo` a
//! JSON column and dropped the three counters (migration
//! `0005_3_5_0_replace_individual_counters_with_`). The check reads only
//! columns both have, and reads `sysinfo` cast to text, which is JSON either
//! way (older workers send no `status`). `queues` is Python's `repr` of a list
//! (`['default', 'gpu']`) in both.

use std::collections::BTreeMap;

use sea_orm::{ConnectionTrait, DbBackend, Statement};

use super::python::python_list;

/// What one poll read: the workers, and the jobs waiting per queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fleet {
    /// Every `edge_worker` row, by name.
    pub workers: Vec<EdgeWorker>,
    /// `edge_job` rows in `queued`, counted per queue, by name.
    pub waiting: BTreeMap<String, u64>,
}

/// One `edge_worker` row, as the check reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeWorker {
    /// `worker_name`.
    pub name: String,
    /// `state`, as the provider writes it (`idle`, `running`, `unknown`, ...).
    pub state: String,
    /// `queues`; `None`: every queue.
    pub queues: Option<Vec<String>>,
    /// `sysinfo.concurrency`, when reported and not negative.
    pub concurrency: Option<u32>,
    /// `sysinfo.free_concurrency`, when reported and not negative.
    pub free_concurrency: Option<u32>,
    /// `sysinfo.status`: a Python logging level (20 info, 30 warning, ...).
    pub status: Option<i64>,
    /// `sysinfo.status_text`, when the worker explains its status.
    pub status_text: Option<String>,
}

impl EdgeWorker {
    /// A row: `queues` as the provider stores them (Python's `repr` of a list),
    /// `sysinfo` as text (JSON in both schemas).
    pub fn from_row(
        name: String,
        state: String,
        queues: Option<&str>,
        sysinfo: Option<&str>,
    ) -> Self {
        let sysinfo: serde_json::Value = sysinfo
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let int = |key: &str| {
            sysinfo.get(key).and_then(|v| {
                v.as_i64()
                    .or_else(|| v.as_f64().map(|f| f as i64))
                    .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
            })
        };
        Self {
            name,
            state,
            queues: queues.and_then(python_list),
            concurrency: int("concurrency").and_then(|n| u32::try_from(n).ok()),
            free_concurrency: int("free_concurrency").and_then(|n| u32::try_from(n).ok()),
            status: int("status"),
            status_text: sysinfo
                .get("status_text")
                .and_then(|v| v.as_str())
                .map(str::to_owned),
        }
    }

    /// Heartbeats reach Airflow: not `unknown`, `offline` or `offline maintenance`.
    pub fn connected(&self) -> bool {
        !matches!(
            self.state.as_str(),
            "unknown" | "offline" | "offline maintenance"
        )
    }

    /// Connected and fetching: not in maintenance, not stopping.
    pub fn takes_jobs(&self) -> bool {
        self.connected()
            && !matches!(
                self.state.as_str(),
                "maintenance request"
                    | "maintenance pending"
                    | "maintenance mode"
                    | "shutdown request"
                    | "terminating"
            )
    }

    /// Whether it fetches jobs of `queue` (no queues: every queue).
    pub fn serves(&self, queue: &str) -> bool {
        self.queues
            .as_ref()
            .is_none_or(|queues| queues.iter().any(|q| q == queue))
    }
}
/// Reads the fleet: two statements, on either schema of the provider.
pub async fn read(db: &impl ConnectionTrait) -> Result<Fleet, sea_orm::DbErr> {
    let backend = db.get_database_backend();
    let text = match backend {
        DbBackend::MySql => "CHAR",
        _ => "TEXT",
    };
    let workers = db
        .query_all_raw(Statement::from_string(
            backend,
            format!(
                "SELECT worker_name, state, queues, CAST(sysinfo AS {text}) AS sysinfo \
                 FROM edge_worker ORDER BY worker_name"
            ),
        ))
        .await?;
    let waiting = db
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT queue, COUNT(*) AS waiting FROM edge_job WHERE state = 'queued' GROUP BY queue",
        ))
        .await?;
    let mut fleet = Fleet::default();
    for row in workers {
        let queues: Option<String> = row.try_get("", "queues")?;
        let sysinfo: Option<String> = row.try_get("", "sysinfo")?;
        fleet.workers.push(EdgeWorker::from_row(
            row.try_get("", "worker_name")?,
            row.try_get::<Option<String>>("", "state")?
                .unwrap_or_default(),
            queues.as_deref(),
            sysinfo.as_deref(),
        ));
    }
    for row in waiting {
        let queue: String = row.try_get("", "queue")?;
        let count: i64 = row.try_get("", "waiting")?;
        *fleet.waiting.entry(queue).or_default() += count.max(0).unsigned_abs();
    }
    Ok(fleet)
}
