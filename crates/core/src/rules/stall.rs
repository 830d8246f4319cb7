//! Stalled queues: a queue with messages and no consumer, or one whose
//! depth never went down, for `max_queued_age`.
//!
//! | evidence | unhealthy when | reason |
//! |---|---|---|
//! | a queue with messages and no consumer | it stayed so for the limit | `queue gpu: messages waiting and no worker consumed it in 5m` |
//! | a queue with messages whose depth never went down | for the limit, consumers or not known | `queue default: messages waiting, none taken in 5m` |
//!
//! While every worker's slots are taken (the saturation rule's
//! [`super::Poll::workers_full`]) what waits waits for a slot, not for a
//! stalled worker: the stall clock starts again at every such poll.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::{Found, Poll, Rule};
use crate::detail::QueueDetail;
use crate::duration;

/// What one executor's actor remembers of its queues across polls.
#[derive(Debug)]
pub struct QueuesWatch {
    /// How long a queue may hold messages that nobody takes (`ZERO`: never
    /// a finding; the histories are still kept).
    max_age: Duration,
    queues: HashMap<(String, String), QueueHistory>,
}

/// One queue's history: since when it made progress, since when nobody consumes it.
#[derive(Debug, Clone, Copy)]
struct QueueHistory {
    /// The depth last read.
    depth: u64,
    /// The last poll that found it empty or shallower than the one before
    /// (or first saw it).
    progress_at: Instant,
    /// Since when it has held messages with no consumer.
    unconsumed_since: Option<Instant>,
}

impl QueuesWatch {
    /// Updates each queue's history and says which ones stopped moving.
    ///
    /// Evidence survives a poll that could not see: a queue missing from this
    /// observation (a poll that failed, a broker that did not answer) or whose
    /// depth could not be read keeps its history as it was, and consumers not
    /// known (`None`) neither start nor stop the no-consumer clock. The rules
    /// then judge every queue on the evidence kept, seen this time or not: a
    /// fault that continues through a blind poll goes on being reported from
    /// the clock it had, never from a fresh start, and never as healthy.
    fn queue_findings(
        &mut self,
        queues: &[QueueDetail],
        max_age: Duration,
        workers_full: bool,
        now: Instant,
    ) -> Vec<(String, String)> {
        // The queues seen now in the order the check gave them, then those it
        // did not report, in a stable order.
        let mut order: Vec<(String, String)> = Vec::with_capacity(self.queues.len());
        for queue in queues {
            let key = (queue.broker.clone(), queue.name.clone());
            if !order.contains(&key) {
                order.push(key.clone());
            }
            if let Some(depth) = queue.depth {
                self.observe(key, depth, queue.consumers, workers_full, now);
            }
        }
        let mut unseen: Vec<_> = self
            .queues
            .keys()
            .filter(|key| !order.contains(key))
            .cloned()
            .collect();
        unseen.sort();
        order.extend(unseen);
        if max_age.is_zero() {
            return Vec::new();
        }
        let several_brokers = order.iter().any(|(broker, _)| *broker != order[0].0);
        order
            .iter()
            .filter_map(|key| {
                let history = self.queues.get(key)?;
                let (broker, queue) = key;
                let name = if several_brokers {
                    format!("queue {queue} on {broker}")
                } else {
                    format!("queue {queue}")
                };
                Some((queue.clone(), history.finding(&name, max_age, now)?))
            })
            .collect()
    }

    /// A sighting of one queue: its depth, and its consumers when known. While
    /// every worker's slots are taken (`workers_full`) what waits waits for a
    /// slot, not for a stalled worker: the stall clock starts again once one
    /// frees.
    fn observe(
        &mut self,
        key: (String, String),
        depth: u64,
        consumers: Option<u32>,
        workers_full: bool,
        now: Instant,
    ) {
        let history = self.queues.entry(key).or_insert(QueueHistory {
            depth,
            progress_at: now,
            unconsumed_since: None,
        });
        if depth == 0 || depth < history.depth || workers_full {
            history.progress_at = now;
        }
        history.depth = depth;
        history.unconsumed_since = match (depth, consumers) {
            (0, _) | (_, Some(1..)) => None,
            (_, Some(0)) => Some(history.unconsumed_since.unwrap_or(now)),
            // Consumers not known: the clock keeps what it had.
            (_, None) => history.unconsumed_since,
        };
    }
}

impl QueueHistory {
    /// What is wrong with the queue at `now`, on the evidence kept. Both rules
    /// are asked every time: a no-consumer clock younger than the limit does not
    /// hide a queue that has taken nothing for longer (consumers unknown for
    /// minutes, then seen to be zero).
    fn finding(&self, name: &str, max_age: Duration, now: Instant) -> Option<String> {
        let unconsumed = self
            .unconsumed_since
            .is_some_and(|since| now.saturating_duration_since(since) >= max_age);
        if unconsumed {
            return Some(format!(
                "{name}: messages waiting and no worker consumed it in {}",
                duration::age(max_age)
            ));
        }
        if self.depth > 0 && now.saturating_duration_since(self.progress_at) >= max_age {
            return Some(format!(
                "{name}: messages waiting, none taken in {}",
                duration::age(max_age)
            ));
        }
        None
    }
}

impl QueuesWatch {
    /// Queues stalled for `max_age` are a finding (`ZERO`: never).
    pub fn new(max_age: Duration) -> Self {
        Self {
            max_age,
            queues: HashMap::new(),
        }
    }
}

impl Rule for QueuesWatch {
    fn judge(&mut self, poll: &mut Poll<'_>, found: &mut Found) {
        let findings = self.queue_findings(
            &poll.detail.queues,
            self.max_age,
            poll.workers_full,
            poll.now,
        );
        // A queue an earlier rule named by its cause keeps its history here,
        // but not a second reason.
        found.findings.extend(
            findings
                .into_iter()
                .filter(|(queue, _)| !poll.explained.contains(queue))
                .map(|(_, finding)| finding),
        );
    }
}
