//! `GET /api/v2/monitor/health/history`, in process, over a real database
//! (SQLite, and Postgres and MariaDB where reachable): the filters, the limit,
//! newest first, 400 for a bad filter, 503 when the database cannot be read or
//! no reader was given, and the route in the OpenAPI document.

use crate::support;

use actix_web::http::StatusCode;
use actix_web::test;
use overseer_api::openapi::ApiDoc;
use overseer_core::history::HistoryReader;
use overseer_migration::{Migrator, MigratorTrait};
use overseer_testkit::TestDb;
use serde_json::{Value, json};
use support::{Harness, app, healthy_report};
use utoipa::OpenApi;

/// Five transitions, written as Overseer writes them (`at` in the backend's
/// form): two executors, two hosts, one without an instance.
async fn seeded(db: &TestDb) {
    Migrator::up(&db.conn, None).await.unwrap();
    let at = |second: u32| {
        let at = chrono::DateTime::parse_from_rfc3339(&format!("2026-11-29T19:48:{second:02}.5Z"))
            .unwrap()
            .with_timezone(&chrono::Utc);
        match db.backend {
            sea_orm::DbBackend::Postgres => format!("'{}'", at.to_rfc3339()),
            sea_orm::DbBackend::MySql => format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.6f")),
            _ => format!(
                "'{}'",
                at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false)
            ),
        }
    };
    let rows = [
        (
            "CeleryExecutor",
            "'redis://a:6379/0'",
            "sched-1",
            "unknown",
            "healthy",
            "NULL",
            1,
        ),
        (
            "CeleryExecutor",
            "'redis://a:6379/0'",
            "sched-1",
            "healthy",
            "unhealthy",
            "'broker a down'",
            2,
        ),
        (
            "CeleryExecutor",
            "'redis://b:6379/0'",
            "sched-2",
            "unknown",
            "unhealthy",
            "'broker b down'",
            3,
        ),
        (
            "LocalExecutor",
            "NULL",
            "sched-1",
            "unknown",
            "healthy",
            "NULL",
            4,
        ),
        (
            "CeleryExecutor",
            "'redis://a:6379/0'",
            "sched-1",
            "unhealthy",
            "healthy",
            "NULL",
            5,
        ),
    ];
    for (executor, instance, host, from, to, reason, second) in rows {
        db.execute_script(&format!(
            "INSERT INTO overseer_executor_history (executor, instance, hostname, from_health, to_health, reason, at) \
             VALUES ('{executor}', {instance}, '{host}', '{from}', '{to}', {reason}, {})",
            at(second)
        ))
        .await;
    }
}

/// The answer to `GET uri`: its status and its JSON.
async fn get(state: &overseer_api::ApiState, uri: &str) -> (StatusCode, Value) {
    let app = app!(state);
    let response = test::call_service(&app, test::TestRequest::get().uri(uri).to_request()).await;
    let status = response.status();
    let body = test::read_body(response).await;
    let json = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{uri}: {e}: {}", String::from_utf8_lossy(&body)));
    (status, json)
}

/// The `at` of each transition answered, as the seconds of the seeded times.
fn seconds(body: &Value) -> Vec<u64> {
    body["transitions"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|t| t["at"].as_str().unwrap()[17..19].parse().unwrap())
        .collect()
}

async fn the_history_route_filters_and_answers_newest_first(db: TestDb) {
    seeded(&db).await;
    let backend = db.backend;
    let harness = Harness::new(healthy_report(), 4);
    let state = harness
        .state
        .clone()
        .with_history(HistoryReader::connect(&db.url).await.unwrap());

    let (status, body) = get(&state, "/api/v2/monitor/health/history").await;
    assert_eq!(status, StatusCode::OK, "{backend:?}: {body}");
    assert_eq!(seconds(&body), [5, 4, 3, 2, 1], "{backend:?}: newest first");
    assert_eq!(
        body["transitions"][3],
        json!({
            "executor": "CeleryExecutor",
            "instance": "redis://a:6379/0",
            "hostname": "sched-1",
            "from": "healthy",
            "to": "unhealthy",
            "reason": "broker a down",
            "at": "2026-11-29T19:48:02.500000+00:00",
            "cost": null,
        }),
        "{backend:?}"
    );
    assert_eq!(body["transitions"][1]["instance"], Value::Null);

    for (query, expected) in [
        ("?executor=CeleryExecutor", &[5, 3, 2, 1][..]),
        ("?executor=LocalExecutor", &[4]),
        ("?instance=redis://b:6379/0", &[3]),
        (
            "?executor=CeleryExecutor&instance=redis%3A%2F%2Fa%3A6379%2F0",
            &[5, 2, 1],
        ),
        ("?since=2026-11-29T19:48:03.5Z", &[5, 4, 3]),
        ("?since=2026-11-29T20:48:03.5%2B01:00", &[5, 4, 3]),
        ("?since=2026-11-29T19:48:03.500001Z", &[5, 4]),
        ("?limit=2", &[5, 4]),
        (
            "?executor=CeleryExecutor&since=2026-11-29T19:48:02Z&limit=1",
            &[5],
        ),
        ("?executor=KubernetesExecutor", &[]),
        ("?limit=1000", &[5, 4, 3, 2, 1]),
        // No row holds a NUL: nothing, without asking the database.
        ("?executor=a%00b", &[]),
    ] {
        let (status, body) = get(&state, &format!("/api/v2/monitor/health/history{query}")).await;
        assert_eq!(status, StatusCode::OK, "{backend:?} {query}: {body}");
        assert_eq!(seconds(&body), expected, "{backend:?} {query}");
    }

    for (query, says) in [
        ("?since=yesterday", "since"),
        ("?since=2026-11-29", "since"),
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?limit=-1", "limit"),
        ("?limit=ten", "limit"),
    ] {
        let (status, body) = get(&state, &format!("/api/v2/monitor/health/history{query}")).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{backend:?} {query}: {body}"
        );
        let detail = body["detail"].as_str().unwrap_or_else(|| panic!("{body}"));
        assert!(detail.contains(says), "{backend:?} {query}: {detail}");
        assert_eq!(
            body.as_object().unwrap().len(),
            1,
            "Airflow's shape: {body}"
        );
    }

    // The database cannot be read (the table is gone): 503, in Airflow's shape.
    db.execute_script("DROP TABLE overseer_executor_history")
        .await;
    let (status, body) = get(&state, "/api/v2/monitor/health/history").await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{backend:?}: {body}"
    );
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("cannot read the executor history")),
        "{body}"
    );
}

#[actix_web::test]
async fn the_history_route_filters_and_answers_newest_first_on_sqlite() {
    the_history_route_filters_and_answers_newest_first(overseer_testkit::sqlite().await).await;
}

#[actix_web::test]
async fn the_history_route_filters_and_answers_newest_first_on_postgres() {
    if let Some(db) = overseer_testkit::postgres().await {
        the_history_route_filters_and_answers_newest_first(db).await;
    }
}

#[actix_web::test]
async fn the_history_route_filters_and_answers_newest_first_on_mariadb() {
    if let Some(db) = overseer_testkit::mariadb().await {
        the_history_route_filters_and_answers_newest_first(db).await;
    }
}

#[actix_web::test]
async fn without_a_history_reader_the_route_says_so_with_503() {
    let harness = Harness::new(healthy_report(), 4);
    let (status, body) = get(&harness.state, "/api/v2/monitor/health/history").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("without a history reader")),
        "{body}"
    );
    // A bad filter is still the client's fault.
    let (status, _) = get(&harness.state, "/api/v2/monitor/health/history?limit=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Other methods: 405 with Allow.
    let app = app!(harness.state);
    let response = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/api/v2/monitor/health/history")
            .to_request(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(response.headers().get("allow").unwrap(), "GET, HEAD");
}

#[core::prelude::v1::test]
fn the_history_route_is_in_the_openapi_document() {
    let doc: Value = serde_json::from_str(&ApiDoc::openapi().to_json().unwrap()).unwrap();
    let route = &doc["paths"]["/api/v2/monitor/health/history"]["get"];
    let params: Vec<&str> = route["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(params, ["executor", "instance", "since", "limit"]);
    for status in ["200", "400", "503"] {
        assert!(route["responses"][status].is_object(), "{status}: {route}");
    }
    assert_eq!(
        route["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/HistoryPage"
    );
    let transition = &doc["components"]["schemas"]["Transition"];
    let mut properties: Vec<&str> = transition["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    properties.sort_unstable();
    assert_eq!(
        properties,
        [
            "at", "cost", "executor", "from", "hostname", "instance", "reason", "to"
        ]
    );
    assert_eq!(transition["properties"]["at"]["format"], "date-time");
    let cost = &doc["components"]["schemas"]["FaultCost"];
    assert_eq!(
        cost["required"],
        json!(["failed", "up_for_retry"]),
        "what an unhealthy span cost: {cost}"
    );
}
