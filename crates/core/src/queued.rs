//! Task instances Airflow holds in `queued`, from its own `task_instance`
//! table: the evidence that works for every executor kind.
//!
//! One reader per process runs one query per poll interval for every executor
//! together ([`read`]), off the report's path (a task of its own on the actors'
//! runtime, with its own timeout), and leaves the rows on a [`QueuedBoard`].
//! Each executor's actor takes its share from there at every poll
//! ([`Snapshot::for_executor`]) and [`crate::flow`] judges it.
//!
//! The query groups `state = 'queued'` rows by `executor` and `queue`, with the
//! oldest `queued_dttm` and, for each distinct `max_queued_age` of the
//! executors, how many were queued before it. It filters on `state` alone, so
//! on Airflow's schema it is served by the `ti_state` index (`EXPLAIN` on
//! Postgres: `Index Scan using ti_state`, then a `HashAggregate`; see
//! `crates/core/tests/queued_tasks.rs`).
//!
//! A null `executor` is the deployment's default executor: the first of
//! `AIRFLOW__CORE__EXECUTOR`, so the first executor Overseer supervises.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, Statement};

use crate::detail::{QueuedOnQueue, QueuedTasks};
use crate::error::Result;
use crate::storage;

/// The latest read, shared by the reader and every executor's actor.
#[derive(Debug, Default)]
pub struct QueuedBoard {
    latest: RwLock<Option<Arc<Snapshot>>>,
}

impl QueuedBoard {
    /// The latest snapshot, unless the last read failed or found no table.
    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        self.latest
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Leaves a new snapshot (or none: the evidence is not known).
    pub fn set(&self, snapshot: Option<Snapshot>) {
        *self
            .latest
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = snapshot.map(Arc::new);
    }
}

/// One read of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// When the read started, by this process's clock: ages count from it.
    pub read_at: DateTime<Utc>,
    /// The limits each row's `overdue` counts against, in that order.
    pub limits: Vec<Duration>,
    /// One row per `(executor, queue)` with queued task instances.
    pub rows: Vec<QueuedRow>,
}

/// Queued task instances of one `(executor, queue)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedRow {
    /// `task_instance.executor`: null for the default executor.
    pub executor: Option<String>,
    /// `task_instance.queue`.
    pub queue: String,
    /// How many.
    pub count: u64,
    /// The oldest `queued_dttm`, if any was recorded.
    pub oldest: Option<DateTime<Utc>>,
    /// How many were queued longer than each of the snapshot's `limits`.
    pub overdue: Vec<u64>,
}

impl Snapshot {
    /// The queued task instances of the executor that `names` recognises, with
    /// how many are overdue against `max_age` (0 when it is off or unknown).
    pub fn for_executor(&self, names: &AirflowNames, max_age: Duration) -> QueuedTasks {
        let limit = self.limits.iter().position(|l| *l == max_age);
        let mut queues: Vec<QueuedOnQueue> = Vec::new();
        for row in self
            .rows
            .iter()
            .filter(|r| names.matches(r.executor.as_deref()))
        {
            let oldest_seconds = row.oldest.map(|at| self.age(at));
            let overdue = limit.and_then(|i| row.overdue.get(i)).copied().unwrap_or(0);
            match queues.iter_mut().find(|q| q.queue == row.queue) {
                // The same queue under two spellings of the executor's name.
                Some(q) => {
                    q.count += row.count;
                    q.overdue += overdue;
                    q.oldest_seconds = q.oldest_seconds.max(oldest_seconds);
                }
                None => queues.push(QueuedOnQueue {
                    queue: row.queue.clone(),
                    count: row.count,
                    oldest_seconds,
                    overdue,
                }),
            }
        }
        queues.sort_by(|a, b| a.queue.cmp(&b.queue));
        QueuedTasks {
            count: queues.iter().map(|q| q.count).sum(),
            oldest_seconds: queues.iter().filter_map(|q| q.oldest_seconds).max(),
            queues,
        }
    }

    fn age(&self, at: DateTime<Utc>) -> u64 {
        (self.read_at - at).num_seconds().max(0).unsigned_abs()
    }
}

/// The values of `task_instance.executor` that mean one executor: as Airflow's
/// `ExecutorLoader` resolves a task's `executor=` (its alias, its module path,
/// or its class name), and null for the default executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AirflowNames {
    alias: Option<String>,
    path: String,
    default: bool,
}

impl AirflowNames {
    /// The names of the executor configured as `executor_class`
    /// (`CeleryExecutor`, `my_alias:my.module.MyExecutor`); `default` when it
    /// is the deployment's default executor (the first configured).
    pub fn of(executor_class: &str, default: bool) -> Self {
        let (alias, path) = match executor_class.split_once(':') {
            Some((alias, path)) => (Some(alias.trim().to_owned()), path.trim().to_owned()),
            None => (None, executor_class.trim().to_owned()),
        };
        Self {
            alias,
            path,
            default,
        }
    }

    /// True when a task instance's `executor` value means this executor.
    pub fn matches(&self, value: Option<&str>) -> bool {
        let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            return self.default;
        };
        self.alias.as_deref() == Some(value)
            || value == self.path
            || class_name(value) == class_name(&self.path)
    }
}

/// `CeleryExecutor` of `airflow.providers.celery.executors.celery_executor.CeleryExecutor`.
fn class_name(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

/// How often a database without `task_instance` is asked again whether it
/// has one now (Airflow's `db migrate` may run after Overseer started).
pub const TABLE_PROBE_EVERY: Duration = Duration::from_secs(60);

/// The reader: every `interval`, one read of the table onto `board`, each in
/// a task of its own bounded by `timeout` (a driver that panics or a
/// database that does not answer costs that read, and the board says
/// "not known" until the next one succeeds). Runs until its runtime stops.
pub async fn watch(
    db: sea_orm::DatabaseConnection,
    board: Arc<QueuedBoard>,
    limits: Vec<Duration>,
    interval: Duration,
    timeout: Duration,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut present = false;
    let mut probed: Option<tokio::time::Instant> = None;
    let mut failing = false;
    loop {
        ticks.tick().await;
        if !present {
            if probed.is_some_and(|at| at.elapsed() < TABLE_PROBE_EVERY) {
                continue;
            }
            probed = Some(tokio::time::Instant::now());
            let db = db.clone();
            present = tokio::time::timeout(timeout, async move { has_table(&db).await })
                .await
                .unwrap_or(false);
            if !present {
                board.set(None);
                continue;
            }
            tracing::info!("reading queued task instances from Airflow's task_instance table");
        }
        let (db, limits) = (db.clone(), limits.clone());
        let read = actix_rt::spawn(async move {
            tokio::time::timeout(timeout, read(&db, &limits, Utc::now())).await
        })
        .await;
        match read {
            Ok(Ok(Ok(snapshot))) => {
                if failing {
                    tracing::info!("queued task instances can be read again");
                    failing = false;
                }
                board.set(Some(snapshot));
            }
            outcome => {
                let why = match outcome {
                    Ok(Ok(Err(e))) => e.to_string(),
                    Ok(Err(_)) => format!(
                        "the database did not answer within {}",
                        crate::duration::short(timeout)
                    ),
                    Err(e) => format!("the read ended early: {e}"),
                    Ok(Ok(Ok(_))) => unreachable!("matched above"),
                };
                if !failing {
                    tracing::warn!(error = %crate::secret::scrub(&why), "cannot read queued task instances; their rule waits");
                    failing = true;
                }
                board.set(None);
            }
        }
    }
}

/// Whether the database holds Airflow's `task_instance` table (with the
/// columns the query reads). Overseer's own SQLite does not.
pub async fn has_table(db: &impl ConnectionTrait) -> bool {
    let probe = "SELECT executor, queue, queued_dttm FROM task_instance WHERE 1 = 0";
    db.query_all_raw(Statement::from_string(db.get_database_backend(), probe))
        .await
        .is_ok()
}

/// Reads every `(executor, queue)` with queued task instances at `now`, with
/// how many are older than each of `limits` (one statement).
pub async fn read(
    db: &impl ConnectionTrait,
    limits: &[Duration],
    now: DateTime<Utc>,
) -> Result<Snapshot> {
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(backend, query(backend, limits, now)))
        .await?;
    let mut read = Vec::with_capacity(rows.len());
    for row in rows {
        let count: i64 = row.try_get("", "queued")?;
        let overdue = (0..limits.len())
            .map(|i| row.try_get::<i64>("", &format!("overdue_{i}")))
            .collect::<std::result::Result<Vec<i64>, _>>()?;
        read.push(QueuedRow {
            executor: row.try_get("", "executor")?,
            queue: row
                .try_get::<Option<String>>("", "queue")?
                .unwrap_or_default(),
            count: count.max(0).unsigned_abs(),
            oldest: row.try_get("", "oldest")?,
            overdue: overdue
                .into_iter()
                .map(|n| n.max(0).unsigned_abs())
                .collect(),
        });
    }
    Ok(Snapshot {
        read_at: now,
        limits: limits.to_vec(),
        rows: read,
    })
}

/// The one statement: grouped counts, filtered on `state` (the `ti_state` index).
pub fn query(backend: DbBackend, limits: &[Duration], now: DateTime<Utc>) -> String {
    let overdue: String = limits
        .iter()
        .enumerate()
        .map(|(i, limit)| {
            let cutoff = crate::duration::before(now, *limit);
            format!(
                ", COUNT(CASE WHEN queued_dttm <= {} THEN 1 END) AS overdue_{i}",
                cutoff_literal(backend, cutoff)
            )
        })
        .collect();
    format!(
        "SELECT executor, queue, COUNT(*) AS queued, MIN(queued_dttm) AS oldest{overdue} \
         FROM task_instance WHERE state = 'queued' GROUP BY executor, queue"
    )
}

/// A time as `queued_dttm` holds it, for comparing: Airflow's `UtcDateTime`
/// is a time zone-aware type on Postgres and MySQL, and on SQLite the naive
/// UTC text SQLAlchemy writes (`2026-11-30 23:40:00.123456`), compared as text.
fn cutoff_literal(backend: DbBackend, at: DateTime<Utc>) -> String {
    match backend {
        DbBackend::Sqlite => format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.6f")),
        _ => storage::timestamp_literal(backend, at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_instance_executor_values_resolve_as_airflow_does() {
        let celery = AirflowNames::of("CeleryExecutor", true);
        for value in [
            None,
            Some(""),
            Some("CeleryExecutor"),
            Some("airflow.providers.celery.executors.celery_executor.CeleryExecutor"),
        ] {
            assert!(celery.matches(value), "{value:?}");
        }
        assert!(!celery.matches(Some("KubernetesExecutor")));

        let aliased = AirflowNames::of("gpu_fleet:my_company.executors.GpuExecutor", false);
        for value in [
            "gpu_fleet",
            "my_company.executors.GpuExecutor",
            "GpuExecutor",
        ] {
            assert!(aliased.matches(Some(value)), "{value}");
        }
        assert!(!aliased.matches(None), "not the default executor");
        assert!(!aliased.matches(Some("CeleryExecutor")));
    }

    #[test]
    fn an_executor_s_share_sums_its_spellings_and_counts_its_own_limit() {
        let read_at = Utc::now();
        let ago = |s: i64| Some(read_at - chrono::Duration::seconds(s));
        let row =
            |executor: Option<&str>, queue: &str, count, oldest, overdue: [u64; 2]| QueuedRow {
                executor: executor.map(str::to_owned),
                queue: queue.into(),
                count,
                oldest,
                overdue: overdue.to_vec(),
            };
        let snapshot = Snapshot {
            read_at,
            limits: vec![Duration::from_secs(60), Duration::from_secs(300)],
            rows: vec![
                row(None, "default", 2, ago(840), [2, 1]),
                row(Some("CeleryExecutor"), "default", 1, ago(90), [1, 0]),
                row(Some("CeleryExecutor"), "gpu", 4, ago(30), [0, 0]),
                row(Some("LocalExecutor"), "default", 7, ago(5000), [7, 7]),
            ],
        };
        let celery = AirflowNames::of("CeleryExecutor", true);
        let share = snapshot.for_executor(&celery, Duration::from_secs(300));
        assert_eq!(share.count, 7);
        assert_eq!(share.oldest_seconds, Some(840));
        assert_eq!(
            share.queues,
            vec![
                QueuedOnQueue {
                    queue: "default".into(),
                    count: 3,
                    oldest_seconds: Some(840),
                    overdue: 1
                },
                QueuedOnQueue {
                    queue: "gpu".into(),
                    count: 4,
                    oldest_seconds: Some(30),
                    overdue: 0
                },
            ]
        );
        let at_a_minute = snapshot.for_executor(&celery, Duration::from_secs(60));
        assert_eq!(at_a_minute.queues[0].overdue, 3);
        // A limit the read did not count against (the rule is off): nothing overdue.
        let off = snapshot.for_executor(&celery, Duration::ZERO);
        assert!(off.queues.iter().all(|q| q.overdue == 0));
        // Nothing queued for an executor: zero, not unknown.
        let kube = snapshot.for_executor(
            &AirflowNames::of("KubernetesExecutor", false),
            Duration::from_secs(300),
        );
        assert_eq!(kube, QueuedTasks::default());
    }
}
