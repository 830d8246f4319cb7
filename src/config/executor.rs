//! One `[[executors]]` entry ([`ExecutorConfig`]): its name as Airflow's
//! `[core] executor` writes it, and its keys with their defaults.
//!
//! An entry is `Class`, `alias:Class`, or a module path to a custom class
//! (`my.company.MyExecutor`, `alias:my.company.MyExecutor`); a team's executor
//! (Airflow 3.3's `[core] multi_team`) is written `team=Class`, as the team's
//! part of Airflow's list. The full entry, as written, is the `executor_class`
//! of the executor's row, so rows, the JSON, `/metrics` and alerts name the team.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration;
use crate::secret::SecretUrl;

/// The executors Airflow 3 knows by their short name.
pub const CORE_EXECUTORS: [&str; 3] = ["LocalExecutor", "CeleryExecutor", "KubernetesExecutor"];

/// The longest executor name (or `alias:Class`) the Jobs table's
/// `executor_class` column, a `varchar(500)`, holds.
pub const MAX_EXECUTOR_NAME: usize = 500;

/// An executor name, split as Airflow splits it. Configuration holds names only
/// in this form: parsed once, as they are read, so no later step meets a bad one.
/// It is written back (`overseer config`, the rows' `executor_class`) as
/// [`fmt::Display`] shows it: `alias:Class`, trimmed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ExecutorName {
    /// The team before `=`, for a team's executor.
    pub team: Option<String>,
    /// The alias before `:`, if any.
    pub alias: Option<String>,
    /// The class: a core short name or a dotted module path.
    pub class: String,
}

/// Providers' executors Overseer knows by their short name too, beside
/// Airflow's [`CORE_EXECUTORS`] (Airflow 3.3.2 itself loads them only by module
/// path, `airflow.providers.edge3.executors.EdgeExecutor`).
pub const PROVIDER_EXECUTORS: [&str; 1] = ["EdgeExecutor"];

/// Which health check an executor gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorKind {
    /// `CeleryExecutor`: the broker is the instance, and it is checked.
    Celery,
    /// `EdgeExecutor` (`apache-airflow-providers-edge3`): its workers and jobs
    /// are read from Airflow's database, the edge fleet is the instance.
    Edge,
    /// Any other executor: checked by its `check_command` or `check_url` when it
    /// has one, else its verdict stays `unknown`.
    Unchecked,
}

impl ExecutorName {
    /// The check this executor gets, from its class (a module path ending in
    /// `.CeleryExecutor` is Celery too, one ending in `.EdgeExecutor` Edge).
    pub fn kind(&self) -> ExecutorKind {
        let class_name = self.class.rsplit('.').next().unwrap_or(&self.class);
        match class_name {
            "CeleryExecutor" => ExecutorKind::Celery,
            "EdgeExecutor" => ExecutorKind::Edge,
            _ => ExecutorKind::Unchecked,
        }
    }
}

impl ExecutorName {
    /// The module path Airflow 3.3.2 loads for this entry
    /// (`ExecutorLoader._get_executor_names`): a core short name stands for its
    /// module, anything else is the path as written. Airflow tells executors
    /// apart by it: two entries of one team with the same path are the same
    /// executor configured twice.
    pub fn module_path(&self) -> &str {
        match self.class.as_str() {
            "LocalExecutor" => "airflow.executors.local_executor.LocalExecutor",
            "CeleryExecutor" => "airflow.providers.celery.executors.celery_executor.CeleryExecutor",
            "KubernetesExecutor" => {
                "airflow.providers.cncf.kubernetes.executors.kubernetes_executor.KubernetesExecutor"
            }
            path => path,
        }
    }
}

/// The first character of `text` a name may not hold: a control character,
/// or one that reorders or hides text (bidirectional overrides and isolates,
/// marks, zero-width characters): written raw into a log line or a terminal,
/// it would make the line read as something else.
pub fn unsafe_char(text: &str) -> Option<char> {
    text.chars().find(|&c| {
        c.is_control()
            || matches!(c,
                '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
    })
}

impl FromStr for ExecutorName {
    type Err = String;

    fn from_str(entry: &str) -> Result<Self, String> {
        let entry = entry.trim();
        if let Some(c) = unsafe_char(entry) {
            return Err(format!(
                "executor {entry:?} holds U+{:04X}, a control or bidirectional character, \
                 which a name may not",
                u32::from(c)
            ));
        }
        let length = entry.chars().count();
        if length > MAX_EXECUTOR_NAME {
            return Err(format!(
                "is {length} characters long; job.executor_class holds at most {MAX_EXECUTOR_NAME}"
            ));
        }
        let (team, entry) = match entry.split_once('=') {
            Some((team, rest)) => (Some(check_team(team.trim())?), rest.trim()),
            None => (None, entry),
        };
        let (alias, class) = match entry.split_once(':') {
            Some((alias, class)) => (Some(alias.trim()), class.trim()),
            None => (None, entry),
        };
        if class.contains(':') {
            return Err(format!(
                "executor {entry:?} has more than one ':' (expected alias:Class)"
            ));
        }
        if alias == Some("") {
            return Err(format!("executor {entry:?} has an empty alias before ':'"));
        }
        if class.is_empty() {
            return Err(format!("executor {entry:?} names no class"));
        }
        if class.contains(char::is_whitespace) {
            return Err(format!("executor {entry:?} has a space in its class name"));
        }
        let is_module_path = class.contains('.') && class.split('.').all(|part| !part.is_empty());
        if !is_module_path
            && !CORE_EXECUTORS.contains(&class)
            && !PROVIDER_EXECUTORS.contains(&class)
        {
            return Err(format!(
                "unknown executor {class:?}: expected one of {} or a module path such as my.module.MyExecutor",
                CORE_EXECUTORS.join(", ")
            ));
        }
        if let Some(alias) = alias
            && CORE_EXECUTORS.contains(&alias)
        {
            return Err(format!(
                "executor {entry:?} uses the core executor name {alias:?} as an alias"
            ));
        }
        Ok(Self {
            team,
            alias: alias.map(str::to_owned),
            class: class.to_owned(),
        })
    }
}

/// A team's name as Airflow 3.3 accepts one (`airflow teams create`): 3 to 50
/// letters, digits, `-` and `_`.
pub fn check_team(team: &str) -> Result<String, String> {
    let valid = (3..=50).contains(&team.chars().count())
        && team
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if valid {
        Ok(team.to_owned())
    } else {
        Err(format!(
            "team {team:?} is not a team name Airflow accepts (3 to 50 letters, digits, '-' and '_')"
        ))
    }
}

impl TryFrom<String> for ExecutorName {
    type Error = String;

    fn try_from(entry: String) -> Result<Self, String> {
        entry.parse()
    }
}

impl From<ExecutorName> for String {
    fn from(name: ExecutorName) -> Self {
        name.to_string()
    }
}

impl fmt::Display for ExecutorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(team) = &self.team {
            write!(f, "{team}=")?;
        }
        match &self.alias {
            Some(alias) => write!(f, "{alias}:{}", self.class),
            None => f.write_str(&self.class),
        }
    }
}

/// One `[[executors]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorConfig {
    /// As Airflow names it: `CeleryExecutor`, `alias:CeleryExecutor`, or a module path.
    pub name: ExecutorName,
    /// Celery only: the broker (Redis or RabbitMQ; `;` separates a failover list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_url: Option<SecretUrl>,
    /// Celery only: the result backend (`[celery] result_backend`), asked at
    /// each poll: `redis://` (PING), `db+...` (SELECT 1); `rpc://` needs
    /// nothing more than the broker; other backends are not checked. Unset,
    /// Airflow uses its own database, which Overseer reads itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_backend: Option<SecretUrl>,
    /// Celery only: the queues whose depth is reported.
    #[serde(default = "default_queues")]
    pub queues: Vec<String>,
    /// Celery only: also ping the workers over Celery's remote control.
    #[serde(default)]
    pub worker_ping: bool,
    /// Celery only: follow the workers' own heartbeats (Celery's `worker`
    /// events, sent by every worker unless `--without-heartbeat`): each worker's
    /// state, tasks and load in the detail and `/metrics`, and `min_workers`
    /// without the ping. `false` turns it off.
    #[serde(default = "default_true")]
    pub worker_events: bool,
    /// Celery only: fewer live workers makes the verdict unhealthy: those
    /// answering the ping with `worker_ping`, else those heard by their
    /// heartbeats.
    #[serde(default)]
    pub min_workers: u32,
    /// Celery only: the tasks each worker runs at once, as Airflow starts it
    /// (`[celery] worker_concurrency`, 16 by default, or `worker_autoscale`'s
    /// largest): against the tasks its heartbeats say it runs, its free slots
    /// in the detail and `/metrics`, and whether every worker is full
    /// (`max_at_capacity`).
    #[serde(default = "default_worker_concurrency")]
    pub worker_concurrency: u32,
    /// Any executor: how long work may wait before the executor is unhealthy:
    /// task instances in Airflow's `queued` state (when the database holds
    /// Airflow's `task_instance` table), and messages in a queue nobody consumes
    /// or whose depth does not go down. Shorter than Airflow's `[scheduler]
    /// task_queued_timeout` (10 min), so the operator hears first; `0s` turns
    /// these rules off.
    #[serde(default = "default_max_queued_age", with = "duration")]
    pub max_queued_age: Duration,
    /// Any executor, with the plugin's canary DAG installed: how long a canary
    /// task may wait in `queued` for a worker before the executor is
    /// unhealthy; `0s` turns that rule off (a failed canary still counts).
    #[serde(default = "default_canary_max_pickup", with = "duration")]
    pub canary_max_pickup: Duration,
    /// Any executor: Airflow's `[core] parallelism`, the slots each live
    /// scheduler's executor has (Airflow's default, 32).
    #[serde(default = "default_parallelism")]
    pub parallelism: u32,
    /// Any executor: how long every slot may stay taken (task instances
    /// running or queued: `parallelism` times the live schedulers) while
    /// tasks wait in `scheduled`, before the executor is unhealthy; `0s` turns
    /// this rule off.
    #[serde(default = "default_max_at_capacity", with = "duration")]
    pub max_at_capacity: Duration,
    /// Celery only: TLS to the broker whatever the URL's scheme, as Airflow's
    /// `[celery] ssl_active` turns on Celery's `broker_use_ssl` (the certificate is
    /// then always verified).
    #[serde(default, skip_serializing_if = "is_false")]
    pub ssl_active: bool,
    /// Celery only, with `ssl_active`: the client key (a PEM file), `[celery] ssl_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_key: Option<String>,
    /// Celery only, with `ssl_active`: the client certificate (a PEM file), `[celery] ssl_cert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_cert: Option<String>,
    /// Celery only, with `ssl_active`: the CA bundle (a PEM file) that replaces the
    /// system's roots, `[celery] ssl_cacert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_cacert: Option<String>,
    /// Any executor but Celery: a program and its arguments, run at each poll
    /// without a shell ([`overseer_checks::command`]): exit 0 is healthy, 1
    /// unhealthy, anything else unknown. Shown with credential options' values
    /// (`--token s3cret`) and URL passwords masked; the instance is the program alone.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "scrubbed_command"
    )]
    pub check_command: Option<Vec<String>>,
    /// Any executor but Celery: a URL asked with `GET` at each poll
    /// ([`overseer_checks::http`]): 2xx is healthy. It may carry a token, so it
    /// is shown redacted; the instance is the URL without its query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_url: Option<SecretUrl>,
    /// With an `https://` `check_url`: a CA bundle (a PEM file) that replaces
    /// the system's roots, for a probe whose certificate a private CA issued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_cacert: Option<String>,
}

fn is_false(value: &bool) -> bool {
    !value
}

/// `check_command` as `overseer config` shows it: the value of an option that
/// names a credential (`--token s3cret`) and any URL's password masked
/// ([`overseer_checks::command::redacted_argv`]).
fn scrubbed_command<S: serde::Serializer>(
    command: &Option<Vec<String>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    command
        .as_deref()
        .map(overseer_checks::command::redacted_argv)
        .serialize(serializer)
}

impl ExecutorConfig {
    /// An entry for this executor with every other setting at its default.
    pub fn named(name: ExecutorName) -> Self {
        Self {
            name,
            broker_url: None,
            result_backend: None,
            queues: default_queues(),
            worker_ping: false,
            worker_events: true,
            min_workers: 0,
            max_queued_age: default_max_queued_age(),
            canary_max_pickup: default_canary_max_pickup(),
            parallelism: default_parallelism(),
            worker_concurrency: default_worker_concurrency(),
            max_at_capacity: default_max_at_capacity(),
            ssl_active: false,
            ssl_key: None,
            ssl_cert: None,
            ssl_cacert: None,
            check_command: None,
            check_url: None,
            check_cacert: None,
        }
    }

    /// Celery's `broker_use_ssl` as Airflow's Celery provider builds it from
    /// `[celery] ssl_*`: `None` unless `ssl_active`; the certificate always
    /// required; an empty path is no path.
    pub fn broker_use_ssl(&self) -> Option<overseer_celery::TlsOptions> {
        let path = |p: &Option<String>| p.clone().filter(|p| !p.trim().is_empty());
        self.ssl_active.then(|| overseer_celery::TlsOptions {
            cert_reqs: Some(overseer_celery::CertReqs::Required),
            ca_certs: path(&self.ssl_cacert),
            certfile: path(&self.ssl_cert),
            keyfile: path(&self.ssl_key),
            check_hostname: None,
        })
    }
}

/// `max_queued_age` by default: 5 min ([`overseer_core::rules::DEFAULT_MAX_QUEUED_AGE`]).
pub fn default_max_queued_age() -> Duration {
    overseer_core::rules::DEFAULT_MAX_QUEUED_AGE
}

/// `canary_max_pickup` by default: 2 min ([`overseer_core::rules::canary::DEFAULT_MAX_PICKUP`]).
pub fn default_canary_max_pickup() -> Duration {
    overseer_core::rules::canary::DEFAULT_MAX_PICKUP
}

/// `worker_concurrency` by default: Airflow's 16.
pub fn default_worker_concurrency() -> u32 {
    overseer_celery::DEFAULT_WORKER_CONCURRENCY
}

/// `parallelism` by default: Airflow's 32.
pub fn default_parallelism() -> u32 {
    overseer_core::rules::capacity::DEFAULT_PARALLELISM
}

/// `max_at_capacity` by default: 5 min ([`overseer_core::rules::capacity::DEFAULT_MAX_AT_CAPACITY`]).
pub fn default_max_at_capacity() -> Duration {
    overseer_core::rules::capacity::DEFAULT_MAX_AT_CAPACITY
}

/// A switch that is on unless turned off.
pub fn default_true() -> bool {
    true
}

/// Airflow's default queue (`[operators] default_queue`).
pub(crate) fn default_queues() -> Vec<String> {
    vec![overseer_celery::AIRFLOW_DEFAULT_QUEUE.to_owned()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_reorder_or_hide_text_are_refused() {
        for (entry, code) in [
            ("fast\u{202E}rotceX:CeleryExecutor", "202E"),
            ("a\u{2066}b:CeleryExecutor", "2066"),
            ("my.mod\u{200B}ule.Executor", "200B"),
            ("x\u{1b}[31m:LocalExecutor", "001B"),
        ] {
            let err = entry.parse::<ExecutorName>().unwrap_err();
            assert!(
                err.ends_with(&format!(
                    "holds U+{code}, a control or bidirectional character, which a name may not"
                )),
                "{err}"
            );
            // The name itself is shown escaped, never raw.
            assert!(err.is_ascii(), "{err}");
        }
        assert!("équipe:CeleryExecutor".parse::<ExecutorName>().is_ok());
    }

    #[test]
    fn airflow_executor_entries_parse() {
        let celery: ExecutorName = "CeleryExecutor".parse().unwrap();
        assert_eq!(celery.alias, None);
        assert_eq!(celery.kind(), ExecutorKind::Celery);

        let aliased: ExecutorName = "fast:CeleryExecutor".parse().unwrap();
        assert_eq!(aliased.alias.as_deref(), Some("fast"));
        assert_eq!(aliased.to_string(), "fast:CeleryExecutor");
        assert_eq!(aliased.kind(), ExecutorKind::Celery);

        let provider: ExecutorName =
            "airflow.providers.celery.executors.celery_executor.CeleryExecutor"
                .parse()
                .unwrap();
        assert_eq!(provider.kind(), ExecutorKind::Celery);

        for edge in [
            "EdgeExecutor",
            "edge:EdgeExecutor",
            "airflow.providers.edge3.executors.EdgeExecutor",
            "airflow.providers.edge3.executors.edge_executor.EdgeExecutor",
            "remote:airflow.providers.edge3.executors.EdgeExecutor",
        ] {
            let parsed: ExecutorName = edge.parse().unwrap();
            assert_eq!(parsed.kind(), ExecutorKind::Edge, "{edge}");
            assert_eq!(parsed.to_string(), edge);
        }

        let teamed: ExecutorName = "team_a=fast:CeleryExecutor".parse().unwrap();
        assert_eq!(teamed.team.as_deref(), Some("team_a"));
        assert_eq!(teamed.kind(), ExecutorKind::Celery);
        assert_eq!(teamed.to_string(), "team_a=fast:CeleryExecutor");
        assert!("a=CeleryExecutor".parse::<ExecutorName>().is_err());

        assert_eq!(aliased.module_path(), provider.module_path());
        assert_eq!(
            "LocalExecutor"
                .parse::<ExecutorName>()
                .unwrap()
                .module_path(),
            "airflow.executors.local_executor.LocalExecutor"
        );

        let custom: ExecutorName = "team:my.company.BatchExecutor".parse().unwrap();
        assert_eq!(custom.module_path(), "my.company.BatchExecutor");
        assert_eq!(custom.kind(), ExecutorKind::Unchecked);
        assert_eq!(
            "LocalExecutor".parse::<ExecutorName>().unwrap().kind(),
            ExecutorKind::Unchecked
        );
    }

    #[test]
    fn malformed_executor_entries_say_what_is_wrong() {
        for (entry, message) in [
            (
                "CeleryExecuter",
                r#"unknown executor "CeleryExecuter": expected one of LocalExecutor, CeleryExecutor, KubernetesExecutor or a module path such as my.module.MyExecutor"#,
            ),
            (
                ":CeleryExecutor",
                r#"executor ":CeleryExecutor" has an empty alias before ':'"#,
            ),
            ("fast:", r#"executor "fast:" names no class"#),
            (
                "a:b:CeleryExecutor",
                r#"executor "a:b:CeleryExecutor" has more than one ':' (expected alias:Class)"#,
            ),
            (
                "LocalExecutor:CeleryExecutor",
                r#"executor "LocalExecutor:CeleryExecutor" uses the core executor name "LocalExecutor" as an alias"#,
            ),
            (
                "my..Executor",
                r#"unknown executor "my..Executor": expected one of LocalExecutor, CeleryExecutor, KubernetesExecutor or a module path such as my.module.MyExecutor"#,
            ),
        ] {
            assert_eq!(
                entry.parse::<ExecutorName>().unwrap_err(),
                message,
                "{entry}"
            );
        }
    }
}
