//! Section 2, scale: executors polled every second, on SQLite and on Postgres: CPU,
//! peak memory, statements, bytes and time per flush.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use overseer_migration::{Migrator, MigratorTrait};
use sea_orm::ConnectionTrait;
use serde_json::Value;

use crate::chart::{self, BLUE, Line, ORANGE, Panel};
use crate::pg::{self, BenchDb};
use crate::plan::Plan;
use crate::process;
use crate::report::{Body, Out, table};
use crate::stats::{Summary, bytes, count, num};
use crate::wire::{Proxy, Snapshot};

/// How many executors flap in the churn row (at most a hundredth of the fleet).
const FLAPPING: usize = 500;

/// One database's runs at one executor count.
struct Point {
    backend: &'static str,
    executors: usize,
    /// Of those, how many turn at every poll (none but in the churn row).
    flapping: usize,
    runs: Vec<Value>,
    /// Bytes per flush, per run.
    flush_bytes: Vec<f64>,
    /// Bytes the database sent back per second, per run (Postgres only).
    read_bytes: Vec<f64>,
}

impl Point {
    fn new(backend: &'static str, executors: usize, flapping: usize) -> Self {
        Self {
            backend,
            executors,
            flapping,
            runs: Vec::new(),
            flush_bytes: Vec::new(),
            read_bytes: Vec::new(),
        }
    }

    fn summary(&self, key: &str) -> Option<Summary> {
        Summary::of(
            &self
                .runs
                .iter()
                .filter_map(|r| r[key].as_f64())
                .collect::<Vec<_>>(),
        )
    }

    /// Every sample of a per-flush array, across runs.
    fn pooled(&self, key: &str) -> Option<Summary> {
        let all: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|r| r[key].as_array())
            .flatten()
            .filter_map(Value::as_f64)
            .collect();
        Summary::of(&all)
    }
}

/// Log-log slope between the smallest and largest executor count above `from`.
fn growth(points: &[&Point], from: usize, value: impl Fn(&Point) -> Option<f64>) -> Option<f64> {
    let usable: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.executors >= from)
        .filter_map(|p| Some((p.executors as f64, value(p)?)))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    let (a, b) = (usable.first()?, usable.last()?);
    (b.0 > a.0).then(|| (b.1 / a.1).ln() / (b.0 / a.0).ln())
}

pub async fn run(plan: &Plan, out: &Out) -> Result<Body> {
    let mut notes = Vec::new();
    // The Postgres database and the counting proxy in front of it, if the server answers.
    let postgres = match BenchDb::create("overseer_bench_scale").await {
        Ok(db) => {
            let conn = pg::connect(&db.url()).await?;
            Migrator::up(&conn, None).await?;
            let _ = conn.close().await;
            let proxy = Proxy::start(&db.server)?;
            Some((db, proxy))
        }
        Err(e) => {
            notes.push(format!("Postgres was not measured: {e:#}"));
            None
        }
    };
    let mut points: Vec<Point> = Vec::new();
    for backend in ["SQLite", "Postgres"] {
        if backend == "Postgres" && postgres.is_none() {
            continue;
        }
        for &executors in &plan.scale_executors {
            points.push(Point::new(backend, executors, 0));
        }
    }
    // Churn: the largest fleet on Postgres with some executors whose verdict
    // turns at every poll, their answers spread over the poll, so reports
    // are built all the time.
    if let (Some(_), Some(&executors)) = (&postgres, plan.scale_executors.iter().max()) {
        points.push(Point::new(
            "Postgres",
            executors,
            (executors / 100).min(FLAPPING),
        ));
    }
    let deadline = Duration::from_secs_f64(plan.scale_warmup_s + plan.scale_seconds + 180.0);
    for run in 0..plan.runs {
        for point in &mut points {
            eprintln!(
                "scale: run {} of {}: {} executors on {}",
                run + 1,
                plan.runs,
                point.executors,
                point.backend
            );
            let db = match (point.backend, &postgres) {
                ("Postgres", Some((db, proxy))) => {
                    // Every run starts from an empty table.
                    let conn = pg::connect(&db.url()).await?;
                    conn.execute_unprepared("TRUNCATE job RESTART IDENTITY")
                        .await?;
                    let _ = conn.close().await;
                    db.url_via(&format!("127.0.0.1:{}", proxy.port))
                }
                _ => "sqlite".to_owned(),
            };
            let proxy = postgres.as_ref().map(|(_, p)| p.counts.clone());
            let window: Arc<Mutex<Vec<Snapshot>>> = Arc::default();
            let marks = window.clone();
            let params = [
                ("db", db.clone()),
                ("executors", point.executors.to_string()),
                ("flapping", point.flapping.to_string()),
                ("warmup", plan.scale_warmup_s.to_string()),
                ("seconds", plan.scale_seconds.to_string()),
            ];
            let result = tokio::task::spawn_blocking(move || {
                process::scenario("scale", &params, deadline, |line| {
                    if line.starts_with("window-")
                        && let Some(counts) = &proxy
                    {
                        marks.lock().expect("marks").push(counts.snapshot());
                    }
                })
            })
            .await??;
            let marks = window.lock().expect("marks").clone();
            if point.backend == "Postgres" {
                if let [start, end] = marks[..] {
                    let transactions = end.transactions.saturating_sub(start.transactions);
                    if transactions > 0 {
                        point.flush_bytes.push(
                            end.flush_bytes.saturating_sub(start.flush_bytes) as f64
                                / transactions as f64,
                        );
                    }
                    let wall = result["wall_s"].as_f64().unwrap_or(1.0);
                    point
                        .read_bytes
                        .push(end.server_bytes.saturating_sub(start.server_bytes) as f64 / wall);
                }
            } else {
                let flushes = result["flushes"].as_f64().unwrap_or(0.0);
                if flushes > 0.0 {
                    point
                        .flush_bytes
                        .push(result["bytes_written"].as_f64().unwrap_or(0.0) / flushes);
                }
            }
            point.runs.push(result);
        }
    }

    let (churn, points): (Vec<Point>, Vec<Point>) =
        points.into_iter().partition(|p| p.flapping > 0);
    let mut body = format!(
        "Overseer embedded as a library supervises N executors whose check answers at once \
         (so what is measured is Overseer's own cost), polled every 1 s (timeout 0.5 s), its \
         verdicts and heartbeats flushed every 1 s and the report refreshed from the table every \
         1 s. Every executor answers `healthy` at every poll, so after the first flush no verdict \
         changes: a flush is the heartbeat alone, one statement that sets `latest_heartbeat` on all \
         N rows and moves each held verdict's `executor_health_checked_at` with it (a verdict is \
         written only when its health or reason changes). The refresh reads only other sessions' \
         rows that changed since the last read (none here), never this process's own, which the \
         report shows from memory. Each point is a process of its own: {} s measured after {} s of warm-up, {}; SQLite is a \
         fresh file each run, Postgres a database of the benchmark's own on the shared server \
         (emptied before each run).\n\n",
        plan.scale_seconds,
        plan.scale_warmup_s,
        count(plan.runs, "run")
    );
    let rows: Vec<Vec<String>> = points
        .iter()
        .chain(&churn)
        .map(|p| {
            let s = |k: &str, d: usize| p.summary(k).map_or("–".into(), |s| s.cell(d));
            vec![
                p.backend.to_owned(),
                match p.flapping {
                    0 => num(p.executors as f64, 0),
                    n => format!(
                        "{}, {} flapping",
                        num(p.executors as f64, 0),
                        num(n as f64, 0)
                    ),
                },
                s("cpu_percent", 1),
                s("peak_rss_mib", 0),
                p.pooled("flush_ms").map_or_else(
                    || format!("none completed in {} s", num(plan.scale_seconds, 0)),
                    |s| s.cell_p(1),
                ),
                s("flushes_per_s", 2),
                p.pooled("statements").map_or("–".into(), |s| s.cell(0)),
                p.pooled("verdicts").map_or("–".into(), |s| s.cell(0)),
                Summary::of(&p.flush_bytes).map_or("–".into(), |s| bytes(s.median)),
                s("polls_per_executor_per_s", 2),
                s("startup_s", 2),
            ]
        })
        .collect();
    body.push_str(&table(
        &[
            "database",
            "executors",
            "CPU, % of a core",
            "peak RSS, MiB",
            "time per flush, ms (p10–p90)",
            "flushes per s",
            "statements per flush",
            "verdicts per flush",
            "bytes per flush",
            "polls answered per executor per s",
            "start-up, s",
        ],
        &rows,
    ));
    body.push_str(
        "\n*Bytes per flush*: on Postgres, what Overseer sends to the server per flush (the SQL \
         and protocol framing of `BEGIN`, the heartbeat `UPDATE`, the verdict `UPDATE`, \
         `COMMIT`), counted by a loopback proxy that reads the protocol's message headers \
         (`pg_stat_statements` is not installed here); the proxy adds one loopback hop to the \
         Postgres flush times. On SQLite there is no wire: it is the bytes the process wrote to \
         the database file and its journal per flush (`wchar` of `/proc/PID/io`). *Statements \
         per flush* and *time per flush* are the aggregator's own counters \
         (`Overseer::aggregator_stats()`), read after every flush; CPU is the Overseer process's \
         only (not the database server's). *Start-up* includes registering a row per executor.\n",
    );
    if let Some(p) = churn.first() {
        let _ = writeln!(
            body,
            "\n*Churn* (the last row): of the {} executors, {} answer after a delay of their \
             own (0 to 0.4 s) and turn from `healthy` to `unhealthy` and back at every poll, so \
             verdicts come one by one all through each second, each asking for a new report. A \
             report of this fleet takes {} ms to build and render (median, read at each flush), \
             and the next waits {} times as long as the last took (`PUBLISH_SPACING`), so \
             building reports takes at most a fifth of the actors' thread: polls answered, {} \
             per executor per s.\n",
            num(p.executors as f64, 0),
            num(p.flapping as f64, 0),
            p.pooled("publish_ms")
                .map_or("?".into(), |s| num(s.median, 1)),
            overseer_core::actors::aggregator::PUBLISH_SPACING,
            p.summary("polls_per_executor_per_s")
                .map_or("none".into(), |s| num(s.median, 2)),
        );
    }
    if let Some(reads) = points
        .iter()
        .filter(|p| p.backend == "Postgres")
        .filter_map(|p| Some((p.executors, Summary::of(&p.read_bytes)?)))
        .map(|(n, s)| format!("{} at {}", bytes(s.median), num(n as f64, 0)))
        .reduce(|a, b| format!("{a}, {b}"))
    {
        let _ = writeln!(
            body,
            "\nWhat Postgres sent back per second (the once-a-second refresh reads Airflow's most \
             recent job of each type and the rows of other sessions that changed, none here; the \
             flushes' acknowledgements): {reads} executors.\n"
        );
    }

    let series = |backend: &str, value: &dyn Fn(&Point) -> Option<f64>| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter(|p| p.backend == backend)
            .filter_map(|p| Some((p.executors as f64, value(p)?)))
            .collect()
    };
    let panel = |title: &str, y: &str, value: &dyn Fn(&Point) -> Option<f64>| Panel {
        title: title.into(),
        y_desc: y.into(),
        lines: ["SQLite", "Postgres"]
            .iter()
            .zip([BLUE, ORANGE])
            .map(|(b, color)| Line {
                name: (*b).into(),
                points: series(b, value),
                color,
            })
            .filter(|l| !l.points.is_empty())
            .collect(),
    };
    let cpu = |p: &Point| p.summary("cpu_percent").map(|s| s.median);
    let rss = |p: &Point| p.summary("peak_rss_mib").map(|s| s.median);
    let flush = |p: &Point| p.pooled("flush_ms").map(|s| s.median);
    let wire = |p: &Point| Summary::of(&p.flush_bytes).map(|s| s.median);
    chart::log_log(
        &out.chart("scale.svg"),
        "Cost against executors polled every second (log-log; dashed: linear growth)",
        &[
            panel("CPU", "% of a core", &cpu),
            panel("Peak RSS", "MiB", &rss),
            panel("Time per flush", "ms", &flush),
            panel("Bytes per flush", "bytes", &wire),
        ],
    )?;
    body.push('\n');
    body.push_str(&Out::image(
        "scale.svg",
        "cost against executor count, log-log",
    ));
    body.push_str("\n\n");

    // Where polling every executor every second is more than the actors' one
    // thread can do: polls answered fall behind, or flushes stop completing.
    let saturated: Vec<String> = ["SQLite", "Postgres"]
        .iter()
        .filter_map(|backend| {
            let p = points.iter().filter(|p| p.backend == *backend).find(|p| {
                let polls = p
                    .summary("polls_per_executor_per_s")
                    .map_or(0.0, |s| s.median);
                let flushes = p.summary("flushes_per_s").map_or(0.0, |s| s.median);
                polls < 0.9 || flushes < 0.9
            })?;
            Some(format!(
                "on {backend} from {} executors (polls answered {} per executor per s, flushes {} \
                 per s)",
                num(p.executors as f64, 0),
                p.summary("polls_per_executor_per_s")
                    .map_or("none".into(), |s| num(s.median, 2)),
                num(p.summary("flushes_per_s").map_or(0.0, |s| s.median), 2),
            ))
        })
        .collect();
    if !saturated.is_empty() {
        let _ = writeln!(
            body,
            "**Saturation**: polling every executor every second was more than Overseer's actors \
             could do {}: the process sits at one full core (the actors share one thread) and \
             the supervisor falls behind; where no flush completed, the table has no flush \
             time. Beyond that point the figures are a limit, not a cost.\n",
            saturated.join("; ")
        );
    }
    // The largest count each database kept up with, and how cost grew up to it.
    let keeps_up = |p: &Point| {
        p.summary("polls_per_executor_per_s")
            .is_some_and(|s| s.median >= 0.9)
            && p.summary("flushes_per_s").is_some_and(|s| s.median >= 0.9)
    };
    let mut lines = Vec::new();
    for backend in ["SQLite", "Postgres"] {
        let ps: Vec<&Point> = points
            .iter()
            .filter(|p| p.backend == backend && keeps_up(p))
            .collect();
        let Some(top) = ps.last() else { continue };
        let growth_text = match (growth(&ps, 100, cpu), growth(&ps, 100, flush)) {
            (Some(c), Some(f)) => format!(
                " (from 100 up, CPU grew as N^{} and flush time as N^{})",
                num(c, 2),
                num(f, 2)
            ),
            _ => String::new(),
        };
        lines.push(format!(
            "on {backend}, {} executors polled every second cost {}% of a core and {} MiB, and \
             each flush {} ms for {} on the wire or disk{growth_text}",
            num(top.executors as f64, 0),
            cpu(top).map_or("?".into(), |v| num(v, 1)),
            rss(top).map_or("?".into(), |v| num(v, 0)),
            flush(top).map_or("?".into(), |v| num(v, 0)),
            wire(top).map_or("?".into(), bytes),
        ));
    }
    if !lines.is_empty() {
        let _ = writeln!(
            body,
            "**For an operator**: {}. A flush is one statement while verdicts hold and two when \
             some change, whatever the count, so the database sees one transaction per heartbeat \
             interval; what grows is the rows the heartbeat touches (on SQLite every page holding \
             one, and the two heartbeat indexes Airflow's schema has) and the work per executor \
             (an exponent of 1 is linear growth). These executors are polled every second, ten \
             times Overseer's default; the refresh reads only what other sessions changed.",
            lines.join("; ")
        );
    }
    Ok(Body {
        text: body,
        problems: notes,
    })
}
