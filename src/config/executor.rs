//! Executor names as Airflow's `[core] executor` writes them.
//!
//! An entry is `Class`, `alias:Class`, or a module path to a custom class
//! (`my.company.MyExecutor`, `alias:my.company.MyExecutor`); a team's executor
//! (Airflow 3.3's `[core] multi_team`) is written `team=Class`, as the team's
//! part of Airflow's list. The full entry, as written, is the `executor_class`
//! of the executor's row, so rows, the JSON, `/metrics` and alerts name the team.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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

impl FromStr for ExecutorName {
    type Err = String;

    fn from_str(entry: &str) -> Result<Self, String> {
        let entry = entry.trim();
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

#[cfg(test)]
mod tests {
    use super::*;

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
