//! The response types, for the OpenAPI document (`GET /openapi.json`).
//!
//! The handlers serve the JSON the core rendered; these types describe it, and a
//! test holds the two together: every report the core builds reads back through
//! these types (unknown fields refused) and writes out unchanged.

use actix_web::HttpResponse;
use serde::{Deserialize, Serialize};
use utoipa::{OpenApi, ToSchema};

/// `healthy` or `unhealthy`, as Airflow writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    Healthy,
    Unhealthy,
}

/// How a component's live instances are doing together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DetailedStatus {
    /// Every live instance is fine, and there is at least one.
    Healthy,
    /// Some are fine, some are not.
    Degraded,
    /// None is fine, or there is none.
    Down,
}

/// An executor's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Healthy,
    Unhealthy,
    Unknown,
}

/// `metadatabase`: whether the Jobs table could be read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MetadatabaseHealth {
    pub status: HealthStatus,
}

macro_rules! component {
    ($name:ident, $instance:ident, $heartbeat:ident, $what:literal) => {
        #[doc = concat!("One live ", $what, " instance.")]
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $instance {
            pub hostname: Option<String>,
            /// Python's `isoformat()` of a UTC time: `2026-11-29T19:48:48.365305+00:00`.
            #[schema(format = DateTime)]
            pub $heartbeat: Option<String>,
        }

        #[doc = concat!("The ", $what, ", by Airflow's rules (its most recent job), and its live instances.")]
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// Airflow's: `null` when this component never ran (the scheduler is then `unhealthy`).
            pub status: Option<HealthStatus>,
            /// Airflow's: the most recent job's heartbeat, alive or not.
            #[schema(format = DateTime)]
            pub $heartbeat: Option<String>,
            pub detailed_status: DetailedStatus,
            pub instances: Vec<$instance>,
        }
    };
}

component!(
    SchedulerHealth,
    SchedulerInstance,
    latest_scheduler_heartbeat,
    "scheduler"
);
component!(
    TriggererHealth,
    TriggererInstance,
    latest_triggerer_heartbeat,
    "triggerer"
);
component!(
    DagProcessorHealth,
    DagProcessorInstance,
    latest_dag_processor_heartbeat,
    "DAG processor"
);

/// One live executor row: one executor, supervised from one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutorInstance {
    /// As Airflow names it: `CeleryExecutor`, `alias:CeleryExecutor`.
    pub executor: Option<String>,
    /// What counts as the instance: for Celery the broker, without credentials.
    pub instance: Option<String>,
    /// The host of the supervising process.
    pub hostname: Option<String>,
    #[schema(format = DateTime)]
    pub latest_executor_heartbeat: Option<String>,
    pub health: Verdict,
    /// Why, for `unhealthy`.
    pub reason: Option<String>,
    /// When the verdict was made.
    #[schema(format = DateTime)]
    pub checked_at: Option<String>,
}

/// Overseer's addition: every supervised executor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutorHealth {
    /// `healthy` when at least one live row exists and none says `unhealthy`.
    pub status: HealthStatus,
    #[schema(format = DateTime)]
    pub latest_executor_heartbeat: Option<String>,
    pub detailed_status: DetailedStatus,
    pub instances: Vec<ExecutorInstance>,
}

/// `GET /api/v2/monitor/health`: Airflow 3.3's fields, plus `detailed_status`,
/// `instances` and the `executor` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthResponse {
    pub metadatabase: MetadatabaseHealth,
    pub scheduler: SchedulerHealth,
    pub triggerer: TriggererHealth,
    pub dag_processor: DagProcessorHealth,
    /// Absent when no executor row is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<ExecutorHealth>,
}

/// `GET /api/v2/version`, in the shape of Airflow's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionInfo {
    /// Overseer's version.
    pub version: String,
    /// The commit it was built from, when known.
    pub git_version: Option<String>,
}

/// The version body, rendered once.
static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    serde_json::to_string(&VersionInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        git_version: None,
    })
    .expect("the version serializes")
});

/// Overseer's version: a static answer, also the ceiling the health endpoint's
/// throughput is measured against.
#[utoipa::path(
    get,
    tag = "monitor",
    path = "/api/v2/version",
    responses((status = 200, description = "Overseer's version", body = VersionInfo))
)]
pub async fn version() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(VERSION.as_str())
}

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
        crate::metrics::metrics,
        version
    ),
    components(schemas(HealthResponse, crate::errors::ErrorBody))
)]
pub struct ApiDoc;

/// `GET /openapi.json`.
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(ApiDoc::openapi().to_json().unwrap_or_else(|_| "{}".into()))
}
