//! `overseer serve` supervising a CeleryExecutor against the real Redis on this
//! machine, and against a loopback port where nothing listens; a password in the
//! broker URL appears nowhere: not in the log, the JSON, the metrics or the table.

use crate::support;

use serde_json::Value;
use support::{Serving, get, overseer, workdir};

const QUICK: &str = "[supervisor]\nhostname = \"sched-1\"\npoll_interval = \"500ms\"\npoll_timeout = \"400ms\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n";

fn redis_reachable() -> bool {
    std::net::TcpStream::connect("127.0.0.1:6379").is_ok()
        || overseer_testkit::unavailable::<()>("Redis on 127.0.0.1:6379", "connection refused")
            .is_some()
}

/// GETs the health until the Celery executor's verdict satisfies `done`.
fn verdict_until(serving: &Serving, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, body) = get(&serving.url("/api/v2/monitor/health"));
        let json: Value = serde_json::from_str(&body).unwrap();
        let celery = json["executor"]["instances"].as_array().and_then(|i| {
            i.iter()
                .find(|i| i["executor"] == "CeleryExecutor")
                .cloned()
        });
        if let Some(celery) = celery.filter(|c| done(c)) {
            return celery;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never seen; last {json}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[tokio::test]
async fn a_reachable_redis_broker_is_healthy() {
    if !redis_reachable() {
        return;
    }
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env("AIRFLOW__CELERY__BROKER_URL", "redis://127.0.0.1:6379/15"),
    );
    let celery = verdict_until(&serving, |c| c["health"] != "unknown");
    assert_eq!(celery["health"], "healthy", "{celery}");
    assert_eq!(celery["instance"], "redis://127.0.0.1:6379/15");
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn an_unreachable_broker_is_unhealthy_and_its_password_shows_nowhere() {
    const PASSWORD: &str = "s3cret-broker-pw";
    let closed = overseer_testkit::throwaway::free_port();
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let serving = Serving::start(
        overseer(dir.path())
            .env("RUST_LOG", "debug")
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env(
                "AIRFLOW__CELERY__BROKER_URL",
                format!("redis://:{PASSWORD}@127.0.0.1:{closed}/0"),
            ),
    );
    let celery = verdict_until(&serving, |c| c["health"] == "unhealthy");
    let reason = celery["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("redis://127.0.0.1:{closed}/0")),
        "{reason}"
    );
    assert!(reason.contains("refused"), "{reason}");

    let (_, json) = get(&serving.url("/api/v2/monitor/health"));
    let (_, metrics) = get(&serving.url("/metrics"));
    let (code, log) = serving.terminate();
    assert_eq!(code, Some(0));
    let rows = db
        .strings(
            "SELECT COALESCE(executor_class, '') || ' ' || COALESCE(executor_instance, '') || ' ' || \
             COALESCE(executor_health_reason, '') FROM job",
        )
        .await;
    for (what, text) in [
        ("the JSON", json),
        ("the metrics", metrics),
        ("the log", log.join("\n")),
        ("the table", rows.join("\n")),
    ] {
        assert!(
            !text.contains(PASSWORD),
            "the password shows in {what}:\n{text}"
        );
    }
}
