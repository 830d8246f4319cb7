//! Durations as an operator reads them in a verdict's reason or a log line:
//! `5s`, `4.5s`, `800ms`. One formatter for every crate, so that the supervisor's
//! `no reply within 5s` and a broker's `did not answer within 3.5s` read alike.
//!
//! This is not the configuration's form (`1s 500ms`, which `humantime` parses
//! back exactly): a reason rounds to a tenth of a second, and is never read back.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// `ago` before `now`, for a cutoff the database compares: never earlier than
/// the Unix epoch, which every backend stores (MySQL's `TIMESTAMP` starts there)
/// and before which neither Airflow nor Overseer wrote a row. So no duration,
/// however long, overflows the subtraction or the column (`now - Duration::MAX`
/// panicked; a cutoff in the year -200000 was "timestamp out of range" on Postgres).
pub fn before(now: DateTime<Utc>, ago: Duration) -> DateTime<Utc> {
    chrono::TimeDelta::from_std(ago)
        .ok()
        .and_then(|ago| now.checked_sub_signed(ago))
        .filter(|cutoff| *cutoff > DateTime::UNIX_EPOCH)
        .unwrap_or(DateTime::UNIX_EPOCH)
}

/// `1s`, `4.5s`, `800ms`: whole milliseconds under a second, else seconds to a
/// tenth (rounded to the nearest; `1999ms` is `2s`), with no trailing `.0`.
pub fn short(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let tenths = (ms + 50) / 100;
    if tenths.is_multiple_of(10) {
        format!("{}s", tenths / 10)
    } else {
        format!("{}.{}s", tenths / 10, tenths % 10)
    }
}

/// An age, as a reason says how long something waited: `45s`, `5m`, `4m 30s`,
/// `14m`, `2h`, `1h 3m`; to the second under an hour, to the minute beyond.
/// Under a second it is [`short`].
pub fn age(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0 => short(duration),
        1..60 => format!("{secs}s"),
        60..3600 => match secs % 60 {
            0 => format!("{}m", secs / 60),
            s => format!("{}m {s}s", secs / 60),
        },
        _ => match (secs / 60) % 60 {
            0 => format!("{}h", secs / 3600),
            m => format!("{}h {m}m", secs / 3600),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cutoff_never_overflows_and_never_precedes_the_epoch() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(
            before(now, Duration::from_secs(30)),
            DateTime::from_timestamp(1_799_999_970, 0).unwrap()
        );
        for ago in [
            Duration::MAX,
            Duration::from_secs(u64::MAX / 2),
            Duration::from_secs(200_000 * 31_557_600),
            Duration::from_secs(1_800_000_000),
        ] {
            assert_eq!(before(now, ago), DateTime::UNIX_EPOCH, "{ago:?}");
        }
    }

    #[test]
    fn ages_read_in_minutes_and_hours() {
        for (secs, shown) in [
            (1, "1s"),
            (45, "45s"),
            (60, "1m"),
            (270, "4m 30s"),
            (300, "5m"),
            (840, "14m"),
            (3600, "1h"),
            (3780, "1h 3m"),
            (7230, "2h"),
        ] {
            assert_eq!(age(Duration::from_secs(secs)), shown, "{secs}s");
        }
        assert_eq!(age(Duration::from_millis(800)), "800ms");
    }

    #[test]
    fn durations_read_plainly() {
        for (duration, shown) in [
            (Duration::ZERO, "0ms"),
            (Duration::from_micros(900), "0ms"),
            (Duration::from_millis(150), "150ms"),
            (Duration::from_millis(800), "800ms"),
            (Duration::from_millis(999), "999ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(1999), "2s"),
            (Duration::from_millis(3500), "3.5s"),
            (Duration::from_millis(4500), "4.5s"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_secs(60), "60s"),
            (Duration::from_secs(600), "600s"),
        ] {
            assert_eq!(short(duration), shown, "{duration:?}");
        }
    }
}
