//! The supervisor's guarantees, with paused time so a thousand ticks take no
//! time: a hung check holds one task or thread forever and delays nothing, a
//! panicking check restarts its actor and then backs off, healthy executors keep
//! their pace beside a hung one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use actix::prelude::*;
use overseer_core::actors::{
    ExecutorActor, HealthSupervisor, PollSettings, RestartPolicy, Verdict,
};
use overseer_core::stats::ExecutorStats;
use overseer_core::{BlockingHealthCheck, Executor, ExecutorHealth, HealthCheck};

/// Runs `test` in an actix system whose clock is paused: sleeping advances it
/// at once to the next timer.
fn paused<F: Future<Output = ()>>(test: impl FnOnce() -> F) {
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
struct Verdicts(Arc<Mutex<Vec<Verdict>>>);

impl Actor for Collector {
    type Context = Context<Self>;
}

struct Collector(Verdicts);

impl Handler<Verdict> for Collector {
    type Result = ();
    fn handle(&mut self, verdict: Verdict, _: &mut Context<Self>) {
        self.0.0.lock().unwrap().push(verdict);
    }
}

impl Verdicts {
    fn of(&self, executor: usize) -> Vec<ExecutorHealth> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|v| v.executor == executor)
            .map(|v| v.health.clone())
            .collect()
    }
}

/// Starts one supervisor over `executors` (checks run as tasks of this runtime).
fn supervise(
    settings: PollSettings,
    policy: RestartPolicy,
    executors: Vec<Executor>,
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
            let addr = ExecutorActor::new(executor, stats.clone(), policy, None).start_supervised();
            (addr, stats, label)
        })
        .collect();
    (
        HealthSupervisor::new(settings, polled, sink).start(),
        verdicts,
        all_stats,
    )
}

fn every(poll_interval: Duration, poll_timeout: Duration) -> PollSettings {
    PollSettings {
        poll_interval,
        poll_timeout,
        ..PollSettings::default()
    }
}

#[derive(Clone)]
struct Hangs;

#[async_trait::async_trait]
impl HealthCheck for Hangs {
    async fn get_health(&self) -> ExecutorHealth {
        std::future::pending().await
    }
}

#[derive(Clone)]
struct Healthy;

#[async_trait::async_trait]
impl HealthCheck for Healthy {
    async fn get_health(&self) -> ExecutorHealth {
        ExecutorHealth::Healthy
    }
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
#[derive(Clone)]
struct BlocksUntilReleased(Arc<Mutex<mpsc::Receiver<()>>>);

impl BlockingHealthCheck for BlocksUntilReleased {
    fn get_health(&self) -> ExecutorHealth {
        let _ = self.0.lock().unwrap().recv();
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
    let check = BlocksUntilReleased(Arc::new(Mutex::new(released)));
    paused(move || async move {
        let settings = every(Duration::from_secs(10), Duration::from_secs(5));
        let (_supervisor, verdicts, stats) = supervise(
            settings,
            RestartPolicy::default(),
            vec![Executor::blocking("BlockedExecutor", check)],
        );

        tokio::time::sleep(Duration::from_secs(1)).await;
        // A new thread names itself once it runs: give it (real) time to.
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

/// Answers from a script, one verdict per call.
#[derive(Clone)]
struct Scripted(Arc<Mutex<Vec<ExecutorHealth>>>);

#[async_trait::async_trait]
impl HealthCheck for Scripted {
    async fn get_health(&self) -> ExecutorHealth {
        self.0.lock().unwrap().remove(0)
    }
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
                Scripted(Arc::new(Mutex::new(script))),
            )],
        );
        tokio::time::sleep(Duration::from_secs(75)).await;
        // Two failures then a success: nothing reported. Three failures: unhealthy.
        // One success: still unhealthy, not reported; the second: healthy.
        assert_eq!(verdicts.of(0), [bad(), ExecutorHealth::Healthy]);
        System::current().stop();
    });
}
