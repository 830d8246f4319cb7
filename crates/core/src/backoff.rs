//! Exponential back-off: the one copy of "wait this long, then twice as long
//! each time, up to a ceiling; start again from the first after a success".
//! Used by the aggregator's outages, an executor's restarts, the core actors'
//! restarts and the delivery of alerts.

use std::time::Duration;

/// The waits between attempts of one kind of work that keeps failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first wait, and the one after [`Backoff::reset`].
    first: Duration,
    /// The longest wait.
    ceiling: Duration,
    /// The wait the next failure brings.
    next: Duration,
}

impl Backoff {
    /// Waits of `first`, then twice as long each time, up to `ceiling`.
    pub const fn new(first: Duration, ceiling: Duration) -> Self {
        Self {
            first,
            ceiling,
            next: first,
        }
    }

    /// The wait the next failure brings, without counting it.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// Counts a failure: the wait before the next attempt. The one after it is
    /// twice as long, up to the ceiling.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (delay * 2).min(self.ceiling);
        delay
    }

    /// A success: the next failure waits the first wait again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_ceiling_and_starts_again_after_a_reset() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let waits: Vec<u64> = (0..5).map(|_| backoff.next_delay().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 5, 5]);
        assert_eq!(backoff.peek(), Duration::from_secs(5));
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_secs(1));
    }
}
