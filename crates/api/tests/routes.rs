//! Every route of the API, in process (`actix_web::test`): an app built as an
//! embedding program builds it (`routes` plus the state), serving reports the
//! core built. No socket, no database, no actor.

use crate::support;

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::http::{StatusCode, header};
use actix_web::test;
use actix_web::web::Bytes;
use overseer_api::dashboard::FrameAncestors;
use serde_json::Value;
use support::{Harness, app, full_report, healthy_report};

fn header_of(response: &ServiceResponse, name: header::HeaderName) -> String {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[actix_web::test]
async fn health_serves_the_reports_own_json_byte_for_byte() {
    let report = full_report();
    let harness = Harness::new(report.clone(), 4);
    let app = app!(harness.state);

    let response = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/api/v2/monitor/health")
            .to_request(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        header_of(&response, header::CONTENT_TYPE),
        "application/json"
    );
    assert_eq!(header_of(&response, header::CACHE_CONTROL), "no-store");
    assert_eq!(test::read_body(response).await, report.json().as_bytes());

    // A new report is served as soon as it is published.
    let healthy = healthy_report();
    harness.reports.send_replace(Arc::new(healthy.clone()));
    let body = test::call_and_read_body(
        &app,
        test::TestRequest::get()
            .uri("/api/v2/monitor/health")
            .to_request(),
    )
    .await;
    assert_eq!(body, healthy.json().as_bytes());
}

#[actix_web::test]
async fn strict_is_503_while_anything_is_unhealthy_and_200_otherwise() {
    let unhealthy = full_report();
    assert!(unhealthy.any_unhealthy());
    let harness = Harness::new(unhealthy.clone(), 4);
    let app = app!(harness.state);
    let get = |uri: &'static str| test::TestRequest::get().uri(uri).to_request();

    for (uri, status) in [
        ("/api/v2/monitor/health", StatusCode::OK),
        ("/api/v2/monitor/health?strict=false", StatusCode::OK),
        (
            "/api/v2/monitor/health?strict=true",
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    ] {
        let response = test::call_service(&app, get(uri)).await;
        assert_eq!(response.status(), status, "{uri}");
        assert_eq!(
            test::read_body(response).await,
            unhealthy.json().as_bytes(),
            "{uri}: the report, whatever the status"
        );
    }

    harness.reports.send_replace(Arc::new(healthy_report()));
    let response = test::call_service(&app, get("/api/v2/monitor/health?strict=true")).await;
    assert_eq!(response.status(), StatusCode::OK);

    let response = test::call_service(&app, get("/api/v2/monitor/health?strict=maybe")).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = test::read_body_json(response).await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .starts_with("invalid query string:"),
        "{body}"
    );
}

/// A probe of the executors alone: `?strict=true&component=executor` answers
/// 503 only for the components named, whatever the others say; an unknown
/// component is a 400 naming it.
#[actix_web::test]
async fn strict_judges_only_the_components_named() {
    use overseer_core::report::{Component, Status};
    let report = full_report();
    // The fixture: the executor entry is unhealthy, the scheduler healthy.
    assert_eq!(
        report.status_of(Component::Executor),
        Some(Status::Unhealthy)
    );
    assert_eq!(
        report.status_of(Component::Scheduler),
        Some(Status::Healthy)
    );
    let harness = Harness::new(report.clone(), 4);
    let app = app!(harness.state);
    let get = |uri: &str| test::TestRequest::get().uri(uri).to_request();
    for (uri, status) in [
        (
            "/api/v2/monitor/health?strict=true&component=executor",
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            "/api/v2/monitor/health?strict=true&component=scheduler",
            StatusCode::OK,
        ),
        (
            "/api/v2/monitor/health?strict=true&component=scheduler&component=metadatabase",
            StatusCode::OK,
        ),
        (
            "/api/v2/monitor/health?component=scheduler&strict=true&component=executor",
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        // Without strict, a filter changes nothing: 200, as Airflow.
        ("/api/v2/monitor/health?component=executor", StatusCode::OK),
    ] {
        let response = test::call_service(&app, get(uri)).await;
        assert_eq!(response.status(), status, "{uri}");
        assert_eq!(
            test::read_body(response).await,
            report.json().as_bytes(),
            "{uri}: the whole report"
        );
    }
    let response = test::call_service(
        &app,
        get("/api/v2/monitor/health?strict=true&component=webserver"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = test::read_body_json(response).await;
    assert_eq!(
        body["detail"],
        "invalid query string: unknown component \"webserver\" (expected one of: metadatabase, scheduler, triggerer, dag_processor, executor)"
    );
}

#[actix_web::test]
async fn errors_are_json_in_fastapis_shape_and_405s_say_what_is_allowed() {
    let harness = Harness::new(full_report(), 4);
    let app = app!(harness.state);

    let response = test::call_service(
        &app,
        test::TestRequest::get().uri("/no/such/route").to_request(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        test::read_body(response).await,
        Bytes::from_static(br#"{"detail":"Not Found"}"#)
    );

    for (uri, allow) in [
        ("/api/v2/monitor/health", "GET, HEAD"),
        ("/api/v2/monitor/health/stream", "GET, HEAD"),
        ("/metrics", "GET, HEAD"),
        ("/openapi.json", "GET, HEAD"),
        ("/api/v2/version", "GET, HEAD"),
        ("/", "GET, HEAD"),
    ] {
        let response =
            test::call_service(&app, test::TestRequest::post().uri(uri).to_request()).await;
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{uri}");
        assert_eq!(header_of(&response, header::ALLOW), allow, "{uri}");
        assert_eq!(
            test::read_body(response).await,
            Bytes::from_static(br#"{"detail":"Method Not Allowed"}"#),
            "{uri}"
        );
    }
}

#[actix_web::test]
async fn head_answers_where_get_does() {
    let harness = Harness::new(full_report(), 4);
    let app = app!(harness.state);
    let head = |uri: &str| {
        test::TestRequest::default()
            .method(actix_web::http::Method::HEAD)
            .uri(uri)
            .to_request()
    };
    for uri in [
        "/api/v2/monitor/health",
        "/api/v2/monitor/health/stream",
        "/metrics",
        "/openapi.json",
        "/api/v2/version",
        "/",
    ] {
        let get = test::call_service(&app, test::TestRequest::get().uri(uri).to_request()).await;
        let response = test::call_service(&app, head(uri)).await;
        assert_eq!(response.status(), StatusCode::OK, "{uri}");
        assert_eq!(
            header_of(&response, header::CONTENT_TYPE),
            header_of(&get, header::CONTENT_TYPE),
            "{uri}: HEAD's headers are GET's"
        );
    }
}

#[actix_web::test]
async fn head_on_the_stream_takes_no_place_and_says_when_it_is_full() {
    let harness = Harness::new(full_report(), 1);
    let app = app!(harness.state);
    let head = || {
        test::TestRequest::default()
            .method(actix_web::http::Method::HEAD)
            .uri("/api/v2/monitor/health/stream")
            .to_request()
    };
    let response = test::call_service(&app, head()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        test::read_body(response).await,
        Bytes::new(),
        "HEAD ends at once"
    );

    // The one place is still free for a GET.
    let held = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/api/v2/monitor/health/stream")
            .to_request(),
    )
    .await;
    assert_eq!(held.status(), StatusCode::OK);
    let response = test::call_service(&app, head()).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(!header_of(&response, header::RETRY_AFTER).is_empty());
}

#[actix_web::test]
async fn version_is_airflows_shape_with_the_commit_built_from() {
    let harness = Harness::new(full_report(), 4);
    let app = app!(harness.state);
    let body: Value = test::call_and_read_body_json(
        &app,
        test::TestRequest::get().uri("/api/v2/version").to_request(),
    )
    .await;
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["version", "git_version"]);
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        body["git_version"].as_str(),
        overseer_api::version::GIT_VERSION
    );
    // Built from a git checkout (this one is, when git answers here): the commit.
    let in_checkout = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .is_ok_and(|out| out.status.success());
    if in_checkout {
        let commit = body["git_version"].as_str().expect("a commit, not null");
        assert!(
            !commit.is_empty() && commit.bytes().all(|b| b.is_ascii_hexdigit()),
            "{commit}"
        );
    }
}

#[actix_web::test]
async fn the_dashboard_is_self_contained_html() {
    let harness = Harness::new(full_report(), 4);
    let app = app!(harness.state);
    let response = test::call_service(&app, test::TestRequest::get().uri("/").to_request()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        header_of(&response, header::CONTENT_TYPE),
        "text/html; charset=utf-8"
    );
    let policy = header_of(&response, header::CONTENT_SECURITY_POLICY);
    assert!(policy.starts_with("default-src 'none'"), "{policy}");
    // Framed by no one but itself, unless configured.
    assert!(policy.ends_with("; frame-ancestors 'self'"), "{policy}");
    let page = String::from_utf8(test::read_body(response).await.to_vec()).unwrap();
    for card in [
        "card-scheduler",
        "card-triggerer",
        "card-dag_processor",
        "card-executor",
    ] {
        assert!(page.contains(card), "{card}");
    }
}

#[actix_web::test]
async fn the_dashboard_may_be_framed_by_the_configured_origins() {
    let harness = Harness::new(full_report(), 4);
    let ancestors =
        FrameAncestors::new(["https://airflow.example.com/", "http://127.0.0.1:28080"]).unwrap();
    let state = harness.state.clone().with_frame_ancestors(ancestors);
    let app = app!(state);
    for request in [
        test::TestRequest::get(),
        test::TestRequest::default().method(actix_web::http::Method::HEAD),
    ] {
        let response = test::call_service(&app, request.uri("/").to_request()).await;
        assert_eq!(response.status(), StatusCode::OK);
        let policy = header_of(&response, header::CONTENT_SECURITY_POLICY);
        assert!(policy.starts_with("default-src 'none'; "), "{policy}");
        let directives: Vec<&str> = policy.split("; ").collect();
        assert_eq!(
            directives.last(),
            Some(&"frame-ancestors 'self' https://airflow.example.com http://127.0.0.1:28080"),
            "{policy}"
        );
        assert_eq!(
            directives
                .iter()
                .filter(|d| d.starts_with("frame-ancestors"))
                .count(),
            1,
            "{policy}"
        );
    }
    // The other routes carry no frame policy: they are data, not pages.
    let response = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/api/v2/monitor/health")
            .to_request(),
    )
    .await;
    assert!(
        response
            .headers()
            .get(header::CONTENT_SECURITY_POLICY)
            .is_none()
    );
}

#[actix_web::test]
async fn metrics_read_the_published_report() {
    let harness = Harness::new(full_report(), 4);
    let app = app!(harness.state);
    let response =
        test::call_service(&app, test::TestRequest::get().uri("/metrics").to_request()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(header_of(&response, header::CONTENT_TYPE).starts_with("text/plain"));
    let body = String::from_utf8(test::read_body(response).await.to_vec()).unwrap();
    for expected in [
        r#"overseer_executor_health{executor="CeleryExecutor",executor_instance="redis://broker:6379/0",hostname="sched-1"} 1"#,
        r#"overseer_executor_health{executor="alias:CeleryExecutor",executor_instance="redis://broker:6379/0",hostname="sched-1"} 0"#,
        r#"overseer_executor_health{executor="LocalExecutor",executor_instance="redis://broker:6379/0",hostname="sched-2"} -1"#,
        r#"overseer_component_healthy{component="metadatabase"} 1"#,
        r#"overseer_component_healthy{component="executor"} 0"#,
        "overseer_stream_clients 0",
        "overseer_db_history_read_failures_total 0",
        "# TYPE overseer_report_age_seconds gauge",
    ] {
        assert!(body.contains(expected), "missing {expected:?} in:\n{body}");
    }
}

#[actix_web::test]
async fn openapi_json_is_the_generated_document() {
    let harness = Harness::new(full_report(), 4);
    let app = app!(harness.state);
    let response = test::call_service(
        &app,
        test::TestRequest::get().uri("/openapi.json").to_request(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let served: Value = test::read_body_json(response).await;
    let generated: Value = serde_json::from_str(
        &<overseer_api::openapi::ApiDoc as utoipa::OpenApi>::openapi()
            .to_json()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(served, generated);
}

/// The next chunk a streaming body yields.
async fn next_chunk<B: MessageBody + Unpin>(body: &mut B) -> Option<Bytes> {
    let mut body = pin!(body);
    std::future::poll_fn(|cx| body.as_mut().poll_next(cx))
        .await
        .map(|chunk| chunk.map_err(|_| "body error").unwrap())
}

/// The next whole SSE event (or comment) a streaming body yields, whatever
/// the pieces it comes in, and the size of its largest piece.
async fn next_event<B: MessageBody + Unpin>(body: &mut B) -> Option<(Bytes, usize)> {
    let mut event = Vec::new();
    let mut largest = 0;
    while !event.ends_with(b"\n\n") {
        let piece = next_chunk(body).await?;
        largest = largest.max(piece.len());
        event.extend_from_slice(&piece);
    }
    Some((Bytes::from(event), largest))
}

/// The SSE event of a report.
fn event_of(report: &overseer_core::HealthReport) -> Bytes {
    Bytes::from(format!("event: report\ndata: {}\n\n", report.json()))
}

/// A report of `n` schedulers on as many hosts: tens of kilobytes of JSON
/// (Airflow's components list every live instance; the `executor` entry is
/// bounded).
fn fleet_report(n: i32) -> overseer_core::HealthReport {
    let rows = (0..n)
        .map(|i| {
            support::row(
                1 + i,
                overseer_core::JobType::SchedulerJob,
                2,
                &format!("scheduler-host-{i}"),
            )
        })
        .collect();
    support::report(rows, true)
}

#[actix_web::test]
async fn a_large_report_goes_out_in_bounded_pieces_of_one_shared_copy() {
    let big = fleet_report(1500);
    assert!(big.json().len() > 8 * overseer_api::health::EVENT_PIECE);
    let harness = Harness::new(big.clone(), 4);
    let app = app!(harness.state);
    let response = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/api/v2/monitor/health/stream")
            .to_request(),
    )
    .await;
    let mut body = response.into_body();
    let (event, largest) = next_event(&mut body).await.unwrap();
    assert_eq!(
        event,
        event_of(&big),
        "the pieces make the event, byte for byte"
    );
    assert!(
        largest <= overseer_api::health::EVENT_PIECE,
        "no piece is larger than {} bytes: {largest}",
        overseer_api::health::EVENT_PIECE
    );
}

#[actix_web::test]
async fn a_client_too_far_behind_is_dropped_and_its_place_comes_back() {
    tokio::time::pause();
    let harness = Harness::new(fleet_report(800), 1);
    let places = harness.state.stream_places.clone();
    let app = app!(harness.state);
    let response = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/api/v2/monitor/health/stream")
            .to_request(),
    )
    .await;
    let mut body = response.into_body();
    // The client takes the start of the event, then nothing for too long.
    assert!(next_chunk(&mut body).await.is_some());
    tokio::time::advance(overseer_api::health::STREAM_LAG_LIMIT + Duration::from_secs(1)).await;
    assert_eq!(next_chunk(&mut body).await, None, "the stream ended");
    drop(body);
    assert_eq!(places.open(), 0, "its place came back");
}

#[actix_web::test]
async fn the_stream_sends_the_report_then_each_change_and_ends_at_shutdown() {
    let first = full_report();
    let harness = Harness::new(first.clone(), 4);
    let app = app!(harness.state);

    let response = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/api/v2/monitor/health/stream")
            .to_request(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        header_of(&response, header::CONTENT_TYPE),
        "text/event-stream"
    );
    let mut body = response.into_body();
    assert_eq!(
        next_event(&mut body).await.map(|(event, _)| event),
        Some(event_of(&first))
    );

    let second = healthy_report();
    harness.reports.send_replace(Arc::new(second.clone()));
    assert_eq!(
        next_event(&mut body).await.map(|(event, _)| event),
        Some(event_of(&second))
    );

    harness.shutdown.send_replace(true);
    assert_eq!(next_chunk(&mut body).await, None, "the stream ends");
}

#[actix_web::test]
async fn one_stream_client_too_many_gets_503_and_its_place_comes_back() {
    let harness = Harness::new(full_report(), 1);
    let app = app!(harness.state);
    let stream = || {
        test::TestRequest::get()
            .uri("/api/v2/monitor/health/stream")
            .to_request()
    };

    let held = test::call_service(&app, stream()).await;
    assert_eq!(held.status(), StatusCode::OK);

    let refused = test::call_service(&app, stream()).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        header_of(&refused, header::RETRY_AFTER),
        overseer_api::STREAM_RETRY_AFTER.as_secs().to_string()
    );
    let body: Value = test::read_body_json(refused).await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("GET /api/v2/monitor/health"),
        "{body}"
    );

    drop(held);
    let again = test::call_service(&app, stream()).await;
    assert_eq!(again.status(), StatusCode::OK, "the place came back");
}
