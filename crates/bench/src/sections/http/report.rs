//! The section's Markdown from what it measured: how it was measured, the
//! table of every endpoint at every connection count, the ratio to the bare
//! reference, the SSE memory, the charts, and the line for an operator.

use std::fmt::Write as _;

use anyhow::Result;

use super::bare::BARE_LABEL;
use super::{AIRFLOW_WORKERS, Measured, Run, THRESHOLD_S, Target, WRK_THREADS, WRK_TIMEOUT};
use crate::chart::{self, BLUE, GREEN, RED, RangeRow};
use crate::plan::Plan;
use crate::report::{Out, table};
use crate::stats::{Summary, count, num, ratio};

/// The section's Markdown.
pub(super) fn body(plan: &Plan, out: &Out, measured: Measured) -> Result<String> {
    let airflow_ran = measured.targets.iter().any(|t| t.airflow);
    let mut body = format!(
        "The release `overseer serve`{} reading one Postgres database of the benchmark's own: \
         {} with Overseer's four columns, one running scheduler, triggerer and DAG processor row \
         (liveness threshold raised to {THRESHOLD_S} s through Airflow's own variables, so \
         they stay alive), and Overseer's executor row (`LocalExecutor`, verdict `unknown`). wrk \
         ({WRK_THREADS} threads, timeout {WRK_TIMEOUT}) runs on the same 2 cores as the servers; \
         {} s of warm-up per endpoint, then {} of {} s each, interleaved. CPU is the \
         server's (all its processes, from `/proc/PID/stat`) during a run, per 10,000 requests \
         answered; peak RSS is the server's during the run ({}). Response sizes: {}.\n\n",
        if airflow_ran {
            format!(
                " and, beside it, Airflow's own `airflow api-server` ({AIRFLOW_WORKERS} workers, one \
                 per core as Airflow's `[api] workers` documentation advises; its default is 1; \
                 Overseer's actix server also runs one worker per core), both configured by the \
                 same Airflow variables and"
            )
        } else {
            String::new()
        },
        match measured.migrate_seconds {
            Some(s) => format!(
                "Airflow's own `job` table, made by `airflow db migrate` ({} s here),",
                num(s, 0)
            ),
            None => "the `job` table as Overseer's migration makes it (Airflow 3.3.2's DDL)".into(),
        },
        plan.http_warmup,
        count(plan.runs, "run"),
        plan.http_seconds,
        if measured.peak_reset {
            "reset before each run through `/proc/PID/clear_refs`; for Airflow the sum over its processes"
        } else {
            "its lifetime peak: resetting it was refused here"
        },
        measured.sizes.join(", "),
    );
    let health_rps = |connections: u32| {
        measured
            .targets
            .iter()
            .find(|t| t.label.starts_with("Overseer `/api/v2/monitor/health"))
            .and_then(|t| t.summary(connections, |r| r.load.rps))
            .map(|s| s.median)
    };
    let mut rows = Vec::new();
    for &connections in &plan.http_connections {
        for target in &measured.targets {
            let rps = target.summary(connections, |r| r.load.rps);
            let errors: Vec<String> = target
                .at(connections)
                .iter()
                .filter_map(|r| r.load.errors.clone())
                .collect();
            rows.push(vec![
                target.label.clone(),
                connections.to_string(),
                rps.map_or("–".into(), |s| s.cell(0)),
                target
                    .summary(connections, |r| r.load.p50_ms)
                    .map_or("–".into(), |s| s.cell(2)),
                target
                    .summary(connections, |r| r.load.p99_ms)
                    .map_or("–".into(), |s| s.cell(2)),
                target
                    .summary(connections, |r| r.cpu_per_10k)
                    .map_or("–".into(), |s| s.cell(3)),
                target
                    .summary(connections, |r| r.peak_rss_mib)
                    .map_or("–".into(), |s| s.cell(0)),
                if errors.is_empty() {
                    "none".into()
                } else {
                    errors.join("; ")
                },
                ratio(
                    health_rps(connections).unwrap_or(f64::NAN),
                    rps.map_or(f64::NAN, |s| s.median),
                ),
            ]);
        }
    }
    body.push_str(&table(
        &[
            "endpoint",
            "connections",
            "requests/s",
            "p50, ms",
            "p99, ms",
            "CPU s per 10,000 requests",
            "peak RSS, MiB",
            "errors",
            "Overseer's health requests/s ÷ this",
        ],
        &rows,
    ));
    body.push_str(&bare_ratio_table(plan, &measured.targets));
    body.push_str(&measured.sse);
    for note in &measured.notes {
        let _ = writeln!(body, "\n> {}\n", note.replace('\n', "\n> "));
    }
    let chart_rows = |value: &dyn Fn(&Run) -> f64| -> Vec<RangeRow> {
        plan.http_connections
            .iter()
            .flat_map(|&c| {
                measured.targets.iter().filter_map(move |t| {
                    Some(RangeRow {
                        label: format!(
                            "{} · {c} conn.",
                            t.label
                                .replace('`', "")
                                .replace(" (static: the ceiling)", " (static)")
                        ),
                        summary: t.summary(c, value)?,
                        mark: None,
                        color: if t.airflow {
                            RED
                        } else if t.url.ends_with("/version") || t.label == BARE_LABEL {
                            GREEN
                        } else {
                            BLUE
                        },
                    })
                })
            })
            .collect()
    };
    chart::ranges(
        &out.chart("http-throughput.svg"),
        "Requests per second (bar: min–max over runs, dot: median)",
        "requests per second (log scale)",
        &chart_rows(&|r| r.load.rps),
        true,
    )?;
    chart::ranges(
        &out.chart("http-latency.svg"),
        "p99 latency (bar: min–max over runs, dot: median)",
        "milliseconds (log scale)",
        &chart_rows(&|r| r.load.p99_ms),
        true,
    )?;
    body.push('\n');
    body.push_str(&Out::image("http-throughput.svg", "requests per second"));
    body.push_str("\n\n");
    body.push_str(&Out::image("http-latency.svg", "p99 latency"));
    body.push_str("\n\n");

    let first = plan.http_connections[0];
    let median = |t: &Target, f: &dyn Fn(&Run) -> f64| t.summary(first, f).map(|s| s.median);
    let health = measured
        .targets
        .iter()
        .find(|t| t.url == measured.overseer_health);
    let ceiling = measured
        .targets
        .iter()
        .find(|t| t.url.ends_with("/version"));
    let airflow = measured.targets.iter().find(|t| t.airflow);
    if let (Some(h), Some(c)) = (health, ceiling) {
        let (hr, cr) = (median(h, &|r| r.load.rps), median(c, &|r| r.load.rps));
        let hp = median(h, &|r| r.load.p99_ms);
        let mut line = format!(
            "**For an operator**: at {first} connections Overseer's health endpoint answered {} \
             requests/s with a p99 of {} ms, {} of its static route's rate",
            hr.map_or("?".into(), |v| num(v, 0)),
            hp.map_or("?".into(), |v| num(v, 2)),
            match (hr, cr) {
                (Some(h), Some(c)) if c > 0.0 => format!("{}%", num(100.0 * h / c, 0)),
                _ => "?".into(),
            }
        );
        if let Some(a) = airflow {
            let (ar, ap) = (median(a, &|r| r.load.rps), median(a, &|r| r.load.p99_ms));
            let (hc, ac) = (median(h, &|r| r.cpu_per_10k), median(a, &|r| r.cpu_per_10k));
            let _ = write!(
                line,
                "; Airflow's own endpoint, on the same rows, answered {} requests/s with a p99 of \
                 {} ms: Overseer answered {} as many, for {} less CPU per request",
                ar.map_or("?".into(), |v| num(v, 0)),
                ap.map_or("?".into(), |v| num(v, 0)),
                ratio(hr.unwrap_or(f64::NAN), ar.unwrap_or(f64::NAN)),
                ratio(ac.unwrap_or(f64::NAN), hc.unwrap_or(f64::NAN)),
            );
        }
        line.push_str(
            ". Each request reads a report rendered once per refresh and never touches the \
             database, so probes, load balancers and dashboards can poll it freely without load \
             on the metadatabase.",
        );
        body.push_str(&line);
        body.push('\n');
    }
    if let Some(version) = measured.airflow_version {
        let _ = writeln!(
            body,
            "\n<sub>Airflow's API server reported version {version}.</sub>"
        );
    }
    Ok(body)
}

/// The figure that counts: Overseer's health endpoint beside the bare route
/// serving the same bytes, as the ratio of each pair of runs measured back to
/// back (the machine's noise moves both alike), then its median over the pairs.
fn bare_ratio_table(plan: &Plan, targets: &[Target]) -> String {
    let find = |label: &str| targets.iter().find(|t| t.label.starts_with(label));
    let (Some(bare), Some(health)) = (find(BARE_LABEL), find("Overseer `/api/v2/monitor/health`"))
    else {
        return String::new();
    };
    let rows: Vec<Vec<String>> = plan
        .http_connections
        .iter()
        .map(|&connections| {
            let pairs: Vec<(f64, f64)> = health
                .at(connections)
                .iter()
                .zip(bare.at(connections))
                .map(|(h, b)| (h.load.rps, b.load.rps))
                .collect();
            let each = |f: &dyn Fn(&(f64, f64)) -> f64| {
                Summary::of(&pairs.iter().map(f).collect::<Vec<_>>())
            };
            let cell = |s: Option<Summary>, decimals| s.map_or("–".into(), |s| s.cell(decimals));
            let cpu = Summary::of(
                &health
                    .at(connections)
                    .iter()
                    .zip(bare.at(connections))
                    .map(|(h, b)| b.cpu_per_10k / h.cpu_per_10k)
                    .collect::<Vec<_>>(),
            );
            vec![
                connections.to_string(),
                cell(each(&|p| p.0), 0),
                cell(each(&|p| p.1), 0),
                cell(each(&|p| p.0 / p.1), 3),
                cell(cpu, 3),
                pairs
                    .iter()
                    .map(|(h, b)| num(h / b, 3))
                    .collect::<Vec<_>>()
                    .join(", "),
            ]
        })
        .collect();
    format!(
        "\nOverseer's health endpoint ÷ the bare actix-web route serving the same bytes, run by \
         run (each pair measured back to back): requests per second, and the server's CPU per \
         request (the bare route's over the health endpoint's, so 1 is as cheap):\n\n{}",
        table(
            &[
                "connections",
                "health requests/s",
                "bare route requests/s",
                "ratio (median, min–max)",
                "CPU per request, bare ÷ health",
                "ratio of each pair",
            ],
            &rows,
        )
    )
}
