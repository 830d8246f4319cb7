//! Lost work: task instances Airflow holds in `queued` whose messages
//! the broker no longer has.
//!
//! Airflow's scheduler marks a task instance `queued` and sends its message to
//! the broker; from then on the message is in a queue (waiting), or delivered
//! to a worker and not yet acknowledged (prefetched, or running with Airflow's
//! `acks_late`). A broker restarted empty, or one that dropped its data, loses
//! them all, and nothing says so: the broker answers, the workers heartbeat,
//! and the task instances sit in `queued` until Airflow's
//! `[scheduler] task_queued_timeout` (10 min) requeues them.
//!
//! Each poll puts the three side by side, by count (cheap: the depths and the
//! unacknowledged count come with the check's round trip, the task instances
//! with the refresh's one statement):
//!
//! - **held by Airflow**: this executor's task instances in `queued`, on the
//!   queues the check reads, queued longer than [`SETTLE`] when the refresh
//!   read them (a message on its way is not yet in the broker);
//! - **held by the broker**: those queues' depths, and the messages every
//!   broker of the executor delivered unacknowledged
//!   ([`crate::detail::BrokerDetail::delivered`]).
//!
//! More held by Airflow than by the broker, on two polls in a row read on two
//! different refreshes, is a finding, the fewest missing on those polls:
//! `16 task instances lost on queue default: their messages are gone from
//! broker redis://broker:6379/0 (it restarted at 02:51:20 UTC); Airflow
//! requeues them after its task_queued_timeout`. The restart is named when the
//! broker's own start (its uptime) is later than the oldest of them was
//! queued. The finding holds while the count does; it ends when Airflow has
//! requeued or failed them. The queues it names are left out of the
//! queued-too-long rule, so the reason stays the cause.
//!
//! What it cannot see: a transport that does not say what it delivered (AMQP:
//! RabbitMQ keeps the unacknowledged count from its clients) leaves the rule
//! silent; so does a check that could not read the broker (its own reason
//! says why). Counted, not matched by id: the unacknowledged messages of every
//! queue count for the ones read, so the count is a lower bound.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Found, Poll, Rule};

/// How long a task instance must have been `queued` for its message to be
/// counted as sent: the scheduler sends it in the same loop that queues it.
pub const SETTLE: Duration = Duration::from_secs(5);

/// The polls in a row, on as many refreshes, that must find work missing.
pub const POLLS: usize = 2;

/// The rule's memory: the polls in a row that found work missing.
#[derive(Debug, Default)]
pub struct LostWork {
    /// The latest polls of the run, each with the refresh it read and how
    /// many task instances were missing (at most [`POLLS`] × 4 kept).
    missing: VecDeque<(DateTime<Utc>, u64)>,
    /// The finding last given, for a poll that cannot see.
    last: Option<(Vec<String>, String)>,
}

/// What one poll read, on the queues the check reads.
struct Sides {
    /// Task instances in `queued` longer than [`SETTLE`].
    held: u64,
    /// Messages waiting and delivered unacknowledged.
    brokered: u64,
    /// The queues where Airflow holds more than wait, in the check's order.
    queues: Vec<String>,
    /// The oldest of this executor's task instances in `queued`.
    oldest: Option<DateTime<Utc>>,
}

impl LostWork {
    /// Both sides, when this poll can see them.
    fn sides(poll: &Poll<'_>) -> Option<(DateTime<Utc>, Sides)> {
        let airflow = poll.airflow?;
        let settled = airflow.snapshot.queued_longer_than(airflow.index, SETTLE)?;
        let brokers = &poll.detail.brokers;
        if brokers.is_empty() {
            return None;
        }
        let mut brokered = 0;
        for broker in brokers {
            brokered += broker.delivered?;
        }
        let mut names: Vec<&str> = Vec::new();
        let mut depths: Vec<u64> = Vec::new();
        for queue in &poll.detail.queues {
            let depth = queue.depth?;
            match names.iter().position(|n| *n == queue.name) {
                Some(i) => depths[i] += depth,
                None => {
                    names.push(&queue.name);
                    depths.push(depth);
                }
            }
        }
        let mut held = 0;
        let mut queues = Vec::new();
        for (name, depth) in names.iter().zip(&depths) {
            let settled = settled
                .iter()
                .filter(|(q, _)| q == name)
                .map(|(_, n)| n)
                .sum::<u64>();
            held += settled;
            brokered += depth;
            if settled > *depth {
                queues.push((*name).to_owned());
            }
        }
        let oldest = poll
            .queued()
            .and_then(|q| q.oldest_seconds)
            .and_then(|s| i64::try_from(s).ok())
            .map(|s| airflow.snapshot.read_at - chrono::Duration::seconds(s));
        Some((
            airflow.snapshot.read_at,
            Sides {
                held,
                brokered,
                queues,
                oldest,
            },
        ))
    }

    /// The finding for `missing` task instances on `sides`' queues.
    fn finding(poll: &Poll<'_>, missing: u64, sides: &Sides) -> String {
        let what = match missing {
            1 => "1 task instance".to_owned(),
            n => format!("{n} task instances"),
        };
        let on = match sides.queues.as_slice() {
            [] => String::new(),
            [one] => format!(" on queue {one}"),
            several => format!(" on queues {}", several.join(", ")),
        };
        let brokers = &poll.detail.brokers;
        let from = match brokers.as_slice() {
            [one] => format!("broker {}", one.broker),
            _ => "the brokers".to_owned(),
        };
        let restarted = brokers
            .iter()
            .filter_map(|b| b.started_at)
            .filter(|at| sides.oldest.is_some_and(|oldest| *at > oldest))
            .max();
        match restarted {
            Some(at) => format!(
                "{what} lost{on}: their messages are gone from {from} (it restarted at {} UTC); \
                 Airflow requeues them after its task_queued_timeout",
                at.format("%H:%M:%S")
            ),
            None => format!(
                "{what} lost{on}: queued in Airflow, their messages in no queue of {from} and \
                 delivered to no worker; Airflow requeues them after its task_queued_timeout"
            ),
        }
    }
}

impl Rule for LostWork {
    fn judge(&mut self, poll: &mut Poll<'_>, found: &mut Found) {
        let Some((read_at, sides)) = Self::sides(poll) else {
            // Not seen this time: the evidence kept stands.
            if let Some((queues, finding)) = &self.last {
                poll.explained.extend(queues.iter().cloned());
                found.findings.push(finding.clone());
            }
            return;
        };
        let missing = sides.held.saturating_sub(sides.brokered);
        if missing == 0 {
            self.missing.clear();
            self.last = None;
            return;
        }
        self.missing.push_back((read_at, missing));
        while self.missing.len() > POLLS * 4 {
            self.missing.pop_front();
        }
        let refreshes = {
            let mut reads: Vec<_> = self.missing.iter().map(|(at, _)| at).collect();
            reads.dedup();
            reads.len()
        };
        if self.missing.len() < POLLS || refreshes < POLLS {
            return;
        }
        let fewest = self
            .missing
            .iter()
            .map(|(_, n)| *n)
            .min()
            .unwrap_or(missing);
        // The count said holds while the fewest missing does: a reason that
        // holds still while the fault does.
        let finding = Self::finding(poll, fewest, &sides);
        poll.explained.extend(sides.queues.iter().cloned());
        found.findings.push(finding.clone());
        self.last = Some((sides.queues, finding));
    }
}

#[cfg(test)]
mod tests;
