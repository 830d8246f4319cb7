//! Lost work as sequences of polls: what Airflow holds, what the broker holds.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tokio::time::Instant;

use super::SETTLE;
use crate::airflow::queued::{QueuedRow, Snapshot};
use crate::detail::{BrokerDetail, Detail, QueueDetail};
use crate::rules::{Airflow, Rules, Settings};
use crate::{ExecutorHealth, Observation};

const BROKER: &str = "redis://127.0.0.1:6379/0";
const MAX_QUEUED_AGE: Duration = Duration::from_secs(300);

fn at(seconds: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 6, 2, 50, 0).unwrap() + chrono::Duration::seconds(seconds)
}

/// A refresh at `read_at` that found `queued` task instances on `default`,
/// the oldest queued at `oldest`, `settled` of them queued longer than
/// [`SETTLE`] and `overdue` longer than [`MAX_QUEUED_AGE`].
fn refresh(
    read_at: DateTime<Utc>,
    queued: u64,
    settled: u64,
    overdue: u64,
    oldest: i64,
) -> Snapshot {
    Snapshot {
        read_at,
        limits: vec![SETTLE, MAX_QUEUED_AGE],
        rows: vec![QueuedRow {
            executor: None,
            queue: "default".into(),
            team: None,
            owner: Some(0),
            count: queued,
            oldest: Some(at(oldest)),
            overdue: vec![settled, overdue],
        }],
        canary: None,
        capacity: None,
    }
}

/// The check's view: `default`'s depth, and what the broker delivered
/// unacknowledged (`None`: a transport that cannot say), started at `started`.
fn broker(depth: u64, delivered: Option<u64>, started: i64) -> Observation {
    Observation::new(
        ExecutorHealth::Healthy,
        Detail {
            queues: vec![QueueDetail {
                name: "default".into(),
                broker: BROKER.into(),
                depth: Some(depth),
                consumers: None,
            }],
            brokers: vec![BrokerDetail {
                broker: BROKER.into(),
                delivered,
                started_at: Some(at(started)),
            }],
            ..Detail::default()
        },
    )
}

fn rules() -> Rules {
    Rules::standard(&Settings {
        max_queued_age: MAX_QUEUED_AGE,
        ..Settings::default()
    })
}

fn judge(rules: &mut Rules, observation: Observation, snapshot: &Snapshot) -> ExecutorHealth {
    let airflow = Airflow {
        snapshot,
        index: 0,
        default: true,
    };
    rules
        .judge(observation, Some(airflow), None, Instant::now())
        .health
}

#[test]
fn a_broker_restarted_empty_loses_the_work_it_held_and_says_so_until_airflow_requeues_it() {
    let mut rules = rules();
    // Work flows: 16 queued, 12 wait, 4 delivered to a worker.
    let flowing = refresh(at(0), 16, 16, 0, -40);
    for _ in 0..3 {
        assert_eq!(
            judge(&mut rules, broker(12, Some(4), -3600), &flowing),
            ExecutorHealth::Healthy
        );
    }
    // The broker restarted empty at 02:51:20: nothing waits, nothing delivered.
    let empty = || broker(0, Some(0), 80);
    let lost = ExecutorHealth::unhealthy(
        "16 task instances lost on queue default: their messages are gone from broker \
         redis://127.0.0.1:6379/0 (it restarted at 02:51:20 UTC); Airflow requeues them after \
         its task_queued_timeout",
    );
    let first = refresh(at(85), 16, 16, 0, -40);
    // One poll, then a second on the same refresh: not yet (sends in flight).
    assert_eq!(judge(&mut rules, empty(), &first), ExecutorHealth::Healthy);
    assert_eq!(judge(&mut rules, empty(), &first), ExecutorHealth::Healthy);
    // A second refresh agrees: lost.
    assert_eq!(
        judge(&mut rules, empty(), &refresh(at(86), 16, 16, 0, -40)),
        lost
    );
    // It holds through a poll that could not see the broker, and past the
    // queued-too-long limit: one reason, the cause.
    let blind = Observation::from(ExecutorHealth::Healthy);
    assert_eq!(
        judge(&mut rules, blind, &refresh(at(87), 16, 16, 0, -40)),
        lost
    );
    // New work flows beside the lost: 3 more queued, waiting in the broker.
    assert_eq!(
        judge(
            &mut rules,
            broker(3, Some(0), 80),
            &refresh(at(300), 19, 19, 16, -40)
        ),
        lost
    );
    // Airflow's task_queued_timeout requeued them: healthy.
    assert_eq!(
        judge(
            &mut rules,
            broker(3, Some(0), 80),
            &refresh(at(700), 3, 3, 0, 650)
        ),
        ExecutorHealth::Healthy
    );
}

#[test]
fn work_missing_without_a_restart_is_named_without_one_and_a_transport_that_cannot_say_is_silent() {
    let mut rules = rules();
    // Two of five gone, the broker up since long before.
    for read in [10, 11, 12] {
        let health = judge(
            &mut rules,
            broker(2, Some(1), -3600),
            &refresh(at(read), 5, 5, 0, 0),
        );
        if read == 12 {
            assert_eq!(
                health,
                ExecutorHealth::unhealthy(
                    "2 task instances lost on queue default: queued in Airflow, their messages in \
                     no queue of broker redis://127.0.0.1:6379/0 and delivered to no worker; \
                     Airflow requeues them after its task_queued_timeout"
                )
            );
        }
    }
    // Freshly queued (not yet settled) are not counted: their send may be on its way.
    let mut rules = self::rules();
    for read in [10, 11, 12] {
        let health = judge(
            &mut rules,
            broker(0, Some(0), -3600),
            &refresh(at(read), 5, 0, 0, 9),
        );
        assert_eq!(health, ExecutorHealth::Healthy);
    }
    // AMQP: what it delivered is not known, so nothing is counted.
    let mut rules = self::rules();
    for read in [10, 11, 12] {
        let health = judge(
            &mut rules,
            broker(0, None, 0),
            &refresh(at(read), 5, 5, 0, 0),
        );
        assert_eq!(health, ExecutorHealth::Healthy);
    }
}
