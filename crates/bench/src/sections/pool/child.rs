//! Section 9's child side (`--scenario pool`): an embedded Overseer whose
//! async checks run on one of the runners compared (the pool, the bench's own
//! [`SpawnBlocking`], tasks of a runtime of the bench's own), beside the
//! host's loop, sampled every second.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use overseer_core::check::{AsyncChecks, CheckRunner};
use overseer_core::{Executor, ExecutorHealth, HealthCheck};
use serde_json::{Value, json};

use super::{BENCH_THREAD_NAME, BENCH_WORKERS, CHECK_THREAD_NAMES, TIMER_WAIT};
use crate::scenario::{self, Healthy};
use crate::system;

/// How long the scenario waits for Overseer to shut down.
const SHUTDOWN: Duration = Duration::from_secs(20);

/// The runtime B and C run checks on, shut down without waiting when dropped
/// (on every path): a check that blocks for ever holds one of its threads, and
/// a plain drop would wait for it, or panic inside the scenario's runtime.
struct Background(Option<tokio::runtime::Runtime>);

impl Background {
    fn handle(&self) -> tokio::runtime::Handle {
        self.0.as_ref().expect("until dropped").handle().clone()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Runner B: every check run as `spawn_blocking(move || handle.block_on(check))`
/// on the bench's runtime, a thread per check run up to tokio's
/// `max_blocking_threads`, unwatched: the bench's own, not Overseer's.
struct SpawnBlocking(tokio::runtime::Handle);

impl CheckRunner for SpawnBlocking {
    fn run(&self, check: Pin<Box<dyn Future<Output = ()> + Send>>) {
        let handle = self.0.clone();
        self.0.spawn_blocking(move || handle.block_on(check));
    }
}

/// An async check that blocks its thread for ever: what a synchronous client
/// inside an `async fn` does when its server never answers.
#[derive(Clone)]
struct BlocksForever;

#[async_trait::async_trait]
impl HealthCheck for BlocksForever {
    async fn get_health(&self) -> ExecutorHealth {
        loop {
            std::thread::park();
        }
    }
}

/// An async check that waits on a tokio timer, then answers.
#[derive(Clone)]
struct Waits;

#[async_trait::async_trait]
impl HealthCheck for Waits {
    async fn get_health(&self) -> ExecutorHealth {
        tokio::time::sleep(TIMER_WAIT).await;
        ExecutorHealth::Healthy
    }
}

/// The child side (`--scenario pool runner=.. workload=.. executors=N
/// healthy=N warmup=S seconds=S`): an embedded Overseer with the runner and
/// the workload, the host's loop beside it, sampled every second.
pub async fn child(
    runner: &str,
    workload: &str,
    executors: usize,
    healthy: usize,
    warmup: Duration,
    measure: Duration,
) -> Result<Value> {
    let pid = std::process::id();
    let (_dir, url) = scenario::sqlite().await?;
    let bench_runtime = Background(Some(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(BENCH_WORKERS)
            .thread_name(BENCH_THREAD_NAME)
            .enable_all()
            .build()?,
    ));
    let bench_handle = bench_runtime.handle();
    let mut builder = scenario::builder(&url);
    builder = match runner {
        "pool" => builder,
        "blocking" => builder.async_checks(AsyncChecks::on(SpawnBlocking(bench_handle.clone()))),
        "tasks" => builder.async_checks(AsyncChecks::tasks_of(bench_handle)),
        other => bail!("no runner {other}"),
    };
    let list: Vec<Executor> = match workload {
        "hung" => (0..executors)
            .map(|i| Executor::new(format!("hung{i}:CeleryExecutor"), BlocksForever))
            .chain((0..healthy).map(|i| Executor::new(format!("ok{i}:CeleryExecutor"), Healthy)))
            .collect(),
        "timer" => (0..executors)
            .map(|i| Executor::new(format!("e{i}:CeleryExecutor"), Waits))
            .collect(),
        other => bail!("no workload {other}"),
    };
    let cpu_start = system::own_cpu_seconds();
    let started = Instant::now();
    let overseer = builder.executors(list).start().await?;
    let startup = started.elapsed().as_secs_f64();
    let stats = overseer.executor_stats();
    // Whose polls count: the healthy executors (listed last), or all.
    let counted = match workload {
        "hung" => &stats[executors..],
        _ => &stats[..],
    };
    let n = counted.len().max(1) as f64;
    let answered = || -> (u64, u64) {
        counted.iter().fold((0, 0), |(c, s), (_, e)| {
            (
                c + e.poll_count.load(Ordering::Relaxed),
                s + e.poll_sum_micros.load(Ordering::Relaxed),
            )
        })
    };
    let loop_task = tokio::spawn(scenario::host_loop(Duration::ZERO, warmup + measure));

    // Second by second from the start: polls answered in time per counted
    // executor, and the process's threads.
    let mut rates = Vec::new();
    let mut threads_series = Vec::new();
    let (mut last, _) = answered();
    let mut at = Instant::now();
    let mut window = None;
    let total = warmup + measure;
    while started.elapsed() < total {
        let second = at + Duration::from_secs(1);
        tokio::time::sleep_until(second.into()).await;
        let (now, _) = answered();
        let dt = at.elapsed().as_secs_f64();
        at = Instant::now();
        rates.push((now - last) as f64 / n / dt);
        last = now;
        threads_series.push(system::threads(pid).unwrap_or_default());
        if window.is_none() && started.elapsed() >= warmup {
            window = Some((Instant::now(), system::own_cpu_seconds(), answered()));
        }
    }
    let (w_at, w_cpu, (w_count, w_sum)) =
        window.unwrap_or((Instant::now(), system::own_cpu_seconds(), answered()));
    let wall = w_at.elapsed().as_secs_f64();
    let cpu = system::own_cpu_seconds() - w_cpu;
    let cpu_all = system::own_cpu_seconds() - cpu_start;
    let wall_all = started.elapsed().as_secs_f64();
    let (count_end, sum_end) = answered();
    let threads = system::threads(pid).unwrap_or_default();
    let check_threads = system::threads_named(pid, &CHECK_THREAD_NAMES);
    let rss = system::peak_rss_mib(pid).unwrap_or_default();
    let (running, stalls, timeouts) = stats.iter().fold((0, 0, 0), |(r, s, t), (_, e)| {
        (
            r + e.checks_running.load(Ordering::Relaxed),
            s + e.stalls.load(Ordering::Relaxed),
            t + e.timeouts.load(Ordering::Relaxed),
        )
    });
    let mut lateness = loop_task.await.context("the host loop")?;
    // A check that blocks for ever holds its thread: nothing waits for it.
    // What was measured stands if the last write at shutdown fails: said beside it.
    let shutdown_error = match tokio::time::timeout(SHUTDOWN, overseer.shutdown()).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("Overseer did not shut down within {SHUTDOWN:?}")),
    };
    if let Some(e) = &shutdown_error {
        eprintln!("scenario pool: shutdown: {e}");
    }
    drop(bench_runtime);
    lateness.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p99 = lateness
        .get(((lateness.len().max(1) - 1) as f64 * 0.99).round() as usize)
        .map_or(f64::NAN, |d| ms(*d));
    let answered_window = (count_end - w_count) as f64;
    Ok(json!({
        "startup_s": startup,
        "shutdown_error": shutdown_error,
        "rates": rates,
        "threads_series": threads_series,
        "window_s": wall,
        "cpu_percent": 100.0 * cpu / wall,
        "cpu_percent_all": 100.0 * cpu_all / wall_all,
        "polls_per_executor_per_s": answered_window / n / wall,
        "mean_poll_ms": if answered_window > 0.0 {
            (sum_end - w_sum) as f64 / answered_window / 1000.0
        } else {
            f64::NAN
        },
        "threads": threads,
        "check_threads": check_threads,
        "peak_rss_mib": rss,
        "checks_running": running,
        "stalls": stalls,
        "timeouts": timeouts,
        "loop_p99_ms": p99,
        "loop_worst_ms": lateness.last().map_or(f64::NAN, |d| ms(*d)),
    }))
}
