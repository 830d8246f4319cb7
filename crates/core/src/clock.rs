//! This process's wall clock, never running backwards: what a verdict's
//! `checked_at`, and so the history's transitions, are stamped with.
//!
//! The wall clock may be stepped back (NTP setting it right, a VM restored,
//! an operator's `date -s`). A transition stamped after the step would then
//! sort before the one it follows, and the history, the alerts' spans and the
//! report's `since` would read the changes in the wrong order. So within a
//! process a stamp is never earlier than the last one given: after a step
//! back, stamps hold at the last until the clock passes it again (ties keep
//! their order by the rows' ids). A step forward is taken as it comes; the
//! history's prune guards against that one itself.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Utc};

/// The latest stamp given, in microseconds since the epoch.
static LAST: AtomicI64 = AtomicI64::new(i64::MIN);

/// Now, to the microsecond, never earlier than an earlier call's answer.
pub fn now() -> DateTime<Utc> {
    let wall = Utc::now();
    let at = not_before(wall.timestamp_micros(), &LAST);
    DateTime::from_timestamp_micros(at).unwrap_or(wall)
}

/// `wall`, or the latest stamp `last` holds when that is later; `last` keeps
/// the greater.
fn not_before(wall: i64, last: &AtomicI64) -> i64 {
    wall.max(last.fetch_max(wall, Ordering::AcqRel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_stepped_back_holds_at_the_latest_stamp_until_it_passes_it() {
        let last = AtomicI64::new(i64::MIN);
        // 10:00:00, 10:00:01, then the clock stepped back by a minute, then on.
        let readings = [36_000, 36_001, 35_941, 35_990, 36_001, 36_002];
        let stamps: Vec<i64> = readings
            .iter()
            .map(|s| not_before(s * 1_000_000, &last) / 1_000_000)
            .collect();
        assert_eq!(stamps, [36_000, 36_001, 36_001, 36_001, 36_001, 36_002]);
    }
}
