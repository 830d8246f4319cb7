//! Section 1: The host's main loop beside hung executors, against a loop with no
//! Overseer at all.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

use crate::chart::{self, BLUE, GREEN, GREY, ORANGE, RangeRow};
use crate::plan::Plan;
use crate::process;
use crate::report::{Body, Out, table};
use crate::stats::{Summary, count, num};

/// One configuration beside the loop.
struct Case {
    label: String,
    kind: &'static str,
    hung: usize,
    runs: Vec<Value>,
}

impl Case {
    fn summary(&self, key: &str) -> Option<Summary> {
        let values: Vec<f64> = self.runs.iter().filter_map(|r| r[key].as_f64()).collect();
        Summary::of(&values)
    }
}

pub fn run(plan: &Plan, out: &Out) -> Result<Body> {
    let mut cases = vec![Case {
        label: "no Overseer (the reference)".into(),
        kind: "none",
        hung: 0,
        runs: Vec::new(),
    }];
    for kind in ["async", "blocking"] {
        for &hung in &plan.loop_hung {
            if hung == 0 && kind == "blocking" {
                continue; // no executor: async and blocking are the same case
            }
            let label = if hung == 0 {
                "Overseer, 0 hung executors".to_owned()
            } else {
                format!("Overseer, {} hung {kind} executors", num(hung as f64, 0))
            };
            cases.push(Case {
                label,
                kind,
                hung,
                runs: Vec::new(),
            });
        }
    }
    let deadline = Duration::from_secs_f64(plan.loop_warmup_s + plan.loop_seconds + 60.0);
    for run in 0..plan.runs {
        for case in &mut cases {
            eprintln!(
                "main loop: run {} of {}: {}",
                run + 1,
                plan.runs,
                case.label
            );
            let result = process::scenario(
                "loop",
                &[
                    ("kind", case.kind.to_owned()),
                    ("hung", case.hung.to_string()),
                    ("warmup", plan.loop_warmup_s.to_string()),
                    ("seconds", plan.loop_seconds.to_string()),
                ],
                deadline,
                |_| {},
            )?;
            case.runs.push(result);
        }
    }

    let cell = |case: &Case, key: &str, decimals: usize| {
        case.summary(key)
            .map_or_else(|| "–".into(), |s| s.cell(decimals))
    };
    let rows: Vec<Vec<String>> = cases
        .iter()
        .map(|c| {
            vec![
                c.label.clone(),
                cell(c, "p99_ms", 2),
                cell(c, "worst_ms", 2),
                cell(c, "cpu_percent", 1),
                cell(c, "peak_rss_mib", 1),
                cell(c, "threads", 0),
                cell(c, "checks_running", 0),
            ]
        })
        .collect();
    let mut body = format!(
        "A host program's main loop ticks every 10 ms on tokio (a multi-threaded runtime, as a \
         scheduler embedding Overseer would have); each tick's lateness is how long after its due \
         time it ran. Beside it, an embedded Overseer (`Overseer::builder()`, SQLite, poll, flush \
         and refresh every 1 s, poll timeout 0.5 s) supervises executors whose health check never \
         answers: *async* hangs (a future that never completes) or *blocking* hangs (a thread \
         parked forever). Each case is a process of its own: {} s measured after {} s of \
         warm-up, {}.\n\n",
        plan.loop_seconds,
        plan.loop_warmup_s,
        count(plan.runs, "run")
    );
    body.push_str(&table(
        &[
            "beside the loop",
            "p99 lateness, ms",
            "worst tick, ms",
            "process CPU, % of a core",
            "peak RSS, MiB",
            "threads",
            "checks held",
        ],
        &rows,
    ));
    body.push_str(
        "\n*Checks held*: hung checks running at the end (a task or a thread each); the in-flight \
         guard keeps it at one per executor however many polls time out.\n\n",
    );

    let chart_rows: Vec<RangeRow> = cases
        .iter()
        .filter_map(|c| {
            let p99 = c.summary("p99_ms")?;
            let worst = c.summary("worst_ms")?;
            Some(RangeRow {
                label: c.label.clone(),
                summary: p99,
                mark: Some(worst.max),
                color: match c.kind {
                    "none" => GREY,
                    "async" if c.hung == 0 => GREEN,
                    "async" => BLUE,
                    _ => ORANGE,
                },
            })
        })
        .collect();
    chart::ranges(
        &out.chart("main-loop.svg"),
        "Host loop lateness (10 ms ticks): p99 per run (bar: min–max, dot: median), worst tick (×)",
        "milliseconds late (log scale)",
        &chart_rows,
        true,
    )?;
    body.push_str(&Out::image(
        "main-loop.svg",
        "host loop lateness beside hung executors",
    ));
    body.push_str("\n\n");

    let p99 = |kind: &str, hung: usize| {
        cases
            .iter()
            .find(|c| c.kind == kind && c.hung == hung)
            .and_then(|c| c.summary("p99_ms"))
            .map(|s| s.median)
    };
    let most = plan.loop_hung.iter().copied().max().unwrap_or(0);
    if let (Some(alone), Some(a), Some(b)) =
        (p99("none", 0), p99("async", most), p99("blocking", most))
    {
        let worst = cases
            .iter()
            .filter_map(|c| c.summary("worst_ms"))
            .map(|s| s.max)
            .fold(0.0, f64::max);
        let _ = writeln!(
            body,
            "**For an operator**: with {} executors hung the host's loop had a p99 lateness of \
             {} ms (async hangs) and {} ms (blocking hangs), against {} ms with no Overseer at \
             all, and no tick in any case was more than {} ms late. A hung executor costs the \
             host one parked task or thread, and its loop nothing it can notice; the threads \
             column is the price of a *blocking* check that never returns.",
            num(most as f64, 0),
            num(a, 2),
            num(b, 2),
            num(alone, 2),
            num(worst, 1),
        );
    }
    Ok(body.into())
}
