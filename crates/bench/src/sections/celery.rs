//! Section 5: One Celery check beside what a Python operator would run for the same
//! question, against the same brokers in the same run: kombu's
//! `Connection(url).ensure_connection()` and `celery -b URL inspect ping`; then
//! the same check over TLS (`rediss://`) beside plain TCP, pooled and fresh.
//! (What `crates/celery/benches/check.rs` measures, with warm-ups, spreads and
//! the in-process Python times besides the whole commands.)

use std::fmt::Write as _;
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use overseer_celery::{BrokerUrl, CeleryCheck, CheckSettings};
use overseer_core::ExecutorHealth;

use crate::chart::{self, BLUE, GREEN, GREY, ORANGE, RangeRow};
use crate::plan::Plan;
use crate::report::{Body, Out, Skip, table};
use crate::stats::{Summary, count, ratio};
use crate::venv;

/// Certificates made at run time, as the TLS tests make them.
#[path = "../../../celery/tests/support/certs.rs"]
mod certs;

/// The machine's brokers, as the celery crate's tests reach them.
const BROKERS: [(&str, &str, u16); 2] = [
    ("Redis", "redis://127.0.0.1:6379/0", 6379),
    ("RabbitMQ", "amqp://guest:guest@127.0.0.1:5672//", 5672),
];

/// The same work inside one Python process, imports excluded: fresh
/// connections with kombu, and Celery's ping on the app's pooled connection.
const IN_PROCESS: &str = r#"
import json, sys, time
url, n, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from kombu import Connection
from celery import Celery
def connect():
    c = Connection(url)
    c.ensure_connection(max_retries=1)
    c.release()
def timed(f):
    s = time.perf_counter(); f(); return (time.perf_counter() - s) * 1000
connect()
fresh = [timed(connect) for _ in range(n)]
app = Celery(broker=url)
ping = lambda: app.control.inspect(timeout=1.0).ping()
ping()
pings = [timed(ping) for _ in range(m)]
print(json.dumps({"ensure_connection": fresh, "inspect_ping": pings}))
"#;

fn check(url: &str, worker_ping: bool) -> Result<CeleryCheck> {
    CeleryCheck::new(
        &BrokerUrl::parse(url).map_err(|e| anyhow!("{e}"))?,
        CheckSettings {
            worker_ping,
            ..CheckSettings::default()
        },
    )
    .map_err(|e| anyhow!("{e}"))
}

/// One check, timed in ms; it must say healthy.
async fn timed(check: &CeleryCheck) -> Result<f64> {
    check.start();
    let started = Instant::now();
    let probe = check.probe().await;
    let health = probe.observation().health;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if health != ExecutorHealth::Healthy {
        bail!("the check said {health:?}: {probe:?}");
    }
    Ok(ms)
}

/// The check over TLS beside plain TCP, pooled and fresh (a new connection, so
/// a new TLS handshake, at every check), on two throwaway `redis-server`s of the
/// same build: one `--tls-port` with a CA and server certificate made at run
/// time, one plain.
async fn tls_beside_plain(plan: &Plan) -> Result<(String, Vec<RangeRow>)> {
    let pki = certs::Pki::new("bench");
    let server = pki.server("server", &["127.0.0.1"]);
    let tls = overseer_testkit::throwaway::ThrowawayRedis::start_tls(
        &server.cert,
        &server.key,
        &pki.ca_pem(),
        "no",
        &[],
    )
    .ok_or_else(|| anyhow!("no redis-server with TLS"))?;
    let plain = overseer_testkit::throwaway::ThrowawayRedis::start(&[])
        .ok_or_else(|| anyhow!("no redis-server"))?;
    let tls_url = format!(
        "rediss://127.0.0.1:{}/0?ssl_cert_reqs=required&ssl_ca_certs={}",
        tls.port,
        pki.ca_pem().display()
    );
    let plain_url = plain.url(None, 0);
    eprintln!("celery: Redis over TLS beside plain TCP");
    let mut rows: Vec<(String, &'static str, Summary)> = Vec::new();
    for (transport, url) in [("plain TCP", &plain_url), ("TLS", &tls_url)] {
        let pooled = check(url, false)?;
        timed(&pooled).await?;
        let mut samples = Vec::new();
        for _ in 0..plan.celery_samples {
            samples.push(timed(&pooled).await?);
        }
        let mut fresh = Vec::new();
        timed(&check(url, false)?).await?;
        for _ in 0..plan.celery_samples {
            fresh.push(timed(&check(url, false)?).await?);
        }
        let summary = |s: &[f64]| Summary::of(s).ok_or_else(|| anyhow!("no samples"));
        rows.push((
            format!("{transport}, pooled connection"),
            "pooled",
            summary(&samples)?,
        ));
        rows.push((
            format!(
                "{transport}, fresh connection{}",
                if transport == "TLS" {
                    " and handshake"
                } else {
                    ""
                }
            ),
            "fresh",
            summary(&fresh)?,
        ));
    }
    let base = rows[0].2.median;
    let mut text = format!(
        "**Redis over TLS beside plain TCP** (two throwaway `redis-server`s of the same build, \
         one with `--tls-port` and a CA made at run time; {} each):\n\n",
        count(plan.celery_samples, "check")
    );
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|(what, _, summary)| vec![what.clone(), summary.cell(2), ratio(summary.median, base)])
        .collect();
    text.push_str(&table(
        &["Overseer check", "ms", "÷ plain pooled"],
        &table_rows,
    ));
    text.push('\n');
    let chart_rows = rows
        .into_iter()
        .map(|(what, kind, summary)| RangeRow {
            label: format!("Redis · {what}"),
            summary,
            mark: None,
            color: if kind == "pooled" { BLUE } else { GREY },
        })
        .collect();
    Ok((text, chart_rows))
}

/// A Python command, run `runs` times after one warm-up, timed whole (interpreter
/// start and imports included, as a probe runs it).
fn python_command(venv: &Path, args: &[&str], runs: usize) -> Result<Vec<f64>> {
    let mut samples = Vec::new();
    for i in 0..=runs {
        let started = Instant::now();
        let out = Command::new(venv.join("bin/python"))
            .args(args)
            .output()
            .context("while running python")?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        // `inspect ping` exits 69 when no worker answers: still an answer to time.
        if !(out.status.success() || out.status.code() == Some(69)) {
            bail!("{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        if i > 0 {
            samples.push(ms);
        }
    }
    Ok(samples)
}

struct Row {
    what: String,
    /// For the chart.
    short: &'static str,
    how: String,
    samples: Summary,
    /// The Overseer row this one is compared with.
    against: Option<usize>,
    color: chart::RGBColor,
}

pub async fn run(plan: &Plan, out: &Out) -> Result<Body> {
    let venv = venv::celery().map_err(|e| Skip(format!("no Celery venv: {e}")))?;
    let mut body = format!(
        "Overseer's Celery check (`overseer-celery`, as `overseer serve` runs it: broker \
         reachable, then the depth of the `default` queue) against the machine's brokers, beside \
         the Python a probe would run, against the same brokers in the same minute (Celery {}, \
         kombu {}). Overseer's figures are {} after one warm-up (the check with a worker \
         ping waits Celery's 1 s reply window: {}); each Python command ran {} after \
         one warm-up, timed whole (interpreter start and imports included, as a Kubernetes exec \
         probe pays them), and once more inside one interpreter, imports excluded. Overseer's check \
         does a little more than `ensure_connection` (after connecting it reads the queue's \
         depth) and the same as `inspect ping` when it pings. No Celery \
         worker listens on these brokers: Celery's ping waits out its whole 1 s window, and so \
         does Overseer's on RabbitMQ; on Redis, Overseer's stops as soon as as many workers \
         answered as `PUBLISH` said were listening, here none, so it returns at once.\n\n",
        venv::version(&venv, "celery"),
        venv::version(&venv, "kombu"),
        count(plan.celery_samples, "check"),
        count(plan.celery_ping_samples, "sample"),
        count(plan.python_runs, "time"),
    );
    let mut problems = Vec::new();
    let mut chart_rows = Vec::new();
    for (name, url, port) in BROKERS {
        if TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))
            .is_err()
        {
            problems.push(format!("{name} does not answer on 127.0.0.1:{port}"));
            continue;
        }
        eprintln!("celery: {name}");
        let mut rows: Vec<Row> = Vec::new();
        // Overseer: pooled (every poll after the first), fresh (a new connection), with ping.
        let pooled = check(url, false)?;
        timed(&pooled).await?;
        let mut samples = Vec::new();
        for _ in 0..plan.celery_samples {
            samples.push(timed(&pooled).await?);
        }
        let mut fresh = Vec::new();
        timed(&check(url, false)?).await?;
        for _ in 0..plan.celery_samples {
            fresh.push(timed(&check(url, false)?).await?);
        }
        let pinging = check(url, true)?;
        timed(&pinging).await?;
        let mut pings = Vec::new();
        for _ in 0..plan.celery_ping_samples {
            pings.push(timed(&pinging).await?);
        }
        let summary = |s: &[f64]| Summary::of(s).ok_or_else(|| anyhow!("no samples"));
        rows.push(Row {
            what: "Overseer check, pooled connection (every poll after the first)".into(),
            short: "Overseer check, pooled",
            how: "in process".into(),
            samples: summary(&samples)?,
            against: None,
            color: BLUE,
        });
        rows.push(Row {
            what: "Overseer check, fresh connection".into(),
            short: "Overseer check, fresh connection",
            how: "in process".into(),
            samples: summary(&fresh)?,
            against: None,
            color: BLUE,
        });
        rows.push(Row {
            what: "Overseer check + worker ping (1 s window), pooled".into(),
            short: "Overseer check + worker ping",
            how: "in process".into(),
            samples: summary(&pings)?,
            against: None,
            color: GREEN,
        });

        // Python, whole commands.
        let kombu_code = format!(
            "from kombu import Connection; Connection('{url}').ensure_connection(max_retries=1)"
        );
        let py = venv.clone();
        let runs = plan.python_runs;
        let (kombu, inspect, inside) = tokio::task::spawn_blocking(move || {
            let kombu = python_command(&py, &["-c", &kombu_code], runs);
            let inspect =
                python_command(&py, &["-m", "celery", "-b", url, "inspect", "ping"], runs);
            let inside = Command::new(py.join("bin/python"))
                .args([
                    "-c",
                    IN_PROCESS,
                    url,
                    &runs.max(3).to_string(),
                    &runs.to_string(),
                ])
                .output();
            (kombu, inspect, inside)
        })
        .await?;
        rows.push(Row {
            what: "kombu `Connection(url).ensure_connection()`".into(),
            short: "kombu ensure_connection (command)",
            how: "whole command".into(),
            samples: summary(&kombu?)?,
            against: Some(1),
            color: ORANGE,
        });
        rows.push(Row {
            what: "`celery -b URL inspect ping`".into(),
            short: "celery inspect ping (command)",
            how: "whole command".into(),
            samples: summary(&inspect?)?,
            against: Some(2),
            color: ORANGE,
        });
        match inside {
            Ok(out) if out.status.success() => {
                let json: serde_json::Value = serde_json::from_slice(
                    out.stdout
                        .rsplit(|b| *b == b'\n')
                        .find(|l| !l.is_empty())
                        .unwrap_or(b"{}"),
                )?;
                let list = |key: &str| -> Vec<f64> {
                    json[key]
                        .as_array()
                        .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
                        .unwrap_or_default()
                };
                rows.push(Row {
                    what: "kombu `ensure_connection()`, fresh connection".into(),
                    short: "kombu ensure_connection (in-process)",
                    how: "inside one interpreter".into(),
                    samples: summary(&list("ensure_connection"))?,
                    against: Some(1),
                    color: GREY,
                });
                rows.push(Row {
                    what: "Celery `app.control.inspect().ping()`, pooled".into(),
                    short: "Celery inspect().ping() (in-process)",
                    how: "inside one interpreter".into(),
                    samples: summary(&list("inspect_ping"))?,
                    against: Some(2),
                    color: GREY,
                });
            }
            Ok(out) => problems.push(format!(
                "{name}: the in-process Python timing failed: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            )),
            Err(e) => problems.push(format!("{name}: python: {e}")),
        }

        let identity = BrokerUrl::parse(url)
            .map(|b| b.identity())
            .unwrap_or_default();
        let _ = writeln!(body, "**{name}** (`{identity}`):\n");
        let table_rows: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.what.clone(),
                    r.how.clone(),
                    r.samples.cell(2),
                    r.against.map_or("–".into(), |i| {
                        format!(
                            "{} vs {}",
                            ratio(r.samples.median, rows[i].samples.median),
                            if i == 1 {
                                "fresh check"
                            } else {
                                "check + ping"
                            }
                        )
                    }),
                ]
            })
            .collect();
        body.push_str(&table(
            &["what", "timed", "ms", "Python ÷ Overseer (same work)"],
            &table_rows,
        ));
        body.push('\n');
        for r in rows {
            chart_rows.push(RangeRow {
                label: format!("{name} · {}", r.short),
                summary: r.samples,
                mark: None,
                color: r.color,
            });
        }
    }
    match tls_beside_plain(plan).await {
        Ok((text, rows)) => {
            body.push_str(&text);
            chart_rows.extend(rows);
        }
        Err(e) => problems.push(format!("TLS beside plain TCP: {e:#}")),
    }
    if chart_rows.is_empty() {
        return Err(Skip(format!("no broker answered: {}", problems.join("; "))).into());
    }
    chart::ranges(
        &out.chart("celery-check.svg"),
        "One health question, Overseer vs Python (bar: min–max, dot: median)",
        "milliseconds (log scale)",
        &chart_rows,
        true,
    )?;
    body.push_str(&Out::image(
        "celery-check.svg",
        "Celery check against Python",
    ));
    body.push_str("\n\n");
    let _ = writeln!(
        body,
        "**For an operator**: asking \"is the broker there?\" the way Overseer does costs \
         about a millisecond or less on a pooled connection, in a process that is already \
         running; the same question asked by an exec probe pays a Python interpreter and \
         Celery's imports every time, which is most of the whole-command figures above (and CPU \
         on the probed pod). With a worker ping, Celery always waits out its reply window \
         (1 s); Overseer waits it on RabbitMQ and, on Redis, only until every listening worker \
         has answered."
    );
    Ok(Body {
        text: body,
        problems,
    })
}
