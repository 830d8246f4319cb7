//! The child side: one scenario per process (`overseer-bench --scenario NAME
//! key=value ...`), so that its CPU time and peak memory are its own. It prints
//! `window-start` and `window-end` around what it measures (the parent may count
//! bytes on the wire between them), and one `result {json}` line at the end.
//!
//! - `loop`: the host's main loop of 10 ms ticks, alone (`kind=none`) or beside an
//!   embedded Overseer supervising `hung` executors whose check never answers
//!   (`kind=async`: a future that never completes; `kind=blocking`: a thread
//!   parked forever).
//! - `scale`: `executors` healthy executors polled every second, the flush and
//!   the refresh every second, on SQLite (`db=sqlite`, a fresh file) or on the
//!   database URL given; `flapping=N` makes the first N turn at every poll.
//! - `pool`: the check pool or one of tokio's own runners (`runner=pool|blocking|tasks`)
//!   on a workload (`workload=hung|timer`), see [`crate::sections::pool`].
//! - `bare-route`: the http section's reference, a bare actix-web route serving
//!   the file `body=PATH` (see [`crate::sections::http::serve_bare`]).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use overseer_core::{BlockingHealthCheck, Executor, ExecutorHealth, HealthCheck, Overseer};
use overseer_migration::{Migrator, MigratorTrait};
use serde_json::{Value, json};

use crate::system;

/// The host loop's period.
pub const TICK: Duration = Duration::from_millis(10);
/// Every interval of the supervisor in these scenarios: poll, heartbeat (flush)
/// and refresh each second, as the issue asks ("polled every second").
pub const INTERVAL: Duration = Duration::from_secs(1);
/// The poll timeout beside a 1 s poll interval.
pub const POLL_TIMEOUT: Duration = Duration::from_millis(500);
/// How often the scale scenario looks at the aggregator's counters, to catch
/// every flush's duration (flushes come once a second).
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// A check that never answers, without holding a thread: a pending future.
#[derive(Clone)]
struct HangsAsync;

#[async_trait::async_trait]
impl HealthCheck for HangsAsync {
    async fn get_health(&self) -> ExecutorHealth {
        std::future::pending().await
    }
}

/// A check that never answers and holds its thread: parked forever.
#[derive(Clone)]
struct HangsBlocking;

impl BlockingHealthCheck for HangsBlocking {
    fn get_health(&self) -> ExecutorHealth {
        loop {
            std::thread::park();
        }
    }
}

/// A check that answers at once: the cheapest executor, so the scale figures
/// are Overseer's own cost (and the pool section's healthy executors).
#[derive(Clone)]
pub(crate) struct Healthy;

#[async_trait::async_trait]
impl HealthCheck for Healthy {
    async fn get_health(&self) -> ExecutorHealth {
        ExecutorHealth::Healthy
    }
}

/// A check whose verdict turns at every poll (healthy, then unhealthy, and so
/// on), answering after its own delay: the verdicts of many such come one by
/// one, spread over the poll, as timeouts of a loaded fleet do.
#[derive(Clone, Default)]
struct Flapping {
    unhealthy: Arc<AtomicBool>,
    delay: Duration,
}

#[async_trait::async_trait]
impl HealthCheck for Flapping {
    async fn get_health(&self) -> ExecutorHealth {
        tokio::time::sleep(self.delay).await;
        if self.unhealthy.fetch_xor(true, Ordering::Relaxed) {
            ExecutorHealth::unhealthy("flapping")
        } else {
            ExecutorHealth::Healthy
        }
    }
}

/// Runs the scenario `name` with `key=value` arguments and prints its result.
pub fn main(name: &str, args: &[String]) -> Result<()> {
    let params: HashMap<&str, &str> = args.iter().filter_map(|a| a.split_once('=')).collect();
    let param = |key: &str| -> Result<&str> {
        params
            .get(key)
            .copied()
            .ok_or_else(|| anyhow!("scenario {name} needs {key}=..."))
    };
    let seconds = |key: &str| -> Result<Duration> {
        Ok(Duration::from_secs_f64(
            param(key)?.parse().context(key.to_owned())?,
        ))
    };
    if name == "bare-route" {
        // Serves until it is stopped; it prints no result.
        return crate::sections::http::serve_bare(Path::new(param("body")?));
    }
    let runtime = tokio::runtime::Runtime::new()?;
    let result = match name {
        "loop" => runtime.block_on(host_loop_beside(
            param("kind")?,
            param("hung")?.parse()?,
            seconds("warmup")?,
            seconds("seconds")?,
        ))?,
        "scale" => runtime.block_on(scale(
            param("db")?,
            param("executors")?.parse()?,
            params.get("flapping").map_or(Ok(0), |n| n.parse())?,
            seconds("warmup")?,
            seconds("seconds")?,
        ))?,
        "pool" => runtime.block_on(crate::sections::pool::child(
            param("runner")?,
            param("workload")?,
            param("executors")?.parse()?,
            param("healthy")?.parse()?,
            seconds("warmup")?,
            seconds("seconds")?,
        ))?,
        other => bail!("no scenario {other}"),
    };
    println!("result {result}");
    Ok(())
}

fn marker(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

/// A fresh SQLite file, migrated; its folder lives as long as the value.
pub(crate) async fn sqlite() -> Result<(tempfile::TempDir, String)> {
    let dir = tempfile::tempdir()?;
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("bench.db").display()
    );
    migrate(&url).await?;
    Ok((dir, url))
}

async fn migrate(url: &str) -> Result<()> {
    let db = sea_orm::Database::connect(url).await?;
    Migrator::up(&db, None).await?;
    db.close().await?;
    Ok(())
}

pub(crate) fn builder(url: &str) -> overseer_core::OverseerBuilder {
    Overseer::builder()
        .database(url)
        .hostname("overseer-bench")
        .poll_interval(INTERVAL)
        .poll_timeout(POLL_TIMEOUT)
        .heartbeat_interval(INTERVAL)
        .refresh_interval(INTERVAL)
}

/// The host's loop: a tokio interval of [`TICK`], each tick's lateness against
/// when it was due (missed ticks delayed, not bunched). Ticks during `warmup`
/// are not kept.
pub(crate) async fn host_loop(warmup: Duration, measure: Duration) -> Vec<Duration> {
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut expected = Instant::now();
    let mut lateness = Vec::with_capacity((measure.as_millis() / TICK.as_millis()) as usize + 1);
    let mut measuring = false;
    loop {
        ticker.tick().await;
        let now = Instant::now();
        let elapsed = started.elapsed();
        if elapsed >= warmup + measure {
            break;
        }
        if elapsed >= warmup {
            if !measuring {
                measuring = true;
                marker("window-start");
            }
            lateness.push(now.saturating_duration_since(expected));
        }
        expected = now + TICK;
    }
    marker("window-end");
    lateness
}

async fn host_loop_beside(
    kind: &str,
    hung: usize,
    warmup: Duration,
    measure: Duration,
) -> Result<Value> {
    let pid = std::process::id();
    let (_dir, url) = sqlite().await?;
    let overseer = match kind {
        "none" => None,
        "async" | "blocking" => {
            let executors = (0..hung).map(|i| {
                if kind == "async" {
                    Executor::new(format!("hung{i}:CeleryExecutor"), HangsAsync)
                } else {
                    Executor::blocking(format!("hung{i}:CeleryExecutor"), HangsBlocking)
                }
            });
            Some(builder(&url).executors(executors).start().await?)
        }
        other => bail!("no loop kind {other}"),
    };
    let cpu_before = system::own_cpu_seconds();
    let started = Instant::now();
    let mut lateness = host_loop(warmup, measure).await;
    let wall = started.elapsed().as_secs_f64();
    let cpu = system::own_cpu_seconds() - cpu_before;
    let threads = system::threads(pid).unwrap_or_default();
    let (running, timeouts) = overseer.as_ref().map_or((0, 0), |o| {
        o.executor_stats().iter().fold((0, 0), |(r, t), (_, s)| {
            (
                r + s.checks_running.load(Ordering::Relaxed),
                t + s.timeouts.load(Ordering::Relaxed),
            )
        })
    });
    if let Some(overseer) = overseer {
        // A hung check never returns: shutting down must not wait for it.
        tokio::time::timeout(Duration::from_secs(20), overseer.shutdown())
            .await
            .context("Overseer did not shut down within 20 s")??;
    }
    if lateness.is_empty() {
        bail!("the loop ticked no measured tick");
    }
    lateness.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| ms(lateness[((lateness.len() - 1) as f64 * q).round() as usize]);
    Ok(json!({
        "ticks": lateness.len(),
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
        "worst_ms": ms(*lateness.last().expect("ticks")),
        "cpu_percent": 100.0 * cpu / wall,
        "peak_rss_mib": system::peak_rss_mib(pid).unwrap_or_default(),
        "threads": threads,
        "checks_running": running,
        "timeouts": timeouts,
    }))
}

/// `executors` executors polled every second, of which the first `flapping`
/// turn at every poll (each a new verdict, a transition and a new report) and
/// the others stay healthy.
async fn scale(
    db: &str,
    executors: usize,
    flapping: usize,
    warmup: Duration,
    measure: Duration,
) -> Result<Value> {
    let pid = std::process::id();
    let (_dir, url) = if db == "sqlite" {
        let (dir, url) = sqlite().await?;
        (Some(dir), url)
    } else {
        (None, db.to_owned())
    };
    let checks = (0..executors).map(|i| {
        let name = format!("e{i}:CeleryExecutor");
        if i < flapping {
            // Spread over 0-399 ms, under the 500 ms poll timeout.
            let delay = Duration::from_millis((i as u64 * 397) % 400);
            Executor::new(
                name,
                Flapping {
                    delay,
                    ..Flapping::default()
                },
            )
        } else {
            Executor::new(name, Healthy)
        }
    });
    let started = Instant::now();
    let overseer = builder(&url).executors(checks).start().await?;
    let startup = started.elapsed().as_secs_f64();
    let stats = overseer.aggregator_stats();
    let executor_stats = overseer.executor_stats();
    // Polls due and not answered, all executors together: ticks skipped
    // (the last poll still unanswered) and polls that timed out. Every due
    // poll is answered, skipped or timed out; counting the last two is exact at
    // a tick, where counting answers would catch a round half answered.
    let missed = || -> u64 {
        executor_stats
            .iter()
            .map(|(_, s)| s.skipped.load(Ordering::Relaxed) + s.timeouts.load(Ordering::Relaxed))
            .sum()
    };
    // Ticks sent or skipped, all executors together: each supervisor tick adds
    // one per executor, so the total moves by whole rounds of `executors`.
    let ticks = || -> u64 {
        executor_stats
            .iter()
            .map(|(_, s)| s.polls.load(Ordering::Relaxed) + s.skipped.load(Ordering::Relaxed))
            .sum()
    };
    let round = executors.max(1) as u64;
    tokio::time::sleep(warmup).await;

    marker("window-start");
    let window = Instant::now();
    let cpu_before = system::own_cpu_seconds();
    let written_before = system::bytes_written(pid).unwrap_or_default();
    let flushes_before = stats.flushes.load(Ordering::Relaxed);
    let failures_before = stats.flush_failures.load(Ordering::Relaxed);
    let mut seen = flushes_before;
    let (mut micros, mut statements, mut verdicts) = (Vec::new(), Vec::new(), Vec::new());
    // How long the latest report took to build and render, at each flush.
    let mut publishes = Vec::new();
    // Seconds into the window of each flush seen.
    let mut flushed_at = Vec::new();
    // (seconds into the window, polls missed, ticks) as each tick's round is
    // seen whole: between the first and the last lie whole rounds, with no
    // window edge in them.
    let mut rounds = Vec::new();
    let mut ticks_seen = ticks() / round * round;
    while window.elapsed() < measure {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let now_ticks = ticks();
        if now_ticks >= ticks_seen + round {
            ticks_seen = now_ticks / round * round;
            rounds.push((window.elapsed().as_secs_f64(), missed(), ticks_seen));
        }
        let flushes = stats.flushes.load(Ordering::Relaxed);
        if flushes != seen {
            seen = flushes;
            micros.push(stats.last_flush_micros.load(Ordering::Relaxed));
            statements.push(stats.last_flush_statements.load(Ordering::Relaxed));
            verdicts.push(stats.last_flush_verdicts.load(Ordering::Relaxed));
            publishes.push(stats.last_publish_micros.load(Ordering::Relaxed));
            flushed_at.push(window.elapsed().as_secs_f64());
        }
    }
    let wall = window.elapsed().as_secs_f64();
    // (seconds, polls missed, ticks) from the first to the last round seen
    // (each seen round adds at least one whole round of ticks).
    let span = match (rounds.first(), rounds.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => Some((b.0 - a.0, b.1 - a.1, b.2 - a.2)),
        _ => None,
    };
    let cpu = system::own_cpu_seconds() - cpu_before;
    let written = system::bytes_written(pid).unwrap_or_default() - written_before;
    let flushes = stats.flushes.load(Ordering::Relaxed) - flushes_before;
    let failures = stats.flush_failures.load(Ordering::Relaxed) - failures_before;
    marker("window-end");

    let rss = system::peak_rss_mib(pid).unwrap_or_default();
    let threads = system::threads(pid).unwrap_or_default();
    let stopping = Instant::now();
    // What was measured stands when the last write at shutdown fails (a
    // database too loaded to take it within its timeout): say so beside it.
    let shutdown_error = overseer.shutdown().await.err().map(|e| e.to_string());
    if let Some(e) = &shutdown_error {
        eprintln!("scenario scale: shutdown: {e}");
    }
    Ok(json!({
        "startup_s": startup,
        "shutdown_s": stopping.elapsed().as_secs_f64(),
        "shutdown_error": shutdown_error,
        "wall_s": wall,
        "cpu_percent": 100.0 * cpu / wall,
        "peak_rss_mib": rss,
        "threads": threads,
        "flushes": flushes,
        "flush_failures": failures,
        "flush_ms": micros.iter().map(|m| *m as f64 / 1000.0).collect::<Vec<_>>(),
        "statements": statements,
        "verdicts": verdicts,
        "publish_ms": publishes.iter().map(|m| *m as f64 / 1000.0).collect::<Vec<_>>(),
        "bytes_written": written,
        // From the first to the last flush seen: whole periods, no window edges.
        "flushes_per_s": match (flushed_at.first(), flushed_at.last()) {
            (Some(a), Some(b)) if b > a => (flushed_at.len() - 1) as f64 / (b - a),
            _ => flushes as f64 / wall,
        },
        // Between the first and the last tick seen whole in the window: polls
        // answered per executor per second (ticks less polls missed), the
        // ticks' own rate (1 when the supervisor's timer keeps time), and the
        // share of the polls due that were answered.
        "polls_per_executor_per_s": span.map_or(f64::NAN, |(seconds, missed, ticks)| {
            ticks.saturating_sub(missed) as f64 / seconds / round as f64
        }),
        "ticks_per_s": span.map_or(f64::NAN, |(seconds, _, ticks)| {
            ticks as f64 / seconds / round as f64
        }),
        "polls_answered_share": span.map_or(f64::NAN, |(_, missed, ticks)| {
            ticks.saturating_sub(missed) as f64 / ticks as f64
        }),
    }))
}
