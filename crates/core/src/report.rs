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
//! One room, longer than most: the report's JSON model and the rules that fill
//! it belong together (each rule names the field it fills); the tests are in
//! `report/tests.rs`.
//!
//! The report's types are its JSON: serde writes them (field order, `null`s and
//! Python's timestamps as Airflow has them) once per report, and utoipa describes
//! the same types for the API's OpenAPI document, so the two cannot drift.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Serialize, Serializer};
use utoipa::ToSchema;

use crate::detail::Detail;
use crate::entity::job;
use crate::job::{ExecutorHealth, JobState, JobType};

/// How old a heartbeat may be before its row counts as dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// `[scheduler] scheduler_health_check_threshold`, 30 s by default.
    pub scheduler: Duration,
    /// `[triggerer] triggerer_health_check_threshold`, 30 s by default.
    pub triggerer: Duration,
    /// `[dag_processor] health_check_threshold`, 30 s by default.
    pub dag_processor: Duration,
    /// Executor rows, whichever supervisor wrote them: see [`Self::executor_default`].
    pub executor: Duration,
}

impl Thresholds {
    /// Airflow's grace multiplier for job types without a threshold of their own.
    pub const GRACE_MULTIPLIER: f64 = 2.1;

    /// Airflow's threshold for its own components, and the floor of the executor one.
    pub const COMPONENT_DEFAULT: Duration = Duration::from_secs(30);

    /// Airflow's defaults, with the executor threshold for a heartbeat interval.
    pub fn with_heartbeat_interval(heartbeat_interval: Duration) -> Self {
        Self {
            scheduler: Self::COMPONENT_DEFAULT,
            triggerer: Self::COMPONENT_DEFAULT,
            dag_processor: Self::COMPONENT_DEFAULT,
            executor: Self::executor_default(heartbeat_interval),
        }
    }

    /// The executor threshold when none is configured: 30 s, as Airflow's other
    /// components, or `heartbeat_interval * 2.1` (Airflow's grace multiplier) when
    /// that is longer. The rows of every supervisor on a database are judged by
    /// one threshold, so it must cover the slowest writer, not only this one:
    /// 30 s covers every heartbeat up to 14 s.
    /// Saturates rather than overflows: `Duration::MAX` for a heartbeat too long
    /// to multiply (configuration never gives one: it bounds the interval).
    pub fn executor_default(heartbeat_interval: Duration) -> Duration {
        let graced =
            Duration::try_from_secs_f64(heartbeat_interval.as_secs_f64() * Self::GRACE_MULTIPLIER)
                .unwrap_or(Duration::MAX);
        Self::COMPONENT_DEFAULT.max(graced)
    }

    /// The threshold for a job type.
    pub fn of(&self, job_type: JobType) -> Duration {
        match job_type {
            JobType::SchedulerJob => self.scheduler,
            JobType::TriggererJob => self.triggerer,
            JobType::DagProcessorJob => self.dag_processor,
            JobType::ExecutorJob => self.executor,
        }
    }

    /// The longest threshold: rows older than this are dead whatever their type.
    pub fn longest(&self) -> Duration {
        JobType::ALL
            .into_iter()
            .map(|t| self.of(t))
            .max()
            .unwrap_or_default()
    }
}

/// The rows a report is built from: per job type the most recent job, by
/// Airflow's rule, and every open row that may still be alive.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobRows {
    /// The most recent job of each type, in [`JobType::ALL`]'s order.
    pub most_recent: [Option<job::Model>; 4],
    /// Rows with `state = 'running'`, no `end_date`, and a heartbeat younger than
    /// the longest threshold, of every type and host.
    pub live: Vec<job::Model>,
}

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

/// What [`HealthReport::build`] finds for one of Airflow's components, before
/// it takes its component's type.
struct ComponentParts {
    status: Option<Status>,
    latest_heartbeat: Option<DateTime<Utc>>,
    /// `(hostname, latest_heartbeat)` of each live instance, sorted by host.
    instances: Vec<(Option<String>, Option<DateTime<Utc>>)>,
}

/// The word of an executor's verdict, as `job.executor_health` stores it: an
/// `ExecutorHealth` without its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorHealthKind {
    Healthy,
    Unhealthy,
    Unknown,
}

impl ExecutorHealthKind {
    /// Every state.
    pub const ALL: [ExecutorHealthKind; 3] = [Self::Healthy, Self::Unhealthy, Self::Unknown];

    /// The state of a verdict.
    pub const fn of(health: &ExecutorHealth) -> Self {
        match health {
            ExecutorHealth::Healthy => Self::Healthy,
            ExecutorHealth::Unhealthy { .. } => Self::Unhealthy,
            ExecutorHealth::Unknown { .. } => Self::Unknown,
        }
    }

    /// The string stored in `job.executor_health` and in the history.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Unhealthy => "unhealthy",
            Self::Unknown => "unknown",
        }
    }
}

impl std::str::FromStr for ExecutorHealthKind {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| crate::Error::UnexpectedValue {
                column: "executor_health",
                value: s.to_owned(),
            })
    }
}

/// One live executor row: one executor, supervised from one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ExecutorInstance {
    /// As Airflow names it: `CeleryExecutor`, `alias:CeleryExecutor`.
    pub executor: Option<String>,
    /// What counts as the instance: for Celery the broker, without credentials.
    pub instance: Option<String>,
    /// The host of the supervising process.
    pub hostname: Option<String>,
    /// The row's latest heartbeat.
    #[serde(
        rename = "latest_executor_heartbeat",
        serialize_with = "optional_timestamp"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub latest_heartbeat: Option<DateTime<Utc>>,
    /// The verdict (written as `health` and `reason`).
    #[serde(skip)]
    pub health: ExecutorHealth,
    /// The verdict's word.
    #[serde(rename = "health")]
    health_kind: ExecutorHealthKind,
    /// Why, for `unhealthy` and `unknown`; for `healthy`, what is worth
    /// knowing all the same (a failover broker that does not answer, an edge
    /// worker gone quiet), else `null`. Never a credential.
    pub reason: Option<String>,
    /// When the verdict was made.
    #[serde(serialize_with = "optional_timestamp")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub checked_at: Option<DateTime<Utc>>,
    /// When the current state (`health`, whatever its reason) began: the
    /// latest transition into it in the history; `null` when not known (no
    /// transition recorded, or none read yet). This host's rows as the
    /// aggregator holds them; another host's as of the last full read of the
    /// table (every 10 s).
    #[serde(serialize_with = "optional_timestamp")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub since: Option<DateTime<Utc>>,
    /// The state before the current one; `null` when not known.
    pub previous: Option<ExecutorHealthKind>,
    /// The evidence of this host's latest check (queues, workers, task
    /// instances queued); `null` for another host's row, or when the check
    /// gives none.
    #[schema(value_type = Option<Detail>)]
    pub detail: Option<Arc<Detail>>,
}

/// What the aggregator knows of an executor row beyond what the table holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowExtras {
    /// The evidence of this host's latest check.
    pub detail: Option<Arc<Detail>>,
    /// When the row's current state began.
    pub since: Option<DateTime<Utc>>,
    /// The state before it.
    pub previous: Option<ExecutorHealthKind>,
}

/// The `executor` entry: Overseer's addition, every supervised executor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutorEntry {
    /// `healthy` when at least one live row exists and none says `unhealthy`
    /// (`unknown` never counts as dead).
    pub status: Status,
    /// The most recent executor row's heartbeat, alive or not.
    #[serde(
        rename = "latest_executor_heartbeat",
        serialize_with = "optional_timestamp"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub latest_heartbeat: Option<DateTime<Utc>>,
    /// How the live rows are doing together: `down` when none is fine,
    /// `unknown` when none has a verdict.
    pub detailed_status: DetailedStatus,
    /// The live executor rows, of every host, by host, executor and instance.
    pub instances: Vec<ExecutorInstance>,
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
    /// The JSON, rendered by [`HealthReport::build`].
    #[serde(skip)]
    json: String,
}

impl HealthReport {
    /// Builds the report from rows read at `now` (`metadatabase_ok` false when the
    /// read failed and `rows` are the last ones read), its JSON rendered.
    pub fn build(
        rows: &JobRows,
        metadatabase_ok: bool,
        thresholds: &Thresholds,
        now: DateTime<Utc>,
    ) -> Self {
        let live: Vec<&job::Model> = rows.live.iter().collect();
        let mut report = Self::assemble(
            rows.most_recent.each_ref().map(Option::as_ref),
            &live,
            &|_| None,
            metadatabase_ok,
            thresholds,
            now,
        );
        report.render();
        report
    }

    /// The report's content from rows given by reference (the aggregator's
    /// merge of its own rows over the ones it read), with the evidence `detail`
    /// gives for a row (this host's), without its JSON: compare it with
    /// [`Self::same_content`] and [`Self::render`] it only when it differs from
    /// the one published.
    pub fn assemble(
        most_recent: [Option<&job::Model>; 4],
        live: &[&job::Model],
        detail: &dyn Fn(&job::Model) -> Option<Arc<Detail>>,
        metadatabase_ok: bool,
        thresholds: &Thresholds,
        now: DateTime<Utc>,
    ) -> Self {
        Self::assemble_with(
            most_recent,
            live,
            &|row| RowExtras {
                detail: detail(row),
                ..RowExtras::default()
            },
            metadatabase_ok,
            thresholds,
            now,
        )
    }

    /// [`Self::assemble`], with all that `extras` knows of a row beyond the
    /// table: its evidence, and since when its state holds.
    pub fn assemble_with(
        most_recent: [Option<&job::Model>; 4],
        live: &[&job::Model],
        extras: &dyn Fn(&job::Model) -> RowExtras,
        metadatabase_ok: bool,
        thresholds: &Thresholds,
        now: DateTime<Utc>,
    ) -> Self {
        let alive =
            |row: &job::Model, job_type: JobType| is_alive(row, thresholds.of(job_type), now);
        let of_type = |job_type: JobType| {
            live.iter()
                .copied()
                .filter(move |r| r.job_type.as_deref() == Some(job_type.as_str()))
                .filter(move |r| alive(r, job_type))
        };
        let component = |job_type: JobType, required: bool| {
            let latest = most_recent[type_index(job_type)];
            let status = match latest {
                Some(row) => Some(Status::from_ok(alive(row, job_type))),
                None if required => Some(Status::Unhealthy),
                None => None,
            };
            let mut instances: Vec<(Option<String>, Option<DateTime<Utc>>)> = of_type(job_type)
                .map(|r| (r.hostname.clone(), r.latest_heartbeat))
                .collect();
            instances.sort_by(|a, b| a.0.cmp(&b.0));
            ComponentParts {
                status,
                latest_heartbeat: latest.and_then(|r| r.latest_heartbeat),
                instances,
            }
        };

        let latest_executor = most_recent[type_index(JobType::ExecutorJob)];
        let executor = latest_executor
            .filter(|r| r.end_date.is_none())
            .map(|latest| {
                let mut instances: Vec<ExecutorInstance> = of_type(JobType::ExecutorJob)
                    .map(|r| {
                        let extras = extras(r);
                        let health = r
                            .executor_health()
                            .unwrap_or_else(|e| ExecutorHealth::unhealthy(e.to_string()));
                        ExecutorInstance {
                            executor: r.executor_class.clone(),
                            instance: r.executor_instance.clone(),
                            hostname: r.hostname.clone(),
                            latest_heartbeat: r.latest_heartbeat,
                            health_kind: ExecutorHealthKind::of(&health),
                            reason: match &health {
                                ExecutorHealth::Healthy => r.executor_health_reason.clone(),
                                other => other.reason().map(str::to_owned),
                            },
                            health,
                            checked_at: r.executor_health_checked_at,
                            since: extras.since,
                            previous: extras.previous,
                            detail: extras.detail,
                        }
                    })
                    .collect();
                instances.sort_by(|a, b| {
                    (&a.hostname, &a.executor, &a.instance).cmp(&(
                        &b.hostname,
                        &b.executor,
                        &b.instance,
                    ))
                });
                let fine = instances
                    .iter()
                    .filter(|i| !matches!(i.health, ExecutorHealth::Unhealthy { .. }))
                    .count();
                let judged = instances.iter().any(|i| !i.health.is_unknown());
                let detailed_status = if !instances.is_empty() && !judged {
                    DetailedStatus::Unknown
                } else {
                    DetailedStatus::from_counts(fine, instances.len())
                };
                ExecutorEntry {
                    status: Status::from_ok(!instances.is_empty() && fine == instances.len()),
                    latest_heartbeat: latest.latest_heartbeat,
                    detailed_status,
                    instances,
                }
            });

        Self {
            metadatabase: Status::from_ok(metadatabase_ok),
            scheduler: component(JobType::SchedulerJob, true).into(),
            triggerer: component(JobType::TriggererJob, false).into(),
            dag_processor: component(JobType::DagProcessorJob, false).into(),
            executor,
            generated_at: now,
            json: String::new(),
        }
    }

    /// Renders the JSON of an [assembled](Self::assemble) report.
    pub fn render(&mut self) {
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
            Component::Executor => self.executor.as_ref().map(|e| e.status),
        }
    }
}

/// Airflow's liveness test: `running`, and a heartbeat younger than the threshold.
pub fn is_alive(row: &job::Model, threshold: Duration, now: DateTime<Utc>) -> bool {
    row.state.as_deref() == Some(JobState::Running.as_str())
        && row.latest_heartbeat.is_some_and(|heartbeat| {
            (now - heartbeat)
                .to_std()
                .map_or(true, |age| age < threshold)
        })
}

/// A timestamp as Python's `datetime.isoformat()` writes an aware UTC one, which is
/// what Airflow's JSON carries: `2026-11-29T19:48:48.365305+00:00`, and no
/// fraction at all when the microseconds are zero.
///
/// Written field by field: a report of 50,000 instances writes several of these
/// each, and chrono's `format` parses its pattern again at every call (it was
/// an eighth of the actors' thread at that size).
pub fn airflow_timestamp(at: DateTime<Utc>) -> String {
    use chrono::{Datelike, Timelike};
    use std::fmt::Write;
    let (date, time) = (at.date_naive(), at.time());
    let mut text = String::with_capacity(32);
    let _ = write!(
        text,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        date.year(),
        date.month(),
        date.day(),
        time.hour(),
        time.minute(),
        time.second()
    );
    let micros = at.timestamp_subsec_micros();
    if micros != 0 {
        let _ = write!(text, ".{micros:06}");
    }
    text.push_str("+00:00");
    text
}

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

/// The index of a job type in [`JobType::ALL`].
pub fn type_index(job_type: JobType) -> usize {
    JobType::ALL
        .iter()
        .position(|t| *t == job_type)
        .expect("every job type is in ALL")
}

#[cfg(test)]
mod tests;
