//! What Airflow's Celery settings give a Celery executor: `[celery]
//! broker_url`, `result_backend`, the workers' concurrency, `[operators]
//! default_queue` and `[celery] ssl_*`, read for everyone or for a team
//! ([`CeleryEnv`]), and laid over an `[[executors]]` entry ([`apply_celery`]).

use figment::value::{Dict, Value};

use super::conf::{
    AirflowOption, BROKER_URL, CELERY_CONFIG_OPTIONS, DEFAULT_CELERY_CONFIG, DEFAULT_QUEUE,
    RESULT_BACKEND, SSL_ACTIVE, SSL_CACERT, SSL_CERT, SSL_KEY, WORKER_AUTOSCALE,
    WORKER_CONCURRENCY,
};
use super::executors::name_of;
use super::values::airflow_bool;
use crate::config::ConfigError;
use crate::config::executor::{ExecutorKind, ExecutorName};

/// Each `[celery] ssl_*` option and the `[[executors]]` key it sets.
const SSL_KEYS: [(AirflowOption, &str); 4] = [
    (SSL_ACTIVE, "ssl_active"),
    (SSL_KEY, "ssl_key"),
    (SSL_CERT, "ssl_cert"),
    (SSL_CACERT, "ssl_cacert"),
];

/// Airflow's broker when `[celery] broker_url` is unset.
pub const AIRFLOW_DEFAULT_BROKER: &str = overseer_celery::AIRFLOW_DEFAULT_BROKER_URL;

/// What Airflow's configuration says about its Celery executors, or a team's.
#[derive(Clone)]
pub(super) struct CeleryEnv {
    /// `[celery] broker_url`.
    pub(super) broker: Option<String>,
    /// `[celery] result_backend`.
    pub(super) result_backend: Option<String>,
    /// The workers' concurrency: `[celery] worker_autoscale`'s largest, else
    /// `[celery] worker_concurrency`.
    pub(super) worker_concurrency: Option<u32>,
    /// `[operators] default_queue`.
    pub(super) default_queue: Option<String>,
    /// `[celery] ssl_*`, as `[[executors]]` keys and values, and where each came from.
    pub(super) ssl: Vec<(&'static str, Value, String)>,
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
pub(super) type FieldOrigins = Vec<(&'static str, String)>;

impl CeleryEnv {
    /// The Celery settings of everyone (`team` `None`) or of a team, as Airflow's
    /// Celery executor reads them for that team.
    pub(super) fn read(
        set: &TeamLookup<'_>,
        team: Option<&str>,
    ) -> Result<(Self, FieldOrigins), ConfigError> {
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

pub(super) type TeamLookup<'a> =
    dyn Fn(&AirflowOption, Option<&str>) -> Result<Option<(String, String)>, ConfigError> + 'a;

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

/// Gives a Celery executor Airflow's broker and default queue. With
/// `airflow_default` (where Airflow's executor list came from), a Celery
/// executor with no broker at all gets Airflow's own default broker, as Airflow
/// would, and says so.
///
/// The entry is the text the earlier layers read, and the broker is the text
/// of the variable: no typed value (whose secrets print redacted) is ever
/// turned back into configuration.
pub(super) fn apply_celery(executor: &mut Dict, celery: &CeleryEnv, airflow_default: Option<&str>) {
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
    let default_queues = Value::from(crate::config::executor::default_queues());
    if let Some(queue) = default_queue
        && executor.get("queues").is_none_or(|q| *q == default_queues)
    {
        executor.insert("queues".into(), Value::from(vec![queue.to_owned()]));
    }
}
