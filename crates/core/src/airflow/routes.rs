//! Which supervised executor runs a task instance: Airflow's routing of a
//! task's `executor` (and its DAG's team) to an executor, read by every rule
//! and count that needs to know whose work a task instance is.

use std::collections::HashMap;

/// Which supervised executor runs a task instance, as Airflow 3.3.2's
/// scheduler decides (`SchedulerJobRunner._try_to_load_executor`): a task's
/// `executor=` names an executor by its alias, its module path or its class
/// name, and goes to the first in the list with that name that is global or
/// of the task's team; no `executor` goes to the task's team's first executor,
/// else to the default (the first of all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes {
    /// Each name an executor answers to, with the indices answering to it, in order.
    by_name: HashMap<String, Vec<usize>>,
    /// Each executor's team, by index.
    teams: Vec<Option<String>>,
    /// Whether an executor was configured by a short name (`CeleryExecutor`),
    /// which Airflow resolves to a module path whose class a task may name.
    short: Vec<bool>,
    /// Whether any executor has a team.
    by_team: bool,
}

impl Routes {
    /// The routes of the executors configured as `executor_classes`, in the
    /// order they are supervised (`CeleryExecutor`, `alias:my.module.MyExecutor`,
    /// `team_a=CeleryExecutor`).
    pub fn new<'a>(executor_classes: impl IntoIterator<Item = &'a str>) -> Self {
        let mut routes = Self::default();
        for (index, entry) in executor_classes.into_iter().enumerate() {
            let (team, entry) = match entry.split_once('=') {
                Some((team, rest)) => (Some(team.trim().to_owned()), rest),
                None => (None, entry),
            };
            let (alias, path) = match entry.split_once(':') {
                Some((alias, path)) => (Some(alias.trim()), path.trim()),
                None => (None, entry.trim()),
            };
            let mut names = vec![path, class_name(path)];
            names.extend(alias);
            names.dedup();
            for name in names {
                let indices = routes.by_name.entry(name.to_owned()).or_default();
                if indices.last() != Some(&index) {
                    indices.push(index);
                }
            }
            routes.by_team |= team.is_some();
            routes.teams.push(team);
            routes.short.push(!path.contains('.'));
        }
        routes
    }

    /// Whether any executor has a team: the read then learns each task's team.
    pub fn by_team(&self) -> bool {
        self.by_team
    }

    /// The index of the executor that runs a task instance whose `executor`
    /// column holds `executor` and whose DAG belongs to `team`; none when no
    /// supervised executor does (Airflow would not run it either).
    pub fn route(&self, executor: Option<&str>, team: Option<&str>) -> Option<usize> {
        let team = team
            .map(str::trim)
            .filter(|t| !t.is_empty() && self.by_team());
        let of_team = |index: &usize| team.is_some() && self.teams[*index].as_deref() == team;
        match executor.map(str::trim).filter(|v| !v.is_empty()) {
            None => team
                .and_then(|_| (0..self.teams.len()).find(of_team))
                .or((!self.teams.is_empty()).then_some(0)),
            Some(value) => {
                let allowed = |index: &usize| self.teams[*index].is_none() || of_team(index);
                let named = self.by_name.get(value).into_iter().flatten().copied();
                // `airflow.providers.celery...CeleryExecutor` names the
                // executor configured as `CeleryExecutor`.
                let by_class = self
                    .by_name
                    .get(class_name(value))
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|index| self.short[*index]);
                let mut candidates: Vec<usize> = named.chain(by_class).collect();
                candidates.sort_unstable();
                candidates.into_iter().find(allowed)
            }
        }
    }
}

/// `CeleryExecutor` of `airflow.providers.celery.executors.celery_executor.CeleryExecutor`.
fn class_name(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}
