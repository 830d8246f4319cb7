//! `GET /api/v2/monitor/health/executor/workers` and `.../queues`: every
//! worker and every queue this host's checks saw, paged.
//!
//! The health report's `executor` entry shows only the first few of each
//! (at fault first, [`overseer_core::report::ShownDetail`]) so that it stays
//! small whatever the fleet; these routes go on from there, in the same order,
//! from the same published report (nothing is asked of an actor or the
//! database). Paged as Airflow's own list routes are: `limit` and `offset`,
//! and `total_entries` beside the page.

use std::sync::Arc;

use actix_web::http::header;
use actix_web::web::{Data, Query};
use actix_web::{HttpRequest, HttpResponse};
use overseer_core::HealthReport;
use overseer_core::detail::{Detail, QueueDetail, WorkerDetail};
use overseer_core::report::ExecutorInstance;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::{ApiState, errors};

/// A page's size when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 100;
/// The largest page.
pub const MAX_LIMIT: usize = 1000;
/// The largest offset: past any fleet's end.
pub const MAX_OFFSET: usize = 1_000_000;

/// The query both routes take; every key is optional.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FleetQuery {
    /// Only this executor's, by its configured name (`CeleryExecutor`,
    /// `alias:CeleryExecutor`).
    #[param(required = false)]
    pub executor: Option<String>,
    /// Only this instance's (for Celery the broker, without credentials).
    #[param(required = false)]
    pub instance: Option<String>,
    /// Only the worker (or queue) of this name (`celery@host-a`, `default`).
    #[param(required = false)]
    pub name: Option<String>,
    /// At most this many (default 100, at most 1000).
    #[param(required = false, value_type = Option<u64>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
    /// Skip this many first (default 0, at most 1,000,000).
    #[param(required = false, value_type = Option<u64>, minimum = 0, maximum = 1000000)]
    pub offset: Option<String>,
}

impl FleetQuery {
    /// `(limit, offset)`, or what is wrong with them.
    fn page(&self) -> Result<(usize, usize), String> {
        let limit = errors::whole_number(
            "limit",
            self.limit.as_deref(),
            DEFAULT_LIMIT as u64,
            1..=MAX_LIMIT as u64,
        )?;
        let offset =
            errors::whole_number("offset", self.offset.as_deref(), 0, 0..=MAX_OFFSET as u64)?;
        // Both within `usize` by their bounds.
        Ok((limit as usize, offset as usize))
    }

    /// Whether `instance` is one this query asks for.
    fn matches(&self, instance: &ExecutorInstance) -> bool {
        let named = |wanted: &Option<String>, value: &Option<String>| {
            wanted.is_none() || wanted.as_deref() == value.as_deref()
        };
        named(&self.executor, &instance.executor) && named(&self.instance, &instance.instance)
    }
}

/// One worker, with the executor instance whose check saw it.
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetWorker {
    /// The executor, as Airflow names it.
    pub executor: Option<String>,
    /// Its instance: for Celery the broker, without credentials.
    pub instance: Option<String>,
    /// The worker.
    #[serde(flatten)]
    pub worker: WorkerDetail,
}

/// One page of workers: each executor instance's in turn (as the report
/// lists them), at fault first (gone silent first, stopped cleanly last).
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkerPage {
    /// This page's workers.
    pub workers: Vec<FleetWorker>,
    /// How many workers the query matches, on every page.
    pub total_entries: usize,
}

/// One queue on one broker, with the executor instance whose check read it.
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetQueue {
    /// The executor, as Airflow names it.
    pub executor: Option<String>,
    /// Its instance: for Celery the broker, without credentials.
    pub instance: Option<String>,
    /// The queue.
    #[serde(flatten)]
    pub queue: QueueDetail,
}

/// One page of queues: each executor instance's in turn, at fault first
/// (work waiting that nobody consumes first).
#[derive(Debug, Serialize, ToSchema)]
pub struct QueuePage {
    /// This page's queues.
    pub queues: Vec<FleetQueue>,
    /// How many queues the query matches, on every page.
    pub total_entries: usize,
}

/// One list of a detail's, in the order it is shown.
type List<T> = for<'d> fn(&'d Detail) -> Vec<&'d T>;

/// An item that has a name.
trait Named {
    fn name(&self) -> &str;
}

impl Named for WorkerDetail {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for QueueDetail {
    fn name(&self) -> &str {
        &self.name
    }
}

fn workers_of(detail: &Detail) -> Vec<&WorkerDetail> {
    detail.workers_at_fault_first().unwrap_or_default()
}

/// Each item `list` gives of each instance the query matches (this host's
/// rows: another host's carry no evidence), paired with its instance.
fn items<'a, T: Named + 'a>(
    report: &'a HealthReport,
    query: &'a FleetQuery,
    list: List<T>,
) -> impl Iterator<Item = (&'a ExecutorInstance, &'a T)> + 'a {
    report
        .executor
        .iter()
        .flat_map(|entry| entry.instances.iter())
        .filter(|instance| query.matches(instance))
        .flat_map(move |instance| {
            let detail = instance.detail.as_deref();
            detail
                .map(list)
                .unwrap_or_default()
                .into_iter()
                .filter(|item| query.name.as_deref().is_none_or(|name| item.name() == name))
                .map(move |item| (instance, item))
        })
}

/// The page of `list`'s items the query asks for, and how many there are.
fn page<T: Clone + Named, P>(
    report: &HealthReport,
    query: &FleetQuery,
    list: List<T>,
    make: impl Fn(Option<String>, Option<String>, T) -> P,
) -> Result<(Vec<P>, usize), String> {
    let (limit, offset) = query.page()?;
    // Each list is ordered (sorted) once, and counted from the same pass.
    let all: Vec<_> = items(report, query, list).collect();
    let total = all.len();
    let shown = all
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|(instance, item)| {
            make(
                instance.executor.clone(),
                instance.instance.clone(),
                item.clone(),
            )
        })
        .collect();
    Ok((shown, total))
}

fn answer<T: Serialize>(body: &T) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(body)
}

fn latest(state: &ApiState) -> Arc<HealthReport> {
    state.reports.borrow().clone()
}

/// Every worker this host's checks saw, paged: the health entry shows the
/// first few of each executor instance, these go on in the same order.
#[utoipa::path(
    get,
    tag = "monitor",
    path = "/api/v2/monitor/health/executor/workers",
    params(FleetQuery),
    responses(
        (status = 200, description = "A page of workers", body = WorkerPage),
        (status = 400, description = "limit not within 1-1000, or offset not within 0-1000000", body = crate::errors::ErrorBody),
    )
)]
pub async fn workers(
    state: Data<ApiState>,
    query: Query<FleetQuery>,
    _: HttpRequest,
) -> HttpResponse {
    let report = latest(&state);
    let list: List<WorkerDetail> = workers_of;
    let make = |executor, instance, worker| FleetWorker {
        executor,
        instance,
        worker,
    };
    match page(&report, &query, list, make) {
        Ok((workers, total_entries)) => answer(&WorkerPage {
            workers,
            total_entries,
        }),
        Err(problem) => errors::invalid_query(&problem),
    }
}

/// Every queue this host's checks read, paged: the health entry shows the
/// first few of each executor instance, these go on in the same order.
#[utoipa::path(
    get,
    tag = "monitor",
    path = "/api/v2/monitor/health/executor/queues",
    params(FleetQuery),
    responses(
        (status = 200, description = "A page of queues", body = QueuePage),
        (status = 400, description = "limit not within 1-1000, or offset not within 0-1000000", body = crate::errors::ErrorBody),
    )
)]
pub async fn queues(
    state: Data<ApiState>,
    query: Query<FleetQuery>,
    _: HttpRequest,
) -> HttpResponse {
    let report = latest(&state);
    let list: List<QueueDetail> = Detail::queues_at_fault_first;
    let make = |executor, instance, queue| FleetQueue {
        executor,
        instance,
        queue,
    };
    match page(&report, &query, list, make) {
        Ok((queues, total_entries)) => answer(&QueuePage {
            queues,
            total_entries,
        }),
        Err(problem) => errors::invalid_query(&problem),
    }
}
