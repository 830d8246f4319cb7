//! The dashboard in a real browser: Debian's headless Chromium driven over
//! WebDriver (chromedriver). It shows the four cards with their states, and a
//! verdict change appears without a reload. The screenshot is kept in
//! `target/artifacts/dashboard.png`.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Value, json};
use support::{Heartbeat, Serving, overseer, workdir};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long the page may take to show a change (the report refreshes every 100 ms).
const PATIENCE: Duration = Duration::from_secs(30);

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
        self.post("execute/sync", json!({ "script": script, "args": [] }))
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
    let db = overseer_testkit::sqlite().await;
    {
        use overseer_migration::{Migrator, MigratorTrait};
        Migrator::up(&db.conn, None).await.unwrap();
    }
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
    browser.wait_for(
        "return [...document.querySelectorAll('#card-executor .reason')].map(r => r.textContent).join()",
        json!("broker redis://broker:6379/0 refused the connection"),
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
