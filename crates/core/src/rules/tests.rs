//! The rules on work flowing, as tables: what each observation gives, and how
//! it combines with the check's own verdict.

use tokio::time::Instant;

use super::*;
use crate::detail::{QueueDetail, QueuedOnQueue, WorkerDetail};

const LIMIT: Duration = Duration::from_secs(300);
const BROKER: &str = "redis://broker:6379/0";

fn queue(name: &str, depth: Option<u64>, consumers: Option<u32>) -> QueueDetail {
    QueueDetail {
        name: name.into(),
        broker: BROKER.into(),
        depth,
        consumers,
    }
}

fn with_queues(health: ExecutorHealth, queues: Vec<QueueDetail>) -> Observation {
    Observation::new(
        health,
        Detail {
            queues,
            ..Detail::default()
        },
    )
}

fn queued(queues: &[(&str, u64, Option<u64>, u64)]) -> QueuedTasks {
    QueuedTasks {
        count: queues.iter().map(|q| q.1).sum(),
        oldest_seconds: queues.iter().filter_map(|q| q.2).max(),
        queues: queues
            .iter()
            .map(|&(queue, count, oldest_seconds, overdue)| QueuedOnQueue {
                queue: queue.into(),
                count,
                oldest_seconds,
                overdue,
            })
            .collect(),
    }
}

/// The rules on queued work and queues (1 and 4), as an executor's actor
/// keeps them across polls, under one limit.
#[derive(Default)]
struct Flow {
    rules: Option<Rules>,
}

impl Flow {
    fn judge(
        &mut self,
        observation: Observation,
        queued: Option<QueuedTasks>,
        max_age: Duration,
        now: Instant,
    ) -> Observation {
        self.rules
            .get_or_insert_with(|| Rules::flow(max_age))
            .judge_with(observation, queued, None, None, now)
    }
}

fn no_check() -> ExecutorHealth {
    ExecutorHealth::unknown("no health check for LocalExecutor")
}

fn unhealthy(reason: &str) -> ExecutorHealth {
    ExecutorHealth::unhealthy(reason)
}

#[test]
fn queued_task_instances_give_the_verdict_with_the_check_s() {
    let overdue = queued(&[("default", 3, Some(840), 3), ("gpu", 1, Some(20), 0)]);
    let fresh = queued(&[("default", 2, Some(30), 0)]);
    let none = QueuedTasks::default();
    let reason = "task instances queued longer than 5m on queue default";
    let cases: Vec<(
        &str,
        ExecutorHealth,
        Option<QueuedTasks>,
        Duration,
        ExecutorHealth,
    )> = vec![
        (
            "healthy check, none overdue",
            ExecutorHealth::Healthy,
            Some(fresh.clone()),
            LIMIT,
            ExecutorHealth::Healthy,
        ),
        (
            "healthy check, some overdue",
            ExecutorHealth::Healthy,
            Some(overdue.clone()),
            LIMIT,
            unhealthy(reason),
        ),
        (
            "unhealthy check keeps its reason first",
            unhealthy("broker down"),
            Some(overdue.clone()),
            LIMIT,
            unhealthy(&format!("broker down; {reason}")),
        ),
        (
            "unhealthy check, none overdue",
            unhealthy("broker down"),
            Some(fresh.clone()),
            LIMIT,
            unhealthy("broker down"),
        ),
        (
            "no check, nothing queued: a real verdict",
            no_check(),
            Some(none.clone()),
            LIMIT,
            ExecutorHealth::Healthy,
        ),
        (
            "no check, some overdue",
            no_check(),
            Some(overdue.clone()),
            LIMIT,
            unhealthy(reason),
        ),
        (
            "no check, table unknown",
            no_check(),
            None,
            LIMIT,
            no_check(),
        ),
        (
            "rule off: overdue ignored",
            ExecutorHealth::Healthy,
            Some(overdue.clone()),
            Duration::ZERO,
            ExecutorHealth::Healthy,
        ),
        (
            "rule off: unknown stays unknown",
            no_check(),
            Some(none),
            Duration::ZERO,
            no_check(),
        ),
    ];
    for (case, check, queued, max_age, expected) in cases {
        let judged = Flow::default().judge(check.into(), queued.clone(), max_age, Instant::now());
        assert_eq!(judged.health, expected, "{case}");
        assert_eq!(
            judged.detail.and_then(|d| d.queued_tasks),
            queued,
            "{case}: the evidence is shown whatever the verdict"
        );
    }
}

/// A continuing fault keeps one reason while its count and age tick (those
/// are in the detail): one overdue, then three, the oldest older each poll.
#[test]
fn an_overdue_reason_holds_still_while_its_count_and_age_tick() {
    let start = Instant::now();
    let mut watch = Flow::default();
    let limit = Duration::from_secs(60);
    let polls = [(1, 61), (2, 63), (3, 65), (3, 67)];
    let judged: Vec<Observation> = polls
        .iter()
        .enumerate()
        .map(|(i, &(overdue, oldest))| {
            watch.judge(
                ExecutorHealth::Healthy.into(),
                Some(queued(&[("default", overdue, Some(oldest), overdue)])),
                limit,
                start + Duration::from_secs(2 * i as u64),
            )
        })
        .collect();
    let said = unhealthy("task instances queued longer than 1m on queue default");
    for (observation, (overdue, oldest)) in judged.iter().zip(polls) {
        assert_eq!(observation.health, said);
        let tasks = observation.detail.as_ref().unwrap().queued_tasks.as_ref();
        let queue = &tasks.unwrap().queues[0];
        assert_eq!(
            (queue.overdue, queue.oldest_seconds),
            (overdue, Some(oldest))
        );
    }
}

/// One queue's depth and consumers at each poll, a minute apart, and the
/// verdict after each (limit 5m).
fn run(polls: &[(Option<u64>, Option<u32>)]) -> Vec<ExecutorHealth> {
    let start = Instant::now();
    let mut watch = Flow::default();
    polls
        .iter()
        .enumerate()
        .map(|(minute, &(depth, consumers))| {
            let at = start + Duration::from_secs(60 * minute as u64);
            watch
                .judge(
                    with_queues(
                        ExecutorHealth::Healthy,
                        vec![queue("gpu", depth, consumers)],
                    ),
                    None,
                    LIMIT,
                    at,
                )
                .health
        })
        .collect()
}

#[test]
fn a_queue_with_messages_and_no_consumer_is_unhealthy_once_it_held_the_limit() {
    let h = ExecutorHealth::Healthy;
    let verdicts = run(&[(Some(4), Some(0)); 7]);
    // Held past the limit, the reason stays the same (the clock is not in it).
    let stuck =
        |_minutes: u32| unhealthy("queue gpu: messages waiting and no worker consumed it in 5m");
    assert_eq!(
        verdicts,
        vec![
            h.clone(),
            h.clone(),
            h.clone(),
            h.clone(),
            h.clone(),
            stuck(5),
            stuck(6)
        ]
    );

    // Empty and unconsumed (workers scaled to zero): fine, for ever.
    assert!(run(&[(Some(0), Some(0)); 8]).iter().all(|v| *v == h));
    // A consumer came back in time: the clock starts again.
    let verdicts = run(&[
        (Some(4), Some(0)),
        (Some(4), Some(0)),
        (Some(4), Some(0)),
        (Some(3), Some(1)),
        (Some(4), Some(0)),
        (Some(4), Some(0)),
        (Some(4), Some(0)),
    ]);
    assert!(verdicts.iter().all(|v| *v == h), "{verdicts:?}");
}

#[test]
fn a_queue_waiting_on_full_workers_is_saturation_not_a_stall() {
    let start = Instant::now();
    let executor = crate::Executor::unchecked("CeleryExecutor")
        .with_max_queued_age(LIMIT)
        .with_capacity(32, LIMIT);
    let mut rules = Rules::standard(&executor.rules());
    let saturated = "workers at capacity: all 2 slots taken on 1 worker for 5m, work waiting";
    // One poll at `minute`: the depth holds at 3, the one worker online with
    // `free` of its 2 slots.
    let mut poll = |minute: u64, free: u32| {
        let observation = Observation::new(
            ExecutorHealth::Healthy,
            Detail {
                queues: vec![queue("gpu", Some(3), Some(1))],
                workers: Some(vec![WorkerDetail {
                    name: "celery@a".into(),
                    queues: None,
                    state: Some("online".into()),
                    concurrency: Some(2),
                    free_concurrency: Some(free),
                    heartbeat: None,
                }]),
                ..Detail::default()
            },
        );
        rules
            .judge(
                observation,
                None,
                None,
                start + Duration::from_secs(60 * minute),
            )
            .health
    };
    // Every slot taken: the saturation's finding comes at 5, and the stall
    // rule never names the queue.
    let verdicts: Vec<ExecutorHealth> = (0..8u64).map(|minute| poll(minute, 0)).collect();
    assert_eq!(verdicts[..5], vec![ExecutorHealth::Healthy; 5]);
    assert!(
        verdicts[5..].iter().all(|v| *v == unhealthy(saturated)),
        "{verdicts:?}"
    );
    // A slot frees and still nothing is taken: a stall, on a clock started
    // at the last poll that saw every slot taken (waiting for a slot was no
    // stall).
    assert_eq!(poll(8, 1), ExecutorHealth::Healthy);
    assert_eq!(poll(11, 1), ExecutorHealth::Healthy);
    assert_eq!(
        poll(12, 1),
        unhealthy("queue gpu: messages waiting, none taken in 5m")
    );
}

#[test]
fn a_queue_whose_depth_never_goes_down_is_stalled() {
    let h = ExecutorHealth::Healthy;
    // Catatonic workers: two consumers attached, the depth only grows.
    let growing: Vec<_> = (0..7).map(|m| (Some(100 + 4 * m), Some(2))).collect();
    let verdicts = run(&growing);
    assert_eq!(verdicts[..5], vec![h.clone(); 5]);
    assert_eq!(
        verdicts[5],
        unhealthy("queue gpu: messages waiting, none taken in 5m")
    );
    // Redis without worker_ping: consumers unknown, the same rule.
    let verdicts = run(&[(Some(7), None); 6]);
    assert_eq!(
        verdicts[5],
        unhealthy("queue gpu: messages waiting, none taken in 5m")
    );
    // A busy queue: deep, but it goes down now and then.
    let busy: Vec<_> = (0..12)
        .map(|m| (Some(if m % 3 == 2 { 40 } else { 50 + m }), Some(3)))
        .collect();
    assert!(run(&busy).iter().all(|v| *v == h));
    // Drained to zero, then refilled: progress.
    let verdicts = run(&[
        (Some(5), Some(1)),
        (Some(5), Some(1)),
        (Some(0), Some(1)),
        (Some(5), Some(1)),
        (Some(5), Some(1)),
        (Some(5), Some(1)),
        (Some(5), Some(1)),
    ]);
    assert!(verdicts.iter().all(|v| *v == h), "{verdicts:?}");
    // A depth that could not be read neither helps nor hurts.
    let verdicts = run(&[
        (Some(5), Some(1)),
        (None, None),
        (None, None),
        (None, None),
        (None, None),
        (Some(5), Some(1)),
    ]);
    assert_eq!(
        verdicts[5],
        unhealthy("queue gpu: messages waiting, none taken in 5m")
    );
}

#[test]
fn findings_combine_with_the_check_and_each_other() {
    let start = Instant::now();
    let mut watch = Flow::default();
    let queues = || {
        vec![
            queue("default", Some(0), Some(2)),
            queue("gpu", Some(4), Some(0)),
        ]
    };
    watch.judge(
        with_queues(ExecutorHealth::Healthy, queues()),
        None,
        LIMIT,
        start,
    );
    let later = start + LIMIT;
    let overdue = queued(&[("gpu", 4, Some(400), 2)]);
    let judged = watch.judge(
        with_queues(ExecutorHealth::Healthy, queues()),
        Some(overdue),
        LIMIT,
        later,
    );
    assert_eq!(
        judged.health,
        unhealthy(
            "task instances queued longer than 5m on queue gpu; \
             queue gpu: messages waiting and no worker consumed it in 5m"
        )
    );
    let detail = judged.detail.expect("the evidence is kept");
    assert_eq!(detail.queues, queues());

    // Several brokers (a failover list) name the broker too.
    let mut watch = Flow::default();
    let other = QueueDetail {
        broker: "redis://standby:6379/0".into(),
        ..queue("gpu", Some(4), Some(0))
    };
    for at in [start, later] {
        let judged = watch.judge(
            with_queues(
                ExecutorHealth::Healthy,
                vec![queue("gpu", Some(0), Some(0)), other.clone()],
            ),
            None,
            LIMIT,
            at,
        );
        if at == later {
            assert_eq!(
                judged.health,
                unhealthy(
                    "queue gpu on redis://standby:6379/0: messages waiting and no worker consumed it in 5m"
                )
            );
        }
    }
}

#[test]
fn rules_off_still_show_the_evidence() {
    let mut watch = Flow::default();
    let start = Instant::now();
    for minute in 0..10 {
        let judged = watch.judge(
            with_queues(
                ExecutorHealth::Healthy,
                vec![queue("gpu", Some(4), Some(0))],
            ),
            None,
            Duration::ZERO,
            start + Duration::from_secs(60 * minute),
        );
        assert_eq!(judged.health, ExecutorHealth::Healthy);
        assert_eq!(judged.detail.unwrap().queues.len(), 1);
    }
    // No evidence at all: no detail.
    let judged = watch.judge(ExecutorHealth::Healthy.into(), None, LIMIT, start);
    assert_eq!(judged, Observation::from(ExecutorHealth::Healthy));
}

/// One poll of a sequence: the queue as seen, or a poll that saw nothing of it
/// (timed out, or the broker did not answer: the check's verdict is unhealthy
/// and carries no queue).
#[derive(Clone, Copy)]
enum Sight {
    Seen(Option<u64>, Option<u32>),
    Blind,
}

/// The verdicts of a sequence of polls a minute apart (limit 5m), and the first
/// poll from which every verdict is unhealthy (`None`: never, or it flickered
/// back to healthy at the end).
fn sequence(polls: &[Sight]) -> (Vec<ExecutorHealth>, Option<usize>) {
    let start = Instant::now();
    let mut watch = Flow::default();
    let verdicts: Vec<ExecutorHealth> = polls
        .iter()
        .enumerate()
        .map(|(minute, poll)| {
            let at = start + Duration::from_secs(60 * minute as u64);
            let observation = match *poll {
                Sight::Seen(depth, consumers) => with_queues(
                    ExecutorHealth::Healthy,
                    vec![queue("gpu", depth, consumers)],
                ),
                Sight::Blind => unhealthy("no reply within 500ms").into(),
            };
            watch.judge(observation, None, LIMIT, at).health
        })
        .collect();
    let healthy_after = verdicts
        .iter()
        .rposition(|v| *v == ExecutorHealth::Healthy)
        .map_or(0, |last| last + 1);
    let held = (healthy_after < verdicts.len()).then_some(healthy_after);
    (verdicts, held)
}

#[test]
fn a_continuing_fault_never_reads_healthy_between_polls_that_could_not_see() {
    use Sight::{Blind, Seen};
    let waiting = |consumers| Seen(Some(4), consumers);
    // (case, polls, the first poll from which every verdict is unhealthy)
    let cases: Vec<(&str, Vec<Sight>, Option<usize>)> = vec![
        (
            "consumers unknown, unknown, zero, unknown: the none-taken clock runs on",
            [
                vec![waiting(None); 6],
                vec![waiting(Some(0))],
                vec![waiting(None); 8],
            ]
            .concat(),
            Some(5),
        ),
        (
            "null-null-zero-null with the worker frozen throughout",
            [
                vec![
                    waiting(None),
                    waiting(None),
                    waiting(Some(0)),
                    waiting(None),
                ],
                vec![waiting(None); 8],
            ]
            .concat(),
            Some(5),
        ),
        (
            "consumers unknown, then zero for good",
            [vec![waiting(None); 6], vec![waiting(Some(0)); 8]].concat(),
            Some(5),
        ),
        (
            "a timeout in the middle of an outage keeps the clock",
            [
                vec![waiting(Some(0)); 6],
                vec![Blind, Blind],
                vec![waiting(Some(0)); 6],
            ]
            .concat(),
            Some(5),
        ),
        (
            "timeouts before the limit: the clock started at the first sight",
            [
                vec![waiting(Some(0)); 3],
                vec![Blind, Blind],
                vec![waiting(Some(0)); 4],
            ]
            .concat(),
            Some(3),
        ),
        (
            "depths that could not be read across the limit: judged on the last one read",
            [
                vec![waiting(Some(2)); 3],
                vec![Seen(None, None); 3],
                vec![waiting(Some(2)); 3],
            ]
            .concat(),
            Some(5),
        ),
        (
            "a consumer that came back ends it",
            [vec![waiting(Some(0)); 6], vec![Seen(Some(0), Some(1)); 3]].concat(),
            None,
        ),
    ];
    for (case, polls, first_unhealthy) in cases {
        let (verdicts, held) = sequence(&polls);
        assert_eq!(held, first_unhealthy, "{case}: {verdicts:#?}");
    }
}

#[test]
fn a_blind_poll_shows_the_check_s_reason_and_the_finding_of_the_clock_it_kept() {
    use Sight::{Blind, Seen};
    let (verdicts, _) = sequence(&[
        Seen(Some(4), Some(0)),
        Blind,
        Blind,
        Blind,
        Blind,
        Seen(Some(4), Some(0)),
    ]);
    assert_eq!(verdicts[1], unhealthy("no reply within 500ms"));
    assert_eq!(
        verdicts[5],
        unhealthy("queue gpu: messages waiting and no worker consumed it in 5m")
    );
}
