//! Section 7: Airflow's own `/api/v2/monitor/health` with and without Overseer's
//! plugin, whose root middleware adds the `executor` entry from one read of the
//! `job` table per refresh interval (1 s) and api-server worker: two
//! `airflow api-server`s on one Postgres database,
//! one without the plugin, one with it (pip-installed `--no-deps --target` a
//! folder on its `PYTHONPATH`), measured by turns with wrk. The goal: the
//! plugin adds under 5% to the median latency. The plugin's statement is
//! `EXPLAIN`ed on the same table.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use sea_orm::ConnectionTrait;

use crate::pg::{self, BenchDb};
use crate::plan::Plan;
use crate::process::{self, Server, get, get_json};
use crate::report::{Body, Skip, table};
use crate::sections::http::{
    AIRFLOW_START_DEADLINE, AIRFLOW_WORKERS, Load, MIGRATE_DEADLINE, THRESHOLD_S, WRK_THREADS,
    WRK_TIMEOUT, airflow_command, airflow_variables, wrk,
};
use crate::stats::{Summary, bytes, count, num};
use crate::venv;

/// `pip install` of the plugin (it fetches setuptools to build it).
const PIP_DEADLINE: Duration = Duration::from_secs(300);
/// Closed executor rows beside the open ones: the history of restarts a
/// long-lived deployment keeps, which the plugin's read must not scan.
const CLOSED_ROWS: u32 = 10_000;
/// The goal: what the plugin may add to the median latency, in percent.
const GOAL_PERCENT: f64 = 5.0;

/// One api-server under load.
struct Target {
    label: &'static str,
    url: String,
    runs: Vec<(u32, Load)>,
}

impl Target {
    fn summary(&self, connections: u32, value: impl Fn(&Load) -> f64) -> Option<Summary> {
        let samples: Vec<f64> = self
            .runs
            .iter()
            .filter(|(c, _)| *c == connections)
            .map(|(_, l)| value(l))
            .collect();
        Summary::of(&samples)
    }
}

pub async fn run(plan: &Plan, bin: &Path) -> Result<Body> {
    if !plan.airflow {
        // Not a skip: the smoke run never starts Airflow, by design.
        return Ok(
            "Not measured in the smoke run: it does not start Airflow.\n"
                .to_owned()
                .into(),
        );
    }
    if Command::new("wrk").arg("--version").output().is_err() {
        return Err(Skip(
            "wrk is not installed (`apt-get install wrk`; `just bench` installs it)".into(),
        )
        .into());
    }
    let venv = venv::airflow().map_err(Skip)?;
    let db = BenchDb::create("overseer_bench_plugin")
        .await
        .map_err(|e| Skip(format!("the loopback Postgres is unusable: {e:#}")))?;
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("dags"))?;
    let site = dir.path().join("site");
    let mut env = airflow_variables(&db, dir.path());
    env.push((
        "AIRFLOW__OVERSEER__EXECUTOR_HEALTH_CHECK_THRESHOLD",
        THRESHOLD_S.into(),
    ));

    eprintln!("plugin: pip install the plugin, airflow db migrate, overseer migrate");
    install_plugin(&venv, dir.path(), &site)?;
    process::run_to_end(
        "airflow db migrate",
        airflow_command(&venv, dir.path(), &env, &["db", "migrate"]),
        &dir.path().join("airflow-migrate.log"),
        MIGRATE_DEADLINE,
    )?;
    let mut migrate = process::clean_command(bin, dir.path());
    migrate
        .arg("migrate")
        .env("OVERSEER_DATABASE__URL", db.url());
    process::run_to_end(
        "overseer migrate",
        migrate,
        &dir.path().join("overseer-migrate.log"),
        Duration::from_secs(120),
    )?;
    db.execute(&rows_sql()).await?;
    let plan_text = explain(&venv, &site, &db).await?;

    let mut servers = Vec::new();
    let mut targets = Vec::new();
    for (label, with_plugin) in [
        ("Airflow's `/api/v2/monitor/health`, no plugin", false),
        ("the same, with Overseer's plugin", true),
    ] {
        let port = overseer_testkit::throwaway::free_port();
        let mut command = airflow_command(
            &venv,
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
        );
        if with_plugin {
            command.env("PYTHONPATH", &site);
        }
        let name = if with_plugin {
            "with-plugin"
        } else {
            "no-plugin"
        };
        eprintln!("plugin: airflow api-server {name} on port {port}");
        let mut server = Server::spawn(
            &format!("airflow api-server ({name})"),
            command,
            dir.path().join(format!("api-server-{name}.log")),
        )?;
        let url = format!("http://127.0.0.1:{port}/api/v2/monitor/health");
        let body = server.wait_for(
            "answering its health endpoint",
            AIRFLOW_START_DEADLINE,
            |_| get_json(&url).filter(|j| j["scheduler"]["status"] == "healthy"),
        )?;
        let instances = body["executor"]["instances"].as_array().map(Vec::len);
        match (with_plugin, instances) {
            (true, Some(6)) | (false, None) => {}
            _ => bail!("{name}: unexpected executor entry in {body}"),
        }
        servers.push(server);
        targets.push(Target {
            label,
            url,
            runs: Vec::new(),
        });
    }
    let sizes: Vec<String> = targets
        .iter()
        .map(|t| {
            let size = get(&t.url).map_or(0, |(_, body)| body.len());
            format!("{} {}", t.label, bytes(size as f64))
        })
        .collect();

    for &connections in &plan.http_connections {
        for target in &targets {
            eprintln!(
                "plugin: warm-up {} at {connections} connections",
                target.label
            );
            wrk(&target.url, connections, plan.http_warmup)?;
        }
        for run in 0..plan.runs {
            for target in &mut targets {
                eprintln!(
                    "plugin: run {} of {}: {} at {connections} connections",
                    run + 1,
                    plan.runs,
                    target.label
                );
                let load = wrk(&target.url, connections, plan.http_seconds)?;
                target.runs.push((connections, load));
            }
        }
    }
    for server in &mut servers {
        server.check_alive()?;
        server.stop();
    }

    let mut body = format!(
        "Two `airflow api-server`s ({AIRFLOW_WORKERS} workers each) on one Postgres database of \
         the benchmark's own, made by `airflow db migrate` then `overseer migrate`: one running \
         scheduler, triggerer and DAG processor row, 6 open executor rows (2 hosts, 3 executors, \
         one `unhealthy`) and {} closed ones (restarts of the past). One has Overseer's plugin \
         on its `PYTHONPATH`, the other not; only one is under load at a time. wrk \
         ({WRK_THREADS} threads, timeout {WRK_TIMEOUT}) runs on the same 2 cores; {} s of \
         warm-up per server, then {} of {} s each, interleaved. Response sizes: {}.\n\n",
        count(CLOSED_ROWS as usize, "row"),
        plan.http_warmup,
        count(plan.runs, "run"),
        plan.http_seconds,
        sizes.join(", "),
    );
    let mut rows = Vec::new();
    let mut added = Vec::new();
    for &connections in &plan.http_connections {
        let p50 = |t: &Target| t.summary(connections, |l| l.p50_ms).map(|s| s.median);
        let base = p50(&targets[0]);
        for target in &targets {
            let errors: Vec<String> = target
                .runs
                .iter()
                .filter(|(c, _)| *c == connections)
                .filter_map(|(_, l)| l.errors.clone())
                .collect();
            let change = match (base, p50(target)) {
                (Some(b), Some(t)) if b > 0.0 && !std::ptr::eq(target, &targets[0]) => {
                    let percent = 100.0 * (t - b) / b;
                    added.push((connections, percent));
                    format!(
                        "{}{}%",
                        if percent >= 0.0 { "+" } else { "" },
                        num(percent, 1)
                    )
                }
                _ => "–".into(),
            };
            let cell = |value: &dyn Fn(&Load) -> f64, decimals| {
                target
                    .summary(connections, value)
                    .map_or("–".into(), |s| s.cell(decimals))
            };
            rows.push(vec![
                target.label.to_owned(),
                connections.to_string(),
                cell(&|l| l.rps, 0),
                cell(&|l| l.p50_ms, 2),
                cell(&|l| l.p99_ms, 2),
                change,
                if errors.is_empty() {
                    "none".into()
                } else {
                    errors.join("; ")
                },
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
            "p50 against no plugin",
            "errors",
        ],
        &rows,
    ));
    let _ = write!(
        body,
        "\nThe plugin's one statement (at most one per refresh interval and api-server \
         worker), as Postgres plans it on this table \
         (`EXPLAIN`):\n\n```text\n{plan_text}\n```\n\n"
    );
    let said: Vec<String> = added
        .iter()
        .map(|(c, p)| {
            format!(
                "{}{}% at {c} connections",
                if *p >= 0.0 { "+" } else { "" },
                num(*p, 1)
            )
        })
        .collect();
    let met = added.iter().all(|(_, p)| *p < GOAL_PERCENT);
    let _ = writeln!(
        body,
        "**For an operator**: the plugin changed the median latency of Airflow's own health \
         endpoint by {} (goal: under {GOAL_PERCENT:.0}%: {}). One read of the `job` table serves \
         the requests of one refresh interval (`[overseer] refresh_interval`, 1 s), so a \
         request costs the splice of the entry alone; the read is made once Airflow's answer \
         is complete, in one thread of its own per api-server worker on a connection it holds \
         (requests that come while a read is in flight share the next one); every other route \
         passes through untouched.",
        said.join(", "),
        if met { "met" } else { "not met" },
    );
    drop(db);
    Ok(body.into())
}

/// The plugin from this workspace, built from a copy of its source (pip writes
/// in the source folder; the build runs npm for the card, whose `node_modules`
/// is left behind), into `site`.
fn install_plugin(venv: &Path, dir: &Path, site: &Path) -> Result<()> {
    let source = dir.join("plugin-source");
    let status = Command::new("cp")
        .arg("-r")
        .arg(process::workspace().join("integrations/airflow"))
        .arg(&source)
        .status()?;
    if !status.success() {
        bail!("could not copy the plugin's source");
    }
    // The build runs `npm ci` when there is none: it installs for this copy.
    let modules = source.join("node_modules");
    if modules.exists() {
        std::fs::remove_dir_all(&modules).context("while removing the copy's node_modules")?;
    }
    let mut pip = process::clean_command(venv.join("bin/python"), dir);
    pip.envs(std::env::vars().filter(|(var, _)| {
        var.starts_with("PIP_") || var.to_ascii_uppercase().ends_with("_PROXY")
    }))
    .args([
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-input",
        "--target",
    ])
    .arg(site)
    .arg(&source);
    process::run_to_end(
        "pip install the plugin",
        pip,
        &dir.join("pip.log"),
        PIP_DEADLINE,
    )
}

/// The rows both servers read: Airflow's three components alive, six open
/// executor rows of two hosts, and [`CLOSED_ROWS`] closed ones.
fn rows_sql() -> String {
    format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, unixname) VALUES \
         ('running', 'SchedulerJob', now(), now(), 'bench-host', 'airflow'), \
         ('running', 'TriggererJob', now(), now(), 'bench-host', 'airflow'), \
         ('running', 'DagProcessorJob', now(), now(), 'bench-host', 'airflow'); \
         INSERT INTO job (state, job_type, start_date, end_date, latest_heartbeat, executor_class, \
         hostname, unixname, executor_health, executor_instance, executor_health_checked_at) \
         SELECT 'success', 'ExecutorJob', now() - interval '2 days', now() - interval '1 day' \
         - n * interval '1 second', now() - interval '1 day' - n * interval '1 second', \
         'CeleryExecutor', 'sched-' || (n % 2), 'airflow', 'healthy', 'redis://broker:6379/0', \
         now() - interval '1 day' FROM generate_series(1, {CLOSED_ROWS}) AS n; \
         INSERT INTO job (state, job_type, start_date, latest_heartbeat, executor_class, hostname, \
         unixname, executor_health, executor_health_reason, executor_instance, \
         executor_health_checked_at) \
         SELECT 'running', 'ExecutorJob', now(), now(), e, h, 'airflow', \
         CASE WHEN e = 'alias:CeleryExecutor' AND h = 'sched-1' THEN 'unhealthy' ELSE 'healthy' END, \
         CASE WHEN e = 'alias:CeleryExecutor' AND h = 'sched-1' THEN 'broker unreachable: connection refused' END, \
         'redis://broker:6379/0', now() \
         FROM unnest(ARRAY['CeleryExecutor', 'alias:CeleryExecutor', 'other:CeleryExecutor']) AS e, \
         unnest(ARRAY['sched-1', 'sched-2']) AS h; \
         ANALYZE job"
    )
}

/// `EXPLAIN` of the plugin's statement (read from the installed plugin itself).
async fn explain(venv: &Path, site: &Path, db: &BenchDb) -> Result<String> {
    let out = process::clean_command(venv.join("bin/python"), site)
        .env("PYTHONPATH", site)
        .args([
            "-c",
            "from overseer_airflow.read import QUERY; print(QUERY)",
        ])
        .output()
        .context("while reading the plugin's statement")?;
    if !out.status.success() {
        bail!(
            "the plugin's statement: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let query = String::from_utf8_lossy(&out.stdout).replace(":job_type", "'ExecutorJob'");
    let conn = pg::connect(&db.url()).await?;
    let rows = conn
        .query_all_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            format!("EXPLAIN {query}"),
        ))
        .await?;
    let _ = conn.close().await;
    rows.iter()
        .map(|r| r.try_get_by_index::<String>(0).map_err(|e| anyhow!("{e}")))
        .collect::<Result<Vec<_>>>()
        .map(|lines| lines.join("\n"))
}
