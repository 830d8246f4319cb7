//! Configuration, in layers, later wins:
//! built-in defaults -> `overseer.toml` -> `OVERSEER_*` environment ->
//! Airflow's own environment ([`airflow`]) -> command-line flags.
//!
//! Loading either gives a complete, checked [`Config`] or one [`ConfigError`]
//! naming the key, where its value came from, and what is wrong with it. Nothing
//! touches the database before loading has succeeded.
//!
//! # Layout
//! - this module: the configuration's types, their defaults, and [`load`].
//! - `layers`: the layers stacked with figment, the `OVERSEER_*` variables that name
//!   no key, and where each value came from.
//! - `keys`: every key a layer may set, read from the types' own `Deserialize`.
//! - `validate`: the checks serde cannot make, a small function for each section.
//! - `errors`: [`ConfigError`], and figment's errors translated into it.
//! - [`airflow`]: Airflow's own environment as a layer.
//! - [`executor`]: executor names as Airflow writes them.
//! - [`duration`]: durations as configuration writes them (`10s`, `1m 30s`).
//! - [`bounds`]: the floor and ceiling of every duration.
//! - [`tls`]: `[api] tls_cert` and `tls_key` read into the server's TLS settings,
//!   with a [`tls::TlsError`] that names its key.
//! - `alert`: the settings of an alert target: [`WebhookUrl`], the URL shown as
//!   its origin and `/***`, and [`AlertFormat`].

pub mod airflow;
pub mod bounds;
pub mod duration;
pub mod executor;
pub mod tls;

mod alert;
mod errors;
mod keys;
mod layers;
mod validate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::secret::{Scrubber, SecretUrl};
pub use alert::{AlertFormat, WebhookUrl};
pub use executor::ExecutorConfig;
use overseer_core::Thresholds;

pub use errors::ConfigError;

pub use executor::{
    MAX_EXECUTOR_NAME, default_canary_max_pickup, default_max_at_capacity, default_max_queued_age,
    default_parallelism, default_true,
};

/// The embedded default database: a SQLite file in the working folder, created if missing.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://overseer.db?mode=rwc";
/// Where the HTTP API listens by default: loopback only.
pub const DEFAULT_BIND: &str = "127.0.0.1:8781";
/// The file read when no `--config` or `OVERSEER_CONFIG` names one.
pub const DEFAULT_CONFIG_FILE: &str = "overseer.toml";
/// The prefix of Overseer's own environment variables (`OVERSEER_API__BIND`, ...).
pub const ENV_PREFIX: &str = "OVERSEER_";

/// The name of the configuration layer of Overseer's built-in defaults, as
/// errors name a value's origin.
const BUILT_IN: &str = "built-in defaults";

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
    /// How long the history of verdict states is kept.
    #[serde(default)]
    pub history: HistoryConfig,
    /// The executors to supervise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub executors: Vec<ExecutorConfig>,
    /// Webhooks told when an executor turns unhealthy, and healthy again
    /// ([`crate::alerts`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<AlertConfig>,
}

impl Config {
    /// A scrubber that knows every credential of this configuration: for log
    /// lines and errors, whatever quotes them.
    pub fn scrubber(&self) -> Scrubber {
        let urls = self
            .executors
            .iter()
            .flat_map(|e| {
                e.broker_url
                    .iter()
                    .chain(&e.check_url)
                    .chain(&e.result_backend)
            })
            .fold(
                Scrubber::default().with_url(&self.database.url),
                Scrubber::with_url,
            );
        let commands = self
            .executors
            .iter()
            .filter_map(|e| e.check_command.as_deref())
            .fold(urls, overseer_checks::command::scrubbing_credentials);
        self.alerts
            .iter()
            .fold(commands, |scrubber, alert| alert.url.scrubbing(scrubber))
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
    /// The certificate chain (PEM) to serve the API over HTTPS with; with `tls_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `tls_cert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// Origins (`scheme://host[:port]`) allowed to show the dashboard in a frame
    /// besides its own: the Airflow UI's, whose navigation opens it through
    /// Overseer's Airflow plugin (`integrations/airflow`). Empty, only the
    /// dashboard's own origin may; the page's `Content-Security-Policy` says
    /// `frame-ancestors 'self'` and these. Always shown, even empty, so that
    /// `OVERSEER_API__FRAME_ANCESTORS` (a TOML array) names a known key.
    #[serde(default)]
    pub frame_ancestors: Vec<String>,
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

/// `[history]`: the table of every change of an executor's verdict state
/// ([`overseer_core::history`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryConfig {
    /// Transitions older than this are deleted (at most once an hour); `0s`
    /// keeps them forever.
    #[serde(with = "duration")]
    pub retention: Duration,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            retention: overseer_core::history::DEFAULT_RETENTION,
        }
    }
}

/// One `[[alerts]]` entry: a webhook told of transitions ([`crate::alerts`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertConfig {
    /// Where alerts are POSTed (`http://` or `https://`). It often holds a
    /// token (Slack's is its path), so it is shown as its origin alone:
    /// `https://hooks.slack.com/***`.
    pub url: WebhookUrl,
    /// What `/metrics` calls this target (its `target` label) and the logs
    /// name it by; the redacted URL when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The body: Overseer's JSON (`json`), or `{"text": ...}` for Slack-compatible
    /// incoming webhooks (`slack`).
    #[serde(default)]
    pub format: AlertFormat,
    /// How long a state must hold before it is alerted: an `unhealthy` blip
    /// shorter than this pages nobody, and a recovery shorter than this
    /// resolves nothing.
    #[serde(default = "default_min_duration", with = "duration")]
    pub min_duration: Duration,
    /// Whether a return to `healthy` after a firing alert is alerted too.
    #[serde(default = "default_send_resolved")]
    pub send_resolved: bool,
    /// How long one alert is retried (with back-off) while the webhook fails,
    /// before it is dropped with a warning; `0s` tries once.
    #[serde(default = "default_retry_for", with = "duration")]
    pub retry_for: Duration,
}

impl AlertConfig {
    /// An entry for `url` with every other setting at its default.
    pub fn to(url: &str) -> Self {
        Self {
            url: WebhookUrl::new(url),
            name: None,
            format: AlertFormat::default(),
            min_duration: default_min_duration(),
            send_resolved: default_send_resolved(),
            retry_for: default_retry_for(),
        }
    }

    /// The `target` label of its metrics: `name`, else the redacted URL.
    pub fn target_label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.url.redacted().to_owned())
    }
}

/// `min_duration` by default: three polls at the default `poll_interval`.
pub const DEFAULT_ALERT_MIN_DURATION: Duration = Duration::from_secs(30);
/// `retry_for` by default.
pub const DEFAULT_ALERT_RETRY_FOR: Duration = Duration::from_secs(15 * 60);

fn default_min_duration() -> Duration {
    DEFAULT_ALERT_MIN_DURATION
}

fn default_send_resolved() -> bool {
    true
}

fn default_retry_for() -> Duration {
    DEFAULT_ALERT_RETRY_FOR
}

/// How many SSE clients are served at once by default: far below the usual
/// open-file limit (1024 soft), so probes always find a descriptor.
pub const DEFAULT_MAX_STREAM_CLIENTS: u32 = 256;

fn default_max_stream_clients() -> u32 {
    DEFAULT_MAX_STREAM_CLIENTS
}

impl Default for Config {
    fn default() -> Self {
        let core = overseer_core::Settings::default();
        Self {
            database: DatabaseConfig {
                url: SecretUrl::new(DEFAULT_DATABASE_URL),
            },
            api: ApiConfig {
                bind: DEFAULT_BIND
                    .parse()
                    .expect("the default bind address parses"),
                max_stream_clients: DEFAULT_MAX_STREAM_CLIENTS,
                tls_cert: None,
                tls_key: None,
                frame_ancestors: Vec::new(),
            },
            // The actors' own defaults: declared once, in overseer-core.
            supervisor: SupervisorConfig {
                hostname: core.hostname,
                poll_interval: core.poll.poll_interval,
                poll_timeout: core.poll.poll_timeout,
                heartbeat_interval: core.heartbeat_interval,
                refresh_interval: core.refresh_interval,
                failures_before_unhealthy: core.poll.failures_before_unhealthy,
                successes_before_healthy: core.poll.successes_before_healthy,
            },
            thresholds: ThresholdsConfig {
                scheduler: core.thresholds.scheduler,
                triggerer: core.thresholds.triggerer,
                dag_processor: core.thresholds.dag_processor,
                executor: None,
            },
            history: HistoryConfig {
                retention: core.history.retention,
            },
            executors: Vec::new(),
            alerts: Vec::new(),
        }
    }
}

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
    load_with_sources(overrides).map(|(config, _)| config)
}

/// [`load`], and each key Airflow's configuration set with where its value
/// came from (`environment variable AIRFLOW__CELERY__BROKER_URL_CMD`,
/// `/srv/af/airflow.cfg [celery] broker_url`), for `overseer config`.
pub fn load_with_sources(
    overrides: &Overrides,
) -> Result<(Config, std::collections::BTreeMap<String, String>), ConfigError> {
    let (figment, airflow_sources) = layers::stack(overrides)?;
    let mut config: Config = figment.extract().map_err(errors::from_figment)?;
    // `poll_timeout` left at its default follows a shorter `poll_interval`:
    // half of it, so that setting the interval alone is a valid configuration.
    let timeout_set = layers::origin_of(&figment, "supervisor.poll_timeout") != BUILT_IN;
    let supervisor = &mut config.supervisor;
    if !timeout_set && supervisor.poll_timeout >= supervisor.poll_interval {
        supervisor.poll_timeout = supervisor.poll_interval / 2;
    }
    validate::validate(&config, &figment)?;
    let executor_threshold = config
        .thresholds
        .executor(config.supervisor.heartbeat_interval);
    config.thresholds.executor = Some(executor_threshold);
    Ok((config, airflow_sources))
}

#[cfg(test)]
mod tests {
    use figment::Figment;
    use figment::providers::Serialized;

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

    /// Overseer runs on the hosts Airflow's components run on: its default
    /// port is none of theirs, so `serve` starts beside them with no setting.
    #[test]
    fn the_default_port_is_no_airflow_component_s() {
        let port: u16 = DEFAULT_BIND.rsplit(':').next().unwrap().parse().unwrap();
        // The api-server (and Airflow 2's webserver), the workers' and the
        // triggerer's log servers, Flower, the statsd exporter.
        for taken in [8080, 8793, 8794, 5555, 9102] {
            assert_ne!(port, taken, "{DEFAULT_BIND}");
        }
        assert!(
            DEFAULT_BIND.starts_with("127.0.0.1:"),
            "loopback by default"
        );
    }
}
