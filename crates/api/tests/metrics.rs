//! `/metrics` beside the evidence of this host's checks: the queue and
//! queued-task gauges, line for line, for reports the core built with a
//! [`Detail`](overseer_core::Detail) on this host's rows.

use crate::support;

use std::sync::Arc;

use actix_web::{App, test, web};
use overseer_core::ExecutorHealth;
use overseer_core::HealthReport;
use overseer_core::detail::Detail;
use support::{Harness, executor_row, full_report, healthy_report, queue, report_with_detail};

/// The body of `GET /metrics` while `report` is the published one.
async fn scrape(report: HealthReport) -> String {
    let harness = Harness::new(report, 4);
    let app = test::init_service(
        App::new()
            .app_data(web::Data::new(harness.state.clone()))
            .configure(overseer_api::routes),
    )
    .await;
    let body =
        test::call_and_read_body(&app, test::TestRequest::get().uri("/metrics").to_request()).await;
    String::from_utf8(body.to_vec()).unwrap()
}

/// The samples of one family, in the order served.
fn samples<'a>(body: &'a str, family: &str) -> Vec<&'a str> {
    body.lines()
        .filter(|line| line.starts_with(&format!("{family}{{")))
        .collect()
}

#[actix_web::test]
async fn each_queue_and_its_queued_tasks_are_gauges_and_what_is_not_known_is_absent() {
    let body = scrape(full_report()).await;
    // `CeleryExecutor` on sched-1 told everything; `alias:CeleryExecutor` could
    // read no depth and count no consumer; sched-2's row carries no evidence.
    let on = r#"executor="CeleryExecutor",executor_instance="redis://broker:6379/0""#;
    let broker = r#"broker="redis://broker:6379/0""#;
    assert_eq!(
        samples(&body, "overseer_queue_depth"),
        [
            format!(r#"overseer_queue_depth{{{on},{broker},queue="default"}} 3"#),
            format!(r#"overseer_queue_depth{{{on},{broker},queue="reports"}} 0"#),
        ]
    );
    assert_eq!(
        samples(&body, "overseer_queue_consumers"),
        [
            format!(r#"overseer_queue_consumers{{{on},{broker},queue="default"}} 2"#),
            format!(r#"overseer_queue_consumers{{{on},{broker},queue="reports"}} 0"#),
        ]
    );
    // Every queue with task instances queued (`adhoc` has no worker configured
    // for it), and the configured queue with none, at 0.
    assert_eq!(
        samples(&body, "overseer_queued_tasks"),
        [
            format!(r#"overseer_queued_tasks{{{on},queue="adhoc"}} 1"#),
            format!(r#"overseer_queued_tasks{{{on},queue="default"}} 4"#),
            format!(r#"overseer_queued_tasks{{{on},queue="reports"}} 0"#),
        ]
    );
    assert_eq!(
        samples(&body, "overseer_overdue_queued_tasks"),
        [
            format!(r#"overseer_overdue_queued_tasks{{{on},queue="adhoc"}} 0"#),
            format!(r#"overseer_overdue_queued_tasks{{{on},queue="default"}} 1"#),
            format!(r#"overseer_overdue_queued_tasks{{{on},queue="reports"}} 0"#),
        ]
    );
    // No age for a queue with nothing queued.
    assert_eq!(
        samples(&body, "overseer_oldest_queued_task_seconds"),
        [
            format!(r#"overseer_oldest_queued_task_seconds{{{on},queue="adhoc"}} 75"#),
            format!(r#"overseer_oldest_queued_task_seconds{{{on},queue="default"}} 840"#),
        ]
    );
    // Each worker heard by its heartbeats: up while they arrive, and what the
    // latest one said.
    let w1 = format!(r#"{on},worker="celery@w1""#);
    let w2 = format!(r#"{on},worker="celery@w2""#);
    assert_eq!(
        samples(&body, "overseer_worker_up"),
        [
            format!("overseer_worker_up{{{w1}}} 1"),
            format!("overseer_worker_up{{{w2}}} 0"),
        ]
    );
    assert_eq!(
        samples(&body, "overseer_worker_active_tasks"),
        [
            format!("overseer_worker_active_tasks{{{w1}}} 1"),
            format!("overseer_worker_active_tasks{{{w2}}} 0"),
        ]
    );
    assert_eq!(
        samples(&body, "overseer_worker_processed_tasks_total"),
        [
            format!("overseer_worker_processed_tasks_total{{{w1}}} 42"),
            format!("overseer_worker_processed_tasks_total{{{w2}}} 0"),
        ]
    );
    // Its slots.
    assert_eq!(
        samples(&body, "overseer_worker_concurrency"),
        [
            format!("overseer_worker_concurrency{{{w1}}} 5"),
            format!("overseer_worker_concurrency{{{w2}}} 2"),
        ]
    );
    assert_eq!(
        samples(&body, "overseer_worker_free_slots"),
        [
            format!("overseer_worker_free_slots{{{w1}}} 4"),
            format!("overseer_worker_free_slots{{{w2}}} 0"),
        ]
    );
    // Each broker's subscription to the heartbeats: whether it hears them,
    // what it read, how often it came up and fell behind, what waits.
    let sub = format!(r#"{on},broker="redis://broker:6379/0""#);
    for (family, value) in [
        ("overseer_worker_events_listening", 1),
        ("overseer_worker_events_received_total", 1234),
        ("overseer_worker_events_subscriptions_total", 2),
        ("overseer_worker_events_overflows_total", 1),
        ("overseer_worker_events_backlog", 0),
    ] {
        assert_eq!(
            samples(&body, family),
            [format!("{family}{{{sub}}} {value}")]
        );
    }
    // The executor's slots, those taken, and what waits for one.
    for (family, value) in [
        ("overseer_executor_slots", 64),
        ("overseer_executor_slots_taken", 64),
        ("overseer_scheduled_tasks", 17),
    ] {
        assert_eq!(
            samples(&body, family),
            [format!("{family}{{{on}}} {value}")]
        );
    }
    // The canary on each queue it runs on: how long one waits now, when the
    // latest succeeded (a Unix time).
    assert_eq!(
        samples(&body, "overseer_canary_waiting_seconds"),
        [format!(
            r#"overseer_canary_waiting_seconds{{{on},queue="default"}} 12"#
        )]
    );
    assert_eq!(
        samples(&body, "overseer_canary_last_success_timestamp_seconds"),
        [format!(
            r#"overseer_canary_last_success_timestamp_seconds{{{on},queue="default"}} 1796118611"#
        )]
    );
    assert!(
        body.contains(
            "# HELP overseer_worker_processed_tasks_total Tasks the worker has run since it started, \
             as its latest heartbeat said.\n# TYPE overseer_worker_processed_tasks_total counter\n"
        ),
        "{body}"
    );
    for (family, help) in [
        (
            "overseer_worker_up",
            "1 while the worker's heartbeats arrive (Celery's worker events), 0 once it is gone (two heartbeats missed) or offline; no sample while its heartbeats cannot be heard (unknown).",
        ),
        (
            "overseer_worker_active_tasks",
            "Tasks the worker is running, as its latest heartbeat said.",
        ),
        (
            "overseer_queue_depth",
            "Messages waiting in the queue on the broker, at this host's latest check of the executor.",
        ),
        (
            "overseer_queue_consumers",
            "Workers consuming the queue on the broker; absent when the broker cannot say (Redis without worker_ping).",
        ),
        (
            "overseer_queued_tasks",
            "Task instances Airflow holds in state queued for the executor, on the queue.",
        ),
        (
            "overseer_overdue_queued_tasks",
            "Task instances queued on the queue for longer than the executor's max_queued_age (0 when that rule is off).",
        ),
        (
            "overseer_oldest_queued_task_seconds",
            "How long the oldest task instance queued on the queue has waited, in seconds, at the latest check.",
        ),
    ] {
        assert!(
            body.contains(&format!("# HELP {family} {help}\n# TYPE {family} gauge\n")),
            "{family}'s help and type in:\n{body}"
        );
    }
}

#[actix_web::test]
async fn a_failover_list_has_a_depth_per_broker_and_no_credential_shows() {
    // The actor scrubs the evidence before it reaches the report; a credential
    // that slipped through all the same is masked in the label.
    let mut row = executor_row(1, "CeleryExecutor", "sched-1", ExecutorHealth::Healthy);
    row.executor_instance = Some("redis://a:6379/0;redis://:***@b:6379/0".into());
    let detail = Arc::new(Detail {
        queues: vec![
            queue("default", "redis://a:6379/0", Some(7), None),
            queue("default", "redis://:hunter2@b:6379/0", Some(0), None),
        ],
        ..Detail::default()
    });
    let body = scrape(report_with_detail(vec![row], true, &|_| {
        Some(detail.clone())
    }))
    .await;
    let on =
        r#"executor="CeleryExecutor",executor_instance="redis://a:6379/0;redis://:***@b:6379/0""#;
    assert_eq!(
        samples(&body, "overseer_queue_depth"),
        [
            format!(r#"overseer_queue_depth{{{on},broker="redis://a:6379/0",queue="default"}} 7"#),
            format!(
                r#"overseer_queue_depth{{{on},broker="redis://:***@b:6379/0",queue="default"}} 0"#
            ),
        ]
    );
    assert!(!body.contains("hunter2"), "{body}");
    // Redis without worker_ping counts no consumer, and no task_instance was read.
    for family in [
        "overseer_queue_consumers",
        "overseer_queued_tasks",
        "overseer_overdue_queued_tasks",
        "overseer_oldest_queued_task_seconds",
    ] {
        assert!(!body.contains(family), "{family} in:\n{body}");
    }
}

#[actix_web::test]
async fn queued_task_instances_are_counted_on_every_configured_queue_even_when_none_is_queued() {
    let row = executor_row(1, "CeleryExecutor", "sched-1", ExecutorHealth::Healthy);
    let detail = Arc::new(Detail {
        queues: vec![queue("default", "redis://broker:6379/0", Some(0), None)],
        queued_tasks: Some(Default::default()),
        ..Detail::default()
    });
    let body = scrape(report_with_detail(vec![row], true, &|_| {
        Some(detail.clone())
    }))
    .await;
    let on = r#"executor="CeleryExecutor",executor_instance="redis://broker:6379/0""#;
    assert_eq!(
        samples(&body, "overseer_queued_tasks"),
        [format!(
            r#"overseer_queued_tasks{{{on},queue="default"}} 0"#
        )]
    );
    assert_eq!(
        samples(&body, "overseer_overdue_queued_tasks"),
        [format!(
            r#"overseer_overdue_queued_tasks{{{on},queue="default"}} 0"#
        )]
    );
    assert!(
        !body.contains("overseer_oldest_queued_task_seconds"),
        "{body}"
    );
}

/// Transitions the aggregator had to drop (its queue for the history was
/// full) are a counter on `/metrics`, with its HELP and TYPE lines, as the
/// aggregator counts them.
#[actix_web::test]
async fn transitions_dropped_unwritten_are_counted() {
    use std::sync::atomic::Ordering;

    use overseer_api::metrics::Metrics;
    use overseer_core::stats::AggregatorStats;

    let stats = Arc::new(AggregatorStats::default());
    stats.transitions_dropped.store(3, Ordering::Relaxed);
    let mut harness = Harness::new(full_report(), 4);
    harness.state.metrics = Arc::new(Metrics::new(
        Vec::new(),
        stats,
        harness.state.reports.clone(),
    ));
    let app = test::init_service(
        App::new()
            .app_data(web::Data::new(harness.state.clone()))
            .configure(overseer_api::routes),
    )
    .await;
    let body =
        test::call_and_read_body(&app, test::TestRequest::get().uri("/metrics").to_request()).await;
    let body = String::from_utf8(body.to_vec()).unwrap();
    let family = "overseer_history_transitions_dropped_total";
    let lines: Vec<&str> = body.lines().filter(|line| line.contains(family)).collect();
    assert_eq!(lines.len(), 3, "{body}");
    assert!(lines[0].starts_with(&format!("# HELP {family} Transitions")));
    assert_eq!(lines[1], format!("# TYPE {family} counter"));
    assert_eq!(lines[2], format!("{family} 3"));
}

/// A worker whose heartbeats cannot be heard now (the broker down, the
/// subscription refused) is `unknown`: `overseer_worker_up` has no sample
/// for it, neither the 1 of its last heartbeat nor a 0 it did not earn; the
/// others keep theirs.
#[actix_web::test]
async fn a_worker_not_heard_now_has_no_up_sample() {
    let row = executor_row(1, "CeleryExecutor", "sched-1", ExecutorHealth::Healthy);
    let mut detail = support::full_detail();
    let workers = detail.workers.as_mut().unwrap();
    workers[0].state = Some("unknown".into());
    let detail = Arc::new(detail);
    let body = scrape(report_with_detail(vec![row], true, &|_| {
        Some(detail.clone())
    }))
    .await;
    let on = r#"executor="CeleryExecutor",executor_instance="redis://broker:6379/0""#;
    assert_eq!(
        samples(&body, "overseer_worker_up"),
        [format!(
            r#"overseer_worker_up{{{on},worker="celery@w2"}} 0"#
        )]
    );
    // What its last heartbeat said is still what it said.
    assert_eq!(samples(&body, "overseer_worker_active_tasks").len(), 2);
}

/// A worker name with control characters (a forged heartbeat's ESC, BEL and
/// NUL) reaches `/metrics` without them: a label value a terminal or a
/// scraper could act on is no label value.
#[actix_web::test]
async fn label_values_carry_no_control_character() {
    let row = executor_row(1, "CeleryExecutor", "sched-1", ExecutorHealth::Healthy);
    let mut detail = support::full_detail();
    detail.workers.as_mut().unwrap()[0].name = "celery@w\u{1b}[31m\u{7}\u{0}x".into();
    let detail = Arc::new(detail);
    let body = scrape(report_with_detail(vec![row], true, &|_| {
        Some(detail.clone())
    }))
    .await;
    assert!(
        !body.chars().any(|c| c.is_control() && c != '\n'),
        "{body:?}"
    );
    assert!(body.contains(r#"worker="celery@w[31mx""#), "{body}");
}

/// The executor's instance is `executor_instance` on every per-executor
/// sample (the verdicts, the poll counters and histogram of this process's
/// executors, the evidence): never `instance`, Prometheus's own label for the
/// scraped target, which a scrape would rename to `exported_instance` (or,
/// with `honor_labels: true`, let overwrite the target's).
#[actix_web::test]
async fn no_per_executor_sample_carries_prometheus_instance_label() {
    use overseer_api::metrics::Metrics;
    use overseer_core::overseer::ExecutorIdentity;
    use overseer_core::stats::ExecutorStats;

    let mut harness = Harness::new(full_report(), 4);
    let local = ExecutorIdentity {
        executor_class: "CeleryExecutor".into(),
        instance: Some("redis://broker:6379/0".into()),
    };
    harness.state.metrics = Arc::new(Metrics::new(
        vec![(local, Arc::new(ExecutorStats::default()))],
        Arc::default(),
        harness.state.reports.clone(),
    ));
    let app = test::init_service(
        App::new()
            .app_data(web::Data::new(harness.state.clone()))
            .configure(overseer_api::routes),
    )
    .await;
    let body =
        test::call_and_read_body(&app, test::TestRequest::get().uri("/metrics").to_request()).await;
    let body = String::from_utf8(body.to_vec()).unwrap();

    let per_executor: Vec<&str> = body
        .lines()
        .filter(|line| !line.starts_with('#') && line.contains("{executor=\""))
        .collect();
    for line in &per_executor {
        let (_, labels) = line.split_once('{').unwrap();
        assert!(
            labels.contains(",executor_instance=\""),
            "no executor_instance: {line}"
        );
        assert!(
            !labels
                .replace("executor_instance=", "")
                .contains("instance="),
            "a bare instance label: {line}"
        );
    }
    // Every kind of per-executor family was looked at.
    for family in [
        "overseer_executor_health",
        "overseer_executor_seconds_since_check",
        "overseer_polls_total",
        "overseer_poll_timeouts_total",
        "overseer_checks_started_late_total",
        "overseer_checks_running",
        "overseer_poll_duration_seconds_bucket",
        "overseer_queue_depth",
        "overseer_queue_consumers",
        "overseer_queued_tasks",
        "overseer_oldest_queued_task_seconds",
        "overseer_worker_up",
        "overseer_worker_processed_tasks_total",
    ] {
        assert!(
            per_executor
                .iter()
                .any(|line| line.starts_with(&format!("{family}{{"))),
            "{family} has no per-executor sample in:\n{body}"
        );
    }
}

/// The evidence (every worker and queue, most of a scrape with a large fleet)
/// is encoded once per published report: two scrapes of one report serve the
/// same lines, and the first scrape after a new report serves the new one's,
/// never the old; what ages with the clock is read at every scrape.
#[actix_web::test]
async fn each_scrape_serves_the_evidence_of_the_report_published_last() {
    let harness = Harness::new(full_report(), 4);
    let app = test::init_service(
        App::new()
            .app_data(web::Data::new(harness.state.clone()))
            .configure(overseer_api::routes),
    )
    .await;
    let scrape = || async {
        let request = test::TestRequest::get().uri("/metrics").to_request();
        String::from_utf8(test::call_and_read_body(&app, request).await.to_vec()).unwrap()
    };
    let first = scrape().await;
    let again = scrape().await;
    let depth = |body: &str| -> Vec<String> {
        samples(body, "overseer_queue_depth")
            .into_iter()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(depth(&first).len(), 2, "{first}");
    assert_eq!(depth(&again), depth(&first));
    let verdicts = |body: &str| samples(body, "overseer_executor_health").len();
    assert_eq!(verdicts(&again), verdicts(&first));

    // The same rows, their evidence gone (a check that read nothing).
    harness.reports.send(Arc::new(healthy_report())).unwrap();
    let after = scrape().await;
    assert_eq!(depth(&after), Vec::<String>::new(), "{after}");
    assert!(samples(&after, "overseer_worker_up").is_empty(), "{after}");
    assert_eq!(verdicts(&after), 1, "{after}");

    // And back: the evidence returns with the report that carries it.
    harness.reports.send(Arc::new(full_report())).unwrap();
    assert_eq!(depth(&scrape().await), depth(&first));
}
