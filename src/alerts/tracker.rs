//! [`Tracker`]: each executor instance's state, and the alerts its changes call
//! for under one target's rules. Pure: it is handed the time, so it is tested
//! without a clock.
//!
//! | the instance | `min_duration` has passed since it entered that state, and | alert |
//! | --- | --- | --- |
//! | `unhealthy` | no firing alert is open for it | `firing` (opens one) |
//! | `healthy` | a firing alert is open for it | `resolved` when `send_resolved` (closes it either way) |
//! | `unknown` | (never) | none: an open alert stays open until `healthy` |
//! | gone from the report | (never) | none: forgotten, an open alert with it |
//!
//! A state is timed from the report that first showed it; a change of reason
//! alone is no change of state. So a blip shorter than `min_duration` sends
//! nothing, and an `unhealthy` verdict that outlives it sends one `firing`
//! alert, however often its reason changes.
//!
//! **Across restarts.** A run starts from what the history says earlier runs
//! left ([`Tracker::restore`]): an instance whose latest transition was to
//! `unhealthy` is `unhealthy` since then, and its firing alert is open when
//! the earlier run watched it for `min_duration` after (its row's last
//! heartbeat says how long), since that run then sent it. So the next run
//! resolves it once the instance is `healthy`, and fires it (at once, the
//! state having held long enough) if it is still `unhealthy` and the earlier
//! run stopped before it could.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use overseer_core::cost::FaultCost;
use overseer_core::report::ExecutorHealthKind;
use serde::Serialize;
use tokio::time::Instant;

/// Which executor row a state belongs to: the report's `executor`, `instance`
/// and `hostname`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct InstanceKey {
    pub executor: String,
    pub instance: String,
    pub hostname: String,
}

/// One executor instance as a report shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub key: InstanceKey,
    pub health: ExecutorHealthKind,
    /// Why, for `unhealthy` and `unknown`.
    pub reason: Option<String>,
    /// When the state began, as the report says (the history's time of the
    /// verdict that began it), if it says: an alert's `since` then names the
    /// same moment in every run, the health JSON and the history.
    pub since: Option<DateTime<Utc>>,
}

/// One target's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// How long a state must hold before it is alerted.
    pub min_duration: Duration,
    /// Whether a return to `healthy` after a firing alert is alerted too.
    pub send_resolved: bool,
}

/// What an alert says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertStatus {
    /// The instance turned `unhealthy`, and stayed so for `min_duration`.
    Firing,
    /// It is `healthy` again (for `min_duration`) after a firing alert.
    Resolved,
}

impl AlertStatus {
    /// `firing` or `resolved`, as the body and the metrics' `status` label say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Firing => "firing",
            Self::Resolved => "resolved",
        }
    }
}

/// One alert to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    pub status: AlertStatus,
    pub key: InstanceKey,
    /// The state now: `unhealthy` for `firing`, `healthy` for `resolved`.
    pub health: ExecutorHealthKind,
    /// The state before it.
    pub previous: ExecutorHealthKind,
    /// The `unhealthy` reason (the latest), for `firing`; `None` for `resolved`.
    pub reason: Option<String>,
    /// When the instance entered `health`.
    pub since: DateTime<Utc>,
    /// When it turned `unhealthy`: `since` for `firing`; the firing alert's
    /// `since` for `resolved`.
    pub unhealthy_since: DateTime<Utc>,
    /// For `resolved`: what the outage cost the executor (its task instances
    /// that failed or went `up_for_retry` meanwhile), as the history counted
    /// it; `None` for `firing`, or when the history has no count.
    pub cost: Option<FaultCost>,
}

/// One instance's state.
#[derive(Debug, Clone)]
struct Tracked {
    health: ExecutorHealthKind,
    previous: ExecutorHealthKind,
    reason: Option<String>,
    /// When a report first showed `health`, on the clock that times `min_duration`...
    since: Instant,
    /// ...and as the alert says it.
    since_at: DateTime<Utc>,
    /// The firing alert sent and not yet resolved: when that `unhealthy` began.
    open: Option<DateTime<Utc>>,
}

impl Tracked {
    /// What this state calls for once it has held `min_duration`, if anything.
    fn pending(&self) -> Option<AlertStatus> {
        match (self.health, self.open) {
            (ExecutorHealthKind::Unhealthy, None) => Some(AlertStatus::Firing),
            (ExecutorHealthKind::Healthy, Some(_)) => Some(AlertStatus::Resolved),
            _ => None,
        }
    }
}

/// How an earlier run left an instance: the history's latest transition for
/// it, and the last heartbeat of its row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftBehind {
    pub key: InstanceKey,
    /// The state the earlier run saw last, since `since`.
    pub health: ExecutorHealthKind,
    pub previous: ExecutorHealthKind,
    pub reason: Option<String>,
    pub since: DateTime<Utc>,
    /// The earlier run's row's last heartbeat: it watched the state until then.
    pub last_seen: Option<DateTime<Utc>>,
}

/// Every instance's state under one target's rules.
#[derive(Debug)]
pub struct Tracker {
    rules: Rules,
    tracked: BTreeMap<InstanceKey, Tracked>,
    /// States earlier runs left, for instances no report has shown yet: each
    /// is taken up when its instance is first seen.
    restored: BTreeMap<InstanceKey, Tracked>,
}

impl Tracker {
    pub fn new(rules: Rules) -> Self {
        Self {
            rules,
            tracked: BTreeMap::new(),
            restored: BTreeMap::new(),
        }
    }

    /// Starts from what earlier runs left (see the module's "Across
    /// restarts"), at `now` (`at` on the wall clock). Only `unhealthy` states
    /// matter: any other calls for nothing until the instance turns
    /// `unhealthy`, which this run sees itself.
    pub fn restore(
        &mut self,
        left: impl IntoIterator<Item = LeftBehind>,
        now: Instant,
        at: DateTime<Utc>,
    ) {
        for left in left {
            if left.health != ExecutorHealthKind::Unhealthy {
                continue;
            }
            let min_duration = chrono::Duration::from_std(self.rules.min_duration)
                .unwrap_or(chrono::Duration::MAX);
            let fired = left
                .last_seen
                .is_some_and(|seen| seen - left.since >= min_duration);
            let held = (at - left.since).to_std().unwrap_or_default();
            self.restored.insert(
                left.key,
                Tracked {
                    health: left.health,
                    previous: left.previous,
                    reason: left.reason,
                    since: now.checked_sub(held).unwrap_or(now),
                    since_at: left.since,
                    open: fired.then_some(left.since),
                },
            );
        }
    }

    /// Takes in a report's instances, seen at `now` (`at` on the wall clock),
    /// and returns the alerts due. An instance seen for the first time was
    /// `unknown` before; one missing from `observed` is forgotten.
    pub fn observe(
        &mut self,
        observed: impl IntoIterator<Item = Observed>,
        now: Instant,
        at: DateTime<Utc>,
    ) -> Vec<Alert> {
        let mut seen = BTreeMap::new();
        for Observed {
            key,
            health,
            reason,
            since,
        } in observed
        {
            let began = since.unwrap_or(at);
            let tracked = match self.tracked.remove(&key) {
                Some(mut tracked) if tracked.health == health => {
                    tracked.reason = reason;
                    // The report may learn when the state began after it
                    // first showed it; an alert not sent yet says so.
                    if let Some(since) = since
                        && tracked.pending() == Some(AlertStatus::Firing)
                    {
                        tracked.since_at = since;
                    }
                    tracked
                }
                Some(tracked) => Tracked {
                    health,
                    previous: tracked.health,
                    reason,
                    since: now,
                    since_at: began,
                    open: tracked.open,
                },
                None => match self.restored.remove(&key) {
                    // As an earlier run left it: still in that state...
                    Some(mut left) if left.health == health => {
                        left.reason = reason;
                        left
                    }
                    // ...or in another since now, an open alert kept.
                    Some(left) => Tracked {
                        health,
                        previous: left.health,
                        reason,
                        since: now,
                        since_at: began,
                        open: left.open,
                    },
                    None => Tracked {
                        health,
                        previous: ExecutorHealthKind::Unknown,
                        reason,
                        since: now,
                        since_at: began,
                        open: None,
                    },
                },
            };
            seen.insert(key, tracked);
        }
        self.tracked = seen;
        self.due(now)
    }

    /// The alerts due at `now`: states that have held `min_duration`.
    pub fn due(&mut self, now: Instant) -> Vec<Alert> {
        let mut alerts = Vec::new();
        for (key, tracked) in &mut self.tracked {
            let Some(status) = tracked.pending() else {
                continue;
            };
            if now.saturating_duration_since(tracked.since) < self.rules.min_duration {
                continue;
            }
            let alert = |unhealthy_since, reason| Alert {
                status,
                key: key.clone(),
                health: tracked.health,
                previous: tracked.previous,
                reason,
                since: tracked.since_at,
                unhealthy_since,
                cost: None,
            };
            match status {
                AlertStatus::Firing => {
                    alerts.push(alert(tracked.since_at, tracked.reason.clone()));
                    tracked.open = Some(tracked.since_at);
                }
                AlertStatus::Resolved => {
                    if let Some(unhealthy_since) = tracked.open.take()
                        && self.rules.send_resolved
                    {
                        alerts.push(alert(unhealthy_since, None));
                    }
                }
            }
        }
        alerts
    }

    /// When the next alert may fall due if no report changes anything: the
    /// earliest state that calls for one, `min_duration` after it began.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.tracked
            .values()
            .filter(|t| t.pending().is_some())
            .map(|t| t.since + self.rules.min_duration)
            .min()
    }
}

#[cfg(test)]
mod tests {
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
}
