//! The rules that fill the report: the thresholds a heartbeat is judged by,
//! Airflow's liveness test and its "most recent job" (running first, then the
//! latest heartbeat), and the report built from job rows by pure functions.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{
    ComponentParts, DetailedStatus, ExecutorEntry, ExecutorHealthKind, ExecutorInstance,
    HealthReport, RowExtras, Status,
};
use crate::detail::Detail;
use crate::entity::job;
use crate::job::{ExecutorHealth, JobState, JobType};
use crate::reason::Reason;

/// How old a heartbeat may be before its row counts as dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// `[scheduler] scheduler_health_check_threshold`, 30 s by default.
    pub scheduler: Duration,
    /// `[triggerer] triggerer_health_check_threshold`, 30 s by default.
    pub triggerer: Duration,
    /// `[dag_processor] health_check_threshold`, 30 s by default.
    pub dag_processor: Duration,
    /// Executor rows, whichever supervisor wrote them: see [`Self::executor_default`].
    pub executor: Duration,
}

impl Thresholds {
    /// Airflow's grace multiplier for job types without a threshold of their own.
    pub const GRACE_MULTIPLIER: f64 = 2.1;

    /// Airflow's threshold for its own components, and the floor of the executor one.
    pub const COMPONENT_DEFAULT: Duration = Duration::from_secs(30);

    /// Airflow's defaults, with the executor threshold for a heartbeat interval.
    pub fn with_heartbeat_interval(heartbeat_interval: Duration) -> Self {
        Self {
            scheduler: Self::COMPONENT_DEFAULT,
            triggerer: Self::COMPONENT_DEFAULT,
            dag_processor: Self::COMPONENT_DEFAULT,
            executor: Self::executor_default(heartbeat_interval),
        }
    }

    /// The executor threshold when none is configured: 30 s, as Airflow's other
    /// components, or `heartbeat_interval * 2.1` (Airflow's grace multiplier) when
    /// that is longer. The rows of every supervisor on a database are judged by
    /// one threshold, so it must cover the slowest writer, not only this one:
    /// 30 s covers every heartbeat up to 14 s.
    /// Saturates rather than overflows: `Duration::MAX` for a heartbeat too long
    /// to multiply (configuration never gives one: it bounds the interval).
    pub fn executor_default(heartbeat_interval: Duration) -> Duration {
        let graced =
            Duration::try_from_secs_f64(heartbeat_interval.as_secs_f64() * Self::GRACE_MULTIPLIER)
                .unwrap_or(Duration::MAX);
        Self::COMPONENT_DEFAULT.max(graced)
    }

    /// The threshold for a job type.
    pub fn of(&self, job_type: JobType) -> Duration {
        match job_type {
            JobType::SchedulerJob => self.scheduler,
            JobType::TriggererJob => self.triggerer,
            JobType::DagProcessorJob => self.dag_processor,
            JobType::ExecutorJob => self.executor,
        }
    }

    /// The longest threshold: rows older than this are dead whatever their type.
    pub fn longest(&self) -> Duration {
        JobType::ALL
            .into_iter()
            .map(|t| self.of(t))
            .max()
            .unwrap_or_default()
    }
}

/// The rows a report is built from: per job type the most recent job, by
/// Airflow's rule, and every open row that may still be alive.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobRows {
    /// The most recent job of each type, in [`JobType::ALL`]'s order.
    pub most_recent: [Option<job::Model>; 4],
    /// Rows with `state = 'running'`, no `end_date`, and a heartbeat younger than
    /// the longest threshold, of every type and host.
    pub live: Vec<job::Model>,
}

impl HealthReport {
    /// Builds the report from rows read at `now` (`metadatabase_ok` false when the
    /// read failed and `rows` are the last ones read), its JSON rendered.
    pub fn build(
        rows: &JobRows,
        metadatabase_ok: bool,
        thresholds: &Thresholds,
        now: DateTime<Utc>,
    ) -> Self {
        let live: Vec<&job::Model> = rows.live.iter().collect();
        let mut report = Self::assemble(
            rows.most_recent.each_ref().map(Option::as_ref),
            &live,
            &|_| None,
            metadatabase_ok,
            thresholds,
            now,
        );
        report.render();
        report
    }

    /// The report's content from rows given by reference (the aggregator's
    /// merge of its own rows over the ones it read), with the evidence `detail`
    /// gives for a row (this host's), without its JSON: compare it with
    /// [`Self::same_content`] and [`Self::render`] it only when it differs from
    /// the one published.
    pub fn assemble(
        most_recent: [Option<&job::Model>; 4],
        live: &[&job::Model],
        detail: &dyn Fn(&job::Model) -> Option<Arc<Detail>>,
        metadatabase_ok: bool,
        thresholds: &Thresholds,
        now: DateTime<Utc>,
    ) -> Self {
        Self::assemble_with(
            most_recent,
            live,
            &|row| RowExtras {
                detail: detail(row),
                ..RowExtras::default()
            },
            metadatabase_ok,
            thresholds,
            now,
        )
    }

    /// [`Self::assemble`], with all that `extras` knows of a row beyond the
    /// table: its evidence, and since when its state holds.
    pub fn assemble_with(
        most_recent: [Option<&job::Model>; 4],
        live: &[&job::Model],
        extras: &dyn Fn(&job::Model) -> RowExtras,
        metadatabase_ok: bool,
        thresholds: &Thresholds,
        now: DateTime<Utc>,
    ) -> Self {
        let alive =
            |row: &job::Model, job_type: JobType| is_alive(row, thresholds.of(job_type), now);
        let of_type = |job_type: JobType| {
            live.iter()
                .copied()
                .filter(move |r| r.job_type.as_deref() == Some(job_type.as_str()))
                .filter(move |r| alive(r, job_type))
        };
        let component = |job_type: JobType, required: bool| {
            let latest = most_recent[type_index(job_type)];
            let status = match latest {
                Some(row) => Some(Status::from_ok(alive(row, job_type))),
                None if required => Some(Status::Unhealthy),
                None => None,
            };
            let mut instances: Vec<(Option<String>, Option<DateTime<Utc>>)> = of_type(job_type)
                .map(|r| (r.hostname.clone(), r.latest_heartbeat))
                .collect();
            instances.sort_by(|a, b| a.0.cmp(&b.0));
            ComponentParts {
                status,
                latest_heartbeat: latest.and_then(|r| r.latest_heartbeat),
                instances,
            }
        };

        let latest_executor = most_recent[type_index(JobType::ExecutorJob)];
        let executor = latest_executor
            .filter(|r| r.end_date.is_none())
            .map(|latest| {
                let mut instances: Vec<ExecutorInstance> = of_type(JobType::ExecutorJob)
                    .map(|r| {
                        let extras = extras(r);
                        let health = r
                            .executor_health()
                            .unwrap_or_else(|e| ExecutorHealth::unhealthy(e.to_string()));
                        ExecutorInstance {
                            executor: r.executor_class.clone(),
                            instance: r.executor_instance.clone(),
                            hostname: r.hostname.clone(),
                            team_name: r.executor_class.as_deref().and_then(team_of),
                            latest_heartbeat: r.latest_heartbeat,
                            health_kind: ExecutorHealthKind::of(&health),
                            reason: {
                                // What another writer left is sanitised as it enters.
                                let note = r.executor_health_reason.as_deref().map(Reason::new);
                                health.shown(note.as_ref()).cloned()
                            },
                            health,
                            checked_at: r.executor_health_checked_at,
                            since: extras.since,
                            previous: extras.previous,
                            detail: extras.detail,
                            shown: None,
                            left_out: false,
                        }
                    })
                    .collect();
                instances.sort_by(|a, b| {
                    (&a.hostname, &a.executor, &a.instance).cmp(&(
                        &b.hostname,
                        &b.executor,
                        &b.instance,
                    ))
                });
                let fine = instances
                    .iter()
                    .filter(|i| !matches!(i.health, ExecutorHealth::Unhealthy { .. }))
                    .count();
                let judged = instances.iter().any(|i| !i.health.is_unknown());
                let detailed_status = if !instances.is_empty() && !judged {
                    DetailedStatus::Unknown
                } else {
                    DetailedStatus::from_counts(fine, instances.len())
                };
                // Nothing has answered yet: not healthy, not dead either.
                let checked = instances.iter().any(|i| i.checked_at.is_some());
                ExecutorEntry {
                    status: (instances.is_empty() || checked)
                        .then(|| Status::from_ok(!instances.is_empty() && fine == instances.len())),
                    latest_heartbeat: latest.latest_heartbeat,
                    detailed_status,
                    instances,
                    instances_left_out: 0,
                }
            });

        Self {
            metadatabase: Status::from_ok(metadatabase_ok),
            scheduler: component(JobType::SchedulerJob, true).into(),
            triggerer: component(JobType::TriggererJob, false).into(),
            dag_processor: component(JobType::DagProcessorJob, false).into(),
            executor,
            generated_at: now,
            json: String::new(),
        }
    }
}

/// The team of an executor named as Overseer names a team's
/// (`team_a=CeleryExecutor`); `None` for any other name.
pub fn team_of(executor: &str) -> Option<String> {
    executor
        .split_once('=')
        .map(|(team, _)| team.to_owned())
        .filter(|team| !team.is_empty())
}

/// Airflow's liveness test: `running`, and a heartbeat younger than the threshold.
pub fn is_alive(row: &job::Model, threshold: Duration, now: DateTime<Utc>) -> bool {
    row.state.as_deref() == Some(JobState::Running.as_str())
        && row.latest_heartbeat.is_some_and(|heartbeat| {
            (now - heartbeat)
                .to_std()
                .map_or(true, |age| age < threshold)
        })
}

/// The index of a job type in [`JobType::ALL`].
pub fn type_index(job_type: JobType) -> usize {
    JobType::ALL
        .iter()
        .position(|t| *t == job_type)
        .expect("every job type is in ALL")
}
