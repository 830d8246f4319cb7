//! `GET /api/v2/monitor/health/history`: every change of an executor's verdict
//! state, newest first, from Overseer's history table.
//!
//! Unlike the other routes, this one reads the database: through the
//! [`HistoryReader`] the embedder gives [`ApiState::with_history`] (a pool of
//! its own, each read bounded by [`overseer_core::history::READ_TIMEOUT`]). A
//! database that fails or does not answer is 503, a bad filter 400, both in
//! Airflow's error shape; without a reader the route answers 503 saying so.

use actix_web::http::{StatusCode, header};
use actix_web::web::{Data, Query};
use actix_web::{HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use overseer_core::history::{DEFAULT_LIMIT, HistoryFilter, MAX_LIMIT, Transition};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::{ApiState, errors};

/// The query the route takes; every filter is optional.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Only this executor's transitions, by its configured name
    /// (`CeleryExecutor`, `alias:CeleryExecutor`).
    #[param(required = false)]
    pub executor: Option<String>,
    /// Only this instance's (for Celery the broker, without credentials).
    #[param(required = false)]
    pub instance: Option<String>,
    /// Only transitions at or after this time (RFC 3339: `2026-11-29T19:48:48Z`).
    #[param(required = false, value_type = Option<String>, format = DateTime)]
    pub since: Option<String>,
    /// At most this many transitions (default 100, at most 1000).
    #[param(required = false, value_type = Option<u64>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
}

/// The answer: the transitions, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct HistoryPage {
    /// Newest first (by `at`, then by the order they were written).
    pub transitions: Vec<Transition>,
}

impl HistoryQuery {
    /// The filter this query asks for, or what is wrong with it.
    pub fn filter(&self) -> Result<HistoryFilter, String> {
        let since = self
            .since
            .as_deref()
            .map(|text| {
                DateTime::parse_from_rfc3339(text)
                    .map(|at| at.with_timezone(&Utc))
                    .map_err(|e| format!("since: {text:?} is not an RFC 3339 time ({e})"))
            })
            .transpose()?;
        let limit =
            errors::whole_number("limit", self.limit.as_deref(), DEFAULT_LIMIT, 1..=MAX_LIMIT)?;
        Ok(HistoryFilter {
            executor: self.executor.clone(),
            instance: self.instance.clone(),
            since,
            limit,
        })
    }
}

/// Every change of an executor's verdict state (`healthy`, `unhealthy`,
/// `unknown`), and every change of cause while it stays `unhealthy` (`from`
/// and `to` both `unhealthy`), newest first, from Overseer's history table.
#[utoipa::path(
    get,
    tag = "monitor",
    path = "/api/v2/monitor/health/history",
    params(HistoryQuery),
    responses(
        (status = 200, description = "The transitions, newest first", body = HistoryPage),
        (status = 400, description = "A bad filter: since not RFC 3339, limit not within 1-1000", body = crate::errors::ErrorBody),
        (status = 503, description = "The database cannot be read (or answered too late), or this service keeps no history", body = crate::errors::ErrorBody),
    )
)]
pub async fn history(
    state: Data<ApiState>,
    query: Query<HistoryQuery>,
    _: HttpRequest,
) -> HttpResponse {
    let filter = match query.filter() {
        Ok(filter) => filter,
        Err(problem) => return errors::invalid_query(&problem),
    };
    // No row holds a NUL (and Postgres refuses one in text): such a filter
    // matches nothing, without asking the database.
    let nul = |value: &Option<String>| value.as_deref().is_some_and(|v| v.contains('\0'));
    if nul(&filter.executor) || nul(&filter.instance) {
        return HttpResponse::build(StatusCode::OK)
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .json(HistoryPage {
                transitions: Vec::new(),
            });
    }
    let Some(reader) = &state.history else {
        return errors::unavailable(
            "The executor history is not available: this service was started without a history reader",
        );
    };
    match reader.transitions(&filter).await {
        Ok(transitions) => HttpResponse::build(StatusCode::OK)
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .json(HistoryPage { transitions }),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the executor history");
            errors::unavailable(&format!("cannot read the executor history: {e}"))
        }
    }
}
