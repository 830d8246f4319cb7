//! The verdict over a failover list, from what its brokers and workers
//! answered. When the evidence disagrees, the stronger names the cause: the
//! rules below are tried in order, and the first that holds gives the verdict.
//!
//! | # | evidence | verdict | reason names |
//! |---|---|---|---|
//! | 1 | no broker checked at all (TLS, a transport with no check yet) | `unknown` | why |
//! | 2 | no broker answered its check (refused, closed, no reply to a command) | `unhealthy` | every broker and what it did |
//! | 3 | no ping counted, heartbeats heard: fewer alive than `min_workers` | `unhealthy` | the workers gone or offline |
//! | 4 | a worker gone by its own heartbeats (two missed, no `worker-offline`) | `unhealthy` | the worker and its last heartbeat |
//! | 5 | a ping counted: fewer answered than `min_workers` | `unhealthy` | the count, and only the brokers that failed the ping |
//! | 6 | a ping counted: a worker answers but consumes no queue | `unhealthy` | the worker |
//! | 7 | `min_workers` set, no ping counted, heartbeats not heard | `unknown` | why the workers cannot be counted |
//! | 8 | else | `healthy` | notes: failover brokers not answering, heartbeats not watched |
//!
//! Rule 4 comes before the ping's: a worker whose heartbeats stopped is the
//! cause, whatever a ping says meanwhile. It holds for [`GONE_HOLD`] after
//! the last heartbeat, and for as long as no worker is online (the last
//! worker's death is never forgiven by time alone); a worker that said
//! `worker-offline` stopped cleanly (a scale-down) and is no fault.
//!
//! A ping is *counted* when it went out on a broker, or a broker failed it
//! (refused, closed, stopped answering: [`crate::ping::Unsent::Failed`]). One
//! this host did not get set up and out within its window
//! ([`crate::ping::Unsent::Late`]), on a broker that had just answered, asked
//! no worker anything: on a loaded host that is the host's slowness as often
//! as the broker's, so it blames neither. The last counted ping then stands
//! for [`PING_HOLD`] ([`HeldPing`]): a continuing fault keeps its verdict and
//! its reason, and a healthy worker is not failed for the host's load. Past
//! that, the ping is not counted (rules 3 and 7).
//!
//! Heartbeats that cannot be heard now (the subscription refused, down, or not
//! yet warm) count nothing: see [`workers_not_counted`].
//!
//! A reason names what failed and holds still while the fault does: it carries
//! no age or count that ticks from poll to poll (the last heartbeat's time, not
//! how long ago it was); those are in the detail.
//!
//! Every reason and note goes through [`overseer_core::reason`]: a server's
//! error text is one line, a failover list of many brokers names a few and
//! counts the rest (`; and 7 more`), and the whole is at most 240 characters.
//! The brokers' reasons arrive with their passwords already masked.

use std::time::Duration;

use overseer_core::{ExecutorHealth, Reason, duration, reason};
use tokio::time::Instant;

use crate::detail::{BrokerReport, BrokerStatus, WorkerPing};
use crate::events::{State, Worker};

/// How long a worker gone without a goodbye keeps the verdict `unhealthy`
/// once another worker is online: as long as Airflow's own
/// `[scheduler] task_instance_heartbeat_timeout` (300 s by default), after
/// which the scheduler has noticed the tasks the dead worker held and failed
/// or retried them. With no worker online it holds for as long as that lasts.
pub const GONE_HOLD: Duration = Duration::from_secs(300);

/// How long the last ping that went out stands for pings that did not (a
/// loaded host that could not set one up within its window): long enough to
/// ride out a busy spell, short enough that a ping that never goes out soon
/// says so. A worker gone meanwhile is still found by its heartbeats.
pub(crate) const PING_HOLD: Duration = Duration::from_secs(30);

/// The last ping that said something of the workers, across polls.
#[derive(Debug, Default)]
pub(crate) struct HeldPing {
    last: Option<(Instant, WorkerPing)>,
}

impl HeldPing {
    /// The ping the verdict counts at `now`: this poll's when it says
    /// something of the workers; else, for [`PING_HOLD`], the last one that
    /// did, so that a ping a loaded host did not get out in time neither
    /// blames the broker nor turns a continuing fault healthy; past that, this
    /// poll's, which the verdict cannot count by.
    pub(crate) fn judged(&mut self, fresh: &WorkerPing, now: Instant) -> WorkerPing {
        if fresh.conclusive() {
            self.last = Some((now, fresh.clone()));
            return fresh.clone();
        }
        match &self.last {
            Some((at, held)) if now.saturating_duration_since(*at) < PING_HOLD => held.clone(),
            _ => fresh.clone(),
        }
    }
}

/// What is known of the workers at a poll, besides the brokers.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Workers<'a> {
    /// The workers' answers to the ping, with `worker_ping`.
    pub(crate) ping: Option<&'a WorkerPing>,
    /// The workers by their heartbeats, once a subscription has listened long
    /// enough to say.
    pub(crate) heard: Option<&'a [Worker]>,
    /// Why the heartbeats cannot be counted now (no subscription is up, or
    /// none has listened long enough yet), with `worker_events`.
    pub(crate) unheard: Option<&'a str>,
    /// The heartbeats are unheard for a moment that ends by itself (the
    /// subscription warming up, or reconnecting after the broker came back),
    /// not for good (refused, no pushes): not worth a note beside a healthy
    /// verdict, which would change its reason twice for nothing.
    pub(crate) passing: bool,
}

/// The verdict and its reason (for a healthy verdict, its note), each made a
/// [`Reason`] once. `window` is how long the ping waited, for the reason.
pub(crate) fn verdict(
    brokers: &[BrokerReport],
    workers: Workers<'_>,
    window: Duration,
    min_workers: u32,
) -> (ExecutorHealth, Option<Reason>) {
    let (health, reason) = judge(brokers, workers, window, min_workers);
    let reason = match health.cause() {
        Some(cause) => Some(cause.clone()),
        None => reason.map(Reason::from),
    };
    (health, reason)
}

/// The reason when `min_workers` cannot be judged: no ping, and the workers'
/// heartbeats cannot be heard (`why`).
pub(crate) fn workers_not_counted(why: &str) -> String {
    format!("workers not counted: {why}; min_workers needs worker_ping = true there")
}

/// The rules of the module's doc, on the brokers' and workers' answers.
fn judge(
    brokers: &[BrokerReport],
    workers: Workers<'_>,
    window: Duration,
    min_workers: u32,
) -> (ExecutorHealth, Option<String>) {
    let failed: Vec<&str> = brokers
        .iter()
        .filter_map(|b| match &b.status {
            BrokerStatus::Failed(reason) => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    let answered = brokers.iter().any(|b| b.status == BrokerStatus::Answered);
    if !answered && failed.is_empty() {
        let unchecked: Vec<&str> = brokers
            .iter()
            .filter_map(|b| match &b.status {
                BrokerStatus::Unchecked(why) => Some(why.as_str()),
                _ => None,
            })
            .collect();
        let why = reason::list_with(unchecked, "; ");
        return (ExecutorHealth::unknown(why.clone()), Some(why));
    }
    if !answered {
        let why = reason::list_with(&failed, "; ");
        return (ExecutorHealth::unhealthy(why.clone()), Some(why));
    }
    let unhealthy = |reason: String| (ExecutorHealth::unhealthy(reason.clone()), Some(reason));
    // Heartbeats count only while they are listened for.
    let listened = workers.heard.filter(|_| workers.unheard.is_none());
    // A ping counts only where it went out, or where a broker failed it: one
    // this host did not get out in time asked no worker anything.
    let ping = workers.ping.filter(|p| p.conclusive());
    if ping.is_none()
        && let Some(heard) = listened
        && let Some(reason) = too_few_alive(heard, min_workers)
    {
        return unhealthy(reason);
    }
    if let Some(heard) = workers.heard
        && let Some(reason) = gone(heard)
    {
        return unhealthy(reason);
    }
    if let Some(ping) = ping {
        let count = ping.answered.len();
        if count < min_workers as usize {
            let mut reason = format!(
                "{count} of at least {min_workers} workers answered ping within {}",
                duration::short(window)
            );
            // The brokers that failed the ping share the blame; a broker whose
            // ping was only late does not.
            if !ping.failed.is_empty() {
                reason = format!("{reason} ({})", reason::list_with(&ping.failed, "; "));
            }
            return unhealthy(reason);
        }
        // A worker that answers but consumes no queue at all does no work, and
        // no task need wait for that to show (apache/airflow#63580: after a
        // Redis restart, workers answer ping with an empty `active_queues`).
        let idle: Vec<String> = ping
            .answered
            .iter()
            .filter(|w| w.queues.as_ref().is_some_and(Vec::is_empty))
            .map(|w| reason::name(&w.name))
            .collect();
        if !idle.is_empty() {
            let (names, verb) = match idle.len() {
                1 => (idle[0].clone(), "answers but consumes"),
                _ => (reason::list(&idle), "answer but consume"),
            };
            return unhealthy(format!("{names} {verb} no queue"));
        }
    }
    if min_workers > 0 && ping.is_none() {
        let why = match (workers.ping, workers.unheard) {
            // The ping did not go out and the heartbeats cannot count them.
            (Some(late), _) if listened.is_none() => Some(format!(
                "workers not counted: the ping did not go out in time ({})",
                reason::list_with(&late.errors, "; ")
            )),
            (None, Some(why)) => Some(workers_not_counted(why)),
            _ => None,
        };
        if let Some(why) = why {
            return (ExecutorHealth::unknown(why.clone()), Some(why));
        }
    }
    let mut notes = Vec::new();
    if !failed.is_empty() {
        notes.push(format!(
            "healthy through failover; not answering: {}",
            reason::list_with(&failed, "; ")
        ));
    }
    if let Some(why) = workers.unheard.filter(|_| !workers.passing) {
        notes.push(format!("workers not watched: {why}"));
    }
    (
        ExecutorHealth::Healthy,
        (!notes.is_empty()).then(|| notes.join("; ")),
    )
}

/// The reason when fewer than `min_workers` workers are alive by their
/// heartbeats, naming those that are not.
fn too_few_alive(heard: &[Worker], min_workers: u32) -> Option<String> {
    let alive = heard.iter().filter(|w| w.state == State::Online).count();
    if alive >= min_workers as usize {
        return None;
    }
    let gone: Vec<&Worker> = heard.iter().filter(|w| w.state == State::Gone).collect();
    let offline: Vec<String> = heard
        .iter()
        .filter(|w| w.state == State::Offline)
        .map(|w| reason::name(&w.name))
        .collect();
    let mut why = Vec::new();
    why.extend(no_heartbeat(&gone));
    match offline.len() {
        0 => {}
        1 => why.push(format!("{} went offline", offline[0])),
        _ => why.push(format!("{} went offline", reason::list(&offline))),
    }
    let mut reason = format!("{alive} of at least {min_workers} workers alive");
    if why.is_empty() {
        reason.push_str(" (none sends heartbeats)");
    } else {
        reason = format!("{reason}: {}", why.join("; "));
    }
    Some(reason)
}

/// The reason when workers are gone without a goodbye: those gone less than
/// [`GONE_HOLD`] ago, or every one gone while none is online. Only workers
/// heard more than once or that announced themselves (`worker-online`): a
/// name one heartbeat made up and never heard again is what a flood of forged
/// events is made of (a worker already running when Overseer started, killed
/// within its first heartbeat interval, is the rare other case).
fn gone(heard: &[Worker]) -> Option<String> {
    let none_online = !heard.iter().any(|w| w.state == State::Online);
    let gone: Vec<&Worker> = heard
        .iter()
        .filter(|w| {
            w.state == State::Gone && w.confirmed && (none_online || w.silent_for < GONE_HOLD)
        })
        .collect();
    no_heartbeat(&gone)
}

/// `celery@w1 sent no heartbeat since 2026-12-02 06:03:53 UTC (one every 2s)`:
/// the time of the last heartbeat, which holds still, not how long ago. Of
/// several workers, the latest of their last heartbeats (none sent one since).
fn no_heartbeat(gone: &[&Worker]) -> Option<String> {
    let latest = gone.iter().max_by_key(|w| w.heartbeat.last)?;
    let since = latest.heartbeat.last.format("%Y-%m-%d %H:%M:%S UTC");
    Some(match gone {
        [only] => format!(
            "{} sent no heartbeat since {since} (one every {})",
            reason::name(&only.name),
            duration::short(only.freq)
        ),
        _ => format!(
            "{} sent no heartbeat since {since}",
            reason::list(gone.iter().map(|w| reason::name(&w.name)))
        ),
    })
}

#[cfg(test)]
mod tests;
