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

use overseer_core::{ExecutorHealth, duration, reason};
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

/// The verdict and its reason (for a healthy verdict, its note), sanitised.
/// `window` is how long the ping waited, for the reason.
pub(crate) fn verdict(
    brokers: &[BrokerReport],
    workers: Workers<'_>,
    window: Duration,
    min_workers: u32,
) -> (ExecutorHealth, Option<String>) {
    let (health, reason) = judge(brokers, workers, window, min_workers);
    (
        reason::sanitise_verdict(health),
        reason.map(|reason| reason::sanitise(&reason)),
    )
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
mod tests {
    use super::*;
    use crate::check::tests::worker;
    use overseer_core::detail::WorkerDetail;

    fn pinged(ping: &WorkerPing) -> Workers<'_> {
        Workers {
            ping: Some(ping),
            ..Workers::default()
        }
    }

    fn heard(workers: &[Worker]) -> Workers<'_> {
        Workers {
            heard: Some(workers),
            ..Workers::default()
        }
    }

    /// A ping that went out, and the workers that answered it.
    fn sent(answered: Vec<WorkerDetail>) -> WorkerPing {
        WorkerPing {
            answered,
            window_ms: 1000,
            sent: true,
            ..WorkerPing::default()
        }
    }

    /// A ping this host did not get set up in time.
    fn late() -> WorkerPing {
        WorkerPing {
            window_ms: 1000,
            errors: vec!["broker redis://ok:6379/0: the ping was not set up in time".into()],
            ..WorkerPing::default()
        }
    }

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
        let (health, reason) = verdict(&down, Workers::default(), window, 0);
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
        let (health, note) = verdict(&through, Workers::default(), window, 0);
        assert_eq!(health, ExecutorHealth::Healthy);
        let note = note.expect("the brokers that did not answer are noted");
        assert!(!note.contains('\n') && note.chars().count() <= reason::MAX_CHARS);
        assert!(note.ends_with("; and 6 more"), "{note}");

        // Too few workers, every ping failed by its broker with a long error.
        let errors: Vec<String> = (0..6)
            .map(|i| format!("ping {i}:\r\n{}", "e".repeat(3000)))
            .collect();
        let ping = WorkerPing {
            failed: errors.clone(),
            errors,
            ..WorkerPing::default()
        };
        let (health, _) = verdict(&through[..1], pinged(&ping), window, 2);
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
            sent: true,
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
            let (health, _) = verdict(&broker, pinged(&ping(answered)), window, 0);
            assert_eq!(health, expected, "{case}");
        }
    }

    /// A worker heard by its heartbeats, last at 06:03:53 UTC, `silent` ms ago.
    fn worker_heard(name: &str, state: State, silent: u64) -> Worker {
        use overseer_core::detail::WorkerHeartbeat;
        Worker {
            name: name.into(),
            state,
            silent_for: Duration::from_millis(silent),
            freq: Duration::from_secs(2),
            confirmed: true,
            heartbeat: WorkerHeartbeat {
                last: "2026-12-02T06:03:53.5Z".parse().unwrap(),
                every_ms: 2000,
                active: None,
                processed: None,
                loadavg: None,
                software: None,
            },
        }
    }

    /// A name heard once only.
    fn once(name: &str, state: State, silent: u64) -> Worker {
        Worker {
            confirmed: false,
            ..worker_heard(name, state, silent)
        }
    }

    fn answered() -> [BrokerReport; 1] {
        [BrokerReport {
            broker: "redis://ok:6379/0".into(),
            status: BrokerStatus::Answered,
            queues: Vec::new(),
        }]
    }

    #[test]
    fn without_the_ping_min_workers_counts_the_workers_alive_by_their_heartbeats() {
        let window = Duration::from_secs(1);
        let broker = answered();
        for (case, workers, min, expected) in [
            (
                "one alive of one",
                vec![worker_heard("celery@w1", State::Online, 500)],
                1,
                ExecutorHealth::Healthy,
            ),
            (
                "the only worker gone",
                vec![worker_heard("celery@w1", State::Gone, 5300)],
                1,
                ExecutorHealth::unhealthy(
                    "0 of at least 1 workers alive: celery@w1 sent no heartbeat since \
                     2026-12-02 06:03:53 UTC (one every 2s)",
                ),
            ),
            (
                "one gone, one offline, one alive",
                vec![
                    worker_heard("celery@w1", State::Gone, 9000),
                    worker_heard("celery@w2", State::Offline, 1000),
                    worker_heard("celery@w3", State::Online, 100),
                ],
                2,
                ExecutorHealth::unhealthy(
                    "1 of at least 2 workers alive: celery@w1 sent no heartbeat since \
                     2026-12-02 06:03:53 UTC (one every 2s); celery@w2 went offline",
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
            let (health, _) = verdict(&broker, heard(&workers), window, min);
            assert_eq!(health, expected, "{case}");
        }
        // With the ping, the ping counts: a worker alive by its heartbeat that
        // does not answer is not alive.
        let ping = sent(vec![]);
        let alive = [worker_heard("celery@w1", State::Online, 100)];
        let both = Workers {
            ping: Some(&ping),
            heard: Some(&alive),
            unheard: None,
            passing: false,
        };
        let (health, _) = verdict(&broker, both, window, 1);
        assert_eq!(
            health,
            ExecutorHealth::unhealthy("0 of at least 1 workers answered ping within 1s")
        );
    }

    #[test]
    fn a_worker_gone_without_a_goodbye_is_unhealthy_with_no_setting() {
        let window = Duration::from_secs(1);
        let broker = answered();
        let gone_reason =
            "celery@w1 sent no heartbeat since 2026-12-02 06:03:53 UTC (one every 2s)";
        let hold = GONE_HOLD.as_millis() as u64;
        for (case, workers, expected) in [
            (
                "the only worker gone",
                vec![worker_heard("celery@w1", State::Gone, 4100)],
                ExecutorHealth::unhealthy(gone_reason),
            ),
            (
                "the only worker gone for an hour: none is online, it still counts",
                vec![worker_heard("celery@w1", State::Gone, 3_600_000)],
                ExecutorHealth::unhealthy(gone_reason),
            ),
            (
                "gone beside one alive, within the hold",
                vec![
                    worker_heard("celery@w1", State::Gone, hold - 1),
                    worker_heard("celery@w2", State::Online, 100),
                ],
                ExecutorHealth::unhealthy(gone_reason),
            ),
            (
                "gone beside one alive, past the hold",
                vec![
                    worker_heard("celery@w1", State::Gone, hold),
                    worker_heard("celery@w2", State::Online, 100),
                ],
                ExecutorHealth::Healthy,
            ),
            (
                "a clean stop (worker-offline, as a scale-down sends) is no fault",
                vec![worker_heard("celery@w1", State::Offline, 100)],
                ExecutorHealth::Healthy,
            ),
            (
                "two gone: both named",
                vec![
                    worker_heard("celery@w1", State::Gone, 5000),
                    worker_heard("celery@w2", State::Gone, 5000),
                ],
                ExecutorHealth::unhealthy(
                    "celery@w1, celery@w2 sent no heartbeat since 2026-12-02 06:03:53 UTC",
                ),
            ),
            (
                "unknown (nobody listens) is neither alive nor gone",
                vec![worker_heard("celery@w1", State::Unknown, 100)],
                ExecutorHealth::Healthy,
            ),
            (
                "names heard once (a flood of forged events) are no fault",
                vec![
                    once("celery@forged-1", State::Gone, 5000),
                    once("celery@forged-2", State::Online, 100),
                    worker_heard("celery@w2", State::Online, 100),
                ],
                ExecutorHealth::Healthy,
            ),
            (
                "a worker that heartbeats, gone amid a flood: it alone is named",
                vec![
                    once("celery@forged-1", State::Gone, 5000),
                    worker_heard("celery@w1", State::Gone, 4100),
                    once("celery@forged-2", State::Gone, 4100),
                    once("celery@forged-3", State::Online, 100),
                ],
                ExecutorHealth::unhealthy(gone_reason),
            ),
        ] {
            let (health, _) = verdict(&broker, heard(&workers), window, 0);
            assert_eq!(health, expected, "{case}");
        }

        // The reason holds still while the fault lasts: the same at every poll.
        let at = |silent| {
            verdict(
                &broker,
                heard(&[worker_heard("celery@w1", State::Gone, silent)]),
                window,
                0,
            )
            .0
        };
        assert_eq!(at(4100), at(60_000));

        // With the ping on as well, the heartbeats name the worker: a frozen
        // worker is not blamed on a ping that went out unanswered, nor on one
        // that could not be sent in time (then the heartbeats count it).
        let frozen = [worker_heard("celery@w1", State::Gone, 4100)];
        for (ping, expected) in [
            (sent(vec![]), gone_reason.to_owned()),
            (
                late(),
                format!("0 of at least 1 workers alive: {gone_reason}"),
            ),
        ] {
            let both = Workers {
                ping: Some(&ping),
                heard: Some(&frozen),
                unheard: None,
                passing: false,
            };
            assert_eq!(
                verdict(&broker, both, window, 1).0,
                ExecutorHealth::unhealthy(expected)
            );
        }
    }

    #[test]
    fn workers_that_cannot_be_heard_are_not_counted_and_say_why() {
        let window = Duration::from_secs(1);
        let broker = answered();
        let why =
            "broker redis://ok:6379/0 refused the subscription to the workers' heartbeats: NOPERM";
        let last_alive = [worker_heard("celery@w1", State::Unknown, 100)];
        let deaf = Workers {
            ping: None,
            heard: Some(&last_alive),
            unheard: Some(why),
            passing: false,
        };
        // min_workers cannot be judged: unknown, not healthy, not "0 alive".
        assert_eq!(
            verdict(&broker, deaf, window, 1),
            (
                ExecutorHealth::unknown(workers_not_counted(why)),
                Some(workers_not_counted(why))
            )
        );
        // With no minimum the verdict is the brokers', and it says the workers
        // are not watched.
        assert_eq!(
            verdict(&broker, deaf, window, 0),
            (
                ExecutorHealth::Healthy,
                Some(format!("workers not watched: {why}"))
            )
        );
        // A worker found gone before the subscription dropped stays the cause.
        let gone = [worker_heard("celery@w1", State::Gone, 5000)];
        let deaf_gone = Workers {
            heard: Some(&gone),
            ..deaf
        };
        assert!(matches!(
            verdict(&broker, deaf_gone, window, 1).0,
            ExecutorHealth::Unhealthy { reason } if reason.starts_with("celery@w1 sent no heartbeat since")
        ));
        // With the ping, the ping counts the workers.
        let ping = sent(vec![worker("celery@w1", Some(&["default"]))]);
        let pinging = Workers {
            ping: Some(&ping),
            ..deaf
        };
        assert_eq!(
            verdict(&broker, pinging, window, 1).0,
            ExecutorHealth::Healthy
        );
    }

    #[test]
    fn a_subscription_warming_up_or_reconnecting_waits_without_a_note() {
        let window = Duration::from_secs(1);
        let broker = answered();
        let why = "the workers' heartbeats have not been listened for long enough yet";
        let warming = Workers {
            unheard: Some(why),
            passing: true,
            ..Workers::default()
        };
        // No minimum: the brokers' verdict, and no note for a wait that ends
        // by itself (the check says it is pending).
        assert_eq!(
            verdict(&broker, warming, window, 0),
            (ExecutorHealth::Healthy, None)
        );
        // A minimum cannot be judged yet: unknown, saying why.
        assert_eq!(
            verdict(&broker, warming, window, 1).0,
            ExecutorHealth::unknown(workers_not_counted(why))
        );
    }

    /// The rule table on the sequences seen on a loaded host, poll by poll:
    /// each case is what a service with `worker_ping` and `min_workers = 1`
    /// read at each poll (2 s apart), and what it must say.
    #[test]
    fn the_stronger_evidence_names_the_cause_poll_after_poll() {
        let window = Duration::from_secs(1);
        let w1 = || vec![worker("celery@w1", Some(&["default"]))];
        let online = || vec![worker_heard("celery@w1", State::Online, 500)];
        let gone_hb = || vec![worker_heard("celery@w1", State::Gone, 4100)];
        let refused = || WorkerPing {
            window_ms: 1000,
            errors: vec!["broker redis://ok:6379/0: could not send the ping: NOPERM".into()],
            failed: vec!["broker redis://ok:6379/0: could not send the ping: NOPERM".into()],
            ..WorkerPing::default()
        };
        let silent = "0 of at least 1 workers answered ping within 1s";
        let gone = "celery@w1 sent no heartbeat since 2026-12-02 06:03:53 UTC (one every 2s)";
        let none_alive = format!("0 of at least 1 workers alive: {gone}");
        let unhealthy = |reason: &str| ExecutorHealth::unhealthy(reason);
        type Poll = (u64, WorkerPing, Option<Vec<Worker>>, ExecutorHealth);
        let cases: Vec<(&str, Vec<Poll>)> = vec![
            (
                "a worker frozen on a loaded host: the worker's, never the broker's, never healthy",
                vec![
                    (0, sent(w1()), Some(online()), ExecutorHealth::Healthy),
                    (2, sent(vec![]), Some(online()), unhealthy(silent)),
                    (4, late(), Some(online()), unhealthy(silent)),
                    (6, late(), Some(gone_hb()), unhealthy(gone)),
                    (8, sent(vec![]), Some(gone_hb()), unhealthy(gone)),
                    (10, late(), Some(gone_hb()), unhealthy(gone)),
                ],
            ),
            (
                "a healthy worker on a loaded host: late pings fail nobody",
                vec![
                    (0, sent(w1()), Some(online()), ExecutorHealth::Healthy),
                    (2, late(), Some(online()), ExecutorHealth::Healthy),
                    (4, late(), None, ExecutorHealth::Healthy),
                    (20, late(), None, ExecutorHealth::Healthy),
                    (30, sent(w1()), None, ExecutorHealth::Healthy),
                ],
            ),
            (
                "pings late for longer than the hold: counted by heartbeats, else not at all",
                vec![
                    (0, sent(w1()), Some(online()), ExecutorHealth::Healthy),
                    (32, late(), Some(online()), ExecutorHealth::Healthy),
                    (
                        34,
                        late(),
                        None,
                        ExecutorHealth::unknown(
                            "workers not counted: the ping did not go out in time (broker \
                             redis://ok:6379/0: the ping was not set up in time)",
                        ),
                    ),
                    (36, late(), Some(gone_hb()), unhealthy(&none_alive)),
                ],
            ),
            (
                "no counted ping yet, a start on a loaded host: the heartbeats count",
                vec![
                    (0, late(), Some(online()), ExecutorHealth::Healthy),
                    (2, late(), Some(gone_hb()), unhealthy(&none_alive)),
                ],
            ),
            (
                "a broker that refuses the ping is named: it failed",
                vec![
                    (0, sent(w1()), Some(online()), ExecutorHealth::Healthy),
                    (
                        2,
                        refused(),
                        Some(online()),
                        unhealthy(
                            "0 of at least 1 workers answered ping within 1s (broker \
                             redis://ok:6379/0: could not send the ping: NOPERM)",
                        ),
                    ),
                ],
            ),
        ];
        let broker = answered();
        for (case, polls) in cases {
            let start = Instant::now();
            let mut held = HeldPing::default();
            for (at, fresh, heard, expected) in polls {
                let ping = held.judged(&fresh, start + Duration::from_secs(at));
                let workers = Workers {
                    ping: Some(&ping),
                    heard: heard.as_deref(),
                    unheard: heard
                        .is_none()
                        .then_some("the subscription to the workers' heartbeats is down"),
                    passing: false,
                };
                let (health, _) = verdict(&broker, workers, window, 1);
                assert_eq!(health, expected, "{case}, at {at}s");
            }
        }
        // The broker itself failing is named before any worker.
        let down = [failed(
            "redis://ok:6379/0",
            "broker redis://ok:6379/0 refused the connection",
        )];
        let (health, _) = verdict(&down, pinged(&late()), window, 1);
        assert_eq!(
            health,
            unhealthy("broker redis://ok:6379/0 refused the connection")
        );
    }
}
