//! JSON error bodies, in the shape Airflow's API (FastAPI) gives them:
//! `{"detail": "..."}`.

use actix_web::http::{ConnectionType, StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, error};
use serde::Serialize;
use utoipa::ToSchema;

use crate::STREAM_RETRY_AFTER;

/// An error's body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub detail: String,
}

fn json(status: StatusCode, detail: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status).json(ErrorBody {
        detail: detail.into(),
    })
}

/// Any route that does not exist.
pub async fn not_found() -> HttpResponse {
    json(StatusCode::NOT_FOUND, "Not Found")
}

/// A route that exists, with a method it does not take (every route takes GET
/// and HEAD, and nothing else).
pub async fn method_not_allowed() -> HttpResponse {
    let mut response = json(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
    response
}

/// One SSE client more than `max_stream_clients`: 503, with `Retry-After` and
/// the plain route to poll instead. The connection is closed, so a refused
/// client holds no descriptor once it has its answer.
pub fn stream_at_capacity(max_stream_clients: usize) -> HttpResponse {
    let mut response = json(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "The health stream is at capacity ({max_stream_clients} clients, \
             api.max_stream_clients); retry later, or poll GET /api/v2/monitor/health"
        ),
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        header::HeaderValue::from(STREAM_RETRY_AFTER.as_secs()),
    );
    response
        .head_mut()
        .set_connection_type(ConnectionType::Close);
    response
}

/// A request with both `Content-Length` and `Transfer-Encoding`: which one
/// frames its body is ambiguous, so a request smuggled in it could be answered
/// on the same connection. Refused, and the connection closed (RFC 9112 6.3).
pub fn both_lengths() -> HttpResponse {
    let mut response = json(
        StatusCode::BAD_REQUEST,
        "a request may not carry both Content-Length and Transfer-Encoding",
    );
    response
        .head_mut()
        .set_connection_type(ConnectionType::Close);
    response
}

/// Whether a request carries both framing headers ([`both_lengths`]).
pub fn has_both_lengths(headers: &header::HeaderMap) -> bool {
    headers.contains_key(header::CONTENT_LENGTH) && headers.contains_key(header::TRANSFER_ENCODING)
}

/// A query string that parses but names something that does not exist
/// (`?component=webserver`).
pub fn invalid_query(problem: &str) -> HttpResponse {
    json(
        StatusCode::BAD_REQUEST,
        format!("invalid query string: {problem}"),
    )
}

/// A route that reads the database, which cannot be read now (or a service
/// that gave the route no database): 503.
pub fn unavailable(detail: &str) -> HttpResponse {
    json(StatusCode::SERVICE_UNAVAILABLE, detail)
}

/// A query string that does not parse (`?strict=maybe`).
pub fn bad_query(err: error::QueryPayloadError, _: &HttpRequest) -> error::Error {
    let response = json(
        StatusCode::BAD_REQUEST,
        format!("invalid query string: {err}"),
    );
    error::InternalError::from_response(err, response).into()
}

/// A query key's whole number: `default` when absent, else `text` read and
/// held to `range`, or, for a one-line 400, what is wrong with it
/// (`limit: "0" is not a whole number from 1 to 1000`).
pub fn whole_number(
    key: &str,
    text: Option<&str>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, String> {
    let Some(text) = text else {
        return Ok(default);
    };
    text.parse::<u64>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            format!(
                "{key}: {text:?} is not a whole number from {} to {}",
                range.start(),
                range.end()
            )
        })
}
