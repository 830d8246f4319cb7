//! Section 8: The workers' heartbeats, ingested. A publisher of the harness's
//! own sends real `worker-heartbeat` events, as Celery 5.5.3 encodes them, for
//! [`WORKERS`] workers at Celery's rate (one each every 2 s), to a throwaway
//! Redis (`PUBLISH` on `/0.celeryev/worker.heartbeat`, kombu's envelope) and to
//! a RabbitMQ virtual host of the harness's own (the `celeryev` topic
//! exchange). `overseer serve` (release) supervises a Celery executor on that
//! broker, with `worker_events` on, then off, under the same stream: its CPU
//! and the broker's, as a share of one core, over each window. With every
//! worker heard on Redis, `/metrics` (its body naming each worker) is put
//! under load beside a bare actix-web route serving the same bytes.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use lapin::options::{BasicPublishOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use overseer_testkit::rabbitmq::VirtualHost;
use overseer_testkit::throwaway::ThrowawayRedis;

use crate::plan::Plan;
use crate::process::{self, get, get_json};
use crate::report::{Body, table};
use crate::sections::http::{BARE_PATH, Load, start_bare, wrk};
use crate::stats::{Summary, count};
use crate::system;

/// How many workers the publisher speaks for.
const WORKERS: usize = 1_000;

/// Celery's default heartbeat interval (`freq`).
const FREQ: Duration = Duration::from_secs(2);

/// The figure the issue sets: ingesting them costs Overseer under 5 % of a core.
const TARGET_PERCENT: f64 = 5.0;

/// wrk's connections and seconds for each `/metrics` run.
const SCRAPE_LOAD: (u32, u32) = (8, 4);

/// The goal: `/metrics` with every worker named answers at least this share
/// of what a bare route serving the same bytes does.
const SCRAPE_TARGET: f64 = 0.9;

/// `/metrics` under load with every worker heard, beside the reference.
struct Scrapes {
    overseer: Vec<Load>,
    bare: Vec<Load>,
    bytes: usize,
    /// The health JSON beside them: its size (the entry bounded, whatever
    /// the fleet), and wrk's runs on it.
    health: Vec<Load>,
    health_bytes: usize,
}

/// How long the harness waits for Overseer to have heard every worker.
const HEARD_DEADLINE: Duration = Duration::from_secs(60);

/// One broker to publish to.
enum Broker {
    Redis { url: String, pid: Option<u32> },
    Rabbit { url: String },
}

impl Broker {
    fn url(&self) -> &str {
        match self {
            Self::Redis { url, .. } | Self::Rabbit { url, .. } => url,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Redis { .. } => "Redis",
            Self::Rabbit { .. } => "RabbitMQ",
        }
    }

    /// The broker's server process, for its CPU.
    fn pid(&self) -> Option<u32> {
        match self {
            Self::Redis { pid, .. } => *pid,
            Self::Rabbit { .. } => {
                let out = Command::new("pgrep")
                    .args(["-o", "beam.smp"])
                    .output()
                    .ok()?;
                String::from_utf8_lossy(&out.stdout).trim().parse().ok()
            }
        }
    }
}

/// A heartbeat as a Celery 5.5.3 worker sends it (its JSON body).
fn heartbeat(worker: usize) -> String {
    event_body(&format!("celery@bench-{worker:04}"), "worker-heartbeat")
}

/// An event of the `worker` group (`worker-heartbeat`, `worker-online`) as a
/// Celery 5.5.3 worker named `hostname` sends it (its JSON body).
pub(crate) fn event_body(hostname: &str, kind: &str) -> String {
    serde_json::json!({
        "hostname": hostname, "utcoffset": 0, "pid": 1000,
        "clock": 1, "freq": FREQ.as_secs_f64(), "active": 0, "processed": 0,
        "loadavg": [0.5, 0.4, 0.3], "sw_ident": "py-celery", "sw_ver": "5.5.3",
        "sw_sys": "Linux", "timestamp": 1.7e9, "type": kind
    })
    .to_string()
}

/// The same in kombu's Redis envelope.
pub(crate) fn redis_envelope(body: &str) -> String {
    serde_json::json!({
        "body": BASE64.encode(body), "content-encoding": "utf-8",
        "content-type": "application/json", "headers": {"hostname": "bench"},
        "properties": {"delivery_mode": 1, "delivery_info": {"exchange": "celeryev",
            "routing_key": "worker.heartbeat"}, "priority": 0, "body_encoding": "base64",
            "delivery_tag": "00000000-0000-0000-0000-000000000000"}
    })
    .to_string()
}

/// A channel on `url` to Celery's `celeryev` topic exchange (declared as
/// Celery declares it), with the properties a worker's events carry. The
/// connection must be kept for as long as the channel is used.
pub(crate) async fn celeryev_channel(
    url: &str,
) -> Result<(Connection, lapin::Channel, BasicProperties)> {
    let conn = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    channel
        .exchange_declare(
            "celeryev".into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    let properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("utf-8".into());
    Ok((conn, channel, properties))
}

/// Publishes every worker's heartbeat once per [`FREQ`], spread evenly, until
/// `stop` is set.
async fn publish(
    broker_url: String,
    rabbit: bool,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<()> {
    use std::sync::atomic::Ordering;
    let bodies: Vec<String> = (0..WORKERS).map(heartbeat).collect();
    let gap = FREQ / u32::try_from(WORKERS).unwrap_or(u32::MAX);
    let mut next = tokio::time::Instant::now();
    if rabbit {
        let (_conn, channel, properties) = celeryev_channel(&broker_url).await?;
        while !stop.load(Ordering::Relaxed) {
            for body in &bodies {
                channel
                    .basic_publish(
                        "celeryev".into(),
                        "worker.heartbeat".into(),
                        BasicPublishOptions::default(),
                        body.as_bytes(),
                        properties.clone(),
                    )
                    .await?;
                next += gap;
                tokio::time::sleep_until(next).await;
            }
        }
    } else {
        let client = redis::Client::open(broker_url.as_str())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let envelopes: Vec<String> = bodies.iter().map(|b| redis_envelope(b)).collect();
        while !stop.load(Ordering::Relaxed) {
            for envelope in &envelopes {
                let _: i64 = redis::cmd("PUBLISH")
                    .arg("/0.celeryev/worker.heartbeat")
                    .arg(envelope)
                    .query_async(&mut conn)
                    .await?;
                next += gap;
                tokio::time::sleep_until(next).await;
            }
        }
    }
    Ok(())
}

/// One window: Overseer's CPU and the broker's, in % of a core.
struct Window {
    overseer: f64,
    broker: Option<f64>,
}

/// Serves Overseer on `broker` (with `worker_events` as given) under the
/// stream, and measures `runs` windows of `seconds`.
async fn measure(
    bin: &Path,
    broker: &Broker,
    events: bool,
    runs: usize,
    warm_up: Duration,
    seconds: f64,
) -> Result<(Vec<Window>, usize, Option<Scrapes>)> {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!("[[executors]]\nname = \"CeleryExecutor\"\nworker_events = {events}\n"),
    )?;
    let (mut server, addr) = process::serve_overseer(
        bin,
        dir.path(),
        &[
            ("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor".into()),
            ("AIRFLOW__CELERY__BROKER_URL", broker.url().to_owned()),
        ],
    )?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = tokio::spawn(publish(
        broker.url().to_owned(),
        matches!(broker, Broker::Rabbit { .. }),
        stop.clone(),
    ));
    tokio::time::sleep(warm_up).await;
    // With the events on, every worker must have been heard before it counts.
    let mut heard = 0;
    if events {
        let started = Instant::now();
        loop {
            // The health entry shows a few workers; the route, every one.
            heard = get_json(&format!(
                "http://{addr}/api/v2/monitor/health/executor/workers?limit=1000"
            ))
            .and_then(|page| {
                page["workers"]
                    .as_array()
                    .map(|w| w.iter().filter(|w| w["state"] == "online").count())
            })
            .unwrap_or(0);
            if heard >= WORKERS {
                break;
            }
            if started.elapsed() > HEARD_DEADLINE || publisher.is_finished() {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                server.stop();
                bail!(
                    "Overseer heard {heard} of {WORKERS} workers on {}",
                    broker.name()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let broker_pid = broker.pid();
    let mut windows = Vec::with_capacity(runs);
    for _ in 0..runs {
        let cpu = system::cpu_seconds(server.pid()).context("Overseer's CPU")?;
        let broker_cpu = broker_pid.and_then(system::cpu_seconds);
        let start = Instant::now();
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
        let wall = start.elapsed().as_secs_f64();
        let spent = system::cpu_seconds(server.pid()).context("Overseer's CPU")? - cpu;
        let broker_spent = broker_pid
            .and_then(system::cpu_seconds)
            .zip(broker_cpu)
            .map(|(after, before)| after - before);
        windows.push(Window {
            overseer: spent / wall * 100.0,
            broker: broker_spent.map(|s| s / wall * 100.0),
        });
    }
    let scrapes = if events && matches!(broker, Broker::Redis { .. }) {
        Some(scrapes(&addr, dir.path(), runs)?)
    } else {
        None
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    server.check_alive()?;
    server.stop();
    match publisher.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e).context("the heartbeat publisher"),
        Err(e) => return Err(anyhow!("the heartbeat publisher: {e}")),
    }
    Ok((windows, heard, scrapes))
}

/// `runs` pairs of wrk runs, back to back: a bare actix-web route serving the
/// bytes of one `/metrics` body, then `/metrics` itself.
fn scrapes(addr: &str, dir: &Path, runs: usize) -> Result<Scrapes> {
    let url = format!("http://{addr}/metrics");
    let (_, body) = get(&url).context("/metrics answered nothing")?;
    let (mut bare, bare_addr) = start_bare(dir, &body)?;
    let (connections, seconds) = SCRAPE_LOAD;
    let health = format!("http://{addr}/api/v2/monitor/health");
    let (_, health_body) = get(&health).context("the health JSON answered nothing")?;
    let mut scrapes = Scrapes {
        overseer: Vec::with_capacity(runs),
        bare: Vec::with_capacity(runs),
        bytes: body.len(),
        health: Vec::with_capacity(runs),
        health_bytes: health_body.len(),
    };
    for _ in 0..runs {
        scrapes.bare.push(wrk(
            &format!("http://{bare_addr}{BARE_PATH}"),
            connections,
            seconds,
        )?);
        scrapes.overseer.push(wrk(&url, connections, seconds)?);
        scrapes.health.push(wrk(&health, connections, seconds)?);
    }
    bare.stop();
    Ok(scrapes)
}

pub async fn run(plan: &Plan, bin: &Path) -> Result<Body> {
    let (runs, seconds) = (plan.runs, plan.events_seconds);
    let warm_up = Duration::from_secs_f64(plan.events_warmup_s);
    let redis = ThrowawayRedis::start(&[]).ok_or_else(|| anyhow!("no redis-server"))?;
    let mut brokers = vec![Broker::Redis {
        url: redis.url(None, 0),
        pid: redis.pid(),
    }];
    let mut problems = Vec::new();
    // Deleted, with everything in it, when dropped at the end.
    let vhost = VirtualHost::create("overseer-bench-ev");
    match &vhost {
        Ok(vhost) => brokers.push(Broker::Rabbit { url: vhost.url() }),
        Err(e) => problems.push(format!("RabbitMQ: {e}")),
    }
    let mut rows = Vec::new();
    let mut worst_on = 0.0_f64;
    let mut scraped = None;
    for broker in &brokers {
        for events in [true, false] {
            match measure(bin, broker, events, runs, warm_up, seconds).await {
                Ok((windows, heard, scrapes)) => {
                    scraped = scraped.or(scrapes);
                    let overseer: Vec<f64> = windows.iter().map(|w| w.overseer).collect();
                    let on_broker: Vec<f64> = windows.iter().filter_map(|w| w.broker).collect();
                    let overseer = Summary::of(&overseer).ok_or_else(|| anyhow!("no window"))?;
                    if events {
                        worst_on = worst_on.max(overseer.median);
                    }
                    rows.push(vec![
                        broker.name().to_owned(),
                        if events { "on".into() } else { "off".into() },
                        if events {
                            heard.to_string()
                        } else {
                            "–".into()
                        },
                        overseer.cell(2),
                        Summary::of(&on_broker).map_or("–".into(), |s| s.cell(2)),
                    ]);
                }
                Err(e) => problems.push(format!("{} (events {events}): {e:#}", broker.name())),
            }
        }
    }
    let met = if worst_on < TARGET_PERCENT {
        "met"
    } else {
        "missed"
    };
    let mut text = format!(
        "{WORKERS} workers' `worker-heartbeat` events, as Celery 5.5.3 encodes them, one per \
         worker every {}s ({} a second), published by the harness to each broker; \
         `overseer serve` (release, default poll) supervising a Celery executor on it with \
         `worker_events` on and off. CPU (user + system, `/proc/PID/stat`) over {} of \
         {seconds}s as a share of one core, median (min–max). The broker's figure is its \
         whole server (the throwaway `redis-server`; RabbitMQ's `beam.smp`, which also \
         serves whatever else uses the machine's RabbitMQ meanwhile): its cost of the \
         subscription is the difference between on and off.\n\n{}\n",
        FREQ.as_secs(),
        WORKERS as u64 / FREQ.as_secs(),
        count(runs, "window"),
        table(
            &[
                "broker",
                "worker_events",
                "workers heard",
                "Overseer's CPU, % of a core",
                "broker's CPU, % of a core"
            ],
            &rows
        ),
    );
    let _ = writeln!(
        text,
        "Target: ingesting {WORKERS} workers' heartbeats costs Overseer under \
         {TARGET_PERCENT} % of a core: **{met}** ({worst_on:.2} % at most)."
    );
    if let Some(scrapes) = scraped {
        write_scrapes(&mut text, &scrapes);
    }
    Ok(Body { text, problems })
}

/// The `/metrics` table: req/s and p50 of each, and the ratio to the reference.
fn write_scrapes(text: &mut String, scrapes: &Scrapes) {
    let rps = |loads: &[Load]| Summary::of(&loads.iter().map(|l| l.rps).collect::<Vec<_>>());
    let p50 = |loads: &[Load]| Summary::of(&loads.iter().map(|l| l.p50_ms).collect::<Vec<_>>());
    let (Some(overseer), Some(bare)) = (rps(&scrapes.overseer), rps(&scrapes.bare)) else {
        return;
    };
    let ratio = overseer.median / bare.median;
    let cell = |s: Option<Summary>| s.map_or("–".into(), |s| s.cell(1));
    let rows = vec![
        vec![
            "bare actix-web route, the same bytes (the reference)".to_owned(),
            bare.cell(0),
            cell(p50(&scrapes.bare)),
        ],
        vec![
            "Overseer `/metrics`".to_owned(),
            overseer.cell(0),
            cell(p50(&scrapes.overseer)),
        ],
    ];
    let (connections, seconds) = SCRAPE_LOAD;
    let met = if ratio >= SCRAPE_TARGET {
        "met"
    } else {
        "missed"
    };
    let _ = write!(
        text,
        "\n`/metrics` with the {WORKERS} workers heard (Redis, `worker_events` on, the \
         publisher still running): a body of {} naming every worker, under wrk ({connections} \
         connections, {seconds}s a run, {} back to back with the reference), median (min–max).\n\n{}\n\
         Target: at least {SCRAPE_TARGET} of the reference's requests a second: **{met}** \
         ({ratio:.2}).\n",
        crate::stats::bytes(scrapes.bytes as f64),
        count(scrapes.overseer.len(), "pair"),
        table(&["endpoint", "requests/s", "p50, ms"], &rows),
    );
    if let Some(health) = rps(&scrapes.health) {
        let _ = write!(
            text,
            "\nThe health JSON beside them, its `executor` entry bounded (the first workers, at \
             fault first; every one at `/api/v2/monitor/health/executor/workers`): a body of {}, \
             {} requests a second, p50 {} ms.\n",
            crate::stats::bytes(scrapes.health_bytes as f64),
            health.cell(0),
            cell(p50(&scrapes.health)),
        );
    }
}
