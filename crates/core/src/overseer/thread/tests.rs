//! The core actors restarted: a supervisor or aggregator that stops or panics
//! (made to, by the `Crash` message this module defines and sends to their
//! current addresses) is started again by the actors' thread, counted,
//! and polling, reporting and writing resume. A whole `Overseer` runs, on
//! SQLite, in real time: the tests wait (boundedly) on counters, the report and
//! the table, and assert no durations.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use overseer_migration::{Migrator, MigratorTrait};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

use actix::prelude::*;

use crate::actors::{Aggregator, CoreActor, HealthSupervisor};
use crate::entity::job;
use crate::{Executor, ExecutorHealth, HealthCheck, HealthReport, JobType, Overseer};

/// How a core actor is made to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
enum Crash {
    /// `ctx.stop()`, as an actor that decides to end.
    Stop,
    /// A panic inside a handler.
    Panic,
}

impl Handler<Crash> for Aggregator {
    type Result = ();

    fn handle(&mut self, crash: Crash, ctx: &mut Context<Self>) {
        match crash {
            Crash::Stop => ctx.stop(),
            Crash::Panic => panic!("the aggregator panicked on purpose (a test)"),
        }
    }
}

impl Handler<Crash> for HealthSupervisor {
    type Result = ();

    fn handle(&mut self, crash: Crash, ctx: &mut Context<Self>) {
        match crash {
            Crash::Stop => ctx.stop(),
            Crash::Panic => panic!("the supervisor panicked on purpose (a test)"),
        }
    }
}

/// Makes `target`, as it runs now, end as `how` says.
fn crash(overseer: &Overseer, target: CoreActor, how: Crash) {
    let addresses = overseer.actors.addresses.borrow().clone();
    match target {
        CoreActor::Supervisor => addresses.supervisor.do_send(how),
        CoreActor::Aggregator => addresses.aggregator.do_send(how),
    }
}

/// The longest a test waits for something the actors do every 100 ms.
const PATIENCE: Duration = Duration::from_secs(30);

/// A check whose answer the test sets, and which waits while its gate is shut.
#[derive(Clone)]
struct Scripted {
    answer: Arc<Mutex<ExecutorHealth>>,
    gate: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Scripted {
    fn new(health: ExecutorHealth) -> Self {
        Self {
            answer: Arc::new(Mutex::new(health)),
            gate: Arc::new(tokio::sync::watch::channel(true).0),
        }
    }

    fn set(&self, health: ExecutorHealth) {
        *self.answer.lock().unwrap() = health;
    }

    /// Checks wait, from now, until [`Self::open`].
    fn shut(&self) {
        self.gate.send_replace(false);
    }

    fn open(&self) {
        self.gate.send_replace(true);
    }
}

#[async_trait::async_trait]
impl HealthCheck for Scripted {
    async fn get_health(&self) -> ExecutorHealth {
        let mut gate = self.gate.subscribe();
        let _ = gate.wait_for(|open| *open).await;
        self.answer.lock().unwrap().clone()
    }
}

async fn start(url: &str, check: Scripted, poll: Duration, timeout: Duration) -> Overseer {
    Overseer::builder()
        .database(url)
        .hostname("sched-1")
        .executor(Executor::new("CeleryExecutor", check).with_instance("redis://broker:6379/0"))
        .poll_interval(poll)
        .poll_timeout(timeout)
        .heartbeat_interval(Duration::from_millis(100))
        .refresh_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap()
}

/// The one executor's verdict in a report.
fn verdict(report: &HealthReport) -> Option<ExecutorHealth> {
    Some(report.executor.as_ref()?.instances.first()?.health.clone())
}

async fn report_until(
    overseer: &Overseer,
    what: &str,
    done: impl Fn(&HealthReport) -> bool,
) -> Arc<HealthReport> {
    let mut reports = overseer.watch();
    tokio::time::timeout(PATIENCE, async {
        loop {
            let report = reports.borrow_and_update().clone();
            if done(&report) {
                return report;
            }
            reports
                .changed()
                .await
                .expect("the reports' channel outlives a restart");
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{what}: not seen within {PATIENCE:?}; last: {}",
            overseer.report().json()
        )
    })
}

async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not seen within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The executor's row, once `done` holds for it.
async fn row_until(
    db: &sea_orm::DatabaseConnection,
    what: &str,
    done: impl Fn(&job::Model) -> bool,
) -> job::Model {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let rows = job::Entity::find()
            .filter(job::Column::JobType.eq(JobType::ExecutorJob.as_str()))
            .all(db)
            .await
            .unwrap();
        if let [row] = &rows[..]
            && done(row)
        {
            return row.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not seen within {PATIENCE:?}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh SQLite file and one executor polled every 100 ms (timeout 80 ms),
/// once its check, answering `healthy`, is in the report.
async fn healthy_on_quick_polls() -> (overseer_testkit::TestDb, Scripted, Overseer) {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let check = Scripted::new(ExecutorHealth::Healthy);
    let overseer = start(
        &db.url,
        check.clone(),
        Duration::from_millis(100),
        Duration::from_millis(80),
    )
    .await;
    report_until(&overseer, "healthy", |r| {
        verdict(r) == Some(ExecutorHealth::Healthy)
    })
    .await;
    (db, check, overseer)
}

#[tokio::test]
async fn a_supervisor_that_stops_or_panics_is_restarted_and_polling_resumes() {
    for how in [Crash::Stop, Crash::Panic] {
        let (db, check, overseer) = healthy_on_quick_polls().await;

        crash(&overseer, CoreActor::Supervisor, how);
        let stats = overseer.aggregator_stats();
        until("the supervisor restarted", || {
            stats.restarts.supervisor.load(Ordering::Relaxed) == 1
        })
        .await;

        // Polling resumes: a new answer reaches the report and the table.
        let executor = overseer.executor_stats()[0].1.clone();
        let polls = executor.polls.load(Ordering::Relaxed);
        let after = ExecutorHealth::unhealthy(format!("broker down after a {how:?}"));
        check.set(after.clone());
        report_until(&overseer, "the verdict made after the restart", |r| {
            verdict(r).as_ref() == Some(&after)
        })
        .await;
        // A poll counted before `polls` was read may have run the check
        // after `set`: the next poll is what shows that polling goes on.
        until("a poll after the restart", || {
            executor.polls.load(Ordering::Relaxed) > polls
        })
        .await;
        row_until(&db.conn, "the verdict written", |row| {
            row.executor_health().unwrap() == after
        })
        .await;
        assert_eq!(
            stats.restarts.aggregator.load(Ordering::Relaxed),
            0,
            "{how:?}: the aggregator ran on"
        );
        overseer.shutdown().await.unwrap();
    }
}

/// A check hung across a supervisor restart: the new supervisor knows of no
/// poll in flight and polls again, but the executor runs the hung check once,
/// not once more per restart (each a task or thread held), and its answer,
/// when it comes, reaches the new supervisor and the report.
#[tokio::test]
async fn a_hung_check_is_run_once_across_supervisor_restarts() {
    let (_db, check, overseer) = healthy_on_quick_polls().await;
    check.shut();
    let executor = overseer.executor_stats()[0].1.clone();
    until("the check hung", || {
        executor.checks_running.load(Ordering::Relaxed) == 1
            && executor.skipped.load(Ordering::Relaxed) > 0
    })
    .await;

    let stats = overseer.aggregator_stats();
    for restart in 1..=2 {
        crash(&overseer, CoreActor::Supervisor, Crash::Stop);
        until("the supervisor restarted", || {
            stats.restarts.supervisor.load(Ordering::Relaxed) == restart
        })
        .await;
        // The new supervisor polls, times out and skips, as the old one did.
        let skipped = executor.skipped.load(Ordering::Relaxed);
        until("the new supervisor's skips", || {
            executor.skipped.load(Ordering::Relaxed) > skipped
        })
        .await;
        assert_eq!(
            executor.checks_running.load(Ordering::Relaxed),
            1,
            "after restart {restart}: still the one hung check"
        );
    }
    report_until(&overseer, "unhealthy while it hangs", |r| {
        verdict(r).is_some_and(|v| v.as_str() == "unhealthy")
    })
    .await;

    let after = ExecutorHealth::unhealthy("broker answered after the hang");
    check.set(after.clone());
    check.open();
    report_until(&overseer, "the hung check's answer", |r| {
        verdict(r).as_ref() == Some(&after)
    })
    .await;
    assert_eq!(executor.checks_running_max.load(Ordering::Relaxed), 1);
    overseer.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_aggregator_that_stops_or_panics_is_restarted_with_its_verdicts_and_reporting_resumes() {
    for how in [Crash::Stop, Crash::Panic] {
        let db = overseer_testkit::sqlite().await;
        Migrator::up(&db.conn, None).await.unwrap();
        let check = Scripted::new(ExecutorHealth::unhealthy("broker down before"));
        // Long polls: after the restart, the new supervisor's first poll waits
        // (the gate is shut) for up to 10 s, and the verdict held meanwhile is
        // the one the new aggregator took back.
        let overseer = start(
            &db.url,
            check.clone(),
            Duration::from_secs(20),
            Duration::from_secs(10),
        )
        .await;
        row_until(&db.conn, "the first verdict written", |row| {
            row.executor_health == "unhealthy"
        })
        .await;

        check.shut();
        crash(&overseer, CoreActor::Aggregator, how);
        let stats = overseer.aggregator_stats();
        // The supervisor is started again with the new aggregator.
        until("the aggregator and the supervisor restarted", || {
            stats.restarts.aggregator.load(Ordering::Relaxed) == 1
                && stats.restarts.supervisor.load(Ordering::Relaxed) == 1
        })
        .await;

        // The new aggregator publishes (its heartbeats change the report): its
        // first report still holds the verdict, taken back from the table.
        let restarted = Utc::now();
        let report = report_until(&overseer, "a report of the new aggregator", |r| {
            r.generated_at > restarted
        })
        .await;
        assert_eq!(
            verdict(&report),
            Some(ExecutorHealth::unhealthy("broker down before")),
            "{how:?}: {}",
            report.json()
        );
        assert!(
            report.executor.as_ref().unwrap().instances[0]
                .checked_at
                .is_some()
        );

        // Reporting and writing resume with the next verdict.
        let after = ExecutorHealth::unhealthy(format!("broker down after a {how:?}"));
        check.set(after.clone());
        check.open();
        report_until(&overseer, "the verdict made after the restart", |r| {
            verdict(r).as_ref() == Some(&after)
        })
        .await;
        row_until(&db.conn, "the verdict written after the restart", |row| {
            row.executor_health().unwrap() == after
        })
        .await;
        overseer.shutdown().await.unwrap();
        row_until(&db.conn, "the row ended", |row| {
            row.state.as_deref() == Some("success")
        })
        .await;
    }
}

/// A transition queued for the history and not yet written when the
/// aggregator panics is not lost: the aggregator started in its place writes
/// it (with the reason and time of the verdict that made it), once, and counts
/// nothing dropped. Nor is the verdict, unwritten too: the new aggregator's
/// report shows it (taken from the last report, later than the table's), and
/// the table gets it.
#[tokio::test]
async fn transitions_queued_when_the_aggregator_panics_are_written_by_the_next() {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let check = Scripted::new(ExecutorHealth::unhealthy("broker down before the panic"));
    // Heartbeats (and so writes) every 5 s: the first verdict's transition
    // waits in the queue when the aggregator panics. Polls every 20 s: after
    // the panic the new supervisor's poll waits (the gate is shut) and its
    // timeout's verdict, 10 s on, is of the same state, so no transition of
    // its own.
    let overseer = Overseer::builder()
        .database(&db.url)
        .hostname("sched-1")
        .executor(
            Executor::new("CeleryExecutor", check.clone()).with_instance("redis://broker:6379/0"),
        )
        .poll_interval(Duration::from_secs(20))
        .poll_timeout(Duration::from_secs(10))
        .heartbeat_interval(Duration::from_secs(5))
        .refresh_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let stats = overseer.aggregator_stats();
    until("the first verdict's transition queued", || {
        stats.transitions_pending.load(Ordering::Relaxed) == 1
    })
    .await;
    check.shut();
    assert_eq!(
        stats.transitions_written.load(Ordering::Relaxed),
        0,
        "the transition must still wait when the aggregator panics"
    );
    crash(&overseer, CoreActor::Aggregator, Crash::Panic);
    until("the aggregator restarted", || {
        stats.restarts.aggregator.load(Ordering::Relaxed) == 1
    })
    .await;
    let restarted = Utc::now();
    let report = report_until(&overseer, "a report of the new aggregator", |r| {
        r.generated_at > restarted
    })
    .await;
    let before = ExecutorHealth::unhealthy("broker down before the panic");
    assert_eq!(verdict(&report), Some(before.clone()), "{}", report.json());
    row_until(
        &db.conn,
        "the verdict written by the new aggregator",
        |row| row.executor_health().unwrap() == before,
    )
    .await;

    let deadline = tokio::time::Instant::now() + PATIENCE;
    let written = loop {
        let written = crate::history::read(&db.conn, &crate::history::HistoryFilter::default())
            .await
            .unwrap();
        if !written.is_empty() {
            break written;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no transition written within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(written.len(), 1, "{written:?}");
    let transition = &written[0];
    assert_eq!(
        (transition.from.as_str(), transition.to.as_str()),
        ("unknown", "unhealthy")
    );
    assert_eq!(
        transition.reason.as_deref(),
        Some("broker down before the panic"),
        "the transition queued before the panic, not one made after it"
    );
    assert_eq!(stats.transitions_dropped.load(Ordering::Relaxed), 0);
    check.open();
    overseer.shutdown().await.unwrap();
}
