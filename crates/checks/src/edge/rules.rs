//! The rules of the table in [`super`]'s doc: the verdict, its reason and the
//! detail from what one poll read ([`judge`]), by pure functions.
//!
//! Worker and queue names come from rows any client can write: in a reason
//! each is cut to 40 characters, a list names a few and counts the rest
//! (`and 8 more`), and the whole is one line of at most 240 characters
//! ([`overseer_core::reason`]), whatever the names hold.
//!
//! When the verdict is `unhealthy`, its reason also names the workers that
//! are `unknown` (no heartbeat for 5 heartbeats) while others are connected,
//! and those whose `sysinfo` status is a warning or worse
//! (`edge worker w3 reports warning: Healthy but version mismatch`). A
//! `healthy` verdict carries no reason in Overseer's model; the detail shows
//! every worker's state then.
//!
//! # Detail
//! - `queues`: every configured queue (`executors[].queues`), every queue
//!   where jobs wait and every queue a connected worker names; `depth` is the
//!   jobs waiting there (`edge_job.state = 'queued'`), `consumers` the
//!   workers taking jobs from it, `broker` the instance.
//! - `workers`: every registered worker, connected or not, with its queues
//!   (`null`: all), its `state`, its `concurrency` and `free_concurrency` (from
//!   `sysinfo`).

use overseer_core::detail::{QueueDetail, WorkerDetail};
use overseer_core::reason;
use overseer_core::{Detail, ExecutorHealth, Observation};

use super::{EdgeWorker, Fleet};

/// Python's `logging.WARNING`: a worker reporting this status or above is named.
const WARNING: i64 = 30;
/// The verdict and its detail from what one poll read: every rule of the
/// table in [`super`]'s doc, and nothing else.
pub fn judge(fleet: &Fleet, configured: &[String], instance: &str) -> Observation {
    let workers = &fleet.workers;
    let connected: Vec<&EdgeWorker> = workers.iter().filter(|w| w.connected()).collect();
    let waiting_total: u64 = fleet.waiting.values().sum();
    let waiting_list = || {
        let per_queue: Vec<String> = fleet
            .waiting
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(q, n)| format!("{}: {n}", reason::name(q)))
            .collect();
        reason::list(per_queue)
    };
    let mut findings = Vec::new();
    if connected.is_empty() {
        if !workers.is_empty() {
            let states = reason::list(workers.iter().map(named_state));
            let mut finding = format!("every edge worker is unknown or offline ({states})");
            if waiting_total > 0 {
                finding += &format!(" while {} ({})", wait(waiting_total), waiting_list());
            }
            findings.push(finding);
        } else if waiting_total > 0 {
            findings.push(format!(
                "no edge worker is connected while {} ({})",
                wait(waiting_total),
                waiting_list()
            ));
        }
    } else {
        for (queue, &count) in fleet.waiting.iter().filter(|(_, n)| **n > 0) {
            let serving: Vec<&&EdgeWorker> = connected.iter().filter(|w| w.serves(queue)).collect();
            if serving.iter().any(|w| w.takes_jobs()) {
                continue;
            }
            let waiting = format!("queue {}: {} waiting", reason::name(queue), jobs(count));
            if serving.is_empty() {
                findings.push(format!("{waiting} and no connected edge worker serves it"));
            } else {
                let paused = reason::list(serving.iter().map(|w| named_state(w)));
                findings.push(format!(
                    "{waiting} and its edge workers take no jobs ({paused})"
                ));
            }
        }
    }
    // Workers gone quiet, or reporting a warning, are named whatever the
    // verdict: in its reason when unhealthy, in its note when healthy.
    let mut concerns = Vec::new();
    if !connected.is_empty() {
        let lost: Vec<&EdgeWorker> = workers.iter().filter(|w| w.state == "unknown").collect();
        if !lost.is_empty() {
            concerns.push(format!(
                "no heartbeat for 5 heartbeats from {}",
                reason::list(
                    lost.iter()
                        .map(|w| format!("edge worker {}", reason::name(&w.name)))
                )
            ));
        }
    }
    for worker in workers
        .iter()
        .filter(|w| w.status.is_some_and(|s| s >= WARNING))
    {
        let level = level_name(worker.status.unwrap_or_default());
        let name = reason::name(&worker.name);
        concerns.push(match &worker.status_text {
            Some(text) => format!(
                "edge worker {name} reports {level}: {}",
                reason::clip(text, reason::MAX_ITEM_CHARS)
            ),
            None => format!("edge worker {name} reports {level}"),
        });
    }
    let detail = detail(fleet, configured, instance);
    let observation = if findings.is_empty() {
        let observation = Observation::new(ExecutorHealth::Healthy, detail);
        match concerns.is_empty() {
            true => observation,
            false => observation.with_note(concerns.join("; ")),
        }
    } else {
        findings.extend(concerns);
        Observation::new(ExecutorHealth::unhealthy(findings.join("; ")), detail)
    };
    // Names come from rows any client can write: each was cut above so the
    // reason keeps its shape; the whole is made one bounded line as a
    // [`overseer_core::Reason`].
    observation
}

/// `w1: offline`: a worker and its state, each cut as a name.
fn named_state(worker: &EdgeWorker) -> String {
    format!(
        "{}: {}",
        reason::name(&worker.name),
        reason::name(&worker.state)
    )
}

/// The detail of the module's doc: queues with their waiting jobs and takers,
/// every worker with its state.
fn detail(fleet: &Fleet, configured: &[String], instance: &str) -> Detail {
    let mut names: Vec<&str> = configured.iter().map(String::as_str).collect();
    names.extend(fleet.waiting.keys().map(String::as_str));
    names.extend(
        fleet
            .workers
            .iter()
            .filter(|w| w.connected())
            .flat_map(|w| w.queues.iter().flatten().map(String::as_str)),
    );
    names.sort_unstable();
    names.dedup();
    let queues = names
        .into_iter()
        .map(|name| QueueDetail {
            name: name.to_owned(),
            broker: instance.to_owned(),
            depth: Some(fleet.waiting.get(name).copied().unwrap_or(0)),
            consumers: Some(
                fleet
                    .workers
                    .iter()
                    .filter(|w| w.takes_jobs() && w.serves(name))
                    .count()
                    .try_into()
                    .unwrap_or(u32::MAX),
            ),
        })
        .collect();
    let workers = fleet
        .workers
        .iter()
        .map(|w| WorkerDetail {
            name: w.name.clone(),
            queues: w.queues.clone(),
            state: Some(w.state.clone()),
            concurrency: w.concurrency,
            free_concurrency: w.free_concurrency,
            heartbeat: None,
        })
        .collect();
    Detail {
        queues,
        workers: Some(workers),
        queued_tasks: None,
        brokers: Vec::new(),
        worker_events: Vec::new(),
        canary: None,
        capacity: None,
    }
}

/// `1 job`, `3 jobs`.
fn jobs(n: u64) -> String {
    if n == 1 {
        "1 job".into()
    } else {
        format!("{n} jobs")
    }
}

/// `1 job waits`, `3 jobs wait`.
fn wait(n: u64) -> String {
    if n == 1 {
        "1 job waits".into()
    } else {
        format!("{n} jobs wait")
    }
}

/// Python's `logging.getLevelName`, lower-cased, for the levels a worker reports.
fn level_name(level: i64) -> String {
    match level {
        50.. => "critical".into(),
        40..50 => "error".into(),
        30..40 => "warning".into(),
        other => format!("status {other}"),
    }
}
