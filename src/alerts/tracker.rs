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
use overseer_core::airflow::cost::FaultCost;
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
mod tests;
