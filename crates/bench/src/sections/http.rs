//! Section 4: The health endpoint under load: Overseer's `/api/v2/monitor/health`
//! beside a bare actix-web route serving the same bytes (the reference: what
//! actix-web itself costs, so the ratio is what Overseer adds per request), its
//! static `/api/v2/version`, and Airflow 3.3.2's own `airflow api-server`
//! `/api/v2/monitor/health`, on the same Postgres Jobs table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};

use crate::chart::{self, BLUE, GREEN, RED, RangeRow};
use crate::pg::BenchDb;
use crate::plan::Plan;
use crate::process::{self, Server, get, get_json};
use crate::report::{Body, Out, Skip, table};
use crate::stats::{Summary, bytes, count, num, ratio};
use crate::system;
use crate::venv;

/// wrk's threads: one per core of this 2-core machine (wrk and the server share them).
pub(crate) const WRK_THREADS: u32 = 2;
/// wrk's request timeout: long enough that a slow server's latencies are counted, not dropped.
pub(crate) const WRK_TIMEOUT: &str = "10s";
/// `airflow db migrate` on an empty database.
pub(crate) const MIGRATE_DEADLINE: Duration = Duration::from_secs(600);
/// Airflow's API server, from a cold interpreter, until it answers.
pub(crate) const AIRFLOW_START_DEADLINE: Duration = Duration::from_secs(300);
/// The component rows' liveness threshold for both servers (Airflow's own
/// variables, which Overseer reads too), so the rows inserted once stay alive.
pub(crate) const THRESHOLD_S: &str = "3600";
/// Airflow's API server workers: one per core, as Airflow's `[api] workers`
/// documentation advises (its default is 1); Overseer's actix server also runs
/// one worker per core.
pub(crate) const AIRFLOW_WORKERS: &str = "2";

/// The reference route's path: the health endpoint's, so wrk's requests are the same bytes.
const BARE_PATH: &str = "/api/v2/monitor/health";

/// The `bare-route` scenario: one actix-web route at [`BARE_PATH`] answering
/// the bytes of `body` (the health endpoint's JSON, saved by the section) with
/// the health endpoint's own headers, on as many workers as `overseer serve`
/// runs, and nothing else: no middleware, no extractor, no state. It prints
/// `listening on http://ADDR` and serves until stopped.
pub fn serve_bare(body: &Path) -> Result<()> {
    use actix_web::{App, HttpResponse, HttpServer, http::header, web};
    let body = web::Bytes::from(std::fs::read(body).with_context(|| body.display().to_string())?);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    actix_web::rt::System::new().block_on(async move {
        let server = HttpServer::new(move || {
            let body = body.clone();
            App::new().route(
                BARE_PATH,
                web::get().to(move || {
                    let body = body.clone();
                    async move {
                        HttpResponse::Ok()
                            .content_type("application/json")
                            .insert_header((header::CACHE_CONTROL, "no-store"))
                            .body(body)
                    }
                }),
            )
        })
        .workers(workers)
        .disable_signals()
        .bind("127.0.0.1:0")?;
        let addr = server.addrs()[0];
        println!("listening on http://{addr}");
        let _ = std::io::Write::flush(&mut std::io::stdout());
        server.run().await
    })?;
    Ok(())
}

/// Starts the [`serve_bare`] reference serving `body`, and waits for its address.
fn start_bare(dir: &Path, body: &str) -> Result<(Server, String)> {
    let path = dir.join("bare-body.json");
    std::fs::write(&path, body)?;
    let mut command = process::clean_command(std::env::current_exe()?, dir);
    command
        .args(["--scenario", "bare-route"])
        .arg(format!("body={}", path.display()));
    let mut server = Server::spawn("bare actix-web route", command, dir.join("bare.log"))?;
    let addr = server.wait_for(
        "saying where it listens",
        Duration::from_secs(30),
        process::listening_addr,
    )?;
    Ok((server, addr))
}

/// `overseer serve`'s default log filter (`DEFAULT_FILTER` in the binary's
/// `logging`), which the harness's usual `RUST_LOG=warn` would hide: the
/// endpoint is measured at the level operators run.
const DEFAULT_LOG_FILTER: &str = "info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn";

/// The reference's label in the tables.
const BARE_LABEL: &str = "bare actix-web route, the same bytes (the reference)";

/// What one wrk run measured.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    pub(crate) rps: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) requests: f64,
    pub(crate) errors: Option<String>,
}

fn latency_ms(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (value, unit) = text.split_at(split);
    let value: f64 = value.parse().ok()?;
    Some(match unit {
        "us" => value / 1000.0,
        "ms" => value,
        "s" => value * 1000.0,
        "m" => value * 60_000.0,
        _ => return None,
    })
}

pub(crate) fn wrk(url: &str, connections: u32, seconds: u32) -> Result<Load> {
    let out = Command::new("wrk")
        .arg(format!("-t{WRK_THREADS}"))
        .arg(format!("-c{connections}"))
        .arg(format!("-d{seconds}s"))
        .args(["--timeout", WRK_TIMEOUT, "--latency", url])
        .output()
        .context("while running wrk")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let find = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix).map(str::trim))
    };
    let rps = find("Requests/sec:")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no Requests/sec in wrk's output:\n{text}"))?;
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Non-2xx") || l.contains("Socket errors"))
        .map(str::trim)
        .collect();
    Ok(Load {
        rps,
        p50_ms: find("50%").and_then(latency_ms).unwrap_or(f64::NAN),
        p99_ms: find("99%").and_then(latency_ms).unwrap_or(f64::NAN),
        requests,
        errors: (!errors.is_empty()).then(|| errors.join("; ")),
    })
}

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

/// SSE clients that never read, against a report that changes every refresh.
const SSE_CLIENTS: usize = 100;
/// Executor rows that make the report large (about 250 bytes of JSON each),
/// on as many hosts, heartbeating all the time so the report changes.
const SSE_FLEET: usize = 3000;

/// The server's resident memory now (`VmRSS`), MiB.
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// `overseer serve`'s resident memory before, with and after [`SSE_CLIENTS`]
/// stream clients that never read, while [`SSE_FLEET`] executor rows
/// heartbeat (so a report of megabytes changes at every refresh), as a table.
/// `hold` and `after`: [`Plan::sse_hold_s`] and [`Plan::sse_after_s`].
async fn sse_memory(db: &BenchDb, addr: &str, pid: u32, hold: u64, after: u64) -> Result<String> {
    use std::io::Write as _;
    db.execute(&format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, executor_class, \
         hostname, unixname, executor_health, executor_instance, executor_health_checked_at) \
         SELECT 'running', 'ExecutorJob', now(), now(), 'CeleryExecutor', \
         'fleet-host-' || i, 'airflow', 'healthy', 'redis://broker-' || i || ':6379/0', now() \
         FROM generate_series(1, {SSE_FLEET}) AS i"
    ))
    .await?;
    let url = db.url();
    let beating = tokio::spawn(async move {
        let Ok(conn) = crate::pg::connect(&url).await else {
            return;
        };
        while sea_orm::ConnectionTrait::execute_unprepared(
            &conn,
            "UPDATE job SET latest_heartbeat = now() WHERE hostname LIKE 'fleet-host-%'",
        )
        .await
        .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let health = format!("http://{addr}/api/v2/monitor/health");
    let started = std::time::Instant::now();
    let report_bytes = loop {
        let size = get(&health).map_or(0, |(_, body)| body.len());
        if size > SSE_FLEET * 100 || started.elapsed() > Duration::from_secs(30) {
            break size;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_mib(pid);
    eprintln!("http: {SSE_CLIENTS} SSE clients that never read");
    let clients = (0..SSE_CLIENTS)
        .map(|_| {
            let mut client = std::net::TcpStream::connect(addr)?;
            write!(
                client,
                "GET /api/v2/monitor/health/stream HTTP/1.1\r\nHost: {addr}\r\n\r\n"
            )?;
            Ok(client)
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut with = f64::NAN;
    let mut peak = f64::NAN;
    let until = std::time::Instant::now() + Duration::from_secs(hold);
    while std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        with = rss_mib(pid);
        peak = peak.max(with);
    }
    drop(clients);
    tokio::time::sleep(Duration::from_secs(after)).await;
    let after = rss_mib(pid);
    beating.abort();
    let answers = get(&health).is_some_and(|(status, _)| status == 200);
    Ok(format!(
        "\nMemory of `overseer serve` with {SSE_CLIENTS} SSE clients that connect to \
         `/api/v2/monitor/health/stream` and never read, while {SSE_FLEET} executor rows \
         heartbeat (a report of {} that changes at every refresh); resident memory (`VmRSS`) \
         before they come, after {} s with them, and {} s after they closed{}:\n\n{}",
        bytes(report_bytes as f64),
        hold,
        after,
        if answers {
            ""
        } else {
            " (the health endpoint did not answer afterwards!)"
        },
        table(
            &[
                "clients",
                "RSS before, MiB",
                "RSS with them, MiB (peak)",
                "RSS after they left, MiB",
            ],
            &[vec![
                SSE_CLIENTS.to_string(),
                num(before, 1),
                format!("{} ({})", num(with, 1), num(peak, 1)),
                num(after, 1),
            ]],
        )
    ))
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

/// The environment both servers share: Airflow's own variables (Overseer reads them too).
pub(crate) fn airflow_variables(db: &BenchDb, dir: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", db.sqlalchemy_url()),
        ("AIRFLOW__CORE__EXECUTOR", "LocalExecutor".into()),
        (
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD",
            THRESHOLD_S.into(),
        ),
        (
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD",
            THRESHOLD_S.into(),
        ),
        (
            "AIRFLOW__DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD",
            THRESHOLD_S.into(),
        ),
        (
            "AIRFLOW_HOME",
            dir.join("airflow-home").display().to_string(),
        ),
        ("AIRFLOW__CORE__LOAD_EXAMPLES", "False".into()),
        (
            "AIRFLOW__CORE__DAGS_FOLDER",
            dir.join("dags").display().to_string(),
        ),
        (
            "AIRFLOW__API_AUTH__JWT_SECRET",
            format!("overseer-bench-{}", db.name),
        ),
        ("PYTHONUNBUFFERED", "1".into()),
    ]
}

pub(crate) fn airflow_command(
    venv: &Path,
    dir: &Path,
    env: &[(&str, String)],
    args: &[&str],
) -> Command {
    let mut command = process::clean_command(venv.join("bin/airflow"), dir);
    let path = std::env::var("PATH").unwrap_or_default();
    command
        .env("PATH", format!("{}:{path}", venv.join("bin").display()))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(args);
    command
}

/// The commands this section runs for Airflow, for the report when it cannot.
fn airflow_recipe(venv: &Path) -> String {
    format!(
        "```sh\n\
         export AIRFLOW_HOME=$(mktemp -d) AIRFLOW__CORE__EXECUTOR=LocalExecutor AIRFLOW__CORE__LOAD_EXAMPLES=False\n\
         export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgresql+psycopg2://postgres@127.0.0.1:5432/overseer_bench_http_...\n\
         export AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD={t} AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD={t} AIRFLOW__DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD={t}\n\
         {v}/bin/airflow db migrate\n\
         overseer serve --bind 127.0.0.1:0        # same variables: adds its columns, serves the same table\n\
         {v}/bin/airflow api-server --host 127.0.0.1 --port PORT --workers {w}\n\
         wrk -t{wt} -c32 -d4s --timeout {to} --latency http://127.0.0.1:PORT/api/v2/monitor/health   # and -c256\n\
         ```\n",
        t = THRESHOLD_S,
        v = venv.display(),
        w = AIRFLOW_WORKERS,
        wt = WRK_THREADS,
        to = WRK_TIMEOUT,
    )
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

    let airflow_ran = targets.iter().any(|t| t.airflow);
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
        match migrate_seconds {
            Some(s) => format!(
                "Airflow's own `job` table, made by `airflow db migrate` ({} s here),",
                num(s, 0)
            ),
            None => "the `job` table as Overseer's migration makes it (Airflow 3.3.2's DDL)".into(),
        },
        plan.http_warmup,
        count(plan.runs, "run"),
        plan.http_seconds,
        if peak_reset {
            "reset before each run through `/proc/PID/clear_refs`; for Airflow the sum over its processes"
        } else {
            "its lifetime peak: resetting it was refused here"
        },
        sizes.join(", "),
    );
    let health_rps = |connections: u32| {
        targets
            .iter()
            .find(|t| t.label.starts_with("Overseer `/api/v2/monitor/health"))
            .and_then(|t| t.summary(connections, |r| r.load.rps))
            .map(|s| s.median)
    };
    let mut rows = Vec::new();
    for &connections in &plan.http_connections {
        for target in &targets {
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
    body.push_str(&bare_ratio_table(plan, &targets));
    body.push_str(&sse);
    for note in &notes {
        let _ = writeln!(body, "\n> {}\n", note.replace('\n', "\n> "));
    }
    let chart_rows = |value: &dyn Fn(&Run) -> f64| -> Vec<RangeRow> {
        plan.http_connections
            .iter()
            .flat_map(|&c| {
                targets.iter().filter_map(move |t| {
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
    let health = targets.iter().find(|t| t.url == overseer_health);
    let ceiling = targets.iter().find(|t| t.url.ends_with("/version"));
    let airflow = targets.iter().find(|t| t.airflow);
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
    if let Some(version) = airflow_version {
        let _ = writeln!(
            body,
            "\n<sub>Airflow's API server reported version {version}.</sub>"
        );
    }
    drop(db);
    Ok(body.into())
}
