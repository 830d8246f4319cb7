//! Section 9: the check pool beside tokio's own ways of running async checks,
//! the alternatives issue 26 names: (A) the pool as it is; (B) every check run
//! as `spawn_blocking(move || handle.block_on(check))` on a runtime of its own
//! (tokio's default `max_blocking_threads`, 512); (C) every check a plain task
//! of a multi-thread runtime of its own (2 workers). B and C go through
//! `OverseerBuilder::async_checks`, which exists for this comparison only.
//!
//! Two workloads, each runner in a process of its own (scenario `pool`):
//! - `hung`: executors whose async check blocks its thread for ever (parked),
//!   then healthy async executors that answer at once; what counts is how
//!   many of the healthy ones' polls are answered in time, second by second.
//! - `timer`: executors whose async check waits 5 ms on a tokio timer, then
//!   answers healthy; what counts is CPU, threads and memory.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use overseer_core::check::AsyncChecks;
use overseer_core::{Executor, ExecutorHealth, HealthCheck};
use serde_json::{Value, json};

use crate::plan::Plan;
use crate::process;
use crate::report::{Body, table};
use crate::scenario::{self, Healthy};
use crate::stats::{Summary, count, num};
use crate::system;

/// The runners, in the tables' order: (id, label).
const RUNNERS: [(&str, &str); 3] = [
    ("pool", "A. the check pool (as it is)"),
    ("blocking", "B. `spawn_blocking` + `block_on`"),
    ("tasks", "C. tasks of a runtime of their own"),
];

/// Worker threads of the runtime B and C run on (as many as the pool's IO runtime).
const BENCH_WORKERS: usize = 2;
/// Its threads' name, blocking threads included, to count them apart.
const BENCH_THREAD_NAME: &str = "bench-checks";
/// Names of the threads that run checks, whichever the runner: the pool's
/// (its threads, the watchdog, its IO runtime) and the bench's runtime.
const CHECK_THREAD_NAMES: [&str; 4] = [
    "overseer-check",
    "overseer-watch",
    "overseer-io",
    BENCH_THREAD_NAME,
];
/// The timer workload's check waits this long.
const TIMER_WAIT: Duration = Duration::from_millis(5);
/// A healthy executor "answers every poll" in a second whose rate reaches this.
const ANSWERED: f64 = 0.9;
/// The hung workload's first and last stretch, in seconds.
const STRETCH: usize = 10;

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
        "blocking" => builder.async_checks(AsyncChecks::spawn_blocking_on(bench_handle)),
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

/// The first second from which every second's rate reached [`ANSWERED`] to the
/// end, or `None` if the last second's did not.
fn settled_after(rates: &[f64]) -> Option<usize> {
    let mut from = rates.len();
    while from > 0 && rates[from - 1] >= ANSWERED {
        from -= 1;
    }
    (from < rates.len()).then_some(from)
}

/// The mean of a stretch of rates.
fn mean(rates: &[f64]) -> f64 {
    if rates.is_empty() {
        f64::NAN
    } else {
        rates.iter().sum::<f64>() / rates.len() as f64
    }
}

/// One runner on one workload, over the runs.
struct Case {
    runner: &'static str,
    label: &'static str,
    runs: Vec<Value>,
}

impl Case {
    fn values(&self, f: impl Fn(&Value) -> Option<f64>) -> Option<Summary> {
        Summary::of(&self.runs.iter().filter_map(f).collect::<Vec<_>>())
    }

    fn cell(&self, key: &str, decimals: usize) -> String {
        self.values(|r| r[key].as_f64())
            .map_or_else(|| "–".into(), |s| s.cell(decimals))
    }

    fn rates(run: &Value) -> Vec<f64> {
        run["rates"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    }
}

fn measure(
    problems: &mut Vec<String>,
    plan: &Plan,
    workload: &str,
    executors: usize,
    healthy: usize,
    warmup: f64,
    seconds: f64,
) -> Result<Vec<Case>> {
    let mut cases: Vec<Case> = RUNNERS
        .iter()
        .map(|(runner, label)| Case {
            runner,
            label,
            runs: Vec::new(),
        })
        .collect();
    let deadline = Duration::from_secs_f64(warmup + seconds + 120.0);
    for run in 0..plan.pool_runs {
        for case in &mut cases {
            eprintln!(
                "pool: run {} of {}: {workload}, {}",
                run + 1,
                plan.pool_runs,
                case.runner
            );
            let result = match process::scenario(
                "pool",
                &[
                    ("runner", case.runner.to_owned()),
                    ("workload", workload.to_owned()),
                    ("executors", executors.to_string()),
                    ("healthy", healthy.to_string()),
                    ("warmup", warmup.to_string()),
                    ("seconds", seconds.to_string()),
                ],
                deadline,
                |_| {},
            ) {
                Ok(result) => result,
                Err(e) => {
                    eprintln!("pool: {workload}, {}: {e:#}", case.runner);
                    problems.push(format!(
                        "{workload}, {} (run {}): {}",
                        case.label,
                        run + 1,
                        process::tail(&format!("{e:#}"), 3)
                    ));
                    continue;
                }
            };
            case.runs.push(result);
        }
    }
    Ok(cases)
}

pub fn run(plan: &Plan) -> Result<Body> {
    let mut problems = Vec::new();
    let hung = measure(
        &mut problems,
        plan,
        "hung",
        plan.pool_hung,
        plan.pool_healthy,
        plan.pool_hung_seconds - STRETCH as f64,
        STRETCH as f64,
    )?;
    let timer = measure(
        &mut problems,
        plan,
        "timer",
        plan.pool_timer_executors,
        0,
        plan.pool_timer_warmup_s,
        plan.pool_timer_seconds,
    )?;

    let mut body = format!(
        "Where async checks run, measured against the alternatives to the check pool that tokio \
         offers, on the same workloads: **A**, the pool as it is (2 threads, a watchdog that gives \
         a thread a check blocks to that check and starts another, 2 IO threads); **B**, every \
         check run as `spawn_blocking(move || handle.block_on(check))` on a runtime of its own \
         (2 workers, tokio's default `max_blocking_threads` of 512); **C**, every check a plain \
         task of a multi-thread runtime of its own (2 workers). B and C are wired in through \
         `OverseerBuilder::async_checks`, which exists for this comparison only (the pool's \
         threads still start in B and C, idle). An embedded Overseer as in section 1 (SQLite, \
         poll, flush and refresh every 1 s, poll timeout 0.5 s), the host's 10 ms loop beside it; \
         each case a process of its own, {}.\n\n",
        count(plan.pool_runs, "run")
    );

    let _ = write!(
        body,
        "**Hung checks**: {} executors whose async check blocks its thread for ever (parked, as a \
         synchronous client inside an `async fn` whose server never answers), then {} healthy \
         async executors that answer at once, listed after them; {} s from the start. A healthy \
         executor's poll counts when answered within the timeout; *answered from* is the first \
         second from which every second saw at least {} of the healthy executors' polls answered \
         per executor. *Check threads*: the threads of the pool or of the runtime checks run on, \
         at the end.\n\n",
        num(plan.pool_hung as f64, 0),
        plan.pool_healthy,
        plan.pool_hung_seconds,
        ANSWERED,
    );
    let rows: Vec<Vec<String>> = hung
        .iter()
        .map(|c| {
            let first = c.values(|r| {
                let rates = Case::rates(r);
                Some(mean(&rates[..STRETCH.min(rates.len())]))
            });
            let last = c.values(|r| {
                let rates = Case::rates(r);
                Some(mean(&rates[rates.len().saturating_sub(STRETCH)..]))
            });
            let settled: Vec<String> = c
                .runs
                .iter()
                .map(|r| {
                    settled_after(&Case::rates(r))
                        .map_or_else(|| "never".to_owned(), |s| format!("{s} s"))
                })
                .collect();
            let cell = |s: Option<Summary>| s.map_or_else(|| "–".into(), |s| s.cell(2));
            vec![
                c.label.to_owned(),
                cell(first),
                cell(last),
                settled.join(", "),
                c.cell("check_threads", 0),
                c.cell("threads", 0),
                c.cell("cpu_percent_all", 1),
                c.cell("peak_rss_mib", 1),
                c.cell("loop_p99_ms", 2),
            ]
        })
        .collect();
    body.push_str(&table(
        &[
            "runner",
            &format!("healthy polls answered, per executor per s, first {STRETCH} s"),
            &format!("the same, last {STRETCH} s"),
            "answered from",
            "check threads",
            "threads",
            "process CPU, % of a core",
            "peak RSS, MiB",
            "host loop p99 lateness, ms",
        ],
        &rows,
    ));

    let _ = write!(
        body,
        "\n**Waiting checks**: {} executors whose async check waits {} ms on a tokio timer, then \
         answers healthy; {} s measured after {} s of warm-up. A window holds its seconds' \
         ticks give or take one at its edges, so polls per executor per s read ±0.1.\n\n",
        num(plan.pool_timer_executors as f64, 0),
        TIMER_WAIT.as_millis(),
        plan.pool_timer_seconds,
        plan.pool_timer_warmup_s,
    );
    let rows: Vec<Vec<String>> = timer
        .iter()
        .map(|c| {
            vec![
                c.label.to_owned(),
                c.cell("polls_per_executor_per_s", 3),
                c.cell("mean_poll_ms", 2),
                c.cell("cpu_percent", 1),
                c.cell("check_threads", 0),
                c.cell("threads", 0),
                c.cell("peak_rss_mib", 1),
                c.cell("loop_p99_ms", 2),
            ]
        })
        .collect();
    body.push_str(&table(
        &[
            "runner",
            "polls answered, per executor per s",
            "mean poll, ms",
            "process CPU, % of a core",
            "check threads",
            "threads",
            "peak RSS, MiB",
            "host loop p99 lateness, ms",
        ],
        &rows,
    ));

    let median = |cases: &[Case], runner: &str, f: &dyn Fn(&Value) -> Option<f64>| {
        cases
            .iter()
            .find(|c| c.runner == runner)
            .and_then(|c| c.values(f))
            .map_or(f64::NAN, |s| s.median)
    };
    let last = |r: &Value| {
        let rates = Case::rates(r);
        Some(mean(&rates[rates.len().saturating_sub(STRETCH)..]))
    };
    let cpu = |r: &Value| r["cpu_percent"].as_f64();
    let _ = write!(
        body,
        "\n**For an operator**: with {} async checks blocking their threads for ever, the healthy \
         executors' polls were answered {} times per executor per second in the last {STRETCH} s \
         on the pool, {} with `spawn_blocking`, {} as plain tasks; {} executors waiting on a timer \
         cost {}% of a core on the pool, {}% with `spawn_blocking`, {}% as plain tasks.\n",
        num(plan.pool_hung as f64, 0),
        num(median(&hung, "pool", &last), 2),
        num(median(&hung, "blocking", &last), 2),
        num(median(&hung, "tasks", &last), 2),
        num(plan.pool_timer_executors as f64, 0),
        num(median(&timer, "pool", &cpu), 1),
        num(median(&timer, "blocking", &cpu), 1),
        num(median(&timer, "tasks", &cpu), 1),
    );
    Ok(Body {
        text: body,
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::{mean, settled_after};

    #[test]
    fn settled_after_is_the_start_of_the_last_run_of_answered_seconds() {
        assert_eq!(settled_after(&[0.0, 1.0, 0.0, 1.0, 0.95]), Some(3));
        assert_eq!(settled_after(&[1.0, 1.0]), Some(0));
        assert_eq!(settled_after(&[1.0, 0.5]), None);
        assert_eq!(settled_after(&[]), None);
    }

    #[test]
    fn mean_of_nothing_is_not_a_number() {
        assert!(mean(&[]).is_nan());
        assert_eq!(mean(&[1.0, 0.0]), 0.5);
    }
}
