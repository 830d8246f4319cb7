//! # overseer-bench
//!
//! `just bench`: every benchmark of Overseer side by side in one run, each figure
//! beside its reference measured in the same run on the same machine, printed as
//! tables and written to `BENCHMARKS.md` with SVG charts in `docs/bench/`.
//!
//! ```text
//! overseer-bench [--smoke] [--only SECTIONS] [--out DIR]
//! ```
//! - `--smoke`: CI's pass (tiny sizes, one run each, no assertion on any figure),
//!   written to a temporary folder unless `--out` says otherwise.
//! - `--only loop,scale,detection,http,celery,probe,plugin,events,pool,flood,reads,lost`: some sections (also to a temporary folder).
//! - `--out DIR`: where `BENCHMARKS.md` and `docs/bench/*.svg` go (default: the workspace).
//!
//! Exit code 1 when a section failed or was only partly measured (the report is
//! written all the same); under `--smoke` with `CI` set, a skipped section fails too.
//!
//! # Layout
//! - [`plan`]: sizes, lengths and repetitions, full and smoke.
//! - [`sections`]: one module per section of the report; each runs its scenarios and
//!   returns its Markdown, tables, charts and a line for operators.
//! - [`scenario`]: the child side: the host loop and the scale scenario, each in a
//!   process of its own (this binary, re-run with `--scenario`).
//! - [`process`]: starting and stopping processes by pid: scenarios, `overseer serve`,
//!   Airflow; the `overseer` binary itself; small HTTP reads.
//! - [`wire`]: a counting proxy in front of Postgres, for the bytes per flush.
//! - [`pg`]: a database of the benchmark's own on the shared Postgres.
//! - [`venv`]: the Celery and Airflow venvs the references run from.
//! - [`system`]: CPU, peak memory, threads and bytes written, from `/proc`; the machine.
//! - [`stats`]: medians and spreads; numbers as the report prints them.
//! - [`chart`]: the SVG charts (plotters).
//! - [`report`]: `BENCHMARKS.md` itself.

mod chart;
mod pg;
mod plan;
mod process;
mod report;
mod scenario;
mod sections;
mod stats;
mod system;
mod venv;
mod wire;

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use sea_orm::ConnectionTrait;

use crate::plan::Plan;
use crate::report::{Body, Out, Outcome, RunInfo, Section, Skip};

/// The sections, in the report's order: (id for `--only`, title).
const SECTIONS: [(&str, &str); 12] = [
    ("loop", "1. The host's main loop beside hung executors"),
    ("scale", "2. Scale: executors polled every second"),
    (
        "detection",
        "3. Detection time: from the broker's death to unhealthy",
    ),
    ("http", "4. The health endpoint under load"),
    ("celery", "5. The Celery check beside Python"),
    ("probe", "6. A probe that floods its output"),
    (
        "plugin",
        "7. Airflow's own health endpoint with Overseer's plugin",
    ),
    ("events", "8. The workers' heartbeats, ingested"),
    ("pool", "9. The check pool beside tokio's own runners"),
    ("flood", "10. A flood of forged workers"),
    (
        "reads",
        "11. Airflow's tables read at a million task instances",
    ),
    ("lost", "12. Lost work reconciled at 100,000 messages"),
];

const USAGE: &str = "usage: overseer-bench [--smoke] [--only loop,scale,detection,http,celery,probe,plugin,events,pool,flood,reads,lost] [--out DIR]";

struct Options {
    smoke: bool,
    only: Option<Vec<String>>,
    out: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options {
        smoke: false,
        only: None,
        out: None,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--smoke" => options.smoke = true,
            "--only" => {
                let list = args.next().context("--only needs a list")?;
                let ids: Vec<String> = list.split(',').map(|s| s.trim().to_owned()).collect();
                for id in &ids {
                    if !SECTIONS.iter().any(|(s, _)| s == id) {
                        bail!("no section {id}; {USAGE}");
                    }
                }
                options.only = Some(ids);
            }
            "--out" => {
                options.out = Some(PathBuf::from(args.next().context("--out needs a folder")?))
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}; {USAGE}"),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--scenario") {
        let name = args.get(1).cloned().unwrap_or_default();
        return match scenario::main(&name, &args[2.min(args.len())..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("scenario {name}: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match parse(&args).and_then(run) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("overseer-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// One line of a tool's `--version`, or `?`.
fn tool_version(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).to_string()
                + &String::from_utf8_lossy(&o.stderr);
            text.lines().next().unwrap_or("?").trim().to_owned()
        })
        .unwrap_or_else(|| "?".into())
}

async fn postgres_version() -> Option<String> {
    let conn = pg::connect(&pg::admin_url()).await.ok()?;
    let row = conn
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT current_setting('server_version')",
        ))
        .await
        .ok()??;
    let _ = conn.close().await;
    row.try_get_by_index::<String>(0).ok()
}

fn run(options: Options) -> Result<ExitCode> {
    let plan = if options.smoke {
        Plan::smoke()
    } else {
        Plan::full()
    };
    let root = match (&options.out, options.smoke || options.only.is_some()) {
        (Some(out), _) => out.clone(),
        (None, true) => std::env::temp_dir().join("overseer-bench"),
        (None, false) => process::workspace(),
    };
    let out = Out::new(root)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let started = Instant::now();
    let started_at = chrono::Utc::now();
    let commit = report::commit(&process::workspace());
    let load_start = system::load_average();
    let mut notes = Vec::new();
    let bin = process::overseer_binary();
    if let Ok((_, Some(note))) = &bin {
        notes.push(note.clone());
    }

    let mut sections = Vec::new();
    for (id, title) in SECTIONS {
        if options
            .only
            .as_ref()
            .is_some_and(|only| !only.iter().any(|o| o == id))
        {
            continue;
        }
        eprintln!("== {title}");
        let t0 = Instant::now();
        let binary = || {
            bin.as_ref()
                .map(|(b, _)| b.clone())
                .map_err(|e| anyhow::anyhow!("no overseer binary: {e:#}"))
        };
        let result: Result<Body> = match id {
            "loop" => sections::main_loop::run(&plan, &out),
            "scale" => runtime.block_on(sections::scale::run(&plan, &out)),
            "detection" => binary().and_then(|b| sections::detection::run(&plan, &out, &b)),
            "http" => binary().and_then(|b| runtime.block_on(sections::http::run(&plan, &out, &b))),
            "probe" => runtime.block_on(sections::probe::run(&plan)),
            "plugin" => binary().and_then(|b| runtime.block_on(sections::plugin::run(&plan, &b))),
            "pool" => sections::pool::run(&plan),
            "events" => binary().and_then(|b| runtime.block_on(sections::events::run(&plan, &b))),
            "flood" => binary().and_then(|b| runtime.block_on(sections::flood::run(&plan, &b))),
            "reads" => runtime.block_on(sections::reads::run(&plan)),
            "lost" => binary().and_then(|b| runtime.block_on(sections::lost::run(&plan, &b))),
            _ => runtime.block_on(sections::celery::run(&plan, &out)),
        };
        let (body, outcome) = match result {
            Ok(body) if body.problems.is_empty() => (body.text, Outcome::Ran),
            Ok(body) => (body.text, Outcome::Partial(body.problems)),
            Err(e) => match e.downcast_ref::<Skip>() {
                Some(skip) => (String::new(), Outcome::Skipped(skip.0.clone())),
                None => (String::new(), Outcome::Failed(format!("{e:#}"))),
            },
        };
        let section = Section {
            title: title.to_owned(),
            body,
            outcome,
            seconds: t0.elapsed().as_secs_f64(),
        };
        println!("{}", section.markdown());
        sections.push(section);
    }

    let mut versions = vec![("Overseer".to_owned(), env!("CARGO_PKG_VERSION").to_owned())];
    if let Some(v) = runtime.block_on(postgres_version()) {
        versions.push(("PostgreSQL".into(), v));
    }
    let redis = tool_version("redis-server", &["--version"]);
    if let Some(v) = redis
        .split("v=")
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
    {
        versions.push(("Redis".into(), v.to_owned()));
    }
    let wrk = tool_version("wrk", &["--version"]);
    if let Some(v) = wrk.split_whitespace().nth(1) {
        versions.push(("wrk".into(), v.to_owned()));
    }
    versions.push((
        "rustc".into(),
        tool_version("rustc", &["--version"]).replace("rustc ", ""),
    ));
    let info = RunInfo {
        machine: system::Machine::read(),
        commit,
        started: started_at,
        load_start,
        load_end: system::load_average(),
        seconds: started.elapsed().as_secs_f64(),
        versions,
        notes,
    };
    let document = report::document(&plan, &info, &sections);
    let path = out.root.join("BENCHMARKS.md");
    std::fs::write(&path, document).with_context(|| format!("while writing {}", path.display()))?;
    println!(
        "overseer-bench: wrote {} and its charts in {} ({:.1} min)",
        path.display(),
        out.root.join(Out::CHARTS).display(),
        info.seconds / 60.0
    );

    let failed = sections
        .iter()
        .any(|s| matches!(s.outcome, Outcome::Failed(_) | Outcome::Partial(_)));
    let skipped_in_ci = plan.smoke
        && overseer_testkit::in_ci()
        && sections
            .iter()
            .any(|s| matches!(s.outcome, Outcome::Skipped(_)));
    Ok(if failed || skipped_in_ci {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
