//! Python venvs the tests and the benchmark harness run real Python tools from
//! (Celery, Schemathesis), outside the clone under `~/.cache/overseer`: built
//! once per machine, by whichever process needs one first, under a lock folder
//! so processes running in parallel wait instead of racing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The Celery version Airflow's Celery provider loads today (it cannot load 5.6+).
pub const CELERY: &str = "celery[redis]==5.5.3";

/// How long building a venv may take (pip on 2 cores), or waiting for another builder.
const VENV_DEADLINE: Duration = Duration::from_secs(900);

/// The file that marks a venv as complete; it holds the requirements it was built with.
const READY: &str = ".overseer-ready";

/// The Celery venv (`$OVERSEER_CELERY_VENV`, else the cached one), built if missing.
pub fn celery() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("OVERSEER_CELERY_VENV") {
        return Ok(PathBuf::from(path));
    }
    ensure("celery-5.5.3-venv", &[CELERY])
}

/// `~/.cache/overseer/{name}` with `requirements` pip-installed, built if missing
/// (or if it was built with other requirements).
pub fn ensure(name: &str, requirements: &[&str]) -> Result<PathBuf, String> {
    let home = std::env::var("HOME").map_err(|_| "HOME is not set".to_owned())?;
    let cache = Path::new(&home).join(".cache/overseer");
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let venv = cache.join(name);
    let ready = venv.join(READY);
    let wanted = requirements.join("\n");
    let lock = cache.join(format!("{name}.lock"));
    let started = Instant::now();
    loop {
        if std::fs::read_to_string(&ready).is_ok_and(|built| built == wanted) {
            return Ok(venv);
        }
        match std::fs::create_dir(&lock) {
            Ok(()) => {
                eprintln!("building {} (once per machine)", venv.display());
                let built = install(&venv, requirements, &ready, &wanted);
                let _ = std::fs::remove_dir(&lock);
                return built.map(|()| venv);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Another process builds it; a lock older than the deadline was left by a crash.
                let stale = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > VENV_DEADLINE);
                if stale {
                    let _ = std::fs::remove_dir(&lock);
                }
                if started.elapsed() > VENV_DEADLINE {
                    return Err(format!(
                        "timed out waiting for another process to build {}",
                        venv.display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(format!("{}: {e}", lock.display())),
        }
    }
}

fn install(venv: &Path, requirements: &[&str], ready: &Path, wanted: &str) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(venv);
    run(Command::new("python3").arg("-m").arg("venv").arg(venv))?;
    run(Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(requirements))?;
    std::fs::write(ready, wanted).map_err(|e| e.to_string())
}

/// Runs a command to its end; its standard error is the error when it fails.
pub fn run(command: &mut Command) -> Result<(), String> {
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
