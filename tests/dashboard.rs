//! The dashboard in a real browser: Debian's headless Chromium driven over
//! WebDriver (chromedriver). It shows the four cards with their states, and a
//! verdict change appears without a reload; the executor's card shows the
//! evidence of its check (a Celery executor's queues on the real Redis, and
//! every part of a detail, words for what is not known included). For the
//! person on call: `unknown` is grey, never green; a broker killed and
//! restarted turns the card, the line at the top, the tab's title and favicon
//! red and back, with how long each state has lasted and a 24-hour strip of
//! the states; on a narrow screen the executor's card comes first. The
//! screenshots are kept in `target/artifacts/`.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use chrono::Utc;
use overseer_testkit::throwaway::ThrowawayRedis;
use serde_json::{Value, json};
use support::browser::{Driver, report_time};
use support::{Heartbeat, Serving, get, overseer, workdir};

/// The shared Redis on this machine.
const REDIS: &str = "127.0.0.1:6379";

/// The Redis database the dashboard's Celery executor uses: no other test's.
const REDIS_DB: u32 = 11;

/// The state the favicon is drawn in.
const FAVICON: &str = "return document.getElementById('favicon').dataset.state";

/// The line at the top of the page.
const SUMMARY: &str = "return document.getElementById('summary').innerText";

/// A Celery queue on the shared Redis: a list of messages named after the
/// queue, as Celery's Redis transport keeps it, in [`REDIS_DB`]; deleted on drop.
struct RedisQueue {
    name: String,
}

impl RedisQueue {
    /// A queue of a unique name, or `None` (skipped, or failed under CI) when
    /// Redis does not answer.
    fn new() -> Option<Self> {
        if let Err(e) = TcpStream::connect(REDIS) {
            return overseer_testkit::unavailable("Redis on 127.0.0.1:6379", e);
        }
        Some(Self {
            name: overseer_testkit::unique_name("dashboard"),
        })
    }

    /// Pushes `count` messages onto the queue.
    fn push(&self, count: usize) {
        let mut command = vec!["LPUSH", self.name.as_str()];
        command.extend(std::iter::repeat_n(r#"{"body":""}"#, count));
        let reply = redis(&command);
        assert!(reply.starts_with(':'), "LPUSH answered {reply}");
    }
}

impl Drop for RedisQueue {
    fn drop(&mut self) {
        redis(&["DEL", &self.name]);
    }
}

/// Sends one command to [`REDIS_DB`] on the shared Redis, in RESP, and returns
/// the first line of its reply (`:2` for LPUSH's new length).
fn redis(command: &[&str]) -> String {
    let mut stream = TcpStream::connect(REDIS).expect("Redis answers");
    let db = REDIS_DB.to_string();
    let mut request = Vec::new();
    for args in [&["SELECT", db.as_str()][..], command] {
        write!(request, "*{}\r\n", args.len()).unwrap();
        for arg in args {
            write!(request, "${}\r\n{arg}\r\n", arg.len()).unwrap();
        }
    }
    stream.write_all(&request).unwrap();
    let mut lines = BufReader::new(stream).lines();
    let selected = lines.next().unwrap().unwrap();
    assert_eq!(selected, "+OK", "SELECT {db}");
    lines.next().unwrap().unwrap()
}

/// A database migrated for `serve`.
async fn migrated_sqlite() -> overseer_testkit::TestDb {
    let db = overseer_testkit::sqlite().await;
    {
        use overseer_migration::{Migrator, MigratorTrait};
        Migrator::up(&db.conn, None).await.unwrap();
    }
    db
}

#[tokio::test]
async fn the_dashboard_shows_four_cards_and_follows_a_verdict_change_live() {
    let Some(browser) = Driver::start() else {
        return;
    };
    let db = migrated_sqlite().await;
    let now = || Utc::now().format("%Y-%m-%d %H:%M:%S%.6f").to_string();
    db.execute_script(&format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, unixname) \
         VALUES ('running', 'SchedulerJob', '{n}', '{n}', 'sched-1', 'airflow')",
        n = now()
    ))
    .await;
    db.execute_script(&format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, executor_class, hostname, unixname, \
         executor_health, executor_health_reason, executor_instance, executor_health_checked_at) VALUES \
         ('running', 'ExecutorJob', '{n}', '{n}', 'CeleryExecutor', 'sched-2', 'airflow', 'unhealthy', \
          'broker redis://broker:6379/0 refused the connection', 'redis://broker:6379/0', '{n}')",
        n = now()
    ))
    .await;

    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        "[supervisor]\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\npoll_interval = \"200ms\"\npoll_timeout = \"100ms\"\n\n[[executors]]\nname = \"LocalExecutor\"\n",
    )
    .unwrap();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    // The other host's Overseer keeps its row alive, as it would, and so does the scheduler.
    let _other = Heartbeat::start(
        &db.url,
        db.backend,
        "(hostname = 'sched-2' AND job_type = 'ExecutorJob') OR job_type = 'SchedulerJob'",
    );

    browser.open(&serving.url("/"));
    let state = |card: &str| format!("return document.getElementById('card-{card}').dataset.state");
    browser.wait_for(&state("executor"), json!("degraded"));
    browser.wait_for(&state("scheduler"), json!("healthy"));
    browser.wait_for(&state("triggerer"), json!("unknown"));
    browser.wait_for(&state("dag_processor"), json!("unknown"));
    let titles =
        browser.eval("return [...document.querySelectorAll('.card h2')].map(h => h.textContent)");
    assert_eq!(
        titles,
        json!(["Scheduler", "Triggerer", "DagProcessor", "Executor"])
    );
    // Each verdict says why: the unhealthy broker, and the executor that has no check.
    let reasons = "return [...document.querySelectorAll('#card-executor .reason')].map(r => r.textContent).sort()";
    browser.wait_for(
        reasons,
        json!([
            "broker redis://broker:6379/0 refused the connection",
            "no health check for LocalExecutor"
        ]),
    );
    browser.wait_live();
    // The worst state leads: the tab's title, its favicon, the line at the top
    // (each executor named with its host, as two hosts report).
    browser.wait_for("return document.title", json!("✖ Overseer: 1 unhealthy"));
    browser.wait_for(FAVICON, json!("unhealthy"));
    let summary = browser.eval(SUMMARY);
    let summary = summary.as_str().unwrap();
    assert!(
        summary.starts_with(
            "1 of 2 executors unhealthy: CeleryExecutor @ redis://broker:6379/0 on sched-2"
        ),
        "{summary}"
    );
    assert!(
        summary.contains(" · 1 unknown: LocalExecutor on ")
            && summary.ends_with(" (no health check for LocalExecutor)"),
        "{summary}"
    );
    browser.screenshot("dashboard.png");

    // Mark this page: a reload would lose the mark.
    browser.eval("window.notReloaded = true; return true");
    db.execute_script("UPDATE job SET executor_health = 'healthy', executor_health_reason = NULL WHERE hostname = 'sched-2'")
    .await;
    browser.wait_for(&state("executor"), json!("healthy"));
    assert_eq!(
        browser.eval("return window.notReloaded === true"),
        json!(true)
    );
    assert_eq!(
        browser.eval("return document.querySelectorAll('#card-executor li[data-health=\"unhealthy\"]').length"),
        json!(0)
    );
    // The executor with no check keeps the page grey, never green.
    browser.wait_for("return document.title", json!("Overseer: 1 unknown"));
    browser.wait_for(FAVICON, json!("unknown"));
    browser.screenshot("dashboard-recovered.png");
    drop(serving);
}

#[tokio::test]
async fn the_executor_card_shows_a_celery_executor_s_queue_and_its_depth_live() {
    let Some(queue) = RedisQueue::new() else {
        return;
    };
    let Some(browser) = Driver::start() else {
        return;
    };
    queue.push(2);
    let db = migrated_sqlite().await;
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            "[supervisor]\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\npoll_interval = \"500ms\"\npoll_timeout = \"400ms\"\n\n\
             [[executors]]\nname = \"CeleryExecutor\"\nbroker_url = \"redis://{REDIS}/{REDIS_DB}\"\nqueues = [\"{}\"]\n",
            queue.name
        ),
    )
    .unwrap();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));

    browser.open(&serving.url("/"));
    let depth = format!(
        "const row = document.querySelector('#card-executor tr[data-queue=\"{}\"]'); \
         return row ? row.querySelector('td.depth').textContent : null",
        queue.name
    );
    browser.wait_for(&depth, json!("2"));
    let text = browser.eval("return document.getElementById('card-executor').innerText");
    let text = text.as_str().unwrap();
    assert!(text.contains(&queue.name), "{text}");
    assert!(
        text.contains(&format!("redis://{REDIS}/{REDIS_DB}")),
        "{text}"
    );
    assert!(!text.contains("null"), "{text}");
    browser.screenshot("dashboard-queues.png");

    // A message more shows without a reload.
    browser.eval("window.notReloaded = true; return true");
    queue.push(1);
    browser.wait_for(&depth, json!("3"));
    assert_eq!(
        browser.eval("return window.notReloaded === true"),
        json!(true)
    );
    drop(serving);
}

#[tokio::test]
async fn the_executor_card_words_every_part_of_the_evidence_and_never_says_null() {
    let Some(browser) = Driver::start() else {
        return;
    };
    let db = migrated_sqlite().await;
    let dir = workdir();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    browser.open_live(&serving.url("/"));

    // A report no check on this machine could give: workers that answered and
    // task instances queued for minutes. The page renders it as it renders the
    // service's, with the stream closed so that no report of the service's
    // replaces it, and is read in the same script.
    let at = report_time(Utc::now());
    let success_at = report_time(Utc::now() - chrono::Duration::minutes(3));
    let instance = |executor: &str, broker: &str, detail: Value| {
        json!({
            "executor": executor, "instance": broker, "hostname": "sched-1",
            "latest_executor_heartbeat": at, "health": "healthy", "reason": null,
            "checked_at": at, "detail": detail,
        })
    };
    let report = json!({
        "metadatabase": {"status": "healthy"},
        "scheduler": {"status": "healthy", "latest_scheduler_heartbeat": at,
                      "detailed_status": "healthy",
                      "instances": [{"hostname": "sched-1", "latest_scheduler_heartbeat": at}]},
        "triggerer": {"status": null, "latest_triggerer_heartbeat": null,
                      "detailed_status": "down", "instances": []},
        "dag_processor": {"status": null, "latest_dag_processor_heartbeat": null,
                          "detailed_status": "down", "instances": []},
        "executor": {"status": "healthy", "latest_executor_heartbeat": at,
                     "detailed_status": "healthy", "instances": [
            instance("CeleryExecutor", "redis://a:6379/0;redis://b:6379/0", json!({
                "queues": [
                    {"name": "default", "broker": "redis://a:6379/0", "depth": 3, "consumers": 2},
                    {"name": "default", "broker": "redis://b:6379/0", "depth": 0, "consumers": 0},
                ],
                "workers": [
                    {"name": "celery@w0", "queues": ["default"], "state": "offline",
                     "concurrency": 16, "free_concurrency": 15},
                    {"name": "celery@w1", "queues": ["default", "reports"], "state": "online",
                     "concurrency": 16, "free_concurrency": 0},
                    {"name": "celery@w3", "queues": ["default"], "state": "gone"},
                    {"name": "celery@w2", "queues": null},
                ],
                "queued_tasks": {"count": 5, "oldest_seconds": 840, "queues": [
                    {"queue": "adhoc", "count": 1, "oldest_seconds": 75, "overdue": 0},
                    {"queue": "default", "count": 4, "oldest_seconds": 840, "overdue": 1},
                ]},
                "canary": {"dag_id": "overseer_canary", "dag": "scheduled", "queues": [
                    {"queue": "default", "run_id": "r2", "state": "queued", "waiting_seconds": 95,
                     "pickup_seconds": 0.93, "run_seconds": 10.4, "last_success": success_at},
                    {"queue": "gpu", "run_id": "r2", "state": null, "waiting_seconds": null,
                     "pickup_seconds": null, "run_seconds": null, "last_success": null},
                ]},
            })),
            instance("alias:CeleryExecutor", "redis://c:6379/0", json!({
                "queues": [{"name": "default", "broker": "redis://c:6379/0", "depth": null, "consumers": null}],
                "workers": null,
                "queued_tasks": null,
            })),
            instance("LocalExecutor", "", Value::Null),
        ]},
    });
    let seen = browser.eval_with(
        r#"events.close();
        render(arguments[0]);
        const items = [...document.querySelectorAll('#card-executor > ul > li')];
        const cells = (item, selector) => [...item.querySelectorAll(selector)].map(
            (row) => [...row.cells].map((c) => c.innerText));
        return {
            text: document.getElementById('card-executor').innerText,
            queues: items.map((i) => cells(i, 'table.queues tbody tr')),
            workers: items.map((i) => [...i.querySelectorAll('ul.workers li, div.workers')].map((w) => w.innerText)),
            stopped: items.map((i) => [...i.querySelectorAll('ul.workers li.stopped')].map((w) => w.dataset.worker)),
            queued: items.map((i) => [...i.querySelectorAll('div.queued')].map((q) => q.innerText)),
            queued_queues: items.map((i) => cells(i, 'table.queued-queues tbody tr')),
            evidence: items.map((i) => i.querySelectorAll('.evidence').length),
            canary: items.map((i) => [...i.querySelectorAll('div.canary-dag')].map((d) => d.innerText)),
            canary_queues: items.map((i) => cells(i, 'table.canary-queues tbody tr')),
            success_clock: clock(Date.parse(arguments[1])),
        };"#,
        json!([report, success_at]),
    );
    browser.screenshot("dashboard-evidence.png");
    let text = seen["text"].as_str().unwrap();
    assert!(!text.contains("null"), "{text}");
    assert!(!text.contains("undefined"), "{text}");

    // Each broker of the failover list has its row; a depth or a consumer
    // count that cannot be told is "?".
    assert_eq!(
        seen["queues"],
        json!([
            [
                ["default\nredis://a:6379/0", "3", "2"],
                ["default\nredis://b:6379/0", "0", "0"]
            ],
            [["default", "?", "?"]],
            [],
        ])
    );
    assert_eq!(
        seen["workers"],
        json!([
            [
                "celery@w1: default, reports · 16 of 16 slots taken",
                "celery@w2: queues not known",
                "celery@w3: default · gone",
                "celery@w0: default · offline"
            ],
            ["not known (workers are not pinged)"],
            [],
        ])
    );
    // Those taking work first; a stopped worker last, greyed, its last count
    // no slot taken.
    assert_eq!(seen["stopped"], json!([["celery@w0"], [], []]));
    assert_eq!(
        seen["queued"],
        json!([
            ["5 in all · oldest 14m"],
            ["not known (Airflow's task_instance table was not read)"],
            [],
        ])
    );
    assert_eq!(
        seen["queued_queues"],
        json!([
            [["adhoc", "1", "1m", "0"], ["default", "4", "14m", "1"]],
            [],
            [],
        ])
    );
    // The canary: its DAG, and per queue its state, how long one waits, the
    // latest pickup (to a tenth under ten seconds) and success (the page's
    // clock: the browser's time zone); a queue not run yet says so.
    assert_eq!(
        seen["canary"],
        json!([["DAG overseer_canary: scheduled"], [], []])
    );
    let clock = seen["success_clock"].as_str().unwrap();
    assert!(
        clock.len() == 5 || clock.len() == 16,
        "HH:MM, or with its date: {clock}"
    );
    assert_eq!(
        seen["canary_queues"],
        json!([
            [
                ["default", "queued", "1m", "0.9s", clock],
                ["gpu", "not scheduled yet", "–", "–", "none read"]
            ],
            [],
            []
        ])
    );
    // Another host's row, or a check that gives no evidence: nothing shown.
    assert_eq!(seen["evidence"], json!([1, 1, 0]));
    drop(serving);
}

/// The README's first run: `serve` with no executor configured (no file, no
/// Airflow environment). Nothing is supervised, so the JSON has no `executor`
/// entry, and the executor's card says so and what to configure, as the
/// README's Configuration does: Airflow's own variables or `[[executors]]` in
/// `overseer.toml`. Then another host's Overseer, killed (its row open, its
/// heartbeat old): the card tells that apart, and gives no set-up text.
#[tokio::test]
async fn with_no_executor_supervised_the_card_says_what_to_configure() {
    let Some(browser) = Driver::start() else {
        return;
    };
    let db = migrated_sqlite().await;
    let dir = workdir();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    assert_eq!(report_of(&serving).get("executor"), None);

    browser.open_live(&serving.url("/"));
    let card = "const card = document.getElementById('card-executor'); \
                return [card.dataset.state, card.querySelector(':scope > .state').innerText]";
    browser.wait_for(card, json!(["unknown", "none supervised"]));
    let text = browser.eval("return document.getElementById('card-executor').innerText");
    let text = text.as_str().unwrap();
    assert!(
        text.contains(
            "This Overseer supervises no executor, and no other Overseer on its database supervises one."
        ),
        "{text}"
    );
    for named in [
        "AIRFLOW__CORE__EXECUTOR",
        "AIRFLOW__CELERY__BROKER_URL",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "overseer.toml",
        "OVERSEER_EXECUTORS",
        "[[executors]]\nname = \"CeleryExecutor\"\nbroker_url = \"redis://broker:6379/0\"",
        "README, section Configuration",
    ] {
        assert!(text.contains(named), "{named} in {text}");
    }
    assert_eq!(
        browser.eval(SUMMARY),
        json!("No executor is supervised: the Executor card says what to configure")
    );
    // Nothing to filter: no filter shown.
    let filters =
        "return getComputedStyle(document.querySelector('#card-executor .filters')).display";
    assert_eq!(browser.eval(filters), json!("none"));
    nothing_spills(&browser);
    browser.screenshot("dashboard-nothing-supervised.png");

    // Another host's Overseer killed 10 minutes ago: its row still open.
    let then = (Utc::now() - chrono::Duration::minutes(10)).format("%Y-%m-%d %H:%M:%S%.6f");
    db.execute_script(&format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, executor_class, hostname, unixname, \
         executor_health, executor_instance, executor_health_checked_at) VALUES \
         ('running', 'ExecutorJob', '{then}', '{then}', 'CeleryExecutor', 'sched-2', 'airflow', 'healthy', \
          'redis://broker:6379/0', '{then}')"
    ))
    .await;
    browser.wait_for(card, json!(["down", "down"]));
    let text = browser.eval("return document.getElementById('card-executor').innerText");
    let text = text.as_str().unwrap();
    assert!(
        text.contains(
            "No executor has reported recently: the Overseer supervising them on this database \
             stopped heartbeating (last heartbeat 10 min ago). This Overseer supervises none itself."
        ),
        "{text}"
    );
    assert!(!text.contains("AIRFLOW__CORE__EXECUTOR"), "{text}");
    assert_eq!(browser.eval(filters), json!("flex"));
    browser.screenshot("dashboard-supervisor-gone.png");
    drop(serving);
}

/// No box of the page spills its text, nor does the page scroll sideways.
fn nothing_spills(browser: &Driver) {
    let spilled = browser.eval(
        "return [...document.querySelectorAll('.card, .card > ul > li, .setup pre, .setup p, #summary')] \
           .filter((n) => n.offsetParent !== null && n.scrollWidth > n.clientWidth) \
           .map((n) => n.id || n.className) \
           .concat(document.documentElement.scrollWidth > window.innerWidth ? ['the page'] : [])",
    );
    assert_eq!(spilled, json!([]));
}

/// The report `serving` publishes now.
fn report_of(serving: &Serving) -> Value {
    let (status, body) = get(&serving.url("/api/v2/monitor/health"));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// A script's value as an expression of another script.
fn value_of(script: &str) -> String {
    format!("(() => {{ {script} }})()")
}

/// The states of the executor instance's 24-hour strip, oldest first, with
/// runs of one state taken as one.
const STRIP_STATES: &str = "const states = [...document.querySelectorAll('#card-executor .history .segment')]\
     .map((s) => s.dataset.state); \
     return states.filter((s, i) => i === 0 || states[i - 1] !== s)";

/// The line under the executor instance's name: how long it has been in its state.
const SINCE: &str = "const line = document.querySelector('#card-executor li .since'); \
     return line ? line.innerText : ''";

#[tokio::test]
async fn a_killed_broker_turns_card_title_summary_and_strip_red_and_its_return_green_again() {
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let Some(browser) = Driver::start() else {
        return;
    };
    let db = migrated_sqlite().await;
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            "[supervisor]\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\npoll_interval = \"300ms\"\npoll_timeout = \"200ms\"\n\n\
             [[executors]]\nname = \"CeleryExecutor\"\nbroker_url = \"{}\"\n",
            broker.url(None, 0)
        ),
    )
    .unwrap();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));

    browser.open(&serving.url("/"));
    let card = "return document.getElementById('card-executor').dataset.state";
    let health = "const item = document.querySelector('#card-executor li[data-health]'); \
                  return item ? item.dataset.health : ''";
    browser.wait_for(card, json!("healthy"));
    browser.wait_for(health, json!("healthy"));
    let report = report_of(&serving);
    let name = format!(
        "CeleryExecutor @ {}",
        report["executor"]["instances"][0]["instance"]
            .as_str()
            .unwrap()
    );

    browser.wait_for("return document.title", json!("Overseer: all healthy"));
    browser.wait_for(FAVICON, json!("healthy"));
    let icon = browser.eval("return document.getElementById('favicon').href");
    let icon = icon.as_str().unwrap();
    assert!(
        icon.starts_with("data:image/svg+xml,") && icon.contains("%231a7f37"),
        "{icon}"
    );
    browser.wait_until(
        &format!(
            "return document.getElementById('summary').innerText.startsWith('{name} healthy')"
        ),
        SUMMARY,
    );
    browser.wait_until(
        &format!("return {}.startsWith('healthy for ')", value_of(SINCE)),
        SINCE,
    );
    browser.screenshot("dashboard-broker-healthy.png");

    // The broker dies: the card, the title, the favicon and the line turn red.
    broker.kill();
    browser.wait_for(card, json!("down"));
    browser.wait_for(health, json!("unhealthy"));
    browser.wait_for("return document.title", json!("✖ Overseer: 1 unhealthy"));
    browser.wait_for(FAVICON, json!("unhealthy"));
    browser.wait_until(
        &format!(
            "return document.getElementById('summary').innerText.startsWith('{name} unhealthy')"
        ),
        SUMMARY,
    );
    let reason =
        browser.eval("return document.querySelector('#card-executor li .reason').innerText");
    assert!(!reason.as_str().unwrap().is_empty(), "{reason}");
    // Since when, and what it was before: on the card, and as a clock time at the top.
    let since = r"/^unhealthy for \d+ s \(was healthy\)$/";
    browser.wait_until(&format!("return {since}.test({})", value_of(SINCE)), SINCE);
    let summary = browser.eval(SUMMARY);
    let summary = summary.as_str().unwrap();
    let at = summary
        .strip_prefix(&format!("{name} unhealthy since "))
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        at.len() == 5 && at.as_bytes()[2] == b':',
        "a clock time, HH:MM: {summary}"
    );
    browser.screenshot("dashboard-broker-killed.png");

    // It comes back: green again, and the strip keeps what happened.
    broker.resume().unwrap();
    browser.wait_for(card, json!("healthy"));
    browser.wait_for("return document.title", json!("Overseer: all healthy"));
    browser.wait_for(FAVICON, json!("healthy"));
    let since = r"/^healthy for \d+ s \(was unhealthy\)$/";
    browser.wait_until(&format!("return {since}.test({})", value_of(SINCE)), SINCE);
    // The strip: nothing recorded before the first verdict, then each state
    // the broker went through, from the history route.
    browser.wait_until(
        &format!(
            "return {}.join() === 'none,healthy,unhealthy,healthy'",
            value_of(STRIP_STATES)
        ),
        &format!(
            "return [{}, [...histories.values()].map((h) => [h.status, h.transitions])]",
            value_of(STRIP_STATES)
        ),
    );
    // Hovering a segment tells its state, its time range and why.
    let titles = browser.eval(
        "return [...document.querySelectorAll('#card-executor .history .segment')].map((s) => s.title)",
    );
    let titles: Vec<&str> = titles
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let unhealthy = titles
        .iter()
        .rfind(|t| t.starts_with("unhealthy, "))
        .unwrap_or_else(|| panic!("{titles:?}"));
    assert!(
        unhealthy.contains('–') && unhealthy.ends_with(&format!("): {}", reason.as_str().unwrap())),
        "{unhealthy}"
    );
    let now = titles.last().unwrap();
    assert!(
        now.starts_with("healthy, ") && now.contains("–now ("),
        "{titles:?}"
    );
    let text = browser.eval("return document.body.innerText");
    let text = text.as_str().unwrap();
    assert!(!text.contains("null"), "{text}");
    assert!(!text.contains("undefined"), "{text}");
    browser.screenshot("dashboard-broker-restarted.png");
    drop(serving);
}

#[tokio::test]
async fn an_executor_without_a_verdict_is_grey_and_comes_first_on_a_narrow_screen() {
    let Some(browser) = Driver::start() else {
        return;
    };
    let db = migrated_sqlite().await;
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        "[supervisor]\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\npoll_interval = \"200ms\"\npoll_timeout = \"100ms\"\n\n[[executors]]\nname = \"LocalExecutor\"\n",
    )
    .unwrap();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    browser.open(&serving.url("/"));

    // Unknown is a state of its own: grey, never green, and it says why.
    let state = |card: &str| format!("return document.getElementById('card-{card}').dataset.state");
    browser.wait_for(&state("executor"), json!("unknown"));
    browser.wait_for(
        "return [...document.querySelectorAll('#card-executor .reason')].map((r) => r.innerText)",
        json!(["no health check for LocalExecutor"]),
    );
    let grey = "rgb(110, 119, 129)";
    let colours = browser.eval(
        "const card = document.getElementById('card-executor'); \
         const item = card.querySelector('li[data-health]'); \
         return [getComputedStyle(card).borderTopColor, \
                 getComputedStyle(card.querySelector(':scope > .state')).backgroundColor, \
                 getComputedStyle(item.querySelector('.state')).backgroundColor, \
                 getComputedStyle(item).borderLeftColor, item.dataset.health]",
    );
    assert_eq!(colours, json!([grey, grey, grey, grey, "unknown"]));
    browser.wait_for("return document.title", json!("Overseer: unknown"));
    browser.wait_for(FAVICON, json!("unknown"));
    let summary = browser.eval(SUMMARY);
    assert_eq!(
        summary,
        json!("LocalExecutor unknown (no health check for LocalExecutor)")
    );
    // Components that never ran (here no Airflow at all), grey and in words:
    // not alarms.
    assert_eq!(
        browser.eval(
            "return ['scheduler', 'triggerer', 'dag_processor'].map((c) => { \
               const card = document.getElementById('card-' + c); \
               return [card.dataset.state, card.querySelector('.state').innerText]; })"
        ),
        json!([
            ["unknown", "never ran"],
            ["unknown", "never ran"],
            ["unknown", "never ran"]
        ])
    );
    let text = browser.eval("return document.body.innerText");
    let text = text.as_str().unwrap();
    for word in ["null", "undefined"] {
        assert!(!text.contains(word), "{word}: {text}");
    }
    let jargon = text
        .split(|c: char| !c.is_alphanumeric())
        .any(|word| word == "row" || word == "rows");
    assert!(!jargon, "{text}");
    // The favicon is an image the page's policy lets it draw.
    browser.eval(
        "const img = new Image(); window.iconLoaded = null; \
         img.onload = () => { window.iconLoaded = img.naturalWidth > 0; }; \
         img.onerror = () => { window.iconLoaded = false; }; \
         img.src = document.getElementById('favicon').href; return true",
    );
    browser.wait_for("return window.iconLoaded", json!(true));
    // Self-contained: everything the page loaded came from its own origin.
    let origins = browser.eval(
        "return [...new Set(performance.getEntriesByType('resource').map((r) => new URL(r.name).origin))]",
    );
    assert!(
        origins
            .as_array()
            .unwrap()
            .iter()
            .all(|o| *o == json!(serving.url(""))),
        "{origins}"
    );
    browser.screenshot("dashboard-unknown.png");

    // On a phone the executor's card comes first, above the others.
    browser.resize(400, 900);
    browser.wait_until(
        "return window.innerWidth <= 700",
        "return window.innerWidth",
    );
    let order = browser.eval(
        "return [...document.querySelectorAll('.card')] \
           .sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top) \
           .map((card) => card.id)",
    );
    assert_eq!(
        order,
        json!([
            "card-executor",
            "card-scheduler",
            "card-triggerer",
            "card-dag_processor"
        ])
    );
    // The line at the top stays above the cards.
    assert_eq!(
        browser.eval(
            "return document.getElementById('summary').getBoundingClientRect().bottom \
             <= document.getElementById('card-executor').getBoundingClientRect().top"
        ),
        json!(true)
    );
    browser.screenshot("dashboard-narrow.png");
    drop(serving);
}

#[tokio::test]
async fn the_history_strip_draws_each_state_of_the_last_day_with_its_reason_on_hover() {
    let Some(browser) = Driver::start() else {
        return;
    };
    let db = migrated_sqlite().await;
    let dir = workdir();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    browser.open_live(&serving.url("/"));

    // A day no test could live through: the page is given a report and the
    // history route's answer (newest first, as the route gives it), with the
    // stream closed so that no report of the service's replaces them.
    let now = Utc::now();
    let at = |ago: chrono::Duration| report_time(now - ago);
    let broker = "redis://broker:6379/0";
    let change = |instance: &str, from: Value, to: &str, reason: Value, ago| {
        json!({"executor": "CeleryExecutor", "instance": instance, "hostname": "sched-1",
               "from": from, "to": to, "reason": reason, "at": at(ago)})
    };
    let hours = chrono::Duration::hours;
    let minutes = chrono::Duration::minutes;
    // The recovery says what the outage cost.
    let mut recovered = change(broker, json!("unhealthy"), "healthy", Value::Null, hours(2));
    recovered["cost"] = json!({"failed": 3, "up_for_retry": 1});
    let transitions = json!([
        change(
            broker,
            json!("healthy"),
            "unhealthy",
            json!("no reply within 5s"),
            minutes(10)
        ),
        // Another broker's change, which this strip leaves out.
        change(
            "redis://other:6379/0",
            json!("healthy"),
            "unhealthy",
            json!("elsewhere"),
            minutes(30)
        ),
        recovered,
        change(
            broker,
            json!("healthy"),
            "unhealthy",
            json!("broker redis://broker:6379/0 refused the connection"),
            hours(3)
        ),
        change(broker, Value::Null, "healthy", Value::Null, hours(20)),
    ]);
    let report = |since: &str| {
        json!({
            "metadatabase": {"status": "healthy"},
            "scheduler": {"status": "healthy", "latest_scheduler_heartbeat": at(minutes(0)),
                          "detailed_status": "healthy",
                          "instances": [{"hostname": "sched-1", "latest_scheduler_heartbeat": at(minutes(0))}]},
            "triggerer": {"status": null, "latest_triggerer_heartbeat": null,
                          "detailed_status": "down", "instances": []},
            "dag_processor": {"status": null, "latest_dag_processor_heartbeat": null,
                              "detailed_status": "down", "instances": []},
            "executor": {"status": "unhealthy", "latest_executor_heartbeat": at(minutes(0)),
                         "detailed_status": "down", "instances": [{
                "executor": "CeleryExecutor", "instance": broker, "hostname": "sched-1",
                "latest_executor_heartbeat": at(minutes(0)), "health": "unhealthy",
                "reason": "no reply within 5s", "checked_at": at(minutes(0)),
                "since": since, "previous": "healthy", "detail": null,
            }]},
        })
    };
    let strip = browser.eval_with(
        r#"events.close();
        const real = window.fetch;
        window.historyAsked = [];
        window.fetch = (url, init) => {
            if (!String(url).startsWith('/api/v2/monitor/health/history')) return real(url, init);
            window.historyAsked.push(String(url));
            return Promise.resolve(new Response(JSON.stringify({ transitions: arguments[1] }),
                { status: 200, headers: { 'Content-Type': 'application/json' } }));
        };
        window.notReloaded = true;
        render(arguments[0]);
        return document.querySelector('#card-executor .history').dataset.history;"#,
        json!([report(&at(minutes(10))), transitions]),
    );
    assert_eq!(strip, json!("loading"));
    browser.wait_for(
        "return document.querySelector('#card-executor .history').dataset.history",
        json!("loaded"),
    );
    let seen = browser.eval(
        "const segments = [...document.querySelectorAll('#card-executor .history .segment')]; \
         return { states: segments.map((s) => s.dataset.state), \
                  titles: segments.map((s) => s.title), \
                  lost: segments.map((s) => s.dataset.lost ?? null), \
                  widths: segments.map((s) => Math.round(s.getBoundingClientRect().width)), \
                  asked: window.historyAsked, \
                  since: document.querySelector('#card-executor li .since').innerText, \
                  summary: document.getElementById('summary').innerText }",
    );
    browser.screenshot("dashboard-history.png");
    assert_eq!(
        seen["states"],
        json!(["none", "healthy", "unhealthy", "healthy", "unhealthy"]),
        "{seen}"
    );
    // On hover: the state, its time range (to "now" for the current one), how
    // long, and why.
    let titles: Vec<&str> = seen["titles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let shape = |title: &str, state: &str, length: &str, reason: &str| {
        let rest = title
            .strip_prefix(&format!("{state}, "))
            .unwrap_or_default();
        let (range, tail) = rest.split_once(" (").unwrap_or_default();
        let (from, to) = range.split_once('–').unwrap_or_default();
        !from.is_empty() && !to.is_empty() && tail == format!("{length}){reason}")
    };
    assert!(
        shape(titles[0], "no verdict recorded", "4 h", ""),
        "{}",
        titles[0]
    );
    assert!(shape(titles[1], "healthy", "17 h", ""), "{}", titles[1]);
    assert!(
        shape(
            titles[2],
            "unhealthy",
            "60 min",
            ": broker redis://broker:6379/0 refused the connection; \
             meanwhile 3 task instances failed, 1 went up_for_retry"
        ),
        "{}",
        titles[2]
    );
    // The span that cost task instances is marked; the one still going is not
    // counted yet.
    assert_eq!(seen["lost"], json!([null, null, "4", null, null]), "{seen}");
    assert!(
        shape(titles[3], "healthy", "1 h 50 min", ""),
        "{}",
        titles[3]
    );
    assert!(
        shape(titles[4], "unhealthy", "10 min", ": no reply within 5s")
            && titles[4].contains("–now ("),
        "{}",
        titles[4]
    );
    // Widths follow the time: 17 hours against one.
    let widths: Vec<i64> = seen["widths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_i64().unwrap())
        .collect();
    assert!(widths[1] > 8 * widths[2], "{widths:?}");
    assert!(widths.iter().all(|w| *w >= 3), "{widths:?}");
    // Asked once, for this instance and the last day.
    let asked = seen["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let query = asked[0].as_str().unwrap();
    for part in [
        "executor=CeleryExecutor",
        "instance=redis%3A%2F%2Fbroker%3A6379%2F0",
        "since=",
        "limit=500",
    ] {
        assert!(query.contains(part), "{query}");
    }
    assert_eq!(seen["since"], json!("unhealthy for 10 min (was healthy)"));
    let summary = seen["summary"].as_str().unwrap();
    let clock = summary
        .strip_prefix("CeleryExecutor @ redis://broker:6379/0 unhealthy since ")
        .unwrap_or_else(|| panic!("{summary}"));
    // `HH:MM`, or `YYYY-MM-DD HH:MM` when the state began on another day
    // (run in the ten minutes after midnight, it began yesterday).
    let time = match clock.len() {
        16 => {
            let (day, time) = clock.split_at(11);
            assert!(
                day.as_bytes()[4] == b'-' && day.as_bytes()[7] == b'-' && day.ends_with(' '),
                "{summary}"
            );
            time
        }
        _ => clock,
    };
    assert!(time.len() == 5 && time.as_bytes()[2] == b':', "{summary}");

    // The same report again (as every heartbeat brings): no new request. A
    // state that began anew: the history is asked again.
    let asked = browser.eval_with(
        "render(arguments[0]); render(arguments[0]); return window.historyAsked.length",
        json!([report(&at(minutes(10)))]),
    );
    assert_eq!(asked, json!(1));
    let asked = browser.eval_with(
        "render(arguments[0]); return window.historyAsked.length",
        json!([report(&at(minutes(1)))]),
    );
    assert_eq!(asked, json!(2));

    // Between reports, the time since moves on by itself, without a reload.
    let since = r#"return document.querySelector('#card-executor li .since').innerText"#;
    browser.eval_with(
        "render(arguments[0]); return true",
        json!([report(&at(chrono::Duration::seconds(30)))]),
    );
    let before = browser.eval(since);
    assert!(
        before.as_str().unwrap().starts_with("unhealthy for 3"),
        "{before}"
    );
    // Read until it has moved on past 40 s (on a loaded host the page's timer
    // and these reads come late: how long it takes is not the point).
    overseer_testkit::wait::until("the time since moving on without a reload", || {
        let now = browser.eval(since);
        let text = now.as_str().unwrap_or_default().to_owned();
        let seconds = text
            .strip_prefix("unhealthy for ")
            .and_then(|rest| rest.strip_suffix(" s (was healthy)"))
            .and_then(|n| n.parse::<u64>().ok());
        if seconds.is_some_and(|s| s >= 40) || text.starts_with("unhealthy for 1 min") {
            Ok(text)
        } else {
            Err(text)
        }
    });

    // Without the history (an Overseer without the route, or its database
    // unreadable): the current state from when it began, nothing before it,
    // and a word that says so.
    browser.eval_with(
        r#"window.fetch = () => Promise.resolve(new Response(JSON.stringify({ detail: 'Not Found' }),
            { status: 404, headers: { 'Content-Type': 'application/json' } }));
        render(arguments[0]);
        return true"#,
        json!([report(&at(minutes(5)))]),
    );
    browser.wait_for(
        "return document.querySelector('#card-executor .history').dataset.history",
        json!("unavailable"),
    );
    assert_eq!(browser.eval(STRIP_STATES), json!(["none", "unhealthy"]));
    assert_eq!(
        browser.eval("return document.querySelector('#card-executor .history .note').innerText"),
        json!("earlier states are not available")
    );
    assert_eq!(
        browser.eval("return window.notReloaded === true"),
        json!(true)
    );
    drop(serving);
}

/// A fleet too large for the report: the executor's card shows the report's
/// first few workers, says how many it left out, and "show all" lists every
/// one from `/api/v2/monitor/health/executor/workers`; the whole list stays
/// through the report's next change. The worker is a real Celery 5.5.3 worker
/// heartbeating on a throwaway Redis; only the cut is made here (a report
/// cuts at ten, a fleet this machine cannot run in a test), by showing the
/// service's own report with its workers left out.
#[test]
fn show_all_lists_every_worker_the_report_left_out_and_keeps_them_listed() {
    let Some(browser) = Driver::start() else {
        return;
    };
    let Some(broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let Some(venv) = support::celery_venv() else {
        return;
    };
    let url = broker.url(None, 0);
    let worker = overseer_testkit::celery::Worker::start_heartbeating(&venv, &url, "default");
    let node = worker.node.clone();
    let (serving, _dir) = support::serve_celery(&url, &[], "");
    let report = support::health_until(&serving, "the worker heard by its heartbeats", |j| {
        support::celery(j).is_some_and(|c| {
            c["detail"]["workers"]
                .as_array()
                .is_some_and(|w| w.iter().any(|w| w["name"] == node.as_str()))
        })
    });
    browser.open_live(&serving.url("/"));

    let mut cut = report.clone();
    for instance in cut["executor"]["instances"].as_array_mut().unwrap() {
        if instance["executor"] == "CeleryExecutor" {
            let detail = &mut instance["detail"];
            let count = detail["workers"].as_array().unwrap().len();
            detail["workers"] = json!([]);
            detail["workers_left_out"] = json!(count);
        }
    }
    const WORKERS: &str = "return [...document.querySelectorAll('#card-executor ul.workers li')]\
         .map((w) => w.dataset.worker)";
    const MORE: &str = "const more = document.querySelector('#card-executor .more.workers'); \
         return more ? more.innerText : null";
    let shown = browser.eval_with(
        &format!(
            "events.close(); render(arguments[0]); return [{}, {}]",
            value_of(WORKERS),
            value_of(MORE)
        ),
        json!([cut]),
    );
    assert_eq!(shown[0], json!([]), "{shown}");
    let more = shown[1].as_str().unwrap_or_default();
    assert!(more.starts_with("1 more not shown here"), "{shown}");

    browser.eval("document.querySelector('#card-executor .more.workers button').click()");
    browser.wait_for(WORKERS, json!([node]));
    assert_eq!(
        browser.eval(MORE),
        Value::Null,
        "the note goes with the cut"
    );
    browser.screenshot("dashboard-show-all.png");

    // The report changes (the same cut, newer): the list stays whole.
    browser.eval_with("render(arguments[0])", json!([cut]));
    browser.wait_for(WORKERS, json!([node]));
    assert_eq!(browser.eval(MORE), Value::Null);
}
