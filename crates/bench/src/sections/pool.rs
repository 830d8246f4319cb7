//! Section 9: the check pool beside tokio's own ways of running async checks,
//! the alternatives issue 26 names: (A) the pool as it is; (B) every check run
//! as `spawn_blocking(move || handle.block_on(check))` on a runtime of its own
//! (tokio's default `max_blocking_threads`, 512); (C) every check a plain task
//! of a multi-thread runtime of its own (2 workers). B and C go through
//! `OverseerBuilder::async_checks`, B as this section's own [`SpawnBlocking`]
//! runner ([`overseer_core::check::CheckRunner`]).
//!
//! Two workloads, each runner in a process of its own (scenario `pool`):
//! - `hung`: executors whose async check blocks its thread for ever (parked),
//!   then healthy async executors that answer at once; what counts is how
//!   many of the healthy ones' polls are answered in time, second by second.
//! - `timer`: executors whose async check waits 5 ms on a tokio timer, then
//!   answers healthy; what counts is CPU, threads and memory.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

use crate::plan::Plan;
use crate::process;
use crate::report::{Body, table};
use crate::stats::{Summary, count, num};

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

mod child;

pub use child::child;

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
         `OverseerBuilder::async_checks` (the pool's threads still start in B and C, idle). An embedded Overseer as in section 1 (SQLite, \
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
