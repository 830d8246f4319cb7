//! The health report: what `/api/v2/monitor/health` answers, built by pure
//! functions from job rows, thresholds and the time.
//!
//! Airflow 3.3's fields follow Airflow's own rules (`airflow_health.py`,
//! `job.py`): per component the *most recent job* (running first, then latest
//! heartbeat), its heartbeat as `latest_<component>_heartbeat`, and `status`
//! `healthy` when that job is alive (`running`, heartbeat younger than the
//! threshold). With no job the scheduler is `unhealthy`, the triggerer and DAG
//! processor `null`. Overseer adds `detailed_status` and `instances` per
//! component, and the `executor` entry.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::entity::job;
use crate::job::{ExecutorHealth, JobState, JobType};

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
    pub fn executor_default(heartbeat_interval: Duration) -> Duration {
        Self::COMPONENT_DEFAULT.max(heartbeat_interval.mul_f64(Self::GRACE_MULTIPLIER))
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

/// `healthy` or `unhealthy`, as Airflow writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Healthy,
    Unhealthy,
}

impl Status {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Unhealthy => "unhealthy",
        }
    }

    fn from_ok(ok: bool) -> Self {
        if ok { Self::Healthy } else { Self::Unhealthy }
    }
}

/// How a component's instances are doing together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailedStatus {
    /// Every live instance is fine (and there is at least one).
    Healthy,
    /// Some live instances are fine, some are not.
    Degraded,
    /// None is fine, or there is none.
    Down,
}

impl DetailedStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Degraded => "degraded",
            Self::Down => "down",
        }
    }

    fn from_counts(fine: usize, total: usize) -> Self {
        match (fine, total) {
            (0, _) => Self::Down,
            (f, t) if f == t => Self::Healthy,
            _ => Self::Degraded,
        }
    }
}

/// One live instance of an Airflow component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentInstance {
    pub hostname: Option<String>,
    pub latest_heartbeat: Option<DateTime<Utc>>,
}

/// One Airflow component: scheduler, triggerer or DAG processor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// Airflow's: `None` for a triggerer or DAG processor that never ran.
    pub status: Option<Status>,
    /// Airflow's: the most recent job's heartbeat, alive or not.
    pub latest_heartbeat: Option<DateTime<Utc>>,
    pub detailed_status: DetailedStatus,
    pub instances: Vec<ComponentInstance>,
}

/// One live executor row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorInstance {
    pub executor: Option<String>,
    pub instance: Option<String>,
    pub hostname: Option<String>,
    pub latest_heartbeat: Option<DateTime<Utc>>,
    pub health: ExecutorHealth,
    pub checked_at: Option<DateTime<Utc>>,
}

/// The `executor` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorEntry {
    pub status: Status,
    pub latest_heartbeat: Option<DateTime<Utc>>,
    pub detailed_status: DetailedStatus,
    pub instances: Vec<ExecutorInstance>,
}

/// The whole report, immutable once built, with its JSON rendered once.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthReport {
    pub metadatabase: Status,
    pub scheduler: Component,
    pub triggerer: Component,
    pub dag_processor: Component,
    /// Present when some executor row has no `end_date`.
    pub executor: Option<ExecutorEntry>,
    /// When the report was built.
    pub generated_at: DateTime<Utc>,
    json: String,
}

impl HealthReport {
    /// Builds the report from rows read at `now` (`metadatabase_ok` false when the
    /// read failed and `rows` are the last ones read).
    pub fn build(
        rows: &JobRows,
        metadatabase_ok: bool,
        thresholds: &Thresholds,
        now: DateTime<Utc>,
    ) -> Self {
        let alive =
            |row: &job::Model, job_type: JobType| is_alive(row, thresholds.of(job_type), now);
        let component = |job_type: JobType, required: bool| {
            let latest = rows.most_recent[type_index(job_type)].as_ref();
            let status = match latest {
                Some(row) => Some(Status::from_ok(alive(row, job_type))),
                None if required => Some(Status::Unhealthy),
                None => None,
            };
            let mut instances: Vec<ComponentInstance> = rows
                .live
                .iter()
                .filter(|r| r.job_type.as_deref() == Some(job_type.as_str()) && alive(r, job_type))
                .map(|r| ComponentInstance {
                    hostname: r.hostname.clone(),
                    latest_heartbeat: r.latest_heartbeat,
                })
                .collect();
            instances.sort_by(|a, b| a.hostname.cmp(&b.hostname));
            Component {
                status,
                latest_heartbeat: latest.and_then(|r| r.latest_heartbeat),
                detailed_status: DetailedStatus::from_counts(instances.len(), instances.len()),
                instances,
            }
        };

        let latest_executor = rows.most_recent[type_index(JobType::ExecutorJob)].as_ref();
        let executor = latest_executor
            .filter(|r| r.end_date.is_none())
            .map(|latest| {
                let mut instances: Vec<ExecutorInstance> = rows
                    .live
                    .iter()
                    .filter(|r| {
                        r.job_type.as_deref() == Some(JobType::ExecutorJob.as_str())
                            && alive(r, JobType::ExecutorJob)
                    })
                    .map(|r| ExecutorInstance {
                        executor: r.executor_class.clone(),
                        instance: r.executor_instance.clone(),
                        hostname: r.hostname.clone(),
                        latest_heartbeat: r.latest_heartbeat,
                        health: r
                            .executor_health()
                            .unwrap_or_else(|e| ExecutorHealth::unhealthy(e.to_string())),
                        checked_at: r.executor_health_checked_at,
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
                ExecutorEntry {
                    status: Status::from_ok(!instances.is_empty() && fine == instances.len()),
                    latest_heartbeat: latest.latest_heartbeat,
                    detailed_status: DetailedStatus::from_counts(fine, instances.len()),
                    instances,
                }
            });

        let mut report = Self {
            metadatabase: Status::from_ok(metadatabase_ok),
            scheduler: component(JobType::SchedulerJob, true),
            triggerer: component(JobType::TriggererJob, false),
            dag_processor: component(JobType::DagProcessorJob, false),
            executor,
            generated_at: now,
            json: String::new(),
        };
        report.json = report.to_value().to_string();
        report
    }

    /// The JSON body of `/api/v2/monitor/health`, rendered when the report was built.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// True when any component says `unhealthy` (`null` does not count).
    pub fn any_unhealthy(&self) -> bool {
        self.metadatabase == Status::Unhealthy
            || [&self.scheduler, &self.triggerer, &self.dag_processor]
                .iter()
                .any(|c| c.status == Some(Status::Unhealthy))
            || self
                .executor
                .as_ref()
                .is_some_and(|e| e.status == Status::Unhealthy)
    }

    fn to_value(&self) -> Value {
        let component = |c: &Component, heartbeat_key: &str| {
            let instances: Vec<Value> = c
                .instances
                .iter()
                .map(|i| json!({"hostname": i.hostname, heartbeat_key: i.latest_heartbeat.map(airflow_timestamp)}))
                .collect();
            json!({
                "status": c.status.map(Status::as_str),
                heartbeat_key: c.latest_heartbeat.map(airflow_timestamp),
                "detailed_status": c.detailed_status.as_str(),
                "instances": instances,
            })
        };
        let mut body = json!({
            "metadatabase": {"status": self.metadatabase.as_str()},
            "scheduler": component(&self.scheduler, "latest_scheduler_heartbeat"),
            "triggerer": component(&self.triggerer, "latest_triggerer_heartbeat"),
            "dag_processor": component(&self.dag_processor, "latest_dag_processor_heartbeat"),
        });
        if let Some(executor) = &self.executor {
            let instances: Vec<Value> = executor
                .instances
                .iter()
                .map(|i| {
                    json!({
                        "executor": i.executor,
                        "instance": i.instance,
                        "hostname": i.hostname,
                        "latest_executor_heartbeat": i.latest_heartbeat.map(airflow_timestamp),
                        "health": i.health.as_str(),
                        "reason": i.health.reason(),
                        "checked_at": i.checked_at.map(airflow_timestamp),
                    })
                })
                .collect();
            body["executor"] = json!({
                "status": executor.status.as_str(),
                "latest_executor_heartbeat": executor.latest_heartbeat.map(airflow_timestamp),
                "detailed_status": executor.detailed_status.as_str(),
                "instances": instances,
            });
        }
        body
    }
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

/// A timestamp as Python's `datetime.isoformat()` writes an aware UTC one, which is
/// what Airflow's JSON carries: `2026-11-29T19:48:48.365305+00:00`, and no
/// fraction at all when the microseconds are zero.
pub fn airflow_timestamp(at: DateTime<Utc>) -> String {
    let micros = at.timestamp_subsec_micros();
    if micros == 0 {
        at.format("%Y-%m-%dT%H:%M:%S+00:00").to_string()
    } else {
        format!("{}.{micros:06}+00:00", at.format("%Y-%m-%dT%H:%M:%S"))
    }
}

/// The index of a job type in [`JobType::ALL`].
pub fn type_index(job_type: JobType) -> usize {
    JobType::ALL
        .iter()
        .position(|t| *t == job_type)
        .expect("every job type is in ALL")
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::Value;

    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, 19, 48, 48).unwrap()
            + chrono::Duration::microseconds(365_305)
    }

    fn thresholds() -> Thresholds {
        Thresholds::with_heartbeat_interval(Duration::from_secs(5))
    }

    /// A row of `job_type` on `host`, heartbeat `age` seconds before [`now`].
    fn row(id: i32, job_type: JobType, state: JobState, age: i64, host: &str) -> job::Model {
        job::Model {
            id,
            dag_id: None,
            state: Some(state.as_str().into()),
            job_type: Some(job_type.as_str().into()),
            start_date: Some(now() - chrono::Duration::hours(1)),
            end_date: (state != JobState::Running).then(|| now() - chrono::Duration::seconds(age)),
            latest_heartbeat: Some(now() - chrono::Duration::seconds(age)),
            executor_class: None,
            hostname: Some(host.into()),
            unixname: Some("airflow".into()),
            executor_health: "unknown".into(),
            executor_health_reason: None,
            executor_instance: None,
            executor_health_checked_at: None,
        }
    }

    fn executor_row(id: i32, age: i64, host: &str, health: ExecutorHealth) -> job::Model {
        job::Model {
            executor_class: Some("CeleryExecutor".into()),
            executor_instance: Some("redis://broker:6379/0".into()),
            executor_health: health.as_str().into(),
            executor_health_reason: health.reason().map(str::to_owned),
            executor_health_checked_at: Some(now() - chrono::Duration::seconds(age)),
            ..row(id, JobType::ExecutorJob, JobState::Running, age, host)
        }
    }

    /// Builds the report the way the aggregator reads rows: the most recent job per
    /// type by Airflow's rule, and the open running rows.
    fn report(rows: Vec<job::Model>) -> Value {
        let mut job_rows = JobRows::default();
        for job_type in JobType::ALL {
            let mut of_type: Vec<&job::Model> = rows
                .iter()
                .filter(|r| r.job_type.as_deref() == Some(job_type.as_str()))
                .collect();
            of_type.sort_by_key(|r| {
                (
                    r.state.as_deref() != Some("running"),
                    std::cmp::Reverse(r.latest_heartbeat),
                )
            });
            job_rows.most_recent[type_index(job_type)] = of_type.first().map(|r| (*r).clone());
        }
        job_rows.live = rows
            .into_iter()
            .filter(|r| r.state.as_deref() == Some("running") && r.end_date.is_none())
            .collect();
        let report = HealthReport::build(&job_rows, true, &thresholds(), now());
        serde_json::from_str(report.json()).unwrap()
    }

    #[test]
    fn no_rows_scheduler_unhealthy_others_null_and_no_executor_entry() {
        let body = report(vec![]);
        assert_eq!(
            body,
            serde_json::json!({
                "metadatabase": {"status": "healthy"},
                "scheduler": {"status": "unhealthy", "latest_scheduler_heartbeat": null, "detailed_status": "down", "instances": []},
                "triggerer": {"status": null, "latest_triggerer_heartbeat": null, "detailed_status": "down", "instances": []},
                "dag_processor": {"status": null, "latest_dag_processor_heartbeat": null, "detailed_status": "down", "instances": []},
            })
        );
    }

    #[test]
    fn airflow_component_rules_table() {
        use JobState::*;
        use JobType::*;
        struct Case {
            what: &'static str,
            rows: Vec<job::Model>,
            scheduler: (&'static str, Option<&'static str>, &'static str, usize),
        }
        let cases = [
            Case {
                what: "fresh scheduler",
                rows: vec![row(1, SchedulerJob, Running, 3, "sched-1")],
                scheduler: (
                    "healthy",
                    Some("2026-11-29T19:48:45.365305+00:00"),
                    "healthy",
                    1,
                ),
            },
            Case {
                what: "stale scheduler: heartbeat still reported, status unhealthy",
                rows: vec![row(1, SchedulerJob, Running, 40, "sched-1")],
                scheduler: (
                    "unhealthy",
                    Some("2026-11-29T19:48:08.365305+00:00"),
                    "down",
                    0,
                ),
            },
            Case {
                what: "exactly at the threshold is dead (Airflow's strict <)",
                rows: vec![row(1, SchedulerJob, Running, 30, "sched-1")],
                scheduler: (
                    "unhealthy",
                    Some("2026-11-29T19:48:18.365305+00:00"),
                    "down",
                    0,
                ),
            },
            Case {
                what: "ended scheduler is the most recent: unhealthy",
                rows: vec![row(1, SchedulerJob, Success, 1, "sched-1")],
                scheduler: (
                    "unhealthy",
                    Some("2026-11-29T19:48:47.365305+00:00"),
                    "down",
                    0,
                ),
            },
            Case {
                what: "restarted: the crashed row stays open and stale, the new one is fresh",
                rows: vec![
                    row(1, SchedulerJob, Running, 600, "sched-1"),
                    row(2, SchedulerJob, Running, 2, "sched-1"),
                ],
                scheduler: (
                    "healthy",
                    Some("2026-11-29T19:48:46.365305+00:00"),
                    "healthy",
                    1,
                ),
            },
            Case {
                what: "a running row beats a newer ended one",
                rows: vec![
                    row(1, SchedulerJob, Running, 20, "a"),
                    row(2, SchedulerJob, Success, 1, "b"),
                ],
                scheduler: (
                    "healthy",
                    Some("2026-11-29T19:48:28.365305+00:00"),
                    "healthy",
                    1,
                ),
            },
            Case {
                what: "two live hosts",
                rows: vec![
                    row(1, SchedulerJob, Running, 2, "b"),
                    row(2, SchedulerJob, Running, 5, "a"),
                ],
                scheduler: (
                    "healthy",
                    Some("2026-11-29T19:48:46.365305+00:00"),
                    "healthy",
                    2,
                ),
            },
        ];
        for case in cases {
            let body = report(case.rows);
            let scheduler = &body["scheduler"];
            let (status, heartbeat, detailed, instances) = case.scheduler;
            assert_eq!(scheduler["status"], status, "{}", case.what);
            assert_eq!(
                scheduler["latest_scheduler_heartbeat"].as_str(),
                heartbeat,
                "{}",
                case.what
            );
            assert_eq!(scheduler["detailed_status"], detailed, "{}", case.what);
            assert_eq!(
                scheduler["instances"].as_array().unwrap().len(),
                instances,
                "{}",
                case.what
            );
        }
    }

    #[test]
    fn a_triggerer_that_ran_once_is_unhealthy_not_null() {
        let body = report(vec![row(
            1,
            JobType::TriggererJob,
            JobState::Failed,
            100,
            "t",
        )]);
        assert_eq!(body["triggerer"]["status"], "unhealthy");
        assert_eq!(body["dag_processor"]["status"], Value::Null);
    }

    #[test]
    fn executor_entry_rules_table() {
        let bad =
            || ExecutorHealth::unhealthy("broker redis://broker:6379/0 refused the connection");
        struct Case {
            what: &'static str,
            rows: Vec<job::Model>,
            expect: Option<(&'static str, &'static str, usize)>,
        }
        let cases = [
            Case {
                what: "no executor rows: no entry",
                rows: vec![row(1, JobType::SchedulerJob, JobState::Running, 1, "s")],
                expect: None,
            },
            Case {
                what: "all executor rows ended: no entry",
                rows: vec![row(1, JobType::ExecutorJob, JobState::Success, 1, "s")],
                expect: None,
            },
            Case {
                what: "one healthy",
                rows: vec![executor_row(1, 1, "a", ExecutorHealth::Healthy)],
                expect: Some(("healthy", "healthy", 1)),
            },
            Case {
                what: "unknown never counts as dead",
                rows: vec![executor_row(1, 1, "a", ExecutorHealth::Unknown)],
                expect: Some(("healthy", "healthy", 1)),
            },
            Case {
                what: "mixed verdicts: degraded",
                rows: vec![
                    executor_row(1, 1, "a", ExecutorHealth::Healthy),
                    executor_row(2, 1, "b", bad()),
                ],
                expect: Some(("unhealthy", "degraded", 2)),
            },
            Case {
                what: "every live row unhealthy: down",
                rows: vec![executor_row(1, 1, "a", bad())],
                expect: Some(("unhealthy", "down", 1)),
            },
            Case {
                what: "stale rows are not instances (threshold 30 s)",
                rows: vec![executor_row(1, 31, "a", ExecutorHealth::Healthy)],
                expect: Some(("unhealthy", "down", 0)),
            },
            Case {
                what: "a slower supervisor's row between its heartbeats is alive \
                       (older than this host's 5 s * 2.1, within 30 s)",
                rows: vec![executor_row(1, 20, "a", ExecutorHealth::Healthy)],
                expect: Some(("healthy", "healthy", 1)),
            },
            Case {
                what: "a stale unhealthy ghost beside a fresh healthy row is ignored",
                rows: vec![
                    executor_row(1, 600, "a", bad()),
                    executor_row(2, 1, "a", ExecutorHealth::Healthy),
                ],
                expect: Some(("healthy", "healthy", 1)),
            },
        ];
        for case in cases {
            let body = report(case.rows);
            match case.expect {
                None => assert!(body.get("executor").is_none(), "{}", case.what),
                Some((status, detailed, instances)) => {
                    let executor = &body["executor"];
                    assert_eq!(executor["status"], status, "{}", case.what);
                    assert_eq!(executor["detailed_status"], detailed, "{}", case.what);
                    assert_eq!(
                        executor["instances"].as_array().unwrap().len(),
                        instances,
                        "{}",
                        case.what
                    );
                }
            }
        }
    }

    #[test]
    fn an_executor_instance_carries_its_verdict_reason_and_check_time() {
        let body = report(vec![executor_row(
            7,
            2,
            "sched-1",
            ExecutorHealth::unhealthy("broker unreachable: connection refused"),
        )]);
        assert_eq!(
            body["executor"],
            serde_json::json!({
                "status": "unhealthy",
                "latest_executor_heartbeat": "2026-11-29T19:48:46.365305+00:00",
                "detailed_status": "down",
                "instances": [{
                    "executor": "CeleryExecutor",
                    "instance": "redis://broker:6379/0",
                    "hostname": "sched-1",
                    "latest_executor_heartbeat": "2026-11-29T19:48:46.365305+00:00",
                    "health": "unhealthy",
                    "reason": "broker unreachable: connection refused",
                    "checked_at": "2026-11-29T19:48:46.365305+00:00",
                }],
            })
        );
    }

    #[test]
    fn a_failed_read_marks_the_metadatabase_unhealthy() {
        let report = HealthReport::build(&JobRows::default(), false, &thresholds(), now());
        assert!(
            report
                .json()
                .starts_with(r#"{"metadatabase":{"status":"unhealthy"},"scheduler":"#)
        );
        assert!(report.any_unhealthy());
    }

    #[test]
    fn timestamps_are_written_as_python_isoformat_writes_them() {
        assert_eq!(airflow_timestamp(now()), "2026-11-29T19:48:48.365305+00:00");
        let whole = Utc.with_ymd_and_hms(2026, 11, 29, 19, 48, 48).unwrap();
        assert_eq!(airflow_timestamp(whole), "2026-11-29T19:48:48+00:00");
        let small = whole + chrono::Duration::microseconds(5);
        assert_eq!(airflow_timestamp(small), "2026-11-29T19:48:48.000005+00:00");
    }

    #[test]
    fn the_json_keeps_airflows_key_order() {
        let body = report(vec![row(
            1,
            JobType::SchedulerJob,
            JobState::Running,
            1,
            "s",
        )]);
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["metadatabase", "scheduler", "triggerer", "dag_processor"]
        );
    }
}
