//! The deadline a check gives itself inside the supervisor's `poll_timeout`.
//!
//! # Who bounds what
//! The supervisor reports `no reply within 5s` itself when a poll outlives
//! `poll_timeout`. A check answers first, with the real reason, because it stops
//! waiting at its own deadline, 90 % of `poll_timeout` (4.5 s of the default 5 s),
//! as the Celery check does:
//!
//! ```text
//! poll_timeout ─┬─ CHECK_SHARE (90 %): the command runs / the GET is answered
//!               └─ the margin (10 %): a timed-out command is killed and reaped,
//!                                     and the verdict travels back to the supervisor
//! ```

use std::time::Duration;

/// The share of `poll_timeout` a check spends at most; the rest is the margin
/// for cleaning up and for the verdict to reach the supervisor before its own
/// timeout fires.
const CHECK_SHARE: f64 = 0.9;

/// How long a check may wait on the outside world, given the supervisor's `poll_timeout`.
pub(crate) fn deadline(poll_timeout: Duration) -> Duration {
    poll_timeout.mul_f64(CHECK_SHARE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_leaves_a_margin_inside_the_poll_timeout() {
        for (timeout, deadline_ms) in [(5_000, 4_500), (1_000, 900), (500, 450)] {
            let d = deadline(Duration::from_millis(timeout));
            assert_eq!(d.as_millis(), deadline_ms);
            assert!(d < Duration::from_millis(timeout));
        }
    }
}
