//! The supervisor's guarantees, with paused time so a thousand ticks take no
//! time: a hung check holds one task or thread forever and delays nothing, a
//! panicking check restarts its actor and then backs off, healthy executors keep
//! their pace beside a hung one.
//!
//! Paused time needs the checks on the actors' own (paused) runtime. Production
//! runs them on a watched pool of threads of their own, so the last tests take
//! that path, the one [`Overseer`] builds, in real time: they wait (boundedly)
//! on the counters and the report, and assert no durations. Among them, async
//! checks that block their threads, more of them than the pool has threads.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use actix::prelude::*;
use overseer_core::actors::{
    Answered, CheckHealth, ExecutorActor, HealthSupervisor, NewVerdict, PollSettings, RestartPolicy,
};
use overseer_core::check::AsyncChecks;
use overseer_core::stats::ExecutorStats;
use overseer_core::{
    BlockingHealthCheck, Executor, ExecutorHealth, HealthCheck, HealthReport, Overseer,
};
use overseer_migration::{Migrator, MigratorTrait};

/// Runs `test` in an actix system whose clock is paused: sleeping advances it
/// at once to the next timer.
pub(crate) fn paused<F: Future<Output = ()>>(test: impl FnOnce() -> F) {
    actix_rt::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
    })
    .block_on(test());
}

/// Collects every verdict the supervisor sends.
#[derive(Default, Clone)]
pub(crate) struct Verdicts(Arc<Mutex<Vec<NewVerdict>>>);

impl Actor for Collector {
    type Context = Context<Self>;
}

struct Collector(Verdicts);

impl Handler<NewVerdict> for Collector {
    type Result = ();
    fn handle(&mut self, verdict: NewVerdict, _: &mut Context<Self>) {
        self.0.0.lock().unwrap().push(verdict);
    }
}

impl Verdicts {
    pub(crate) fn of(&self, executor: usize) -> Vec<ExecutorHealth> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|v| v.executor == executor)
            .map(|v| v.health.clone())
            .collect()
    }
}

/// Starts one supervisor over `executors`. Checks are spawned through a runtime
/// handle as in production, but on this paused runtime, so that its clock rules
/// them too.
fn supervise(
    settings: PollSettings,
    policy: RestartPolicy,
    executors: Vec<Executor>,
) -> (Addr<HealthSupervisor>, Verdicts, Vec<Arc<ExecutorStats>>) {
    let checks = AsyncChecks::tasks_of(tokio::runtime::Handle::current());
    supervise_on(settings, policy, executors, &checks)
}

/// [`supervise`], with the async checks run by `checks`.
pub(crate) fn supervise_on(
    settings: PollSettings,
    policy: RestartPolicy,
    executors: Vec<Executor>,
    checks: &AsyncChecks,
) -> (Addr<HealthSupervisor>, Verdicts, Vec<Arc<ExecutorStats>>) {
    let verdicts = Verdicts::default();
    let sink = Collector(verdicts.clone()).start().recipient();
    let mut all_stats = Vec::new();
    let polled = executors
        .into_iter()
        .map(|executor| {
            let stats = Arc::new(ExecutorStats::default());
            all_stats.push(stats.clone());
            let label = executor.label();
            let addr = ExecutorActor::new(executor, stats.clone(), policy, checks.clone())
                .start_supervised();
            (addr, stats, label)
        })
        .collect();
    (
        HealthSupervisor::new(settings, polled, sink).start(),
        verdicts,
        all_stats,
    )
}

pub(crate) fn every(poll_interval: Duration, poll_timeout: Duration) -> PollSettings {
    PollSettings {
        poll_interval,
        poll_timeout,
        ..PollSettings::default()
    }
}

#[derive(Clone)]
pub(crate) struct Hangs;

#[async_trait::async_trait]
impl HealthCheck for Hangs {
    async fn get_health(&self) -> ExecutorHealth {
        std::future::pending().await
    }
}

#[derive(Clone)]
pub(crate) struct Healthy;

#[async_trait::async_trait]
impl HealthCheck for Healthy {
    async fn get_health(&self) -> ExecutorHealth {
        ExecutorHealth::Healthy
    }
}

/// Answers its polls from a script, one observation a poll, the last one
/// for good: `(health, pending)`.
#[derive(Clone)]
pub(crate) struct Scripted(Arc<Mutex<std::collections::VecDeque<(ExecutorHealth, bool)>>>);

impl Scripted {
    pub(crate) fn new(script: impl IntoIterator<Item = (ExecutorHealth, bool)>) -> Self {
        Self(Arc::new(Mutex::new(script.into_iter().collect())))
    }
}

#[async_trait::async_trait]
impl HealthCheck for Scripted {
    async fn get_health(&self) -> ExecutorHealth {
        self.observe().await.health
    }

    async fn observe(&self) -> overseer_core::Observation {
        let mut script = self.0.lock().unwrap();
        let (health, pending) = if script.len() > 1 {
            script.pop_front().unwrap()
        } else {
            script.front().cloned().unwrap()
        };
        overseer_core::Observation {
            pending,
            ..health.into()
        }
    }
}

#[test]
fn a_pending_verdict_is_never_reported_and_changes_none_held() {
    paused(|| async {
        // A restart during an outage: the check cannot judge for three polls
        // (it would say healthy from the brokers alone), then finds the fault.
        // Nothing is reported before it: no false recovery in between.
        let down = ExecutorHealth::unhealthy(
            "celery@w1 sent no heartbeat since 2026-12-02 06:03:53 UTC (one every 2s)",
        );
        let settings = every(Duration::from_secs(1), Duration::from_millis(500));
        let (_supervisor, verdicts, _) = supervise(
            settings,
            RestartPolicy::default(),
            vec![
                Executor::new(
                    "CeleryExecutor",
                    Scripted::new([
                        (ExecutorHealth::Healthy, true),
                        (ExecutorHealth::Healthy, true),
                        (ExecutorHealth::Healthy, true),
                        (down.clone(), false),
                        (ExecutorHealth::Healthy, true),
                        (ExecutorHealth::Healthy, true),
                        (down.clone(), false),
                    ]),
                ),
                Executor::new(
                    "CeleryExecutor",
                    Scripted::new([
                        (ExecutorHealth::Healthy, true),
                        (ExecutorHealth::Healthy, false),
                    ]),
                ),
            ],
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
        // Pending polls neither come before the first verdict nor, after it,
        // replace the verdict held: it stays unhealthy throughout.
        let first = verdicts.of(0);
        assert!(
            !first.is_empty() && first.iter().all(|v| *v == down),
            "{first:?}"
        );
        let second = verdicts.of(1);
        assert!(
            !second.is_empty() && second.iter().all(|v| *v == ExecutorHealth::Healthy),
            "{second:?}"
        );
        System::current().stop();
    });
}

#[test]
fn a_check_that_never_returns_is_unhealthy_after_the_timeout_then_skipped_for_1000_ticks() {
    paused(|| async {
        let settings = every(Duration::from_secs(10), Duration::from_secs(5));
        let (_supervisor, verdicts, stats) = supervise(
            settings,
            RestartPolicy::default(),
            vec![Executor::new("HungExecutor", Hangs)],
        );

        // The first poll at 0 s, then 1,000 ticks at 10 s, 20 s, ... 10,000 s.
        tokio::time::sleep(Duration::from_secs(10_000) + Duration::from_secs(5)).await;

        assert_eq!(
            verdicts.of(0),
            [ExecutorHealth::unhealthy("no reply within 5s")]
        );
        let stats = stats[0].snapshot();
        assert_eq!(stats.polls, 1, "one CheckHealth ever sent");
        assert_eq!(stats.skipped, 1_000, "every later tick skipped and counted");
        assert_eq!(stats.timeouts, 1);
        assert_eq!(stats.checks_running, 1, "the hung check holds one task");
        assert_eq!(stats.checks_running_max, 1, "and never more than one");
        System::current().stop();
    });
}

/// A blocking check that blocks until the test lets it go.
/// Blocks until released, and notes each thread it ran on: the threads of the
/// system under test, whatever else runs in this process (`cargo test` runs
/// the tests of a file in one process, each starting threads of its own).
#[derive(Clone)]
struct BlocksUntilReleased {
    released: Arc<Mutex<mpsc::Receiver<()>>>,
    ran_on: Arc<Mutex<HashSet<std::thread::ThreadId>>>,
}

impl BlockingHealthCheck for BlocksUntilReleased {
    fn get_health(&self) -> ExecutorHealth {
        self.ran_on
            .lock()
            .unwrap()
            .insert(std::thread::current().id());
        let _ = self.released.lock().unwrap().recv();
        ExecutorHealth::Healthy
    }
}

/// Threads of this process named `overseer-check`.
fn check_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.unwrap().path().join("comm")).ok())
        .filter(|name| name.trim() == "overseer-check")
        .count()
}

#[test]
fn a_blocking_check_that_never_returns_holds_one_thread_over_1000_ticks() {
    let (release, released) = mpsc::channel();
    let ran_on = Arc::new(Mutex::new(HashSet::new()));
    let check = BlocksUntilReleased {
        released: Arc::new(Mutex::new(released)),
        ran_on: ran_on.clone(),
    };
    let check_threads = move || ran_on.lock().unwrap().len();
    paused(move || async move {
        let settings = every(Duration::from_secs(10), Duration::from_secs(5));
        let (_supervisor, verdicts, stats) = supervise(
            settings,
            RestartPolicy::default(),
            vec![Executor::blocking("BlockedExecutor", check)],
        );

        tokio::time::sleep(Duration::from_secs(1)).await;
        // The check's thread notes itself once it runs: give it (real) time to.
        for _ in 0..500 {
            if check_threads() > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let threads_at_start = check_threads();
        assert_eq!(threads_at_start, 1, "the check runs on a thread of its own");

        tokio::time::sleep(Duration::from_secs(10_000)).await;
        assert_eq!(
            check_threads(),
            threads_at_start,
            "no thread added by 1,000 ticks"
        );
        assert_eq!(stats[0].snapshot().checks_running, 1, "one thread held");
        let snapshot = stats[0].snapshot();
        assert_eq!(snapshot.polls, 1);
        assert_eq!(snapshot.skipped, 1_000);
        assert_eq!(snapshot.checks_running_max, 1);
        assert_eq!(
            verdicts.of(0),
            [ExecutorHealth::unhealthy("no reply within 5s")]
        );
        System::current().stop();
    });
    drop(release);
}

/// Panics on its first call of each incarnation while `panics_left` lasts; counts
/// how often it was built, to show a restart starts from a fresh check.
#[derive(Clone)]
struct PanicsThenHealthy {
    panics_left: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl HealthCheck for PanicsThenHealthy {
    async fn get_health(&self) -> ExecutorHealth {
        if self
            .panics_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            panic!("broker client poisoned");
        }
        ExecutorHealth::Healthy
    }
}

#[test]
fn a_panicking_check_is_unhealthy_restarts_its_actor_fresh_and_then_answers() {
    paused(|| async {
        let built = Arc::new(AtomicUsize::new(0));
        let panics_left = Arc::new(AtomicUsize::new(1));
        let executor = {
            let built = built.clone();
            Executor::with_factory("CeleryExecutor", move || {
                built.fetch_add(1, Ordering::SeqCst);
                PanicsThenHealthy {
                    panics_left: panics_left.clone(),
                }
            })
        };
        let settings = every(Duration::from_secs(10), Duration::from_secs(5));
        let (_supervisor, verdicts, stats) =
            supervise(settings, RestartPolicy::default(), vec![executor]);

        tokio::time::sleep(Duration::from_secs(25)).await;
        assert_eq!(
            verdicts.of(0),
            [
                ExecutorHealth::unhealthy("health check panicked: broker client poisoned"),
                ExecutorHealth::Healthy,
                ExecutorHealth::Healthy,
            ]
        );
        let snapshot = stats[0].snapshot();
        assert_eq!((snapshot.panics, snapshot.restarts), (1, 1));
        assert_eq!(
            built.load(Ordering::SeqCst),
            2,
            "the restart built a fresh check"
        );
        System::current().stop();
    });
}

#[derive(Clone)]
struct AlwaysPanics;

#[async_trait::async_trait]
impl HealthCheck for AlwaysPanics {
    async fn get_health(&self) -> ExecutorHealth {
        panic!("always")
    }
}

#[test]
fn past_the_restart_limit_the_actor_backs_off_instead_of_spinning() {
    paused(|| async {
        let policy = RestartPolicy {
            max_restarts: 5,
            window: Duration::from_secs(60),
            backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(600),
        };
        let settings = every(Duration::from_secs(1), Duration::from_millis(500));
        let (_supervisor, verdicts, stats) =
            supervise(settings, policy, vec![Executor::new("X", AlwaysPanics)]);

        // Polled every second for 30 s: six panics reach the limit, then it backs off.
        tokio::time::sleep(Duration::from_secs(30)).await;
        let snapshot = stats[0].snapshot();
        assert_eq!(
            snapshot.panics, 6,
            "five restarts allowed, the sixth starts the back-off"
        );
        assert_eq!(snapshot.restarts, 6);
        let last = verdicts.of(0).pop().unwrap();
        assert!(
            last.reason()
                .unwrap()
                .starts_with("health check panicked 6 times within 60s; not run again for"),
            "{last}"
        );

        // Over ten more minutes, polled 600 times, it ran the check four more times:
        // at 35 s, then after back-offs of 60 s, 120 s and 240 s (95 s, 215 s, 455 s).
        tokio::time::sleep(Duration::from_secs(600)).await;
        let later = stats[0].snapshot();
        assert_eq!(
            later.panics, 10,
            "backed off: {} panics in {} polls",
            later.panics, later.polls
        );
        assert_eq!(later.polls, 630);
        System::current().stop();
    });
}

#[test]
fn a_hung_executor_does_not_slow_its_healthy_neighbours() {
    paused(|| async {
        let settings = every(Duration::from_secs(1), Duration::from_millis(500));
        let executors = vec![
            Executor::new("CeleryExecutor", Healthy),
            Executor::new("HungExecutor", Hangs),
            Executor::new("LocalExecutor", Healthy),
        ];
        let (_supervisor, verdicts, stats) =
            supervise(settings, RestartPolicy::default(), executors);

        tokio::time::sleep(Duration::from_millis(100_500)).await;
        for healthy in [0, 2] {
            let seen = verdicts.of(healthy);
            assert_eq!(seen.len(), 101, "one verdict per tick, on time");
            assert!(seen.iter().all(|v| *v == ExecutorHealth::Healthy));
            assert_eq!(stats[healthy].snapshot().skipped, 0);
        }
        assert_eq!(verdicts.of(1).len(), 1);
        assert_eq!(stats[1].snapshot().skipped, 100);
        System::current().stop();
    });
}

/// Sleeps longer than the poll timeout, then answers healthy.
#[derive(Clone)]
struct Slow(Duration);

#[async_trait::async_trait]
impl HealthCheck for Slow {
    async fn get_health(&self) -> ExecutorHealth {
        tokio::time::sleep(self.0).await;
        ExecutorHealth::Healthy
    }
}

#[test]
fn a_late_answer_is_dropped_and_clears_the_guard_for_the_next_tick() {
    paused(|| async {
        let settings = every(Duration::from_secs(10), Duration::from_secs(5));
        let (_supervisor, verdicts, stats) = supervise(
            settings,
            RestartPolicy::default(),
            vec![Executor::new("Slow", Slow(Duration::from_secs(7)))],
        );

        tokio::time::sleep(Duration::from_secs(36)).await;
        // Polls at 0, 10, 20, 30: each times out at +5 s and answers late at +7 s.
        let snapshot = stats[0].snapshot();
        assert_eq!(snapshot.polls, 4);
        assert_eq!(
            snapshot.skipped, 0,
            "each late answer cleared the guard before the next tick"
        );
        assert_eq!(snapshot.timeouts, 4);
        assert_eq!(snapshot.late_replies, 3);
        assert!(
            verdicts
                .of(0)
                .iter()
                .all(|v| *v == ExecutorHealth::unhealthy("no reply within 5s"))
        );
        System::current().stop();
    });
}

#[test]
fn damping_reports_a_change_only_after_enough_consecutive_answers() {
    paused(|| async {
        let bad = || ExecutorHealth::unhealthy("broker refused");
        let script = vec![
            bad(),
            bad(),
            ExecutorHealth::Healthy,
            bad(),
            bad(),
            bad(),
            ExecutorHealth::Healthy,
            ExecutorHealth::Healthy,
        ];
        let settings = PollSettings {
            failures_before_unhealthy: 3,
            successes_before_healthy: 2,
            ..every(Duration::from_secs(10), Duration::from_secs(5))
        };
        let (_supervisor, verdicts, _) = supervise(
            settings,
            RestartPolicy::default(),
            vec![Executor::new(
                "CeleryExecutor",
                Scripted::new(script.into_iter().map(|h| (h, false))),
            )],
        );
        tokio::time::sleep(Duration::from_secs(75)).await;
        // Two failures then a success: nothing reported. Three failures: unhealthy.
        // One success: still unhealthy, not reported; the second: healthy.
        assert_eq!(verdicts.of(0), [bad(), ExecutorHealth::Healthy]);
        System::current().stop();
    });
}

/// What an executor's actor answers when it drops a poll unanswered.
const DROPPED: &str = "the executor's actor did not answer: it stopped with the poll unanswered";

#[derive(Clone)]
struct AlwaysPanicsAtOnce;

#[async_trait::async_trait]
impl HealthCheck for AlwaysPanicsAtOnce {
    async fn get_health(&self) -> ExecutorHealth {
        panic!("poisoned")
    }
}

#[test]
fn a_poll_its_executor_actor_drops_unanswered_is_answered_and_clears_the_guard() {
    paused(|| async {
        // Not supervised: after its check panics, the actor is gone for good,
        // and its mailbox closed. Each later poll is refused, and answered all
        // the same, at once: as `send()`'s `MailboxError` used to be.
        let stats = Arc::new(ExecutorStats::default());
        let checks = AsyncChecks::tasks_of(tokio::runtime::Handle::current());
        let addr = ExecutorActor::new(
            Executor::new("CeleryExecutor", AlwaysPanicsAtOnce),
            stats.clone(),
            RestartPolicy::default(),
            checks,
        )
        .start();
        let verdicts = Verdicts::default();
        let sink = Collector(verdicts.clone()).start().recipient();
        let settings = every(Duration::from_secs(10), Duration::from_secs(5));
        let _supervisor = HealthSupervisor::new(
            settings,
            vec![(addr, stats.clone(), "CeleryExecutor".into())],
            sink,
        )
        .start();

        tokio::time::sleep(Duration::from_secs(45)).await;
        assert_eq!(
            verdicts.of(0),
            [
                ExecutorHealth::unhealthy("health check panicked: poisoned"),
                ExecutorHealth::unhealthy(DROPPED),
                ExecutorHealth::unhealthy(DROPPED),
                ExecutorHealth::unhealthy(DROPPED),
                ExecutorHealth::unhealthy(DROPPED),
            ]
        );
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.polls, 5, "every tick polled: {snapshot:?}");
        assert_eq!(snapshot.skipped, 0, "no guard left behind: {snapshot:?}");
        assert_eq!(snapshot.timeouts, 0, "answered at once: {snapshot:?}");
        System::current().stop();
    });
}

/// Collects every answer sent to it.
#[derive(Default, Clone)]
struct Answers(Arc<Mutex<Vec<Answered>>>);

struct AnswerCollector(Answers);

impl Actor for AnswerCollector {
    type Context = Context<Self>;
}

impl Handler<Answered> for AnswerCollector {
    type Result = ();
    fn handle(&mut self, answer: Answered, _: &mut Context<Self>) {
        self.0.0.lock().unwrap().push(answer);
    }
}

/// The first call panics after a second; later calls (a restarted actor's)
/// are healthy. Counts its calls.
#[derive(Clone)]
struct SlowPanicThenHealthy(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl HealthCheck for SlowPanicThenHealthy {
    async fn get_health(&self) -> ExecutorHealth {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            panic!("broker client poisoned")
        }
        ExecutorHealth::Healthy
    }
}

#[test]
fn a_poll_that_comes_while_a_check_runs_waits_for_it_and_gets_its_verdict() {
    paused(|| async {
        let answers = Answers::default();
        let to = Arc::new(AnswerCollector(answers.clone()).start().recipient());
        let calls = Arc::new(AtomicUsize::new(0));
        let checks = AsyncChecks::tasks_of(tokio::runtime::Handle::current());
        let addr = ExecutorActor::new(
            Executor::new("CeleryExecutor", SlowPanicThenHealthy(calls.clone())),
            Arc::default(),
            RestartPolicy::default(),
            checks,
        )
        .start_supervised();

        // Two polls at once (no supervisor's guard here, as after a
        // supervisor's restart): one check runs, and panics at 1 s; both polls
        // get its verdict, and the actor restarts.
        addr.do_send(CheckHealth::new(0, 1, to.clone()));
        addr.do_send(CheckHealth::new(0, 2, to.clone()));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one check for two polls");
        // The restarted actor answers the next one.
        addr.do_send(CheckHealth::new(0, 3, to.clone()));
        tokio::time::sleep(Duration::from_secs(1)).await;

        let answer = |tick, health| Answered {
            executor: 0,
            tick,
            health,
            detail: None,
            note: None,
            pending: false,
            host_busy: false,
        };
        let panicked = ExecutorHealth::unhealthy("health check panicked: broker client poisoned");
        assert_eq!(
            *answers.0.lock().unwrap(),
            [
                answer(1, panicked.clone()),
                answer(2, panicked),
                answer(3, ExecutorHealth::Healthy),
            ]
        );
        System::current().stop();
    });
}

#[test]
fn answers_to_polls_no_longer_in_flight_are_ignored() {
    paused(|| async {
        // Answers the supervisor never asked for (another tick's, an unknown
        // executor's) neither clear a guard nor count as late.
        let settings = every(Duration::from_secs(10), Duration::from_secs(5));
        let (supervisor, verdicts, stats) = supervise(
            settings,
            RestartPolicy::default(),
            vec![Executor::new("HungExecutor", Hangs)],
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        for (executor, tick) in [(0, 7), (0, 0), (5, 1)] {
            supervisor.do_send(Answered {
                executor,
                tick,
                health: ExecutorHealth::Healthy,
                detail: None,
                note: None,
                pending: false,
                host_busy: false,
            });
        }
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert_eq!(
            verdicts.of(0),
            [ExecutorHealth::unhealthy("no reply within 5s")]
        );
        let snapshot = stats[0].snapshot();
        assert_eq!((snapshot.polls, snapshot.skipped), (1, 2), "{snapshot:?}");
        assert_eq!(snapshot.late_replies, 0, "{snapshot:?}");
        System::current().stop();
    });
}

// On the production path: the actors on their own thread, async checks on the
// watched pool of check threads, as `Overseer` (and so `overseer serve`) runs them.

/// The longest a production-path test waits for what the actors do every 100 ms.
const PATIENCE: Duration = Duration::from_secs(30);

/// An Overseer polling `executors` every 100 ms, on a SQLite database of its own.
async fn overseer(executors: Vec<Executor>) -> (Overseer, overseer_testkit::TestDb) {
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    let overseer = Overseer::builder()
        .database(&db.url)
        .hostname("sched-1")
        .executors(executors)
        .poll_interval(Duration::from_millis(100))
        .poll_timeout(Duration::from_millis(50))
        .heartbeat_interval(Duration::from_millis(100))
        .refresh_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    (overseer, db)
}

/// Waits until `done` holds for the counters of executor `index`.
async fn stats_until(
    overseer: &Overseer,
    index: usize,
    what: &str,
    done: impl Fn(&ExecutorStats) -> bool,
) {
    let stats = overseer.executor_stats()[index].1.clone();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done(&stats) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not seen within {PATIENCE:?}; {:?}",
            overseer.stats()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the published report satisfies `done`.
async fn report_until(overseer: &Overseer, what: &str, done: impl Fn(&HealthReport) -> bool) {
    let mut reports = overseer.watch();
    tokio::time::timeout(PATIENCE, async {
        while !done(&reports.borrow_and_update()) {
            reports.changed().await.expect("the actors run");
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{what}: not seen within {PATIENCE:?}; last: {}",
            overseer.report().json()
        )
    });
}

/// The verdict the report shows for the executor of this class.
fn verdict_of(report: &HealthReport, class: &str) -> Option<ExecutorHealth> {
    report
        .executor
        .as_ref()?
        .instances
        .iter()
        .find(|i| i.executor.as_deref() == Some(class))
        .filter(|i| i.checked_at.is_some())
        .map(|i| i.health.clone())
}

/// An async check that wrongly blocks its thread, forever.
#[derive(Clone)]
struct BlocksItsThread;

#[async_trait::async_trait]
impl HealthCheck for BlocksItsThread {
    async fn get_health(&self) -> ExecutorHealth {
        loop {
            std::thread::park();
        }
    }
}

/// Healthy, and notes the name of the thread it ran on.
#[derive(Clone, Default)]
struct HealthyOnThread(Arc<Mutex<Option<String>>>);

#[async_trait::async_trait]
impl HealthCheck for HealthyOnThread {
    async fn get_health(&self) -> ExecutorHealth {
        *self.0.lock().unwrap() = std::thread::current().name().map(str::to_owned);
        ExecutorHealth::Healthy
    }
}

#[tokio::test]
async fn on_the_production_path_an_async_check_that_blocks_its_thread_stalls_no_one() {
    let neighbour = HealthyOnThread::default();
    let (overseer, _db) = overseer(vec![
        Executor::new("BlockingExecutor", BlocksItsThread),
        Executor::new("CeleryExecutor", neighbour.clone()),
    ])
    .await;

    // Were the check on the actors' runtime, it would have stopped every actor.
    stats_until(&overseer, 1, "the neighbour answering five polls", |s| {
        s.poll_count.load(Ordering::Relaxed) >= 5
    })
    .await;
    let blocked = overseer.executor_stats()[0].1.snapshot();
    assert_eq!(blocked.polls, 1, "one poll ever sent to the blocked check");
    assert_eq!(blocked.timeouts, 1);
    assert!(blocked.skipped >= 4, "later ticks skipped: {blocked:?}");
    assert_eq!(blocked.checks_running, 1, "it holds one worker thread");
    assert_eq!(
        neighbour.0.lock().unwrap().as_deref(),
        Some("overseer-check"),
        "checks run on the check runtime's threads"
    );
    report_until(&overseer, "both verdicts in the report", |r| {
        verdict_of(r, "BlockingExecutor") == Some(ExecutorHealth::unhealthy("no reply within 50ms"))
            && verdict_of(r, "CeleryExecutor") == Some(ExecutorHealth::Healthy)
    })
    .await;
    overseer.shutdown().await.unwrap();
}

#[tokio::test]
async fn on_the_production_path_a_panicking_check_restarts_its_actor_fresh_and_answers() {
    let built = Arc::new(AtomicUsize::new(0));
    let panics_left = Arc::new(AtomicUsize::new(1));
    let executor = {
        let built = built.clone();
        Executor::with_factory("CeleryExecutor", move || {
            built.fetch_add(1, Ordering::SeqCst);
            PanicsThenHealthy {
                panics_left: panics_left.clone(),
            }
        })
    };
    let (overseer, _db) = overseer(vec![executor]).await;

    // The panic crosses from the check runtime to the actor, which restarts.
    stats_until(&overseer, 0, "a panic and a restart", |s| {
        s.restarts.load(Ordering::Relaxed) == 1
    })
    .await;
    report_until(&overseer, "healthy after the restart", |r| {
        verdict_of(r, "CeleryExecutor") == Some(ExecutorHealth::Healthy)
    })
    .await;
    let stats = overseer.stats()[0].1;
    assert_eq!((stats.panics, stats.restarts), (1, 1));
    assert_eq!(
        built.load(Ordering::SeqCst),
        2,
        "the restart built a fresh check"
    );
    overseer.shutdown().await.unwrap();
}

#[tokio::test]
async fn on_the_production_path_late_answers_are_dropped_and_clear_the_guard() {
    // The check's own timer runs on the check runtime.
    let (overseer, _db) = overseer(vec![Executor::new(
        "SlowExecutor",
        Slow(Duration::from_millis(75)),
    )])
    .await;

    stats_until(&overseer, 0, "three late answers", |s| {
        s.late_replies.load(Ordering::Relaxed) >= 3
    })
    .await;
    // Each late answer came from a poll of its own: it cleared the guard.
    let stats = overseer.stats()[0].1;
    assert!(stats.polls >= 3, "{stats:?}");
    assert!(stats.timeouts >= stats.late_replies, "{stats:?}");
    assert_eq!(stats.panics, 0, "{stats:?}");
    report_until(&overseer, "the timeout in the report", |r| {
        verdict_of(r, "SlowExecutor") == Some(ExecutorHealth::unhealthy("no reply within 50ms"))
    })
    .await;
    overseer.shutdown().await.unwrap();
}

/// An async check that wrongly blocks its thread, forever, as a synchronous
/// client stuck on a dead broker would.
#[derive(Clone)]
struct SleepsForever;

#[async_trait::async_trait]
impl HealthCheck for SleepsForever {
    async fn get_health(&self) -> ExecutorHealth {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// Whether this process is the one to run `test` in: `cargo test` runs the
/// tests of a file as threads of one process, whose `overseer-check` threads
/// would all count, so a test that counts the process's threads runs again,
/// alone, in a child process (the parent only asserts that it passed). Under
/// nextest, which gives each test a process already, this costs one more.
fn alone_in_this_process(test: &str) -> bool {
    const ALONE: &str = "OVERSEER_TEST_ALONE";
    if std::env::var(ALONE).as_deref() == Ok(test) {
        return true;
    }
    // The test binary names it by its module path, less the crate.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            &format!("{module}::{test}"),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ALONE, test)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(
        child.status.success() && stdout.contains("1 passed"),
        "{test}, alone in a process: {}\n{stdout}\n{stderr}",
        child.status
    );
    false
}

#[tokio::test]
async fn on_the_production_path_async_checks_that_block_more_threads_than_the_pool_has_starve_no_other()
 {
    if !alone_in_this_process(
        "on_the_production_path_async_checks_that_block_more_threads_than_the_pool_has_starve_no_other",
    ) {
        return;
    }
    let blocked = ["BlockedA", "BlockedB", "BlockedC"];
    assert!(blocked.len() > overseer_core::overseer::CHECK_THREADS);
    let neighbour = HealthyOnThread::default();
    let mut executors: Vec<Executor> = blocked
        .iter()
        .map(|class| Executor::new(*class, SleepsForever))
        .collect();
    executors.push(Executor::new("CeleryExecutor", neighbour.clone()));
    let (overseer, _db) = overseer(executors).await;

    // The watchdog gives each blocked thread to its check and replaces it.
    for index in 0..blocked.len() {
        stats_until(
            &overseer,
            index,
            "the blocked thread given to its check",
            |s| s.stalls.load(Ordering::Relaxed) == 1,
        )
        .await;
    }
    // From then on the neighbour keeps answering in time, poll after poll.
    let answered = overseer.executor_stats()[3]
        .1
        .poll_count
        .load(Ordering::Relaxed);
    stats_until(
        &overseer,
        3,
        "the neighbour answering five more polls",
        |s| s.poll_count.load(Ordering::Relaxed) >= answered + 5,
    )
    .await;
    assert_eq!(
        neighbour.0.lock().unwrap().as_deref(),
        Some("overseer-check"),
        "it ran on a pool thread"
    );
    for index in 0..blocked.len() {
        let stats = overseer.executor_stats()[index].1.snapshot();
        assert_eq!(stats.polls, 1, "one poll ever sent: {stats:?}");
        assert_eq!(stats.stalls, 1, "{stats:?}");
        assert_eq!(stats.checks_running, 1, "holding its own thread: {stats:?}");
    }
    // The pool's threads, and one given to each blocked check (a new thread
    // names itself once it runs): the process's, this test alone in it.
    let threads = overseer_core::overseer::CHECK_THREADS + blocked.len();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while check_threads() != threads {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} check threads, not {threads}",
            check_threads()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    report_until(&overseer, "every verdict in the report", |r| {
        blocked.iter().all(|class| {
            verdict_of(r, class) == Some(ExecutorHealth::unhealthy("no reply within 50ms"))
        }) && verdict_of(r, "CeleryExecutor") == Some(ExecutorHealth::Healthy)
    })
    .await;
    overseer.shutdown().await.unwrap();
}

/// An async check that blocks its thread for a while at every call, then
/// answers healthy.
#[derive(Clone)]
struct BlocksAWhile;

#[async_trait::async_trait]
impl HealthCheck for BlocksAWhile {
    async fn get_health(&self) -> ExecutorHealth {
        std::thread::sleep(Duration::from_millis(250));
        ExecutorHealth::Healthy
    }
}

#[tokio::test]
async fn on_the_production_path_a_check_found_blocking_runs_on_threads_of_its_own_from_then_on() {
    let (overseer, _db) = overseer(vec![
        Executor::new("BlockingExecutor", BlocksAWhile),
        Executor::new("CeleryExecutor", Healthy),
    ])
    .await;

    // Each run answers late (250 ms against a 50 ms timeout), which clears the
    // guard for the next: four runs, of which only the first was on the pool.
    // (A run this busy host started late, or starved, is not timed out: its
    // answer is taken when it comes; it is counted as started late instead.)
    stats_until(&overseer, 0, "four late answers", |s| {
        s.late_replies.load(Ordering::Relaxed) + s.host_late.load(Ordering::Relaxed) >= 4
    })
    .await;
    let stats = overseer.executor_stats()[0].1.snapshot();
    assert_eq!(
        stats.stalls, 1,
        "found once, then never on the pool: {stats:?}"
    );
    assert_eq!(stats.checks_running_max, 1, "{stats:?}");
    stats_until(&overseer, 1, "the neighbour answering four polls", |s| {
        s.poll_count.load(Ordering::Relaxed) >= 4
    })
    .await;
    assert_eq!(overseer.executor_stats()[1].1.snapshot().stalls, 0);
    overseer.shutdown().await.unwrap();
}
