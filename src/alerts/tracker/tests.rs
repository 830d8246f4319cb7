//! The rules of the table in `tracker`'s doc, each as a timeline of states:
//! what is sent, and when; and runs that start from what an earlier one left.

use super::*;
use ExecutorHealthKind::{Healthy, Unhealthy, Unknown};

fn key() -> InstanceKey {
    InstanceKey {
        executor: "CeleryExecutor".into(),
        instance: "redis://broker:6379/0".into(),
        hostname: "sched-1".into(),
    }
}

fn seen(health: ExecutorHealthKind, reason: &str) -> Vec<Observed> {
    vec![Observed {
        key: key(),
        health,
        reason: (health != Healthy).then(|| reason.to_owned()),
        since: None,
    }]
}

/// Feeds `states` (each held for its duration, in seconds), re-checking every
/// 100 ms as the notifier's timer would, and returns (status, at second) of
/// each alert.
fn run(rules: Rules, states: &[(ExecutorHealthKind, u64)]) -> Vec<(AlertStatus, f64)> {
    let start = Instant::now();
    let wall = Utc::now();
    let mut tracker = Tracker::new(rules);
    let mut out = Vec::new();
    let mut t = Duration::ZERO;
    for (i, &(health, secs)) in states.iter().enumerate() {
        let reason = format!("reason {i}");
        let end = t + Duration::from_secs(secs);
        while t < end {
            let now = start + t;
            let at = wall + chrono::Duration::from_std(t).unwrap();
            for alert in tracker.observe(seen(health, &reason), now, at) {
                out.push((alert.status, t.as_secs_f64()));
            }
            t += Duration::from_millis(100);
        }
    }
    out
}

const RULES: Rules = Rules {
    min_duration: Duration::from_secs(30),
    send_resolved: true,
};

#[test]
fn a_blip_shorter_than_min_duration_sends_nothing() {
    let alerts = run(RULES, &[(Healthy, 60), (Unhealthy, 29), (Healthy, 60)]);
    assert_eq!(alerts, []);
}

#[test]
fn an_outage_fires_once_after_min_duration_and_resolves_once() {
    let alerts = run(RULES, &[(Healthy, 60), (Unhealthy, 120), (Healthy, 60)]);
    assert_eq!(
        alerts,
        [(AlertStatus::Firing, 90.0), (AlertStatus::Resolved, 210.0)]
    );
}

#[test]
fn without_send_resolved_only_firing_and_the_next_outage_fires_again() {
    let rules = Rules {
        send_resolved: false,
        ..RULES
    };
    let alerts = run(
        rules,
        &[
            (Healthy, 60),
            (Unhealthy, 40),
            (Healthy, 40),
            (Unhealthy, 40),
        ],
    );
    assert_eq!(
        alerts,
        [(AlertStatus::Firing, 90.0), (AlertStatus::Firing, 170.0)]
    );
}

#[test]
fn a_short_recovery_does_not_resolve_and_a_reason_change_does_not_fire_again() {
    let start = Instant::now();
    let at = Utc::now();
    let mut tracker = Tracker::new(RULES);
    assert_eq!(tracker.observe(seen(Unhealthy, "a"), start, at), []);
    assert_eq!(tracker.next_deadline(), Some(start + RULES.min_duration));
    let fired = tracker.due(start + Duration::from_secs(30));
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].previous, Unknown);
    assert_eq!(fired[0].reason.as_deref(), Some("a"));
    assert_eq!(tracker.next_deadline(), None);
    // The reason changes: nothing.
    let later = start + Duration::from_secs(40);
    assert_eq!(tracker.observe(seen(Unhealthy, "b"), later, at), []);
    // Healthy for 10 s, then unhealthy again: no resolved, no second firing.
    assert_eq!(tracker.observe(seen(Healthy, ""), later, at), []);
    let back = later + Duration::from_secs(10);
    assert_eq!(tracker.observe(seen(Unhealthy, "c"), back, at), []);
    assert_eq!(tracker.due(back + Duration::from_secs(60)), []);
}

#[test]
fn unknown_neither_fires_nor_resolves() {
    let alerts = run(
        RULES,
        &[
            (Unknown, 60),
            (Healthy, 60),
            (Unknown, 60),
            (Unhealthy, 60),
            (Unknown, 60),
            (Healthy, 60),
        ],
    );
    assert_eq!(
        alerts,
        [(AlertStatus::Firing, 210.0), (AlertStatus::Resolved, 330.0)]
    );
}

#[test]
fn a_resolved_alert_names_when_the_outage_began() {
    let start = Instant::now();
    let t0 = Utc::now();
    let mut tracker = Tracker::new(Rules {
        min_duration: Duration::ZERO,
        send_resolved: true,
    });
    assert_eq!(tracker.observe(seen(Healthy, ""), start, t0).len(), 0);
    let down = tracker.observe(seen(Unhealthy, "refused"), start, t0);
    assert_eq!(down[0].previous, Healthy);
    assert_eq!(down[0].since, t0);
    let t1 = t0 + chrono::Duration::minutes(3);
    let up = tracker.observe(seen(Healthy, ""), start + Duration::from_secs(180), t1);
    assert_eq!(up.len(), 1);
    assert_eq!(up[0].status, AlertStatus::Resolved);
    assert_eq!((up[0].health, up[0].previous), (Healthy, Unhealthy));
    assert_eq!((up[0].since, up[0].unhealthy_since), (t1, t0));
    assert_eq!(up[0].reason, None);
}

/// How an earlier run left the instance: `unhealthy` since `since`, its
/// row last seen `watched` after that.
fn left(since: DateTime<Utc>, watched: i64) -> LeftBehind {
    LeftBehind {
        key: key(),
        health: Unhealthy,
        previous: Healthy,
        reason: Some("refused".into()),
        since,
        last_seen: Some(since + chrono::Duration::seconds(watched)),
    }
}

#[test]
fn an_alert_an_earlier_run_left_firing_is_resolved_by_this_one() {
    let start = Instant::now();
    let t0 = Utc::now() - chrono::Duration::minutes(10);
    let now = Utc::now();
    let mut tracker = Tracker::new(RULES);
    // Watched for 40 s past the outage's start: it sent the firing alert.
    tracker.restore([left(t0, 40)], start, now);
    // The new run's row, registered `unknown`, then its first verdict.
    assert_eq!(tracker.observe(seen(Unknown, "starting"), start, now), []);
    assert_eq!(tracker.observe(seen(Unhealthy, "refused"), start, now), []);
    assert_eq!(tracker.observe(seen(Healthy, ""), start, now), []);
    let resolved = tracker.due(start + RULES.min_duration);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].status, AlertStatus::Resolved);
    assert_eq!(resolved[0].unhealthy_since, t0);
    assert_eq!(tracker.due(start + RULES.min_duration * 9), []);
}

#[test]
fn an_outage_an_earlier_run_stopped_before_alerting_fires_at_once_if_it_goes_on() {
    let start = Instant::now();
    let t0 = Utc::now() - chrono::Duration::minutes(10);
    let now = Utc::now();
    let mut tracker = Tracker::new(RULES);
    // Watched for 10 s only: no alert was sent.
    tracker.restore([left(t0, 10)], start, now);
    let fired = tracker.observe(seen(Unhealthy, "still refused"), start, now);
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].status, AlertStatus::Firing);
    assert_eq!((fired[0].since, fired[0].previous), (t0, Healthy));
    assert_eq!(fired[0].reason.as_deref(), Some("still refused"));
}

#[test]
fn an_alert_left_firing_is_not_sent_again_while_the_outage_goes_on() {
    let start = Instant::now();
    let t0 = Utc::now() - chrono::Duration::minutes(10);
    let mut tracker = Tracker::new(RULES);
    tracker.restore([left(t0, 40)], start, Utc::now());
    assert_eq!(tracker.observe(seen(Unhealthy, "x"), start, Utc::now()), []);
    assert_eq!(tracker.due(start + RULES.min_duration * 9), []);
    assert_eq!(tracker.next_deadline(), None);
}

#[test]
fn an_alert_names_the_time_the_report_gives_for_the_state() {
    let start = Instant::now();
    let began = Utc::now() - chrono::Duration::seconds(3);
    let mut tracker = Tracker::new(Rules {
        min_duration: Duration::ZERO,
        send_resolved: true,
    });
    let observed = vec![Observed {
        since: Some(began),
        ..seen(Unhealthy, "refused").remove(0)
    }];
    let fired = tracker.observe(observed, start, Utc::now());
    assert_eq!((fired[0].since, fired[0].unhealthy_since), (began, began));
}

#[test]
fn an_instance_gone_from_the_report_is_forgotten() {
    let start = Instant::now();
    let at = Utc::now();
    let mut tracker = Tracker::new(RULES);
    tracker.observe(seen(Unhealthy, "a"), start, at);
    tracker.observe(Vec::new(), start, at);
    assert_eq!(tracker.next_deadline(), None);
    assert_eq!(tracker.due(start + Duration::from_secs(60)), []);
}
