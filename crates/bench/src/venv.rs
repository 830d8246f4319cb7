//! The Python venvs the references run from, outside the clone under
//! `~/.cache/overseer`:
//! - Celery 5.5.3, from `overseer_testkit::venv`, which the celery crate's
//!   tests use too, so either may build it for the other;
//! - Airflow 3.3.2, only ever used if the interop test already made it
//!   (`overseer_testkit::venv::airflow`): this harness never installs Airflow.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Celery venv, built if missing, shared with the celery crate's tests.
pub fn celery() -> Result<PathBuf, String> {
    overseer_testkit::venv::celery()
}

/// Where the interop test's venv builder puts the Airflow venv.
pub fn airflow_path() -> Result<PathBuf, String> {
    overseer_testkit::venv::airflow_path()
}

/// The Airflow venv, if the interop test finished making it.
pub fn airflow() -> Result<PathBuf, String> {
    let venv = airflow_path()?;
    if overseer_testkit::venv::is_built(&venv, &overseer_testkit::venv::AIRFLOW)
        && venv.join("bin/airflow").exists()
    {
        Ok(venv)
    } else {
        Err(format!(
            "{} is not there (or not complete): the interop test makes it (`just interop-airflow`); this harness does not install Airflow",
            venv.display()
        ))
    }
}

/// A package's version in a venv, for the report.
pub fn version(venv: &Path, package: &str) -> String {
    Command::new(venv.join("bin/python"))
        .args([
            "-c",
            &format!("from importlib.metadata import version; print(version('{package}'))"),
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "?".into())
}
