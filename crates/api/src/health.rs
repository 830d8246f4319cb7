//! `GET /api/v2/monitor/health` and its live stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::http::StatusCode;
use actix_web::web::{Bytes, Data, Query};
use actix_web::{HttpRequest, HttpResponse, http::header};
use overseer_core::HealthReport;
use overseer_core::report::Component;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::{ApiState, KEEP_ALIVE, errors};

/// The query `GET /api/v2/monitor/health` takes.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HealthQuery {
    /// With `true`, answer 503 when any component is unhealthy (for load
    /// balancers and probes). Airflow itself always answers 200.
    #[serde(default)]
    #[param(required = false)]
    pub strict: bool,
    /// With `strict`, judge only these components (repeat the key for
    /// several: `?strict=true&component=executor`), so that a probe of the
    /// executors is not failed by a scheduler that does not run here. The
    /// body is the whole report either way.
    #[serde(default, skip_deserializing)]
    #[param(required = false, explode, style = Form)]
    pub component: Option<Vec<Component>>,
}

/// The components `?component=` names (every one when none), or why not.
fn components(query_string: &str) -> Result<Vec<Component>, String> {
    let pairs = Query::<Vec<(String, String)>>::from_query(query_string)
        .map_err(|e| e.to_string())?
        .into_inner();
    let named: Vec<Component> = pairs
        .into_iter()
        .filter(|(key, _)| key == "component")
        .map(|(_, value)| value.parse())
        .collect::<Result<_, _>>()?;
    Ok(if named.is_empty() {
        Component::ALL.to_vec()
    } else {
        named
    })
}

/// The health of Airflow's components and of every supervised executor.
#[utoipa::path(
    get,
    tag = "monitor",
    path = "/api/v2/monitor/health",
    params(HealthQuery),
    responses(
        (status = 200, description = "The report (always, unless strict)", body = overseer_core::HealthReport),
        (status = 503, description = "strict=true and some component (of those named by component, when given) is unhealthy", body = overseer_core::HealthReport),
        (status = 400, description = "A malformed query string", body = crate::errors::ErrorBody),
    )
)]
pub async fn health(state: Data<ApiState>, request: HttpRequest) -> HttpResponse {
    // The query is read by hand, and only when there is one: a probe's plain
    // `GET` then costs no parsing at all (see `HealthQuery` for what it takes).
    let query = request.query_string();
    let report = state.reports.borrow().clone();
    let status = if query.is_empty() {
        StatusCode::OK
    } else {
        let strict = match Query::<HealthQuery>::from_query(query) {
            Ok(parsed) => parsed.strict,
            Err(err) => return errors::invalid_query(&err.to_string()),
        };
        let judged = match components(query) {
            Ok(judged) => judged,
            Err(problem) => return errors::invalid_query(&problem),
        };
        if strict && report.unhealthy_among(&judged) {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        }
    };
    HttpResponse::build(status)
        .content_type("application/json")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(ReportJson::bytes(report))
}

/// A report's JSON as the bytes of a body, without copying it: the body holds
/// the report itself, which is shared and never changes.
struct ReportJson(Arc<HealthReport>);

impl ReportJson {
    fn bytes(report: Arc<HealthReport>) -> Bytes {
        Bytes::from_owner(Self(report))
    }
}

impl AsRef<[u8]> for ReportJson {
    fn as_ref(&self) -> &[u8] {
        self.0.json().as_bytes()
    }
}

/// Server-Sent Events: one `report` event with the whole report now and at each
/// change, and a keep-alive comment when idle. Each client has its own view of
/// the latest report: a slow one skips to the newest and delays no one.
///
/// At most `max_stream_clients` are served at once; one more gets 503 and is pointed at
/// the plain health route.
#[utoipa::path(
    get,
    tag = "monitor",
    path = "/api/v2/monitor/health/stream",
    responses(
        (status = 200, description = "text/event-stream of `report` events, each a HealthReport", content_type = "text/event-stream", body = String),
        (status = 503, description = "api.max_stream_clients streams are open already: retry after Retry-After seconds, or poll GET /api/v2/monitor/health",
            body = crate::errors::ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before reconnecting"))),
    )
)]
pub async fn stream(state: Data<ApiState>) -> HttpResponse {
    let Some(place) = StreamPlace::take(&state.open_streams, state.max_stream_clients) else {
        tracing::debug!(
            max_stream_clients = state.max_stream_clients,
            "refused an SSE client: the stream is at capacity"
        );
        return errors::stream_at_capacity(state.max_stream_clients);
    };
    let mut reports = state.reports.clone();
    reports.mark_changed();
    let shutdown = state.shutdown.clone();
    let keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    // The place rides along with the stream: actix drops the stream when the
    // client goes or the service stops, and the place is free again.
    let events = futures_util::stream::unfold(
        (reports, shutdown, keep_alive, place),
        |(mut reports, mut shutdown, mut keep_alive, place)| async move {
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
            event.map(|event| {
                (
                    Ok::<_, Infallible>(event),
                    (reports, shutdown, keep_alive, place),
                )
            })
        },
    );
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(events)
}

/// One of the `max_stream_clients` places in the SSE stream, held by a stream
/// for as long as it lives and given back when it is dropped, whatever ends it
/// (the client leaves, the service stops).
#[derive(Debug)]
pub struct StreamPlace {
    open: Arc<AtomicUsize>,
}

impl StreamPlace {
    /// A place, if fewer than `max` streams are open; counted in `open` until dropped.
    pub fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| Self { open: open.clone() })
    }
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_run_out_at_the_cap_and_come_back_when_dropped() {
        let open = Arc::new(AtomicUsize::new(0));
        let held: Vec<_> = (0..3).map(|_| StreamPlace::take(&open, 3)).collect();
        assert!(held.iter().all(Option::is_some));
        assert_eq!(open.load(Ordering::Acquire), 3);
        assert!(StreamPlace::take(&open, 3).is_none());
        assert_eq!(open.load(Ordering::Acquire), 3, "a refusal takes nothing");
        drop(held);
        assert_eq!(open.load(Ordering::Acquire), 0);
        assert!(StreamPlace::take(&open, 3).is_some());
    }
}
