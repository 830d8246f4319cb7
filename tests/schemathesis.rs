//! Schemathesis (from PyPI) against the running service and its own OpenAPI
//! document: generated requests, every check, no server error, every response
//! valid. The event stream is left out (it never ends by design). A Celery
//! executor on the shared Redis gives its instance a `detail`, so the responses
//! checked carry the evidence's schema with values, not only `null`.

use crate::support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::Value;
use support::{Serving, get, overseer, workdir};

/// Pinned, so a new release cannot change what CI checks overnight.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";

/// The shared Redis on this machine.
const REDIS: &str = "127.0.0.1:6379";

/// The Redis database the Celery executor here uses: no other test's.
const REDIS_DB: u32 = 12;

/// How long the Celery executor's first detail may take to show.
const PATIENCE: Duration = Duration::from_secs(30);

/// A venv with Schemathesis, made once per machine outside the clone.
fn schemathesis() -> Option<PathBuf> {
    match overseer_testkit::venv::ensure("schemathesis-4.32.5-venv", &[SCHEMATHESIS]) {
        Ok(venv) => Some(venv.join("bin/st")),
        Err(e) => overseer_testkit::unavailable("a Python venv with Schemathesis", e),
    }
}

#[tokio::test]
async fn schemathesis_finds_no_server_error_and_no_invalid_response() {
    let Some(st) = schemathesis() else {
        return;
    };
    let db = overseer_testkit::sqlite().await;
    {
        use overseer_migration::{Migrator, MigratorTrait};
        Migrator::up(&db.conn, None).await.unwrap();
    }
    // A scheduler that stays alive for the whole run, so ?strict=true is 200:
    // a 503 there would be by design, and Schemathesis counts every 5xx.
    let now = Utc::now().format("%Y-%m-%d %H:%M:%S%.6f");
    db.execute_script(&format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, unixname) \
         VALUES ('running', 'SchedulerJob', '{now}', '{now}', 'sched-1', 'airflow')"
    ))
    .await;
    let dir = workdir();
    // Without Redis (outside CI) the run goes on without a detail to check.
    let redis = match std::net::TcpStream::connect(REDIS) {
        Ok(_) => true,
        Err(e) => {
            assert!(
                !overseer_testkit::in_ci(),
                "Redis on {REDIS} is required when CI is set, and is unreachable: {e}"
            );
            eprintln!("Redis on {REDIS} is unreachable ({e}): no executor instance has a detail");
            false
        }
    };
    let mut config = String::from("[[executors]]\nname = \"LocalExecutor\"\n");
    if redis {
        // An empty queue of its own: a healthy verdict, so ?strict=true stays 200.
        config += &format!(
            "\n[[executors]]\nname = \"CeleryExecutor\"\nbroker_url = \"redis://{REDIS}/{REDIS_DB}\"\nqueues = [\"{}\"]\n",
            overseer_testkit::unique_name("schemathesis")
        );
    }
    std::fs::write(dir.path().join("overseer.toml"), config).unwrap();
    let serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env(
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD",
                "3600",
            ),
    );

    if redis {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let (_, body) = get(&serving.url("/api/v2/monitor/health"));
            let health: Value = serde_json::from_str(&body).unwrap();
            let detailed = health["executor"]["instances"]
                .as_array()
                .is_some_and(|i| i.iter().any(|i| i["detail"]["queues"][0]["depth"] == 0));
            if detailed {
                break;
            }
            assert!(Instant::now() < deadline, "no detail shows: {health}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    let report = workdir();
    let out = Command::new(st)
        // Schemathesis keeps a cache folder in its working folder: not in the clone.
        .current_dir(report.path())
        .arg("run")
        .arg(serving.url("/openapi.json"))
        .args(["--checks", "all"])
        .args(["--exclude-path", "/api/v2/monitor/health/stream"])
        .args([
            "--request-timeout",
            "5",
            "--max-examples",
            "100",
            "--generation-deterministic",
        ])
        .arg("--report-dir")
        .arg(report.path())
        .output()
        .expect("schemathesis runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Tested: 6"),
        "every operation but the stream was tested:\n{stdout}"
    );
    drop(serving);
}
