//! The Python venvs the references run from, outside the clone under
//! `~/.cache/overseer`:
//! - Celery 5.5.3, from `overseer_testkit::venv`, which the celery crate's
//!   tests use too, so either may build it for the other;
//! - Airflow 3.3.2, only ever used if the interop test's script already made it
//!   (`tests/interop/install-airflow.sh`): this harness never installs Airflow.

use std::path::{Path, PathBuf};
use std::process::Command;

fn cache() -> Result<PathBuf, String> {
    let home = std::env::var("HOME").map_err(|_| "HOME is not set".to_owned())?;
    Ok(Path::new(&home).join(".cache/overseer"))
}

/// The Celery venv, built if missing, shared with the celery crate's tests.
pub fn celery() -> Result<PathBuf, String> {
    overseer_testkit::venv::celery()
}

/// Where the interop test's script puts the Airflow venv.
pub fn airflow_path() -> Result<PathBuf, String> {
    Ok(match std::env::var("OVERSEER_AIRFLOW_VENV") {
        Ok(path) => PathBuf::from(path),
        Err(_) => cache()?.join("airflow-3.3.2-venv"),
    })
}

/// The Airflow venv, if the interop test's script finished making it.
pub fn airflow() -> Result<PathBuf, String> {
    let venv = airflow_path()?;
    if venv.join(".overseer-complete").exists() && venv.join("bin/airflow").exists() {
        Ok(venv)
    } else {
        Err(format!(
            "{} is not there (or not complete): the interop test makes it with `bash tests/interop/install-airflow.sh`; this harness does not install Airflow",
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
