//! The verdict's rules on the brokers' and workers' answers.

use super::*;
use crate::check::ping::tests::worker;
use overseer_core::detail::WorkerDetail;

fn pinged(ping: &WorkerPing) -> Workers<'_> {
    Workers {
        ping: Some(ping),
        ..Workers::default()
    }
}

fn heard(workers: &[Worker]) -> Workers<'_> {
    Workers {
        heard: Some(workers),
        ..Workers::default()
    }
}

/// A ping that went out, and the workers that answered it.
fn sent(answered: Vec<WorkerDetail>) -> WorkerPing {
    WorkerPing {
        answered,
        window_ms: 1000,
        sent: true,
        ..WorkerPing::default()
    }
}

/// A ping this host did not get set up in time.
fn late() -> WorkerPing {
    WorkerPing {
        window_ms: 1000,
        errors: vec!["broker redis://ok:6379/0: the ping was not set up in time".into()],
        ..WorkerPing::default()
    }
}

fn failed(broker: &str, reason: &str) -> BrokerReport {
    BrokerReport {
        broker: broker.into(),
        status: BrokerStatus::Failed(reason.into()),
        queues: Vec::new(),
        delivered: None,
        started_at: None,
    }
}

#[test]
fn reasons_and_notes_are_one_bounded_line() {
    let window = Duration::from_secs(1);
    let hostile = |i: usize| {
        failed(
            &format!("redis://b{i}:6379/0"),
            &format!(
                "broker redis://b{i}:6379/0 failed: ERR\n{}",
                "x".repeat(5000)
            ),
        )
    };
    let down: Vec<BrokerReport> = (0..8).map(hostile).collect();
    let (health, reason) = verdict(&down, Workers::default(), window, 0);
    let ExecutorHealth::Unhealthy { reason: said } = &health else {
        panic!("no broker answered: {health:?}");
    };
    assert_eq!(reason.as_deref(), Some(said.as_str()));
    assert!(!said.contains('\n') && said.chars().count() <= reason::MAX_CHARS);
    assert!(
        said.starts_with("broker redis://b0:6379/0 failed: ERR xxx"),
        "{said}"
    );
    assert!(said.ends_with("; and 6 more"), "{said}");

    // Healthy through failover: the note is bounded the same way.
    let mut through = vec![BrokerReport {
        broker: "redis://ok:6379/0".into(),
        status: BrokerStatus::Answered,
        queues: Vec::new(),
        delivered: None,
        started_at: None,
    }];
    through.extend((0..8).map(hostile));
    let (health, note) = verdict(&through, Workers::default(), window, 0);
    assert_eq!(health, ExecutorHealth::Healthy);
    let note = note.expect("the brokers that did not answer are noted");
    assert!(!note.contains('\n') && note.chars().count() <= reason::MAX_CHARS);
    assert!(note.ends_with("; and 6 more"), "{note}");

    // Too few workers, every ping failed by its broker with a long error.
    let errors: Vec<String> = (0..6)
        .map(|i| format!("ping {i}:\r\n{}", "e".repeat(3000)))
        .collect();
    let ping = WorkerPing {
        failed: errors.clone(),
        errors,
        ..WorkerPing::default()
    };
    let (health, _) = verdict(&through[..1], pinged(&ping), window, 2);
    let ExecutorHealth::Unhealthy { reason: said } = &health else {
        panic!("too few workers: {health:?}");
    };
    assert!(!said.contains(['\r', '\n']) && said.chars().count() <= reason::MAX_CHARS);
    assert!(
        said.starts_with("0 of at least 2 workers answered ping within 1s (ping 0: eee"),
        "{said}"
    );
}

#[test]
fn a_worker_that_consumes_no_queue_is_named_at_once() {
    let window = Duration::from_secs(1);
    let broker = [BrokerReport {
        broker: "redis://ok:6379/0".into(),
        status: BrokerStatus::Answered,
        queues: Vec::new(),
        delivered: None,
        started_at: None,
    }];
    let ping = |answered: Vec<WorkerDetail>| WorkerPing {
        answered,
        sent: true,
        ..WorkerPing::default()
    };
    for (case, answered, expected) in [
        (
            "one idle worker",
            vec![worker("celery@w1", Some(&[]))],
            ExecutorHealth::unhealthy("celery@w1 answers but consumes no queue"),
        ),
        (
            "one idle beside one that works",
            vec![
                worker("celery@w1", Some(&["default"])),
                worker("celery@w2", Some(&[])),
            ],
            ExecutorHealth::unhealthy("celery@w2 answers but consumes no queue"),
        ),
        (
            "two idle",
            vec![
                worker("celery@w1", Some(&[])),
                worker("celery@w2", Some(&[])),
            ],
            ExecutorHealth::unhealthy("celery@w1, celery@w2 answer but consume no queue"),
        ),
        (
            "queues not said: not known to be idle",
            vec![worker("celery@w1", None)],
            ExecutorHealth::Healthy,
        ),
        (
            "every worker consumes",
            vec![worker("celery@w1", Some(&["default", "gpu"]))],
            ExecutorHealth::Healthy,
        ),
        // Workers scaled to zero (KEDA): nothing answered, none is idle.
        ("no worker at all", vec![], ExecutorHealth::Healthy),
    ] {
        let (health, _) = verdict(&broker, pinged(&ping(answered)), window, 0);
        assert_eq!(health, expected, "{case}");
    }
}

/// A worker heard by its heartbeats, last at 06:03:53 UTC, `silent` ms ago.
fn worker_heard(name: &str, state: State, silent: u64) -> Worker {
    use overseer_core::detail::WorkerHeartbeat;
    Worker {
        name: name.into(),
        state,
        silent_for: Duration::from_millis(silent),
        freq: Duration::from_secs(2),
        confirmed: true,
        heartbeat: WorkerHeartbeat {
            last: "2026-12-02T06:03:53.5Z".parse().unwrap(),
            every_ms: 2000,
            active: None,
            processed: None,
            loadavg: None,
            software: None,
        },
    }
}

/// A name heard once only.
fn once(name: &str, state: State, silent: u64) -> Worker {
    Worker {
        confirmed: false,
        ..worker_heard(name, state, silent)
    }
}

fn answered() -> [BrokerReport; 1] {
    [BrokerReport {
        broker: "redis://ok:6379/0".into(),
        status: BrokerStatus::Answered,
        queues: Vec::new(),
        delivered: None,
        started_at: None,
    }]
}

#[test]
fn without_the_ping_min_workers_counts_the_workers_alive_by_their_heartbeats() {
    let window = Duration::from_secs(1);
    let broker = answered();
    for (case, workers, min, expected) in [
        (
            "one alive of one",
            vec![worker_heard("celery@w1", State::Online, 500)],
            1,
            ExecutorHealth::Healthy,
        ),
        (
            "the only worker gone",
            vec![worker_heard("celery@w1", State::Gone, 5300)],
            1,
            ExecutorHealth::unhealthy(
                "0 of at least 1 workers alive: celery@w1 sent no heartbeat since \
                 2026-12-02 06:03:53 UTC (one every 2s)",
            ),
        ),
        (
            "one gone, one offline, one alive",
            vec![
                worker_heard("celery@w1", State::Gone, 9000),
                worker_heard("celery@w2", State::Offline, 1000),
                worker_heard("celery@w3", State::Online, 100),
            ],
            2,
            ExecutorHealth::unhealthy(
                "1 of at least 2 workers alive: celery@w1 sent no heartbeat since \
                 2026-12-02 06:03:53 UTC (one every 2s); celery@w2 went offline",
            ),
        ),
        (
            "none ever heard",
            vec![],
            1,
            ExecutorHealth::unhealthy("0 of at least 1 workers alive (none sends heartbeats)"),
        ),
        // Scaled to zero, with no minimum: nothing to say.
        ("none, none asked for", vec![], 0, ExecutorHealth::Healthy),
    ] {
        let (health, _) = verdict(&broker, heard(&workers), window, min);
        assert_eq!(health, expected, "{case}");
    }
    // With the ping, the ping counts: a worker alive by its heartbeat that
    // does not answer is not alive.
    let ping = sent(vec![]);
    let alive = [worker_heard("celery@w1", State::Online, 100)];
    let both = Workers {
        ping: Some(&ping),
        heard: Some(&alive),
        unheard: None,
        passing: false,
    };
    let (health, _) = verdict(&broker, both, window, 1);
    assert_eq!(
        health,
        ExecutorHealth::unhealthy("0 of at least 1 workers answered ping within 1s")
    );
}

#[test]
fn a_worker_gone_without_a_goodbye_is_unhealthy_with_no_setting() {
    let window = Duration::from_secs(1);
    let broker = answered();
    let gone_reason = "celery@w1 sent no heartbeat since 2026-12-02 06:03:53 UTC (one every 2s)";
    let hold = GONE_HOLD.as_millis() as u64;
    for (case, workers, expected) in [
        (
            "the only worker gone",
            vec![worker_heard("celery@w1", State::Gone, 4100)],
            ExecutorHealth::unhealthy(gone_reason),
        ),
        (
            "the only worker gone for an hour: none is online, it still counts",
            vec![worker_heard("celery@w1", State::Gone, 3_600_000)],
            ExecutorHealth::unhealthy(gone_reason),
        ),
        (
            "gone beside one alive, within the hold",
            vec![
                worker_heard("celery@w1", State::Gone, hold - 1),
                worker_heard("celery@w2", State::Online, 100),
            ],
            ExecutorHealth::unhealthy(gone_reason),
        ),
        (
            "gone beside one alive, past the hold",
            vec![
                worker_heard("celery@w1", State::Gone, hold),
                worker_heard("celery@w2", State::Online, 100),
            ],
            ExecutorHealth::Healthy,
        ),
        (
            "a clean stop (worker-offline, as a scale-down sends) is no fault",
            vec![worker_heard("celery@w1", State::Offline, 100)],
            ExecutorHealth::Healthy,
        ),
        (
            "two gone: both named",
            vec![
                worker_heard("celery@w1", State::Gone, 5000),
                worker_heard("celery@w2", State::Gone, 5000),
            ],
            ExecutorHealth::unhealthy(
                "celery@w1, celery@w2 sent no heartbeat since 2026-12-02 06:03:53 UTC",
            ),
        ),
        (
            "unknown (nobody listens) is neither alive nor gone",
            vec![worker_heard("celery@w1", State::Unknown, 100)],
            ExecutorHealth::Healthy,
        ),
        (
            "names heard once (a flood of forged events) are no fault",
            vec![
                once("celery@forged-1", State::Gone, 5000),
                once("celery@forged-2", State::Online, 100),
                worker_heard("celery@w2", State::Online, 100),
            ],
            ExecutorHealth::Healthy,
        ),
        (
            "a worker that heartbeats, gone amid a flood: it alone is named",
            vec![
                once("celery@forged-1", State::Gone, 5000),
                worker_heard("celery@w1", State::Gone, 4100),
                once("celery@forged-2", State::Gone, 4100),
                once("celery@forged-3", State::Online, 100),
            ],
            ExecutorHealth::unhealthy(gone_reason),
        ),
    ] {
        let (health, _) = verdict(&broker, heard(&workers), window, 0);
        assert_eq!(health, expected, "{case}");
    }

    // The reason holds still while the fault lasts: the same at every poll.
    let at = |silent| {
        verdict(
            &broker,
            heard(&[worker_heard("celery@w1", State::Gone, silent)]),
            window,
            0,
        )
        .0
    };
    assert_eq!(at(4100), at(60_000));

    // With the ping on as well, the heartbeats name the worker: a frozen
    // worker is not blamed on a ping that went out unanswered, nor on one
    // that could not be sent in time (then the heartbeats count it).
    let frozen = [worker_heard("celery@w1", State::Gone, 4100)];
    for (ping, expected) in [
        (sent(vec![]), gone_reason.to_owned()),
        (
            late(),
            format!("0 of at least 1 workers alive: {gone_reason}"),
        ),
    ] {
        let both = Workers {
            ping: Some(&ping),
            heard: Some(&frozen),
            unheard: None,
            passing: false,
        };
        assert_eq!(
            verdict(&broker, both, window, 1).0,
            ExecutorHealth::unhealthy(expected)
        );
    }
}

#[test]
fn workers_that_cannot_be_heard_are_not_counted_and_say_why() {
    let window = Duration::from_secs(1);
    let broker = answered();
    let why =
        "broker redis://ok:6379/0 refused the subscription to the workers' heartbeats: NOPERM";
    let last_alive = [worker_heard("celery@w1", State::Unknown, 100)];
    let deaf = Workers {
        ping: None,
        heard: Some(&last_alive),
        unheard: Some(why),
        passing: false,
    };
    // min_workers cannot be judged: unknown, not healthy, not "0 alive".
    assert_eq!(
        verdict(&broker, deaf, window, 1),
        (
            ExecutorHealth::unknown(workers_not_counted(why)),
            Some(workers_not_counted(why).into())
        )
    );
    // With no minimum the verdict is the brokers', and it says the workers
    // are not watched.
    assert_eq!(
        verdict(&broker, deaf, window, 0),
        (
            ExecutorHealth::Healthy,
            Some(format!("workers not watched: {why}").into())
        )
    );
    // A worker found gone before the subscription dropped stays the cause.
    let gone = [worker_heard("celery@w1", State::Gone, 5000)];
    let deaf_gone = Workers {
        heard: Some(&gone),
        ..deaf
    };
    assert!(matches!(
        verdict(&broker, deaf_gone, window, 1).0,
        ExecutorHealth::Unhealthy { reason } if reason.starts_with("celery@w1 sent no heartbeat since")
    ));
    // With the ping, the ping counts the workers.
    let ping = sent(vec![worker("celery@w1", Some(&["default"]))]);
    let pinging = Workers {
        ping: Some(&ping),
        ..deaf
    };
    assert_eq!(
        verdict(&broker, pinging, window, 1).0,
        ExecutorHealth::Healthy
    );
}

#[test]
fn a_subscription_warming_up_or_reconnecting_waits_without_a_note() {
    let window = Duration::from_secs(1);
    let broker = answered();
    let why = "the workers' heartbeats have not been listened for long enough yet";
    let warming = Workers {
        unheard: Some(why),
        passing: true,
        ..Workers::default()
    };
    // No minimum: the brokers' verdict, and no note for a wait that ends
    // by itself (the check says it is pending).
    assert_eq!(
        verdict(&broker, warming, window, 0),
        (ExecutorHealth::Healthy, None)
    );
    // A minimum cannot be judged yet: unknown, saying why.
    assert_eq!(
        verdict(&broker, warming, window, 1).0,
        ExecutorHealth::unknown(workers_not_counted(why))
    );
}

/// The rule table on the sequences seen on a loaded host, poll by poll:
/// each case is what a service with `worker_ping` and `min_workers = 1`
/// read at each poll (2 s apart), and what it must say.
#[test]
fn the_stronger_evidence_names_the_cause_poll_after_poll() {
    let window = Duration::from_secs(1);
    let w1 = || vec![worker("celery@w1", Some(&["default"]))];
    let online = || vec![worker_heard("celery@w1", State::Online, 500)];
    let gone_hb = || vec![worker_heard("celery@w1", State::Gone, 4100)];
    let refused = || WorkerPing {
        window_ms: 1000,
        errors: vec!["broker redis://ok:6379/0: could not send the ping: NOPERM".into()],
        failed: vec!["broker redis://ok:6379/0: could not send the ping: NOPERM".into()],
        ..WorkerPing::default()
    };
    let silent = "0 of at least 1 workers answered ping within 1s";
    let gone = "celery@w1 sent no heartbeat since 2026-12-02 06:03:53 UTC (one every 2s)";
    let none_alive = format!("0 of at least 1 workers alive: {gone}");
    let unhealthy = |reason: &str| ExecutorHealth::unhealthy(reason);
    type Poll = (u64, WorkerPing, Option<Vec<Worker>>, ExecutorHealth);
    let cases: Vec<(&str, Vec<Poll>)> = vec![
        (
            "a worker frozen on a loaded host: the worker's, never the broker's, never healthy",
            vec![
                (0, sent(w1()), Some(online()), ExecutorHealth::Healthy),
                (2, sent(vec![]), Some(online()), unhealthy(silent)),
                (4, late(), Some(online()), unhealthy(silent)),
                (6, late(), Some(gone_hb()), unhealthy(gone)),
                (8, sent(vec![]), Some(gone_hb()), unhealthy(gone)),
                (10, late(), Some(gone_hb()), unhealthy(gone)),
            ],
        ),
        (
            "a healthy worker on a loaded host: late pings fail nobody",
            vec![
                (0, sent(w1()), Some(online()), ExecutorHealth::Healthy),
                (2, late(), Some(online()), ExecutorHealth::Healthy),
                (4, late(), None, ExecutorHealth::Healthy),
                (20, late(), None, ExecutorHealth::Healthy),
                (30, sent(w1()), None, ExecutorHealth::Healthy),
            ],
        ),
        (
            "pings late for longer than the hold: counted by heartbeats, else not at all",
            vec![
                (0, sent(w1()), Some(online()), ExecutorHealth::Healthy),
                (32, late(), Some(online()), ExecutorHealth::Healthy),
                (
                    34,
                    late(),
                    None,
                    ExecutorHealth::unknown(
                        "workers not counted: the ping did not go out in time (broker \
                         redis://ok:6379/0: the ping was not set up in time)",
                    ),
                ),
                (36, late(), Some(gone_hb()), unhealthy(&none_alive)),
            ],
        ),
        (
            "no counted ping yet, a start on a loaded host: the heartbeats count",
            vec![
                (0, late(), Some(online()), ExecutorHealth::Healthy),
                (2, late(), Some(gone_hb()), unhealthy(&none_alive)),
            ],
        ),
        (
            "a broker that refuses the ping is named: it failed",
            vec![
                (0, sent(w1()), Some(online()), ExecutorHealth::Healthy),
                (
                    2,
                    refused(),
                    Some(online()),
                    unhealthy(
                        "0 of at least 1 workers answered ping within 1s (broker \
                         redis://ok:6379/0: could not send the ping: NOPERM)",
                    ),
                ),
            ],
        ),
    ];
    let broker = answered();
    for (case, polls) in cases {
        let start = Instant::now();
        let mut held = HeldPing::default();
        for (at, fresh, heard, expected) in polls {
            let ping = held.judged(&fresh, start + Duration::from_secs(at));
            let workers = Workers {
                ping: Some(&ping),
                heard: heard.as_deref(),
                unheard: heard
                    .is_none()
                    .then_some("the subscription to the workers' heartbeats is down"),
                passing: false,
            };
            let (health, _) = verdict(&broker, workers, window, 1);
            assert_eq!(health, expected, "{case}, at {at}s");
        }
    }
    // The broker itself failing is named before any worker.
    let down = [failed(
        "redis://ok:6379/0",
        "broker redis://ok:6379/0 refused the connection",
    )];
    let (health, _) = verdict(&down, pinged(&late()), window, 1);
    assert_eq!(
        health,
        unhealthy("broker redis://ok:6379/0 refused the connection")
    );
}
