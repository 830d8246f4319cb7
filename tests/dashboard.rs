//! The dashboard in a real browser: Debian's headless Chromium driven over
//! WebDriver (chromedriver). It shows the four cards with their states, and a
//! verdict change appears without a reload; the executor's card shows the
//! evidence of its check (a Celery executor's queues on the real Redis, and
//! every part of a detail, words for what is not known included). The
//! screenshots are kept in `target/artifacts/`.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Value, json};
use support::{Heartbeat, Serving, overseer, workdir};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long the page may take to show a change (the report refreshes every 100 ms).
const PATIENCE: Duration = Duration::from_secs(30);

/// The shared Redis on this machine.
const REDIS: &str = "127.0.0.1:6379";

/// The Redis database the dashboard's Celery executor uses: no other test's.
const REDIS_DB: u32 = 11;

/// A chromedriver of the test's own, on a free loopback port, killed on drop.
struct Driver {
    child: Child,
    base: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Driver {
    fn start() -> Option<Self> {
        if !std::path::Path::new(CHROMIUM).exists() || !std::path::Path::new(CHROMEDRIVER).exists()
        {
            return overseer_testkit::unavailable(
                "Chromium and chromedriver",
                "apt-get install chromium chromium-driver",
            );
        }
        let port = overseer_testkit::throwaway::free_port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + PATIENCE;
        while ureq::get(&format!("{base}/status")).call().is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not answer");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--window-size=1280,900".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let created: Value = ureq::post(&format!("{base}/session"))
            .send_json(capabilities)
            .expect("a browser session")
            .into_json()
            .unwrap();
        let session = created["value"]["sessionId"].as_str().unwrap().to_owned();
        Some(Self {
            child,
            base,
            session,
            _profile: profile,
        })
    }

    fn post(&self, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}/{path}", self.base, self.session);
        let answer: Value = ureq::post(&url)
            .send_json(body)
            .unwrap()
            .into_json()
            .unwrap();
        answer["value"].clone()
    }

    fn open(&self, url: &str) {
        self.post("url", json!({ "url": url }));
    }

    fn eval(&self, script: &str) -> Value {
        self.eval_with(script, json!([]))
    }

    /// Evaluates `script` with `args` as its `arguments`.
    fn eval_with(&self, script: &str, args: Value) -> Value {
        self.post("execute/sync", json!({ "script": script, "args": args }))
    }

    /// Evaluates `script` until it returns `expected`.
    fn wait_for(&self, script: &str, expected: Value) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let value = self.eval(script);
            if value == expected {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{script} is {value}, expected {expected}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn screenshot(&self, name: &str) {
        let url = format!("{}/session/{}/screenshot", self.base, self.session);
        let answer: Value = ureq::get(&url).call().unwrap().into_json().unwrap();
        let png = decode_base64(answer["value"].as_str().unwrap());
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/artifacts");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), png).unwrap();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = ureq::delete(&format!("{}/session/{}", self.base, self.session)).call();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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

/// Standard base64, as WebDriver sends screenshots.
fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = text
        .bytes()
        .filter(|c| *c != b'=' && !c.is_ascii_whitespace())
        .collect();
    clean
        .chunks(4)
        .flat_map(|chunk| {
            let n = chunk
                .iter()
                .fold(0u32, |n, c| (n << 6) | u32::from(value(*c)))
                << (6 * (4 - chunk.len()));
            let bytes = n.to_be_bytes();
            bytes[1..chunk.len()].to_vec()
        })
        .collect()
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
    // The other host's Overseer keeps its row alive, as it would.
    let _other = Heartbeat::start(
        &db.url,
        db.backend,
        "hostname = 'sched-2' AND job_type = 'ExecutorJob'",
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
    browser.wait_for(
        "return document.getElementById('connection').dataset.state",
        json!("live"),
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
    browser.open(&serving.url("/"));
    browser.wait_for(
        "return document.getElementById('connection').dataset.state",
        json!("live"),
    );

    // A report no check on this machine could give: workers that answered and
    // task instances queued for minutes. The page renders it as it renders the
    // service's, with the stream closed so that no report of the service's
    // replaces it, and is read in the same script.
    let at = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let at = at.replace('Z', "+00:00");
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
                    {"name": "celery@w1", "queues": ["default", "reports"]},
                    {"name": "celery@w2", "queues": null},
                ],
                "queued_tasks": {"count": 5, "oldest_seconds": 840, "queues": [
                    {"queue": "adhoc", "count": 1, "oldest_seconds": 75, "overdue": 0},
                    {"queue": "default", "count": 4, "oldest_seconds": 840, "overdue": 1},
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
            queued: items.map((i) => [...i.querySelectorAll('div.queued')].map((q) => q.innerText)),
            queued_queues: items.map((i) => cells(i, 'table.queued-queues tbody tr')),
            evidence: items.map((i) => i.querySelectorAll('.evidence').length),
        };"#,
        json!([report]),
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
            ["celery@w1: default, reports", "celery@w2: queues not known"],
            ["not known (workers are not pinged)"],
            [],
        ])
    );
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
    // Another host's row, or a check that gives no evidence: nothing shown.
    assert_eq!(seen["evidence"], json!([1, 1, 0]));
    drop(serving);
}
