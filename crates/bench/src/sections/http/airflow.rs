//! Airflow's own API server beside Overseer: the variables both servers
//! read, the command that runs Airflow's CLI in its venv, and the recipe the
//! report gives when Airflow is not there.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{WRK_THREADS, WRK_TIMEOUT};
use crate::pg::BenchDb;
use crate::process;

/// `airflow db migrate` on an empty database.
pub(crate) const MIGRATE_DEADLINE: Duration = Duration::from_secs(600);
/// Airflow's API server, from a cold interpreter, until it answers.
pub(crate) const AIRFLOW_START_DEADLINE: Duration = Duration::from_secs(300);
/// The component rows' liveness threshold for both servers (Airflow's own
/// variables, which Overseer reads too), so the rows inserted once stay alive.
pub(crate) const THRESHOLD_S: &str = "3600";
/// Airflow's API server workers: one per core, as Airflow's `[api] workers`
/// documentation advises (its default is 1); Overseer's actix server also runs
/// one worker per core.
pub(crate) const AIRFLOW_WORKERS: &str = "2";

/// The environment both servers share: Airflow's own variables (Overseer reads them too).
pub(crate) fn airflow_variables(db: &BenchDb, dir: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", db.sqlalchemy_url()),
        ("AIRFLOW__CORE__EXECUTOR", "LocalExecutor".into()),
        (
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD",
            THRESHOLD_S.into(),
        ),
        (
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD",
            THRESHOLD_S.into(),
        ),
        (
            "AIRFLOW__DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD",
            THRESHOLD_S.into(),
        ),
        (
            "AIRFLOW_HOME",
            dir.join("airflow-home").display().to_string(),
        ),
        ("AIRFLOW__CORE__LOAD_EXAMPLES", "False".into()),
        (
            "AIRFLOW__CORE__DAGS_FOLDER",
            dir.join("dags").display().to_string(),
        ),
        (
            "AIRFLOW__API_AUTH__JWT_SECRET",
            format!("overseer-bench-{}", db.name),
        ),
        ("PYTHONUNBUFFERED", "1".into()),
    ]
}

pub(crate) fn airflow_command(
    venv: &Path,
    dir: &Path,
    env: &[(&str, String)],
    args: &[&str],
) -> Command {
    let mut command = process::clean_command(venv.join("bin/airflow"), dir);
    let path = std::env::var("PATH").unwrap_or_default();
    command
        .env("PATH", format!("{}:{path}", venv.join("bin").display()))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(args);
    command
}

/// The commands this section runs for Airflow, for the report when it cannot.
pub(super) fn airflow_recipe(venv: &Path) -> String {
    format!(
        "```sh\n\
         export AIRFLOW_HOME=$(mktemp -d) AIRFLOW__CORE__EXECUTOR=LocalExecutor AIRFLOW__CORE__LOAD_EXAMPLES=False\n\
         export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgresql+psycopg2://postgres@127.0.0.1:5432/overseer_bench_http_...\n\
         export AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD={t} AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD={t} AIRFLOW__DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD={t}\n\
         {v}/bin/airflow db migrate\n\
         overseer serve --bind 127.0.0.1:0        # same variables: adds its columns, serves the same table\n\
         {v}/bin/airflow api-server --host 127.0.0.1 --port PORT --workers {w}\n\
         wrk -t{wt} -c32 -d4s --timeout {to} --latency http://127.0.0.1:PORT/api/v2/monitor/health   # and -c256\n\
         ```\n",
        t = THRESHOLD_S,
        v = venv.display(),
        w = AIRFLOW_WORKERS,
        wt = WRK_THREADS,
        to = WRK_TIMEOUT,
    )
}
