//! Airflow's configuration, found and resolved as Airflow 3.3.2 resolves it
//! (`airflow/_shared/configuration/parser.py`, `AirflowConfigParser.get`).
//!
//! For an option, the first of these that is set wins:
//! 1. the variable `AIRFLOW__<SECTION>__<KEY>` (a team's:
//!    `AIRFLOW__<TEAM>___<SECTION>__<KEY>`), `$VAR` and `~` expanded; else, for
//!    an option Airflow marks sensitive, `<VARIABLE>_CMD` run, or
//!    `<VARIABLE>_SECRET`, which needs Airflow's secrets backend and is refused;
//!    the same again for the option's deprecated name;
//! 2. the option in `airflow.cfg` (a team's: in `[<team>=<section>]`),
//!    interpolated as Python's `configparser` does, then expanded;
//! 3. for a sensitive option and no team, `<key>_cmd` in `airflow.cfg` run
//!    (`<key>_secret` refused);
//! 4. Airflow's default.
//!
//! `airflow.cfg` is the file `AIRFLOW_CONFIG` names, else
//! `$AIRFLOW_HOME/airflow.cfg`, `AIRFLOW_HOME` being `~/airflow` when unset.
//! Unlike Airflow, Overseer never writes it, and a file it cannot read is an
//! error rather than skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::expand::{expand_env_var, run_command};
use super::ini::Ini;
use crate::config::ConfigError;

/// One option of Airflow's that Overseer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AirflowOption {
    pub section: &'static str,
    pub key: &'static str,
    /// Airflow marks it sensitive (`sensitive: true` in its `config.yml` or
    /// the provider's): only then are `_CMD` and `_SECRET` read.
    pub sensitive: bool,
    /// The section and key it had before, which Airflow still reads after the
    /// new name.
    pub deprecated: Option<(&'static str, &'static str)>,
    /// Airflow's default (`{AIRFLOW_HOME}` stands for Airflow's home).
    pub default: &'static str,
}

impl AirflowOption {
    const fn new(section: &'static str, key: &'static str, default: &'static str) -> Self {
        Self {
            section,
            key,
            sensitive: false,
            deprecated: None,
            default,
        }
    }

    const fn sensitive(self) -> Self {
        Self {
            sensitive: true,
            ..self
        }
    }

    /// `[section] key`, as errors and sources name it.
    pub fn name(&self) -> String {
        format!("[{}] {}", self.section, self.key)
    }

    /// The variable that sets it, for the team or for everyone.
    pub fn variable(&self, team: Option<&str>) -> String {
        env_var_name(self.section, self.key, team)
    }
}

/// `[database] sql_alchemy_conn`: Airflow's metadata database.
pub const SQL_ALCHEMY_CONN: AirflowOption = AirflowOption {
    deprecated: Some(("core", "sql_alchemy_conn")),
    ..AirflowOption::new(
        "database",
        "sql_alchemy_conn",
        "sqlite:///{AIRFLOW_HOME}/airflow.db",
    )
    .sensitive()
};
/// `[core] executor`: the executors, with teams.
pub const EXECUTOR: AirflowOption = AirflowOption::new("core", "executor", "LocalExecutor");
/// `[core] multi_team`: whether the executor list's teams count.
pub const MULTI_TEAM: AirflowOption = AirflowOption::new("core", "multi_team", "False");
/// `[celery] broker_url` (the Celery provider's).
pub const BROKER_URL: AirflowOption =
    AirflowOption::new("celery", "broker_url", "redis://redis:6379/0").sensitive();
/// `[core] parallelism`: the slots each scheduler's executor has.
pub const PARALLELISM: AirflowOption = AirflowOption::new("core", "parallelism", "32");
/// `[celery] result_backend`: where the Celery executor reads its tasks'
/// states (unset: Airflow's own database, `db+` its `sql_alchemy_conn`).
pub const RESULT_BACKEND: AirflowOption =
    AirflowOption::new("celery", "result_backend", "").sensitive();
/// `[celery] worker_concurrency`: the tasks each `airflow celery worker` runs at once.
pub const WORKER_CONCURRENCY: AirflowOption =
    AirflowOption::new("celery", "worker_concurrency", "16");
/// `[celery] worker_autoscale`: `max,min`; when set, Airflow starts its workers
/// with it instead of `worker_concurrency`, and `max` is their concurrency.
pub const WORKER_AUTOSCALE: AirflowOption = AirflowOption::new("celery", "worker_autoscale", "");
/// `[celery] celery_config_options`: a Python dict Airflow imports and lays
/// over the Celery app's settings (its broker among them). Overseer does not
/// import Python: it says so when the option is set to another dict.
pub const CELERY_CONFIG_OPTIONS: AirflowOption =
    AirflowOption::new("celery", "celery_config_options", DEFAULT_CELERY_CONFIG);
/// The Celery provider's own dict, built from `[celery]`'s options.
pub const DEFAULT_CELERY_CONFIG: &str =
    "airflow.providers.celery.executors.default_celery.DEFAULT_CELERY_CONFIG";
/// `[celery] ssl_active`.
pub const SSL_ACTIVE: AirflowOption = AirflowOption::new("celery", "ssl_active", "False");
/// `[celery] ssl_key`.
pub const SSL_KEY: AirflowOption = AirflowOption::new("celery", "ssl_key", "");
/// `[celery] ssl_cert`.
pub const SSL_CERT: AirflowOption = AirflowOption::new("celery", "ssl_cert", "");
/// `[celery] ssl_cacert`.
pub const SSL_CACERT: AirflowOption = AirflowOption::new("celery", "ssl_cacert", "");
/// `[operators] default_queue`.
pub const DEFAULT_QUEUE: AirflowOption =
    AirflowOption::new("operators", "default_queue", "default");
/// `[scheduler] scheduler_health_check_threshold`.
pub const SCHEDULER_THRESHOLD: AirflowOption =
    AirflowOption::new("scheduler", "scheduler_health_check_threshold", "30");
/// `[triggerer] triggerer_health_check_threshold`.
pub const TRIGGERER_THRESHOLD: AirflowOption =
    AirflowOption::new("triggerer", "triggerer_health_check_threshold", "30");
/// `[dag_processor] health_check_threshold`.
pub const DAG_PROCESSOR_THRESHOLD: AirflowOption =
    AirflowOption::new("dag_processor", "health_check_threshold", "30");

/// Every option Overseer reads.
pub const OPTIONS: [AirflowOption; 17] = [
    SQL_ALCHEMY_CONN,
    EXECUTOR,
    MULTI_TEAM,
    PARALLELISM,
    BROKER_URL,
    RESULT_BACKEND,
    WORKER_CONCURRENCY,
    WORKER_AUTOSCALE,
    CELERY_CONFIG_OPTIONS,
    SSL_ACTIVE,
    SSL_KEY,
    SSL_CERT,
    SSL_CACERT,
    DEFAULT_QUEUE,
    SCHEDULER_THRESHOLD,
    TRIGGERER_THRESHOLD,
    DAG_PROCESSOR_THRESHOLD,
];

/// The options an executor of a team reads for that team: Airflow's Celery
/// executor builds its app from `ExecutorConf(team_name)`.
pub const TEAM_OPTIONS: [AirflowOption; 8] = [
    BROKER_URL,
    RESULT_BACKEND,
    CELERY_CONFIG_OPTIONS,
    SSL_ACTIVE,
    SSL_KEY,
    SSL_CERT,
    SSL_CACERT,
    DEFAULT_QUEUE,
];

/// `AIRFLOW__[<TEAM>___]<SECTION>__<KEY>`, as `_env_var_name` writes it.
pub fn env_var_name(section: &str, key: &str, team: Option<&str>) -> String {
    let team = team
        .map(|t| format!("{}___", t.to_uppercase()))
        .unwrap_or_default();
    format!(
        "AIRFLOW__{team}{}__{}",
        section.replace('.', "_").to_uppercase(),
        key.to_uppercase()
    )
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An `AIRFLOW__*` variable.
    Variable(String),
    /// What an `AIRFLOW__*_CMD` variable's command printed.
    Command(String),
    /// An option of `airflow.cfg` (a `<key>_cmd` one: what its command printed).
    File {
        path: PathBuf,
        section: String,
        key: String,
    },
    /// Airflow's default for the option.
    Default(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Variable(var) | Self::Command(var) => write!(f, "environment variable {var}"),
            Self::File { path, section, key } => {
                write!(f, "{} [{section}] {key}", path.display())
            }
            Self::Default(option) => write!(f, "Airflow's default for {option}"),
        }
    }
}

/// A value of Airflow's configuration, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub value: String,
    pub source: Source,
}

/// Airflow's configuration as a host has it: its environment and its
/// `airflow.cfg`, if there is one.
pub struct AirflowConf {
    env: BTreeMap<String, String>,
    home: String,
    file: Option<(PathBuf, Ini)>,
    /// Ignored `_CMD`/`_SECRET` variables already warned about.
    warned: Mutex<BTreeSet<String>>,
}

impl AirflowConf {
    /// Reads Airflow's configuration from `env` (a process's environment) and
    /// the `airflow.cfg` it points at.
    pub fn read(env: impl IntoIterator<Item = (String, String)>) -> Result<Self, ConfigError> {
        let env: BTreeMap<String, String> = env.into_iter().collect();
        let expand = |var: &str, value: &str| {
            expand_env_var(value, &env).map_err(|problem| in_variable(var, problem))
        };
        let home = expand(
            "AIRFLOW_HOME",
            env.get("AIRFLOW_HOME").map_or("~/airflow", String::as_str),
        )?;
        let file = match env.get("AIRFLOW_CONFIG") {
            Some(named) => {
                let path = PathBuf::from(expand("AIRFLOW_CONFIG", named)?);
                if !path.exists() {
                    return Err(ConfigError::new(
                        "",
                        "environment variable AIRFLOW_CONFIG",
                        format!("{} does not exist", path.display()),
                    ));
                }
                Some(path)
            }
            None => Some(Path::new(&home).join("airflow.cfg")).filter(|p| p.exists()),
        };
        let file = match file {
            Some(path) => {
                let ini = read_file(&path)?;
                Some((path, ini))
            }
            None => None,
        };
        Ok(Self {
            env,
            home,
            file,
            warned: Mutex::default(),
        })
    }

    /// The `airflow.cfg` read, if there was one.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_ref().map(|(path, _)| path.as_path())
    }

    /// Airflow's home folder (`AIRFLOW_HOME`, else `~/airflow`), expanded.
    pub fn home(&self) -> &str {
        &self.home
    }

    /// The value Airflow would use for `option`, for `team` or for everyone,
    /// with where it came from; Airflow's default when nothing sets it.
    pub fn get(&self, option: &AirflowOption, team: Option<&str>) -> Result<Resolved, ConfigError> {
        let names = std::iter::once((option.section, option.key)).chain(option.deprecated);
        for (section, key) in names.clone() {
            if let Some(found) = self.in_environment(option, section, key, team)? {
                return Ok(found);
            }
        }
        if let Some((path, ini)) = &self.file {
            let file_section = |section: &str| match team {
                Some(team) => format!("{team}={section}"),
                None => section.to_owned(),
            };
            // A team's option under its new name is read from its own section;
            // under the deprecated name, Airflow reads the shared one.
            let candidates = [(file_section(option.section), option.key)]
                .into_iter()
                .chain(option.deprecated.map(|(s, k)| (s.to_owned(), k)));
            for (section, key) in candidates {
                if !ini.has_option(&section, key) {
                    continue;
                }
                let source = Source::File {
                    path: path.clone(),
                    section: section.clone(),
                    key: key.to_owned(),
                };
                let value = self.file_value(ini, &section, key, &source)?;
                let value = expand_env_var(&value, &self.env)
                    .map_err(|problem| ConfigError::new("", source.to_string(), problem))?;
                return Ok(Resolved { value, source });
            }
            if option.sensitive && team.is_none() {
                for (section, key) in names.clone() {
                    let command_key = format!("{key}_cmd");
                    if ini.has_option(section, &command_key) {
                        let source = Source::File {
                            path: path.clone(),
                            section: section.to_owned(),
                            key: command_key.clone(),
                        };
                        let command = self.file_value(ini, section, &command_key, &source)?;
                        let value = run_command(&command, &self.env)
                            .map_err(|problem| ConfigError::new("", source.to_string(), problem))?;
                        // Airflow takes a command's empty output as no value.
                        if !value.is_empty() {
                            return Ok(Resolved { value, source });
                        }
                    }
                }
                for (section, key) in names {
                    let secret_key = format!("{key}_secret");
                    if ini.has_option(section, &secret_key) {
                        return Err(ConfigError::new(
                            "",
                            format!("{} [{section}] {secret_key}", path.display()),
                            NO_SECRETS_BACKEND,
                        ));
                    }
                }
            }
        }
        Ok(Resolved {
            value: option.default.replace("{AIRFLOW_HOME}", &self.home),
            source: Source::Default(option.name()),
        })
    }

    fn in_environment(
        &self,
        option: &AirflowOption,
        section: &str,
        key: &str,
        team: Option<&str>,
    ) -> Result<Option<Resolved>, ConfigError> {
        let var = env_var_name(section, key, team);
        if let Some(value) = self.env.get(&var) {
            let value =
                expand_env_var(value, &self.env).map_err(|problem| in_variable(&var, problem))?;
            return Ok(Some(Resolved {
                value,
                source: Source::Variable(var),
            }));
        }
        let command_var = format!("{var}_CMD");
        if let Some(command) = self.env.get(&command_var) {
            if option.sensitive {
                let value = run_command(command, &self.env)
                    .map_err(|problem| in_variable(&command_var, problem))?;
                return Ok(Some(Resolved {
                    value,
                    source: Source::Command(command_var),
                }));
            }
            self.warn_ignored(&command_var, option);
        }
        let secret_var = format!("{var}_SECRET");
        if self.env.contains_key(&secret_var) {
            if option.sensitive {
                return Err(in_variable(&secret_var, NO_SECRETS_BACKEND));
            }
            self.warn_ignored(&secret_var, option);
        }
        Ok(None)
    }

    /// An option of the file, interpolated; an error names the option.
    fn file_value(
        &self,
        ini: &Ini,
        section: &str,
        key: &str,
        source: &Source,
    ) -> Result<String, ConfigError> {
        match ini.get(section, key) {
            Some(Ok(value)) => Ok(value),
            Some(Err(problem)) => Err(ConfigError::new("", source.to_string(), problem)),
            None => Ok(String::new()),
        }
    }

    /// Airflow reads `_CMD` and `_SECRET` only for sensitive options, and so
    /// ignores this variable: said once, so the operator knows why.
    fn warn_ignored(&self, var: &str, option: &AirflowOption) {
        let mut warned = self
            .warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if warned.insert(var.to_owned()) {
            tracing::warn!(
                "ignoring environment variable {var}: Airflow reads _CMD and _SECRET only for \
                 sensitive options, and {} is not one",
                option.name()
            );
        }
    }
}

/// A problem with the value of an environment variable.
fn in_variable(var: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::new("", format!("environment variable {var}"), problem)
}

/// Why a `_SECRET` option is refused.
const NO_SECRETS_BACKEND: &str = "it names a secret of Airflow's secrets backend, which Overseer \
     does not run: set the option itself, or its _CMD, instead";

/// How large `airflow.cfg` may be: Airflow's own, with every option and its
/// comment written out, is about 100 KiB.
pub(crate) const MAX_FILE: u64 = 4 * 1024 * 1024;

fn read_file(path: &Path) -> Result<Ini, ConfigError> {
    let origin = path.display().to_string();
    let bytes = overseer_core::file::read(path, MAX_FILE)
        .map_err(|e| ConfigError::new("", origin.clone(), format!("cannot read it: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| ConfigError::new("", origin.clone(), "is not UTF-8 text"))?;
    Ini::parse(&text).map_err(|problem| ConfigError::new("", origin, problem))
}

#[cfg(test)]
mod tests;
