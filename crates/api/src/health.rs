//! `GET /api/v2/monitor/health` and its live stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::web::{Bytes, Data, Query};
use actix_web::{HttpRequest, HttpResponse, http::header};
use overseer_core::HealthReport;
use overseer_core::report::Component;
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
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
/// What a client costs is bounded, whether it reads or not: a small report's
/// event goes out whole, and a larger one is sent from the report's one shared
/// copy (never a copy of its own), handed to actix in pieces of
/// [`EVENT_PIECE`] bytes; actix-http stops asking for more once 32 KiB wait
/// in the connection's buffer. A client that still has not taken
/// one whole event [`STREAM_LAG_LIMIT`] after it began is too far behind, and
/// its stream ends; one that reads nothing at all is closed by the kernel
/// after as long (`TCP_USER_TIMEOUT`, see [`crate::server`]). Nothing of a
/// client outlives its connection; when the last one leaves, the freed memory
/// is given back to the system.
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
    let Some(place) = state.stream_places.take() else {
        tracing::debug!(
            max_stream_clients = state.stream_places.max(),
            "refused an SSE client: the stream is at capacity"
        );
        return errors::stream_at_capacity(state.stream_places.max());
    };
    let mut reports = state.reports.clone();
    reports.mark_changed();
    let mut keep_alive =
        tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    // A client that was not asked for anything for a while gets one keep-alive, not a burst.
    keep_alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The place rides along with the stream: actix drops the stream when the
    // client goes or the service stops, and the place is free again.
    let client = Client {
        reports,
        shutdown: state.shutdown.clone(),
        keep_alive,
        sending: None,
        _place: place,
    };
    let events = futures_util::stream::unfold(client, |mut client| async move {
        let piece = client.next_piece().await?;
        Some((Ok::<_, Infallible>(piece), client))
    });
    stream_head_of(HttpResponse::Ok()).streaming(events)
}

/// `HEAD` on the stream: the headers a `GET` would get now (200, or 503 when
/// the stream is at capacity), and no stream: it takes no place.
pub async fn stream_head(state: Data<ApiState>) -> HttpResponse {
    if state.stream_places.open() >= state.stream_places.max() {
        return errors::stream_at_capacity(state.stream_places.max());
    }
    stream_head_of(HttpResponse::Ok()).finish()
}

/// The stream's own headers.
fn stream_head_of(mut response: actix_web::HttpResponseBuilder) -> actix_web::HttpResponseBuilder {
    response
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header(("X-Accel-Buffering", "no"));
    response
}

/// The largest piece of an event handed to actix at once. actix-http keeps
/// asking a streaming body for more until 32 KiB wait in the connection's write
/// buffer, so a client that reads nothing holds at most 32 KiB and one piece
/// there, whatever the size of the report (a fleet's can be megabytes).
pub const EVENT_PIECE: usize = 8 * 1024;

/// How long one event may take to be taken by a client before the client is
/// too far behind and its stream ends (it may reconnect, and gets the newest
/// report at once). Two keep-alive periods: a client that keeps up takes an
/// event in far less.
pub const STREAM_LAG_LIMIT: Duration = Duration::from_secs(2 * KEEP_ALIVE.as_secs());

/// What begins every report event; the report's JSON (one line) follows.
const EVENT_HEAD: &[u8] = b"event: report\ndata: ";
/// What ends every event.
const EVENT_END: &[u8] = b"\n\n";

/// One SSE client's side of the stream.
struct Client {
    /// The latest report, and its changes.
    reports: watch::Receiver<Arc<HealthReport>>,
    /// Turns `true` when the service stops: the stream ends.
    shutdown: watch::Receiver<bool>,
    /// When a comment is due on an idle stream.
    keep_alive: tokio::time::Interval,
    /// The event being sent, if one is.
    sending: Option<Sending>,
    /// This client's place among `max_stream_clients`, given back on drop.
    _place: StreamPlace,
}

/// What is left to send of one report event.
struct Sending {
    /// The rest of the report's JSON: a view of the report's one shared copy.
    json: Bytes,
    /// When the event began, to tell a client too far behind.
    began: tokio::time::Instant,
}

impl Client {
    /// The next bytes to send, or `None` when the stream ends (the service
    /// stops, or the client is too far behind).
    async fn next_piece(&mut self) -> Option<Bytes> {
        if let Some(sending) = &mut self.sending {
            if sending.began.elapsed() > STREAM_LAG_LIMIT {
                tracing::debug!(
                    lag_limit = ?STREAM_LAG_LIMIT,
                    "ended an SSE stream: the client took too long to take one event"
                );
                return None;
            }
            if sending.json.is_empty() {
                self.sending = None;
                return Some(Bytes::from_static(EVENT_END));
            }
            let piece = sending.json.split_to(sending.json.len().min(EVENT_PIECE));
            return Some(piece);
        }
        tokio::select! {
            changed = self.reports.changed() => match changed {
                Ok(()) => {
                    let json = ReportJson::bytes(self.reports.borrow_and_update().clone());
                    if EVENT_HEAD.len() + json.len() + EVENT_END.len() <= EVENT_PIECE {
                        // A small report goes out whole, in one chunk.
                        return Some(Bytes::from([EVENT_HEAD, &json, EVENT_END].concat()));
                    }
                    self.sending = Some(Sending {
                        json,
                        began: tokio::time::Instant::now(),
                    });
                    Some(Bytes::from_static(EVENT_HEAD))
                }
                // The publisher is gone: the service is stopping.
                Err(_) => None,
            },
            _ = self.keep_alive.tick() => Some(Bytes::from_static(b": keep-alive\n\n")),
            _ = self.shutdown.wait_for(|stopping| *stopping) => None,
        }
    }
}

/// The `max_stream_clients` places of the SSE stream, across every worker: a
/// semaphore with a permit per place. Cheap to clone.
#[derive(Debug, Clone)]
pub struct StreamPlaces {
    places: Arc<Semaphore>,
    max: usize,
}

impl StreamPlaces {
    /// `max` places, all free.
    pub fn new(max: usize) -> Self {
        Self {
            places: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// How many streams may be open at once (`api.max_stream_clients`).
    pub fn max(&self) -> usize {
        self.max
    }

    /// How many streams are open now.
    pub fn open(&self) -> usize {
        self.max - self.places.available_permits()
    }

    /// A place, if fewer than [`StreamPlaces::max`] streams are open; taken until
    /// dropped. A refusal takes nothing.
    pub fn take(&self) -> Option<StreamPlace> {
        let permit = self.places.clone().try_acquire_owned().ok()?;
        Some(StreamPlace {
            permit: Some(permit),
            places: self.clone(),
        })
    }
}

/// One of the places in the SSE stream, held by a stream for as long as it
/// lives and given back when it is dropped, whatever ends it (the client
/// leaves, the service stops).
#[derive(Debug)]
pub struct StreamPlace {
    permit: Option<OwnedSemaphorePermit>,
    places: StreamPlaces,
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        drop(self.permit.take());
        // Two last clients leaving together may both see every place free:
        // the memory is then given back twice, which is harmless.
        if self.places.open() == 0 {
            give_back_freed_memory();
        }
    }
}

/// Asks the allocator to return the memory it keeps free to the system. glibc
/// keeps what many short-lived buffers freed (stream clients' connections,
/// across every worker thread's arena) for reuse, so without this a burst of
/// clients that left would still count in the service's resident memory.
/// Called when the last stream client leaves: rarely, and off any request.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; it has no precondition.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_run_out_at_the_cap_and_come_back_when_dropped() {
        let places = StreamPlaces::new(3);
        let held: Vec<_> = (0..3).map(|_| places.take()).collect();
        assert!(held.iter().all(Option::is_some));
        assert_eq!(places.open(), 3);
        assert!(places.take().is_none());
        assert_eq!(places.open(), 3, "a refusal takes nothing");
        drop(held);
        assert_eq!(places.open(), 0);
        assert!(places.take().is_some());
    }
}
