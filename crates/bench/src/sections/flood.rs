//! Section 10: A flood of forged workers. Whoever may publish on the broker
//! can forge Celery's worker events. A publisher of the harness's own sends
//! 20,000 `worker-heartbeat` events a second (the plan's `flood_rate`; 2,000
//! in the smoke run), each from a worker name never used before, as Celery 5.5.3 encodes them, to a throwaway Redis and
//! to a RabbitMQ virtual host of the harness's own, while `overseer serve`
//! (release; no setting but a 2 s poll) supervises a Celery executor on that
//! broker. Beside the flood, one worker heartbeats as a real one does
//! (`worker-online`, then one heartbeat every 2 s); halfway through the flood
//! it stops without a goodbye, as a killed worker does. Measured: Overseer's
//! resident memory above what it held before the flood, its CPU over the
//! flood, and how long after the worker's last heartbeat the verdict named it.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use lapin::options::BasicPublishOptions;
use overseer_testkit::rabbitmq::VirtualHost;
use overseer_testkit::throwaway::ThrowawayRedis;
use serde_json::Value;

use crate::plan::Plan;
use crate::process::{self, get_json};
use crate::report::{Body, table};
use crate::sections::events::{celeryev_channel, event_body, redis_envelope};
use crate::system;

/// Sent in batches, one every this long.
const BATCH_EVERY: Duration = Duration::from_millis(10);
/// Celery's default heartbeat interval, and the poll interval set.
const FREQ: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_secs(2);
/// The goals: memory above the idle process, CPU, and the real worker named
/// within two heartbeats and a poll of its last one.
const RSS_GOAL_MIB: f64 = 64.0;
const CPU_GOAL_PERCENT: f64 = 50.0;
/// The real worker's name.
const REAL: &str = "celery@real-worker";
/// How long the harness waits for Overseer to say the real worker is online.
const HEARD_DEADLINE: Duration = Duration::from_secs(60);

/// What one broker's flood measured.
struct Flooded {
    /// Events the flood published, a second.
    rate: f64,
    cpu_percent: f64,
    rss_idle_mib: f64,
    rss_above_mib: f64,
    /// From the real worker's last heartbeat to the verdict naming it.
    named_after: Option<Duration>,
    /// Whether it was named only after the flood ended (the subscription
    /// behind until then).
    named_after_flood: bool,
    /// Samples in which the subscription was behind, of all samples.
    behind: usize,
    /// How many times the subscription was made, as the last report of the
    /// flood says: more than once, it was lost and made again.
    subscribed: Option<u64>,
    /// Samples whose reason named a forged worker, of all samples.
    forged_named: usize,
    /// Samples in which the real worker, still alive, was not `online`
    /// (its subscription down, its heartbeats lost), of those before its
    /// death, and the states it had then.
    real_not_online: usize,
    states_while_alive: std::collections::BTreeSet<String>,
    /// Samples before its death whose reason named it: a live worker blamed.
    real_blamed_alive: usize,
    samples_before: usize,
    samples: usize,
}

/// What a publisher did: how many events it sent, and when its last went out.
#[derive(Default)]
struct Sent {
    count: AtomicU64,
    last: Mutex<Option<Instant>>,
}

impl Sent {
    fn note(&self, count: u64) {
        self.count.store(count, Ordering::Relaxed);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    fn last(&self) -> Option<Instant> {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Publishes on `url` until `stop`: the real worker's events (no `rate`), or
/// the flood's, `rate` a second, each from a name never used before.
async fn publish(
    url: String,
    rabbit: bool,
    stop: Arc<AtomicBool>,
    rate: Option<u64>,
    sent: Arc<Sent>,
) -> Result<()> {
    let real = rate.is_none();
    let per_batch = rate.map_or(1, |rate| {
        ((rate as f64 * BATCH_EVERY.as_secs_f64()).round() as u64).max(1)
    });
    let every = if real { FREQ } else { BATCH_EVERY };
    let mut next = tokio::time::Instant::now();
    let mut n: u64 = 0;
    let body = |n: u64| {
        if real {
            event_body(
                REAL,
                if n == 0 {
                    "worker-online"
                } else {
                    "worker-heartbeat"
                },
            )
        } else {
            event_body(&format!("celery@forged-{n:09}"), "worker-heartbeat")
        }
    };
    if rabbit {
        let (_conn, channel, properties) = celeryev_channel(&url).await?;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..per_batch {
                let key = if real && n == 0 {
                    "worker.online"
                } else {
                    "worker.heartbeat"
                };
                channel
                    .basic_publish(
                        "celeryev".into(),
                        key.into(),
                        BasicPublishOptions::default(),
                        body(n).as_bytes(),
                        properties.clone(),
                    )
                    .await?;
                n += 1;
            }
            sent.note(n);
            next += every;
            tokio::time::sleep_until(next).await;
        }
    } else {
        let client = redis::Client::open(url.as_str())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        while !stop.load(Ordering::Relaxed) {
            let mut pipe = redis::pipe();
            for _ in 0..per_batch {
                let key = if real && n == 0 {
                    "worker.online"
                } else {
                    "worker.heartbeat"
                };
                pipe.cmd("PUBLISH")
                    .arg(format!("/0.celeryev/{key}"))
                    .arg(redis_envelope(&body(n)))
                    .ignore();
                n += 1;
            }
            let () = pipe.query_async(&mut conn).await?;
            sent.note(n);
            next += every;
            tokio::time::sleep_until(next).await;
        }
    }
    Ok(())
}

/// The health report at `url`, read off the runtime's threads; `None` when
/// it did not answer JSON.
async fn report(url: &str) -> Result<Option<Value>> {
    let url = url.to_owned();
    Ok(tokio::task::spawn_blocking(move || get_json(&url)).await?)
}

/// The executor's instance in a health report.
fn instance(json: &Value) -> &Value {
    &json["executor"]["instances"][0]
}

/// The real worker's state, as the workers' route says it (the health entry
/// shows only a few of the flood's names).
async fn real_state(addr: &str) -> Result<Option<String>> {
    let url = format!("http://{addr}/api/v2/monitor/health/executor/workers?name={REAL}");
    Ok(report(&url)
        .await?
        .and_then(|page| page["workers"][0]["state"].as_str().map(str::to_owned)))
}

/// Whether the report says the events subscription is behind (the broker
/// drops events before Overseer reads them).
fn behind(json: &Value) -> bool {
    instance(json)["detail"]["worker_events"]
        .as_array()
        .is_some_and(|s| s.iter().any(|s| s["state"] == "behind"))
}

async fn flood(bin: &Path, url: &str, rabbit: bool, seconds: f64, rate: u64) -> Result<Flooded> {
    let dir = tempfile::tempdir()?;
    let (mut server, addr) = process::serve_overseer(
        bin,
        dir.path(),
        &[
            ("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor".into()),
            ("AIRFLOW__CELERY__BROKER_URL", url.to_owned()),
            (
                "OVERSEER_SUPERVISOR__POLL_INTERVAL",
                format!("{}s", POLL.as_secs()),
            ),
        ],
    )?;
    let health = format!("http://{addr}/api/v2/monitor/health");
    let stop_real = Arc::new(AtomicBool::new(false));
    let real_sent = Arc::new(Sent::default());
    let real = tokio::spawn(publish(
        url.to_owned(),
        rabbit,
        stop_real.clone(),
        None,
        real_sent.clone(),
    ));
    let started = Instant::now();
    loop {
        let json = report(&health).await?;
        if real_state(&addr).await?.as_deref() == Some("online")
            && json
                .as_ref()
                .is_some_and(|j| instance(j)["health"] == "healthy")
        {
            break;
        }
        if started.elapsed() > HEARD_DEADLINE || real.is_finished() {
            stop_real.store(true, Ordering::Relaxed);
            server.stop();
            bail!("Overseer did not report the real worker online and the executor healthy");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let pid = server.pid();
    let rss_idle = system::rss_mib(pid).context("Overseer's memory")?;
    system::reset_peak_rss(pid);
    let cpu_before = system::cpu_seconds(pid).context("Overseer's CPU")?;
    let stop_flood = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Sent::default());
    let flood = tokio::spawn(publish(
        url.to_owned(),
        rabbit,
        stop_flood.clone(),
        Some(rate),
        sent.clone(),
    ));
    let flood_start = Instant::now();
    let flood_for = Duration::from_secs_f64(seconds);
    let kill_at = flood_for / 2;

    let mut killed = false;
    let mut last_beat: Option<Instant> = None;
    let mut named_after = None;
    let (mut samples, mut samples_before, mut forged_named, mut real_not_online) = (0, 0, 0, 0);
    let (mut real_blamed_alive, mut behind_samples) = (0, 0);
    let mut subscribed = None;
    let mut states_while_alive = std::collections::BTreeSet::new();
    while flood_start.elapsed() < flood_for {
        if !killed && flood_start.elapsed() >= kill_at {
            stop_real.store(true, Ordering::Relaxed);
            killed = true;
        }
        // Stopped, the publisher sends nothing more: its last heartbeat is
        // the one it noted last (read once it has finished).
        if killed && last_beat.is_none() && real.is_finished() {
            last_beat = real_sent.last();
        }
        let json = report(&health).await?;
        samples += 1;
        if let Some(json) = &json {
            let reason = instance(json)["reason"].as_str().unwrap_or_default();
            behind_samples += usize::from(behind(json));
            subscribed = instance(json)["detail"]["worker_events"][0]["subscribed"]
                .as_u64()
                .or(subscribed);
            if reason.contains("celery@forged-") {
                forged_named += 1;
            }
            if !killed {
                samples_before += 1;
                let state = real_state(&addr).await?;
                if state.as_deref() != Some("online") {
                    real_not_online += 1;
                    states_while_alive.insert(state.unwrap_or_else(|| "absent".into()));
                }
                if reason.contains(REAL) {
                    real_blamed_alive += 1;
                }
            } else if named_after.is_none()
                && reason.contains(REAL)
                && let Some(at) = last_beat.or_else(|| real_sent.last())
            {
                named_after = Some(at.elapsed());
            }
        }
        if flood.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wall = flood_start.elapsed().as_secs_f64();
    stop_flood.store(true, Ordering::Relaxed);
    let cpu = system::cpu_seconds(pid).context("Overseer's CPU")? - cpu_before;
    let peak = system::peak_rss_mib(pid).context("Overseer's memory")?;
    // Not named during the flood (the subscription behind): how long after
    // its last heartbeat it is named once the flood has ended.
    let named_after_flood = named_after.is_none();
    let ended = Instant::now();
    while named_after.is_none() && ended.elapsed() < HEARD_DEADLINE {
        if let Some(json) = report(&health).await?
            && instance(&json)["reason"]
                .as_str()
                .is_some_and(|r| r.contains(REAL))
            && let Some(at) = last_beat.or_else(|| real_sent.last())
        {
            named_after = Some(at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.check_alive()?;
    server.stop();
    for (name, task) in [("the flood", flood), ("the real worker", real)] {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e).context(format!("{name}'s publisher")),
            Err(e) => return Err(anyhow!("{name}'s publisher: {e}")),
        }
    }
    Ok(Flooded {
        rate: sent.count.load(Ordering::Relaxed) as f64 / wall,
        cpu_percent: cpu / wall * 100.0,
        rss_idle_mib: rss_idle,
        rss_above_mib: (peak - rss_idle).max(0.0),
        named_after,
        named_after_flood,
        behind: behind_samples,
        subscribed,
        forged_named,
        real_not_online,
        states_while_alive,
        real_blamed_alive,
        samples_before,
        samples,
    })
}

pub async fn run(plan: &Plan, bin: &Path) -> Result<Body> {
    let seconds = plan.flood_seconds;
    let redis = ThrowawayRedis::start(&[]).ok_or_else(|| anyhow!("no redis-server"))?;
    let mut brokers = vec![("Redis", redis.url(None, 0), false)];
    let mut problems = Vec::new();
    // Deleted, with everything in it, when dropped at the end.
    let vhost = VirtualHost::create("overseer-bench-flood");
    match &vhost {
        Ok(vhost) => brokers.push(("RabbitMQ", vhost.url(), true)),
        Err(e) => problems.push(format!("RabbitMQ: {e}")),
    }
    let within = FREQ * 2 + POLL;
    let mut rows = Vec::new();
    let mut met = true;
    for (name, url, rabbit) in &brokers {
        match flood(bin, url, *rabbit, seconds, plan.flood_rate).await {
            Ok(f) => {
                let named = !f.named_after_flood && f.named_after.is_some_and(|d| d <= within);
                met &= f.rss_above_mib < RSS_GOAL_MIB
                    && f.cpu_percent < CPU_GOAL_PERCENT
                    && named
                    && f.real_blamed_alive == 0;
                rows.push(vec![
                    (*name).to_owned(),
                    format!("{:.0}", f.rate),
                    format!("{:.1}", f.cpu_percent),
                    format!("{:.1}", f.rss_idle_mib),
                    format!("{:.1}", f.rss_above_mib),
                    match (f.named_after, f.named_after_flood) {
                        (None, _) => "never".into(),
                        (Some(d), false) => format!("{:.1}", d.as_secs_f64()),
                        (Some(d), true) => {
                            format!("{:.1}, once the flood ended", d.as_secs_f64())
                        }
                    },
                    format!("{} of {}", f.behind, f.samples),
                    f.subscribed.map_or("?".into(), |n| n.to_string()),
                    if f.states_while_alive.is_empty() {
                        format!("{} of {}", f.real_not_online, f.samples_before)
                    } else {
                        format!(
                            "{} of {} ({})",
                            f.real_not_online,
                            f.samples_before,
                            f.states_while_alive
                                .iter()
                                .cloned()
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    },
                    format!("{} of {}", f.real_blamed_alive, f.samples_before),
                    format!("{} of {}", f.forged_named, f.samples),
                ]);
            }
            Err(e) => {
                met = false;
                problems.push(format!("{name}: {e:#}"));
            }
        }
    }
    let mut text = format!(
        "{} `worker-heartbeat` events a second, each from a worker name never used \
         before, forged as Celery 5.5.3 encodes them, for {seconds} s, published by the \
         harness to each broker; `overseer serve` (release, no setting but a {}s poll) \
         supervising a Celery executor on it. Beside the flood one worker heartbeats as a \
         real one does (`worker-online`, then one heartbeat every {}s), and stops without a \
         goodbye halfway through, as a killed worker does. *Named after*: from its last \
         heartbeat to the first health report whose reason names it, sampled every 100 ms; \
         while the subscription is *behind* (the broker drops events before Overseer reads \
         them) no silence is blamed, so a death is named once it has caught up.\n\n{}\n",
        plan.flood_rate,
        POLL.as_secs(),
        FREQ.as_secs(),
        table(
            &[
                "broker",
                "events published, a second",
                "Overseer's CPU, % of a core",
                "RSS before the flood, MiB",
                "RSS above it at the peak, MiB",
                "the worker's death named after, s",
                "samples with the subscription behind",
                "subscription made, times",
                "samples with the live worker not online",
                "samples blaming the live worker",
                "samples whose reason named a forged worker",
            ],
            &rows
        ),
    );
    let _ = writeln!(
        text,
        "Goal: under {RSS_GOAL_MIB} MiB above the idle process, under {CPU_GOAL_PERCENT} % of a \
         core, the worker's death named within {}s of its last heartbeat: **{}**.",
        within.as_secs(),
        if met { "met" } else { "missed" }
    );
    Ok(Body { text, problems })
}
