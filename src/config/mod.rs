//! Configuration, in layers, later wins:
//! built-in defaults -> `overseer.toml` -> `OVERSEER_*` environment ->
//! Airflow's own environment ([`airflow`]) -> command-line flags.
//!
//! Loading either gives a complete, checked [`Config`] or one [`ConfigError`]
//! naming the key, where its value came from, and what is wrong with it. Nothing
//! touches the database before loading has succeeded.

pub mod airflow;
pub mod duration;
pub mod executor;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::{Figment, Metadata, Profile, Provider};
use serde::{Deserialize, Serialize};

use crate::secret::{Scrubber, SecretUrl, scrub};
use executor::{ExecutorKind, ExecutorName};
use overseer_core::Thresholds;

/// The longest executor name (or `alias:Class`) the Jobs table's
/// `executor_class` column, a `varchar(500)`, holds.
pub const MAX_EXECUTOR_NAME: usize = 500;

/// The embedded default database: a SQLite file in the working folder, created if missing.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://overseer.db?mode=rwc";
/// Where the HTTP API listens by default: loopback only.
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";
/// The file read when no `--config` or `OVERSEER_CONFIG` names one.
pub const DEFAULT_CONFIG_FILE: &str = "overseer.toml";
/// The prefix of Overseer's own environment variables (`OVERSEER_API__BIND`, ...).
pub const ENV_PREFIX: &str = "OVERSEER_";
/// `OVERSEER_*` variables that are not configuration keys: the config file's
/// path and the logging switches, read by the command line.
const ENV_NOT_KEYS: [&str; 3] = ["CONFIG", "LOG", "LOG_FORMAT"];

/// The whole effective configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the Jobs table lives.
    pub database: DatabaseConfig,
    /// The HTTP API.
    pub api: ApiConfig,
    /// How executors are polled and their rows kept.
    pub supervisor: SupervisorConfig,
    /// Liveness thresholds of Airflow's own components.
    pub thresholds: ThresholdsConfig,
    /// The executors to supervise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub executors: Vec<ExecutorConfig>,
}

impl Config {
    /// A scrubber that knows every credential of this configuration: for log
    /// lines and errors, whatever quotes them.
    pub fn scrubber(&self) -> Scrubber {
        self.executors
            .iter()
            .filter_map(|e| e.broker_url.as_ref())
            .fold(
                Scrubber::default().with_url(&self.database.url),
                Scrubber::with_url,
            )
    }

    /// The liveness thresholds in force, for the report and `jobs check`.
    pub fn thresholds(&self) -> Thresholds {
        Thresholds {
            scheduler: self.thresholds.scheduler,
            triggerer: self.thresholds.triggerer,
            dag_processor: self.thresholds.dag_processor,
            executor: self.thresholds.executor(self.supervisor.heartbeat_interval),
        }
    }
}

/// `[database]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// A sea-orm URL: `sqlite://...`, `postgres://...` or `mysql://...`. Shown redacted.
    pub url: SecretUrl,
}

/// `[api]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// The address the HTTP server listens on.
    pub bind: SocketAddr,
    /// The most Server-Sent Events clients served at once. Each holds a socket
    /// (a file descriptor) for as long as it stays; past this many, a new one is
    /// refused with 503, so dashboards can never starve probes of descriptors.
    #[serde(default = "default_max_stream_clients")]
    pub max_stream_clients: u32,
}

/// `[supervisor]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisorConfig {
    /// The `hostname` written on this process's rows; defaults to this machine's name.
    pub hostname: String,
    /// How often each executor is asked for its health.
    #[serde(with = "duration")]
    pub poll_interval: Duration,
    /// How long the supervisor waits for an answer before calling the executor
    /// unhealthy. Shorter than `poll_interval`, so a poll ends before the next tick.
    #[serde(with = "duration")]
    pub poll_timeout: Duration,
    /// How often verdicts and heartbeats are written to the Jobs table.
    #[serde(with = "duration")]
    pub heartbeat_interval: Duration,
    /// How often the Jobs table is read back to publish a fresh report.
    #[serde(with = "duration")]
    pub refresh_interval: Duration,
    /// Consecutive failed polls before a verdict turns unhealthy (as a Kubernetes
    /// probe's `failureThreshold`); 1 reports the first.
    pub failures_before_unhealthy: u32,
    /// Consecutive good polls before a verdict turns healthy again.
    pub successes_before_healthy: u32,
}

/// `[thresholds]`: how old a heartbeat may be before its component counts as dead,
/// as Airflow's `*_health_check_threshold` options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdsConfig {
    /// `[scheduler] scheduler_health_check_threshold`
    #[serde(with = "duration")]
    pub scheduler: Duration,
    /// `[triggerer] triggerer_health_check_threshold`
    #[serde(with = "duration")]
    pub triggerer: Duration,
    /// `[dag_processor] health_check_threshold`
    #[serde(with = "duration")]
    pub dag_processor: Duration,
    /// Executor rows, whoever writes them: a row older than this is dead. Unset, it
    /// is [`Thresholds::executor_default`] of this host's `heartbeat_interval`
    /// (30 s, or more for a slower heartbeat). Every supervisor sharing a database
    /// should use the same value, at least 2.1 times the slowest heartbeat among them.
    /// Loading resolves it, so `overseer config` shows the value in force.
    #[serde(default, with = "duration::option")]
    pub executor: Option<Duration>,
}

impl ThresholdsConfig {
    /// The executor rows' threshold in force: the configured one, else the default.
    pub fn executor(&self, heartbeat_interval: Duration) -> Duration {
        self.executor
            .unwrap_or_else(|| Thresholds::executor_default(heartbeat_interval))
    }
}

/// One `[[executors]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorConfig {
    /// As Airflow names it: `CeleryExecutor`, `alias:CeleryExecutor`, or a module path.
    pub name: String,
    /// Celery only: the broker (Redis or RabbitMQ; `;` separates a failover list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_url: Option<SecretUrl>,
    /// Celery only: the queues whose depth is reported.
    #[serde(default = "default_queues")]
    pub queues: Vec<String>,
    /// Celery only: also ping the workers over Celery's remote control.
    #[serde(default)]
    pub worker_ping: bool,
    /// Celery only: fewer workers answering the ping makes the verdict unhealthy.
    #[serde(default)]
    pub min_workers: u32,
}

impl ExecutorConfig {
    /// An entry with this name and every other setting at its default.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            broker_url: None,
            queues: default_queues(),
            worker_ping: false,
            min_workers: 0,
        }
    }

    /// The parsed name; valid once the configuration has loaded.
    pub fn parsed_name(&self) -> ExecutorName {
        self.name
            .parse()
            .expect("executor names are checked when loading")
    }
}

/// Just the executors of a configuration, to check them before the layers end.
#[derive(Deserialize)]
struct ExecutorsOnly {
    #[serde(default)]
    #[allow(dead_code)]
    executors: Vec<ExecutorConfig>,
}

/// How many SSE clients are served at once by default: far below the usual
/// open-file limit (1024 soft), so probes always find a descriptor.
pub const DEFAULT_MAX_STREAM_CLIENTS: u32 = 256;

fn default_max_stream_clients() -> u32 {
    DEFAULT_MAX_STREAM_CLIENTS
}

/// Airflow's default queue (`[operators] default_queue`).
pub fn default_queues() -> Vec<String> {
    vec!["default".to_owned()]
}

/// This machine's host name, as the default `supervisor.hostname`.
pub fn machine_hostname() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

impl Default for Config {
    fn default() -> Self {
        Self {
            database: DatabaseConfig {
                url: SecretUrl::new(DEFAULT_DATABASE_URL),
            },
            api: ApiConfig {
                bind: DEFAULT_BIND
                    .parse()
                    .expect("the default bind address parses"),
                max_stream_clients: DEFAULT_MAX_STREAM_CLIENTS,
            },
            supervisor: SupervisorConfig {
                hostname: machine_hostname(),
                poll_interval: Duration::from_secs(10),
                poll_timeout: Duration::from_secs(5),
                heartbeat_interval: Duration::from_secs(5),
                refresh_interval: Duration::from_secs(1),
                failures_before_unhealthy: 1,
                successes_before_healthy: 1,
            },
            thresholds: ThresholdsConfig {
                scheduler: Duration::from_secs(30),
                triggerer: Duration::from_secs(30),
                dag_processor: Duration::from_secs(30),
                executor: None,
            },
            executors: Vec::new(),
        }
    }
}

/// A configuration that cannot be used: one line naming the key, where its value
/// came from, and what is wrong. Never carries a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key, as `section.key` or `executors[1].name`; empty for file-level problems.
    pub key: String,
    /// Where the value came from: a file, an environment variable, a flag.
    pub origin: String,
    /// What is wrong.
    pub problem: String,
}

impl ConfigError {
    pub fn new(
        key: impl Into<String>,
        origin: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        Self {
            key: key.into(),
            origin: origin.into(),
            problem: one_line(&scrub(&problem.into())),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.key.is_empty(), self.origin.is_empty()) {
            (true, _) => write!(
                f,
                "invalid configuration in {}: {}",
                self.origin, self.problem
            ),
            (false, true) => write!(f, "invalid configuration: {}: {}", self.key, self.problem),
            (false, false) => write!(
                f,
                "invalid configuration: {} (from {}): {}",
                self.key, self.origin, self.problem
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// What the command line adds on top of the other layers.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--config` (or `OVERSEER_CONFIG`): this file must exist.
    pub config_file: Option<PathBuf>,
    /// `serve --bind`.
    pub bind: Option<SocketAddr>,
}

/// Loads the configuration from every layer, reading the process's environment.
pub fn load(overrides: &Overrides) -> Result<Config, ConfigError> {
    let config_file = match &overrides.config_file {
        Some(path) if !path.is_file() => {
            return Err(ConfigError::new(
                "",
                path.display().to_string(),
                "the configuration file does not exist or is not a file",
            ));
        }
        Some(path) => Some(path.clone()),
        None => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.is_file()),
    };

    let mut figment = Figment::from(Labelled::new(
        "built-in defaults",
        // The defaults may go through `Serialize`: they hold no credential (a
        // test below keeps it so), and a `SecretUrl` serializes redacted.
        Serialized::defaults(Config::default()),
    ));
    if let Some(path) = &config_file {
        figment = figment.merge(Toml::file_exact(path));
    }
    let unknown = unknown_env_keys();
    let mut ignored: Vec<&str> = ENV_NOT_KEYS.to_vec();
    ignored.extend(unknown.iter().map(String::as_str));
    figment = figment.merge(Env::prefixed(ENV_PREFIX).ignore(&ignored).split("__"));

    // Airflow's executor list keeps, for each name, what the earlier layers set:
    // checked as typed values, carried on as the text they were read from.
    figment.extract::<ExecutorsOnly>().map_err(from_figment)?;
    let earlier: Vec<figment::value::Dict> = match figment.find_value("executors") {
        Ok(figment::value::Value::Array(_, entries)) => {
            entries.into_iter().filter_map(|e| e.into_dict()).collect()
        }
        _ => Vec::new(),
    };
    let airflow = airflow::AirflowEnv::read(|var| std::env::var(var).ok(), &earlier)?;
    figment = figment.merge(airflow);

    if let Some(bind) = overrides.bind {
        figment = figment.merge(Labelled::new(
            "command-line flag --bind",
            Serialized::default("api.bind", bind.to_string()),
        ));
    }

    let mut config: Config = figment.extract().map_err(from_figment)?;
    validate(&config, &figment)?;
    let executor_threshold = config
        .thresholds
        .executor(config.supervisor.heartbeat_interval);
    config.thresholds.executor = Some(executor_threshold);
    Ok(config)
}

/// `OVERSEER_*` variables that name no configuration key: each is warned about
/// once and ignored, as other tools may share the prefix (a typo in a key of
/// `overseer.toml`, by contrast, stops start-up).
fn unknown_env_keys() -> Vec<String> {
    let mut known = Vec::new();
    let defaults = serde_json::to_value(Config::default()).expect("the defaults serialize");
    for (section, keys) in defaults.as_object().into_iter().flatten() {
        known.push(section.clone());
        for key in keys.as_object().into_iter().flatten().map(|(k, _)| k) {
            known.push(format!("{section}__{key}"));
        }
    }
    known.push("executors".into());
    let mut unknown = Vec::new();
    for (var, _) in std::env::vars() {
        let Some(key) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if ENV_NOT_KEYS.contains(&key) || known.iter().any(|k| k.eq_ignore_ascii_case(key)) {
            continue;
        }
        tracing::warn!("ignoring environment variable {var}: it names no configuration key");
        unknown.push(key.to_owned());
    }
    unknown
}

/// The checks serde cannot make: ranges, relations between keys, executor names.
fn validate(config: &Config, figment: &Figment) -> Result<(), ConfigError> {
    let fail =
        |key: &str, problem: String| Err(ConfigError::new(key, origin_of(figment, key), problem));

    if let Err(problem) = check_database_url(&config.database.url) {
        return fail("database.url", problem);
    }

    let supervisor = &config.supervisor;
    if supervisor.hostname.trim().is_empty() {
        return fail("supervisor.hostname", "must not be empty".into());
    }
    if supervisor.hostname.len() > 500 {
        return fail(
            "supervisor.hostname",
            "is longer than the 500 characters job.hostname holds".into(),
        );
    }
    for (key, value) in [
        ("supervisor.poll_interval", supervisor.poll_interval),
        ("supervisor.poll_timeout", supervisor.poll_timeout),
        (
            "supervisor.heartbeat_interval",
            supervisor.heartbeat_interval,
        ),
        ("supervisor.refresh_interval", supervisor.refresh_interval),
        ("thresholds.scheduler", config.thresholds.scheduler),
        ("thresholds.triggerer", config.thresholds.triggerer),
        ("thresholds.dag_processor", config.thresholds.dag_processor),
        (
            "thresholds.executor",
            config.thresholds.executor.unwrap_or(Duration::MAX),
        ),
    ] {
        if value.is_zero() {
            return fail(key, "must be longer than zero".into());
        }
    }
    for (key, value) in [
        (
            "supervisor.failures_before_unhealthy",
            supervisor.failures_before_unhealthy,
        ),
        (
            "supervisor.successes_before_healthy",
            supervisor.successes_before_healthy,
        ),
    ] {
        if value == 0 {
            return fail(key, "must be at least 1".into());
        }
    }
    if let Some(threshold) = config.thresholds.executor {
        let own = supervisor
            .heartbeat_interval
            .mul_f64(Thresholds::GRACE_MULTIPLIER);
        // Within a microsecond: 2.1 is not exact in binary, and `2100ms` for a 1 s
        // heartbeat must pass.
        if threshold + Duration::from_micros(1) < own {
            return fail(
                "thresholds.executor",
                format!(
                    "{} is shorter than {} (supervisor.heartbeat_interval {} times {}): this host's own executor rows would count as dead between heartbeats",
                    duration::format(threshold),
                    duration::format(own),
                    duration::format(supervisor.heartbeat_interval),
                    Thresholds::GRACE_MULTIPLIER,
                ),
            );
        }
    }
    if config.api.max_stream_clients == 0 {
        return fail("api.max_stream_clients", "must be at least 1".into());
    }
    if supervisor.poll_timeout >= supervisor.poll_interval {
        return fail(
            "supervisor.poll_timeout",
            format!(
                "{} must be shorter than supervisor.poll_interval ({}, from {})",
                duration::format(supervisor.poll_timeout),
                duration::format(supervisor.poll_interval),
                origin_of(figment, "supervisor.poll_interval"),
            ),
        );
    }

    for (index, executor) in config.executors.iter().enumerate() {
        let key = |field: &str| format!("executors[{index}].{field}");
        let origin = |field: &str| origin_of(figment, &format!("executors.{index}.{field}"));
        let fail = |field: &str, problem: String| {
            Err(ConfigError::new(key(field), origin(field), problem))
        };

        if executor.name.chars().count() > MAX_EXECUTOR_NAME {
            return fail(
                "name",
                format!(
                    "is {} characters long; job.executor_class holds at most {MAX_EXECUTOR_NAME}",
                    executor.name.chars().count()
                ),
            );
        }
        let name = match executor.name.parse::<ExecutorName>() {
            Ok(name) => name,
            Err(problem) => return fail("name", problem),
        };
        if config.executors[..index]
            .iter()
            .any(|e| e.name == executor.name)
        {
            return fail(
                "name",
                format!("executor {:?} is configured twice", executor.name),
            );
        }
        match (name.kind(), &executor.broker_url) {
            (ExecutorKind::Celery, None) => {
                return fail(
                    "broker_url",
                    format!("is missing: {} needs its Celery broker", executor.name),
                );
            }
            (ExecutorKind::Celery, Some(url)) => {
                if let Err(problem) = check_broker_url(url) {
                    return fail("broker_url", problem);
                }
            }
            (ExecutorKind::Unchecked, Some(_)) => {
                return fail(
                    "broker_url",
                    format!("applies only to CeleryExecutor, not to {}", executor.name),
                );
            }
            (ExecutorKind::Unchecked, None) => {}
        }
        if executor.queues.is_empty() || executor.queues.iter().any(|q| q.trim().is_empty()) {
            return fail(
                "queues",
                "must list at least one queue, and no empty names".into(),
            );
        }
        if executor.min_workers > 0 && !executor.worker_ping {
            return fail(
                "min_workers",
                format!(
                    "is {}, which needs worker_ping = true to count workers",
                    executor.min_workers
                ),
            );
        }
    }
    Ok(())
}

/// The schemes sea-orm connects to.
fn check_database_url(url: &SecretUrl) -> Result<(), String> {
    let text = url.expose_secret();
    if let Some(rest) = text.strip_prefix("sqlite:") {
        return if rest
            .trim_start_matches('/')
            .split('?')
            .next()
            .unwrap_or_default()
            .is_empty()
        {
            Err(
                "a sqlite URL must name a file (sqlite://overseer.db?mode=rwc) or sqlite::memory:"
                    .into(),
            )
        } else {
            Ok(())
        };
    }
    let Some((scheme, _)) = text.split_once("://") else {
        let written = scheme_for_display(text);
        return Err(
            match ["postgresql", "postgres", "mysql", "sqlite"]
                .into_iter()
                .find(|known| written.eq_ignore_ascii_case(known))
            {
                Some(known) => format!(
                    "is missing \"://\" after \"{known}\" (expected {known}://host/database)"
                ),
                None => "is not a URL: expected sqlite://, postgres:// or mysql://".into(),
            },
        );
    };
    if !matches!(scheme, "postgres" | "postgresql" | "mysql") {
        return Err(format!(
            "unsupported database URL scheme {:?}: expected sqlite://, postgres:// or mysql://",
            scheme_for_display(text)
        ));
    }
    let parsed = url::Url::parse(text).map_err(|e| format!("is not a valid {scheme} URL: {e}"))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("a {scheme} URL must name a host"));
    }
    Ok(())
}

/// A broker URL, or a `;`-separated failover list, as Celery and kombu accept
/// them; the error says what is wrong without quoting the URL.
fn check_broker_url(url: &SecretUrl) -> Result<(), String> {
    overseer_celery::BrokerUrl::parse(url.expose_secret())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The part of a URL before `://` or `:`, enough to say which kind it is, never
/// more (a malformed URL may hold a password anywhere).
fn scheme_for_display(text: &str) -> String {
    text.split([':', '/', '@'])
        .next()
        .unwrap_or_default()
        .chars()
        .take(20)
        .collect()
}

/// Where the value of `key` (a figment path, `a.b` or `executors.0.name`) came from.
fn origin_of(figment: &Figment, key: &str) -> String {
    let keys: Vec<&str> = key.split('.').collect();
    // An array's element carries its provider's metadata on the array itself.
    let metadata = figment
        .find_metadata(key)
        .or_else(|| figment.find_metadata(keys[0]));
    metadata.map_or_else(|| "unknown source".to_owned(), |md| describe(md, &keys))
}

/// Names a provider's source for an error: a file path, an environment variable, a flag.
fn describe(metadata: &Metadata, keys: &[&str]) -> String {
    if let Some(figment::Source::File(path)) = &metadata.source {
        return display_path(path);
    }
    if metadata.name.contains(ENV_PREFIX) {
        // A variable sets a key path (an array as a whole), so stop at the first index.
        let path: Vec<String> = keys
            .iter()
            .take_while(|k| k.parse::<usize>().is_err())
            .map(|k| k.to_ascii_uppercase())
            .collect();
        return format!("environment variable {ENV_PREFIX}{}", path.join("__"));
    }
    if metadata.name.contains("environment") {
        let var = metadata.interpolate(&Profile::Default, keys);
        return format!("environment variable {var}");
    }
    metadata.name.to_string()
}

fn display_path(path: &Path) -> String {
    path.display().to_string()
}

/// Turns figment's error into ours: the first problem, on one line.
fn from_figment(error: figment::Error) -> ConfigError {
    let keys: Vec<&str> = error.path.iter().map(String::as_str).collect();
    let origin = error
        .metadata
        .as_ref()
        .map(|md| describe(md, &keys))
        .unwrap_or_default();
    let key = keys
        .iter()
        .map(|k| match k.parse::<usize>() {
            Ok(i) => format!("[{i}]"),
            Err(_) => format!(".{k}"),
        })
        .collect::<String>()
        .trim_start_matches('.')
        .to_owned();
    let problem = match &error.kind {
        figment::error::Kind::UnknownField(_, expected) => {
            return ConfigError::new(
                key,
                origin,
                format!("unknown key (expected one of: {})", expected.join(", ")),
            );
        }
        figment::error::Kind::Message(message) => toml_message(message),
        other => other.to_string(),
    };
    ConfigError::new(key, origin, problem)
}

/// A TOML parse error spans several lines with a source excerpt; keep the
/// position and the explanation, drop the excerpt (it may show a secret).
fn toml_message(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.contains('|') && !line.starts_with('^'))
        .collect::<Vec<_>>()
        .join(": ")
}

/// Collapses any line breaks so an error stays one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A provider under another name, so errors can say where a value came from.
struct Labelled<P> {
    name: &'static str,
    inner: P,
}

impl<P> Labelled<P> {
    fn new(name: &'static str, inner: P) -> Self {
        Self { name, inner }
    }
}

impl<P: Provider> Provider for Labelled<P> {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name)
    }

    fn data(&self) -> Result<figment::value::Map<Profile, figment::value::Dict>, figment::Error> {
        self.inner.data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Layering serializes the built-in defaults into figment. A `SecretUrl`
    /// serializes redacted, so a default with a credential would come back
    /// mangled: none may have one.
    #[test]
    fn the_built_in_defaults_carry_no_credential() {
        let defaults = Config::default();
        assert!(!defaults.database.url.has_credentials());
        assert!(defaults.executors.is_empty());
        let through_figment: Config = Figment::from(Serialized::defaults(&defaults))
            .extract()
            .unwrap();
        assert_eq!(
            through_figment.database.url.expose_secret(),
            DEFAULT_DATABASE_URL
        );
    }
}
