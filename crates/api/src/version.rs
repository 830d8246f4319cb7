//! `GET /api/v2/version`, in the shape of Airflow's own: a static answer, also
//! the ceiling the health endpoint's throughput is measured against.

use std::sync::LazyLock;

use actix_web::HttpResponse;
use serde::Serialize;
use utoipa::ToSchema;

/// `GET /api/v2/version`'s body.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionInfo {
    /// Overseer's version.
    pub version: String,
    /// The commit it was built from (`git rev-parse --short HEAD`), or `null`
    /// when it was not built from a git checkout.
    pub git_version: Option<String>,
}

/// The commit this crate was built from, as `build.rs` found it.
pub const GIT_VERSION: Option<&str> = match option_env!("OVERSEER_GIT_VERSION") {
    Some(commit) if !commit.is_empty() => Some(commit),
    _ => None,
};

/// The body, rendered once.
static BODY: LazyLock<String> = LazyLock::new(|| {
    serde_json::to_string(&VersionInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        git_version: GIT_VERSION.map(str::to_owned),
    })
    .expect("the version serializes")
});

/// Overseer's version.
#[utoipa::path(
    get,
    tag = "monitor",
    path = "/api/v2/version",
    responses((status = 200, description = "Overseer's version", body = VersionInfo))
)]
pub async fn version() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(BODY.as_str())
}
