//! The rules of `edge`, as tables: what the rows say, and the verdict,
//! reason and detail they give.

use super::*;

const INSTANCE: &str = "edge_worker@db:5432/airflow";

/// A worker: its name, state, queues (`None`: every queue), free slots.
fn worker(name: &str, state: &str, queues: Option<&[&str]>, free: Option<u32>) -> EdgeWorker {
    EdgeWorker {
        name: name.into(),
        state: state.into(),
        queues: queues.map(|q| q.iter().map(|s| s.to_string()).collect()),
        concurrency: free.map(|_| 8),
        free_concurrency: free,
        status: Some(20),
        status_text: None,
    }
}

fn fleet(workers: Vec<EdgeWorker>, waiting: &[(&str, u64)]) -> Fleet {
    Fleet {
        workers,
        waiting: waiting.iter().map(|(q, n)| (q.to_string(), *n)).collect(),
    }
}

/// A worker of the detail: name, state, free slots, how many queues.
type WorkerSeen<'a> = (&'a str, Option<&'a str>, Option<u32>, Option<usize>);

fn unhealthy(reason: &str) -> ExecutorHealth {
    ExecutorHealth::unhealthy(reason)
}

#[test]
fn the_verdict_follows_the_module_s_table() {
    let default = Some(&["default"][..]);
    let gpu = Some(&["gpu"][..]);
    let cases: Vec<(&str, Fleet, ExecutorHealth)> = vec![
        (
            "an idle worker, nothing waiting",
            fleet(vec![worker("w1", "idle", default, Some(8))], &[]),
            ExecutorHealth::Healthy,
        ),
        (
            "a running worker serving the queue where jobs wait",
            fleet(
                vec![worker("w1", "running", default, Some(0))],
                &[("default", 4)],
            ),
            ExecutorHealth::Healthy,
        ),
        (
            "a worker without queues serves every queue",
            fleet(vec![worker("w1", "idle", None, Some(8))], &[("gpu", 1)]),
            ExecutorHealth::Healthy,
        ),
        (
            "no worker and nothing waiting: a fleet scaled to zero",
            fleet(vec![], &[]),
            ExecutorHealth::Healthy,
        ),
        (
            "no worker while jobs wait",
            fleet(vec![], &[("default", 2), ("gpu", 1)]),
            unhealthy("no edge worker is connected while 3 jobs wait (default: 2, gpu: 1)"),
        ),
        (
            "every worker unknown or offline, nothing waiting",
            fleet(
                vec![
                    worker("w1", "unknown", default, None),
                    worker("w2", "offline", default, None),
                ],
                &[],
            ),
            unhealthy("every edge worker is unknown or offline (w1: unknown, w2: offline)"),
        ),
        (
            "every worker offline while a job waits",
            fleet(
                vec![worker("w1", "offline maintenance", default, None)],
                &[("default", 1)],
            ),
            unhealthy(
                "every edge worker is unknown or offline (w1: offline maintenance) while 1 job waits (default: 1)",
            ),
        ),
        (
            "a queue no connected worker serves",
            fleet(
                vec![
                    worker("w1", "idle", default, Some(8)),
                    worker("w2", "offline", gpu, None),
                ],
                &[("default", 1), ("gpu", 1)],
            ),
            unhealthy("queue gpu: 1 job waiting and no connected edge worker serves it"),
        ),
        (
            "a queue whose only worker is in maintenance",
            fleet(
                vec![
                    worker("w1", "idle", default, Some(8)),
                    worker("w2", "maintenance mode", gpu, Some(4)),
                ],
                &[("gpu", 2)],
            ),
            unhealthy(
                "queue gpu: 2 jobs waiting and its edge workers take no jobs (w2: maintenance mode)",
            ),
        ),
        (
            "a worker stopping, another taking the queue",
            fleet(
                vec![
                    worker("w1", "terminating", default, Some(0)),
                    worker("w2", "running", default, Some(1)),
                ],
                &[("default", 5)],
            ),
            ExecutorHealth::Healthy,
        ),
        (
            "a worker lost while another serves: healthy (the note names it)",
            fleet(
                vec![
                    worker("w1", "idle", default, Some(8)),
                    worker("w2", "unknown", default, None),
                ],
                &[("default", 1)],
            ),
            ExecutorHealth::Healthy,
        ),
        (
            "a lost worker is named beside an unserved queue",
            fleet(
                vec![
                    worker("w1", "idle", default, Some(8)),
                    worker("w2", "unknown", gpu, None),
                ],
                &[("gpu", 3)],
            ),
            unhealthy(
                "queue gpu: 3 jobs waiting and no connected edge worker serves it; \
                 no heartbeat for 5 heartbeats from edge worker w2",
            ),
        ),
        (
            "a state this check does not know counts as connected and taking jobs",
            fleet(
                vec![worker("w1", "sleeping", default, None)],
                &[("default", 1)],
            ),
            ExecutorHealth::Healthy,
        ),
        (
            "empty queues are never findings",
            fleet(vec![worker("w1", "idle", default, Some(8))], &[("gpu", 0)]),
            ExecutorHealth::Healthy,
        ),
    ];
    for (case, fleet, expected) in cases {
        let observed = judge(&fleet, &["default".into()], INSTANCE);
        assert_eq!(observed.health, expected, "{case}");
    }
}

#[test]
fn workers_reporting_a_warning_are_named_in_an_unhealthy_reason() {
    let mut warned = worker("w1", "idle", Some(&["default"]), Some(8));
    warned.status = Some(30);
    warned.status_text = Some("Healthy but version mismatch".into());
    let mut failing = worker("w2", "maintenance mode", Some(&["gpu"]), Some(8));
    failing.status = Some(40);
    let observed = judge(
        &fleet(vec![warned.clone(), failing], &[("gpu", 1)]),
        &[],
        INSTANCE,
    );
    assert_eq!(
        observed.health,
        unhealthy(
            "queue gpu: 1 job waiting and its edge workers take no jobs (w2: maintenance mode); \
             edge worker w1 reports warning: Healthy but version mismatch; \
             edge worker w2 reports error"
        )
    );
    // Healthy otherwise: the warning is the note beside the verdict, shown
    // as its reason.
    let observed = judge(&fleet(vec![warned], &[]), &[], INSTANCE);
    assert_eq!(observed.health, ExecutorHealth::Healthy);
    assert_eq!(
        observed.healthy_note().map(|n| n.as_str()),
        Some("edge worker w1 reports warning: Healthy but version mismatch")
    );
}

#[test]
fn a_lost_worker_beside_a_serving_one_is_named_in_the_healthy_note() {
    let default: Option<&[&str]> = Some(&["default"]);
    let observed = judge(
        &fleet(
            vec![
                worker("w1", "idle", default, Some(8)),
                worker("w2", "unknown", default, None),
            ],
            &[("default", 1)],
        ),
        &["default".into()],
        INSTANCE,
    );
    assert_eq!(observed.health, ExecutorHealth::Healthy);
    assert_eq!(
        observed.healthy_note().map(|n| n.as_str()),
        Some("no heartbeat for 5 heartbeats from edge worker w2")
    );
    // Nothing to say: no note.
    let observed = judge(
        &fleet(vec![worker("w1", "idle", default, Some(8))], &[]),
        &["default".into()],
        INSTANCE,
    );
    assert_eq!(observed.healthy_note(), None);
}

#[test]
fn long_lists_of_workers_are_cut() {
    let workers = (1..=7)
        .map(|i| worker(&format!("w{i}"), "unknown", None, None))
        .collect();
    let observed = judge(&fleet(workers, &[]), &[], INSTANCE);
    assert_eq!(
        observed.health,
        unhealthy(
            "every edge worker is unknown or offline (w1: unknown, w2: unknown, w3: unknown, \
             w4: unknown, w5: unknown, and 2 more)"
        )
    );
}

#[test]
fn the_detail_lists_queues_with_waiting_jobs_and_every_worker_by_state() {
    let observed = judge(
        &fleet(
            vec![
                worker("w1", "idle", Some(&["default", "reports"]), Some(8)),
                worker("w2", "maintenance mode", Some(&["gpu"]), Some(4)),
                worker("w3", "unknown", Some(&["lost"]), None),
                worker("w4", "running", None, Some(0)),
            ],
            &[("default", 2), ("gpu", 1)],
        ),
        &["default".into(), "configured".into()],
        INSTANCE,
    );
    let detail = observed.detail.expect("a detail");
    let queues: Vec<(&str, Option<u64>, Option<u32>)> = detail
        .queues
        .iter()
        .map(|q| (q.name.as_str(), q.depth, q.consumers))
        .collect();
    // w4 (no queues) takes every queue; w2 is paused; w3's queue is not listed,
    // as w3 is not connected.
    assert_eq!(
        queues,
        [
            ("configured", Some(0), Some(1)),
            ("default", Some(2), Some(2)),
            ("gpu", Some(1), Some(1)),
            ("reports", Some(0), Some(2)),
        ]
    );
    assert!(detail.queues.iter().all(|q| q.broker == INSTANCE));
    let workers: Vec<WorkerSeen> = detail
        .workers
        .as_ref()
        .expect("workers")
        .iter()
        .map(|w| {
            (
                w.name.as_str(),
                w.state.as_deref(),
                w.free_concurrency,
                w.queues.as_ref().map(Vec::len),
            )
        })
        .collect();
    assert_eq!(
        workers,
        [
            ("w1", Some("idle"), Some(8), Some(2)),
            ("w2", Some("maintenance mode"), Some(4), Some(1)),
            ("w3", Some("unknown"), None, Some(1)),
            ("w4", Some("running"), Some(0), None),
        ]
    );
    assert_eq!(detail.queued_tasks, None, "the executor's actor fills it");
}

#[test]
fn rows_parse_as_both_schemas_of_the_provider_write_them() {
    for (case, queues, sysinfo, expected) in [
        (
            "3.5.0 and later: sysinfo a JSON column, with a status",
            Some("['default', 'gpu']"),
            Some(
                r#"{"status": 20, "airflow_version": "3.3.2", "edge_provider_version": "5.1.0", "concurrency": 8, "free_concurrency": 7}"#,
            ),
            (Some(vec!["default", "gpu"]), Some(7), Some(20), None),
        ),
        (
            "before 3.5.0: sysinfo a JSON string, no status",
            Some("['default']"),
            Some(
                r#"{"airflow_version": "3.0.2", "edge_provider_version": "1.1.0", "concurrency": 8, "free_concurrency": 8}"#,
            ),
            (Some(vec!["default"]), Some(8), None, None),
        ),
        (
            "a warning with its text",
            Some("[\"it's\", 'b\\'c']"),
            Some(r#"{"status": 30, "status_text": "Healthy but version mismatch"}"#),
            (
                Some(vec!["it's", "b'c"]),
                None,
                Some(30),
                Some("Healthy but version mismatch"),
            ),
        ),
        (
            "no queues, no sysinfo",
            None,
            None,
            (None, None, None, None),
        ),
        (
            "an empty list: every queue",
            Some("[]"),
            Some("not json"),
            (None, None, None, None),
        ),
        (
            "after Airflow reset it: status NOTSET, free -1",
            Some("None"),
            Some(r#"{"status": 0, "free_concurrency": -1}"#),
            (None, None, Some(0), None),
        ),
        (
            "text that is no list is one queue",
            Some("default"),
            None,
            (Some(vec!["default"]), None, None, None),
        ),
    ] {
        let row = EdgeWorker::from_row("w".into(), "idle".into(), queues, sysinfo);
        let got = (
            row.queues.clone(),
            row.free_concurrency,
            row.status,
            row.status_text.as_deref(),
        );
        let want = (
            expected
                .0
                .map(|q| q.iter().map(|s| s.to_string()).collect()),
            expected.1,
            expected.2,
            expected.3,
        );
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn a_row_says_the_workers_concurrency_as_its_sysinfo_does() {
    let row = |sysinfo| EdgeWorker::from_row("w".into(), "running".into(), None, Some(sysinfo));
    assert_eq!(
        row(r#"{"concurrency": 8, "free_concurrency": 0}"#).concurrency,
        Some(8)
    );
    assert_eq!(row(r#"{"concurrency": "4"}"#).concurrency, Some(4));
    assert_eq!(row(r#"{"concurrency": -1}"#).concurrency, None);
    assert_eq!(row(r#"{"status": 20}"#).concurrency, None);
}

#[test]
fn the_instance_is_the_database_without_credentials() {
    for (url, instance) in [
        (
            "postgres://airflow:s3cret@db:5432/airflow?sslmode=require",
            "edge_worker@db:5432/airflow",
        ),
        (
            "mysql://root@127.0.0.1:3306/airflow",
            "edge_worker@127.0.0.1:3306/airflow",
        ),
        (
            "sqlite:///var/lib/airflow/airflow.db?mode=rwc",
            "edge_worker@/var/lib/airflow/airflow.db",
        ),
        ("sqlite://overseer.db?mode=rwc", "edge_worker@overseer.db"),
        ("postgres://u:p%40ss@db/airflow", "edge_worker@db/airflow"),
    ] {
        assert_eq!(super::instance(&SecretUrl::new(url)), instance, "{url}");
    }
}

/// `queues` as the provider writes them (`str(list)`, Python's `repr` of each
/// name) and as it reads them back (`ast.literal_eval`): the pairs below are
/// Python's own, printed by `str(['new\nline'])` and `ast.literal_eval(...)`.
#[test]
fn queue_names_keep_what_python_escaped() {
    for (stored, names) in [
        (r"['new\nline']", vec!["new\nline"]),
        (r"['tab\there', 'cr\rx']", vec!["tab\there", "cr\rx"]),
        (r"['back\\slash']", vec!["back\\slash"]),
        (r#"['it\'s "both"']"#, vec!["it's \"both\""]),
        (r"['bell\x07', 'del\x7f']", vec!["bell\u{7}", "del\u{7f}"]),
        (
            r"['zw\u200bsp', '\U0001f980crab']",
            vec!["zw\u{200b}sp", "🦀crab"],
        ),
        ("['é名']", vec!["é名"]),
        (r"['\101\0']", vec!["A\0"]),
        // An escape Python does not know is kept, backslash and all.
        (r"['\d']", vec!["\\d"]),
    ] {
        let want: Vec<String> = names.into_iter().map(str::to_owned).collect();
        assert_eq!(python_list(stored), Some(want), "{stored}");
    }
    // What Python would refuse is no list: the text is one name, as before.
    assert_eq!(
        python_list(r"['bad\x4']"),
        Some(vec![r"['bad\x4']".to_owned()])
    );
}

/// A worker serving the queue `new\nline` (stored escaped) takes the jobs that
/// wait in it (`edge_job.queue` holds the newline itself).
#[test]
fn a_queue_whose_name_holds_a_newline_is_served_by_its_worker() {
    let mut worker = worker("w1", "idle", None, Some(4));
    worker.queues = python_list(r"['new\nline']");
    let observed = judge(&fleet(vec![worker], &[("new\nline", 2)]), &[], INSTANCE);
    assert_eq!(observed.health, ExecutorHealth::Healthy);
}

/// Names from rows any client can write, huge and holding newlines: the
/// reason stays one bounded line, and its lists say how many were left out.
#[test]
fn huge_names_with_newlines_give_one_bounded_line() {
    let huge = |prefix: &str, i: usize| format!("{prefix}{i}\n{}", "x\r\n".repeat(3000));
    let workers: Vec<EdgeWorker> = (0..10)
        .map(|i| worker(&huge("w", i), "offline", None, None))
        .collect();
    let queues: Vec<String> = (0..10).map(|i| huge("q", i)).collect();
    let waiting: Vec<(&str, u64)> = queues.iter().map(|q| (q.as_str(), 1)).collect();
    let observed = judge(&fleet(workers, &waiting), &[], INSTANCE);
    let ExecutorHealth::Unhealthy { reason } = &observed.health else {
        panic!("every worker offline: {:?}", observed.health);
    };
    assert!(!reason.contains(['\n', '\r']), "{reason:?}");
    assert!(reason.chars().count() <= reason::MAX_CHARS, "{reason}");
    assert!(
        reason.starts_with("every edge worker is unknown or offline (w0 x x x"),
        "{reason}"
    );
    assert!(reason.contains(", and 8 more)"), "{reason}");

    // One queue no connected worker serves, and workers reporting warnings
    // with long texts: each name cut, the whole one line.
    let mut serving = worker("ok", "idle", Some(&["default"][..]), Some(1));
    serving.status = Some(30);
    serving.status_text = Some(format!("slow\n{}", "disk ".repeat(5000)));
    let observed = judge(&fleet(vec![serving], &[(&queues[0], 3)]), &[], INSTANCE);
    let ExecutorHealth::Unhealthy { reason } = &observed.health else {
        panic!("a queue nobody serves: {:?}", observed.health);
    };
    assert!(!reason.contains('\n'), "{reason:?}");
    assert!(reason.chars().count() <= reason::MAX_CHARS, "{reason}");
    assert!(
        reason.contains(
            "no connected edge worker serves it; edge worker ok reports warning: slow disk"
        ),
        "{reason}"
    );

    // A healthy verdict's note too.
    let mut noisy = worker(&huge("w", 0), "idle", None, Some(1));
    noisy.status = Some(40);
    noisy.status_text = Some("e\n".repeat(10_000));
    let observed = judge(&fleet(vec![noisy], &[]), &[], INSTANCE);
    let note = observed.healthy_note().expect("a warning is noted");
    assert!(!note.contains('\n') && note.chars().count() <= reason::MAX_CHARS);
}
