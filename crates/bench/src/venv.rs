//! The Python venvs the references run from, outside the clone under
//! `~/.cache/overseer`:
//! - Celery 5.5.3, built here if missing exactly as the celery crate's tests
//!   build it (`crates/celery/tests/support/mod.rs`: same folder, same lock
//!   folder, same marker), so either may build it for the other;
//! - Airflow 3.3.2, only ever used if the interop test's script already made it
//!   (`tests/interop/install-airflow.sh`): this harness never installs Airflow.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The Celery version Airflow's provider loads today, as the celery crate's tests pin it.
pub const CELERY: &str = "celery[redis]==5.5.3";
/// How long building the Celery venv may take (pip on 2 cores), or waiting for another builder.
const VENV_DEADLINE: Duration = Duration::from_secs(900);

fn cache() -> Result<PathBuf, String> {
    let home = std::env::var("HOME").map_err(|_| "HOME is not set".to_owned())?;
    Ok(Path::new(&home).join(".cache/overseer"))
}

/// The Celery venv (`$OVERSEER_CELERY_VENV`, else the cached one), built if missing.
pub fn celery() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("OVERSEER_CELERY_VENV") {
        return Ok(PathBuf::from(path));
    }
    let cache = cache()?;
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let venv = cache.join("celery-5.5.3-venv");
    let ready = venv.join(".overseer-ready");
    let lock = cache.join("celery-5.5.3-venv.lock");
    let started = Instant::now();
    loop {
        if ready.exists() {
            return Ok(venv);
        }
        match std::fs::create_dir(&lock) {
            Ok(()) => {
                eprintln!(
                    "overseer-bench: building {} (once per machine)",
                    venv.display()
                );
                let built = install(&venv, &ready);
                let _ = std::fs::remove_dir(&lock);
                return built.map(|()| venv);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let stale = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > VENV_DEADLINE);
                if stale {
                    let _ = std::fs::remove_dir(&lock);
                }
                if started.elapsed() > VENV_DEADLINE {
                    return Err(
                        "timed out waiting for another process to build the Celery venv".into(),
                    );
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(format!("{}: {e}", lock.display())),
        }
    }
}

fn install(venv: &Path, ready: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(venv);
    run(Command::new("python3").arg("-m").arg("venv").arg(venv))?;
    run(Command::new(venv.join("bin/python")).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        CELERY,
    ]))?;
    std::fs::write(ready, CELERY).map_err(|e| e.to_string())
}

fn run(command: &mut Command) -> Result<(), String> {
    let out = command.output().map_err(|e| format!("{command:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
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
