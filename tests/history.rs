//! The history through `overseer serve`: an executor whose check turns
//! healthy, then (its probe file removed) unhealthy, each transition in
//! `GET /api/v2/monitor/health/history` newest first, with `since` and
//! `previous` in the health JSON; `[history] retention` from the environment
//! in `overseer config`.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Serving, get, overseer, run, workdir};

/// How long the service may take to show a transition.
const PATIENCE: Duration = Duration::from_secs(30);

fn json(url: &str) -> (u16, Value) {
    let (status, body) = get(url);
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}")),
    )
}

fn until(what: &str, url: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (_, body) = json(url);
        if done(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{what}: not seen; last: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_history_endpoint_answers_each_transition_of_a_served_executor() {
    let dir = workdir();
    let probe = dir.path().join("up");
    std::fs::write(&probe, "").unwrap();
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            "[supervisor]\npoll_interval = \"200ms\"\npoll_timeout = \"150ms\"\n\
             heartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n\n\
             [[executors]]\nname = \"LocalExecutor\"\ncheck_command = [\"test\", \"-e\", \"{}\"]\n",
            probe.display()
        ),
    )
    .unwrap();
    let serving = Serving::start(overseer(dir.path()).env(
        "OVERSEER_DATABASE__URL",
        format!("sqlite://{}/h.db?mode=rwc", dir.path().display()),
    ));
    let history = serving.url("/api/v2/monitor/health/history");
    until("unknown -> healthy", &history, |h| {
        h["transitions"][0]["to"] == "healthy"
    });
    std::fs::remove_file(&probe).unwrap();
    let body = until("healthy -> unhealthy", &history, |h| {
        h["transitions"][0]["to"] == "unhealthy"
    });
    let transitions = body["transitions"].as_array().unwrap();
    assert_eq!(transitions.len(), 2, "{body}");
    let latest = &transitions[0];
    assert_eq!(latest["executor"], "LocalExecutor");
    assert_eq!(latest["instance"], "test");
    assert_eq!(latest["from"], "healthy");
    assert!(latest["reason"].is_string(), "{latest}");
    assert_eq!(transitions[1]["from"], "unknown");

    // The health JSON says since when, and what was before.
    let health = until(
        "since in the health JSON",
        &serving.url("/api/v2/monitor/health"),
        |h| h["executor"]["instances"][0]["health"] == "unhealthy",
    );
    let instance = &health["executor"]["instances"][0];
    assert_eq!(instance["since"], latest["at"], "{instance}");
    assert_eq!(instance["previous"], "healthy");

    let (status, body) = json(&format!("{history}?executor=LocalExecutor&limit=1"));
    assert_eq!(
        (status, body["transitions"].as_array().unwrap().len()),
        (200, 1)
    );
    let (status, body) = json(&format!("{history}?since=not-a-time"));
    assert_eq!(status, 400, "{body}");
    drop(serving);
}

#[test]
fn history_retention_is_configured_and_shown() {
    let dir = workdir();
    let shown = run(overseer(dir.path()).arg("config"));
    assert!(
        shown.stdout.contains("[history]\nretention = \"14days\""),
        "{}",
        shown.stdout
    );
    let shown = run(overseer(dir.path())
        .arg("config")
        .env("OVERSEER_HISTORY__RETENTION", "0s"));
    assert!(
        shown.stdout.contains("[history]\nretention = \"0s\""),
        "{}",
        shown.stdout
    );
    assert!(
        !shown.stderr.contains("OVERSEER_HISTORY"),
        "{}",
        shown.stderr
    );
}
