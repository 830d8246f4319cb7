//! Debian's headless Chromium driven over WebDriver (chromedriver), for the
//! dashboard's browser tests: a driver of the test's own on a free loopback
//! port, a session with a fresh profile, scripts evaluated in the page, and
//! screenshots kept in `target/artifacts/`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long the page may take to show a change (the report refreshes every 100 ms).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A chromedriver of the test's own, on a free loopback port, killed on drop.
pub struct Driver {
    child: Child,
    base: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Driver {
    pub fn start() -> Option<Self> {
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

    pub fn post(&self, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}/{path}", self.base, self.session);
        let answer: Value = ureq::post(&url)
            .send_json(body)
            .unwrap()
            .into_json()
            .unwrap();
        answer["value"].clone()
    }

    pub fn open(&self, url: &str) {
        self.post("url", json!({ "url": url }));
    }

    pub fn eval(&self, script: &str) -> Value {
        self.eval_with(script, json!([]))
    }

    /// Evaluates `script` with `args` as its `arguments`.
    pub fn eval_with(&self, script: &str, args: Value) -> Value {
        self.post("execute/sync", json!({ "script": script, "args": args }))
    }

    /// Evaluates `script` until it returns `expected`.
    pub fn wait_for(&self, script: &str, expected: Value) {
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

    /// Opens `url`, a dashboard, and waits until its report stream is live.
    pub fn open_live(&self, url: &str) {
        self.open(url);
        self.wait_live();
    }

    /// Waits until the open dashboard's report stream is live.
    pub fn wait_live(&self) {
        self.wait_for(
            "return document.getElementById('connection').dataset.state",
            json!("live"),
        );
    }

    /// Evaluates `script` until it returns true; if it never does, the failure
    /// shows what `show` returns.
    pub fn wait_until(&self, script: &str, show: &str) {
        let deadline = Instant::now() + PATIENCE;
        while self.eval(script) != json!(true) {
            assert!(
                Instant::now() < deadline,
                "{script} never held: {}",
                self.eval(show)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Makes the window `width` by `height` CSS pixels.
    pub fn resize(&self, width: u32, height: u32) {
        self.post(
            "window/rect",
            json!({ "width": width, "height": height, "x": 0, "y": 0 }),
        );
    }

    /// A screenshot of the window, as PNG bytes.
    pub fn png(&self) -> Vec<u8> {
        let url = format!("{}/session/{}/screenshot", self.base, self.session);
        let answer: Value = ureq::get(&url).call().unwrap().into_json().unwrap();
        decode_base64(answer["value"].as_str().unwrap())
    }

    pub fn screenshot(&self, name: &str) {
        let png = self.png();
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

/// A moment as the report's JSON writes it (Python's `isoformat()` of an aware
/// UTC time, `2026-11-29T19:48:48.365305+00:00`), for reports a test renders.
pub fn report_time(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        .replace('Z', "+00:00")
}
