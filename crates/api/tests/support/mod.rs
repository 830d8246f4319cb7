//! Reports and API states for the in-process tests: built by the core's own
//! [`HealthReport::assemble`] from job rows and the evidence of this host's
//! checks, as the aggregator builds them.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use overseer_api::ApiState;
use overseer_api::metrics::Metrics;
use overseer_core::detail::{
    BrokerDetail, CanaryDetail, CanaryOnQueue, CapacityDetail, Detail, EventsDetail, LoadAverage,
    QueueDetail, QueuedOnQueue, QueuedTasks, Seconds, WorkerDetail, WorkerHeartbeat,
};
use overseer_core::entity::job;
use overseer_core::report::{ExecutorHealthKind, RowExtras, Thresholds, type_index};
use overseer_core::{ExecutorHealth, HealthReport, JobState, JobType};
use tokio::sync::watch;

/// The app `overseer serve` runs, without the server around it.
#[allow(unused_macros)]
macro_rules! app {
    ($state:expr) => {
        actix_web::test::init_service(
            actix_web::App::new()
                .app_data(actix_web::web::Data::new($state.clone()))
                .configure(overseer_api::routes)
                .default_service(actix_web::web::to(overseer_api::errors::not_found)),
        )
        .await
    };
}
#[allow(unused_imports)]
pub(crate) use app;

/// The time the reports are built at.
pub fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 19, 48, 48).unwrap()
        + chrono::Duration::microseconds(365_305)
}

/// A running row of `job_type` on `host`, heartbeat `age` seconds before [`now`].
pub fn row(id: i32, job_type: JobType, age: i64, host: &str) -> job::Model {
    let heartbeat = now() - chrono::Duration::seconds(age);
    job::Model {
        id,
        dag_id: None,
        state: Some(JobState::Running.as_str().into()),
        job_type: Some(job_type.as_str().into()),
        start_date: Some(now() - chrono::Duration::hours(1)),
        end_date: None,
        latest_heartbeat: Some(heartbeat),
        executor_class: None,
        hostname: Some(host.into()),
        unixname: Some("airflow".into()),
        executor_health: "unknown".into(),
        executor_health_reason: None,
        executor_instance: None,
        executor_health_checked_at: None,
    }
}

/// A live executor row with its verdict, checked `age` seconds before [`now`].
pub fn executor_row(id: i32, class: &str, host: &str, health: ExecutorHealth) -> job::Model {
    job::Model {
        executor_class: Some(class.into()),
        executor_instance: Some("redis://broker:6379/0".into()),
        executor_health: health.as_str().into(),
        executor_health_reason: health.reason().map(str::to_owned),
        executor_health_checked_at: Some(now() - chrono::Duration::seconds(1)),
        ..row(id, JobType::ExecutorJob, 1, host)
    }
}

/// The report the aggregator would publish for `rows`, all read at [`now`],
/// with no evidence (every row another host's, or checked by no check that gives any).
pub fn report(rows: Vec<job::Model>, metadatabase_ok: bool) -> HealthReport {
    report_with_detail(rows, metadatabase_ok, &|_| None)
}

/// The report the aggregator would publish for `rows`, all read at [`now`],
/// with the evidence `detail` gives for a row (this host's).
pub fn report_with_detail(
    rows: Vec<job::Model>,
    metadatabase_ok: bool,
    detail: &dyn Fn(&job::Model) -> Option<Arc<Detail>>,
) -> HealthReport {
    report_with_extras(rows, metadatabase_ok, &|row| RowExtras {
        detail: detail(row),
        ..RowExtras::default()
    })
}

/// The report the aggregator would publish for `rows`, all read at [`now`],
/// with what `extras` says of a row beyond the table (its evidence, since
/// when its state holds, the state before).
pub fn report_with_extras(
    rows: Vec<job::Model>,
    metadatabase_ok: bool,
    extras: &dyn Fn(&job::Model) -> RowExtras,
) -> HealthReport {
    let mut most_recent: [Option<&job::Model>; 4] = Default::default();
    for job_type in JobType::ALL {
        most_recent[type_index(job_type)] = rows
            .iter()
            .filter(|r| r.job_type.as_deref() == Some(job_type.as_str()))
            .max_by_key(|r| r.latest_heartbeat);
    }
    let live: Vec<&job::Model> = rows.iter().collect();
    let mut report = HealthReport::assemble_with(
        most_recent,
        &live,
        extras,
        metadatabase_ok,
        &Thresholds::with_heartbeat_interval(Duration::from_secs(5)),
        now(),
    );
    report.render();
    report
}

/// A queue on a broker.
pub fn queue(name: &str, broker: &str, depth: Option<u64>, consumers: Option<u32>) -> QueueDetail {
    QueueDetail {
        name: name.into(),
        broker: broker.into(),
        depth,
        consumers,
    }
}

/// The evidence of a check that could tell everything: two configured queues on
/// one broker (`reports` empty), two workers (with the state and free slots an
/// Edge worker reports), and task instances queued on `default` and on `adhoc`,
/// a queue no worker is configured for.
pub fn full_detail() -> Detail {
    Detail {
        queues: vec![
            queue("default", "redis://broker:6379/0", Some(3), Some(2)),
            queue("reports", "redis://broker:6379/0", Some(0), Some(0)),
        ],
        workers: Some(vec![
            WorkerDetail {
                name: "celery@w1".into(),
                queues: Some(vec!["default".into(), "reports".into()]),
                state: Some("online".into()),
                concurrency: Some(5),
                free_concurrency: Some(4),
                heartbeat: Some(WorkerHeartbeat {
                    last: "2026-12-01T10:00:00Z".parse().unwrap(),
                    every_ms: 2000,
                    active: Some(1),
                    processed: Some(42),
                    loadavg: Some([LoadAverage(0.5), LoadAverage(0.25), LoadAverage(0.1)]),
                    software: Some("py-celery 5.5.3".into()),
                }),
            },
            WorkerDetail {
                name: "celery@w2".into(),
                queues: Some(vec!["default".into()]),
                state: Some("gone".into()),
                concurrency: Some(2),
                free_concurrency: Some(0),
                heartbeat: Some(WorkerHeartbeat {
                    last: "2026-12-01T10:00:01Z".parse().unwrap(),
                    every_ms: 5000,
                    active: Some(0),
                    processed: Some(0),
                    loadavg: Some([LoadAverage(0.0); 3]),
                    software: Some("py-celery 5.5.3".into()),
                }),
            },
        ]),
        queued_tasks: Some(QueuedTasks {
            count: 5,
            oldest_seconds: Some(840),
            queues: vec![
                QueuedOnQueue {
                    queue: "adhoc".into(),
                    count: 1,
                    oldest_seconds: Some(75),
                    overdue: 0,
                },
                QueuedOnQueue {
                    queue: "default".into(),
                    count: 4,
                    oldest_seconds: Some(840),
                    overdue: 1,
                },
            ],
        }),
        brokers: vec![BrokerDetail {
            broker: "redis://broker:6379/0".into(),
            delivered: Some(2),
            started_at: DateTime::from_timestamp(1_764_000_000, 0),
        }],
        worker_events: vec![EventsDetail {
            broker: "redis://broker:6379/0".into(),
            state: "listening".into(),
            received: 1234,
            subscribed: 2,
            overflows: 1,
            backlog: Some(0),
        }],
        canary: Some(CanaryDetail {
            dag_id: "overseer_canary".into(),
            dag: "scheduled".into(),
            queues: vec![CanaryOnQueue {
                queue: "default".into(),
                run_id: "scheduled__2026-12-01T09:55:00+00:00".into(),
                state: Some("queued".into()),
                waiting_seconds: Some(12),
                pickup_seconds: Some(Seconds(0.93)),
                run_seconds: Some(Seconds(10.5)),
                last_success: Some(Utc.with_ymd_and_hms(2026, 12, 1, 9, 50, 11).unwrap()),
            }],
        }),
        capacity: Some(CapacityDetail {
            slots: 64,
            parallelism: 32,
            schedulers: 2,
            running: 60,
            queued: 4,
            scheduled: 17,
        }),
    }
}

/// The evidence of a check that could tell little: a queue whose depth could
/// not be read, on a transport that cannot count consumers; no worker ping, no
/// `task_instance` table.
pub fn sparse_detail() -> Detail {
    Detail {
        queues: vec![queue("default", "redis://broker:6379/0", None, None)],
        workers: None,
        queued_tasks: None,
        brokers: Vec::new(),
        worker_events: Vec::new(),
        canary: None,
        capacity: None,
    }
}

/// A report in which every field has a value: every component alive on one
/// host, and three executors with each verdict (one unhealthy, with its reason).
/// This host (`sched-1`) has the evidence of its checks: [`full_detail`] for
/// `CeleryExecutor`, [`sparse_detail`] for `alias:CeleryExecutor`; `sched-2`'s
/// row has none. `CeleryExecutor` is healthy since a minute ago, unhealthy before.
pub fn full_report() -> HealthReport {
    let (full, sparse) = (Arc::new(full_detail()), Arc::new(sparse_detail()));
    report_with_extras(
        vec![
            row(1, JobType::SchedulerJob, 2, "sched-1"),
            row(2, JobType::TriggererJob, 3, "trig-1"),
            row(3, JobType::DagProcessorJob, 4, "dp-1"),
            executor_row(4, "CeleryExecutor", "sched-1", ExecutorHealth::Healthy),
            executor_row(
                5,
                "alias:CeleryExecutor",
                "sched-1",
                ExecutorHealth::unhealthy("broker redis://broker:6379/0 refused the connection"),
            ),
            executor_row(
                6,
                "LocalExecutor",
                "sched-2",
                ExecutorHealth::unknown("no health check for LocalExecutor"),
            ),
        ],
        true,
        &|row| match row.id {
            4 => RowExtras {
                detail: Some(full.clone()),
                since: Some(now() - chrono::Duration::seconds(60)),
                previous: Some(ExecutorHealthKind::Unhealthy),
            },
            5 => RowExtras {
                detail: Some(sparse.clone()),
                ..RowExtras::default()
            },
            _ => RowExtras::default(),
        },
    )
}

/// A report in which everything is healthy: a scheduler and one healthy executor.
pub fn healthy_report() -> HealthReport {
    report(
        vec![
            row(1, JobType::SchedulerJob, 2, "sched-1"),
            executor_row(2, "CeleryExecutor", "sched-1", ExecutorHealth::Healthy),
        ],
        true,
    )
}

/// What the routes read, around a report channel, with no executor of this
/// process (so `/metrics` shows only what the report says).
pub struct Harness {
    pub state: ApiState,
    pub reports: watch::Sender<Arc<HealthReport>>,
    pub shutdown: watch::Sender<bool>,
}

impl Harness {
    pub fn new(report: HealthReport, max_stream_clients: usize) -> Self {
        let (reports, reports_rx) = watch::channel(Arc::new(report));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let state = ApiState {
            reports: reports_rx.clone(),
            metrics: Arc::new(Metrics::new(Vec::new(), Arc::default(), reports_rx)),
            shutdown: shutdown_rx,
            stream_places: overseer_api::health::StreamPlaces::new(max_stream_clients),
            frame_ancestors: Default::default(),
            history: None,
        };
        Self {
            state,
            reports,
            shutdown,
        }
    }
}
