//! Airflow's own configuration, as a configuration layer.
//!
//! Pointed at an Airflow deployment's environment, Overseer finds the same
//! metadata database, executors, broker and health thresholds Airflow uses,
//! resolved as Airflow resolves them ([`conf`]: variables, `_CMD`, `airflow.cfg`).
//! Each value is translated here into Overseer's keys; an error names the
//! variable or the option of `airflow.cfg` it came from.
//!
//! # Layout
//! - this module: [`AirflowEnv`], the layer: each of Airflow's settings read
//!   and set as Overseer's key, with where it came from;
//! - [`conf`]: Airflow's options, resolved as Airflow resolves them (with
//!   `expand` and `ini`);
//! - `executors`: Airflow's executor lists (`[core] executor`, its teams'),
//!   parsed as Airflow parses them, as `[[executors]]` entries;
//! - `celery`: what Airflow's Celery settings give a Celery executor (broker,
//!   result backend, concurrency, default queue, TLS);
//! - `values`: Airflow's values in Overseer's terms: a SQLAlchemy URL as
//!   sea-orm's, seconds, booleans.

use std::collections::BTreeMap;

use figment::value::{Dict, Map, Value};
use figment::{Metadata, Profile, Provider};

use super::bounds;
use super::{ConfigError, duration};

mod celery;
pub mod conf;
mod executors;
mod expand;
mod ini;
mod values;

pub use celery::AIRFLOW_DEFAULT_BROKER;
use celery::{CeleryEnv, apply_celery};
pub use conf::{AirflowConf, AirflowOption, Resolved, Source};
use conf::{
    DAG_PROCESSOR_THRESHOLD, EXECUTOR, MULTI_TEAM, PARALLELISM, SCHEDULER_THRESHOLD,
    SQL_ALCHEMY_CONN, TRIGGERER_THRESHOLD,
};
use executors::{executors_from, names_of, team_lists};
use values::airflow_bool;
pub use values::{parse_seconds, sqlalchemy_to_sea_orm};

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

#[cfg(test)]
mod tests;
