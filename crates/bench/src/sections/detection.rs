//! Section 3: Detection time: from the broker's death to `unhealthy` in Overseer's
//! health JSON, beside the Airflow Helm chart's Celery worker liveness-probe
//! arithmetic and `celery inspect ping` on a dead broker.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, anyhow, bail};
use overseer_testkit::throwaway::ThrowawayRedis;

use crate::chart::{self, BLUE, GREEN, GREY, RED, RangeRow};
use crate::plan::Plan;
use crate::process::{self, get_json};
use crate::report::{Body, Out, table};
use crate::stats::{Summary, count, num, ratio};
use crate::venv;

/// The Airflow Helm chart's Celery worker liveness probe (`workers.livenessProbe`
/// in `chart/values.yaml`: "If the worker stops responding for 5 minutes (5*60s)
/// kill the worker and let Kubernetes restart it").
const HELM_PERIOD_S: f64 = 60.0;
const HELM_FAILURE_THRESHOLD: f64 = 5.0;
const HELM_TIMEOUT_S: f64 = 20.0;

/// How long one detection (or recovery) may take before the run fails.
const DETECTION_DEADLINE: Duration = Duration::from_secs(120);
/// How often the harness reads Overseer's health JSON while waiting: the
/// resolution of the measured times.
const READ_EVERY: Duration = Duration::from_millis(20);
/// How long `celery inspect ping` may try before the harness stops it.
const INSPECT_DEADLINE: Duration = Duration::from_secs(120);

/// One poll setting of Overseer's.
#[derive(Debug, Clone, Copy)]
struct Setting {
    poll_s: f64,
    timeout_s: f64,
    heartbeat_s: f64,
    refresh_s: f64,
}

impl Setting {
    /// A 10 s poll is Overseer's default (timeout 5 s); faster polls take half a
    /// poll as the timeout. The heartbeat (writes) and refresh (reads of the
    /// table) are long, [`LONG_INTERVAL_S`] each: the report shows this
    /// process's verdicts as they are made, so neither delays a detection.
    fn for_poll(poll_s: u64) -> Self {
        let poll_s = poll_s as f64;
        Self {
            poll_s,
            timeout_s: poll_s / 2.0,
            heartbeat_s: LONG_INTERVAL_S,
            refresh_s: LONG_INTERVAL_S,
        }
    }

    /// The longest a dead broker can take to show: the next poll, and at most
    /// its timeout (a refused connection answers at once).
    fn bound_s(&self) -> f64 {
        self.poll_s + self.timeout_s
    }
}

/// The heartbeat and refresh intervals of every setting: Overseer's default
/// heartbeat, and a refresh five times its default.
const LONG_INTERVAL_S: f64 = 5.0;

/// Kills per setting, at least, in the full run: the spread needs a sample.
const KILLS_AT_LEAST: usize = 10;

fn duration(seconds: f64) -> String {
    format!("{}ms", (seconds * 1000.0).round() as u64)
}

/// A small random number source for the kill times (no crate needed).
struct Random(u64);

impl Random {
    fn new(salt: u64) -> Self {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Self((nanos ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1)
    }

    /// Uniform in [0, 1).
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn executor_status(url: &str) -> Option<String> {
    get_json(url)?["executor"]["status"]
        .as_str()
        .map(str::to_owned)
}

fn wait_status(url: &str, want: &str) -> Result<Duration> {
    let started = Instant::now();
    loop {
        if executor_status(url).as_deref() == Some(want) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > DETECTION_DEADLINE {
            bail!("Overseer's executor did not turn {want} within {DETECTION_DEADLINE:?}");
        }
        std::thread::sleep(READ_EVERY);
    }
}

/// Kills a broker `kills` times under one `overseer serve`, and returns the
/// seconds from each SIGKILL to `unhealthy` in the JSON.
fn measure(bin: &Path, setting: Setting, kills: usize, salt: u64) -> Result<Vec<f64>> {
    let dir = tempfile::tempdir()?;
    let mut redis =
        ThrowawayRedis::start(&[]).ok_or_else(|| anyhow!("redis-server did not start"))?;
    let db = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("overseer.db").display()
    );
    let env = [
        ("OVERSEER_DATABASE__URL", db),
        ("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor".to_owned()),
        ("AIRFLOW__CELERY__BROKER_URL", redis.url(None, 0)),
        (
            "OVERSEER_SUPERVISOR__POLL_INTERVAL",
            duration(setting.poll_s),
        ),
        (
            "OVERSEER_SUPERVISOR__POLL_TIMEOUT",
            duration(setting.timeout_s),
        ),
        (
            "OVERSEER_SUPERVISOR__HEARTBEAT_INTERVAL",
            duration(setting.heartbeat_s),
        ),
        (
            "OVERSEER_SUPERVISOR__REFRESH_INTERVAL",
            duration(setting.refresh_s),
        ),
    ];
    let (mut server, addr) = process::serve_overseer(bin, dir.path(), &env)?;
    let url = format!("http://{addr}/api/v2/monitor/health");
    wait_status(&url, "healthy").context("before the first kill")?;
    let mut random = Random::new(salt);
    let mut samples = Vec::new();
    for kill in 0..kills {
        // A random moment within a poll interval, so the kills fall at every
        // phase of the poll, flush and refresh timers.
        std::thread::sleep(Duration::from_secs_f64(random.next() * setting.poll_s));
        let killed = Instant::now();
        redis.kill();
        wait_status(&url, "unhealthy").with_context(|| format!("kill {} of {kills}", kill + 1))?;
        samples.push(killed.elapsed().as_secs_f64());
        server.check_alive()?;
        redis.resume().map_err(|e| anyhow!(e))?;
        wait_status(&url, "healthy").context("after the broker came back")?;
    }
    server.stop();
    Ok(samples)
}

/// `celery -b URL inspect ping` against a broker that was just killed: seconds
/// until it gives up, its exit code, and its last line.
fn inspect_dead(venv: &Path, runs: usize) -> Result<(Vec<f64>, String)> {
    let mut redis =
        ThrowawayRedis::start(&[]).ok_or_else(|| anyhow!("redis-server did not start"))?;
    let url = redis.url(None, 0);
    redis.kill();
    let mut samples = Vec::new();
    let mut how = String::new();
    for _ in 0..runs {
        let started = Instant::now();
        let child = Command::new(venv.join("bin/python"))
            .args(["-m", "celery", "-b", &url, "inspect", "ping"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("while starting celery inspect ping")?;
        let pid = child.id();
        let watchdog = std::thread::spawn(move || {
            let until = Instant::now() + INSPECT_DEADLINE;
            while Instant::now() < until {
                if !crate::system::alive(pid) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            crate::system::signal(pid, "KILL");
        });
        let out = child.wait_with_output()?;
        samples.push(started.elapsed().as_secs_f64());
        let _ = watchdog.join();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_owned();
        how = format!(
            "exit code {}: `{}`",
            out.status
                .code()
                .map_or("none (killed)".into(), |c| c.to_string()),
            last.replace('`', "'")
        );
    }
    drop(redis);
    Ok((samples, how))
}

pub fn run(plan: &Plan, out: &Out, bin: &Path) -> Result<Body> {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        bail!("redis-server is not installed (apt-get install redis-server)");
    }
    let venv: Result<PathBuf, String> = venv::celery();
    // The settings run side by side (each has its own broker and its own server;
    // they wait far more than they work), and `inspect ping` beside them.
    let settings: Vec<(Setting, usize)> = plan
        .detection
        .iter()
        .map(|&(poll, kills)| {
            let kills = if plan.smoke {
                kills
            } else {
                kills.max(KILLS_AT_LEAST)
            };
            (Setting::for_poll(poll), kills)
        })
        .collect();
    let (measured, inspect) = std::thread::scope(|scope| {
        let handles: Vec<_> = settings
            .iter()
            .enumerate()
            .map(|(i, &(setting, kills))| {
                scope.spawn(move || measure(bin, setting, kills, i as u64 + 1))
            })
            .collect();
        let inspect = venv
            .as_ref()
            .map_err(|e| anyhow!("{e}"))
            .and_then(|v| inspect_dead(v, plan.inspect_dead_runs));
        let measured: Vec<Result<Vec<f64>>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a detection thread panicked")))
            })
            .collect();
        (measured, inspect)
    });

    let mut body = format!(
        "The release `overseer serve` (SQLite, one `CeleryExecutor` on a `redis-server` of the \
         harness's own, configured through Airflow's own variables) until its executor is \
         `healthy`; then the broker is killed (SIGKILL) at a random moment within a poll \
         interval, and the harness reads `/api/v2/monitor/health` every {} ms until \
         `executor.status` says `unhealthy`; the broker is started again on the same port and \
         the next kill waits for `healthy`.{}\n\n",
        READ_EVERY.as_millis(),
        if settings.len() > 1 {
            " The settings run at the same time, each with its own broker and server (they wait \
             far more than they work)."
        } else {
            ""
        }
    );
    let mut rows = Vec::new();
    let mut chart_rows = Vec::new();
    let inspect_summary = inspect.as_ref().ok().and_then(|(s, _)| Summary::of(s));
    let probe_fail_s = inspect_summary.map_or(HELM_TIMEOUT_S, |s| s.median.min(HELM_TIMEOUT_S));
    let helm_median = (HELM_FAILURE_THRESHOLD - 0.5) * HELM_PERIOD_S + probe_fail_s;
    let helm_min = (HELM_FAILURE_THRESHOLD - 1.0) * HELM_PERIOD_S + probe_fail_s;
    let helm_max = HELM_FAILURE_THRESHOLD * HELM_PERIOD_S + probe_fail_s;
    let mut failures = Vec::new();
    let mut fastest = None;
    // The longest poll interval's median and worst: what the broker watch changes.
    let mut slowest: Option<(f64, f64, f64)> = None;
    for ((setting, kills), result) in settings.iter().zip(&measured) {
        let label = format!("Overseer, poll every {} s", num(setting.poll_s, 0));
        let settings_text = format!(
            "poll timeout {} s, heartbeat {} s, refresh {} s; {kills} kill{}",
            num(setting.timeout_s, 1),
            num(setting.heartbeat_s, 0),
            num(setting.refresh_s, 0),
            if *kills == 1 { "" } else { "s" }
        );
        match result.as_ref().ok().and_then(|s| Summary::of(s)) {
            Some(s) => {
                rows.push(vec![
                    label.clone(),
                    settings_text,
                    s.cell(1),
                    format!(
                        "≤ 0.5 s: the broker watch polls at once (poll + timeout, {} s, without it)",
                        num(setting.bound_s(), 1)
                    ),
                    ratio(helm_median, s.median),
                ]);
                chart_rows.push(RangeRow {
                    label,
                    summary: s,
                    mark: None,
                    color: if setting.poll_s < 10.0 { GREEN } else { BLUE },
                });
                fastest.get_or_insert((setting.poll_s, s.median));
                slowest = Some((setting.poll_s, s.median, s.max));
            }
            None => {
                let why = result
                    .as_ref()
                    .err()
                    .map_or("no sample".into(), |e| format!("{e:#}"));
                failures.push(format!("{label}: {why}"));
            }
        }
    }
    match (&inspect, inspect_summary) {
        (Ok((_, how)), Some(s)) => {
            rows.push(vec![
                "`celery -b URL inspect ping`, broker dead".into(),
                format!(
                    "Celery {}, a fresh interpreter each time, as a probe runs it; {}",
                    venv.as_ref()
                        .map_or("?".into(), |v| venv::version(v, "celery")),
                    count(s.n, "run")
                ),
                s.cell(1),
                format!("time for one probe to give up; it ends with {how}"),
                "–".into(),
            ]);
            chart_rows.push(RangeRow {
                label: "celery inspect ping gives up (one probe)".into(),
                summary: s,
                mark: None,
                color: GREY,
            });
        }
        (Err(e), _) => failures.push(format!("celery inspect ping: {e:#}")),
        _ => {}
    }
    let helm = Summary {
        median: helm_median,
        min: helm_min,
        max: helm_max,
        p10: helm_min,
        p90: helm_max,
        n: 2,
    };
    rows.push(vec![
        "Airflow Helm chart, Celery worker liveness probe".into(),
        format!(
            "period {} s, failure threshold {}, timeout {} s (`workers.livenessProbe`)",
            num(HELM_PERIOD_S, 0),
            num(HELM_FAILURE_THRESHOLD, 0),
            num(HELM_TIMEOUT_S, 0)
        ),
        helm.cell(0),
        format!(
            "arithmetic, not measured: (threshold − 1) × period + U(0, period) + t, \
             t = one failing probe = {} s (the row above, at most the timeout)",
            num(probe_fail_s, 1)
        ),
        "1×".into(),
    ]);
    chart_rows.push(RangeRow {
        label: "Helm chart worker probe (arithmetic)".into(),
        summary: helm,
        mark: None,
        color: RED,
    });
    rows.push(vec![
        "Airflow 3.3.2's own `/api/v2/monitor/health`".into(),
        "–".into(),
        "never".into(),
        "it has no executor entry: with the broker down it keeps saying every component is \
         healthy (seen on a real Airflow 3.3.2 with its broker down 40 s; \
         `tests/interop_airflow.rs` checks it)"
            .into(),
        "–".into(),
    ]);
    body.push_str(&table(
        &[
            "what",
            "settings",
            "broker death → unhealthy, s",
            "expected",
            "Helm probe ÷ this (medians)",
        ],
        &rows,
    ));
    let _ = writeln!(
        body,
        "\nThe Helm arithmetic: Kubernetes runs the probe every period; after the broker dies the \
         next probe starts within one period (uniformly, U(0, {p})), fails after t seconds, and \
         the pod is declared dead at the {f}th consecutive failure, {f1} periods later: \
         detection = {f1} × {p} + U(0, {p}) + t, so {min}–{max} s, median {med} s. And what it \
         produces is a restarted worker, not a line in the health JSON.\n",
        p = num(HELM_PERIOD_S, 0),
        f = num(HELM_FAILURE_THRESHOLD, 0),
        f1 = num(HELM_FAILURE_THRESHOLD - 1.0, 0),
        min = num(helm_min, 0),
        max = num(helm_max, 0),
        med = num(helm_median, 0),
    );
    chart::ranges(
        &out.chart("detection.svg"),
        "From the broker's death to a verdict (bar: min–max, dot: median)",
        "seconds (log scale)",
        &chart_rows,
        true,
    )?;
    body.push_str(&Out::image(
        "detection.svg",
        "detection time beside the Helm probe",
    ));
    body.push_str("\n\n");
    if let (Some((fast_poll, fast)), Some((poll, median, worst))) = (fastest, slowest) {
        let slow = format!("{} s with a {} s poll", num(median, 2), num(poll, 0));
        let times = if fast_poll < poll {
            format!(
                "{} s with a {} s poll and {slow}",
                num(fast, 2),
                num(fast_poll, 0)
            )
        } else {
            slow
        };
        let _ = writeln!(
            body,
            "**For an operator**: a dead broker shows as `unhealthy` in the health JSON after \
             about {times} (worst {} s), where the Helm \
             chart's probe needs about {} s to even restart a worker ({}), and Airflow's own \
             health endpoint never says anything. The poll interval no longer bounds it: \
             Overseer holds a connection to each broker, and when it closes (or stops \
             answering) the executor is polled at once; this process's verdicts reach the \
             report when they are made, whatever the heartbeat and refresh intervals (5 s each \
             here).",
            num(worst, 2),
            num(helm_median, 0),
            ratio(helm_median, median)
        );
    }
    Ok(Body {
        text: body,
        problems: failures,
    })
}
