//! Airflow's executor lists as `[[executors]]` entries: `[core] executor`
//! split into its teams' lists ([`team_lists`]), each parsed as Airflow's
//! `ExecutorLoader` parses it ([`names_of`]), and made entries that keep an
//! earlier layer's settings ([`executors_from`]).

use figment::value::{Dict, Value};

use super::celery::{CeleryEnv, apply_celery};
use crate::config::ConfigError;
use crate::config::executor::{self, ExecutorName};

/// Airflow's `[core] executor` split into its teams' lists, as Airflow's
/// `ExecutorLoader._get_team_executor_configs` splits it: `;` between lists, the
/// global one first (no `team=`), a team's ignored (with a warning) unless
/// `[core] multi_team`; Airflow's own errors for a team named twice and for
/// the order.
pub(super) fn team_lists(
    list: &str,
    multi_team: bool,
) -> Result<Vec<(Option<String>, String)>, String> {
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

/// One of Airflow's executor lists (a team's, with `team`) parsed as Airflow's
/// `ExecutorLoader` parses it, with its refusal of one executor twice in a
/// list (the same module path); `first` is the index of the first, for errors.
pub(super) fn names_of(
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
pub(super) fn executors_from(
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
pub(super) fn name_of(executor: &Dict) -> Option<&str> {
    executor.get("name").and_then(Value::as_str)
}
