//! Worker saturation: every worker's task slots taken while work waits.
//!
//! Airflow's `[core] parallelism` is the executor's cap ([`crate::airflow::capacity`]);
//! the workers have caps of their own: a Celery worker runs at most its
//! concurrency (`[celery] worker_concurrency`, 16 by default) at once, an Edge
//! worker its `concurrency`. When every worker taking work runs all it can,
//! the next tasks wait in the broker (or in `queued`) however healthy each
//! part looks, and the queued-work rule speaks only once one waited
//! `max_queued_age`, naming the wait, not its cause.
//!
//! Each worker's free slots come from the check's detail: a Celery worker's
//! from its heartbeats (`active`) against its concurrency, an Edge worker's
//! from its `sysinfo`. Every worker that takes work (one heard `online`, an
//! Edge worker `idle` or `running`, or one whose state its executor does not
//! keep) with no slot free, while work waits (messages in a queue, or task
//! instances in `queued`), for `max_at_capacity`, is a finding:
//! `workers at capacity: all 32 slots taken on 2 workers for 5m, work waiting`.
//! A worker whose free slots are not known leaves the rule silent: it may be
//! the one with room. A poll that could not see the workers at all (the check
//! failed, the heartbeats unheard for a moment) neither starts nor stops the
//! clock: a saturation that continues through it keeps its finding.
//!
//! The workers' counts are checked against Airflow's: when they say they run
//! more than Airflow holds `running` or `queued` for the executor (read by the
//! capacity rule, which runs first), they outlive their tasks (a worker that
//! reconnected after a broker restart keeps reporting tasks long finished) and
//! make no verdict: the rule is silent, its clock stopped.
//!
//! While every worker is full, the rule leaves that fact to the stall rule
//! ([`super::Poll::workers_full`]), which then does not blame the queues.

use std::time::Duration;

use tokio::time::Instant;

use super::{Found, Poll, Rule};
use crate::detail::{CapacityDetail, Detail, QueuedTasks, WorkerDetail};
use crate::duration;

/// Whether `worker` takes work now, by the state its executor keeps: a Celery
/// worker heard `online` (not `gone`, `offline`, nor `unknown` while its
/// heartbeats cannot be judged yet), an Edge worker `idle`, `running` or
/// `starting` (not stopping, in maintenance or offline); one whose executor keeps no
/// state (a Celery worker only pinged) is taken at its word.
pub(super) fn takes_work(worker: &WorkerDetail) -> bool {
    matches!(
        worker.state.as_deref(),
        None | Some("online" | "idle" | "running" | "starting")
    )
}

/// The workers taking work, when every one of them has no slot free: how
/// many, and their slots where every one said how many it has.
fn all_taken(workers: &[WorkerDetail]) -> Option<(usize, Option<u64>)> {
    let mut taking = 0;
    let mut slots = Some(0);
    for worker in workers.iter().filter(|w| takes_work(w)) {
        if worker.free_concurrency != Some(0) {
            return None;
        }
        taking += 1;
        slots = slots
            .zip(worker.concurrency)
            .map(|(sum, n)| sum + u64::from(n));
    }
    (taking > 0).then_some((taking, slots))
}

/// Whether the workers' own counts of what they run outlive their tasks: more
/// taken, by the workers' word, than Airflow holds `running` or `queued` for
/// the executor (a worker reconnected after a broker restart goes on
/// reporting the tasks it had, finished long since). Such counts make no
/// verdict. `false` when Airflow's counts are not read.
fn outlived(workers: &[WorkerDetail], capacity: Option<&CapacityDetail>) -> bool {
    let Some(capacity) = capacity else {
        return false;
    };
    let said: u64 = workers
        .iter()
        .filter(|w| takes_work(w))
        .filter_map(|w| {
            w.heartbeat.as_ref().and_then(|h| h.active).or_else(|| {
                let (slots, free) = w.concurrency.zip(w.free_concurrency)?;
                Some(u64::from(slots.saturating_sub(free)))
            })
        })
        .sum();
    said > capacity.running + capacity.queued
}

/// Whether work waits: messages in a queue the check read, or task instances
/// Airflow holds in `queued` for the executor.
pub(super) fn work_waits(detail: &Detail, queued: Option<&QueuedTasks>) -> bool {
    detail.queues.iter().any(|q| q.depth.is_some_and(|d| d > 0))
        || queued.is_some_and(|q| q.count > 0)
}

/// What one executor's actor remembers: since when every worker is full.
#[derive(Debug, Default)]
pub struct SaturationWatch {
    /// How long every worker may stay full while work waits (`ZERO`: never a
    /// finding).
    max: Duration,
    full_since: Option<Instant>,
    /// The finding last given, for a poll that cannot see the workers.
    last: Option<String>,
}

impl SaturationWatch {
    /// Every worker full for `max` while work waits is a finding (`ZERO`: never).
    pub fn new(max: Duration) -> Self {
        Self {
            max,
            ..Self::default()
        }
    }

    /// Every worker taking work had no slot free while work waited, at the
    /// last poll that could see the workers.
    pub fn full(&self) -> bool {
        self.full_since.is_some()
    }

    /// The finding at `now`, if every worker taking work has had no slot free
    /// while work waits for `max` (`ZERO`: the rule is off).
    pub fn finding(
        &mut self,
        detail: Option<&Detail>,
        queued: Option<&QueuedTasks>,
        max: Duration,
        now: Instant,
    ) -> Option<String> {
        let Some((detail, workers)) = detail.and_then(|d| Some((d, d.workers.as_deref()?))) else {
            // Not seen this time: the evidence kept stands.
            return self.full_since.as_ref().and_then(|_| self.last.clone());
        };
        let Some((workers, slots)) = (work_waits(detail, queued)
            && !outlived(workers, detail.capacity.as_ref()))
        .then(|| all_taken(workers))
        .flatten() else {
            self.full_since = None;
            self.last = None;
            return None;
        };
        let since = *self.full_since.get_or_insert(now);
        if max.is_zero() || now.saturating_duration_since(since) < max {
            return None;
        }
        let on = match workers {
            1 => "1 worker".to_owned(),
            n => format!("{n} workers"),
        };
        let taken = match slots {
            Some(1) => "the one slot".to_owned(),
            Some(n) => format!("all {n} slots"),
            None => "every slot".to_owned(),
        };
        let finding = format!(
            "workers at capacity: {taken} taken on {on} for {}, work waiting",
            duration::age(max)
        );
        self.last = Some(finding.clone());
        Some(finding)
    }
}

impl Rule for SaturationWatch {
    fn judge(&mut self, poll: &mut Poll<'_>, found: &mut Found) {
        let finding = self.finding(Some(&*poll.detail), poll.queued(), self.max, poll.now);
        poll.workers_full = self.full() && !self.max.is_zero();
        found.findings.extend(finding);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detail::QueueDetail;

    fn worker(state: Option<&str>, concurrency: Option<u32>, free: Option<u32>) -> WorkerDetail {
        WorkerDetail {
            name: "celery@a".into(),
            queues: None,
            state: state.map(str::to_owned),
            concurrency,
            free_concurrency: free,
            heartbeat: None,
        }
    }

    fn detail(workers: Vec<WorkerDetail>, depth: u64) -> Detail {
        Detail {
            queues: vec![QueueDetail {
                name: "default".into(),
                broker: "redis://127.0.0.1:6379/0".into(),
                depth: Some(depth),
                consumers: None,
            }],
            workers: Some(workers),
            ..Detail::default()
        }
    }

    #[test]
    fn every_worker_full_while_work_waits_is_a_finding_after_the_limit_only() {
        let max = Duration::from_secs(30);
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut watch = SaturationWatch::default();
        let full = vec![
            worker(Some("online"), Some(16), Some(0)),
            worker(Some("online"), Some(16), Some(0)),
            // Gone and offline workers take nothing: they do not count.
            worker(Some("gone"), Some(16), Some(16)),
            worker(Some("offline"), Some(16), None),
        ];
        // Full, nothing waiting: fully used, not a fault.
        assert_eq!(
            watch.finding(Some(&detail(full.clone(), 0)), None, max, at(0)),
            None
        );
        // Full with messages waiting: the clock starts.
        assert_eq!(
            watch.finding(Some(&detail(full.clone(), 3)), None, max, at(1)),
            None
        );
        assert_eq!(
            watch.finding(Some(&detail(full.clone(), 9)), None, max, at(30)),
            None
        );
        let expected = "workers at capacity: all 32 slots taken on 2 workers for 30s, work waiting";
        assert_eq!(
            watch
                .finding(Some(&detail(full.clone(), 9)), None, max, at(31))
                .as_deref(),
            Some(expected)
        );
        // The depth ticks: the reason holds still.
        assert_eq!(
            watch
                .finding(Some(&detail(full.clone(), 2)), None, max, at(40))
                .as_deref(),
            Some(expected)
        );
        // One slot frees: the clock starts again.
        let mut freed = full.clone();
        freed[1].free_concurrency = Some(1);
        assert_eq!(
            watch.finding(Some(&detail(freed, 2)), None, max, at(41)),
            None
        );
        assert_eq!(
            watch.finding(Some(&detail(full, 2)), None, max, at(42)),
            None
        );
    }

    #[test]
    fn work_waiting_in_queued_counts_and_unknown_room_leaves_the_rule_silent() {
        let max = Duration::from_secs(5);
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let queued = QueuedTasks {
            count: 2,
            oldest_seconds: Some(7),
            queues: Vec::new(),
        };
        // An Edge worker running all it can, tasks queued, no broker depth.
        let edge = detail(vec![worker(Some("running"), Some(1), Some(0))], 0);
        let mut watch = SaturationWatch::default();
        assert_eq!(watch.finding(Some(&edge), Some(&queued), max, at(0)), None);
        assert_eq!(
            watch
                .finding(Some(&edge), Some(&queued), max, at(5))
                .as_deref(),
            Some("workers at capacity: the one slot taken on 1 worker for 5s, work waiting")
        );
        // Slots not said: "every slot".
        let unsaid = detail(vec![worker(None, None, Some(0))], 4);
        let mut watch = SaturationWatch::default();
        watch.finding(Some(&unsaid), None, max, at(0));
        assert_eq!(
            watch.finding(Some(&unsaid), None, max, at(9)).as_deref(),
            Some("workers at capacity: every slot taken on 1 worker for 5s, work waiting")
        );
        // A worker whose room is not known may be the one with room; a
        // worker still being judged (`unknown`) or in maintenance takes no
        // work and is not counted; no worker at all is not saturation (the
        // worker rules speak then); nor is a rule that is off.
        for workers in [
            vec![
                worker(Some("online"), Some(4), Some(0)),
                worker(Some("online"), Some(4), None),
            ],
            vec![worker(Some("unknown"), Some(4), Some(0))],
            vec![worker(Some("maintenance mode"), Some(4), Some(0))],
            vec![],
        ] {
            let mut watch = SaturationWatch::default();
            assert_eq!(
                watch.finding(Some(&detail(workers.clone(), 4)), None, max, at(0)),
                None
            );
            assert_eq!(
                watch.finding(Some(&detail(workers, 4)), None, max, at(60)),
                None,
                ""
            );
        }
        let mut off = SaturationWatch::default();
        assert_eq!(
            off.finding(Some(&unsaid), None, Duration::ZERO, at(0)),
            None
        );
        assert_eq!(
            off.finding(Some(&unsaid), None, Duration::ZERO, at(99)),
            None
        );
        // A poll that cannot see the workers keeps the finding it had, and
        // the clock: the fault does not read healthy in between.
        let mut watch = SaturationWatch::default();
        let full = detail(vec![worker(Some("online"), Some(2), Some(0))], 4);
        let blind = Detail {
            workers: None,
            ..full.clone()
        };
        assert_eq!(watch.finding(Some(&full), None, max, at(0)), None);
        assert_eq!(watch.finding(None, None, max, at(3)), None);
        let expected =
            Some("workers at capacity: all 2 slots taken on 1 worker for 5s, work waiting");
        assert_eq!(
            watch.finding(Some(&full), None, max, at(5)).as_deref(),
            expected
        );
        assert_eq!(watch.finding(None, None, max, at(6)).as_deref(), expected);
        assert_eq!(
            watch.finding(Some(&blind), None, max, at(7)).as_deref(),
            expected
        );
        // Seen again with room: over.
        let room = detail(vec![worker(Some("online"), Some(2), Some(1))], 4);
        assert_eq!(watch.finding(Some(&room), None, max, at(8)), None);
        assert_eq!(watch.finding(None, None, max, at(9)), None);
    }

    #[test]
    fn counts_that_outlive_their_tasks_make_no_verdict() {
        let max = Duration::from_secs(5);
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        // A worker reconnected after a broker restart: its heartbeats still
        // say 16 run, Airflow holds none running and 1 queued.
        let mut stale = detail(vec![worker(Some("online"), Some(16), Some(0))], 3);
        let airflow = |running, queued| CapacityDetail {
            slots: 32,
            parallelism: 32,
            schedulers: 1,
            running,
            queued,
            scheduled: 0,
        };
        stale.capacity = Some(airflow(0, 1));
        let mut watch = SaturationWatch::default();
        for s in 0..20 {
            assert_eq!(watch.finding(Some(&stale), None, max, at(s)), None, "{s}s");
        }
        assert!(!watch.full());
        // Airflow agrees the 16 run: a saturation, found after the limit.
        let mut full = stale.clone();
        full.capacity = Some(airflow(15, 1));
        assert_eq!(watch.finding(Some(&full), None, max, at(20)), None);
        assert!(
            watch.finding(Some(&full), None, max, at(25)).is_some(),
            "the counts Airflow confirms make the verdict"
        );
    }
}
