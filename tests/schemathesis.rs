//! Schemathesis (from PyPI) against the running service and its own OpenAPI
//! document: generated requests, every check, no server error, every response
//! valid. The event stream is left out (it never ends by design).

mod support;

use std::path::PathBuf;
use std::process::Command;

use chrono::Utc;
use support::{Serving, overseer, workdir};

/// Pinned, so a new release cannot change what CI checks overnight.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";

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
    std::fs::write(
        dir.path().join("overseer.toml"),
        "[[executors]]\nname = \"LocalExecutor\"\n",
    )
    .unwrap();
    let serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env(
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD",
                "3600",
            ),
    );

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
        stdout.contains("Tested: 3"),
        "every operation but the stream was tested:\n{stdout}"
    );
    drop(serving);
}
