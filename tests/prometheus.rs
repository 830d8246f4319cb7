//! The shipped alerting rules (`deploy/prometheus/overseer-alerts.yml`) in a
//! real Prometheus (Debian's `prometheus` package, which `.ci/run` installs):
//! it scrapes a real `overseer serve` supervising a CeleryExecutor on a
//! throwaway Redis; the broker is killed, and Prometheus' own
//! `/api/v1/alerts` shows `OverseerExecutorUnhealthy` firing with the
//! executor's labels; the broker comes back on the same port, and the alert
//! resolves.
//!
//! The rules are the shipped file with one test-only change: every `for:` is
//! rewritten to [`FOR_IN_TEST`] in a copy (the file keeps each `for:` on a
//! line of its own for this, and for anyone who overrides the production
//! durations the same way). Prometheus scrapes and evaluates every second.
//!
//! Everything listens on loopback: the broker and Prometheus on free ports of
//! their own, `serve` on `127.0.0.1:0`. Prometheus has a temporary folder for
//! its configuration, the rules' copy, its database and its log, and is
//! stopped by its pid when the guard is dropped, whatever the outcome. The
//! machine's shared services are not touched.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use overseer_testkit::throwaway::{ThrowawayRedis, free_port};
use overseer_testkit::wait;
use serde_json::Value;
use support::{Serving, overseer, workdir};

/// Quick intervals: a poll every 500 ms, writes every 200 ms, reads every 100 ms.
const QUICK: &str = "[supervisor]\nhostname = \"sched-1\"\npoll_interval = \"500ms\"\npoll_timeout = \"400ms\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n";

/// What every `for:` of the shipped rules becomes in the test's copy: a couple
/// of evaluations (one a second), instead of production's minutes.
const FOR_IN_TEST: Duration = Duration::from_secs(2);

/// The alert this test watches.
const UNHEALTHY: &str = "OverseerExecutorUnhealthy";

/// How long Prometheus may take to answer `/-/ready` (a cold start, a loaded machine).
const READY_DEADLINE: Duration = Duration::from_secs(60);

/// How long an alert may take to fire or resolve: the verdict (a poll), a
/// scrape, the evaluations that `for:` asks for, and a loaded machine. A
/// deadline to wait within, not a measurement.
const ALERT_DEADLINE: Duration = Duration::from_secs(90);

/// How long one request to Prometheus may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How often Prometheus' API is asked again while waiting.
const POLL_EVERY: Duration = Duration::from_millis(200);

/// The shipped rules.
fn shipped_rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/overseer-alerts.yml")
}

/// The shipped rules with every `for:` line rewritten to [`FOR_IN_TEST`]; the
/// count of lines rewritten beside it.
fn rules_for_test(rules: &str) -> (String, usize) {
    let mut rewritten = 0;
    let lines: Vec<String> = rules
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("for:") {
                rewritten += 1;
                let indent = &line[..line.len() - trimmed.len()];
                format!("{indent}for: {}s", FOR_IN_TEST.as_secs())
            } else {
                line.to_owned()
            }
        })
        .collect();
    (lines.join("\n") + "\n", rewritten)
}

/// Is Debian's `prometheus` on `PATH`?
fn prometheus_installed() -> bool {
    match Command::new("prometheus")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(_) => true,
        Err(e) => overseer_testkit::unavailable::<()>(
            "prometheus (Debian's prometheus package)",
            format!("not installed (apt-get install prometheus): {e}"),
        )
        .is_some(),
    }
}

/// A Prometheus server of the test's own, stopped by its pid when dropped.
struct Prometheus {
    child: Child,
    /// The loopback port its web API listens on.
    port: u16,
    /// Its configuration, rules, database and log.
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts one that scrapes `target` (`host:port`) as job `overseer` every
    /// second and evaluates `rules` every second, and waits until it is ready.
    fn start(target: &str, rules: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let rules_path = dir.path().join("overseer-alerts.yml");
        std::fs::write(&rules_path, rules).unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: overseer\n    static_configs:\n      - targets: [\"{target}\"]\n",
            rules = rules_path.display(),
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        let mut prometheus = Self { child, port, dir };
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                panic!("prometheus exited ({status}): {}", prometheus.log());
            }
            if matches!(prometheus.get("/-/ready", &[]), Some((200, _))) {
                return prometheus;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus is not ready: {}",
                prometheus.log()
            );
            std::thread::sleep(POLL_EVERY);
        }
    }

    /// A GET of its API: the status and body, or `None` when it does not answer.
    fn get(&self, path: &str, query: &[(&str, &str)]) -> Option<(u16, String)> {
        let mut request =
            ureq::get(&format!("http://127.0.0.1:{}{path}", self.port)).timeout(REQUEST_TIMEOUT);
        for (name, value) in query {
            request = request.query(name, value);
        }
        match request.call() {
            Ok(response) => Some((response.status(), response.into_string().ok()?)),
            Err(ureq::Error::Status(status, response)) => {
                Some((status, response.into_string().unwrap_or_default()))
            }
            Err(_) => None,
        }
    }

    /// The `data` of a successful API answer.
    fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let (status, body) = self
            .get(path, query)
            .unwrap_or_else(|| panic!("prometheus does not answer {path}: {}", self.log()));
        assert_eq!(status, 200, "{path}: {body}");
        let json: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["status"], "success", "{path}: {body}");
        json["data"].clone()
    }

    /// The alerts it holds now (pending and firing) named `name`.
    fn alerts(&self, name: &str) -> Vec<Value> {
        self.api("/api/v1/alerts", &[])["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a["labels"]["alertname"] == name)
            .collect()
    }

    /// Asks until `done` holds of `/api/v1/alerts`' alerts named `name`, and
    /// returns them.
    fn alerts_until(&self, name: &str, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + ALERT_DEADLINE;
        loop {
            let alerts = self.alerts(name);
            if done(&alerts) {
                return alerts;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: last {alerts:?}\nprometheus log: {}",
                self.log()
            );
            std::thread::sleep(POLL_EVERY);
        }
    }

    /// Asks until the latest scraped verdict on the CeleryExecutor of
    /// `instance` (its `executor_instance`) is 1 (healthy), and returns that
    /// series' labels.
    fn wait_healthy(&self, instance: &str, what: &str) -> Value {
        wait::until_within(what, ALERT_DEADLINE, || {
            let data = self.api(
                "/api/v1/query",
                &[(
                    "query",
                    "overseer_executor_health{executor=\"CeleryExecutor\"}",
                )],
            );
            let healthy = data["result"].as_array().and_then(|r| {
                r.iter()
                    .find(|s| s["metric"]["executor_instance"] == instance && s["value"][1] == "1")
            });
            match healthy {
                Some(series) => Ok(series["metric"].clone()),
                None => Err(format!("{data}\nprometheus log: {}", self.log())),
            }
        })
    }

    /// Its log, for a failure's message.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // SIGKILL to its pid: a throwaway server, with a throwaway database.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_unhealthy_executor_alert_fires_in_a_real_prometheus_and_resolves() {
    let shipped = std::fs::read_to_string(shipped_rules()).expect("the shipped rules");
    let (rules, rewritten) = rules_for_test(&shipped);
    let alerts_shipped = shipped
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();
    assert_eq!(
        rewritten, alerts_shipped,
        "every alert's `for:` is on a line of its own, rewritten for the test"
    );
    if !prometheus_installed() {
        return;
    }
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let instance = broker.url(None, 0);
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!("{QUICK}\n[[executors]]\nname = \"CeleryExecutor\"\nbroker_url = \"{instance}\"\n"),
    )
    .unwrap();
    // The database is the default, ./overseer.db in the test's folder.
    let serving = Serving::start(&mut overseer(dir.path()));
    let prometheus = Prometheus::start(&serving.address, &rules);

    // Every shipped alert is loaded, with the test's `for:`.
    let loaded: Vec<(String, Value)> = prometheus.api("/api/v1/rules", &[])["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["duration"].clone(),
            )
        })
        .collect();
    assert_eq!(loaded.len(), alerts_shipped, "{loaded:?}");
    assert!(
        loaded.iter().any(|(name, _)| name == UNHEALTHY),
        "{loaded:?}"
    );
    assert!(
        loaded
            .iter()
            .all(|(_, d)| d.as_f64() == Some(FOR_IN_TEST.as_secs_f64())),
        "{loaded:?}"
    );

    // Scraped while healthy: the verdict is 1 and the alert is not there. The
    // executor's instance is `executor_instance`; `instance` is left to the
    // target's address, and no `exported_instance` is made.
    let series = prometheus.wait_healthy(&instance, "never scraped healthy");
    assert_eq!(series["instance"], serving.address.as_str(), "{series}");
    assert!(series.get("exported_instance").is_none(), "{series}");
    assert!(prometheus.alerts(UNHEALTHY).is_empty());

    // The broker dies: the alert fires, with the executor's labels.
    broker.kill();
    let alerts = prometheus.alerts_until(UNHEALTHY, "the alert never fired", |alerts| {
        alerts.iter().any(|a| a["state"] == "firing")
    });
    assert_eq!(alerts.len(), 1, "one alert for one executor: {alerts:?}");
    let alert = &alerts[0];
    let labels = &alert["labels"];
    assert_eq!(labels["executor"], "CeleryExecutor", "{alert}");
    assert_eq!(labels["executor_instance"], instance.as_str(), "{alert}");
    // Aggregated over the scraped Overseers: no target's address on the alert.
    assert!(labels.get("instance").is_none(), "{alert}");
    assert_eq!(labels["hostname"], "sched-1", "{alert}");
    assert_eq!(labels["job"], "overseer", "{alert}");
    assert_eq!(labels["severity"], "critical", "{alert}");
    assert_eq!(
        alert["annotations"]["summary"],
        format!("Executor CeleryExecutor ({instance}) on sched-1 is unhealthy").as_str(),
        "{alert}"
    );

    // The broker is back on the same port: the alert resolves (gone from the
    // active alerts, or inactive).
    broker.resume().expect("the broker starts again");
    prometheus.alerts_until(UNHEALTHY, "the alert never resolved", |alerts| {
        alerts.iter().all(|a| a["state"] == "inactive")
    });
    prometheus.wait_healthy(
        &instance,
        "resolved, but the verdict is not scraped healthy",
    );

    drop(prometheus);
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

#[test]
fn every_for_line_is_rewritten_and_nothing_else() {
    let shipped = std::fs::read_to_string(shipped_rules()).expect("the shipped rules");
    let (rules, _) = rules_for_test(&shipped);
    let changed: Vec<(&str, &str)> = shipped
        .lines()
        .zip(rules.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert!(!changed.is_empty());
    for (before, after) in changed {
        assert!(before.trim_start().starts_with("for: "), "{before}");
        assert_eq!(
            after.trim_start(),
            format!("for: {}s", FOR_IN_TEST.as_secs()),
            "{after}"
        );
    }
}
