//! The history through `overseer serve`: an executor whose check turns
//! healthy, then (its probe file removed) unhealthy, each transition in
//! `GET /api/v2/monitor/health/history` newest first, with `since` and
//! `previous` in the health JSON; `[history] retention` from the environment
//! in `overseer config`.

use crate::support;

use std::time::Duration;

use overseer_testkit::wait;
use serde_json::Value;
use support::{Serving, get, overseer, run, workdir};

fn json(url: &str) -> (u16, Value) {
    let (status, body) = get(url);
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}")),
    )
}

fn until(what: &str, url: &str, done: impl Fn(&Value) -> bool) -> Value {
    wait::until(what, || {
        let (_, body) = json(url);
        if done(&body) { Ok(body) } else { Err(body) }
    })
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

/// Overseer killed (SIGKILL) and started again once its row went stale: the
/// history says when supervision stopped (`healthy -> unknown` at the killed
/// run's last heartbeat, "not supervised") and when it resumed (`unknown ->
/// healthy` at the new run's first verdict), and the health JSON's `previous`
/// is `unknown`. Before, the history said `healthy` throughout.
#[test]
fn a_killed_overseer_leaves_a_gap_in_the_history() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        "[supervisor]\npoll_interval = \"200ms\"\npoll_timeout = \"150ms\"\n\
         heartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n\n\
         [thresholds]\nexecutor = \"1s\"\n\n\
         [[executors]]\nname = \"LocalExecutor\"\ncheck_command = [\"true\"]\n",
    )
    .unwrap();
    let database = format!("sqlite://{}/h.db?mode=rwc", dir.path().display());
    let serve = || Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &database));
    let first = serve();
    let history = first.url("/api/v2/monitor/health/history");
    until("unknown -> healthy", &history, |h| {
        h["transitions"][0]["to"] == "healthy"
    });
    drop(first); // SIGKILL: no goodbye, its row left open.
    // Longer than thresholds.executor: the row reads stale meanwhile.
    std::thread::sleep(Duration::from_secs(3));

    let second = serve();
    let history = second.url("/api/v2/monitor/health/history");
    let body = until("the gap, then healthy again", &history, |h| {
        h["transitions"].as_array().is_some_and(|t| t.len() >= 3)
    });
    let t = body["transitions"].as_array().unwrap();
    let states = |t: &Value| (t["from"].clone(), t["to"].clone(), t["reason"].clone());
    assert_eq!(
        t.iter().map(states).collect::<Vec<_>>(),
        [
            ("unknown".into(), "healthy".into(), Value::Null),
            (
                "healthy".into(),
                "unknown".into(),
                "not supervised: Overseer was not running".into()
            ),
            ("unknown".into(), "healthy".into(), Value::Null),
        ],
        "newest first: {body}"
    );
    let at = |t: &Value| chrono::DateTime::parse_from_rfc3339(t["at"].as_str().unwrap()).unwrap();
    let unsupervised = at(&t[0]) - at(&t[1]);
    assert!(
        unsupervised >= chrono::Duration::seconds(3),
        "the gap spans the outage: {body}"
    );
    let health = until(
        "healthy, previous unknown",
        &second.url("/api/v2/monitor/health"),
        |h| h["executor"]["instances"][0]["health"] == "healthy",
    );
    let instance = &health["executor"]["instances"][0];
    assert_eq!(instance["previous"], "unknown", "{instance}");
    assert_eq!(instance["since"], t[0]["at"], "{instance}");
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
