//! Posting alerts: one thread per target, its own bounded queue, retries with
//! back-off for a bounded time. Whatever the webhook does (refuse, hang, answer
//! 500), the cost lands on this thread alone: the notifier only ever
//! `try_send`s into the queue, and the actors never see it.
//!
//! | wait | bounded by |
//! | --- | --- |
//! | one attempt (connect, send, status line) | [`ATTEMPT_TIMEOUT`] |
//! | between attempts | [`FIRST_BACKOFF`], doubling up to [`MAX_BACKOFF`] |
//! | one alert, every attempt together | the target's `retry_for`, then it is dropped with one `WARN` |
//! | alerts waiting their turn | [`QUEUE_CAPACITY`] per target; one more is dropped with a `WARN` |
//!
//! Alerts to one target go out in the order they were made (a `resolved` never
//! overtakes its `firing`).

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use overseer_core::backoff::Backoff;
use overseer_core::duration::age;
use overseer_core::secret::Scrubber;
use serde::Serialize;

use super::tracker::{Alert, AlertStatus};
use crate::config::{AlertFormat, WebhookUrl};

/// How long one POST may take: connecting, sending, and the status line.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The wait after a first failed attempt; it doubles after each failure...
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// ...up to this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Alerts that may wait for one target (behind one being retried, say); an
/// outage of every executor at once fits many times over.
pub const QUEUE_CAPACITY: usize = 64;

/// Sent as `User-Agent`, so a receiver's logs can tell Overseer's alerts apart.
const USER_AGENT: &str = concat!("overseer/", env!("CARGO_PKG_VERSION"), " (alerts)");

/// One target's counters, read by `/metrics`.
#[derive(Debug, Default)]
pub struct TargetStats {
    /// `name`, else the redacted URL: the `target` label.
    pub label: String,
    pub firing_sent: AtomicU64,
    pub resolved_sent: AtomicU64,
    /// Attempts that failed (each retry counts).
    pub failures: AtomicU64,
    /// Alerts given up on: past `retry_for`, a full queue, or the service stopping.
    pub dropped: AtomicU64,
}

impl TargetStats {
    fn sent(&self, status: AlertStatus) -> &AtomicU64 {
        match status {
            AlertStatus::Firing => &self.firing_sent,
            AlertStatus::Resolved => &self.resolved_sent,
        }
    }

    /// Counts an alert that will not be delivered.
    pub fn drop_one(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// Where one target's alerts go, and how.
pub struct Target {
    pub url: WebhookUrl,
    pub format: AlertFormat,
    /// How long one alert is retried before it is dropped.
    pub retry_for: Duration,
    pub stats: Arc<TargetStats>,
    /// Masks the URL's secrets in whatever an error says.
    scrubber: Scrubber,
    agent: ureq::Agent,
}

impl Target {
    pub fn new(
        url: WebhookUrl,
        format: AlertFormat,
        retry_for: Duration,
        stats: Arc<TargetStats>,
    ) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout(ATTEMPT_TIMEOUT)
            .timeout_connect(ATTEMPT_TIMEOUT)
            .redirects(0)
            .user_agent(USER_AGENT)
            .build();
        Self {
            scrubber: url.scrubbing(Scrubber::default()),
            url,
            format,
            retry_for,
            stats,
            agent,
        }
    }

    fn label(&self) -> &str {
        &self.stats.label
    }

    /// One attempt: POSTs `alert`; a 2xx status is delivered. The error says
    /// why not, without the URL.
    fn post(&self, alert: &Alert) -> Result<(), String> {
        let body = body(alert, self.format, Utc::now());
        let why = match self
            .agent
            .post(self.url.expose_secret())
            .set("Content-Type", "application/json")
            .send_string(&body)
        {
            Ok(response) if (200..300).contains(&response.status()) => return Ok(()),
            Ok(response) | Err(ureq::Error::Status(_, response)) => {
                format!("answered {} {}", response.status(), response.status_text())
            }
            Err(ureq::Error::Transport(transport)) => unreachable(&transport),
        };
        Err(self.scrubber.scrub(why.trim_end()))
    }
}

/// Why no status came back, in plain words; never the URL (ureq's own
/// `Display` of a transport error quotes it).
fn unreachable(transport: &ureq::Transport) -> String {
    let io = std::error::Error::source(transport).and_then(|s| s.downcast_ref::<io::Error>());
    match (transport.kind(), io.map(io::Error::kind)) {
        (_, Some(io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock)) => format!(
            "no answer within {}",
            overseer_core::duration::short(ATTEMPT_TIMEOUT)
        ),
        (_, Some(io::ErrorKind::ConnectionRefused)) => "connection refused".to_owned(),
        (_, Some(io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof)) => {
            "the connection closed before an answer".to_owned()
        }
        (ureq::ErrorKind::Dns, _) => "its host was not found".to_owned(),
        (kind, Some(_)) => format!(
            "{kind}: {}",
            io.map(ToString::to_string).unwrap_or_default()
        ),
        (kind, None) => kind.to_string(),
    }
}

/// The delivery thread's loop: each alert from `queue` in turn, retried until
/// delivered or `retry_for` has passed; ends when the queue closes, or (between
/// attempts) when `stop` does.
pub fn run(target: &Target, queue: &Receiver<Alert>, stop: &Receiver<()>) {
    while let Ok(alert) = queue.recv() {
        if !deliver(target, &alert, stop) {
            // Stopping: what waits is not delivered either.
            let left = 1 + queue.try_iter().count() as u64;
            target.stats.dropped.fetch_add(left, Ordering::Relaxed);
            tracing::warn!(
                alert_target = target.label(),
                "stopping: {left} alert(s) to {} not delivered",
                target.label()
            );
            return;
        }
    }
}

/// Delivers one alert, or gives up on it after `retry_for` (counted, and
/// logged once). `false` when `stop` closed while it waited to retry.
fn deliver(target: &Target, alert: &Alert, stop: &Receiver<()>) -> bool {
    let first = Instant::now();
    let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    let mut attempts = 0u32;
    let stats = &target.stats;
    let what = || {
        format!(
            "{} alert for {} @ {} on {}",
            alert.status.as_str(),
            alert.key.executor,
            alert.key.instance,
            alert.key.hostname
        )
    };
    loop {
        attempts += 1;
        let why = match target.post(alert) {
            Ok(()) => {
                stats.sent(alert.status).fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    alert_target = target.label(),
                    attempts,
                    "sent the {} to {}",
                    what(),
                    target.label()
                );
                return true;
            }
            Err(why) => why,
        };
        stats.failures.fetch_add(1, Ordering::Relaxed);
        let Some(wait) = next_wait(first.elapsed(), backoff.next_delay(), target.retry_for) else {
            stats.drop_one();
            tracing::warn!(
                alert_target = target.label(),
                attempts,
                "dropping the {} to {}: not delivered within retry_for {} (last attempt: {why})",
                what(),
                target.label(),
                overseer_core::duration::age(target.retry_for)
            );
            return true;
        };
        if attempts == 1 {
            tracing::warn!(
                alert_target = target.label(),
                "cannot send the {} to {}: {why}; retrying for up to {}",
                what(),
                target.label(),
                overseer_core::duration::age(target.retry_for)
            );
        } else {
            tracing::debug!(
                alert_target = target.label(),
                attempts,
                "the {} to {} failed again: {why}",
                what(),
                target.label()
            );
        }
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
}

/// How long to wait before the next attempt, `elapsed` after the first, when
/// the backoff says `delay`: never past `retry_for`, so that the last attempt
/// is made when it ends (not a whole backoff step before); `None` once it has.
fn next_wait(elapsed: Duration, delay: Duration, retry_for: Duration) -> Option<Duration> {
    let left = retry_for
        .checked_sub(elapsed)
        .filter(|left| !left.is_zero())?;
    Some(delay.min(left))
}

/// The JSON body of the README's "Alerts" (`format = "json"`).
#[derive(Debug, Serialize)]
struct JsonBody<'a> {
    status: AlertStatus,
    executor: &'a str,
    instance: &'a str,
    hostname: &'a str,
    health: overseer_core::report::ExecutorHealthKind,
    previous: overseer_core::report::ExecutorHealthKind,
    reason: Option<&'a str>,
    since: String,
    unhealthy_since: String,
    cost: Option<overseer_core::airflow::cost::FaultCost>,
    sent_at: String,
    overseer: &'static str,
}

/// As the health JSON writes times: RFC 3339, microseconds, `+00:00`.
fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, false)
}

/// The request body of `alert` in `format`, sent at `sent_at`.
pub fn body(alert: &Alert, format: AlertFormat, sent_at: DateTime<Utc>) -> String {
    let value = match format {
        AlertFormat::Json => serde_json::to_value(JsonBody {
            status: alert.status,
            executor: &alert.key.executor,
            instance: &alert.key.instance,
            hostname: &alert.key.hostname,
            health: alert.health,
            previous: alert.previous,
            reason: alert.reason.as_deref(),
            since: timestamp(alert.since),
            unhealthy_since: timestamp(alert.unhealthy_since),
            cost: alert.cost,
            sent_at: timestamp(sent_at),
            overseer: env!("CARGO_PKG_VERSION"),
        }),
        AlertFormat::Slack => Ok(serde_json::json!({ "text": slack_text(alert) })),
    };
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// The one line of a Slack message:
/// `:red_circle: CeleryExecutor @ redis://broker:6379/0 on sched-1 is unhealthy: ...`,
/// `:large_green_circle: ... is healthy again after 3m`. Slack's control
/// characters (`&`, `<`, `>`) are escaped as its docs ask.
pub fn slack_text(alert: &Alert) -> String {
    let who = format!(
        "{} @ {} on {}",
        alert.key.executor, alert.key.instance, alert.key.hostname
    );
    let line = match alert.status {
        AlertStatus::Firing => format!(
            ":red_circle: {who} is unhealthy: {}",
            alert.reason.as_deref().unwrap_or("no reason given")
        ),
        AlertStatus::Resolved => {
            let down = (alert.since - alert.unhealthy_since)
                .to_std()
                .unwrap_or_default();
            let cost = alert
                .cost
                .map(|cost| format!("; {} meanwhile", cost.describe()))
                .unwrap_or_default();
            format!(
                ":large_green_circle: {who} is healthy again after {}{cost}",
                age(down)
            )
        }
    };
    line.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use overseer_core::report::ExecutorHealthKind::{Healthy, Unhealthy};

    use super::*;
    use crate::alerts::tracker::InstanceKey;

    fn alert(status: AlertStatus) -> Alert {
        let t0 = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.123456Z")
            .unwrap()
            .to_utc();
        let key = InstanceKey {
            executor: "CeleryExecutor".into(),
            instance: "redis://broker:6379/0".into(),
            hostname: "sched-1".into(),
        };
        match status {
            AlertStatus::Firing => Alert {
                status,
                key,
                health: Unhealthy,
                previous: Healthy,
                reason: Some("broker redis://broker:6379/0 refused the connection".into()),
                since: t0,
                unhealthy_since: t0,
                cost: None,
            },
            AlertStatus::Resolved => Alert {
                status,
                key,
                health: Healthy,
                previous: Unhealthy,
                reason: None,
                since: t0 + chrono::Duration::seconds(183),
                unhealthy_since: t0,
                cost: Some(overseer_core::airflow::cost::FaultCost {
                    failed: 3,
                    up_for_retry: 1,
                }),
            },
        }
    }

    #[test]
    fn the_json_body_has_every_field_in_order() {
        let sent = DateTime::parse_from_rfc3339("2026-01-02T03:05:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            body(&alert(AlertStatus::Firing), AlertFormat::Json, sent),
            format!(
                r#"{{"status":"firing","executor":"CeleryExecutor","instance":"redis://broker:6379/0","hostname":"sched-1","health":"unhealthy","previous":"healthy","reason":"broker redis://broker:6379/0 refused the connection","since":"2026-01-02T03:04:05.123456+00:00","unhealthy_since":"2026-01-02T03:04:05.123456+00:00","cost":null,"sent_at":"2026-01-02T03:05:00.000000+00:00","overseer":"{}"}}"#,
                env!("CARGO_PKG_VERSION")
            )
        );
        let resolved: serde_json::Value = serde_json::from_str(&body(
            &alert(AlertStatus::Resolved),
            AlertFormat::Json,
            sent,
        ))
        .unwrap();
        assert_eq!(resolved["status"], "resolved");
        assert_eq!(resolved["health"], "healthy");
        assert_eq!(resolved["previous"], "unhealthy");
        assert_eq!(resolved["reason"], serde_json::Value::Null);
        assert_eq!(resolved["since"], "2026-01-02T03:07:08.123456+00:00");
        assert_eq!(
            resolved["cost"],
            serde_json::json!({"failed": 3, "up_for_retry": 1})
        );
    }

    /// Attempts come at 0, 1, 3, 7, 15 s and then at `retry_for` itself: an
    /// alert is retried for as long as it says, then dropped.
    #[test]
    fn attempts_go_on_until_retry_for_has_passed() {
        let retry_for = Duration::from_secs(30);
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        let (mut at, mut attempts) = (Duration::ZERO, vec![Duration::ZERO]);
        while let Some(wait) = next_wait(at, backoff.next_delay(), retry_for) {
            at += wait;
            attempts.push(at);
        }
        let seconds: Vec<u64> = attempts.iter().map(Duration::as_secs).collect();
        assert_eq!(seconds, [0, 1, 3, 7, 15, 30]);
        // Tries once when it is zero.
        assert_eq!(
            next_wait(Duration::ZERO, FIRST_BACKOFF, Duration::ZERO),
            None
        );
    }

    #[test]
    fn slack_gets_one_line_of_text() {
        let now = Utc::now();
        assert_eq!(
            body(&alert(AlertStatus::Firing), AlertFormat::Slack, now),
            r#"{"text":":red_circle: CeleryExecutor @ redis://broker:6379/0 on sched-1 is unhealthy: broker redis://broker:6379/0 refused the connection"}"#
        );
        assert_eq!(
            slack_text(&alert(AlertStatus::Resolved)),
            ":large_green_circle: CeleryExecutor @ redis://broker:6379/0 on sched-1 is healthy again after 3m 3s; 3 task instances failed, 1 went up_for_retry meanwhile"
        );
        let mut odd = alert(AlertStatus::Firing);
        odd.reason = Some("a <b> & c".into());
        assert!(slack_text(&odd).ends_with("a &lt;b&gt; &amp; c"));
    }
}
