//! The vocabulary of Airflow's Jobs table.
//!
//! Each type converts to and from the exact string Airflow stores, so rows that
//! Airflow wrote read back unchanged and rows Overseer writes look like Airflow's own.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::Error;
use crate::reason::Reason;

/// `job.state`: liveness bookkeeping, as Airflow's `JobState` means it.
///
/// It says whether the process behind a row is still running, never whether the
/// executor is healthy: that verdict lives in `executor_health` ([`ExecutorHealth`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// The process is alive and heartbeating.
    Running,
    /// The process ended on purpose.
    Success,
    /// Airflow's state for a job being restarted.
    Restarting,
    /// The process died, or a later start found its row still open.
    Failed,
}

impl JobState {
    /// Every state, in Airflow's order.
    pub const ALL: [JobState; 4] = [Self::Running, Self::Success, Self::Restarting, Self::Failed];

    /// The string stored in `job.state`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Success => "success",
            Self::Restarting => "restarting",
            Self::Failed => "failed",
        }
    }
}

/// `job.job_type`: which kind of Airflow component a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobType {
    /// Airflow's scheduler (`SchedulerJobRunner`).
    SchedulerJob,
    /// Airflow's triggerer (`TriggererJobRunner`).
    TriggererJob,
    /// Airflow's standalone DAG processor (`DagProcessorJobRunner`).
    DagProcessorJob,
    /// An executor supervised by Overseer: the row type Overseer adds.
    ExecutorJob,
}

impl JobType {
    /// Every job type, the three of Airflow first.
    pub const ALL: [JobType; 4] = [
        Self::SchedulerJob,
        Self::TriggererJob,
        Self::DagProcessorJob,
        Self::ExecutorJob,
    ];

    /// The string stored in `job.job_type`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::SchedulerJob => "SchedulerJob",
            Self::TriggererJob => "TriggererJob",
            Self::DagProcessorJob => "DagProcessorJob",
            Self::ExecutorJob => "ExecutorJob",
        }
    }
}

/// An executor's health: the verdict of its health check.
///
/// `Unknown` is the default ([`NOT_CHECKED_YET`]), so an executor without a
/// real check never shows as dead; it always says why it cannot tell.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "health", rename_all = "lowercase")]
pub enum ExecutorHealth {
    /// The check answered and found nothing wrong.
    Healthy,
    /// The check found a fault, or did not answer in time.
    Unhealthy {
        /// Why, in plain words for an operator: sanitised when made.
        reason: Reason,
    },
    /// The check cannot tell, or there is none, or none has answered yet.
    Unknown {
        /// Why not (`not checked yet`, `no health check for KubernetesExecutor`,
        /// `TLS without verification is not checked over AMQP`): sanitised when made.
        reason: Reason,
    },
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
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| Error::UnexpectedValue {
                column: "executor_health",
                value: s.to_owned(),
            })
    }
}

/// The reason of a verdict no check has given yet.
pub const NOT_CHECKED_YET: &str = "not checked yet";

impl Default for ExecutorHealth {
    /// `unknown: not checked yet`.
    fn default() -> Self {
        Self::unknown(NOT_CHECKED_YET)
    }
}

impl ExecutorHealth {
    /// An `Unhealthy` verdict with its reason (text is sanitised here).
    pub fn unhealthy(reason: impl Into<Reason>) -> Self {
        Self::Unhealthy {
            reason: reason.into(),
        }
    }

    /// An `Unknown` verdict with its reason (text is sanitised here).
    pub fn unknown(reason: impl Into<Reason>) -> Self {
        Self::Unknown {
            reason: reason.into(),
        }
    }

    /// True for `healthy`.
    pub const fn is_healthy(&self) -> bool {
        matches!(self, Self::Healthy)
    }

    /// True for `unknown`, whatever its reason.
    pub const fn is_unknown(&self) -> bool {
        matches!(self, Self::Unknown { .. })
    }

    /// The string stored in `job.executor_health`: its [`ExecutorHealthKind`]'s.
    pub const fn as_str(&self) -> &'static str {
        ExecutorHealthKind::of(self).as_str()
    }

    /// The reason stored in `job.executor_health_reason`: `unhealthy`'s and
    /// `unknown`'s; `healthy` has none.
    pub fn reason(&self) -> Option<&str> {
        self.cause().map(Reason::as_str)
    }

    /// [`Self::reason`], typed.
    pub fn cause(&self) -> Option<&Reason> {
        match self {
            Self::Unhealthy { reason } | Self::Unknown { reason } => Some(reason),
            Self::Healthy => None,
        }
    }

    /// What `executor_health_reason` holds, and what the report and the
    /// plugin show as the instance's `reason`: the verdict's reason, or, for
    /// a healthy verdict, the note its check gave beside it. The one place
    /// this rule is written (the plugin's copy is held to it by
    /// `entry_cases.json`).
    pub fn shown<'a>(&'a self, note: Option<&'a Reason>) -> Option<&'a Reason> {
        match self {
            Self::Healthy => note,
            other => other.cause(),
        }
    }

    /// Rebuilds a verdict from the two columns it is stored in. An `unknown`
    /// without a reason is a row no check has answered for yet (or one an
    /// older writer left): `not checked yet`.
    pub fn from_columns(health: &str, reason: Option<&str>) -> Result<Self, Error> {
        match health {
            "healthy" => Ok(Self::Healthy),
            "unhealthy" => Ok(Self::unhealthy(reason.unwrap_or_default())),
            "unknown" => Ok(Self::unknown(reason.unwrap_or(NOT_CHECKED_YET))),
            other => Err(Error::UnexpectedValue {
                column: "executor_health",
                value: other.to_owned(),
            }),
        }
    }
}

macro_rules! string_forms {
    ($ty:ty, $column:literal) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = Error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL
                    .into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| Error::UnexpectedValue {
                        column: $column,
                        value: s.to_owned(),
                    })
            }
        }
    };
}

string_forms!(JobState, "state");
string_forms!(JobType, "job_type");

impl fmt::Display for ExecutorHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unhealthy { reason } => write!(f, "unhealthy: {reason}"),
            Self::Unknown { reason } => write!(f, "unknown: {reason}"),
            Self::Healthy => f.write_str("healthy"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_states_round_trip_through_airflow_strings() {
        for (state, text) in [
            (JobState::Running, "running"),
            (JobState::Success, "success"),
            (JobState::Restarting, "restarting"),
            (JobState::Failed, "failed"),
        ] {
            assert_eq!(state.to_string(), text);
            assert_eq!(text.parse::<JobState>().unwrap(), state);
        }
        let err = "queued".parse::<JobState>().unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"job table: state has unexpected value "queued""#
        );
    }

    #[test]
    fn job_types_round_trip_through_airflow_strings() {
        for (ty, text) in [
            (JobType::SchedulerJob, "SchedulerJob"),
            (JobType::TriggererJob, "TriggererJob"),
            (JobType::DagProcessorJob, "DagProcessorJob"),
            (JobType::ExecutorJob, "ExecutorJob"),
        ] {
            assert_eq!(ty.to_string(), text);
            assert_eq!(text.parse::<JobType>().unwrap(), ty);
        }
        assert!("LocalTaskJob".parse::<JobType>().is_err());
    }

    #[test]
    fn executor_health_defaults_to_unknown_and_keeps_its_reason() {
        assert_eq!(
            ExecutorHealth::default(),
            ExecutorHealth::unknown("not checked yet")
        );
        assert_eq!(
            ExecutorHealth::from_columns("unknown", None).unwrap(),
            ExecutorHealth::unknown("not checked yet")
        );
        assert_eq!(
            ExecutorHealth::from_columns("unknown", Some("no health check for LocalExecutor"))
                .unwrap(),
            ExecutorHealth::unknown("no health check for LocalExecutor")
        );
        let verdict = ExecutorHealth::unhealthy("broker unreachable");
        assert_eq!(verdict.as_str(), "unhealthy");
        assert_eq!(verdict.reason(), Some("broker unreachable"));
        assert_eq!(
            ExecutorHealth::from_columns("unhealthy", Some("broker unreachable")).unwrap(),
            verdict
        );
        assert_eq!(
            ExecutorHealth::from_columns("healthy", Some("ignored")).unwrap(),
            ExecutorHealth::Healthy
        );
        assert!(ExecutorHealth::from_columns("sick", None).is_err());
    }
}
