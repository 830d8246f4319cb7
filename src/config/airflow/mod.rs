//! Airflow's own configuration, as a configuration layer.
//!
//! Pointed at an Airflow deployment's environment, Overseer finds the same
//! metadata database, executors, broker and health thresholds Airflow uses,
//! resolved as Airflow resolves them ([`conf`]: variables, `_CMD`, `airflow.cfg`).
//! Each value is translated here into Overseer's keys; an error names the
//! variable or the option of `airflow.cfg` it came from.

use std::collections::BTreeMap;
use std::time::Duration;

use figment::value::{Dict, Map, Value};
use figment::{Metadata, Profile, Provider};

use super::bounds::{self, Bounds};
use super::executor::{self, ExecutorKind, ExecutorName};
use super::{ConfigError, duration};

pub mod conf;
mod expand;
mod ini;

pub use conf::{AirflowConf, AirflowOption, Resolved, Source};
use conf::{
    BROKER_URL, CELERY_CONFIG_OPTIONS, DAG_PROCESSOR_THRESHOLD, DEFAULT_CELERY_CONFIG,
    DEFAULT_QUEUE, EXECUTOR, MULTI_TEAM, PARALLELISM, RESULT_BACKEND, SCHEDULER_THRESHOLD,
    SQL_ALCHEMY_CONN, SSL_ACTIVE, SSL_CACERT, SSL_CERT, SSL_KEY, TRIGGERER_THRESHOLD,
    WORKER_AUTOSCALE, WORKER_CONCURRENCY,
};

/// Each `[celery] ssl_*` option and the `[[executors]]` key it sets.
const SSL_KEYS: [(AirflowOption, &str); 4] = [
    (SSL_ACTIVE, "ssl_active"),
    (SSL_KEY, "ssl_key"),
    (SSL_CERT, "ssl_cert"),
    (SSL_CACERT, "ssl_cacert"),
];

/// Airflow's broker when `[celery] broker_url` is unset.
pub const AIRFLOW_DEFAULT_BROKER: &str = overseer_celery::AIRFLOW_DEFAULT_BROKER_URL;

/// What the layers below Airflow's configured, as far as Airflow's layer
/// needs to know.
#[derive(Debug, Default)]
pub struct Earlier<'a> {
    /// The executors, as they wrote them.
    pub executors: &'a [Dict],
    /// Whether one of them set `database.url`.
    pub database_set: bool,
}

/// The values Airflow's configuration sets, as Overseer keys, with where each
/// came from (a variable, a `_CMD`, an option of `airflow.cfg`), for
/// `overseer config` and error messages.
pub struct AirflowEnv {
    values: Dict,
    origins: BTreeMap<String, String>,
}

impl AirflowEnv {
    /// Reads what Airflow's configuration (`conf`: its variables and its
    /// `airflow.cfg`) sets. `earlier` is what the earlier layers configured: an
    /// executor Airflow names keeps their settings (queues, worker ping) for the
    /// same name.
    ///
    /// On a host whose Airflow has an `airflow.cfg` (Airflow writes one where it
    /// runs), the executors and the database nothing sets are Airflow's
    /// defaults (`LocalExecutor`, `sqlite:///{AIRFLOW_HOME}/airflow.db`), as
    /// Airflow itself uses them, unless an earlier layer set them: Overseer then
    /// supervises what that Airflow runs. Without one, nothing tells Overseer an
    /// Airflow is there, and its own defaults stay.
    pub fn read(conf: &AirflowConf, earlier: &Earlier) -> Result<Self, ConfigError> {
        let mut env = Self {
            values: Dict::new(),
            origins: BTreeMap::new(),
        };
        let set_for = |option: &AirflowOption,
                       team: Option<&str>|
         -> Result<Option<(String, String)>, ConfigError> {
            let resolved = conf.get(option, team)?;
            Ok(match resolved.source {
                Source::Default(_) => None,
                _ if resolved.value.trim().is_empty() => None,
                source => Some((resolved.value, source.to_string())),
            })
        };
        let set = |option: &AirflowOption| set_for(option, None);
        // Airflow's default for an option nothing sets, where Airflow is found
        // and no earlier layer set the key.
        let airflows_default = |option: &AirflowOption,
                                earlier_set: bool|
         -> Result<Option<(String, String)>, ConfigError> {
            let Some(file) = conf.file() else {
                return Ok(None);
            };
            if earlier_set {
                return Ok(None);
            }
            let resolved = conf.get(option, None)?;
            Ok(matches!(resolved.source, Source::Default(_)).then(|| {
                let origin = format!("{}, as {} sets none", resolved.source, file.display());
                (resolved.value, origin)
            }))
        };
        let earlier_executors = earlier.executors;

        let conn = match set(&SQL_ALCHEMY_CONN)? {
            Some(conn) => Some(conn),
            None => airflows_default(&SQL_ALCHEMY_CONN, earlier.database_set)?,
        };
        if let Some((conn, origin)) = conn {
            let url = sqlalchemy_to_sea_orm(&conn)
                .map_err(|problem| ConfigError::new("database.url", origin.clone(), problem))?;
            env.insert(&["database", "url"], Value::from(url), origin);
        }

        for (option, key) in [
            (SCHEDULER_THRESHOLD, "scheduler"),
            (TRIGGERER_THRESHOLD, "triggerer"),
            (DAG_PROCESSOR_THRESHOLD, "dag_processor"),
        ] {
            if let Some((text, origin)) = set(&option)? {
                let threshold = parse_seconds(&text, bounds::of(&format!("thresholds.{key}")))
                    .map_err(|problem| {
                        ConfigError::new(format!("thresholds.{key}"), origin.clone(), problem)
                    })?;
                env.insert(
                    &["thresholds", key],
                    Value::from(duration::format(threshold)),
                    origin,
                );
            }
        }

        let parallelism = match set(&PARALLELISM)? {
            Some((text, origin)) => {
                let slots = text
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        ConfigError::new(
                            "executors",
                            origin.clone(),
                            format!(
                                "[core] parallelism: expected a positive whole number, got {:?}",
                                text.trim()
                            ),
                        )
                    })?;
                Some((slots, origin))
            }
            None => None,
        };
        let (celery, field_origins) = CeleryEnv::read(&set_for, None)?;
        let executor_list = match set(&EXECUTOR)? {
            Some(list) => Some(list),
            None => airflows_default(&EXECUTOR, !earlier_executors.is_empty())?,
        };
        let list_origin = executor_list
            .as_ref()
            .map(|(_, origin)| origin.clone())
            .or_else(|| field_origins.first().map(|(_, origin)| origin.clone()))
            .unwrap_or_else(|| LAYER.to_owned());
        let executors = match executor_list.as_ref().map(|(list, _)| list) {
            Some(list) => {
                let multi_team = match set(&MULTI_TEAM)? {
                    Some((text, origin)) => airflow_bool(&text)
                        .map_err(|problem| ConfigError::new("", origin, problem))?,
                    None => false,
                };
                let teams = team_lists(list, multi_team).map_err(|problem| {
                    ConfigError::new("executors", list_origin.clone(), problem)
                })?;
                // Every list is parsed before anything is made of one, so
                // a refusal is the only line a bad list prints.
                let mut parsed = Vec::new();
                let mut count = 0;
                for (team, entries) in teams {
                    let names = names_of(&entries, team.as_deref(), count, &list_origin)?;
                    count += names.len();
                    parsed.push((team, names));
                }
                let mut executors = Vec::new();
                for (team, names) in parsed {
                    let (team_celery, team_origins) = match &team {
                        None => (celery.clone(), field_origins.clone()),
                        Some(team) => CeleryEnv::read(&set_for, Some(team))?,
                    };
                    for executor in
                        executors_from(&names, earlier_executors, &team_celery, &list_origin)
                    {
                        let index = executors.len();
                        for (field, origin) in &team_origins {
                            env.origins
                                .insert(format!("executors.{index}.{field}"), origin.clone());
                        }
                        executors.push(executor);
                    }
                }
                Some(executors)
            }
            // No executor list from Airflow: its broker, queue and TLS settings still
            // apply to the Celery executors configured before.
            None if celery.broker.is_some()
                || parallelism.is_some()
                || celery.result_backend.is_some()
                || celery.worker_concurrency.is_some()
                || celery.default_queue.is_some()
                || !celery.ssl.is_empty() =>
            {
                let mut executors = earlier_executors.to_vec();
                for (index, executor) in executors.iter_mut().enumerate() {
                    apply_celery(executor, &celery, None);
                    for (field, origin) in &field_origins {
                        env.origins
                            .insert(format!("executors.{index}.{field}"), origin.clone());
                    }
                }
                Some(executors)
            }
            None => None,
        };
        if let Some(mut executors) = executors {
            if let Some((slots, origin)) = &parallelism {
                for (index, executor) in executors.iter_mut().enumerate() {
                    executor.insert("parallelism".into(), Value::from(*slots));
                    env.origins
                        .insert(format!("executors.{index}.parallelism"), origin.clone());
                }
            }
            let value = Value::from(executors.into_iter().map(Value::from).collect::<Vec<_>>());
            env.insert(&["executors"], value, list_origin);
        }
        Ok(env)
    }

    /// Each key Airflow's configuration set, and where its value came from.
    pub fn origins(&self) -> &BTreeMap<String, String> {
        &self.origins
    }

    fn insert(&mut self, path: &[&str], value: Value, origin: String) {
        self.origins.insert(path.join("."), origin);
        let (last, parents) = path.split_last().expect("a key path");
        let mut dict = &mut self.values;
        for key in parents {
            let entry = dict
                .entry((*key).to_owned())
                .or_insert_with(|| Value::from(Dict::new()));
            dict = match entry {
                Value::Dict(_, inner) => inner,
                _ => unreachable!("{key} is a section"),
            };
        }
        dict.insert((*last).to_owned(), value);
    }
}

/// What Airflow's configuration says about its Celery executors, or a team's.
#[derive(Clone)]
struct CeleryEnv {
    /// `[celery] broker_url`.
    broker: Option<String>,
    /// `[celery] result_backend`.
    result_backend: Option<String>,
    /// The workers' concurrency: `[celery] worker_autoscale`'s largest, else
    /// `[celery] worker_concurrency`.
    worker_concurrency: Option<u32>,
    /// `[operators] default_queue`.
    default_queue: Option<String>,
    /// `[celery] ssl_*`, as `[[executors]]` keys and values, and where each came from.
    ssl: Vec<(&'static str, Value, String)>,
    /// `[celery] celery_config_options`, when it names a dict of the
    /// deployment's own, and where it came from.
    config_options: Option<(String, String)>,
}

/// The concurrency Airflow starts its Celery workers with (`airflow celery
/// worker` takes `[celery] worker_autoscale`, `max,min`, over `[celery]
/// worker_concurrency`), and where it came from; `None` when neither is set.
fn worker_concurrency(
    set: &TeamLookup<'_>,
    team: Option<&str>,
) -> Result<Option<(u32, String)>, ConfigError> {
    let positive = |text: &str| text.trim().parse::<u32>().ok().filter(|n| *n > 0);
    if let Some((text, origin)) = set(&WORKER_AUTOSCALE, team)?
        && !text.trim().is_empty()
    {
        let max = text.split(',').next().and_then(positive).ok_or_else(|| {
            ConfigError::new(
                "executors",
                origin.clone(),
                format!(
                    "[celery] worker_autoscale: expected max,min (two positive whole numbers, as `16,12`), got {:?}",
                    text.trim()
                ),
            )
        })?;
        return Ok(Some((max, origin)));
    }
    let Some((text, origin)) = set(&WORKER_CONCURRENCY, team)? else {
        return Ok(None);
    };
    let n = positive(&text).ok_or_else(|| {
        ConfigError::new(
            "executors",
            origin.clone(),
            format!(
                "[celery] worker_concurrency: expected a positive whole number, got {:?}",
                text.trim()
            ),
        )
    })?;
    Ok(Some((n, origin)))
}

/// Where each `[[executors]]` key Airflow set came from.
type FieldOrigins = Vec<(&'static str, String)>;

impl CeleryEnv {
    /// The Celery settings of everyone (`team` `None`) or of a team, as Airflow's
    /// Celery executor reads them for that team.
    fn read(set: &TeamLookup<'_>, team: Option<&str>) -> Result<(Self, FieldOrigins), ConfigError> {
        let broker = set(&BROKER_URL, team)?;
        let result_backend = set(&RESULT_BACKEND, team)?;
        let worker_concurrency = worker_concurrency(set, team)?;
        let celery = Self {
            broker: broker.as_ref().map(|(url, _)| url.clone()),
            result_backend: result_backend
                .as_ref()
                .map(|(url, _)| url.trim().to_owned()),
            worker_concurrency: worker_concurrency.as_ref().map(|(n, _)| *n),
            default_queue: set(&DEFAULT_QUEUE, team)?.map(|(q, _)| q.trim().to_owned()),
            ssl: ssl_settings(&|option: &AirflowOption| set(option, team))?,
            config_options: set(&CELERY_CONFIG_OPTIONS, team)?
                .map(|(path, origin)| (path.trim().to_owned(), origin))
                .filter(|(path, _)| path != DEFAULT_CELERY_CONFIG),
        };
        let mut origins = Vec::new();
        if let Some((_, origin)) = broker {
            origins.push(("broker_url", origin));
        }
        if let Some((_, origin)) = result_backend {
            origins.push(("result_backend", origin));
        }
        if let Some((_, origin)) = worker_concurrency {
            origins.push(("worker_concurrency", origin));
        }
        origins.extend(
            celery
                .ssl
                .iter()
                .map(|(key, _, origin)| (*key, origin.clone())),
        );
        Ok((celery, origins))
    }
}

type TeamLookup<'a> =
    dyn Fn(&AirflowOption, Option<&str>) -> Result<Option<(String, String)>, ConfigError> + 'a;

/// Airflow's `[core] executor` split into its teams' lists, as Airflow's
/// `ExecutorLoader._get_team_executor_configs` splits it: `;` between lists, the
/// global one first (no `team=`), a team's ignored (with a warning) unless
/// `[core] multi_team`; Airflow's own errors for a team named twice and for
/// the order.
fn team_lists(list: &str, multi_team: bool) -> Result<Vec<(Option<String>, String)>, String> {
    let mut lists: Vec<(Option<String>, String)> = Vec::new();
    for part in list.split(';') {
        let (team, names) = if !part.contains('=') || part.starts_with('=') {
            (None, part.trim_matches('=').to_owned())
        } else if multi_team {
            let mut pieces = part.split('=');
            let (Some(team), Some(names), None) = (pieces.next(), pieces.next(), pieces.next())
            else {
                return Err(format!(
                    "the team entry {:?} has more than one '='",
                    part.trim()
                ));
            };
            (Some(executor::check_team(team.trim())?), names.to_owned())
        } else {
            tracing::warn!(
                "[core] multi_team is not enabled, so Airflow ignores the team executors {:?}, and so does Overseer",
                part.trim()
            );
            continue;
        };
        if lists.iter().any(|(seen, _)| *seen == team) {
            let team = team.as_deref().unwrap_or("(global)");
            return Err(format!(
                "team '{team}' appears more than once in the executor list: each team can be named once"
            ));
        }
        if team.is_none() && lists.iter().any(|(seen, _)| seen.is_some()) {
            return Err(
                "the global executors must come before the teams' (e.g. 'CeleryExecutor;team1=LocalExecutor')".into(),
            );
        }
        lists.push((team, names));
    }
    if !lists.iter().any(|(team, _)| team.is_none()) {
        return Err(
            "at least one global executor must come first (e.g. 'CeleryExecutor;team1=LocalExecutor')".into(),
        );
    }
    Ok(lists)
}

/// `[celery] ssl_active`, `ssl_key`, `ssl_cert`, `ssl_cacert`, as the keys of an
/// `[[executors]]` entry; `ssl_active` read as Airflow reads a boolean.
type Lookup<'a> = dyn Fn(&AirflowOption) -> Result<Option<(String, String)>, ConfigError> + 'a;

fn ssl_settings(set: &Lookup<'_>) -> Result<Vec<(&'static str, Value, String)>, ConfigError> {
    let mut ssl = Vec::new();
    for (option, key) in SSL_KEYS {
        let Some((text, origin)) = set(&option)? else {
            continue;
        };
        let value = if key == "ssl_active" {
            Value::from(airflow_bool(&text).map_err(|problem| {
                ConfigError::new(format!("executors[].{key}"), origin.clone(), problem)
            })?)
        } else {
            Value::from(text.trim())
        };
        ssl.push((key, value, origin));
    }
    Ok(ssl)
}

/// A boolean as Airflow's `conf.getboolean` reads one.
fn airflow_bool(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "1" => Ok(true),
        "f" | "false" | "0" => Ok(false),
        _ => Err(format!(
            "{:?} is not a boolean (Airflow accepts true, false, t, f, 1, 0)",
            text.trim()
        )),
    }
}

/// One of Airflow's executor lists (a team's, with `team`) parsed as Airflow's
/// `ExecutorLoader` parses it, with its refusal of one executor twice in a
/// list (the same module path); `first` is the index of the first, for errors.
fn names_of(
    list: &str,
    team: Option<&str>,
    first: usize,
    origin: &str,
) -> Result<Vec<ExecutorName>, ConfigError> {
    let mut names: Vec<ExecutorName> = Vec::new();
    for (index, entry) in list.split(',').map(str::trim).enumerate() {
        let key = format!("executors[{}].name", first + index);
        let mut name: ExecutorName = entry
            .parse()
            .map_err(|problem| ConfigError::new(key.clone(), origin, problem))?;
        name.team = team.map(str::to_owned);
        if let Some(twin) = names.iter().find(|n| n.module_path() == name.module_path()) {
            let list = team.map_or("the global list".to_owned(), |t| format!("team {t}'s list"));
            return Err(ConfigError::new(
                key,
                origin,
                format!(
                    "{:?} and {:?} are one executor ({}) configured twice in {list}, \
                     which Airflow refuses (\"Duplicate executors are not yet supported\")",
                    twin.to_string(),
                    name.to_string(),
                    name.module_path()
                ),
            ));
        }
        names.push(name);
    }
    Ok(names)
}

/// The executors named in one of Airflow's lists, each keeping an earlier
/// layer's settings for the same name.
fn executors_from(
    names: &[ExecutorName],
    earlier: &[Dict],
    celery: &CeleryEnv,
    origin: &str,
) -> Vec<Dict> {
    names
        .iter()
        .map(|name| {
            let name = name.to_string();
            let mut executor = earlier
                .iter()
                .find(|e| name_of(e) == Some(name.as_str()))
                .cloned()
                .unwrap_or_else(|| Dict::from([("name".to_owned(), Value::from(name))]));
            apply_celery(&mut executor, celery, Some(origin));
            executor
        })
        .collect()
}

/// The `name` of an `[[executors]]` entry as the layers hold it.
fn name_of(executor: &Dict) -> Option<&str> {
    executor.get("name").and_then(Value::as_str)
}

/// Gives a Celery executor Airflow's broker and default queue. With
/// `airflow_default` (where Airflow's executor list came from), a Celery
/// executor with no broker at all gets Airflow's own default broker, as Airflow
/// would, and says so.
///
/// The entry is the text the earlier layers read, and the broker is the text
/// of the variable: no typed value (whose secrets print redacted) is ever
/// turned back into configuration.
fn apply_celery(executor: &mut Dict, celery: &CeleryEnv, airflow_default: Option<&str>) {
    let (broker, default_queue) = (celery.broker.as_deref(), celery.default_queue.as_deref());
    let Some(name) = name_of(executor).map(str::to_owned) else {
        return;
    };
    let Some(parsed) = name
        .parse::<ExecutorName>()
        .ok()
        .filter(|n| n.kind() == ExecutorKind::Celery)
    else {
        return;
    };
    if let Some(broker) = broker {
        executor.insert("broker_url".into(), Value::from(broker.trim()));
    } else if let Some(list_origin) = airflow_default
        && !executor.contains_key("broker_url")
    {
        tracing::warn!(
            "{list_origin} names {name} but no broker URL is set ({}, [celery] broker_url \
             in airflow.cfg, or broker_url in overseer.toml): using Airflow's default {AIRFLOW_DEFAULT_BROKER}",
            BROKER_URL.variable(parsed.team.as_deref())
        );
        executor.insert("broker_url".into(), Value::from(AIRFLOW_DEFAULT_BROKER));
    }
    if let Some(backend) = &celery.result_backend {
        executor.insert("result_backend".into(), Value::from(backend.as_str()));
    }
    if let Some(concurrency) = celery.worker_concurrency {
        executor.insert("worker_concurrency".into(), Value::from(concurrency));
    }
    for (key, value, _) in &celery.ssl {
        executor.insert((*key).to_owned(), value.clone());
    }
    if let Some((path, origin)) = &celery.config_options {
        tracing::warn!(
            "{origin} sets [celery] celery_config_options = {path}: Airflow lays that Python \
             dict over {name}'s Celery settings, and Overseer does not import Python; if it sets \
             the broker or its TLS, set broker_url (and ssl_*) for {name} in overseer.toml's \
             [[executors]] too"
        );
    }
    let default_queues = Value::from(super::executor::default_queues());
    if let Some(queue) = default_queue
        && executor.get("queues").is_none_or(|q| *q == default_queues)
    {
        executor.insert("queues".into(), Value::from(vec![queue.to_owned()]));
    }
}

/// The name of Airflow's layer, as figment's metadata holds it.
pub(super) const LAYER: &str = "Airflow configuration";

impl Provider for AirflowEnv {
    fn metadata(&self) -> Metadata {
        let origins = self.origins.clone();
        Metadata::named(LAYER).interpolater(move |_: &Profile, keys: &[&str]| {
            // The longest configured prefix of the key names its source.
            (1..=keys.len())
                .rev()
                .find_map(|n| origins.get(&keys[..n].join(".")))
                .cloned()
                .unwrap_or_else(|| LAYER.to_owned())
        })
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.values.clone()))
    }
}

/// Translates a SQLAlchemy URL, as Airflow takes it, into a sea-orm one.
///
/// - `postgresql://`, `postgresql+psycopg2://`, `postgresql+psycopg://`, `postgres://`
///   become `postgres://` (query options such as `sslmode` are kept);
/// - `mysql://`, `mysql+mysqldb://`, `mysql+pymysql://`, ... become `mysql://`;
/// - `sqlite:////abs/path` (four slashes) is the absolute file `/abs/path`,
///   `sqlite:///rel/path` is refused as Airflow refuses it, and `sqlite://`
///   an in-memory database. The file must exist: Overseer does not create
///   Airflow's database.
pub fn sqlalchemy_to_sea_orm(url: &str) -> Result<String, String> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("is not a SQLAlchemy URL (expected dialect://...)".into());
    };
    let dialect = scheme
        .split('+')
        .next()
        .unwrap_or(scheme)
        .to_ascii_lowercase();
    match dialect.as_str() {
        "postgresql" | "postgres" => Ok(format!("postgres://{rest}")),
        "mysql" | "mariadb" => Ok(format!("mysql://{rest}")),
        "sqlite" => {
            let path = rest.split('?').next().unwrap_or_default();
            match path.strip_prefix('/') {
                None if path.is_empty() => Ok("sqlite::memory:".into()),
                // As Airflow's `configure_orm`, which refuses the same URL.
                Some(file) if !file.starts_with('/') => Err(
                    "Airflow cannot use a relative SQLite path (use sqlite:////absolute/path)"
                        .into(),
                ),
                Some(file) => Ok(format!("sqlite://{file}")),
                _ => Err(format!(
                    "SQLite URL {url:?} names no file (expected sqlite:////absolute/path)"
                )),
            }
        }
        _ => Err(format!(
            "dialect {scheme:?} is not supported (Overseer reads postgresql, mysql and sqlite databases)"
        )),
    }
}

/// Parses Airflow's thresholds: a number of seconds, integer or fractional,
/// within the `bounds` of the key it sets (`1e20` is refused, not converted).
pub fn parse_seconds(text: &str, bounds: Bounds) -> Result<Duration, String> {
    let seconds = text
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0);
    let Some(seconds) = seconds else {
        return Err(format!(
            "expected a positive number of seconds, got {:?}",
            text.trim()
        ));
    };
    bounds.seconds(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlalchemy_urls_translate_to_sea_orm_urls() {
        for (sqlalchemy, sea_orm) in [
            (
                "postgresql+psycopg2://airflow:pw@db:5432/airflow",
                "postgres://airflow:pw@db:5432/airflow",
            ),
            (
                "postgresql://airflow@db/airflow?sslmode=require",
                "postgres://airflow@db/airflow?sslmode=require",
            ),
            (
                "postgresql+psycopg://a@db/airflow",
                "postgres://a@db/airflow",
            ),
            (
                "mysql+mysqldb://airflow:pw@db:3306/airflow",
                "mysql://airflow:pw@db:3306/airflow",
            ),
            (
                "mysql+pymysql://airflow@db/airflow?charset=utf8mb4",
                "mysql://airflow@db/airflow?charset=utf8mb4",
            ),
            (
                "sqlite:////opt/airflow/airflow.db",
                "sqlite:///opt/airflow/airflow.db",
            ),
            ("sqlite://", "sqlite::memory:"),
        ] {
            assert_eq!(
                sqlalchemy_to_sea_orm(sqlalchemy).unwrap(),
                sea_orm,
                "{sqlalchemy}"
            );
        }
    }

    #[test]
    fn unsupported_sqlalchemy_urls_are_refused_without_their_credentials() {
        let err = sqlalchemy_to_sea_orm("mssql+pyodbc://sa:hunter2@db/airflow").unwrap_err();
        assert_eq!(
            err,
            r#"dialect "mssql+pyodbc" is not supported (Overseer reads postgresql, mysql and sqlite databases)"#
        );
        assert!(sqlalchemy_to_sea_orm("airflow.db").is_err());
        assert_eq!(
            sqlalchemy_to_sea_orm("sqlite:///airflow.db").unwrap_err(),
            "Airflow cannot use a relative SQLite path (use sqlite:////absolute/path)"
        );
    }

    /// `check_command` and `check_url` are never Airflow's: an executor Airflow
    /// names keeps them from the layer that set them, as the text it was read
    /// from, whether Airflow lists the executors or only sets the broker.
    #[test]
    fn an_executor_airflow_names_keeps_its_check_from_an_earlier_layer() {
        let entry = |name: &str, key: &str, value: Value| {
            Dict::from([
                ("name".to_owned(), Value::from(name)),
                (key.to_owned(), value),
            ])
        };
        let url = "http://ops:hunter2@probe:8080/health?token=s3cret";
        let argv = vec!["/usr/local/bin/probe".to_owned(), "--fast".to_owned()];
        let earlier = [
            entry("KubernetesExecutor", "check_url", Value::from(url)),
            entry(
                "team:my.company.BatchExecutor",
                "check_command",
                Value::from(argv.clone()),
            ),
        ];
        for list in [
            Some("CeleryExecutor, KubernetesExecutor,team:my.company.BatchExecutor"),
            None,
        ] {
            let mut vars = vec![
                ("HOME".to_owned(), "/nonexistent".to_owned()),
                (
                    BROKER_URL.variable(None),
                    "redis://broker:6379/0".to_owned(),
                ),
            ];
            if let Some(list) = list {
                vars.push((EXECUTOR.variable(None), list.to_owned()));
            }
            let conf = AirflowConf::read(vars).unwrap();
            let earlier = Earlier {
                executors: &earlier,
                database_set: false,
            };
            let env = AirflowEnv::read(&conf, &earlier).unwrap();
            let Some(Value::Array(_, executors)) = env.values.get("executors") else {
                panic!("Airflow's layer sets the executors: {:?}", env.values);
            };
            let field = |name: &str, key: &str| {
                executors
                    .iter()
                    .filter_map(Value::as_dict)
                    .find(|e| name_of(e) == Some(name))
                    .and_then(|e| e.get(key).cloned())
            };
            assert_eq!(
                field("KubernetesExecutor", "check_url").and_then(|v| v.into_string()),
                Some(url.to_owned()),
                "{list:?}"
            );
            assert_eq!(
                field("team:my.company.BatchExecutor", "check_command")
                    .and_then(|v| v.deserialize::<Vec<String>>().ok()),
                Some(argv.clone()),
                "{list:?}"
            );
            // Airflow's broker goes to Celery executors only.
            assert_eq!(field("KubernetesExecutor", "broker_url"), None, "{list:?}");
        }
    }

    #[test]
    fn thresholds_are_seconds_within_their_bounds() {
        let bounds = super::bounds::of("thresholds.scheduler");
        assert_eq!(
            parse_seconds("30", bounds).unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(
            parse_seconds("2.5", bounds).unwrap(),
            Duration::from_millis(2500)
        );
        assert_eq!(
            parse_seconds("-1", bounds).unwrap_err(),
            r#"expected a positive number of seconds, got "-1""#
        );
        assert!(parse_seconds("30s", bounds).is_err());
        for text in ["1e20", "1e308", "inf", "nan", "0.5", "604801"] {
            assert!(parse_seconds(text, bounds).is_err(), "{text}");
        }
    }
}
