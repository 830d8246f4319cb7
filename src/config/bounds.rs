//! The floor and ceiling of every duration in the configuration, chosen for
//! what the duration means, and checked where configuration is read: by
//! [`super::validate`] for every layer, and by [`super::airflow`] as Airflow's
//! own variables are parsed. Past them a value is refused with one line naming
//! its key, so nothing later can spin on it or overflow a timestamp with it.
//!
//! | key | floor | ceiling | `0s` |
//! | --- | --- | --- | --- |
//! | `supervisor.poll_interval` | 100ms | 1h | refused |
//! | `supervisor.poll_timeout` | 10ms | 1h (and under `poll_interval`) | refused |
//! | `supervisor.heartbeat_interval` | 100ms | 1h | refused |
//! | `supervisor.refresh_interval` | 100ms | 1h | refused |
//! | `thresholds.scheduler`, `.triggerer`, `.dag_processor` | 1s | 7days | refused |
//! | `thresholds.executor` | 1s (and 2.1 x `heartbeat_interval`) | 7days | refused |
//! | `history.retention` | 1h | 10years | keeps forever |
//! | `executors[].max_queued_age` | 1s | 7days | turns the rules off |
//! | `executors[].canary_max_pickup` | 1s | 7days | turns the rule off |
//! | `executors[].max_at_capacity` | 1s | 7days | turns the rule off |
//! | `alerts[].min_duration` | 0s | 7days | alerts at once |
//! | `alerts[].retry_for` | 0s | 7days | tries once |
//!
//! Why these:
//! - An interval is a timer that fires forever: under 100 ms it costs a core
//!   for nothing an operator can see (at `1ns` the process spun and ignored
//!   SIGTERM). A poll timeout under 10 ms measures the machine's scheduler, not
//!   the executor. Past an hour, a verdict or a heartbeat says nothing about now,
//!   and Airflow's own jobs heartbeat every few seconds.
//! - A threshold is subtracted from the present to make a timestamp the
//!   database compares: a week is far beyond any heartbeat worth waiting for,
//!   and far inside every backend's range (`200000y` was "timestamp out of
//!   range" on Postgres). Under a second no heartbeat could keep up.
//! - Retention is ten years at most for the same reason (MySQL's `TIMESTAMP`
//!   starts in 1970); under an hour it would outrun its own hourly clean-up.

use std::time::Duration;

use super::duration;

/// What one duration key may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The shortest value (other than `0s`, where that is a word of its own).
    pub floor: Duration,
    /// The longest value.
    pub ceiling: Duration,
    /// What `0s` means, where it is allowed below the floor.
    pub zero: Option<&'static str>,
}

const MILLI: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);

/// A timer of the supervisor's or the aggregator's.
const INTERVAL: Bounds = Bounds {
    floor: Duration::from_millis(100),
    ceiling: HOUR,
    zero: None,
};

/// How old a heartbeat (or waiting work) may be.
const THRESHOLD: Bounds = Bounds {
    floor: SECOND,
    ceiling: Duration::from_secs(7 * 24 * 3600),
    zero: None,
};

/// How long an alert waits or retries.
const ALERT: Bounds = Bounds {
    floor: Duration::ZERO,
    ceiling: THRESHOLD.ceiling,
    zero: None,
};

/// Every duration key, with its bounds; `executors[]` and `alerts[]` keys as
/// written for any entry.
pub const DURATIONS: [(&str, Bounds); 14] = [
    ("supervisor.poll_interval", INTERVAL),
    (
        "supervisor.poll_timeout",
        Bounds {
            floor: Duration::from_millis(10),
            ..INTERVAL
        },
    ),
    ("supervisor.heartbeat_interval", INTERVAL),
    ("supervisor.refresh_interval", INTERVAL),
    ("thresholds.scheduler", THRESHOLD),
    ("thresholds.triggerer", THRESHOLD),
    ("thresholds.dag_processor", THRESHOLD),
    ("thresholds.executor", THRESHOLD),
    (
        "history.retention",
        Bounds {
            floor: HOUR,
            // Ten of `humantime`'s years (365.25 days), so that it reads `10years`.
            ceiling: Duration::from_secs(10 * 31_557_600),
            zero: Some("keeps the history forever"),
        },
    ),
    (
        "executors[].max_queued_age",
        Bounds {
            zero: Some("turns the rules off"),
            ..THRESHOLD
        },
    ),
    (
        "executors[].canary_max_pickup",
        Bounds {
            zero: Some("turns the rule off"),
            ..THRESHOLD
        },
    ),
    (
        "executors[].max_at_capacity",
        Bounds {
            zero: Some("turns the rule off"),
            ..THRESHOLD
        },
    ),
    ("alerts[].min_duration", ALERT),
    ("alerts[].retry_for", ALERT),
];

/// The bounds of `key` (`executors[3].max_queued_age` is `executors[].max_queued_age`'s).
///
/// # Panics
/// When `key` is not a duration key: a programming error, caught by the tests.
pub fn of(key: &str) -> Bounds {
    let general = match key.split_once("].") {
        Some((list, field)) => {
            let list = list.split('[').next().unwrap_or_default();
            format!("{list}[].{field}")
        }
        None => key.to_owned(),
    };
    DURATIONS
        .iter()
        .find(|(name, _)| *name == general)
        .map(|(_, bounds)| *bounds)
        .unwrap_or_else(|| panic!("{key} is not a duration key"))
}

impl Bounds {
    /// Whether `value` lies within these bounds; if not, why, in words that
    /// finish a sentence starting with the key.
    pub fn check(&self, value: Duration) -> Result<(), String> {
        if value.is_zero() && self.zero.is_some() {
            return Ok(());
        }
        if value.is_zero() && !self.floor.is_zero() {
            return Err("must be longer than zero".into());
        }
        if value < self.floor || value > self.ceiling {
            return Err(format!(
                "{} is out of range: it must be {}",
                shown(value),
                self.range()
            ));
        }
        Ok(())
    }

    /// The range in words: `from 100ms to 1h`, `0s (...) or from 1s to 7days`.
    pub fn range(&self) -> String {
        let range = format!(
            "from {} to {}",
            duration::format(self.floor),
            duration::format(self.ceiling)
        );
        match self.zero {
            Some(meaning) => format!("0s ({meaning}) or {range}"),
            None => range,
        }
    }

    /// Whether a number of seconds, as Airflow writes its thresholds, lies within
    /// these bounds; the duration if it does. Any `f64` is safe to give: `1e20`,
    /// `NaN` and `-5` are refused, never converted.
    pub fn seconds(&self, seconds: f64) -> Result<Duration, String> {
        if !seconds.is_finite() || seconds < 0.0 {
            return Err(format!(
                "expected a positive number of seconds, got {seconds}"
            ));
        }
        if seconds > self.ceiling.as_secs_f64() {
            return Err(format!(
                "{seconds} seconds is out of range: it must be {}",
                self.range()
            ));
        }
        let value = Duration::from_secs_f64(seconds);
        self.check(value)?;
        Ok(value)
    }
}

/// A duration as the error shows it: as configuration writes it, to the
/// millisecond below a second's floor, and whole years beyond any ceiling.
fn shown(value: Duration) -> String {
    if value < MILLI {
        return format!("{}ns", value.as_nanos());
    }
    duration::format(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_a_floor_below_its_ceiling() {
        for (key, bounds) in DURATIONS {
            assert!(bounds.floor < bounds.ceiling, "{key}");
            assert_eq!(of(key), bounds, "{key}");
        }
        assert_eq!(
            of("executors[12].max_queued_age"),
            of("executors[].max_queued_age")
        );
        assert_eq!(of("alerts[0].retry_for"), ALERT);
    }

    #[test]
    fn values_at_the_bounds_pass_and_beyond_them_are_refused() {
        let interval = of("supervisor.poll_interval");
        assert!(interval.check(Duration::from_millis(100)).is_ok());
        assert!(interval.check(HOUR).is_ok());
        assert_eq!(
            interval.check(Duration::from_millis(99)).unwrap_err(),
            "99ms is out of range: it must be from 100ms to 1h"
        );
        assert_eq!(
            interval.check(Duration::from_nanos(1)).unwrap_err(),
            "1ns is out of range: it must be from 100ms to 1h"
        );
        assert_eq!(
            interval.check(Duration::ZERO).unwrap_err(),
            "must be longer than zero"
        );
        assert!(interval.check(Duration::MAX).is_err());
        let retention = of("history.retention");
        assert!(retention.check(Duration::ZERO).is_ok());
        assert_eq!(
            retention.check(Duration::from_secs(60)).unwrap_err(),
            "1m is out of range: it must be 0s (keeps the history forever) or from 1h to 10years"
        );
        assert!(of("alerts[].min_duration").check(Duration::ZERO).is_ok());
    }

    #[test]
    fn airflows_seconds_never_panic() {
        let threshold = of("thresholds.scheduler");
        assert_eq!(threshold.seconds(30.0), Ok(Duration::from_secs(30)));
        assert_eq!(threshold.seconds(2.5), Ok(Duration::from_millis(2500)));
        for seconds in [
            1e20,
            1e308,
            f64::INFINITY,
            f64::NAN,
            -5.0,
            0.0,
            0.5,
            f64::MAX,
        ] {
            assert!(threshold.seconds(seconds).is_err(), "{seconds}");
        }
        assert_eq!(
            threshold.seconds(1e20).unwrap_err(),
            "100000000000000000000 seconds is out of range: it must be from 1s to 7days"
        );
    }
}
