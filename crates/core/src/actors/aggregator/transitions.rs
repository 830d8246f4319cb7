//! The transitions queue: a new verdict whose state differs from the one the
//! history holds for its row is queued here, and the next flush writes the
//! queue in the verdict's own transaction. The queue outlives an aggregator
//! that stops or panics ([`UnwrittenTransitions`]).
//!
//! The history's latest transitions are read after each full read
//! ([`HistoryRead`] is that read's phase): they give the state the history
//! holds for this session's rows, and other rows' `since` and `previous`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

use crate::airflow::cost::Span;
use crate::history::{self, RowKey, Transition};
use crate::report::ExecutorHealthKind;

use super::Aggregator;

/// The transitions queued for the history and not yet written, oldest first,
/// each with its sequence number. Made by the actors' thread and handed to
/// every aggregator it starts, as the report's channel is: so it outlives an
/// aggregator that stops or panics, and the one started in its place writes
/// what it had queued. Only the aggregator running uses it.
#[derive(Debug, Default)]
pub struct UnwrittenTransitions(Mutex<TransitionQueue>);

#[derive(Debug, Default)]
pub(super) struct TransitionQueue {
    /// Oldest first.
    pub(super) queued: VecDeque<Queued>,
    /// The sequence number of the next transition queued.
    next: u64,
}

/// One transition waiting for the database.
#[derive(Debug)]
pub(super) struct Queued {
    /// Its sequence number: the order it was queued in.
    pub(super) seq: u64,
    pub(super) transition: Transition,
    /// The `unhealthy` span it ends, whose cost the flush counts first.
    pub(super) span: Option<Span>,
}

impl UnwrittenTransitions {
    /// A queue holding `transitions` already, in their order: those a run
    /// makes at its start, before any aggregator runs (the time no Overseer
    /// supervised its rows: [`history::unsupervised_since_earlier_runs`]).
    pub fn holding(transitions: impl IntoIterator<Item = Transition>) -> Self {
        let queued: VecDeque<Queued> = (0..)
            .zip(transitions)
            .map(|(seq, transition)| Queued {
                seq,
                transition,
                span: None,
            })
            .collect();
        let next = queued.len() as u64;
        Self(Mutex::new(TransitionQueue { queued, next }))
    }

    /// The queue. An aggregator that panicked never held the lock then (no
    /// code that may panic runs under it), so a poisoned lock is taken as is.
    pub(super) fn lock(&self) -> MutexGuard<'_, TransitionQueue> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The read of the history's latest transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HistoryRead {
    /// None runs; the last one, if any, succeeded.
    Idle,
    /// None runs; the last one failed (logged once, until one succeeds).
    Failed,
    /// One runs; `after_failure`: the one before it failed.
    Running { after_failure: bool },
}

impl HistoryRead {
    /// Starts a read unless one runs. True when it started.
    pub(super) fn start(&mut self) -> bool {
        let after_failure = match *self {
            Self::Running { .. } => return false,
            Self::Idle => false,
            Self::Failed => true,
        };
        *self = Self::Running { after_failure };
        true
    }

    /// The read succeeded. True when it ends a run of failures (log it).
    pub(super) fn succeeded(&mut self) -> bool {
        let was_failing = matches!(
            *self,
            Self::Failed
                | Self::Running {
                    after_failure: true
                }
        );
        *self = Self::Idle;
        was_failing
    }

    /// The read failed. True when it is the first of a run (log it).
    pub(super) fn failed(&mut self) -> bool {
        let first = matches!(
            *self,
            Self::Idle
                | Self::Running {
                    after_failure: false
                }
        );
        *self = Self::Failed;
        first
    }
}

impl Aggregator {
    /// Queues a transition when the row's verdict, made by this aggregator,
    /// holds another state than the one the history knows, or gives a new
    /// cause while it stays `unhealthy`.
    pub(super) fn note_state(&mut self, index: usize) {
        let hostname = self.session.hostname.clone();
        let own = &mut self.own[index];
        let (Some(before), Some(at)) = (own.in_history, own.made_at) else {
            return;
        };
        let health = own.health();
        let current = ExecutorHealthKind::of(health);
        let reason = health.reason().map(str::to_owned);
        // A new cause while the row stays `unhealthy` is kept in the history
        // as a row of its own (from `unhealthy` to `unhealthy`), which begins
        // no span: `since`, `previous` and the cost stay the span's.
        let new_cause = current == ExecutorHealthKind::Unhealthy
            && reason.is_some()
            && own.reason_in_history != reason;
        if current == before && !new_cause {
            return;
        }
        own.reason_in_history.clone_from(&reason);
        let transition = Transition {
            executor: own.row.executor_class.clone().unwrap_or_default(),
            instance: own.row.executor_instance.clone(),
            hostname,
            from: before,
            to: current,
            reason,
            at,
            cost: None,
        };
        if current == before {
            self.queue(transition, None);
            return;
        }
        // The end of an `unhealthy` span whose start is known: the flush
        // counts what it cost.
        let span = (before == ExecutorHealthKind::Unhealthy)
            .then_some(own.since)
            .flatten()
            .map(|from| Span {
                executor: index,
                from,
            });
        own.in_history = Some(current);
        own.previous = Some(before);
        own.since = Some(at);
        self.queue(transition, span);
    }

    /// Queues a transition for the next flush; past [`history::MAX_PENDING`]
    /// the oldest is dropped.
    fn queue(&mut self, transition: Transition, span: Option<Span>) {
        let mut unwritten = self.unwritten.lock();
        if unwritten.queued.len() >= history::MAX_PENDING {
            unwritten.queued.pop_front();
            let dropped = self
                .stats
                .transitions_dropped
                .fetch_add(1, Ordering::Relaxed);
            if dropped == 0 {
                tracing::warn!(
                    max = history::MAX_PENDING,
                    "too many transitions wait for the database: dropping the oldest"
                );
            }
        }
        let seq = unwritten.next;
        unwritten.queued.push_back(Queued {
            seq,
            transition,
            span,
        });
        unwritten.next += 1;
        self.stats
            .transitions_recorded
            .fetch_add(1, Ordering::Relaxed);
        self.stats
            .transitions_pending
            .store(unwritten.queued.len() as u64, Ordering::Relaxed);
    }

    /// Forgets the transitions a flush wrote: every one up to the sequence
    /// number `last`.
    pub(super) fn written_up_to(&mut self, last: Option<u64>, written: usize) {
        let mut unwritten = self.unwritten.lock();
        if let Some(last) = last {
            unwritten.queued.retain(|queued| queued.seq > last);
        }
        let left = unwritten.queued.len();
        drop(unwritten);
        self.stats
            .transitions_written
            .fetch_add(written as u64, Ordering::Relaxed);
        self.stats
            .transitions_pending
            .store(left as u64, Ordering::Relaxed);
    }

    /// Takes in the latest transitions a full read found: other sessions'
    /// rows' `since`, and, the first time, the state the history holds for
    /// each of this session's rows.
    pub(super) fn take_history(&mut self, latest: Vec<Transition>) {
        let mut latest: HashMap<RowKey, Transition> =
            latest.into_iter().map(|t| (t.key(), t)).collect();
        // Transitions an aggregator before this one queued and could not write
        // are later than any the table holds: the rows are in their states.
        // (A new reason alone begins no state: passed over, as the read does.)
        for queued in &self.unwritten.lock().queued {
            let t = &queued.transition;
            if t.from != t.to {
                latest.insert(t.key(), t.clone());
            }
        }
        self.others_since = self
            .others
            .iter()
            .filter_map(|(id, row)| {
                let key = (
                    row.hostname.clone().unwrap_or_default(),
                    row.executor_class.clone().unwrap_or_default(),
                    row.executor_instance.clone(),
                );
                latest.get(&key).map(|t| (*id, (t.to, t.from, t.at)))
            })
            .collect();
        for index in 0..self.own.len() {
            let own = &mut self.own[index];
            if own.in_history.is_some() {
                continue;
            }
            match latest.get(&own.key()) {
                Some(t) => {
                    own.in_history = Some(t.to);
                    own.since = Some(t.at);
                    own.previous = Some(t.from);
                    own.reason_in_history = t.reason.clone();
                }
                // No transition yet: the row holds the state it was registered with.
                None => own.in_history = Some(ExecutorHealthKind::Unknown),
            }
            self.note_state(index);
        }
    }
}
