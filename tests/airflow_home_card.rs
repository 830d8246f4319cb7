//! The plugin's card on Airflow's home page (issue 23, item 3), in Chromium:
//! a real Airflow 3.3.2 api-server with the plugin pip-installed (its build
//! runs npm for the card's bundle), `overseer serve` on the same Postgres
//! database, and the broker of one executor killed and started again.
//!
//! One test, `the_home_page_card_follows_the_broker`:
//! 1. Airflow runs under an `[api] base_url` prefix (`/airflow/`): the UI's
//!    `<base href>` carries it, and so must the card's reads and its bundle's URL.
//!    `/api/v2/plugins` lists the card (`destination: "dashboard"`) and the app
//!    serving its bundle and the canary's facts, beside the root middleware and
//!    the navigation entry.
//! 2. Overseer (`sched-a`) supervises three Celery executors: `CeleryExecutor`
//!    on a throwaway Redis with a password (the broker the test kills),
//!    `reporting:CeleryExecutor` on a second throwaway Redis (stays healthy) and
//!    `unchecked:CeleryExecutor` on `sqs://` (no check, and the queued-work
//!    rules off with `max_queued_age = "0s"`, which would otherwise judge it on
//!    Airflow's database: `unknown`).
//! 3. Chromium opens Airflow's home page (SimpleAuthManager, every user an
//!    admin: the UI logs in by itself) and waits for the card: the three rows
//!    green, green, grey; the card read Airflow's health endpoint under the
//!    prefix, on the page's own origin, and says when as Airflow's UI writes a
//!    time (`2026-12-02 06:03:53`, local).
//! 4. The broker killed: the card's row turns red, naming the broker (its URL
//!    as Overseer keeps it, without the password) once, and a reason that does
//!    not name it again (in full on hover), and says how
//!    long since it turned (`for N s`); the password is nowhere in the page. The screenshot of the home page is taken then,
//!    into `target/artifacts/`; `just screenshot` (`OVERSEER_UPDATE_SCREENSHOT=1`)
//!    also rewrites `docs/airflow-home-card.png`, which the README shows.
//! 5. The broker started again on the same port: the row turns green again.
//!
//! The canary (issue 36, item 1), from step 3 on: two runs of the plugin's
//! canary DAG written into Airflow's `dag_run` and `task_instance` tables (no
//! scheduler or worker runs here), on queues `default` (both picked up and
//! succeeded, the latest in 2.5 s) and `gpu` (picked up in 250 ms, then a
//! canary waiting in `queued`). The card shows per queue the latest canary's
//! state, its pickup latency and last success, and the wait, read from the
//! plugin's `overseer-card/canary` under the prefix, on the page's origin.
//! Those runs moved 20 minutes back (the latest 25 minutes old, every 5), the
//! card says on each queue that the canary has not run for 25 minutes, in red;
//! moved forward again, it says so no more.
//!
//! Waits are loops with generous deadlines (the card reads every 5 s; Overseer
//! polls every second); nothing about speed is asserted. Needs the Airflow venv,
//! PyPI and the npm registry (the plugin's build), Postgres on loopback,
//! `redis-server`, Chromium and chromedriver; without them it says SKIPPED, and
//! fails under `CI`.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use overseer_testkit::wait;
use serde_json::{Value, json};
use support::airflow::Airflow;
use support::browser::Driver;
use support::{Serving, get, overseer, run, workdir};

/// The `[api] base_url` path Airflow runs under.
const PREFIX: &str = "/airflow";
/// The broker's password: never to be seen in the page.
const PASSWORD: &str = "card-test-secret";
/// How long the card may take to show a change: Overseer's poll and flush, the
/// card's 5 s refresh, Chromium and Airflow on a busy 2-core machine.
const CARD_DEADLINE: Duration = Duration::from_secs(120);
/// Where the screenshot is kept, for the README.
const SCREENSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/airflow-home-card.png");

/// The card's rows, as the test reads them: `executor -> [health, text]`.
const ROWS: &str = "\
const card = document.querySelector('[data-testid=\"overseer-executor-health\"]');
if (!card) return null;
const rows = {};
for (const row of card.querySelectorAll('[data-testid=\"overseer-executor-instance\"]')) {
  rows[row.dataset.executor] = [row.dataset.health, row.innerText];
}
return {status: card.dataset.status, rows, text: card.innerText};";

/// The card's read time: `[true, text]` when it is Airflow's
/// `YYYY-MM-DD HH:mm:ss`, in the browser's local time, within a minute of now.
const READ: &str = r#"
const text = document.querySelector('[data-testid="overseer-executor-health"]')?.innerText ?? '';
const found = /· read (\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})\b/.exec(text);
if (!found) return [false, text];
const [, y, mo, d, h, mi, s] = found.map(Number);
const at = new Date(y, mo - 1, d, h, mi, s).getTime();
return [Math.abs(Date.now() - at) < 60000, found[0]];"#;

/// The card's canary rows: `queue -> [state, text, pickup, the colour of a
/// canary that stopped running, or '']`.
const CANARY: &str = "\
const rows = {};
for (const row of document.querySelectorAll('[data-testid=\"overseer-canary-queue\"]')) {
  const pickup = row.querySelector('[data-testid=\"overseer-canary-pickup\"]');
  const silent = row.querySelector('[data-testid=\"overseer-canary-silent\"]');
  rows[row.dataset.queue] = [row.dataset.state, row.innerText, pickup ? pickup.innerText : '',
    silent ? getComputedStyle(silent).color : ''];
}
return rows;";

/// Two scheduled runs of the canary, as Airflow's scheduler and workers leave
/// them: on `default` both succeeded (picked up in 1.5 s, then 2.5 s); on
/// `gpu` one picked up in 250 ms, then one waiting in `queued` for 40 s. No
/// `dag` row: Overseer judges a canary only once Airflow has stored its DAG,
/// so these rows move none of the test's verdicts (the card shows them all the
/// same); the waiting one names the unchecked executor, whose queued-work
/// rules are off, so that its growing wait does not either.
const CANARY_ROWS: &str = "\
INSERT INTO dag_run (dag_id, run_id, run_type, run_after, logical_date, state, clear_number) VALUES
 ('overseer_canary', 'scheduled__card_1', 'scheduled', now() - interval '10 minutes', now() - interval '10 minutes', 'success', 0),
 ('overseer_canary', 'scheduled__card_2', 'scheduled', now() - interval '5 minutes', now() - interval '5 minutes', 'running', 0);
INSERT INTO task_instance (id, task_id, dag_id, run_id, map_index, try_number, max_tries, pool, pool_slots,
                           queue, executor, state, queued_dttm, start_date, end_date) VALUES
 (gen_random_uuid(), 'canary_default', 'overseer_canary', 'scheduled__card_1', -1, 1, 0, 'default_pool', 1,
  'default', NULL, 'success', now() - interval '10 minutes',
  now() - interval '10 minutes' + interval '1.5 seconds', now() - interval '10 minutes' + interval '2 seconds'),
 (gen_random_uuid(), 'canary_gpu', 'overseer_canary', 'scheduled__card_1', -1, 1, 0, 'default_pool', 1,
  'gpu', NULL, 'success', now() - interval '10 minutes',
  now() - interval '10 minutes' + interval '0.25 seconds', now() - interval '10 minutes' + interval '1 second'),
 (gen_random_uuid(), 'canary_default', 'overseer_canary', 'scheduled__card_2', -1, 1, 0, 'default_pool', 1,
  'default', NULL, 'success', now() - interval '5 minutes',
  now() - interval '5 minutes' + interval '2.5 seconds', now() - interval '5 minutes' + interval '3 seconds'),
 (gen_random_uuid(), 'canary_gpu', 'overseer_canary', 'scheduled__card_2', -1, 0, 0, 'default_pool', 1,
  'gpu', 'unchecked', 'queued', now() - interval '40 seconds', NULL, NULL);";

/// How long the killed broker's executor has held its health, as its row says.
const HELD: &str = "return document.querySelector('[data-testid=\"overseer-executor-instance\"][data-executor=\"CeleryExecutor\"] [data-testid=\"overseer-executor-held\"]')?.innerText ?? '';";

#[tokio::test]
async fn the_home_page_card_follows_the_broker() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let Some((venv, db)) = support::airflow::venv_redis_and_db().await else {
        return;
    };
    let mut airflow = Airflow::new(venv, &db.url);
    let base = airflow.url(&format!("{PREFIX}/"));
    airflow
        .env
        .push(("AIRFLOW__API__BASE_URL".to_owned(), base.clone()));
    // The navigation entry stays beside the card (nothing listens there).
    airflow.env.push((
        "AIRFLOW__OVERSEER__URL".to_owned(),
        "http://127.0.0.1:9/".to_owned(),
    ));
    if !airflow.install_plugin() {
        return;
    }

    // 2. Overseer, its brokers, on Airflow's database.
    let mut broker =
        overseer_testkit::throwaway::ThrowawayRedis::start(&["--requirepass", PASSWORD])
            .expect("redis-server");
    let other = overseer_testkit::throwaway::ThrowawayRedis::start(&[]).expect("redis-server");
    let dir = workdir();
    write_config(
        dir.path(),
        &db.url,
        &[
            ("CeleryExecutor", &broker.url(Some(PASSWORD), 0)),
            ("reporting:CeleryExecutor", &other.url(None, 0)),
            ("unchecked:CeleryExecutor", "sqs://"),
        ],
    );
    let migrated = run(overseer(dir.path()).arg("migrate"));
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    let serving = Serving::start(&mut overseer(dir.path()));

    // 1. The api-server under the prefix, and what it lists of the plugin.
    airflow.start_api_server();
    let plugins = airflow.json_once_up(&format!("{PREFIX}/api/v2/plugins"));
    let plugin = plugins["plugins"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "overseer"))
        .unwrap_or_else(|| panic!("the overseer plugin in {plugins}"))
        .clone();
    let react_apps = plugin["react_apps"].as_array().cloned().unwrap_or_default();
    assert_eq!(react_apps.len(), 1, "{plugin}");
    let card = &react_apps[0];
    assert_eq!(card["destination"], "dashboard", "{plugin}");
    assert_eq!(
        plugin["fastapi_apps"],
        json!([{"name": "overseer_card", "app": "fastapi.applications.FastAPI", "url_prefix": "/overseer-card"}]),
        "{plugin}"
    );
    assert_eq!(
        plugin["fastapi_root_middlewares"][0]["name"], "overseer_executor_health",
        "{plugin}"
    );
    assert_eq!(
        plugin["external_views"][0]["url_route"], "overseer",
        "{plugin}"
    );
    // The bundle, where the UI resolves it: against the page's base.
    let bundle_url = format!("{base}{}", card["bundle_url"].as_str().unwrap());
    let (status, bundle) = get(&bundle_url);
    assert_eq!(status, 200, "GET {bundle_url}");
    assert!(bundle.contains("AirflowPlugin"), "{bundle_url}");

    // Airflow's entry agrees the executors are checked before the browser looks.
    let health_url = format!("{base}api/v2/monitor/health");
    wait_for_entry(&health_url, "healthy before the browser opens", |e| {
        health_of(e, "CeleryExecutor") == Some("healthy")
            && health_of(e, "reporting:CeleryExecutor") == Some("healthy")
            && health_of(e, "unchecked:CeleryExecutor") == Some("unknown")
    });

    // The canary's runs, for the card to show from its first read.
    db.execute_script(CANARY_ROWS).await;
    let canary_url = format!("{base}overseer-card/canary");
    let (status, facts) = get(&canary_url);
    assert_eq!(status, 200, "GET {canary_url}: {facts}");
    eprintln!("airflow home card: the canary's facts: {facts}");

    // 3. The home page, and the card on it.
    // Room for the card and Airflow's own sections down to Health, for the screenshot.
    driver.resize(1280, 720);
    driver.open(&base);
    let shown = card_until(&driver, "the card: green, green, grey", |c| {
        row_health(c, "CeleryExecutor") == Some("healthy")
            && row_health(c, "reporting:CeleryExecutor") == Some("healthy")
            && row_health(c, "unchecked:CeleryExecutor") == Some("unknown")
    });
    assert_eq!(shown["status"], "healthy", "{shown}");
    let colours = driver.eval(
        "return [...document.querySelectorAll('[data-testid=\"overseer-executor-instance\"]')]
           .map(r => [r.dataset.executor, getComputedStyle(r.firstElementChild).backgroundColor]);",
    );
    let colour_of = |executor: &str| {
        colours
            .as_array()
            .and_then(|c| c.iter().find(|c| c[0] == executor))
            .map(|c| c[1].clone())
            .unwrap_or_else(|| panic!("{executor} in {colours}"))
    };
    assert_eq!(colour_of("CeleryExecutor"), "rgb(22, 163, 74)", "green");
    assert_eq!(
        colour_of("unchecked:CeleryExecutor"),
        "rgb(156, 163, 175)",
        "grey"
    );
    // When it read, as Airflow's UI writes a time (`2026-12-02 06:03:53`, its
    // `YYYY-MM-DD HH:mm:ss`, local time), not the browser's `6:03:53 AM`.
    let read = driver.eval(READ);
    assert_eq!(read[0], json!(true), "the card's read time: {read}");
    // The canary per queue: the latest state, the pickup latency of the
    // latest canary a worker started, the last success, a canary waiting.
    let canary = canary_until(&driver, "the card: the canary on default and gpu", |c| {
        c["default"][0] == "success" && c["gpu"][0] == "queued"
    });
    let (default, gpu) = (&canary["default"], &canary["gpu"]);
    assert_eq!(default[2], "picked up in 2.5 s", "{canary}");
    assert!(text(default).contains("last success "), "{canary}");
    assert_eq!(gpu[2], "picked up in 250 ms", "{canary}");
    assert!(text(gpu).contains("waiting in queued for "), "{canary}");
    assert!(text(gpu).contains("last success "), "{canary}");
    assert_eq!(default[3], "", "a canary that runs is no fault: {canary}");
    // The canary stops running (its runs moved 20 minutes back: the latest
    // 25 minutes old, every 5): its age, on every queue, in red.
    db.execute_script(
        "UPDATE dag_run SET logical_date = logical_date - interval '20 minutes' \
         WHERE dag_id = 'overseer_canary'",
    )
    .await;
    let silent = canary_until(&driver, "the card: the canary's silence", |c| {
        c["default"][3] != "" && c["gpu"][3] != ""
    });
    for queue in ["default", "gpu"] {
        let row = &silent[queue];
        assert!(
            text(row).contains("not run for 25 min (every 5 min)")
                || text(row).contains("not run for 26 min (every 5 min)"),
            "{silent}"
        );
        assert_eq!(
            row[3], "rgb(220, 38, 38)",
            "in the fault's colour: {silent}"
        );
    }
    db.execute_script(
        "UPDATE dag_run SET logical_date = logical_date + interval '20 minutes' \
         WHERE dag_id = 'overseer_canary'",
    )
    .await;
    canary_until(&driver, "the card: the canary running again", |c| {
        c["default"][3] == "" && c["gpu"][3] == ""
    });
    // Same origin, under the prefix: the bundle and the reads of the endpoint
    // and of the canary's facts.
    let fetched = driver
        .eval("return performance.getEntriesByType('resource').map(e => e.name.split('?')[0]);");
    for url in [
        health_url.as_str(),
        canary_url.as_str(),
        bundle_url.split('?').next().unwrap(),
    ] {
        assert!(
            fetched
                .as_array()
                .is_some_and(|f| f.iter().any(|u| u == url)),
            "the page fetched {url}: {fetched}"
        );
    }

    // 4. The broker killed.
    broker.kill();
    let killed = Instant::now();
    let shown = card_until(&driver, "the card: the broker's row red", |c| {
        row_health(c, "CeleryExecutor") == Some("unhealthy")
    });
    eprintln!(
        "airflow home card: red {:.1?} after the broker's death (Overseer polls every 1 s, the card reads every 5 s)",
        killed.elapsed()
    );
    assert_eq!(shown["status"], "unhealthy", "{shown}");
    assert_eq!(
        row_health(&shown, "reporting:CeleryExecutor"),
        Some("healthy")
    );
    let row = shown["rows"]["CeleryExecutor"][1]
        .as_str()
        .unwrap_or_default();
    // Overseer keeps the broker's URL without its password (`executor_instance`).
    let named = format!("redis://127.0.0.1:{}/0", broker.port);
    assert!(row.contains(&named), "the broker named as {named}: {row}");
    let reason = driver.eval(
        "const reason = document.querySelector('[data-testid=\"overseer-executor-instance\"][data-executor=\"CeleryExecutor\"] [data-testid=\"overseer-executor-instance-reason\"]'); \
         return reason ? [reason.innerText, reason.title] : ['', ''];",
    );
    let (shown, in_full) = (
        reason[0].as_str().unwrap_or_default(),
        reason[1].as_str().unwrap_or_default(),
    );
    assert!(!shown.trim().is_empty(), "a reason: {row}");
    // The broker is named once, on the line above: the reason below does not
    // repeat it (`the broker refused the connection`), and says it in full on hover.
    assert_eq!(row.matches(&named).count(), 1, "{named} once in: {row}");
    assert!(!shown.contains(&named), "{shown}");
    assert!(
        in_full.is_empty() || in_full.contains(&named),
        "the reason in full on hover: {reason}"
    );
    eprintln!("airflow home card: the reason {in_full:?} is shown as {shown:?}");
    // How long it has held: the card saw it turn.
    let age = driver.eval(HELD);
    assert!(
        age.as_str().unwrap_or_default().contains("· for "),
        "held since the turn the card saw: {age}"
    );
    let page = driver.eval("return document.documentElement.outerHTML;");
    assert!(
        !page.as_str().unwrap_or_default().contains(PASSWORD),
        "the broker's password is in the page"
    );
    // A read later, the age has grown from `for 0 s`: then the screenshot.
    let until = Instant::now() + CARD_DEADLINE;
    while driver
        .eval(HELD)
        .as_str()
        .is_some_and(|t| t.ends_with("for 0 s"))
    {
        assert!(Instant::now() < until, "the card's age never grew");
        std::thread::sleep(Duration::from_millis(250));
    }
    driver.eval("window.scrollTo(0, 0);");
    // The README's copy is rewritten only on request (`just screenshot`): a
    // test run leaves the clone as it found it.
    if std::env::var_os("OVERSEER_UPDATE_SCREENSHOT").is_some() {
        std::fs::write(SCREENSHOT, driver.png()).expect("docs/airflow-home-card.png written");
    }
    driver.screenshot("airflow-home-card.png");

    // 5. The broker back, on the same port.
    broker.resume().expect("the broker starts again");
    let shown = card_until(&driver, "the card: green again", |c| {
        row_health(c, "CeleryExecutor") == Some("healthy")
    });
    assert_eq!(shown["status"], "healthy", "{shown}");

    let strays = airflow.stop();
    assert!(strays.is_empty(), "processes left behind: {strays:?}");
    drop((serving, broker, other, airflow, db));
}

/// An `overseer.toml` in `dir`: host `sched-a`, quick polls, `executors` as
/// `(name, broker_url)`; the one on `sqs://` stays unjudged (`max_queued_age`
/// of 0 s turns off the queued-work rules, Overseer's only evidence on it).
fn write_config(dir: &Path, db_url: &str, executors: &[(&str, &str)]) {
    let mut toml = format!(
        "[database]\nurl = \"{db_url}\"\n\n[api]\nbind = \"127.0.0.1:0\"\n\n\
         [supervisor]\nhostname = \"sched-a\"\npoll_interval = \"1s\"\npoll_timeout = \"500ms\"\n\
         heartbeat_interval = \"500ms\"\nrefresh_interval = \"250ms\"\n"
    );
    for (name, broker_url) in executors {
        toml.push_str(&format!(
            "\n[[executors]]\nname = \"{name}\"\nbroker_url = \"{broker_url}\"\n"
        ));
        if broker_url.starts_with("sqs://") {
            toml.push_str("max_queued_age = \"0s\"\n");
        }
    }
    std::fs::write(dir.join("overseer.toml"), toml).unwrap();
}

/// The `health` of `executor`'s instance in Airflow's entry.
fn health_of<'e>(entry: &'e Value, executor: &str) -> Option<&'e str> {
    entry["instances"]
        .as_array()?
        .iter()
        .find(|i| i["executor"] == executor)?["health"]
        .as_str()
}

/// Reads Airflow's entry at `url` until `done` holds.
fn wait_for_entry(url: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    wait::until_within(what, wait::PATIENCE_PYTHON, || {
        let (status, body) = get(url);
        assert_eq!(status, 200, "GET {url}: {body}");
        let json: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        if done(&json["executor"]) {
            Ok(json["executor"].clone())
        } else {
            Err(body)
        }
    })
}

/// The `health` of `executor`'s row in what [`ROWS`] read.
fn row_health<'c>(card: &'c Value, executor: &str) -> Option<&'c str> {
    card["rows"][executor][0].as_str()
}

/// A canary row's text, as [`CANARY`] read it.
fn text(row: &Value) -> &str {
    row[1].as_str().unwrap_or_default()
}

/// Reads the card's canary rows (see [`CANARY`]) until `done` holds.
fn canary_until(driver: &Driver, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + CARD_DEADLINE;
    loop {
        let rows = driver.eval(CANARY);
        if done(&rows) {
            return rows;
        }
        if Instant::now() > until {
            let page = driver.eval("return [location.href, document.body.innerText];");
            panic!("{what}: not within {CARD_DEADLINE:?}; the rows: {rows}; the page: {page}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Reads the card (see [`ROWS`]) until `done` holds; returns what was read.
fn card_until(driver: &Driver, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + CARD_DEADLINE;
    loop {
        let card = driver.eval(ROWS);
        if !card.is_null() && done(&card) {
            return card;
        }
        if Instant::now() > until {
            let page = driver.eval("return [location.href, document.body.innerText];");
            panic!("{what}: not within {CARD_DEADLINE:?}; the card: {card}; the page: {page}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
