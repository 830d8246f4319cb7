use super::*;

const PICKUP: Duration = Duration::from_secs(120);

fn at(now: DateTime<Utc>, seconds_ago: i64) -> Option<DateTime<Utc>> {
    Some(now - chrono::Duration::seconds(seconds_ago))
}

/// The canary DAG, scheduled, its next run in the future.
fn scheduled(now: DateTime<Utc>) -> DagRow {
    DagRow {
        paused: false,
        stale: false,
        import_errors: false,
        next_run_after: Some(now + chrono::Duration::seconds(200)),
    }
}

/// Run `n` on `queue`: runs every 300 s, run 3 the latest Airflow could
/// have made by `now` (its logical date 300 s ago).
fn task(now: DateTime<Utc>, n: i64, queue: &str, state: Option<&str>) -> CanaryTask {
    CanaryTask {
        logical_date: now - chrono::Duration::seconds(300 * (4 - n)),
        run_id: format!("scheduled__{n}"),
        queue: queue.into(),
        owner: Some(0),
        state: state.map(str::to_owned),
        queued: None,
        started: None,
        ended: None,
    }
}

fn judged(read: &CanaryRead) -> CanaryJudged {
    read.for_executor(0, true, PICKUP, Some(1))
        .expect("the canary judges")
}

#[test]
fn a_failing_canary_reads_failed_until_one_succeeds_and_a_waiting_one_never_hides_it() {
    let now = Utc::now();
    let mut read = CanaryRead {
        read_at: now,
        dag: Some(scheduled(now)),
        tasks: vec![],
    };
    let succeeded = CanaryTask {
        queued: at(now, 400),
        started: at(now, 397),
        ended: at(now, 396),
        ..task(now, 1, "default", Some("success"))
    };
    read.tasks = vec![succeeded.clone()];
    let first = judged(&read);
    assert!(first.findings.is_empty(), "{first:?}");
    assert_eq!(first.blind, None);
    let queue = &first.detail.queues[0];
    assert_eq!(queue.pickup_seconds, Some(Seconds(3.0)));
    assert_eq!(queue.run_seconds, Some(Seconds(1.0)));
    assert_eq!(queue.last_success, at(now, 396));
    assert_eq!(first.detail.dag, "scheduled");

    // The next one queued a minute ago: on its way, nothing wrong yet.
    let waiting = CanaryTask {
        queued: at(now, 60),
        ..task(now, 2, "default", Some("queued"))
    };
    read.tasks = vec![waiting.clone(), succeeded.clone()];
    let on_its_way = judged(&read);
    assert!(on_its_way.findings.is_empty(), "{on_its_way:?}");
    assert_eq!(on_its_way.detail.queues[0].waiting_seconds, Some(60));

    // Two minutes and no worker took it.
    read.tasks[0].queued = at(now, 125);
    assert_eq!(
        judged(&read).findings,
        ["canary on queue default: no worker started it within 2m"]
    );

    // It failed without a worker starting it; the next run waits: still failed.
    read.tasks = vec![
        CanaryTask {
            queued: at(now, 5),
            ..task(now, 3, "default", Some("queued"))
        },
        CanaryTask {
            queued: at(now, 305),
            ended: at(now, 100),
            ..task(now, 2, "default", Some("failed"))
        },
        succeeded.clone(),
    ];
    let failed = ["canary on queue default failed before a worker started it"];
    assert_eq!(judged(&read).findings, failed);
    // Started by a worker, still running: the failure before it stands.
    read.tasks[0].state = Some("running".into());
    read.tasks[0].started = at(now, 2);
    assert_eq!(judged(&read).findings, failed);
    // A worker that ran it and failed is told apart.
    read.tasks[1].started = at(now, 300);
    read.tasks[1].state = Some("up_for_retry".into());
    assert_eq!(judged(&read).findings, ["canary on queue default failed"]);

    // It succeeds: healthy again.
    read.tasks[0].state = Some("success".into());
    read.tasks[0].ended = at(now, 1);
    let recovered = judged(&read);
    assert!(recovered.findings.is_empty(), "{recovered:?}");
    assert_eq!(
        recovered.detail.queues[0].pickup_seconds,
        Some(Seconds(3.0))
    );
    assert_eq!(recovered.detail.queues[0].last_success, at(now, 1));
}

#[test]
fn a_canary_that_cannot_run_is_blind_and_one_never_installed_is_no_rule() {
    let now = Utc::now();
    let failed = CanaryTask {
        queued: at(now, 305),
        started: at(now, 300),
        ended: at(now, 299),
        ..task(now, 1, "default", Some("failed"))
    };
    let mut read = CanaryRead {
        read_at: now,
        dag: None,
        tasks: vec![],
    };
    assert_eq!(
        read.for_executor(0, true, PICKUP, Some(1)),
        None,
        "not installed"
    );

    read.dag = Some(scheduled(now));
    read.tasks = vec![failed];
    for (dag, state, blind) in [
        (
            DagRow {
                paused: true,
                ..scheduled(now)
            },
            "paused",
            "canary DAG overseer_canary is paused",
        ),
        (
            DagRow {
                stale: true,
                ..scheduled(now)
            },
            "stale",
            "canary DAG overseer_canary is gone from the DAG folder",
        ),
        (
            DagRow {
                import_errors: true,
                ..scheduled(now)
            },
            "import errors",
            "canary DAG overseer_canary does not import",
        ),
        (
            DagRow {
                next_run_after: at(now, 121),
                ..scheduled(now)
            },
            "not scheduled",
            "canary DAG overseer_canary: the scheduler did not start its next run within 2m of its time",
        ),
        (
            DagRow {
                next_run_after: None,
                ..scheduled(now)
            },
            "not scheduled",
            "canary DAG overseer_canary has no next run",
        ),
    ] {
        read.dag = Some(dag);
        let judged = judged(&read);
        assert_eq!(judged.blind.as_deref(), Some(blind));
        assert_eq!(judged.detail.dag, state);
        assert!(judged.findings.is_empty(), "{judged:?}");
    }

    // No next run while its one active run waits: that is how Airflow keeps
    // `max_active_runs = 1`, not a missing schedule.
    read.tasks.insert(
        0,
        CanaryTask {
            queued: at(now, 10),
            ..task(now, 2, "default", Some("queued"))
        },
    );
    assert_eq!(judged(&read).blind, None);
    // Its time not yet two minutes past: scheduled.
    read.dag = Some(DagRow {
        next_run_after: at(now, 30),
        ..scheduled(now)
    });
    assert_eq!(judged(&read).blind, None);
}

#[test]
fn each_executor_is_judged_on_its_own_canaries_and_the_default_one_on_the_dag() {
    let now = Utc::now();
    let mine = |queue: &str, owner| CanaryTask {
        owner,
        queued: at(now, 500),
        started: at(now, 490),
        ended: at(now, 489),
        ..task(now, 1, queue, Some("failed"))
    };
    let read = CanaryRead {
        read_at: now,
        dag: Some(scheduled(now)),
        tasks: vec![mine("gpu", Some(1)), mine("default", Some(0))],
    };
    let gpu = read
        .for_executor(1, false, PICKUP, Some(1))
        .expect("its own");
    assert_eq!(gpu.findings, ["canary on queue gpu failed"]);
    assert_eq!(gpu.detail.queues.len(), 1);
    // An executor with no canary of its own, not the default: no rule.
    assert_eq!(read.for_executor(2, false, PICKUP, Some(1)), None);
    // Not run yet: the default executor is judged on the DAG alone.
    let fresh = CanaryRead {
        read_at: now,
        dag: Some(DagRow {
            paused: true,
            ..scheduled(now)
        }),
        tasks: vec![],
    };
    let default = fresh
        .for_executor(0, true, PICKUP, Some(1))
        .expect("the default one");
    assert!(default.detail.queues.is_empty());
    assert_eq!(
        default.blind.as_deref(),
        Some("canary DAG overseer_canary is paused")
    );
    assert_eq!(fresh.for_executor(1, false, PICKUP, Some(1)), None);
}

#[test]
fn each_pickup_is_counted_once_however_many_reads_see_it() {
    let now = Utc::now();
    let picked = |n| CanaryTask {
        queued: at(now, 100),
        started: at(now, 98),
        ..task(now, n, "default", Some("running"))
    };
    let mut read = CanaryRead {
        read_at: now,
        dag: Some(scheduled(now)),
        tasks: vec![picked(1)],
    };
    let mut seen = PickupsSeen::default();
    assert_eq!(seen.new_pickups(&read, 0), [("default".to_owned(), 2.0)]);
    assert!(seen.new_pickups(&read, 0).is_empty());
    read.tasks.insert(0, picked(2));
    assert_eq!(seen.new_pickups(&read, 0), [("default".to_owned(), 2.0)]);
    assert!(seen.new_pickups(&read, 1).is_empty(), "not executor 1's");
}

#[test]
fn a_canary_that_stopped_running_says_so_and_blames_a_dead_scheduler() {
    let now = Utc::now();
    let succeeded = |n: i64| CanaryTask {
        queued: at(now, 1),
        started: at(now, 1),
        ended: at(now, 1),
        ..task(now, n, "default", Some("success"))
    };
    // Runs every 300 s, the latest's logical date 300 s ago: on time.
    let mut read = CanaryRead {
        read_at: now,
        dag: Some(scheduled(now)),
        tasks: vec![succeeded(3), succeeded(2)],
    };
    assert_eq!(
        read.for_executor(0, true, PICKUP, Some(1)).unwrap().blind,
        None
    );
    // 899 s: two periods since the next was due not yet past.
    read.read_at = now + chrono::Duration::seconds(599);
    read.dag = Some(scheduled(read.read_at));
    assert_eq!(
        read.for_executor(0, true, PICKUP, Some(0)).unwrap().blind,
        None
    );
    // 900 s, the dag-processor still moving its next run forward: not running.
    read.read_at = now + chrono::Duration::seconds(600);
    read.dag = Some(scheduled(read.read_at));
    let judged = read.for_executor(0, true, PICKUP, Some(0)).unwrap();
    assert_eq!(
        judged.blind.as_deref(),
        Some(
            "canary DAG overseer_canary has not run for two of its intervals (every 5m): \
             the scheduler is not running"
        )
    );
    assert_eq!(judged.detail.dag, "not running");
    // A scheduler alive (or not known): no cause named. The reason holds still
    // while the silence grows.
    read.read_at = now + chrono::Duration::seconds(6000);
    read.dag = Some(scheduled(read.read_at));
    for schedulers in [Some(2), None] {
        assert_eq!(
            read.for_executor(0, true, PICKUP, schedulers)
                .unwrap()
                .blind
                .as_deref(),
            Some("canary DAG overseer_canary has not run for two of its intervals (every 5m)")
        );
    }
    // One run alone: its period is not known, nothing said.
    read.tasks = vec![succeeded(3)];
    assert_eq!(
        read.for_executor(0, true, PICKUP, Some(0)).unwrap().blind,
        None
    );
    // The rule off with the pickup's: nothing said.
    read.tasks = vec![succeeded(3), succeeded(2)];
    assert_eq!(
        read.for_executor(0, true, Duration::ZERO, Some(0))
            .unwrap()
            .blind,
        None
    );
}
