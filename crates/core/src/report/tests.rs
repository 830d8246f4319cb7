//! The report's rules, table-tested, and its JSON pinned byte for byte.

use std::time::Duration;

use chrono::TimeZone;
use serde_json::Value;

use super::*;
use crate::entity::job;
use crate::job::{ExecutorHealth, JobState, JobType};

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

/// A live executor row its supervisor has not checked yet (just started).
fn unchecked_row(id: i32, host: &str) -> job::Model {
    job::Model {
        executor_health_checked_at: None,
        ..executor_row(id, 1, host, ExecutorHealth::default())
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

/// A report with every shape a value can take: several hosts, a host name
/// that is null, whole-second and fractional timestamps, an ended component,
/// one that never ran, every verdict, a reason that needs escaping, and a
/// verdict not yet made.
fn every_shape() -> Vec<job::Model> {
    let at = |micros: i64| Some(now() - chrono::Duration::microseconds(micros));
    let executor = |id, host: &str, class: &str, health: ExecutorHealth, checked| job::Model {
        executor_class: Some(class.into()),
        executor_health_checked_at: checked,
        ..executor_row(id, 1, host, health)
    };
    vec![
        job::Model {
            latest_heartbeat: at(2_000_000),
            ..row(1, JobType::SchedulerJob, JobState::Running, 0, "sched-1")
        },
        job::Model {
            hostname: None,
            latest_heartbeat: at(3_365_305),
            ..row(2, JobType::SchedulerJob, JobState::Running, 0, "")
        },
        row(3, JobType::TriggererJob, JobState::Success, 100, "trig-1"),
        job::Model {
            latest_heartbeat: at(365_305),
            ..row(4, JobType::DagProcessorJob, JobState::Running, 0, "dp-1")
        },
        executor(
            5,
            "sched-1",
            "CeleryExecutor",
            ExecutorHealth::Healthy,
            at(2_000_000),
        ),
        executor(
            6,
            "sched-2",
            "alias:CeleryExecutor",
            ExecutorHealth::unhealthy("broker \"redis://broker:6379/0\" refused: é\n\\"),
            at(365_300),
        ),
        executor(
            7,
            "sched-2",
            "LocalExecutor",
            ExecutorHealth::default(),
            None,
        ),
    ]
}

/// The JSON is what the hand-written renderer wrote before the report's
/// types wrote it themselves, byte for byte: Airflow's fields in Airflow's
/// order, `null`s, and Python's `isoformat()`; each executor instance has
/// gained `detail` since (null for rows read from the table), then `since`
/// and `previous` (null when nothing says).
#[test]
fn the_json_is_byte_for_byte_what_it_was_pinned_to_be() {
    let mut job_rows = JobRows::default();
    let rows = every_shape();
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
        .filter(|r| r.state.as_deref() == Some("running"))
        .collect();
    let full = HealthReport::build(&job_rows, true, &thresholds(), now());
    assert_eq!(
        full.json(),
        r##"{"metadatabase":{"status":"healthy"},"scheduler":{"status":"healthy","latest_scheduler_heartbeat":"2026-11-29T19:48:46.365305+00:00","detailed_status":"healthy","instances":[{"hostname":null,"latest_scheduler_heartbeat":"2026-11-29T19:48:45+00:00"},{"hostname":"sched-1","latest_scheduler_heartbeat":"2026-11-29T19:48:46.365305+00:00"}]},"triggerer":{"status":"unhealthy","latest_triggerer_heartbeat":"2026-11-29T19:47:08.365305+00:00","detailed_status":"down","instances":[]},"dag_processor":{"status":"healthy","latest_dag_processor_heartbeat":"2026-11-29T19:48:48+00:00","detailed_status":"healthy","instances":[{"hostname":"dp-1","latest_dag_processor_heartbeat":"2026-11-29T19:48:48+00:00"}]},"executor":{"status":"unhealthy","latest_executor_heartbeat":"2026-11-29T19:48:47.365305+00:00","detailed_status":"degraded","instances":[{"executor":"CeleryExecutor","instance":"redis://broker:6379/0","hostname":"sched-1","team_name":null,"latest_executor_heartbeat":"2026-11-29T19:48:47.365305+00:00","health":"healthy","reason":null,"checked_at":"2026-11-29T19:48:46.365305+00:00","since":null,"previous":null,"detail":null},{"executor":"LocalExecutor","instance":"redis://broker:6379/0","hostname":"sched-2","team_name":null,"latest_executor_heartbeat":"2026-11-29T19:48:47.365305+00:00","health":"unknown","reason":"not checked yet","checked_at":null,"since":null,"previous":null,"detail":null},{"executor":"alias:CeleryExecutor","instance":"redis://broker:6379/0","hostname":"sched-2","team_name":null,"latest_executor_heartbeat":"2026-11-29T19:48:47.365305+00:00","health":"unhealthy","reason":"broker \"redis://broker:6379/0\" refused: é \\","checked_at":"2026-11-29T19:48:48.000005+00:00","since":null,"previous":null,"detail":null}],"instances_left_out":0}}"##
    );
    let empty = HealthReport::build(&JobRows::default(), false, &thresholds(), now());
    assert_eq!(
        empty.json(),
        r##"{"metadatabase":{"status":"unhealthy"},"scheduler":{"status":"unhealthy","latest_scheduler_heartbeat":null,"detailed_status":"down","instances":[]},"triggerer":{"status":null,"latest_triggerer_heartbeat":null,"detailed_status":"down","instances":[]},"dag_processor":{"status":null,"latest_dag_processor_heartbeat":null,"detailed_status":"down","instances":[]}}"##
    );
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
    let bad = || ExecutorHealth::unhealthy("broker redis://broker:6379/0 refused the connection");
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
            what: "unknown never counts as dead, and says nothing is known",
            rows: vec![executor_row(1, 1, "a", ExecutorHealth::default())],
            expect: Some(("healthy", "unknown", 1)),
        },
        Case {
            what: "right after a start, nothing checked yet: status null, never healthy",
            rows: vec![unchecked_row(1, "a"), unchecked_row(2, "b")],
            expect: Some(("null", "unknown", 2)),
        },
        Case {
            what: "one instance checked beside unchecked ones: judged",
            rows: vec![
                unchecked_row(1, "a"),
                executor_row(2, 1, "b", ExecutorHealth::Healthy),
            ],
            expect: Some(("healthy", "healthy", 2)),
        },
        Case {
            what: "one verdict beside unknown ones decides",
            rows: vec![
                executor_row(1, 1, "a", ExecutorHealth::default()),
                executor_row(2, 1, "b", ExecutorHealth::Healthy),
            ],
            expect: Some(("healthy", "healthy", 2)),
        },
        Case {
            what: "unhealthy beside unknown: degraded",
            rows: vec![
                executor_row(1, 1, "a", ExecutorHealth::default()),
                executor_row(2, 1, "b", bad()),
            ],
            expect: Some(("unhealthy", "degraded", 2)),
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
                let status = match status {
                    "null" => Value::Null,
                    said => Value::from(said),
                };
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
                "team_name": null,
                "latest_executor_heartbeat": "2026-11-29T19:48:46.365305+00:00",
                "health": "unhealthy",
                "reason": "broker unreachable: connection refused",
                "checked_at": "2026-11-29T19:48:46.365305+00:00",
                "since": null,
                "previous": null,
                "detail": null,
            }],
            "instances_left_out": 0,
        })
    );
}

/// `since` and `previous` are what the aggregator says of a row, written as
/// the other times (Python's `isoformat()`) and states are; nothing said, both
/// are `null`.
#[test]
fn an_executor_instance_says_since_when_its_state_holds_and_the_one_before() {
    let rows = [
        executor_row(7, 2, "sched-1", ExecutorHealth::unhealthy("broker down")),
        executor_row(8, 2, "sched-2", ExecutorHealth::Healthy),
    ];
    let live: Vec<&job::Model> = rows.iter().collect();
    let mut most_recent: [Option<&job::Model>; 4] = Default::default();
    most_recent[type_index(JobType::ExecutorJob)] = Some(&rows[0]);
    let mut report = HealthReport::assemble_with(
        most_recent,
        &live,
        &|row: &job::Model| match row.id {
            7 => RowExtras {
                detail: None,
                since: Some(now() - chrono::Duration::seconds(90)),
                previous: Some(ExecutorHealthKind::Healthy),
            },
            _ => RowExtras::default(),
        },
        true,
        &thresholds(),
        now(),
    );
    report.render();
    let body: serde_json::Value = serde_json::from_str(report.json()).unwrap();
    let instances = &body["executor"]["instances"];
    assert_eq!(instances[0]["since"], "2026-11-29T19:47:18.365305+00:00");
    assert_eq!(instances[0]["previous"], "healthy");
    assert_eq!(instances[1]["since"], serde_json::Value::Null);
    assert_eq!(instances[1]["previous"], serde_json::Value::Null);
    assert!(
        report
            .json()
            .contains(r#""checked_at":"2026-11-29T19:48:46.365305+00:00","since":"2026-11-29T19:47:18.365305+00:00","previous":"healthy","detail":null"#),
        "{}",
        report.json()
    );
}

#[test]
fn this_host_s_rows_carry_their_evidence_and_other_hosts_rows_none() {
    use crate::detail::{Detail, QueueDetail, QueuedOnQueue, QueuedTasks, WorkerDetail};
    let rows = [
        executor_row(7, 2, "sched-1", ExecutorHealth::Healthy),
        executor_row(8, 2, "sched-2", ExecutorHealth::Healthy),
    ];
    let detail = std::sync::Arc::new(Detail {
        queues: vec![QueueDetail {
            name: "default".into(),
            broker: "redis://broker:6379/0".into(),
            depth: Some(3),
            consumers: None,
        }],
        workers: Some(vec![WorkerDetail {
            name: "celery@w1".into(),
            queues: Some(vec!["default".into()]),
            state: None,
            concurrency: None,
            free_concurrency: None,
            heartbeat: None,
        }]),
        queued_tasks: Some(QueuedTasks {
            count: 2,
            oldest_seconds: Some(42),
            queues: vec![QueuedOnQueue {
                queue: "default".into(),
                count: 2,
                oldest_seconds: Some(42),
                overdue: 0,
            }],
        }),
        brokers: Vec::new(),
        worker_events: Vec::new(),
        canary: None,
        capacity: None,
    });
    let live: Vec<&job::Model> = rows.iter().collect();
    let mut most_recent: [Option<&job::Model>; 4] = Default::default();
    most_recent[type_index(JobType::ExecutorJob)] = Some(&rows[0]);
    let mut report = HealthReport::assemble(
        most_recent,
        &live,
        &|row: &job::Model| (row.id == 7).then(|| detail.clone()),
        true,
        &thresholds(),
        now(),
    );
    report.render();
    let body: serde_json::Value = serde_json::from_str(report.json()).unwrap();
    let instances = &body["executor"]["instances"];
    assert_eq!(
        instances[0]["detail"],
        serde_json::json!({
            "queues": [{"name": "default", "broker": "redis://broker:6379/0", "depth": 3, "consumers": null}],
            "queues_left_out": 0,
            "workers": [{"name": "celery@w1", "queues": ["default"], "state": null, "concurrency": null, "free_concurrency": null, "heartbeat": null}],
            "workers_left_out": 0,
            "queued_tasks": {
                "count": 2,
                "oldest_seconds": 42,
                "queues": [{"queue": "default", "count": 2, "oldest_seconds": 42, "overdue": 0}],
                "queues_left_out": 0,
            },
            "brokers": [],
            "worker_events": [],
            "canary": null,
            "capacity": null,
        })
    );
    assert_eq!(instances[1]["hostname"], "sched-2");
    assert_eq!(instances[1]["detail"], serde_json::Value::Null);
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

#[test]
fn an_assembled_report_says_the_same_as_the_built_one_and_compares_by_content() {
    let rows = JobRows {
        most_recent: [
            Some(row(
                1,
                JobType::SchedulerJob,
                JobState::Running,
                1,
                "sched-1",
            )),
            None,
            None,
            Some(executor_row(2, 1, "sched-1", ExecutorHealth::Healthy)),
        ],
        live: vec![
            row(1, JobType::SchedulerJob, JobState::Running, 1, "sched-1"),
            executor_row(2, 1, "sched-1", ExecutorHealth::Healthy),
        ],
    };
    let built = HealthReport::build(&rows, true, &thresholds(), now());
    let live: Vec<&job::Model> = rows.live.iter().collect();
    let most_recent = rows.most_recent.each_ref().map(Option::as_ref);
    let later = now() + chrono::Duration::seconds(1);
    let mut assembled =
        HealthReport::assemble(most_recent, &live, &|_| None, true, &thresholds(), later);
    assert!(assembled.json().is_empty(), "not rendered until asked");
    assert!(
        assembled.same_content(&built),
        "built a second later, it says the same"
    );
    assembled.render();
    assert_eq!(assembled.json(), built.json());

    let unhealthy = executor_row(2, 1, "sched-1", ExecutorHealth::unhealthy("broker down"));
    let live = vec![live[0], &unhealthy];
    let changed = HealthReport::assemble(most_recent, &live, &|_| None, true, &thresholds(), now());
    assert!(!changed.same_content(&built), "a verdict changed");
    let unread = HealthReport::assemble(
        most_recent,
        &live[..1],
        &|_| None,
        false,
        &thresholds(),
        now(),
    );
    assert!(!unread.same_content(&built), "the metadatabase changed");
}
