//! The canary: work proven to flow end to end, queue by queue.
//!
//! An idle queue proves nothing: a worker that heartbeats, consumes its queue
//! and answers the ping may still fail every task it takes (a broken image, a
//! worker that cannot reach Airflow's execution API), and a worker that runs
//! nothing is found by the queued-task rule only once real work waits. The
//! plugin ships a DAG, `overseer_canary` (`overseer_airflow.canary`), that
//! runs one trivial task on each configured queue on a schedule; this module
//! reads its task instances from Airflow's own tables (no call into Airflow)
//! and judges each queue of each executor:
//!
//! | the canary | the executor | reason |
//! | --- | --- | --- |
//! | queued, and no worker started it within `canary_max_pickup` | `unhealthy` | `canary on queue default: no worker started it within 2m` |
//! | its latest finished run failed (or went up for retry) | `unhealthy` | `canary on queue default failed` (`... failed before a worker started it`) |
//! | its DAG is paused, gone from the DAG folder, does not import, or its next run is overdue | `unknown` | `canary DAG overseer_canary is paused` |
//! | succeeded, or on its way within the limit | as the other evidence says | |
//!
//! A run still waiting does not hide the failure before it: each queue is
//! judged on its latest finished canary and its latest waiting one, so a
//! failing canary reads failed until one succeeds. A DAG that Airflow has
//! never stored is no rule at all (the canary is not installed: `detail.canary`
//! is `null`); one it stored and that cannot run is `unknown`, never healthy by
//! silence.
//!
//! Which executor a canary task belongs to is decided as for any task
//! instance ([`Routes`]); an executor none of the runs read belongs to is
//! judged by the canary only if it is the default one (the canary's tasks name
//! no executor).
//!
//! The read is two statements per refresh, each on an index Airflow has: the
//! DAG's row (`dag_pkey`), and the task instances of its latest
//! [`RUNS_READ`] scheduled runs (`dag_run_dag_id_logical_date_key`, then
//! `ti_dag_run`), however long the canary's history grows.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, Statement};

use crate::airflow::routes::Routes;
use crate::detail::{CanaryDetail, CanaryOnQueue, Seconds};
use crate::duration;
use crate::error::Result;

/// The canary DAG's id, as `overseer_airflow.canary` names it.
pub const DAG_ID: &str = "overseer_canary";

/// How many of the canary's latest scheduled runs are read.
pub const RUNS_READ: u32 = 3;

/// The canary DAG's row in Airflow's `dag` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DagRow {
    /// `is_paused`.
    pub paused: bool,
    /// `is_stale`: its file is gone from the DAG folder.
    pub stale: bool,
    /// `has_import_errors`.
    pub import_errors: bool,
    /// `next_dagrun_create_after`: when the scheduler is to make its next
    /// run; `null` while its one active run runs, or when it has no schedule.
    pub next_run_after: Option<DateTime<Utc>>,
}

/// One task instance of one of the canary's latest runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryTask {
    /// `dag_run.logical_date`: orders the runs.
    pub logical_date: DateTime<Utc>,
    /// `task_instance.run_id`.
    pub run_id: String,
    /// `task_instance.queue`.
    pub queue: String,
    /// The index of the executor that runs it ([`Routes::route`]), if any does.
    pub owner: Option<usize>,
    /// `task_instance.state` (`null` before the scheduler gave it one).
    pub state: Option<String>,
    /// `queued_dttm`.
    pub queued: Option<DateTime<Utc>>,
    /// `start_date`: when a worker started it.
    pub started: Option<DateTime<Utc>>,
    /// `end_date`.
    pub ended: Option<DateTime<Utc>>,
}

/// One read of the canary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryRead {
    /// When the read started, by this process's clock.
    pub read_at: DateTime<Utc>,
    /// The DAG's row; `None` when Airflow has not stored it (not installed).
    pub dag: Option<DagRow>,
    /// The task instances of its latest runs, the newest run first.
    pub tasks: Vec<CanaryTask>,
}

/// What the canary says of one executor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CanaryJudged {
    /// What the detail shows.
    pub detail: CanaryDetail,
    /// What is wrong, one per queue (makes the executor `unhealthy`).
    pub findings: Vec<String>,
    /// Why the canary cannot tell (makes a healthy executor `unknown`).
    pub blind: Option<String>,
}

/// Whether a task instance state is final, and a failure.
fn finished(state: Option<&str>) -> Option<bool> {
    match state? {
        "success" | "skipped" => Some(false),
        "failed" | "upstream_failed" | "up_for_retry" => Some(true),
        _ => None,
    }
}

impl CanaryRead {
    /// The canary's judgement of the executor at `index` (`default`: whether
    /// it runs the tasks that name no executor), at most `max_pickup` for a
    /// worker to start a queued canary; `None` when the canary is not
    /// installed or none of its runs is this executor's.
    ///
    /// `schedulers` is how many of Airflow's schedulers are alive, when known:
    /// a canary that stopped running is blamed on them when none is.
    pub fn for_executor(
        &self,
        index: usize,
        default: bool,
        max_pickup: Duration,
        schedulers: Option<u32>,
    ) -> Option<CanaryJudged> {
        let dag = self.dag.as_ref()?;
        let tasks: Vec<&CanaryTask> = self
            .tasks
            .iter()
            .filter(|t| t.owner == Some(index))
            .collect();
        if tasks.is_empty() && !(default && self.tasks.iter().all(|t| t.owner.is_none())) {
            return None;
        }
        let mut by_queue: BTreeMap<&str, Vec<&CanaryTask>> = BTreeMap::new();
        for task in &tasks {
            by_queue.entry(task.queue.as_str()).or_default().push(task);
        }
        let mut judged = CanaryJudged::default();
        let mut waiting_any = false;
        // Each queue's runs keep the read's order: the newest first.
        for (queue, runs) in by_queue {
            let latest = runs[0];
            let last_finished = runs.iter().find(|t| finished(t.state.as_deref()).is_some());
            let waiting = runs
                .iter()
                .take_while(|t| finished(t.state.as_deref()).is_none())
                .last()
                .copied();
            waiting_any |= waiting.is_some();
            let waited = waiting
                .filter(|t| t.started.is_none())
                .and_then(|t| t.queued)
                .map(|at| self.age(at));
            let picked = runs
                .iter()
                .find(|t| t.started.is_some() && t.queued.is_some());
            let succeeded = runs.iter().find(|t| t.state.as_deref() == Some("success"));
            if !max_pickup.is_zero() && waited.is_some_and(|w| w >= max_pickup) {
                judged.findings.push(format!(
                    "canary on queue {queue}: no worker started it within {}",
                    duration::age(max_pickup)
                ));
            } else if let Some(failed) =
                last_finished.filter(|t| finished(t.state.as_deref()) == Some(true))
            {
                judged.findings.push(if failed.started.is_some() {
                    format!("canary on queue {queue} failed")
                } else {
                    format!("canary on queue {queue} failed before a worker started it")
                });
            }
            judged.detail.queues.push(CanaryOnQueue {
                queue: queue.to_owned(),
                run_id: latest.run_id.clone(),
                state: latest.state.clone(),
                waiting_seconds: waited.map(|w| w.as_secs()),
                pickup_seconds: picked
                    .and_then(|t| seconds_between(t.queued?, t.started?))
                    .map(Seconds),
                run_seconds: succeeded
                    .and_then(|t| seconds_between(t.started?, t.ended?))
                    .map(Seconds),
                last_success: succeeded.and_then(|t| t.ended),
            });
        }
        let (state, blind) = if dag.paused {
            ("paused", Some(format!("canary DAG {DAG_ID} is paused")))
        } else if dag.stale {
            (
                "stale",
                Some(format!("canary DAG {DAG_ID} is gone from the DAG folder")),
            )
        } else if dag.import_errors {
            (
                "import errors",
                Some(format!("canary DAG {DAG_ID} does not import")),
            )
        } else if let Some(every) = self.silent(&tasks).filter(|_| !max_pickup.is_zero()) {
            let cause = match schedulers {
                Some(0) => ": the scheduler is not running",
                _ => "",
            };
            (
                "not running",
                Some(format!(
                    "canary DAG {DAG_ID} has not run for two of its intervals (every {}){cause}",
                    duration::age(every)
                )),
            )
        } else {
            match dag.next_run_after {
                Some(at) if !max_pickup.is_zero() && self.age(at) >= max_pickup => (
                    "not scheduled",
                    Some(format!(
                        "canary DAG {DAG_ID}: the scheduler did not start its next run within {} of its time",
                        duration::age(max_pickup)
                    )),
                ),
                None if !waiting_any => (
                    "not scheduled",
                    Some(format!("canary DAG {DAG_ID} has no next run")),
                ),
                _ => ("scheduled", None),
            }
        };
        judged.detail.dag_id = DAG_ID.to_owned();
        judged.detail.dag = state.to_owned();
        if blind.is_some() {
            // A canary that cannot run says nothing of the workers.
            judged.findings.clear();
        }
        judged.blind = blind;
        Some(judged)
    }

    /// The canary's period, when its latest run is older than three of them
    /// (its logical date starts the interval whose end made the run: two
    /// periods have passed since the next run was due). The period is the
    /// step between its two latest runs; with fewer, it is not known. Airflow's
    /// dag-processor moves `next_dagrun_create_after` on whether or not a
    /// scheduler is there to create the run, so only the runs themselves tell.
    fn silent(&self, tasks: &[&CanaryTask]) -> Option<Duration> {
        let mut dates: Vec<DateTime<Utc>> = tasks.iter().map(|t| t.logical_date).collect();
        dates.sort_unstable_by(|a, b| b.cmp(a));
        dates.dedup();
        let (&newest, &before) = (dates.first()?, dates.get(1)?);
        let every = (newest - before).to_std().ok().filter(|d| !d.is_zero())?;
        (self.age(newest) >= every * 3).then_some(every)
    }

    /// The picked-up canaries of the runs read, `(run_id, queue, seconds from
    /// queued to started)`, of the executor at `index`.
    pub fn pickups(&self, index: usize) -> impl Iterator<Item = (&str, &str, f64)> {
        self.tasks
            .iter()
            .filter(move |t| t.owner == Some(index))
            .filter_map(|t| {
                let seconds = seconds_between(t.queued?, t.started?)?;
                Some((t.run_id.as_str(), t.queue.as_str(), seconds))
            })
    }

    fn age(&self, at: DateTime<Utc>) -> Duration {
        (self.read_at - at).to_std().unwrap_or_default()
    }
}

fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> Option<f64> {
    let micros = (to - from).num_microseconds()?;
    Some((micros.max(0) as f64) / 1e6)
}

/// Remembers which canaries' pickups were counted, so that each is counted
/// once however many reads see it.
#[derive(Debug, Default)]
pub struct PickupsSeen {
    seen: HashSet<(String, String)>,
}

impl PickupsSeen {
    /// The pickups of `read` not seen before; forgets those no longer read.
    pub fn new_pickups(&mut self, read: &CanaryRead, index: usize) -> Vec<(String, f64)> {
        let mut fresh = Vec::new();
        let mut now = HashSet::new();
        for (run, queue, seconds) in read.pickups(index) {
            let key = (run.to_owned(), queue.to_owned());
            if !self.seen.contains(&key) {
                fresh.push((queue.to_owned(), seconds));
            }
            now.insert(key);
        }
        self.seen = now;
        fresh
    }
}

/// Reads the canary at `now`: its DAG's row, then its latest runs' task
/// instances, each routed to the executor that runs it.
pub async fn read(
    db: &impl ConnectionTrait,
    routes: &Routes,
    now: DateTime<Utc>,
) -> Result<CanaryRead> {
    let backend = db.get_database_backend();
    let dag = db
        .query_one_raw(Statement::from_string(
            backend,
            format!(
                "SELECT is_paused, is_stale, has_import_errors, next_dagrun_create_after \
                 FROM dag WHERE dag_id = '{DAG_ID}'"
            ),
        ))
        .await?;
    let Some(dag) = dag else {
        return Ok(CanaryRead {
            read_at: now,
            dag: None,
            tasks: Vec::new(),
        });
    };
    let dag = DagRow {
        paused: flag(&dag, "is_paused")?,
        stale: flag(&dag, "is_stale")?,
        import_errors: dag
            .try_get::<Option<bool>>("", "has_import_errors")
            .ok()
            .flatten()
            .unwrap_or(false),
        next_run_after: dag.try_get("", "next_dagrun_create_after")?,
    };
    let rows = db
        .query_all_raw(Statement::from_string(backend, tasks_query()))
        .await?;
    let mut tasks = Vec::with_capacity(rows.len());
    for row in rows {
        let executor: Option<String> = row.try_get("", "executor")?;
        tasks.push(CanaryTask {
            logical_date: row.try_get("", "logical_date")?,
            run_id: row.try_get("", "run_id")?,
            queue: row
                .try_get::<Option<String>>("", "queue")?
                .unwrap_or_default(),
            owner: routes.route(executor.as_deref(), None),
            state: row.try_get("", "state")?,
            queued: row.try_get("", "queued_dttm")?,
            started: row.try_get("", "start_date")?,
            ended: row.try_get("", "end_date")?,
        });
    }
    tasks.sort_by_key(|t| std::cmp::Reverse(t.logical_date));
    Ok(CanaryRead {
        read_at: now,
        dag: Some(dag),
        tasks,
    })
}

/// A boolean column, as each backend returns it (MySQL's `TINYINT(1)`).
fn flag(row: &sea_orm::QueryResult, column: &str) -> Result<bool> {
    match row.try_get::<bool>("", column) {
        Ok(value) => Ok(value),
        Err(_) => Ok(row.try_get::<i64>("", column)? != 0),
    }
}

/// The canary's task instances of its latest scheduled runs: the runs by
/// `logical_date` (the backward scan of Airflow's unique `(dag_id,
/// logical_date)` index, whose `LIMIT` MySQL accepts only in a derived table),
/// their task instances by `ti_dag_run`.
pub fn tasks_query() -> String {
    format!(
        "SELECT dr.logical_date AS logical_date, ti.run_id AS run_id, ti.queue AS queue, \
         ti.executor AS executor, ti.state AS state, ti.queued_dttm AS queued_dttm, \
         ti.start_date AS start_date, ti.end_date AS end_date \
         FROM task_instance ti JOIN (SELECT run_id, logical_date FROM dag_run \
         WHERE dag_id = '{DAG_ID}' AND logical_date IS NOT NULL \
         ORDER BY logical_date DESC LIMIT {RUNS_READ}) dr ON dr.run_id = ti.run_id \
         WHERE ti.dag_id = '{DAG_ID}'"
    )
}

#[cfg(test)]
mod tests;
