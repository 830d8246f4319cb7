//! The workers' state from their events, time passed in.

use super::*;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hearing::SubscriptionState;

const HEARTBEAT: &str = r#"{"hostname": "celery@w1", "utcoffset": 0, "pid": 6656,
    "clock": 2, "freq": 2.0, "active": 1, "processed": 7, "loadavg": [0.5, 0.25, 0.1],
    "sw_ident": "py-celery", "sw_ver": "5.5.3", "sw_sys": "Linux",
    "timestamp": 1796145862.926931, "type": "worker-heartbeat"}"#;

fn event(kind: &str, host: &str) -> Event {
    Event::from_body(
        format!(r#"{{"hostname": "{host}", "freq": 2.0, "type": "worker-{kind}"}}"#).as_bytes(),
    )
    .unwrap()
}

#[test]
fn a_heartbeat_reads_as_celery_sends_it_bare_or_in_kombus_redis_envelope() {
    let event = Event::from_body(HEARTBEAT.as_bytes()).unwrap();
    assert_eq!(event.kind, Kind::Heartbeat);
    assert_eq!(event.hostname, "celery@w1");
    assert_eq!(event.freq, Some(2.0));
    assert_eq!((event.active, event.processed), (Some(1), Some(7)));
    assert_eq!(event.loadavg, Some([0.5, 0.25, 0.1]));
    assert_eq!(event.software.as_deref(), Some("py-celery 5.5.3"));

    // As captured from a real Celery 5.5.3 worker on Redis.
    let envelope = serde_json::json!({
        "body": BASE64.encode(HEARTBEAT),
        "content-encoding": "utf-8", "content-type": "application/json",
        "headers": {"hostname": "celery@w1"},
        "properties": {"delivery_mode": 1, "delivery_info": {"exchange": "celeryev",
            "routing_key": "worker.heartbeat"}, "priority": 0, "body_encoding": "base64",
            "delivery_tag": "6cc3ab7b-b65f-4142-b900-ff564cbcb8bb"}
    });
    assert_eq!(
        Event::from_redis_envelope(envelope.to_string().as_bytes()),
        Some(event)
    );
    // Task events, other groups and noise are not worker events.
    for body in [
        r#"{"hostname": "celery@w1", "type": "task-received"}"#,
        r#"{"type": "worker-heartbeat"}"#,
        r#"{"hostname": "", "type": "worker-heartbeat"}"#,
        "not json",
    ] {
        assert_eq!(Event::from_body(body.as_bytes()), None, "{body}");
    }
}

#[test]
fn nothing_is_said_until_a_subscription_has_listened_for_two_heartbeats() {
    let events = WorkerEvents::default();
    let start = Instant::now();
    assert_eq!(events.workers_at(start), None, "nobody listens");
    events.listening_at(0, start);
    events.heard_at(0, event("heartbeat", "celery@w1"), start, Utc::now());
    assert_eq!(events.workers_at(start + Duration::from_secs(3)), None);
    let workers = events.workers_at(start + WARM_UP).unwrap();
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0].state, State::Online);
}

#[test]
fn a_worker_is_gone_after_two_heartbeats_missed_while_listened_for_and_stays_gone() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    let at = |s: f64| t0 + Duration::from_secs_f64(s);
    let state = |now| events.workers_at(now).unwrap()[0].state;
    events.listening_at(0, t0);
    events.heard_at(0, event("online", "celery@w1"), at(0.0), Utc::now());
    events.heard_at(0, event("heartbeat", "celery@w1"), at(4.0), Utc::now());
    assert_eq!(state(at(5.0)), State::Online);
    assert_eq!(state(at(8.0)), State::Online, "exactly two heartbeats late");
    assert_eq!(state(at(8.1)), State::Gone);

    // The subscription drops and comes back: the silence it could not hear
    // does not clear the verdict, nor does the new subscription's warm-up.
    events.deaf(0);
    assert_eq!(state(at(20.0)), State::Gone);
    events.listening_at(0, at(30.0));
    assert_eq!(state(at(30.5)), State::Gone);
    events.heard_at(0, event("heartbeat", "celery@w1"), at(31.0), Utc::now());
    assert_eq!(state(at(31.0)), State::Online, "it spoke again");
}

#[test]
fn a_worker_falling_silent_is_told_once_the_moment_it_is_two_heartbeats_long() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    let at = |s: f64| t0 + Duration::from_secs_f64(s);
    events.listening_at(0, t0);
    events.heard_at(0, event("online", "celery@w1"), at(0.0), Utc::now());
    // One forged heartbeat: a name heard once, whose silence is no fault.
    events.heard_at(0, event("heartbeat", "celery@once"), at(3.0), Utc::now());
    events.heard_at(0, event("heartbeat", "celery@w1"), at(4.0), Utc::now());
    assert!(!events.fell_silent_at(at(2.0)), "not warmed up yet");
    assert!(
        !events.fell_silent_at(at(7.9)),
        "still within two heartbeats"
    );
    assert!(!events.fell_silent_at(at(7.1)));
    assert!(
        events.fell_silent_at(at(8.1)),
        "w1 silent for two heartbeats"
    );
    assert!(!events.fell_silent_at(at(8.4)), "told once");
    let workers = events.workers_at(at(8.5)).unwrap();
    assert!(
        workers.iter().all(|w| w.state == State::Gone),
        "{workers:?}"
    );
    // While nobody listens, a silence is nobody's: nothing is told.
    events.heard_at(0, event("heartbeat", "celery@w1"), at(9.0), Utc::now());
    events.deaf(0);
    assert!(!events.fell_silent_at(at(20.0)));
}

#[test]
fn silence_while_nobody_listens_is_no_fault_of_the_worker() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    events.listening_at(0, t0);
    events.heard_at(0, event("heartbeat", "celery@w1"), at(5), Utc::now());
    assert_eq!(events.workers_at(at(6)).unwrap()[0].state, State::Online);
    // Deaf from 7 s to 20 s: nothing judged meanwhile, and nothing known:
    // the worker is unknown, not online, and the reason is said.
    events.deaf(0);
    assert_eq!(events.workers_at(at(15)).unwrap()[0].state, State::Unknown);
    assert_eq!(
        events.unheard().as_deref(),
        Some("the subscription to the workers' heartbeats is not up")
    );
    // Listening again at 20 s: the worker has two heartbeats from then on.
    events.listening_at(0, at(20));
    assert_eq!(events.workers_at(at(23)).unwrap()[0].state, State::Online);
    assert_eq!(events.unheard(), None);
    assert_eq!(events.workers_at(at(25)).unwrap()[0].state, State::Gone);
}

#[test]
fn a_subscription_behind_blames_nobody_until_it_has_caught_up_and_listened_again() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    events.listening_at(0, t0);
    events.heard_at(0, event("online", "celery@w1"), at(1), Utc::now());
    assert_eq!(events.workers_at(at(4)).unwrap()[0].state, State::Online);
    // The broker drops events from 5 s on: w1's heartbeats among them.
    let why = "broker amqp://rabbit:5672// drops the workers' events before they are read";
    events.behind(0, why.to_owned(), Some(10_000));
    events.behind(0, why.to_owned(), Some(9_950));
    assert_eq!(events.workers_at(at(30)).unwrap()[0].state, State::Unknown);
    assert_eq!(events.unheard().as_deref(), Some(why));
    assert!(events.refused(), "said beside the verdict, not passed over");
    // Less waits, but more than it keeps up with: still behind.
    events.behind_still(0, 5_000);
    assert_eq!(events.unheard().as_deref(), Some(why));
    // Caught up: listening again from now, so the silence while behind
    // is nobody's fault and the worker has two heartbeats from here.
    events.caught_up(0, 0);
    let now = Instant::now();
    assert_eq!(events.unheard(), None);
    assert_eq!(events.workers_at(now).unwrap()[0].state, State::Online);
    assert_eq!(
        events.workers_at(now + Duration::from_secs(5)).unwrap()[0].state,
        State::Gone,
        "a silence heard in full counts again"
    );
    let [subscription] = &events.subscriptions()[..] else {
        panic!("one subscription");
    };
    assert_eq!(
        subscription,
        &SubscriptionState {
            index: 0,
            state: "listening",
            received: 1,
            subscribed: 1,
            overflows: 1,
            backlog: Some(0),
        },
        "one fall behind counted once, the events read counted"
    );
}

#[test]
fn a_worker_found_gone_just_before_the_subscription_is_found_behind_is_not_blamed() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    let at = |s: f64| t0 + Duration::from_secs_f64(s);
    events.listening_at(0, t0);
    events.heard_at(0, event("online", "celery@live"), at(0.0), Utc::now());
    events.heard_at(0, event("online", "celery@dead"), at(0.0), Utc::now());
    events.heard_at(0, event("heartbeat", "celery@live"), at(10.0), Utc::now());
    // dead: silent since 0 s, gone at 4.1 s; live: heard at 10 s, its
    // heartbeats dropped by a flooded broker from then on, gone at 14.1 s.
    assert!(events.fell_silent_at(at(4.1)));
    assert!(events.fell_silent_at(at(14.1)));
    // The flood is found at 16 s: the broker may have dropped events for up
    // to a TTL and a tick before, so live's silence is not held against it;
    // dead's, 12 s old, is.
    events.behind_at(0, "behind".to_owned(), None, at(16.0));
    let states: Vec<(String, State)> = events
        .workers_at(at(16.0))
        .unwrap()
        .into_iter()
        .map(|w| (w.name, w.state))
        .collect();
    assert_eq!(
        states,
        [
            ("celery@dead".to_owned(), State::Gone),
            ("celery@live".to_owned(), State::Unknown),
        ]
    );
}

#[test]
fn a_refused_subscription_is_said_and_ends_the_wait() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    assert!(
        events.pending_at(t0),
        "the first poll waits for the heartbeats"
    );
    assert!(events.pending_at(t0 + SETTLE_WITHIN - Duration::from_millis(1)));
    assert!(
        !events.pending_at(t0 + SETTLE_WITHIN),
        "the wait is bounded"
    );

    let refused = WorkerEvents::default();
    assert!(refused.pending_at(t0));
    let why = "broker redis://b:6379/0 refused the subscription to the workers' heartbeats: NOPERM";
    refused.cannot_listen(0, why.to_owned());
    assert!(
        !refused.pending_at(t0),
        "a refusal will not warm up: no wait"
    );
    assert_eq!(refused.unheard().as_deref(), Some(why));
    // Listening after all (the ACL was fixed): the refusal is forgotten.
    refused.listening(0);
    assert_eq!(refused.unheard(), None);
}

#[test]
fn the_last_worker_gone_is_not_forgotten_while_none_is_online() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    events.listening_at(0, t0);
    events.heard_at(0, event("heartbeat", "celery@a"), t0, Utc::now());
    let later = t0 + FORGET_AFTER * 2;
    let workers = events.workers_at(later).unwrap();
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0].state, State::Gone);
    // Another worker comes online: the old one is forgotten in time.
    events.heard_at(0, event("heartbeat", "celery@b"), later, Utc::now());
    let names: Vec<_> = events
        .workers_at(later + Duration::from_secs(1))
        .unwrap()
        .into_iter()
        .map(|w| w.name)
        .collect();
    assert_eq!(names, ["celery@b"]);
}

#[test]
fn an_offline_worker_is_offline_and_forgotten_after_an_hour() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    events.listening_at(0, t0);
    events.heard_at(0, event("heartbeat", "celery@a"), t0, Utc::now());
    events.heard_at(0, event("offline", "celery@b"), t0, Utc::now());
    let workers = events.workers_at(t0 + WARM_UP * 2).unwrap();
    let states: Vec<_> = workers.iter().map(|w| (w.name.as_str(), w.state)).collect();
    assert_eq!(
        states,
        [("celery@a", State::Gone), ("celery@b", State::Offline)]
    );
    // An hour on, the clean stop is forgotten; the death is not, while no
    // worker is online (see the next test).
    let names: Vec<_> = events
        .workers_at(t0 + FORGET_AFTER + Duration::from_secs(1))
        .unwrap()
        .into_iter()
        .map(|w| (w.name, w.state))
        .collect();
    assert_eq!(names, [("celery@a".to_owned(), State::Gone)]);
}

#[test]
fn forged_events_are_weighed_not_obeyed() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    // Listened for long enough already: every reading below says something.
    events.listening_at(0, t0.checked_sub(WARM_UP * 2).unwrap());
    let with_freq = |host: &str, freq: &str| {
        Event::from_body(
            format!(r#"{{"hostname": "{host}", "freq": {freq}, "type": "worker-heartbeat"}}"#)
                .as_bytes(),
        )
        .unwrap()
    };
    // A freq past what Celery sends is held to the documented range.
    events.heard_at(0, with_freq("celery@huge", "1e300"), t0, Utc::now());
    events.heard_at(0, with_freq("celery@tiny", "1e-9"), t0, Utc::now());
    let state = |at: Instant, name: &str| {
        events
            .workers_at(at)
            .unwrap()
            .into_iter()
            .find(|w| w.name == name)
            .map(|w| (w.state, w.freq))
    };
    let soon = t0 + Duration::from_millis(500);
    assert_eq!(state(soon, "celery@tiny"), Some((State::Online, MIN_FREQ)));
    let later = t0 + MAX_FREQ * 2 + Duration::from_secs(1);
    assert_eq!(state(later, "celery@huge"), Some((State::Gone, MAX_FREQ)));

    // A live worker heartbeating every 2 s while forged goodbyes arrive
    // every 100 ms: after its first heartbeat contradicts one, it stays online.
    let w = "celery@live";
    let mut offline_reads = 0;
    for tick in 0..100u64 {
        let at = t0 + Duration::from_millis(100 * tick);
        if tick % 20 == 0 {
            events.heard_at(0, event("heartbeat", w), at, Utc::now());
        } else {
            events.heard_at(0, event("offline", w), at, Utc::now());
        }
        if tick > 20 && state(at, w).map(|(s, _)| s) != Some(State::Online) {
            offline_reads += 1;
        }
    }
    assert_eq!(offline_reads, 0, "forged goodbyes won over live heartbeats");

    // A clean stop (no heartbeat since) is still offline at once.
    events.heard_at(0, event("heartbeat", "celery@stop"), t0, Utc::now());
    events.heard_at(
        0,
        event("offline", "celery@stop"),
        t0 + Duration::from_millis(50),
        Utc::now(),
    );
    assert_eq!(
        state(t0 + Duration::from_millis(60), "celery@stop").map(|(s, _)| s),
        Some(State::Offline)
    );
}

/// One forged heartbeat claiming a long `freq` between a real worker's
/// heartbeats does not put off its death; a real restart with a longer
/// interval (`worker-offline`, then `worker-online` claiming it) is believed.
#[test]
fn a_longer_freq_is_believed_only_as_far_as_the_heartbeats_are_spaced() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    let at = |s: f64| t0 + Duration::from_secs_f64(s);
    events.listening_at(0, t0.checked_sub(WARM_UP * 2).unwrap());
    let with_freq = |kind: &str, freq: &str| {
        Event::from_body(
            format!(r#"{{"hostname": "celery@w1", "freq": {freq}, "type": "worker-{kind}"}}"#)
                .as_bytes(),
        )
        .unwrap()
    };
    let state = |now| {
        let w = events.workers_at(now).unwrap().remove(0);
        (w.state, w.freq)
    };
    events.heard_at(0, with_freq("online", "2.0"), at(0.0), Utc::now());
    events.heard_at(0, with_freq("heartbeat", "2.0"), at(2.0), Utc::now());
    events.heard_at(0, with_freq("heartbeat", "120.0"), at(3.0), Utc::now());
    events.heard_at(0, with_freq("heartbeat", "2.0"), at(4.0), Utc::now());
    events.heard_at(0, with_freq("heartbeat", "120.0"), at(5.0), Utc::now());
    // Killed after its heartbeat at 4 s: gone two of its own heartbeats
    // after its last event, not four minutes on.
    assert_eq!(state(at(8.9)).0, State::Online);
    let (gone, freq) = state(at(9.1));
    assert_eq!(gone, State::Gone);
    assert_eq!(freq, Duration::from_secs(2));

    // Restarted cleanly with --heartbeat-interval 10: believed at once.
    events.heard_at(0, with_freq("online", "10.0"), at(20.0), Utc::now());
    events.heard_at(0, with_freq("heartbeat", "10.0"), at(30.0), Utc::now());
    assert_eq!(state(at(49.0)), (State::Online, Duration::from_secs(10)));
    assert_eq!(state(at(50.5)).0, State::Gone);
}

/// A goodbye for a worker its silence already made gone (a forger's, after
/// the crash) does not turn the death into a clean stop.
#[test]
fn a_goodbye_after_the_silence_does_not_unsay_a_death() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    let at = |s: f64| t0 + Duration::from_secs_f64(s);
    events.listening_at(0, t0.checked_sub(WARM_UP * 2).unwrap());
    let state = |now| events.workers_at(now).unwrap()[0].state;
    events.heard_at(0, event("online", "celery@w1"), at(0.0), Utc::now());
    events.heard_at(0, event("heartbeat", "celery@w1"), at(2.0), Utc::now());
    // Killed at 2.5 s; the goodbye comes after its silence made it gone,
    // whether anyone looked in between or not.
    events.heard_at(0, event("offline", "celery@w1"), at(6.5), Utc::now());
    assert_eq!(state(at(7.0)), State::Gone);
    events.heard_at(0, event("offline", "celery@w1"), at(8.0), Utc::now());
    assert_eq!(state(at(8.5)), State::Gone);
}

#[test]
fn a_flood_of_names_keeps_at_most_max_workers() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    for i in 0..MAX_WORKERS + 5 {
        let at = t0 + Duration::from_millis(i as u64);
        events.heard_at(
            0,
            event("heartbeat", &format!("celery@w{i}")),
            at,
            Utc::now(),
        );
    }
    let inner = events.lock();
    assert!(inner.workers.len() <= MAX_WORKERS);
    assert!(
        !inner.workers.contains_key("celery@w0"),
        "the oldest went first"
    );
    let newest = format!("celery@w{}", MAX_WORKERS + 4);
    assert!(inner.workers.contains_key(&newest), "the newest stays");
    assert!(
        inner
            .workers
            .contains_key(&format!("celery@w{}", MAX_WORKERS / 10 + 1)),
        "only the oldest tenth went"
    );
}

/// A real worker heartbeats every 2 s while a flood names 20,000 new
/// workers a second: the flood's names go, the worker stays, and its
/// death is still seen two heartbeats later.
#[test]
fn a_flood_of_new_names_never_pushes_out_a_worker_that_heartbeats() {
    let events = WorkerEvents::default();
    let t0 = Instant::now();
    events.listening_at(0, t0);
    let real = "celery@real";
    let mut forged = 0;
    // 12 s: the real worker at 0, 2, ... 10 s; from 3 s on (it was heard
    // twice by then), 200 forged names every 10 ms.
    for tick in 0..1_200u64 {
        let at = t0 + Duration::from_millis(tick * 10);
        if tick % 200 == 0 {
            events.heard_at(0, event("heartbeat", real), at, Utc::now());
        }
        for _ in 0..if tick < 300 { 0 } else { 200 } {
            events.heard_at(
                0,
                event("heartbeat", &format!("celery@forged{forged}")),
                at,
                Utc::now(),
            );
            forged += 1;
        }
        assert!(events.lock().workers.len() <= MAX_WORKERS);
        assert!(
            events.lock().workers.contains_key(real),
            "pushed out at {tick}0 ms"
        );
    }
    let state = |at| {
        events
            .workers_at(at)
            .unwrap()
            .into_iter()
            .find(|w| w.name == real)
            .map(|w| w.state)
    };
    assert_eq!(
        state(t0 + Duration::from_millis(11_990)),
        Some(State::Online)
    );
    // Last heard at 10 s: gone past 14 s.
    assert_eq!(state(t0 + Duration::from_millis(14_100)), Some(State::Gone));

    // Confirmed: heard twice, or announced by worker-online; not one heartbeat.
    let events = WorkerEvents::default();
    events.listening_at(0, t0);
    events.heard_at(0, event("heartbeat", "celery@once"), t0, Utc::now());
    events.heard_at(0, event("online", "celery@started"), t0, Utc::now());
    let confirmed: Vec<(String, bool)> = events
        .workers_at(t0 + WARM_UP)
        .unwrap()
        .into_iter()
        .map(|w| (w.name, w.confirmed))
        .collect();
    assert_eq!(
        confirmed,
        [
            ("celery@once".to_owned(), false),
            ("celery@started".to_owned(), true)
        ]
    );
}
