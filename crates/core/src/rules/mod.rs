//! Whether work flows: the rules that turn a check's evidence into a verdict,
//! one room each, for every executor kind.
//!
//! A check says whether the executor answers (a broker that accepts a
//! connection, workers that answer ping). The executor's actor then runs its
//! [`Rules`] over the check's [`Observation`] and the task instances Airflow
//! holds ([`Evidence`]): each rule is a [`Rule`], one module that holds its
//! judgement, what it remembers across polls, the default of its setting and
//! its tests; [`Rules::standard`] is the one list that registers them, in the
//! order they run and their findings are written:
//!
//! | # | rule | module | unhealthy when | reason |
//! |---|---|---|---|---|
//! | 1 | lost work | [`lost`] | more task instances `queued` in Airflow than messages waiting or delivered in the broker, on two polls and two refreshes | `16 task instances lost on queue default: their messages are gone from broker redis://broker:6379/0 (it restarted at 02:51:20 UTC); Airflow requeues them after its task_queued_timeout` |
//! | 2 | a queue nobody consumes | [`unconsumed`] | work waits on a queue (messages, or Airflow's queued task instances) that no worker taking work consumes, on two polls in a row | `queue nowhere: work waiting, no worker consumes it` |
//! | 3 | queued too long | [`queued`] | task instances in `queued` longer than `max_queued_age` | `task instances queued longer than 5m on queue default` |
//! | 4 | no worker online | [`no_worker`] | work waits and no worker takes work, on two polls in a row | `no worker online while work waits` |
//! | 5 | executor at capacity | [`capacity`] | every slot (`parallelism` × schedulers) taken while tasks wait in `scheduled`, for `max_at_capacity` | `at capacity: 2 of 2 slots taken (parallelism 2 × 1 scheduler) for 30s, tasks waiting in scheduled` |
//! | 6 | workers at capacity | [`saturation`] | every worker's slots taken while work waits, for `max_at_capacity` | `workers at capacity: all 32 slots taken on 2 workers for 5m, work waiting` |
//! | 7 | stalled queue | [`stall`] | a queue with messages and no consumer, or whose depth never went down, for `max_queued_age` | `queue gpu: messages waiting and no worker consumed it in 5m` |
//! | 8 | canary | [`canary`] | the plugin's canary failed or waited for a worker longer than `canary_max_pickup` | `canary on queue default failed` |
//!
//! A rule that runs earlier may leave a fact for the later ones in the
//! [`Poll`] (or in the detail): the queues whose work is lost (rule 1) or
//! that nobody consumes (2) are not also named as queued too long (3), stalled
//! (7); Airflow's counts of what runs (rule 5) check the
//! workers' own (rule 6), and while every worker is full (rule 6) a queue
//! whose depth does not go down waits for a slot: the stall rule (7) leaves it
//! to the saturation's finding, which names the cause. The same holds for a cause the check named itself: a rule that would
//! only repeat it in other words (no worker online, when the check already
//! says the last worker is gone) stays silent while the check's verdict is
//! `unhealthy`.
//!
//! Adding a rule touches its module here, one line in [`Rules::standard`], the
//! table above and its tests. The numbers live in this table alone: a rule's
//! module names no place in the order.
//!
//! A reason holds still while its fault continues: it names the queue and the
//! limit, never a count or an age that ticks from poll to poll (how many wait,
//! the oldest's age, the consumers), which are in the detail (`queues`,
//! `queued_tasks`). History, alerts and Airflow's copy of the entry then change
//! only when the fault does.
//!
//! Evidence survives a poll that could not see (a timeout, a broker that did
//! not answer, a depth or a consumer count that could not be read): what was
//! known stays as it was, the clocks keep running, and every queue is judged on
//! the evidence kept, so a continuing fault never reads healthy in between.
//! Unknown is neither zero nor a fresh start.
//!
//! An empty queue is never a finding (workers scaled to zero by an autoscaler
//! are fine while nothing waits). Findings combine with the check's verdict:
//! - the check says `unhealthy`: it stays so, the findings appended to its reason;
//! - the check says `healthy`: any finding makes it `unhealthy`;
//! - the check says `unknown` (no check for this executor kind, a transport not
//!   checked): with Airflow's queued task instances known, the verdict is theirs
//!   (`healthy` when nothing is overdue), so a LocalExecutor or a
//!   KubernetesExecutor gets a real verdict; without, `unknown` stays;
//! - a rule that cannot tell (the canary cannot run) makes an executor that
//!   would read `healthy` read `unknown`, saying why.
//!
//! The verdict that results is what the supervisor's damping
//! (`failures_before_unhealthy`, `successes_before_healthy`) counts, as any
//! other observation.

pub mod canary;
pub mod capacity;
pub mod lost;
pub mod no_worker;
pub mod queued;
pub mod saturation;
pub mod stall;
pub mod unconsumed;

use std::time::Duration;

use tokio::time::Instant;

use crate::airflow::queued::Snapshot;
use crate::detail::{Detail, Observation, QueuedTasks};
use crate::job::ExecutorHealth;
use crate::stats::ExecutorStats;

pub use queued::DEFAULT_MAX_QUEUED_AGE;

/// One rule: what it finds at one poll, remembering what it needs across polls.
pub trait Rule: Send {
    /// Judges one poll, adding to `found` what is wrong (and to the poll's
    /// detail what it read).
    fn judge(&mut self, poll: &mut Poll<'_>, found: &mut Found);
}

/// What the rules see at one poll.
pub struct Poll<'a> {
    /// The check's own verdict.
    pub check: &'a ExecutorHealth,
    /// The evidence: the check's, and what the rules read (a rule adds its own
    /// part, as the capacity's and the canary's).
    pub detail: &'a mut Detail,
    /// Airflow's tables as last read, and where this executor sits in them;
    /// `None` when they are not read (Overseer's own SQLite).
    pub airflow: Option<Airflow<'a>>,
    /// The executor's counters (the canary's pickups).
    pub stats: Option<&'a ExecutorStats>,
    /// When the poll is judged.
    pub now: Instant,
    /// Every worker taking work has no slot free while work waits, now (left
    /// by the saturation rule for the stall rule).
    pub workers_full: bool,
    /// The queues whose fault an earlier rule named by its cause (work lost,
    /// nobody consuming): the later rules that would name it again by its
    /// symptom (queued too long, a stalled queue)
    /// leave them out.
    pub explained: Vec<String>,
}

impl Poll<'_> {
    /// The task instances Airflow holds in `queued` for this executor, when known.
    pub fn queued(&self) -> Option<&QueuedTasks> {
        self.detail.queued_tasks.as_ref()
    }

    /// Whether work waits: messages in a queue the check read, or task
    /// instances Airflow holds in `queued` for the executor.
    pub fn work_waits(&self) -> bool {
        saturation::work_waits(self.detail, self.queued())
    }
}

/// Airflow's tables as one refresh read them, and this executor's place in them.
#[derive(Clone, Copy)]
pub struct Airflow<'a> {
    /// The latest read.
    pub snapshot: &'a Snapshot,
    /// This executor's index in the routes the read was routed by.
    pub index: usize,
    /// Whether it runs the task instances that name no executor.
    pub default: bool,
}

/// What the rules found at one poll.
#[derive(Debug, Default)]
pub struct Found {
    /// What is wrong, in the order the rules found it: any makes the
    /// executor `unhealthy`.
    pub findings: Vec<String>,
    /// Why a rule cannot tell: makes an executor that would read `healthy`
    /// read `unknown`.
    pub blind: Option<String>,
    /// A rule can judge the executor without its check (Airflow's queued task
    /// instances known): an `unknown` check then reads `healthy` when nothing
    /// was found.
    pub judged: bool,
}

/// What the rules are told of one executor: each rule's setting, its default
/// kept by the rule's own module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How long work may wait ([`queued`], [`stall`]); `ZERO` turns them off.
    pub max_queued_age: Duration,
    /// How long a queued canary may wait for a worker ([`canary`]).
    pub canary_max_pickup: Duration,
    /// Airflow's `[core] parallelism`, the slots per live scheduler ([`capacity`]).
    pub parallelism: u32,
    /// How long every slot may stay taken while work waits ([`capacity`],
    /// [`saturation`]).
    pub max_at_capacity: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_queued_age: queued::DEFAULT_MAX_QUEUED_AGE,
            canary_max_pickup: canary::DEFAULT_MAX_PICKUP,
            parallelism: capacity::DEFAULT_PARALLELISM,
            max_at_capacity: capacity::DEFAULT_MAX_AT_CAPACITY,
        }
    }
}

/// An executor's rules, in the order they run, with what each remembers.
pub struct Rules {
    /// How long work may wait: the task instances Airflow holds queued are
    /// counted overdue against it for the evidence.
    max_queued_age: Duration,
    rules: Vec<Box<dyn Rule>>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("max_queued_age", &self.max_queued_age)
            .field("rules", &self.rules.len())
            .finish()
    }
}

impl Rules {
    /// Every rule, with the executor's settings: the one registration.
    pub fn standard(settings: &Settings) -> Self {
        let max_queued_age = settings.max_queued_age;
        Self {
            max_queued_age,
            rules: vec![
                Box::new(lost::LostWork::default()),
                Box::new(unconsumed::Unconsumed::default()),
                Box::new(queued::QueuedTooLong::new(max_queued_age)),
                Box::new(no_worker::NoWorkerOnline::default()),
                Box::new(capacity::CapacityWatch::new(
                    settings.parallelism,
                    settings.max_at_capacity,
                )),
                Box::new(saturation::SaturationWatch::new(settings.max_at_capacity)),
                Box::new(stall::QueuesWatch::new(max_queued_age)),
                Box::new(canary::Canary::new(settings.canary_max_pickup)),
            ],
        }
    }

    /// The rules on queued work and queues only (3 and 7), over `max_age`.
    pub fn flow(max_age: Duration) -> Self {
        Self {
            max_queued_age: max_age,
            rules: vec![
                Box::new(queued::QueuedTooLong::new(max_age)),
                Box::new(stall::QueuesWatch::new(max_age)),
            ],
        }
    }

    /// Judges a check's observation at `now`, with Airflow's tables as last
    /// read (`None`: not read).
    pub fn judge(
        &mut self,
        observation: Observation,
        airflow: Option<Airflow<'_>>,
        stats: Option<&ExecutorStats>,
        now: Instant,
    ) -> Observation {
        let queued = airflow.map(|a| a.snapshot.for_executor(a.index, self.max_queued_age));
        self.judge_with(observation, queued, airflow, stats, now)
    }

    /// [`Self::judge`], with the task instances Airflow holds queued for this
    /// executor given (`None`: not known).
    pub fn judge_with(
        &mut self,
        observation: Observation,
        queued: Option<QueuedTasks>,
        airflow: Option<Airflow<'_>>,
        stats: Option<&ExecutorStats>,
        now: Instant,
    ) -> Observation {
        let Observation {
            health,
            detail,
            note,
            pending,
            host_busy,
        } = observation;
        let mut detail = detail.unwrap_or_default();
        detail.queued_tasks = queued;
        let mut found = Found::default();
        let mut poll = Poll {
            check: &health,
            detail: &mut detail,
            airflow,
            stats,
            now,
            workers_full: false,
            explained: Vec::new(),
        };
        for rule in &mut self.rules {
            rule.judge(&mut poll, &mut found);
        }
        let Found {
            findings,
            blind,
            judged,
        } = found;
        let health = match health {
            ExecutorHealth::Unhealthy { reason } if !findings.is_empty() => {
                ExecutorHealth::unhealthy(reason.join("; ", &findings.join("; ")))
            }
            unhealthy @ ExecutorHealth::Unhealthy { .. } => unhealthy,
            _ if !findings.is_empty() => ExecutorHealth::unhealthy(findings.join("; ")),
            ExecutorHealth::Unknown { .. } if judged => ExecutorHealth::Healthy,
            other => other,
        };
        let health = match (health, blind) {
            (ExecutorHealth::Healthy, Some(why)) => ExecutorHealth::unknown(why),
            (health, _) => health,
        };
        let note = note.filter(|_| health == ExecutorHealth::Healthy);
        // A finding is a verdict of its own: it does not wait.
        let pending = pending && !matches!(health, ExecutorHealth::Unhealthy { .. });
        // The host kept the check from judging, and nothing else judged.
        let host_busy = host_busy && matches!(health, ExecutorHealth::Unknown { .. });
        Observation {
            health,
            detail: (!detail.is_empty()).then_some(detail),
            note,
            pending,
            host_busy,
        }
    }
}

#[cfg(test)]
mod tests;
