//! Task instances Airflow holds in `queued`, from its own `task_instance`
//! table: the evidence that works for every executor kind.
//!
//! One reader per process ([`crate::airflow::reader`]) runs one query per poll interval
//! for every executor together ([`read`]), off the report's path, and leaves
//! the rows on a [`QueuedBoard`].
//! Each executor's actor takes its share from there at every poll
//! ([`Snapshot::for_executor`]) and [`crate::rules`] judges it.
//!
//! The query groups `state = 'queued'` rows by `executor` and `queue`, with the
//! oldest `queued_dttm` and, for each distinct `max_queued_age` of the
//! executors, how many were queued before it. It filters on `state` alone, so
//! on Airflow's schema it is served by the `ti_state` index (`EXPLAIN` on
//! Postgres: `Index Scan using ti_state`, then a `HashAggregate`; see
//! `crates/core/tests/queued_tasks.rs`).
//!
//! Each row goes to one executor, as Airflow's scheduler sends it
//! ([`Routes`]): a null `executor` is the deployment's default executor (the
//! first of `AIRFLOW__CORE__EXECUTOR`, so the first executor Overseer
//! supervises), or the first executor of the team the task's DAG belongs to
//! (Airflow 3.3's `multi_team`: the team of the DAG's bundle, from
//! `dag_bundle_team`, which the query then joins).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, Statement};

use crate::airflow::canary::CanaryRead;
use crate::airflow::capacity::CapacityRead;
use crate::airflow::routes::Routes;
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
    /// The canary's latest runs ([`crate::airflow::canary`]); `None` when they could
    /// not be read.
    pub canary: Option<CanaryRead>,
    /// The executors' slots ([`crate::airflow::capacity`]); `None` when they could not
    /// be read.
    pub capacity: Option<CapacityRead>,
}

/// Queued task instances of one `(executor, queue)` (and team).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedRow {
    /// `task_instance.executor`: null for the default executor.
    pub executor: Option<String>,
    /// `task_instance.queue`.
    pub queue: String,
    /// The team of the tasks' DAGs (their bundle's), when executors have teams.
    pub team: Option<String>,
    /// The index of the executor that runs them ([`Routes::route`]), if any does.
    pub owner: Option<usize>,
    /// How many.
    pub count: u64,
    /// The oldest `queued_dttm`, if any was recorded.
    pub oldest: Option<DateTime<Utc>>,
    /// How many were queued longer than each of the snapshot's `limits`.
    pub overdue: Vec<u64>,
}

impl Snapshot {
    /// The queued task instances of the executor at `index` of the [`Routes`]
    /// the read was routed by, with how many are overdue against `max_age` (0
    /// when it is off or unknown).
    pub fn for_executor(&self, index: usize, max_age: Duration) -> QueuedTasks {
        let limit = self.limits.iter().position(|l| *l == max_age);
        let mut queues: Vec<QueuedOnQueue> = Vec::new();
        for row in self.rows.iter().filter(|r| r.owner == Some(index)) {
            let oldest_seconds = row.oldest.map(|at| self.age(at));
            let overdue = limit.and_then(|i| row.overdue.get(i)).copied().unwrap_or(0);
            match queues.iter_mut().find(|q| q.queue == row.queue) {
                // The same queue under two spellings of the executor's name,
                // or of two of the teams it runs.
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

    /// Per queue, the task instances of the executor at `index` queued longer
    /// than `limit` when the snapshot was read; `None` when the read did not
    /// count against that limit.
    pub fn queued_longer_than(&self, index: usize, limit: Duration) -> Option<Vec<(&str, u64)>> {
        let at = self.limits.iter().position(|l| *l == limit)?;
        let mut queues: Vec<(&str, u64)> = Vec::new();
        for row in self.rows.iter().filter(|r| r.owner == Some(index)) {
            let n = row.overdue.get(at).copied().unwrap_or(0);
            match queues.iter_mut().find(|(q, _)| *q == row.queue) {
                Some((_, count)) => *count += n,
                None => queues.push((row.queue.as_str(), n)),
            }
        }
        Some(queues)
    }

    fn age(&self, at: DateTime<Utc>) -> u64 {
        (self.read_at - at).num_seconds().max(0).unsigned_abs()
    }
}

/// Whether the database holds Airflow's `task_instance` table (with the
/// columns the query reads, and with `by_team` the tables that give a DAG's
/// team). Overseer's own SQLite does not.
pub async fn has_table(db: &impl ConnectionTrait, by_team: bool) -> bool {
    let probe = query(db.get_database_backend(), &[], Utc::now(), by_team);
    db.query_all_raw(Statement::from_string(
        db.get_database_backend(),
        format!("{probe} LIMIT 0"),
    ))
    .await
    .is_ok()
}

/// Reads every `(executor, queue)` (and team, when `routes` has teams) with
/// queued task instances at `now`, with how many are older than each of
/// `limits` (one statement), each row routed to the executor that runs it.
pub async fn read(
    db: &impl ConnectionTrait,
    limits: &[Duration],
    routes: &Routes,
    now: DateTime<Utc>,
) -> Result<Snapshot> {
    let backend = db.get_database_backend();
    let by_team = routes.by_team();
    let rows = db
        .query_all_raw(Statement::from_string(
            backend,
            query(backend, limits, now, by_team),
        ))
        .await?;
    let mut read = Vec::with_capacity(rows.len());
    for row in rows {
        let count: i64 = row.try_get("", "queued")?;
        let overdue = (0..limits.len())
            .map(|i| row.try_get::<i64>("", &format!("overdue_{i}")))
            .collect::<std::result::Result<Vec<i64>, _>>()?;
        let executor: Option<String> = row.try_get("", "executor")?;
        let team: Option<String> = if by_team {
            row.try_get("", "team")?
        } else {
            None
        };
        read.push(QueuedRow {
            owner: routes.route(executor.as_deref(), team.as_deref()),
            executor,
            team,
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
        canary: None,
        capacity: None,
    })
}

/// The one statement: grouped counts, filtered on `state` (the `ti_state`
/// index); `by_team` joins each task's DAG to its bundle's team (Airflow's
/// `dag.bundle_name` and `dag_bundle_team`, one team per bundle).
pub fn query(backend: DbBackend, limits: &[Duration], now: DateTime<Utc>, by_team: bool) -> String {
    let overdue: String = limits
        .iter()
        .enumerate()
        .map(|(i, limit)| {
            let cutoff = crate::duration::before(now, *limit);
            format!(
                ", COUNT(CASE WHEN ti.queued_dttm <= {} THEN 1 END) AS overdue_{i}",
                cutoff_literal(backend, cutoff)
            )
        })
        .collect();
    let (team, join, by) = team_join(by_team);
    format!(
        "SELECT ti.executor AS executor, ti.queue AS queue{team}, COUNT(*) AS queued, \
         MIN(ti.queued_dttm) AS oldest{overdue} \
         FROM task_instance ti{join} WHERE ti.state = 'queued' GROUP BY ti.executor, ti.queue{by}"
    )
}

/// With `by_team`, what a read of `task_instance ti` adds to learn each task's
/// team (Airflow's `dag.bundle_name` and `dag_bundle_team`, one team per
/// bundle): the column to select, the joins, and the column to group by.
pub(crate) fn team_join(by_team: bool) -> (&'static str, &'static str, &'static str) {
    if by_team {
        (
            ", bt.team_name AS team",
            " LEFT JOIN dag d ON d.dag_id = ti.dag_id \
             LEFT JOIN dag_bundle_team bt ON bt.dag_bundle_name = d.bundle_name",
            ", bt.team_name",
        )
    } else {
        ("", "", "")
    }
}

/// A time as `queued_dttm` holds it, for comparing: Airflow's `UtcDateTime`
/// is a time zone-aware type on Postgres and MySQL, and on SQLite the naive
/// UTC text SQLAlchemy writes (`2026-11-30 23:40:00.123456`), compared as text.
pub(crate) fn cutoff_literal(backend: DbBackend, at: DateTime<Utc>) -> String {
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
        let routes = Routes::new([
            "CeleryExecutor",
            "gpu_fleet:my_company.executors.GpuExecutor",
        ]);
        for value in [
            None,
            Some(""),
            Some("CeleryExecutor"),
            Some("airflow.providers.celery.executors.celery_executor.CeleryExecutor"),
        ] {
            assert_eq!(routes.route(value, None), Some(0), "{value:?}");
        }
        for value in [
            "gpu_fleet",
            "my_company.executors.GpuExecutor",
            "GpuExecutor",
        ] {
            assert_eq!(routes.route(Some(value), None), Some(1), "{value}");
        }
        assert_eq!(routes.route(Some("KubernetesExecutor"), None), None);
        // Without teams configured, a task's team plays no part.
        assert_eq!(routes.route(None, Some("team_a")), Some(0));
        // Two executors of one class: the first answers to the class name.
        let twice = Routes::new(["CeleryExecutor", "spare:CeleryExecutor"]);
        assert_eq!(twice.route(Some("CeleryExecutor"), None), Some(0));
        assert_eq!(twice.route(Some("spare"), None), Some(1));
    }

    #[test]
    fn a_team_s_tasks_go_to_its_executors_as_airflow_s_scheduler_sends_them() {
        // `LocalExecutor;team_a=CeleryExecutor,gpu:KubernetesExecutor;team_b=CeleryExecutor`
        let routes = Routes::new([
            "LocalExecutor",
            "team_a=CeleryExecutor",
            "team_a=gpu:KubernetesExecutor",
            "team_b=CeleryExecutor",
        ]);
        assert!(routes.by_team());
        // No `executor=`: the team's first executor, else the global default.
        assert_eq!(routes.route(None, None), Some(0));
        assert_eq!(routes.route(None, Some("team_a")), Some(1));
        assert_eq!(routes.route(None, Some("team_b")), Some(3));
        assert_eq!(routes.route(None, Some("team_c")), Some(0));
        // A named executor of the task's own team, never another team's.
        assert_eq!(
            routes.route(Some("CeleryExecutor"), Some("team_a")),
            Some(1)
        );
        assert_eq!(
            routes.route(Some("CeleryExecutor"), Some("team_b")),
            Some(3)
        );
        assert_eq!(routes.route(Some("gpu"), Some("team_a")), Some(2));
        assert_eq!(routes.route(Some("gpu"), Some("team_b")), None);
        assert_eq!(routes.route(Some("CeleryExecutor"), None), None);
        // A global executor runs any team's task that names it, first in the list.
        assert_eq!(routes.route(Some("LocalExecutor"), Some("team_b")), Some(0));
        let global_first = Routes::new(["CeleryExecutor", "team_a=CeleryExecutor"]);
        assert_eq!(
            global_first.route(Some("CeleryExecutor"), Some("team_a")),
            Some(0)
        );
        assert_eq!(global_first.route(None, Some("team_a")), Some(1));
    }

    #[test]
    fn an_executor_s_share_sums_its_spellings_and_counts_its_own_limit() {
        let read_at = Utc::now();
        let ago = |s: i64| Some(read_at - chrono::Duration::seconds(s));
        let routes = Routes::new(["CeleryExecutor", "KubernetesExecutor"]);
        let row =
            |executor: Option<&str>, queue: &str, count, oldest, overdue: [u64; 2]| QueuedRow {
                executor: executor.map(str::to_owned),
                queue: queue.into(),
                team: None,
                owner: routes.route(executor, None),
                count,
                oldest,
                overdue: overdue.to_vec(),
            };
        let snapshot = Snapshot {
            read_at,
            limits: vec![Duration::from_secs(60), Duration::from_secs(300)],
            canary: None,
            capacity: None,
            rows: vec![
                row(None, "default", 2, ago(840), [2, 1]),
                row(Some("CeleryExecutor"), "default", 1, ago(90), [1, 0]),
                row(Some("CeleryExecutor"), "gpu", 4, ago(30), [0, 0]),
                row(Some("LocalExecutor"), "default", 7, ago(5000), [7, 7]),
            ],
        };
        let share = snapshot.for_executor(0, Duration::from_secs(300));
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
        let at_a_minute = snapshot.for_executor(0, Duration::from_secs(60));
        assert_eq!(at_a_minute.queues[0].overdue, 3);
        // A limit the read did not count against (the rule is off): nothing overdue.
        let off = snapshot.for_executor(0, Duration::ZERO);
        assert!(off.queues.iter().all(|q| q.overdue == 0));
        // Nothing queued for an executor: zero, not unknown.
        let kube = snapshot.for_executor(1, Duration::from_secs(300));
        assert_eq!(kube, QueuedTasks::default());
    }
}
