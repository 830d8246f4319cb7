//! Section 4: The health endpoint under load: Overseer's `/api/v2/monitor/health`
//! beside a bare actix-web route serving the same bytes (the reference: what
//! actix-web itself costs, so the ratio is what Overseer adds per request), its
//! static `/api/v2/version`, and Airflow 3.3.2's own `airflow api-server`
//! `/api/v2/monitor/health`, on the same Postgres Jobs table.
//!
//! # Layout
//! - this module: the section's run: the servers started, wrk run against
//!   each endpoint in turn, what each run cost the server;
//! - `load`: wrk, the load generator, run and read ([`wrk`], [`Load`]);
//! - `airflow`: Airflow's own API server, configured by the variables both
//!   servers read;
//! - `bare`: the reference, a bare actix-web route serving the health
//!   endpoint's bytes ([`serve_bare`]);
//! - `sse`: `overseer serve`'s memory with stream clients that never read;
//! - `report`: the section's Markdown: the tables, the ratio to the
//!   reference, the charts and the operator's summary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::pg::BenchDb;
use crate::plan::Plan;
use crate::process::{self, Server, get, get_json};
use crate::report::{Body, Out, Skip};
use crate::stats::{Summary, bytes};
use crate::system;
use crate::venv;

mod airflow;
mod bare;
mod load;
mod report;
mod sse;

pub(crate) use airflow::{
    AIRFLOW_START_DEADLINE, AIRFLOW_WORKERS, MIGRATE_DEADLINE, THRESHOLD_S, airflow_command,
    airflow_variables,
};
pub use bare::serve_bare;
pub(crate) use bare::{BARE_PATH, start_bare};
pub(crate) use load::{Load, WRK_THREADS, WRK_TIMEOUT, wrk};

use airflow::airflow_recipe;
use bare::BARE_LABEL;
use sse::sse_memory;

/// `overseer serve`'s default log filter (`DEFAULT_FILTER` in the binary's
/// `logging`), which the harness's usual `RUST_LOG=warn` would hide: the
/// endpoint is measured at the level operators run.
const DEFAULT_LOG_FILTER: &str = "info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn";

/// One wrk run against one endpoint, and what the server spent on it.
struct Run {
    connections: u32,
    load: Load,
    /// CPU seconds of the server (all its processes) per 10,000 requests answered.
    cpu_per_10k: f64,
    /// The server's peak resident memory during the run, MiB.
    peak_rss_mib: f64,
}

/// One endpoint under load, and what it measured at each connection count.
struct Target {
    label: String,
    url: String,
    /// The server's root process (its tree is measured).
    pid: u32,
    airflow: bool,
    runs: Vec<Run>,
}

impl Target {
    fn at(&self, connections: u32) -> Vec<&Run> {
        self.runs
            .iter()
            .filter(|r| r.connections == connections)
            .collect()
    }

    fn summary(&self, connections: u32, value: impl Fn(&Run) -> f64) -> Option<Summary> {
        Summary::of(
            &self
                .at(connections)
                .into_iter()
                .map(value)
                .collect::<Vec<_>>(),
        )
    }
}

/// What the section measured, for its report.
struct Measured {
    /// Every endpoint, with its runs.
    targets: Vec<Target>,
    /// How long `airflow db migrate` took, when Airflow ran.
    migrate_seconds: Option<f64>,
    /// Whether each run's peak memory was reset before it.
    peak_reset: bool,
    /// Each endpoint's response size, as the report says it.
    sizes: Vec<String>,
    /// The table of [`sse_memory`].
    sse: String,
    /// What was not measured, and why.
    notes: Vec<String>,
    /// Overseer's health endpoint's URL.
    overseer_health: String,
    /// The version Airflow's API server reported.
    airflow_version: Option<String>,
}

pub async fn run(plan: &Plan, out: &Out, bin: &Path) -> Result<Body> {
    if Command::new("wrk").arg("--version").output().is_err() {
        return Err(Skip(
            "wrk is not installed (`apt-get install wrk`; `just bench` installs it)".into(),
        )
        .into());
    }
    let db = BenchDb::create("overseer_bench_http")
        .await
        .map_err(|e| Skip(format!("the loopback Postgres is unusable: {e:#}")))?;
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("dags"))?;
    let env = airflow_variables(&db, dir.path());
    let mut notes = Vec::new();

    // Airflow first (its migration makes the table; Overseer then adds its columns).
    let airflow_venv: Result<PathBuf, String> = if plan.airflow {
        venv::airflow()
    } else {
        Err("the smoke run does not start Airflow".into())
    };
    let mut migrate_seconds = None;
    if let Ok(venv) = &airflow_venv {
        eprintln!("http: airflow db migrate");
        let started = std::time::Instant::now();
        process::run_to_end(
            "airflow db migrate",
            airflow_command(venv, dir.path(), &env, &["db", "migrate"]),
            &dir.path().join("airflow-migrate.log"),
            MIGRATE_DEADLINE,
        )?;
        migrate_seconds = Some(started.elapsed().as_secs_f64());
    }

    let mut overseer_env: Vec<(&str, String)> = env.clone();
    overseer_env.push(("OVERSEER_DATABASE__URL", db.url()));
    // Logging as an operator runs it: every request pays for what is logged.
    overseer_env.push(("OVERSEER_LOG", DEFAULT_LOG_FILTER.into()));
    let (mut overseer, addr) = process::serve_overseer(bin, dir.path(), &overseer_env)?;
    db.execute(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, unixname) VALUES \
         ('running', 'SchedulerJob', now(), now(), 'bench-host', 'airflow'), \
         ('running', 'TriggererJob', now(), now(), 'bench-host', 'airflow'), \
         ('running', 'DagProcessorJob', now(), now(), 'bench-host', 'airflow')",
    )
    .await?;
    let overseer_health = format!("http://{addr}/api/v2/monitor/health");
    overseer.wait_for(
        "reporting the scheduler healthy",
        Duration::from_secs(30),
        |_| get_json(&overseer_health).filter(|j| j["scheduler"]["status"] == "healthy"),
    )?;
    let health_body = get(&overseer_health)
        .map(|(_, body)| body)
        .context("the health endpoint answered nothing")?;
    let (mut bare, bare_addr) = start_bare(dir.path(), &health_body)?;
    // The reference first, the health endpoint right after it: each pair of
    // runs is measured back to back, under the same noise.
    let mut targets = vec![
        Target {
            label: BARE_LABEL.into(),
            url: format!("http://{bare_addr}{BARE_PATH}"),
            pid: bare.pid(),
            airflow: false,
            runs: Vec::new(),
        },
        Target {
            label: "Overseer `/api/v2/monitor/health`".into(),
            url: overseer_health.clone(),
            pid: overseer.pid(),
            airflow: false,
            runs: Vec::new(),
        },
        Target {
            label: "Overseer `/api/v2/version` (static: the ceiling)".into(),
            url: format!("http://{addr}/api/v2/version"),
            pid: overseer.pid(),
            airflow: false,
            runs: Vec::new(),
        },
    ];

    let mut airflow_server = None;
    let mut airflow_version = None;
    match &airflow_venv {
        Ok(venv) => {
            let port = overseer_testkit::throwaway::free_port();
            eprintln!("http: airflow api-server on port {port}");
            let mut server = Server::spawn(
                "airflow api-server",
                airflow_command(
                    venv,
                    dir.path(),
                    &env,
                    &[
                        "api-server",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        &port.to_string(),
                        "--workers",
                        AIRFLOW_WORKERS,
                    ],
                ),
                dir.path().join("airflow-api-server.log"),
            )?;
            let url = format!("http://127.0.0.1:{port}/api/v2/monitor/health");
            server.wait_for(
                "answering its health endpoint",
                AIRFLOW_START_DEADLINE,
                |_| get_json(&url).filter(|j| j["scheduler"]["status"] == "healthy"),
            )?;
            airflow_version = get_json(&format!("http://127.0.0.1:{port}/api/v2/version"))
                .and_then(|v| v["version"].as_str().map(str::to_owned));
            targets.push(Target {
                label: "Airflow `airflow api-server` `/api/v2/monitor/health`".into(),
                url,
                pid: server.pid(),
                airflow: true,
                runs: Vec::new(),
            });
            airflow_server = Some(server);
        }
        Err(why) => notes.push(format!(
            "Airflow's API server was not measured: {why}. With the venv there, this section runs \
             (then the same wrk runs against Airflow's endpoint):\n\n{}",
            airflow_recipe(
                &venv::airflow_path()
                    .unwrap_or_else(|_| PathBuf::from("~/.cache/overseer/airflow-3.3.2-venv"))
            )
        )),
    }

    let sizes: Vec<String> = targets
        .iter()
        .map(|t| {
            let size = get(&t.url).map_or(0, |(_, body)| body.len());
            format!("{} {}", t.label, bytes(size as f64))
        })
        .collect();

    let mut peak_reset = true;
    for &connections in &plan.http_connections {
        for target in &targets {
            eprintln!(
                "http: warm-up {} at {connections} connections",
                target.label
            );
            wrk(&target.url, connections, plan.http_warmup)?;
        }
        for run in 0..plan.runs {
            for target in &mut targets {
                eprintln!(
                    "http: run {} of {}: {} at {connections} connections",
                    run + 1,
                    plan.runs,
                    target.label
                );
                let tree = system::tree(target.pid);
                for pid in &tree {
                    peak_reset &= system::reset_peak_rss(*pid);
                }
                let cpu_before = system::tree_cpu_seconds(&tree);
                let load = wrk(&target.url, connections, plan.http_seconds)?;
                let cpu = system::tree_cpu_seconds(&tree) - cpu_before;
                let rss = system::tree_peak_rss_mib(&tree);
                let per_10k = if load.requests > 0.0 {
                    cpu / load.requests * 10_000.0
                } else {
                    f64::NAN
                };
                target.runs.push(Run {
                    connections,
                    load,
                    cpu_per_10k: per_10k,
                    peak_rss_mib: rss,
                });
            }
        }
    }
    let sse = sse_memory(
        &db,
        &addr,
        overseer.pid(),
        plan.sse_hold_s,
        plan.sse_after_s,
    )
    .await?;
    overseer.check_alive()?;
    bare.check_alive()?;
    bare.stop();
    overseer.stop();
    if let Some(mut server) = airflow_server.take() {
        server.stop();
    }

    let body = report::body(
        plan,
        out,
        Measured {
            targets,
            migrate_seconds,
            peak_reset,
            sizes,
            sse,
            notes,
            overseer_health,
            airflow_version,
        },
    )?;
    drop(db);
    Ok(body.into())
}
