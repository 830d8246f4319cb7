//! The health report: what `/api/v2/monitor/health` answers, built by pure
//! functions from job rows, thresholds and the time.
//!
//! Airflow 3.3's fields follow Airflow's own rules (`airflow_health.py`,
//! `job.py`): per component the *most recent job* (running first, then latest
//! heartbeat), its heartbeat as `latest_<component>_heartbeat`, and `status`
//! `healthy` when that job is alive (`running`, heartbeat younger than the
//! threshold). With no job the scheduler is `unhealthy`, the triggerer and DAG
//! processor `null`. Overseer adds `detailed_status` and `instances` per
//! component, and the `executor` entry.
//!
//! This module is the report's JSON model (the `executor` entry's part, in
//! [`executor`]); [`rules`] fills it (each rule names
//! the field it fills): the thresholds, Airflow's liveness test, and
//! [`HealthReport::build`] / [`HealthReport::assemble`]. The tests are in
//! `report/tests.rs`.
//!
//! The report's types are its JSON: serde writes them (field order, `null`s and
//! Python's timestamps as Airflow has them) once per report, and utoipa describes
//! the same types for the API's OpenAPI document, so the two cannot drift.

use chrono::{DateTime, Utc};
use serde::{Serialize, Serializer};
use utoipa::ToSchema;

mod bounded;
mod executor;
mod rules;

pub use bounded::{ENTRY_BUDGET, LIST_CAPS, ShownCanary, ShownDetail, ShownQueuedTasks};
pub use executor::{ExecutorEntry, ExecutorHealthKind, ExecutorInstance, RowExtras};
pub use rules::{JobRows, Thresholds, is_alive, type_index};

/// `healthy` or `unhealthy`, as Airflow writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Healthy,
    Unhealthy,
}

impl Status {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Unhealthy => "unhealthy",
        }
    }

    fn from_ok(ok: bool) -> Self {
        if ok { Self::Healthy } else { Self::Unhealthy }
    }
}

/// How a component's live instances are doing together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DetailedStatus {
    /// Every live instance is fine (and there is at least one).
    Healthy,
    /// Some live instances are fine, some are not.
    Degraded,
    /// None is fine, or there is none.
    Down,
    /// Executors only: there are live instances, and none has a verdict (each
    /// is `unknown`): nothing says they are fine. (`status` stays `healthy`, as
    /// `unknown` never counts as dead.)
    Unknown,
}

impl DetailedStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Degraded => "degraded",
            Self::Down => "down",
            Self::Unknown => "unknown",
        }
    }

    fn from_counts(fine: usize, total: usize) -> Self {
        match (fine, total) {
            (0, _) => Self::Down,
            (f, t) if f == t => Self::Healthy,
            _ => Self::Degraded,
        }
    }
}

/// One top-level entry of the report, by its key: what a probe may judge alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    Metadatabase,
    Scheduler,
    Triggerer,
    DagProcessor,
    Executor,
}

impl Component {
    /// Every entry, in the report's order.
    pub const ALL: [Component; 5] = [
        Self::Metadatabase,
        Self::Scheduler,
        Self::Triggerer,
        Self::DagProcessor,
        Self::Executor,
    ];

    /// The entry's key in the JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Metadatabase => "metadatabase",
            Self::Scheduler => "scheduler",
            Self::Triggerer => "triggerer",
            Self::DagProcessor => "dag_processor",
            Self::Executor => "executor",
        }
    }
}

impl std::str::FromStr for Component {
    type Err = String;

    /// A key of the report; the error lists the keys.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                let keys: Vec<&str> = Self::ALL.iter().map(|c| c.as_str()).collect();
                format!(
                    "unknown component {s:?} (expected one of: {})",
                    keys.join(", ")
                )
            })
    }
}

/// `metadatabase`: whether the Jobs table could be read. (In Rust the report
/// holds the `Status` alone; this is the object the JSON wraps it in.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MetadatabaseEntry {
    /// `unhealthy` when the last read of the Jobs table failed.
    pub status: Status,
}

/// One of Airflow's components (scheduler, triggerer, DAG processor): its entry
/// and the type of its live instances. Airflow names the heartbeat after the
/// component (`latest_scheduler_heartbeat`, ...), so each component has types
/// of its own; in Rust the field is `latest_heartbeat` in all three.
///
/// The key and the docs are taken as `tt`, not `literal`: utoipa does not see
/// through the invisible group a `literal` fragment is wrapped in, and would
/// name the property `latest_heartbeat` where serde writes the key.
macro_rules! component_entry {
    (
        $(#[doc = $entry_doc:tt])* $entry:ident,
        $(#[doc = $instance_doc:tt])* $instance:ident,
        $heartbeat:tt
    ) => {
        $(#[doc = $instance_doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $instance {
            /// The host its process runs on.
            pub hostname: Option<String>,
            /// Its latest heartbeat, as Python's `isoformat()` writes it:
            /// `2026-11-29T19:48:48.365305+00:00`.
            #[serde(rename = $heartbeat, serialize_with = "optional_timestamp")]
            #[schema(value_type = Option<String>, format = DateTime)]
            pub latest_heartbeat: Option<DateTime<Utc>>,
        }

        $(#[doc = $entry_doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $entry {
            /// Airflow's: `healthy` when the most recent job is alive; `null`
            /// when a triggerer or DAG processor never ran (a scheduler that
            /// never ran is `unhealthy`).
            pub status: Option<Status>,
            /// Airflow's: the most recent job's heartbeat, alive or not.
            #[serde(rename = $heartbeat, serialize_with = "optional_timestamp")]
            #[schema(value_type = Option<String>, format = DateTime)]
            pub latest_heartbeat: Option<DateTime<Utc>>,
            /// Overseer's: how the live instances are doing together.
            pub detailed_status: DetailedStatus,
            /// The live instances, by host name.
            pub instances: Vec<$instance>,
        }

        impl From<ComponentParts> for $entry {
            fn from(parts: ComponentParts) -> Self {
                Self {
                    status: parts.status,
                    latest_heartbeat: parts.latest_heartbeat,
                    detailed_status: DetailedStatus::from_counts(
                        parts.instances.len(),
                        parts.instances.len(),
                    ),
                    instances: parts
                        .instances
                        .into_iter()
                        .map(|(hostname, latest_heartbeat)| $instance {
                            hostname,
                            latest_heartbeat,
                        })
                        .collect(),
                }
            }
        }
    };
}

component_entry! {
    /// `scheduler`: by Airflow's rules (its most recent job), and its live instances.
    SchedulerEntry,
    /// One live scheduler: a running row with a heartbeat younger than its threshold.
    SchedulerInstance,
    "latest_scheduler_heartbeat"
}

component_entry! {
    /// `triggerer`: by Airflow's rules (its most recent job), and its live instances.
    TriggererEntry,
    /// One live triggerer: a running row with a heartbeat younger than its threshold.
    TriggererInstance,
    "latest_triggerer_heartbeat"
}

component_entry! {
    /// `dag_processor`: by Airflow's rules (its most recent job), and its live instances.
    DagProcessorEntry,
    /// One live DAG processor: a running row with a heartbeat younger than its threshold.
    DagProcessorInstance,
    "latest_dag_processor_heartbeat"
}

/// What [`HealthReport::assemble_with`] finds for one of Airflow's components, before
/// it takes its component's type.
struct ComponentParts {
    status: Option<Status>,
    latest_heartbeat: Option<DateTime<Utc>>,
    /// `(hostname, latest_heartbeat)` of each live instance, sorted by host.
    instances: Vec<(Option<String>, Option<DateTime<Utc>>)>,
}

/// The whole report, immutable once built, with its JSON rendered once: the
/// body of `GET /api/v2/monitor/health`. Airflow 3.3's fields, plus
/// `detailed_status` and `instances` per component and the `executor` entry.
//
// The JSON (serde) and the OpenAPI schema (utoipa) both come from this type and
// its parts; their docs are the document's descriptions.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthReport {
    /// Whether the Jobs table could be read (written as `{"status": ...}`).
    #[serde(serialize_with = "metadatabase_entry")]
    #[schema(value_type = MetadatabaseEntry)]
    pub metadatabase: Status,
    /// Airflow's scheduler entry, by Airflow's rules.
    pub scheduler: SchedulerEntry,
    /// Airflow's triggerer entry (`status` null when none ever ran).
    pub triggerer: TriggererEntry,
    /// Airflow's DAG processor entry (`status` null when none ever ran).
    pub dag_processor: DagProcessorEntry,
    /// Present when some executor row has no `end_date`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor: Option<ExecutorEntry>,
    /// When the report was built.
    #[serde(skip)]
    pub generated_at: DateTime<Utc>,
    /// The JSON, rendered by [`HealthReport::render`] (which `build` calls).
    #[serde(skip)]
    json: String,
}

impl HealthReport {
    /// Renders the JSON of an [assembled](Self::assemble) report, its
    /// `executor` entry within [`ENTRY_BUDGET`] ([`ExecutorEntry::bound`]).
    pub fn render(&mut self) {
        if let Some(entry) = &mut self.executor {
            entry.bound(ENTRY_BUDGET);
        }
        self.json = serde_json::to_string(&*self).expect("a report always serializes");
    }

    /// True when both reports say the same (their JSON would be the same),
    /// whenever each was built.
    pub fn same_content(&self, other: &Self) -> bool {
        self.metadatabase == other.metadatabase
            && self.scheduler == other.scheduler
            && self.triggerer == other.triggerer
            && self.dag_processor == other.dag_processor
            && self.executor == other.executor
    }

    /// The JSON body of `/api/v2/monitor/health`, rendered when the report was built.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// True when any component says `unhealthy` (`null` does not count).
    pub fn any_unhealthy(&self) -> bool {
        self.unhealthy_among(&Component::ALL)
    }

    /// True when one of `components` says `unhealthy` (`null`, and an absent
    /// `executor` entry, do not count): what a probe that judges only those
    /// asks (`?strict=true&component=executor`).
    pub fn unhealthy_among(&self, components: &[Component]) -> bool {
        components
            .iter()
            .any(|component| self.status_of(*component) == Some(Status::Unhealthy))
    }

    /// A component's `status`, as the JSON writes it (`None`: `null`, or no entry).
    pub fn status_of(&self, component: Component) -> Option<Status> {
        match component {
            Component::Metadatabase => Some(self.metadatabase),
            Component::Scheduler => self.scheduler.status,
            Component::Triggerer => self.triggerer.status,
            Component::DagProcessor => self.dag_processor.status,
            Component::Executor => self.executor.as_ref().and_then(|e| e.status),
        }
    }
}

pub use crate::timestamp::airflow_timestamp;

/// Writes an optional time as [`airflow_timestamp`] does, or `null`.
fn optional_timestamp<S: Serializer>(
    at: &Option<DateTime<Utc>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => serializer.serialize_str(&airflow_timestamp(*at)),
        None => serializer.serialize_none(),
    }
}

/// Writes the metadatabase's status as Airflow does: `{"status": ...}`.
fn metadatabase_entry<S: Serializer>(status: &Status, serializer: S) -> Result<S::Ok, S::Error> {
    MetadatabaseEntry { status: *status }.serialize(serializer)
}

#[cfg(test)]
mod tests;
