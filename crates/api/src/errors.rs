//! JSON error bodies, in the shape Airflow's API (FastAPI) gives them:
//! `{"detail": "..."}`.

use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, error};
use serde::Serialize;
use utoipa::ToSchema;

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

/// A route that exists, with a method it does not take (every route but the
/// stream takes GET and HEAD).
pub async fn method_not_allowed() -> HttpResponse {
    let mut response = json(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
    response
}

/// The event stream takes GET only.
pub async fn stream_method_not_allowed() -> HttpResponse {
    let mut response = json(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static("GET"));
    response
}

/// A query string that does not parse (`?strict=maybe`).
pub fn bad_query(err: error::QueryPayloadError, _: &HttpRequest) -> error::Error {
    let response = json(
        StatusCode::BAD_REQUEST,
        format!("invalid query string: {err}"),
    );
    error::InternalError::from_response(err, response).into()
}
