//! Section 12: lost work reconciled at 100,000 messages. Each poll, Overseer
//! puts the task instances Airflow holds in `queued` beside the messages the
//! broker holds (waiting, and delivered unacknowledged) and the workers
//! ([`overseer_core::rules::lost`]): by count, so that its cost does not grow
//! with the work. This section runs the release `overseer serve` as an
//! operator does (Airflow's variables: `CeleryExecutor`, a Redis broker of its
//! own, the metadata database on the machine's Postgres holding Airflow's
//! `task_instance`, `dag_run` and `dag`; a 1 s poll and nothing else), with
//! `n` task instances queued and `n` messages waiting for each `n`, and reads
//! over a window: the CPU Overseer's process and the broker spent a poll, and
//! Overseer's memory at the start and the end of it. Then a tenth of the
//! messages is dropped from the broker, as a restart or an eviction does, and
//! the time until the executor's reason names the lost work is read.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use overseer_testkit::throwaway::ThrowawayRedis;
use serde_json::Value;

use crate::pg::BenchDb;
use crate::plan::Plan;
use crate::process::{self, get_json};
use crate::report::{Body, Skip, table};
use crate::system;

/// The goal the issue sets: under 50 ms of CPU a poll.
const GOAL_CPU_MS: f64 = 50.0;
/// Overseer's poll interval here.
const POLL: Duration = Duration::from_secs(1);
/// How long Overseer may take to see what was written, or to name the loss.
const DEADLINE: Duration = Duration::from_secs(120);

/// A message as Celery 5 writes it to a Redis list (protocol 2, an Airflow
/// task's command as its argument): its size is what counts here.
fn message(n: u64) -> String {
    format!(
        "{{\"body\": \"W1siYWlyZmxvdyIsICJ0YXNrcyIsICJydW4iLCAiZGFnXzF9XQ==\", \
         \"content-encoding\": \"utf-8\", \"content-type\": \"application/json\", \
         \"headers\": {{\"lang\": \"py\", \"task\": \"execute_workload\", \"id\": \"task-{n:08}\", \
         \"root_id\": \"task-{n:08}\", \"retries\": 0, \"argsrepr\": \"('workload',)\", \
         \"origin\": \"gen1@scheduler\"}}, \"properties\": {{\"correlation_id\": \"task-{n:08}\", \
         \"delivery_mode\": 2, \"delivery_info\": {{\"exchange\": \"\", \"routing_key\": \"default\"}}, \
         \"priority\": 0, \"body_encoding\": \"base64\", \"delivery_tag\": \"tag-{n:08}\"}}}}"
    )
}

/// One size's figures.
struct Figures {
    n: u64,
    cpu_ms: f64,
    broker_cpu_ms: f64,
    rss_start: f64,
    rss_end: f64,
    named_after: Option<f64>,
    reason: String,
}

/// The executor instance of a health body.
fn instance(json: &Value) -> &Value {
    &json["executor"]["instances"][0]
}

async fn fill_broker(url: &str, n: u64) -> Result<()> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut sent = 0;
    while sent < n {
        let batch = (n - sent).min(5_000);
        let mut pipe = redis::pipe();
        for i in sent..sent + batch {
            pipe.rpush("default", message(i)).ignore();
        }
        pipe.query_async::<()>(&mut conn).await?;
        sent += batch;
    }
    Ok(())
}

async fn measure(plan: &Plan, bin: &std::path::Path, n: u64, window: Duration) -> Result<Figures> {
    let db = BenchDb::create("overseer_bench_lost")
        .await
        .map_err(|e| Skip(format!("no Postgres: {e:#}")))?;
    db.execute(super::reads::TABLES).await?;
    // The broker first: the work is queued after it started, so the loss
    // below is not taken for a restart.
    let broker = ThrowawayRedis::start(&[]).ok_or_else(|| Skip("no redis-server".into()))?;
    let broker_pid = broker.pid().ok_or_else(|| anyhow!("the broker's pid"))?;
    let url = broker.url(None, 0);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    db.execute(&format!(
        "INSERT INTO task_instance (task_id, dag_id, run_id, state, queue, queued_dttm) \
         SELECT 't_' || g, 'dag_' || (g % 100), 'run', 'queued', 'default', \
         now() FROM generate_series(1, {n}) g;
         INSERT INTO task_instance (task_id, dag_id, run_id, state, queue, queued_dttm, end_date) \
         SELECT 'done_' || g, 'dag_' || (g % 100), 'run', 'success', 'default', \
         now() - interval '1 day', now() - interval '1 day' FROM generate_series(1, {n}) g;
         ANALYZE"
    ))
    .await
    .context("while filling task_instance")?;
    fill_broker(&url, n)
        .await
        .context("while filling the broker")?;

    let dir = tempfile::tempdir()?;
    let (mut server, addr) = process::serve_overseer(
        bin,
        dir.path(),
        &[
            ("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor".into()),
            ("AIRFLOW__CELERY__BROKER_URL", url.clone()),
            ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", db.sqlalchemy_url()),
            (
                "OVERSEER_SUPERVISOR__POLL_INTERVAL",
                format!("{}s", POLL.as_secs()),
            ),
        ],
    )?;
    let health = format!("http://{addr}/api/v2/monitor/health");
    // Until Overseer sees both sides whole.
    let started = Instant::now();
    loop {
        server.check_alive()?;
        if let Some(json) = get_json(&health) {
            let i = instance(&json);
            let queued = i["detail"]["queued_tasks"]["count"].as_u64().unwrap_or(0);
            let depth = i["detail"]["queues"][0]["depth"].as_u64().unwrap_or(0);
            if i["health"] == "healthy" && queued == n && depth == n {
                break;
            }
            if started.elapsed() > DEADLINE {
                server.stop();
                bail!("Overseer never saw {n} queued and {n} waiting, healthy: {i}");
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let pid = server.pid();
    let rss_start = system::rss_mib(pid).context("Overseer's memory")?;
    let cpu = system::cpu_seconds(pid).context("Overseer's CPU")?;
    let broker_cpu = system::cpu_seconds(broker_pid).context("the broker's CPU")?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let polls = t0.elapsed().as_secs_f64() / POLL.as_secs_f64();
    let cpu_ms = (system::cpu_seconds(pid).context("Overseer's CPU")? - cpu) * 1000.0 / polls;
    let broker_cpu_ms = (system::cpu_seconds(broker_pid).context("the broker's CPU")? - broker_cpu)
        * 1000.0
        / polls;
    let rss_end = system::rss_mib(pid).context("Overseer's memory")?;

    // A tenth of the messages gone: named, by count.
    let (mut named_after, mut reason) = (None, String::new());
    if n > 0 {
        let client = redis::Client::open(url.as_str())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let keep = n - n / 10;
        let dropped = Instant::now();
        redis::cmd("LTRIM")
            .arg("default")
            .arg(0)
            .arg(keep as i64 - 1)
            .query_async::<()>(&mut conn)
            .await?;
        while dropped.elapsed() < DEADLINE {
            server.check_alive()?;
            if let Some(json) = get_json(&health) {
                let now = instance(&json)["reason"].as_str().unwrap_or_default();
                if now.contains("lost on queue default") {
                    named_after = Some(dropped.elapsed().as_secs_f64());
                    reason = now.to_owned();
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if named_after.is_none() && !plan.smoke {
            server.stop();
            bail!("the {} messages dropped at {n} were never named", n / 10);
        }
    }
    server.stop();
    drop(broker);
    Ok(Figures {
        n,
        cpu_ms,
        broker_cpu_ms,
        rss_start,
        rss_end,
        named_after,
        reason,
    })
}

pub async fn run(plan: &Plan, bin: &std::path::Path) -> Result<Body> {
    let (sizes, window): (&[u64], _) = if plan.smoke {
        (&[0, 10_000], Duration::from_secs(5))
    } else {
        (&[0, 1_000, 100_000], Duration::from_secs(30))
    };
    let mut figures = Vec::new();
    for &n in sizes {
        eprintln!("lost work: {n} queued and waiting");
        figures.push(measure(plan, bin, n, window).await?);
    }
    let rows: Vec<Vec<String>> = figures
        .iter()
        .map(|f| {
            vec![
                format!("{}", f.n),
                format!("{:.2}", f.cpu_ms),
                format!("{:.2}", f.broker_cpu_ms),
                format!("{:.1} → {:.1}", f.rss_start, f.rss_end),
                f.named_after
                    .map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s")),
            ]
        })
        .collect();
    let worst = figures.iter().map(|f| f.cpu_ms).fold(0.0, f64::max);
    let largest = figures.last().ok_or_else(|| anyhow!("no size measured"))?;
    let met = if worst < GOAL_CPU_MS { "met" } else { "missed" };
    let text = format!(
        "`overseer serve` on Airflow's variables alone (`CeleryExecutor`, a Redis broker \
         of its own, Airflow's `task_instance` on the machine's Postgres) and a {}s poll, with `n` task \
         instances `queued` in Airflow and `n` messages waiting in the broker's `default` list (as \
         many finished task instances beside them); over {} s: the CPU Overseer's process and the \
         broker spent per poll, Overseer's resident memory at the window's start and end; then a \
         tenth of the messages dropped from the list (`LTRIM`) and the time until the reason named \
         the lost work, sampled every 100 ms (at {}: `{}`).\n\n{}\n\
         Goal: under {GOAL_CPU_MS} ms of CPU a poll, memory not growing with the messages: \
         **{met}** (at most {worst:.2} ms a poll). The reconciliation counts: `LLEN` of each queue and \
         `HLEN` of kombu's `unacked` in the check's round trip, one grouped `COUNT` of the queued \
         task instances in the refresh's statement; no message and no task instance is read one \
         by one, so a poll costs what it costs at zero.\n",
        POLL.as_secs(),
        window.as_secs(),
        largest.n,
        largest.reason,
        table(
            &[
                "queued and waiting",
                "Overseer, CPU ms a poll",
                "broker, CPU ms a poll",
                "Overseer's memory, MiB",
                "a tenth dropped: named after",
            ],
            &rows
        ),
    );
    Ok(Body::from(text))
}
