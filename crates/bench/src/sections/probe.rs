//! Section 6: A probe that floods its output. `check_command = ["yes"]` writes
//! without end; the command check keeps the first 64 KiB of it
//! (`overseer_checks::command::MAX_OUTPUT`) for the reason. This section polls
//! a command check as the supervisor does (one poll every [`INTERVAL`], each
//! answering within [`POLL_TIMEOUT`]) for a window of seconds, and reports the
//! CPU this process spent in it as a share of one core, beside a probe that
//! prints nothing (`true`) as the floor. The probe's own CPU (`yes` itself) is
//! not Overseer's and is not counted: `getrusage(RUSAGE_SELF)` leaves children out.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use overseer_checks::CommandCheck;
use overseer_core::HealthCheck;

use crate::plan::Plan;
use crate::report::{Body, table};
use crate::stats::{Summary, count};
use crate::system;

/// The supervisor's `poll_timeout` in this section: the check gives itself 90 %.
const POLL_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the check is polled, as `poll_interval` (the shortest sensible:
/// a poll every `poll_timeout`), so a check that ran to its deadline would
/// keep Overseer busy nearly all the time.
const INTERVAL: Duration = Duration::from_secs(2);

/// The figure the issue sets: a flooding probe costs Overseer under 3 % of a core.
const TARGET_PERCENT: f64 = 3.0;

/// One window of polls: what it cost and what the check said.
struct Window {
    /// CPU seconds this process spent, over the window's wall seconds, in %.
    percent: f64,
    /// How long each poll took to answer, in milliseconds.
    answers_ms: Vec<f64>,
    /// The last verdict, as logs print it.
    verdict: String,
}

pub async fn run(plan: &Plan) -> Result<Body> {
    let (runs, seconds) = if plan.smoke { (1, 4.0) } else { (3, 10.0) };
    let probes: [(&str, &[&str]); 2] = [
        ("floods its output: `yes`", &["yes"]),
        ("prints nothing: `true`", &["true"]),
    ];
    let mut rows = Vec::new();
    let mut flooding = None;
    for (label, argv) in probes {
        let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
        let check = CommandCheck::new(&argv, POLL_TIMEOUT).map_err(|e| anyhow!("{e}"))?;
        // Warm-up: the first spawn pays for the page cache and the runtime.
        let _ = check.get_health().await;
        let mut percents = Vec::new();
        let mut answers = Vec::new();
        let mut verdict = String::new();
        for _ in 0..runs {
            let window = window(&check, seconds).await;
            percents.push(window.percent);
            answers.extend(window.answers_ms);
            verdict = window.verdict;
        }
        let percent = Summary::of(&percents).ok_or_else(|| anyhow!("no window measured"))?;
        let answered = Summary::of(&answers).ok_or_else(|| anyhow!("no poll answered"))?;
        if flooding.is_none() {
            flooding = Some(percent.median);
        }
        rows.push(vec![
            label.to_owned(),
            percent.cell(2),
            answered.cell_p(1),
            count(answers.len(), "poll"),
            format!("`{}`", verdict.replace('|', "\\|")),
        ]);
    }
    let flooding = flooding.unwrap_or(f64::NAN);
    let met = if flooding < TARGET_PERCENT {
        "met"
    } else {
        "missed"
    };
    let text = format!(
        "A command check polled every {}s (`poll_timeout` {}s) for {} of {seconds}s, \
         this process's CPU (`getrusage`, children excluded) as a share of one core; \
         median (min–max) over the windows.\n\n{}\n\
         Target: a flooding probe costs Overseer under {TARGET_PERCENT} % of a core: **{met}** \
         ({flooding:.2} %).\n",
        INTERVAL.as_secs(),
        POLL_TIMEOUT.as_secs(),
        count(runs, "window"),
        table(
            &[
                "probe",
                "Overseer's CPU, % of a core",
                "poll answered in, ms",
                "polls",
                "last verdict"
            ],
            &rows
        ),
    );
    Ok(Body::from(text))
}

/// Polls `check` every [`INTERVAL`] for `seconds`, as the supervisor would.
async fn window(check: &CommandCheck, seconds: f64) -> Window {
    let cpu_start = system::own_cpu_seconds();
    let start = Instant::now();
    let mut next = start;
    let mut answers_ms = Vec::new();
    let mut verdict = String::new();
    while start.elapsed().as_secs_f64() < seconds {
        let asked = Instant::now();
        verdict = check.get_health().await.to_string();
        answers_ms.push(asked.elapsed().as_secs_f64() * 1000.0);
        next += INTERVAL;
        tokio::time::sleep_until(next.into()).await;
    }
    let wall = start.elapsed().as_secs_f64();
    Window {
        percent: (system::own_cpu_seconds() - cpu_start) / wall * 100.0,
        answers_ms,
        verdict,
    }
}
