//! The verdict over a failover list, from what its brokers and workers answered:
//! - no broker checked at all (TLS, a transport with no check yet): `unknown`, saying why;
//! - no broker answered: `unhealthy`, with every broker's reason;
//! - fewer workers answered the ping than `min_workers`: `unhealthy`; without
//!   the ping, fewer workers alive by their heartbeats: `unhealthy`, naming
//!   those gone or offline;
//! - a worker answered the ping but consumes no queue at all: `unhealthy`, naming it;
//! - else `healthy`, noting the failover brokers that did not answer, if any,
//!   and, when `min_workers` cannot be judged because no heartbeat can be heard
//!   and there is no ping, why ([`workers_not_counted`]).
//!
//! Every reason and note goes through [`overseer_core::reason`]: a server's
//! error text is one line, a failover list of many brokers names a few and
//! counts the rest (`; and 7 more`), and the whole is at most 240 characters.
//! The brokers' reasons arrive with their passwords already masked.

use std::time::Duration;

use overseer_core::{ExecutorHealth, duration, reason};

use crate::detail::{BrokerReport, BrokerStatus, WorkerPing};
use crate::events::{State, Worker};

/// The verdict and its reason (for a healthy verdict, its note), sanitised.
/// `window` is how long the ping waited, for the reason.
pub(crate) fn verdict(
    brokers: &[BrokerReport],
    workers: Option<&WorkerPing>,
    heard: Option<&[Worker]>,
    window: Duration,
    min_workers: u32,
) -> (ExecutorHealth, Option<String>) {
    let (health, reason) = judge(brokers, workers, heard, window, min_workers);
    (
        reason::sanitise_verdict(health),
        reason.map(|reason| reason::sanitise(&reason)),
    )
}

/// A healthy verdict's note (`note`, if any, first) when `min_workers` cannot
/// be judged: no ping, and the workers' heartbeats cannot be heard (`why`).
pub(crate) fn workers_not_counted(note: Option<String>, why: &str) -> String {
    let said = format!("workers not counted: {why}; min_workers needs worker_ping = true there");
    reason::sanitise(&match note {
        Some(note) => format!("{note}; {said}"),
        None => said,
    })
}

/// The rules of the module's doc, on the brokers' and workers' answers.
fn judge(
    brokers: &[BrokerReport],
    workers: Option<&WorkerPing>,
    heard: Option<&[Worker]>,
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
    if workers.is_none()
        && let Some(heard) = heard
        && let Some(reason) = too_few_alive(heard, min_workers)
    {
        return (ExecutorHealth::unhealthy(reason.clone()), Some(reason));
    }
    if let Some(ping) = workers {
        let count = ping.answered.len();
        if count < min_workers as usize {
            let mut reason = format!(
                "{count} of at least {min_workers} workers answered ping within {}",
                duration::short(window)
            );
            if !ping.errors.is_empty() {
                reason = format!("{reason} ({})", reason::list_with(&ping.errors, "; "));
            }
            return (ExecutorHealth::unhealthy(reason.clone()), Some(reason));
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
            let reason = format!("{names} {verb} no queue");
            return (ExecutorHealth::unhealthy(reason.clone()), Some(reason));
        }
    }
    let note = (!failed.is_empty()).then(|| {
        format!(
            "healthy through failover; not answering: {}",
            reason::list_with(&failed, "; ")
        )
    });
    (ExecutorHealth::Healthy, note)
}

/// The reason when fewer than `min_workers` workers are alive by their
/// heartbeats, naming those that are not.
fn too_few_alive(heard: &[Worker], min_workers: u32) -> Option<String> {
    let alive = heard.iter().filter(|w| w.state == State::Online).count();
    if alive >= min_workers as usize {
        return None;
    }
    let why: Vec<String> = heard
        .iter()
        .filter_map(|w| match w.state {
            State::Online => None,
            State::Gone => Some(format!(
                "{} sent no heartbeat for {} (one every {})",
                reason::name(&w.name),
                duration::short(Duration::from_secs(w.silent_for.as_secs())),
                duration::short(w.freq)
            )),
            State::Offline => Some(format!("{} went offline", reason::name(&w.name))),
        })
        .collect();
    let mut reason = format!("{alive} of at least {min_workers} workers alive");
    if why.is_empty() {
        reason.push_str(" (none sends heartbeats)");
    } else {
        reason = format!("{reason}: {}", reason::list_with(&why, "; "));
    }
    Some(reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::worker;
    use overseer_core::detail::WorkerDetail;

    fn failed(broker: &str, reason: &str) -> BrokerReport {
        BrokerReport {
            broker: broker.into(),
            status: BrokerStatus::Failed(reason.into()),
            queues: Vec::new(),
        }
    }

    #[test]
    fn reasons_and_notes_are_one_bounded_line() {
        let window = Duration::from_secs(1);
        let hostile = |i: usize| {
            failed(
                &format!("redis://b{i}:6379/0"),
                &format!(
                    "broker redis://b{i}:6379/0 failed: ERR\n{}",
                    "x".repeat(5000)
                ),
            )
        };
        let down: Vec<BrokerReport> = (0..8).map(hostile).collect();
        let (health, reason) = verdict(&down, None, None, window, 0);
        let ExecutorHealth::Unhealthy { reason: said } = &health else {
            panic!("no broker answered: {health:?}");
        };
        assert_eq!(reason.as_deref(), Some(said.as_str()));
        assert!(!said.contains('\n') && said.chars().count() <= reason::MAX_CHARS);
        assert!(
            said.starts_with("broker redis://b0:6379/0 failed: ERR xxx"),
            "{said}"
        );
        assert!(said.ends_with("; and 6 more"), "{said}");

        // Healthy through failover: the note is bounded the same way.
        let mut through = vec![BrokerReport {
            broker: "redis://ok:6379/0".into(),
            status: BrokerStatus::Answered,
            queues: Vec::new(),
        }];
        through.extend((0..8).map(hostile));
        let (health, note) = verdict(&through, None, None, window, 0);
        assert_eq!(health, ExecutorHealth::Healthy);
        let note = note.expect("the brokers that did not answer are noted");
        assert!(!note.contains('\n') && note.chars().count() <= reason::MAX_CHARS);
        assert!(note.ends_with("; and 6 more"), "{note}");

        // Too few workers, every ping failing with a long error.
        let ping = WorkerPing {
            errors: (0..6)
                .map(|i| format!("ping {i}:\r\n{}", "e".repeat(3000)))
                .collect(),
            ..WorkerPing::default()
        };
        let (health, _) = verdict(&through[..1], Some(&ping), None, window, 2);
        let ExecutorHealth::Unhealthy { reason: said } = &health else {
            panic!("too few workers: {health:?}");
        };
        assert!(!said.contains(['\r', '\n']) && said.chars().count() <= reason::MAX_CHARS);
        assert!(
            said.starts_with("0 of at least 2 workers answered ping within 1s (ping 0: eee"),
            "{said}"
        );
    }

    #[test]
    fn a_worker_that_consumes_no_queue_is_named_at_once() {
        let window = Duration::from_secs(1);
        let broker = [BrokerReport {
            broker: "redis://ok:6379/0".into(),
            status: BrokerStatus::Answered,
            queues: Vec::new(),
        }];
        let ping = |answered: Vec<WorkerDetail>| WorkerPing {
            answered,
            ..WorkerPing::default()
        };
        for (case, answered, expected) in [
            (
                "one idle worker",
                vec![worker("celery@w1", Some(&[]))],
                ExecutorHealth::unhealthy("celery@w1 answers but consumes no queue"),
            ),
            (
                "one idle beside one that works",
                vec![
                    worker("celery@w1", Some(&["default"])),
                    worker("celery@w2", Some(&[])),
                ],
                ExecutorHealth::unhealthy("celery@w2 answers but consumes no queue"),
            ),
            (
                "two idle",
                vec![
                    worker("celery@w1", Some(&[])),
                    worker("celery@w2", Some(&[])),
                ],
                ExecutorHealth::unhealthy("celery@w1, celery@w2 answer but consume no queue"),
            ),
            (
                "queues not said: not known to be idle",
                vec![worker("celery@w1", None)],
                ExecutorHealth::Healthy,
            ),
            (
                "every worker consumes",
                vec![worker("celery@w1", Some(&["default", "gpu"]))],
                ExecutorHealth::Healthy,
            ),
            // Workers scaled to zero (KEDA): nothing answered, none is idle.
            ("no worker at all", vec![], ExecutorHealth::Healthy),
        ] {
            let (health, _) = verdict(&broker, Some(&ping(answered)), None, window, 0);
            assert_eq!(health, expected, "{case}");
        }
    }

    #[test]
    fn without_the_ping_min_workers_counts_the_workers_alive_by_their_heartbeats() {
        use crate::events::{State, Worker};
        use overseer_core::detail::WorkerHeartbeat;
        let window = Duration::from_secs(1);
        let broker = [BrokerReport {
            broker: "redis://ok:6379/0".into(),
            status: BrokerStatus::Answered,
            queues: Vec::new(),
        }];
        let heard = |name: &str, state: State, silent: u64| Worker {
            name: name.into(),
            state,
            silent_for: Duration::from_millis(silent),
            freq: Duration::from_secs(2),
            heartbeat: WorkerHeartbeat {
                last: chrono::Utc::now(),
                every_ms: 2000,
                active: None,
                processed: None,
                loadavg: None,
                software: None,
            },
        };
        for (case, workers, min, expected) in [
            (
                "one alive of one",
                vec![heard("celery@w1", State::Online, 500)],
                1,
                ExecutorHealth::Healthy,
            ),
            (
                "the only worker gone",
                vec![heard("celery@w1", State::Gone, 5300)],
                1,
                ExecutorHealth::unhealthy(
                    "0 of at least 1 workers alive: celery@w1 sent no heartbeat for 5s (one every 2s)",
                ),
            ),
            (
                "one gone, one offline, one alive",
                vec![
                    heard("celery@w1", State::Gone, 9000),
                    heard("celery@w2", State::Offline, 1000),
                    heard("celery@w3", State::Online, 100),
                ],
                2,
                ExecutorHealth::unhealthy(
                    "1 of at least 2 workers alive: celery@w1 sent no heartbeat for 9s (one every 2s); \
                     celery@w2 went offline",
                ),
            ),
            (
                "none ever heard",
                vec![],
                1,
                ExecutorHealth::unhealthy("0 of at least 1 workers alive (none sends heartbeats)"),
            ),
            // Scaled to zero, with no minimum: nothing to say.
            ("none, none asked for", vec![], 0, ExecutorHealth::Healthy),
        ] {
            let (health, _) = verdict(&broker, None, Some(&workers), window, min);
            assert_eq!(health, expected, "{case}");
        }
        // Not yet known (the subscription warms up): the rule does not judge.
        assert_eq!(
            verdict(&broker, None, None, window, 1).0,
            ExecutorHealth::Healthy
        );
        // With the ping, the ping counts: a worker alive by its heartbeat that
        // does not answer is not alive.
        let ping = WorkerPing::default();
        let alive = [heard("celery@w1", State::Online, 100)];
        let (health, _) = verdict(&broker, Some(&ping), Some(&alive), window, 1);
        assert_eq!(
            health,
            ExecutorHealth::unhealthy("0 of at least 1 workers answered ping within 1s")
        );
    }
}
