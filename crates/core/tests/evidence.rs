//! The evidence beside a verdict, through the real actors: a check's detail
//! reaches the report as it changes (the verdict unchanged), and the rules on
//! work flowing turn it into a verdict there.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use overseer_core::detail::{Detail, Observation, QueueDetail};
use overseer_core::{Executor, ExecutorHealth, HealthCheck, HealthReport};
use overseer_migration::{Migrator, MigratorTrait};
use support::{PATIENCE, quick, report_until};

/// A check that answers healthy, with one queue whose depth and consumers the test sets.
#[derive(Clone)]
struct Queue(Arc<Mutex<(u64, Option<u32>)>>);

impl Queue {
    fn set(&self, depth: u64, consumers: Option<u32>) {
        *self.0.lock().unwrap() = (depth, consumers);
    }
}

#[async_trait::async_trait]
impl HealthCheck for Queue {
    async fn get_health(&self) -> ExecutorHealth {
        self.observe().await.health
    }

    async fn observe(&self) -> Observation {
        let (depth, consumers) = *self.0.lock().unwrap();
        Observation::new(
            ExecutorHealth::Healthy,
            Detail {
                queues: vec![QueueDetail {
                    name: "gpu".into(),
                    broker: "redis://:hunter2@broker:6379/0".into(),
                    depth: Some(depth),
                    consumers,
                }],
                ..Detail::default()
            },
        )
    }
}

fn queue_of(report: &HealthReport) -> Option<QueueDetail> {
    let instance = report.executor.as_ref()?.instances.first()?;
    instance.detail.as_ref()?.queues.first().cloned()
}

fn health_of(report: &HealthReport) -> Option<ExecutorHealth> {
    Some(report.executor.as_ref()?.instances.first()?.health.clone())
}

#[tokio::test]
async fn a_check_s_evidence_reaches_the_report_and_judges_whether_work_flows() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let queue = Queue(Arc::new(Mutex::new((3, Some(1)))));
    let overseer = quick(&db.url, "evidence-host")
        .executor(
            Executor::new("CeleryExecutor", queue.clone())
                .with_max_queued_age(Duration::from_secs(3)),
        )
        .start()
        .await
        .unwrap();

    // (Each phase is seen well within max_queued_age, 3 s, of its change:
    // a depth that holds longer than that would be a stall.)
    let report = report_until(&overseer, "the first evidence", |r| {
        queue_of(r).is_some_and(|q| q.depth == Some(3))
    })
    .await;
    assert_eq!(health_of(&report), Some(ExecutorHealth::Healthy));
    // Credentials in a check's detail are masked on the way, as in a reason.
    let shown = queue_of(&report).unwrap();
    assert_eq!(shown.broker, "redis://:***@broker:6379/0");
    assert!(!report.json().contains("hunter2"));

    // The depth changes, the verdict does not: the report follows all the same.
    queue.set(2, Some(1));
    report_until(&overseer, "the new depth", |r| {
        queue_of(r).is_some_and(|q| q.depth == Some(2))
            && health_of(r) == Some(ExecutorHealth::Healthy)
    })
    .await;

    // Messages and no consumer for max_queued_age: unhealthy, naming the queue
    // and that nobody consumes it. Both rules are asked at every poll: the depth
    // has not gone down since it was 2 either, and whichever clock reaches the
    // limit first gives the reason.
    queue.set(5, Some(0));
    let report = report_until(&overseer, "a queue nobody consumes", |r| {
        matches!(health_of(r), Some(ExecutorHealth::Unhealthy { .. }))
    })
    .await;
    let Some(ExecutorHealth::Unhealthy { reason }) = health_of(&report) else {
        unreachable!()
    };
    assert!(
        reason == "queue gpu: messages waiting and no worker consumed it in 3s"
            || reason == "queue gpu: messages waiting, none taken in 3s",
        "{reason}"
    );
    assert_eq!(queue_of(&report).unwrap().consumers, Some(0));

    // A consumer is back and takes messages: healthy again.
    queue.set(4, Some(1));
    report_until(&overseer, "consumed again", |r| {
        health_of(r) == Some(ExecutorHealth::Healthy)
    })
    .await;
    overseer.shutdown().await.unwrap();
}

/// A check that answers healthy with a note the test sets.
#[derive(Clone)]
struct Noted(Arc<Mutex<Option<String>>>);

#[async_trait::async_trait]
impl HealthCheck for Noted {
    async fn get_health(&self) -> ExecutorHealth {
        ExecutorHealth::Healthy
    }

    async fn observe(&self) -> Observation {
        let note = self.0.lock().unwrap().clone();
        Observation {
            health: ExecutorHealth::Healthy,
            detail: None,
            note: note.map(Into::into),
            pending: false,
            host_busy: false,
        }
    }
}

/// What is worth knowing beside a healthy verdict (a failover broker down, an
/// edge worker gone quiet) is the instance's reason, in the report and in the
/// row, and goes when it no longer holds.
#[tokio::test]
async fn a_healthy_verdict_s_note_is_its_reason_in_the_report_and_the_row() {
    use overseer_core::entity::job;
    use sea_orm::EntityTrait;
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let note = "healthy through failover; not answering: broker redis://standby:6379/0";
    let check = Noted(Arc::new(Mutex::new(Some(note.into()))));
    let overseer = quick(&db.url, "noted-host")
        .executor(Executor::new("CeleryExecutor", check.clone()))
        .start()
        .await
        .unwrap();
    let reason_of = |r: &HealthReport| {
        r.executor
            .as_ref()
            .and_then(|e| e.instances.first())
            .map(|i| (i.health.clone(), i.reason.clone()))
    };
    report_until(&overseer, "the note as the reason", |r| {
        reason_of(r) == Some((ExecutorHealth::Healthy, Some(note.into())))
    })
    .await;
    let json: serde_json::Value = serde_json::from_str(overseer.report().json()).unwrap();
    let instance = &json["executor"]["instances"][0];
    assert_eq!(
        (instance["health"].as_str(), instance["reason"].as_str()),
        (Some("healthy"), Some(note))
    );
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let rows = job::Entity::find().all(&db.conn).await.unwrap();
        if rows
            .iter()
            .any(|r| r.executor_health_reason.as_deref() == Some(note))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the note never reached the row: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    *check.0.lock().unwrap() = None;
    report_until(&overseer, "no note, no reason", |r| {
        reason_of(r) == Some((ExecutorHealth::Healthy, None))
    })
    .await;
    overseer.shutdown().await.unwrap();
}

/// A check of someone else's (embedded Overseer) whose reason is 100 KB over
/// many lines, and one that panics with such a message: the report's reason is
/// one line of at most [`overseer_core::reason::MAX_CHARS`] characters either way.
#[derive(Clone)]
struct Rambling {
    panics: bool,
}

#[async_trait::async_trait]
impl HealthCheck for Rambling {
    async fn get_health(&self) -> ExecutorHealth {
        let text = "broker said:\nERR fake log line\r\n\x1b[31m".repeat(2_500);
        if self.panics {
            panic!("{text}");
        }
        ExecutorHealth::unhealthy(text)
    }
}

#[tokio::test]
async fn any_check_s_reason_reaches_the_report_on_one_line_and_capped() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let overseer = quick(&db.url, "rambling-host")
        .executor(Executor::new(
            "RamblingExecutor",
            Rambling { panics: false },
        ))
        .executor(Executor::new(
            "PanickingExecutor",
            Rambling { panics: true },
        ))
        .start()
        .await
        .unwrap();
    // Both checks' own verdicts (a poll that timed out says "no reply" instead).
    let report = report_until(&overseer, "both checks' verdicts", |r| {
        r.executor.as_ref().is_some_and(|e| {
            e.instances
                .iter()
                .filter(|i| {
                    matches!(&i.health, ExecutorHealth::Unhealthy { reason } if reason.contains("broker said"))
                })
                .count()
                == 2
        })
    })
    .await;
    for instance in &report.executor.as_ref().unwrap().instances {
        let ExecutorHealth::Unhealthy { reason } = &instance.health else {
            unreachable!()
        };
        assert!(
            reason.chars().count() <= overseer_core::reason::MAX_CHARS,
            "{}: {} characters",
            instance.executor.as_deref().unwrap_or_default(),
            reason.chars().count()
        );
        assert!(
            !reason.chars().any(char::is_control),
            "{}: {reason:?}",
            instance.executor.as_deref().unwrap_or_default()
        );
        assert!(
            reason.contains("broker said: ERR fake log line"),
            "{reason}"
        );
    }
    overseer.shutdown().await.unwrap();
}
