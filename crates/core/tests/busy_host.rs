//! Overseer's own host being slow is never the executor's fault: a check the
//! host did not run in time (its check threads busy, its runtime starved) is
//! `unknown`, naming the host, and never `unhealthy`; an executor already
//! `unhealthy` keeps its verdict and its reason meanwhile; and a check that
//! did start in time and got no answer is still the executor's fault.
//!
//! The host's slowness is a [`CheckRunner`] that starts each check only after
//! a delay the test sets, on the supervisor's paused clock.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::System;
use overseer_core::actors::RestartPolicy;
use overseer_core::check::{AsyncChecks, CheckRunner};
use overseer_core::{Executor, ExecutorHealth};

use crate::supervision::{Hangs, Healthy, Scripted, every, paused, supervise_on};

/// A host that starts each check only after the delay it holds (in ms).
#[derive(Clone, Default)]
struct BusyHost(Arc<AtomicU64>);

impl BusyHost {
    fn delay(&self, delay: Duration) {
        self.0.store(delay.as_millis() as u64, Ordering::Relaxed);
    }
}

impl CheckRunner for BusyHost {
    fn run(&self, check: Pin<Box<dyn Future<Output = ()> + Send>>) {
        let delay = Duration::from_millis(self.0.load(Ordering::Relaxed));
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            check.await;
        });
    }
}

/// One executor polled every second, its timeout 500 ms, its checks
/// started by `host`.
fn on(
    host: &BusyHost,
    executor: Executor,
) -> (
    actix::Addr<overseer_core::actors::HealthSupervisor>,
    crate::supervision::Verdicts,
    Vec<Arc<overseer_core::stats::ExecutorStats>>,
) {
    supervise_on(
        every(Duration::from_secs(1), Duration::from_millis(500)),
        RestartPolicy::default(),
        vec![executor],
        &AsyncChecks::on(host.clone()),
    )
}

const HOST: &str =
    "not judged: Overseer's host did not run the check in time to answer within 500ms";

#[test]
fn a_check_the_host_runs_too_late_is_unknown_naming_the_host_never_unhealthy() {
    paused(|| async {
        let host = BusyHost::default();
        // Every check starts 2 s after its poll, four times the timeout.
        host.delay(Duration::from_secs(2));
        let (_supervisor, verdicts, stats) = on(&host, Executor::new("CeleryExecutor", Healthy));
        tokio::time::sleep(Duration::from_secs(20)).await;
        let seen = verdicts.of(0);
        assert_eq!(
            seen.first(),
            Some(&ExecutorHealth::unknown(HOST)),
            "before any answer, unknown naming the host: {seen:?}"
        );
        assert!(
            seen.iter()
                .all(|v| *v == ExecutorHealth::unknown(HOST) || *v == ExecutorHealth::Healthy),
            "never unhealthy: the executor answers healthy whenever its check runs: {seen:?}"
        );
        let stats = stats[0].snapshot();
        assert!(stats.host_late >= 5, "{stats:?}");
        assert_eq!(stats.timeouts, 0, "no timeout is the executor's: {stats:?}");
        assert_eq!(
            stats.late_replies, 0,
            "every late answer was taken: {stats:?}"
        );

        // The host catches up: healthy, poll after poll.
        host.delay(Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let before = verdicts.of(0).len();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = verdicts.of(0);
        assert!(
            after[before..]
                .iter()
                .all(|v| *v == ExecutorHealth::Healthy)
                && after.len() > before,
            "{after:?}"
        );
        System::current().stop();
    });
}

#[test]
fn a_check_started_in_time_that_gets_no_answer_is_the_executors_fault() {
    paused(|| async {
        let host = BusyHost::default();
        host.delay(Duration::from_millis(100));
        let (_supervisor, verdicts, stats) = on(&host, Executor::new("HungExecutor", Hangs));
        tokio::time::sleep(Duration::from_secs(5)).await;
        let seen = verdicts.of(0);
        assert!(
            !seen.is_empty()
                && seen
                    .iter()
                    .all(|v| *v == ExecutorHealth::unhealthy("no reply within 500ms")),
            "{seen:?}"
        );
        assert_eq!(stats[0].snapshot().host_late, 0);
        System::current().stop();
    });
}

#[test]
fn a_hung_check_started_late_is_the_executors_fault_once_it_has_had_its_time() {
    paused(|| async {
        let host = BusyHost::default();
        // Past half the timeout: too little left to answer in.
        host.delay(Duration::from_millis(400));
        let (_supervisor, verdicts, _) = on(&host, Executor::new("HungExecutor", Hangs));
        tokio::time::sleep(Duration::from_secs(5)).await;
        let seen = verdicts.of(0);
        let hung = ExecutorHealth::unhealthy("no reply within 500ms");
        assert_eq!(
            seen.first(),
            Some(&ExecutorHealth::unknown(HOST)),
            "{seen:?}"
        );
        assert!(
            seen.len() > 1 && seen[1..].iter().all(|v| *v == hung),
            "then unhealthy, for good: {seen:?}"
        );
        System::current().stop();
    });
}

#[test]
fn an_unhealthy_executor_keeps_its_verdict_and_reason_while_the_host_is_busy() {
    paused(|| async {
        let refused =
            ExecutorHealth::unhealthy("broker redis://broker:6379/0 refused the connection");
        let host = BusyHost::default();
        let (_supervisor, verdicts, stats) = on(
            &host,
            Executor::new("CeleryExecutor", Scripted::new([(refused.clone(), false)])),
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(verdicts.of(0).contains(&refused));

        // The host is busy for 10 s, then catches up; the broker is still down.
        host.delay(Duration::from_secs(2));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(stats[0].snapshot().host_late >= 3);
        host.delay(Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let seen = verdicts.of(0);
        assert!(
            seen.iter().all(|v| *v == refused),
            "the fault continues, with one reason, never unknown in between: {seen:?}"
        );
        System::current().stop();
    });
}

/// Waits a moment, then blocks its pool thread a while (less than the
/// watchdog's limit), then answers healthy: a dozen of them keep the pool's
/// two threads busy, each started in time and then queued behind the others.
#[derive(Clone)]
struct Busy;

#[async_trait::async_trait]
impl overseer_core::HealthCheck for Busy {
    async fn get_health(&self) -> ExecutorHealth {
        // Started at once (a wait), then back in the pool's queue behind the others.
        tokio::time::sleep(Duration::from_millis(5)).await;
        std::thread::sleep(Duration::from_millis(40));
        ExecutorHealth::Healthy
    }
}

/// On the production path (the watched pool of two check threads, real time):
/// twelve checks that each hold a thread for 40 ms take 240 ms to run through
/// the pool, longer than the 200 ms timeout. Each began at once, then waited
/// in the pool's queue for this host: none is blamed (no timeout is the
/// executors'), and every one reads healthy.
#[tokio::test]
async fn on_the_production_path_checks_queued_behind_a_busy_pool_are_not_blamed() {
    use overseer_migration::{Migrator, MigratorTrait};
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let mut executors: Vec<Executor> = (0..12)
        .map(|i| Executor::new(format!("busy{i}:LocalExecutor"), Busy))
        .collect();
    executors.push(Executor::new("CeleryExecutor", Healthy));
    let overseer = overseer_core::Overseer::builder()
        .database(&db.url)
        .hostname("sched-1")
        .executors(executors)
        .poll_interval(Duration::from_millis(500))
        .poll_timeout(Duration::from_millis(200))
        .heartbeat_interval(Duration::from_millis(100))
        .refresh_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let all = overseer.executor_stats();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    // Five rounds of polls, each with some checks the pool ran late.
    while all.iter().map(|(_, s)| s.snapshot().polls).min() < Some(5) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            overseer.stats()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let late: u64 = all.iter().map(|(_, s)| s.snapshot().host_late).sum();
    assert!(
        late > 0,
        "the pool kept some checks waiting: {:?}",
        overseer.stats()
    );
    for (name, stats) in &all {
        let stats = stats.snapshot();
        assert_eq!(stats.timeouts, 0, "{name:?} was never blamed: {stats:?}");
    }
    let report = overseer.report();
    let entry = report.executor.as_ref().unwrap();
    assert!(
        entry
            .instances
            .iter()
            .all(|i| i.health != ExecutorHealth::unhealthy("no reply within 200ms")),
        "{}",
        report.json()
    );
    overseer.shutdown().await.unwrap();
}
