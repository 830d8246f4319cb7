//! An executor's alarm, through the production path ([`Overseer`]): a check
//! that rings it (a held broker connection closed) is polled at once, out of
//! turn, with an hour between ticks; and the in-flight guard holds, so rings
//! while a poll is unanswered add no poll beside it, only one after its answer
//! (which may predate them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use overseer_core::check::Alarm;
use overseer_core::{Executor, ExecutorHealth, HealthCheck, HealthReport, Overseer};
use overseer_migration::{Migrator, MigratorTrait};
use overseer_testkit::wait::{self, PATIENCE};

/// Answers the verdict the test sets; while `hold` is set, waits before answering.
#[derive(Clone, Default)]
struct Settable {
    health: Arc<Mutex<Option<ExecutorHealth>>>,
    hold: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl HealthCheck for Settable {
    async fn get_health(&self) -> ExecutorHealth {
        while self.hold.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.health
            .lock()
            .unwrap()
            .clone()
            .unwrap_or(ExecutorHealth::Healthy)
    }
}

async fn until(what: &str, done: impl Fn() -> bool) {
    wait::until_true_async(what, PATIENCE, done).await;
}

fn verdict(report: &HealthReport) -> Option<ExecutorHealth> {
    let instance = report.executor.as_ref()?.instances.first()?;
    instance.checked_at.map(|_| instance.health.clone())
}

#[tokio::test]
async fn a_rung_alarm_polls_its_executor_at_once_and_never_twice() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let check = Settable::default();
    let alarm = Alarm::new();
    let overseer = Overseer::builder()
        .database(&db.url)
        .hostname("alarm-host")
        .executor(Executor::new("CeleryExecutor", check.clone()).with_alarm(alarm.clone()))
        // Ticks an hour apart: every poll after the first is the alarm's.
        .poll_interval(Duration::from_secs(3600))
        .poll_timeout(Duration::from_secs(5))
        .heartbeat_interval(Duration::from_millis(100))
        .refresh_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let stats = overseer.executor_stats()[0].1.clone();
    let polls = || stats.snapshot().polls;
    let reports = overseer.watch();
    until("the first tick's verdict", || {
        verdict(&reports.borrow()) == Some(ExecutorHealth::Healthy)
    })
    .await;
    assert_eq!(polls(), 1);

    // The broker went away: the check rings, and the verdict follows at once.
    *check.health.lock().unwrap() = Some(ExecutorHealth::unhealthy("broker gone"));
    alarm.ring();
    until("the alarm's verdict", || {
        verdict(&reports.borrow()) == Some(ExecutorHealth::unhealthy("broker gone"))
    })
    .await;
    assert_eq!(polls(), 2);

    // Rings while a poll is unanswered add none beside it: the guard holds.
    check.hold.store(true, Ordering::SeqCst);
    *check.health.lock().unwrap() = Some(ExecutorHealth::Healthy);
    alarm.ring();
    until("the third poll", || polls() == 3).await;
    for _ in 0..5 {
        alarm.ring();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(polls(), 3, "no poll beside the one in flight");
    // Its answer may predate those rings: one poll follows it, and one only.
    check.hold.store(false, Ordering::SeqCst);
    until("the poll after the held one", || polls() == 4).await;
    until("their verdict", || {
        verdict(&reports.borrow()) == Some(ExecutorHealth::Healthy)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        polls(),
        4,
        "one poll for every ring made during the held one"
    );
    overseer.shutdown().await.unwrap();
}
