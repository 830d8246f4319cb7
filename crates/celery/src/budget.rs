//! How one check splits the supervisor's `poll_timeout` among its waits.
//!
//! # Who bounds what
//! The supervisor gives each poll `poll_timeout` (5 s by default) and reports
//! `no reply within 5s` itself past it. The check answers first, with the real
//! reason, because every network wait in it is bounded by a deadline derived here:
//!
//! ```text
//! poll_timeout ─┬─ CHECK_SHARE (90 %) ─┬─ brokers: connect, PING/ROLE/LLEN or passive declares
//!               │                      └─ ping window: min(PING_WINDOW = 1 s, a third), if worker_ping
//!               └─ the margin (10 %) ──┬─ the ping's cleanup: min(CLEANUP_WAIT = 250 ms, half of it)
//!                                      └─ the rest: for the verdict to reach the supervisor
//! ```
//!
//! With the defaults: brokers get 3.5 s, the ping 1 s, its cleanup 0.25 s, and
//! 0.25 s is left over (4.5 s and 0.5 s without the ping).
//! Brokers of a failover list are probed at the same time, each within the same
//! deadline; the workers are pinged on every broker that answered.

use std::time::Duration;

use crate::ping::{CLEANUP_WAIT, PING_WINDOW};

/// The share of `poll_timeout` a check spends at most; the rest is the margin
/// for the verdict to travel back before the supervisor's own timeout fires.
const CHECK_SHARE: f64 = 0.9;

/// How one check splits the poll's timeout (see the module's picture).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budgets {
    /// For the brokers: connect, `PING`/`ROLE`/`LLEN`, passive declares.
    pub(crate) brokers: Duration,
    /// For the workers to answer the ping (zero when `worker_ping` is off).
    pub(crate) window: Duration,
    /// For the ping's cleanup, after the window, inside the margin.
    pub(crate) cleanup: Duration,
}

impl Budgets {
    /// The split of `poll_timeout`, with a ping window when `worker_ping` is on.
    pub(crate) fn new(poll_timeout: Duration, worker_ping: bool) -> Self {
        let total = poll_timeout.mul_f64(CHECK_SHARE);
        // The ping's cleanup runs in the margin, and takes at most half of it.
        let cleanup = CLEANUP_WAIT.min((poll_timeout - total) / 2);
        if !worker_ping {
            return Self {
                brokers: total,
                window: Duration::ZERO,
                cleanup,
            };
        }
        let window = PING_WINDOW.min(total / 3);
        Self {
            brokers: total - window,
            window,
            cleanup,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budgets_fit_inside_the_poll_timeout() {
        for (timeout, ping, brokers, window, cleanup) in [
            (5_000, false, 4_500, 0, 250),
            (5_000, true, 3_500, 1_000, 250),
            (1_500, true, 900, 450, 75),
        ] {
            let b = Budgets::new(Duration::from_millis(timeout), ping);
            assert_eq!(
                (
                    b.brokers.as_millis(),
                    b.window.as_millis(),
                    b.cleanup.as_millis()
                ),
                (brokers, window, cleanup),
                "{timeout} {ping}"
            );
            assert!(b.brokers + b.window + b.cleanup < Duration::from_millis(timeout));
        }
    }
}
