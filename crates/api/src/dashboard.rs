//! `GET /`: a page for people. Self-contained (no CDN: it works offline) and
//! embedded in the binary; it follows the SSE stream, so verdict changes show
//! without a reload.

use actix_web::HttpResponse;
use actix_web::http::header;

/// The page, as it ships.
pub const PAGE: &str = include_str!("../assets/dashboard.html");

/// `GET /`.
pub async fn page() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
        ))
        .body(PAGE)
}
