//! Two Overseer processes, on different ports and hosts, one Postgres, the same
//! broker: both are instances, neither touches the other's rows, and stopping
//! one leaves the other's entry healthy.

use crate::support;

use serde_json::Value;
use support::{Serving, health_until, overseer, workdir};

const QUICK: &str = "[supervisor]\npoll_interval = \"500ms\"\npoll_timeout = \"400ms\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n";

fn hosts(json: &Value) -> Vec<(String, String)> {
    let mut hosts: Vec<(String, String)> = json["executor"]["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            (
                i["hostname"].as_str().unwrap().to_owned(),
                i["health"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    hosts.sort();
    hosts
}

#[tokio::test]
async fn two_instances_share_one_database_and_one_broker() {
    let Some(db) = overseer_testkit::postgres().await else {
        return;
    };
    if std::net::TcpStream::connect("127.0.0.1:6379").is_err() {
        overseer_testkit::unavailable::<()>("Redis on 127.0.0.1:6379", "connection refused");
        return;
    }
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let start = |host: &str| {
        Serving::start(
            overseer(dir.path())
                .env("OVERSEER_DATABASE__URL", &db.url)
                .env("OVERSEER_SUPERVISOR__HOSTNAME", host)
                .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
                .env("AIRFLOW__CELERY__BROKER_URL", "redis://127.0.0.1:6379/15"),
        )
    };
    let a = start("sched-a");
    let b = start("sched-b");
    assert_ne!(a.address, b.address);

    let both = vec![
        ("sched-a".to_owned(), "healthy".to_owned()),
        ("sched-b".to_owned(), "healthy".to_owned()),
    ];
    for serving in [&a, &b] {
        health_until(serving, "both instances healthy", |j| hosts(j) == both);
    }
    let rows =
        "SELECT hostname || ' ' || state FROM job WHERE job_type = 'ExecutorJob' ORDER BY hostname";
    assert_eq!(
        db.strings(rows).await,
        ["sched-a running", "sched-b running"]
    );

    let (code, _) = a.terminate();
    assert_eq!(code, Some(0));
    let json = health_until(&b, "only sched-b left", |j| hosts(j).len() == 1);
    assert_eq!(hosts(&json), [("sched-b".to_owned(), "healthy".to_owned())]);
    assert_eq!(json["executor"]["status"], "healthy");
    assert_eq!(json["executor"]["detailed_status"], "healthy");
    assert_eq!(
        db.strings(rows).await,
        ["sched-a success", "sched-b running"]
    );
}
