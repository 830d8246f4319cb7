//! `GET /openapi.json`: the OpenAPI document, generated from the types the
//! responses are written from. The health report's schema is
//! [`HealthReport`]'s own (core's model, which also writes the JSON), so the
//! document and the JSON cannot drift. The schemas its parts refer to come
//! with it, the evidence beside each executor instance's verdict included
//! (`detail`: `Detail`, `QueueDetail`, `WorkerDetail`, `QueuedTasks`,
//! `QueuedOnQueue`, `EventsDetail`), each described by its type's docs. The history's
//! transitions are core's [`Transition`](overseer_core::history::Transition).

use std::sync::LazyLock;

use actix_web::HttpResponse;
use overseer_core::HealthReport;
use utoipa::OpenApi;

use crate::errors::ErrorBody;
use crate::history::HistoryPage;
use crate::version::VersionInfo;

/// The OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Overseer",
        description = "Executor health for Apache Airflow: Airflow's /api/v2/monitor/health, with executors."
    ),
    paths(
        crate::health::health,
        crate::health::stream,
        crate::history::history,
        crate::fleet::workers,
        crate::fleet::queues,
        crate::metrics::metrics,
        crate::version::version
    ),
    components(schemas(HealthReport, HistoryPage, ErrorBody, VersionInfo))
)]
pub struct ApiDoc;

/// The document, rendered once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    ApiDoc::openapi()
        .to_json()
        .expect("the OpenAPI document serializes")
});

/// `GET /openapi.json`.
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(DOCUMENT.as_str())
}
