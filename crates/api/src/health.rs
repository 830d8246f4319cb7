//! `GET /api/v2/monitor/health` and its live stream.

use std::convert::Infallible;

use actix_web::http::StatusCode;
use actix_web::web::{Bytes, Data, Query};
use actix_web::{HttpResponse, http::header};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::{ApiState, KEEP_ALIVE};

/// The query `GET /api/v2/monitor/health` takes.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HealthQuery {
    /// With `true`, answer 503 when any component is unhealthy (for load
    /// balancers and probes). Airflow itself always answers 200.
    #[serde(default)]
    #[param(required = false)]
    pub strict: bool,
}

/// The health of Airflow's components and of every supervised executor.
#[utoipa::path(
    get,
    tag = "monitor",
    path = "/api/v2/monitor/health",
    params(HealthQuery),
    responses(
        (status = 200, description = "The report (always, unless strict)", body = crate::schema::HealthResponse),
        (status = 503, description = "strict=true and some component is unhealthy", body = crate::schema::HealthResponse),
        (status = 400, description = "A malformed query string", body = crate::errors::ErrorBody),
    )
)]
pub async fn health(state: Data<ApiState>, query: Query<HealthQuery>) -> HttpResponse {
    let report = state.reports.borrow().clone();
    let status = if query.strict && report.any_unhealthy() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    HttpResponse::build(status)
        .content_type("application/json")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(report.json().to_owned())
}

/// Server-Sent Events: one `report` event with the whole report now and at each
/// change, and a keep-alive comment when idle. Each client has its own view of
/// the latest report: a slow one skips to the newest and delays no one.
#[utoipa::path(
    get,
    tag = "monitor",
    path = "/api/v2/monitor/health/stream",
    responses((status = 200, description = "text/event-stream of `report` events, each a HealthResponse", content_type = "text/event-stream", body = String))
)]
pub async fn stream(state: Data<ApiState>) -> HttpResponse {
    let mut reports = state.reports.clone();
    reports.mark_changed();
    let shutdown = state.shutdown.clone();
    let keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    let events = futures_util::stream::unfold(
        (reports, shutdown, keep_alive),
        |(mut reports, mut shutdown, mut keep_alive)| async move {
            let event = tokio::select! {
                changed = reports.changed() => match changed {
                    Ok(()) => {
                        let json = reports.borrow_and_update().json().to_owned();
                        Some(Bytes::from(format!("event: report\ndata: {json}\n\n")))
                    }
                    // The publisher is gone: the service is stopping.
                    Err(_) => None,
                },
                _ = keep_alive.tick() => Some(Bytes::from_static(b": keep-alive\n\n")),
                _ = shutdown.wait_for(|stopping| *stopping) => None,
            };
            event.map(|event| (Ok::<_, Infallible>(event), (reports, shutdown, keep_alive)))
        },
    );
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(events)
}
