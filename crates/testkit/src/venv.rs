//! Python venvs the tests and the benchmark harness run real Python tools from
//! (Celery, Schemathesis, Airflow), outside the clone under `~/.cache/overseer`:
//! built once per machine, by whichever process needs one first, under a lock
//! folder so processes running in parallel wait instead of racing. This is the
//! project's one venv builder.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The Celery version Airflow's Celery provider loads today (it cannot load 5.6+).
pub const CELERY: &str = "celery[redis]==5.5.3";

/// Airflow 3.3.2 for the interop test: with the Celery provider, Celery below 5.6
/// (the provider cannot load 5.6+) with its Redis client, and the `postgres`
/// extra (Airflow 3 opens its metadatabase with two drivers, psycopg2 and, for
/// its async sessions, asyncpg, and fails at import without the latter).
/// The Edge provider is pinned to the version pip resolves beside Airflow 3.3.2
/// (5.1.0): the Edge check reads its tables, whose columns moved between releases.
/// Airflow's constraint files live on GitHub, which these machines cannot
/// reach: pip resolves alone, and only what must be pinned is.
pub const AIRFLOW: [&str; 5] = [
    "apache-airflow[postgres]==3.3.2",
    "apache-airflow-providers-celery",
    "apache-airflow-providers-edge3==5.1.0",
    "celery[redis]<5.6",
    "psycopg2-binary",
];

/// Run in a new Airflow venv before it counts as built: the providers must load
/// (Celery's with the Celery pip resolved, and the Edge executor), or nothing the
/// interop tests do works.
const AIRFLOW_CHECK: &str = "\
import asyncpg, celery, psycopg2  # noqa: F401
from importlib.metadata import version
from airflow.providers.celery.executors.celery_executor import CeleryExecutor  # noqa: F401
from airflow.providers.edge3.executors import EdgeExecutor  # noqa: F401
print(', '.join(f'{p} {version(p)}' for p in ('apache-airflow', 'apache-airflow-providers-celery', 'apache-airflow-providers-edge3', 'celery', 'kombu', 'redis', 'sqlalchemy')))
";

/// How long building a venv may take (pip on 2 cores: Airflow takes minutes), or
/// waiting for another builder.
const VENV_DEADLINE: Duration = Duration::from_secs(1800);

/// The file that marks a venv as complete; it holds the requirements it was built with.
const READY: &str = ".overseer-ready";

/// The Celery venv (`$OVERSEER_CELERY_VENV`, else the cached one), built if missing.
pub fn celery() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("OVERSEER_CELERY_VENV") {
        return Ok(PathBuf::from(path));
    }
    ensure("celery-5.5.3-venv", &[CELERY])
}

/// Where the Airflow venv is: `$INTEROP_AIRFLOW_VENV`, else the cached one. (Not an
/// `OVERSEER_*` name: Overseer would read it as its own configuration.)
pub fn airflow_path() -> Result<PathBuf, String> {
    match std::env::var("INTEROP_AIRFLOW_VENV") {
        Ok(path) => Ok(PathBuf::from(path)),
        Err(_) => Ok(cache()?.join("airflow-3.3.2-venv")),
    }
}

/// The Airflow venv, built if missing (`$INTEROP_AIRFLOW_PYTHON` picks the
/// interpreter, default `python3`).
pub fn airflow() -> Result<PathBuf, String> {
    let python = std::env::var("INTEROP_AIRFLOW_PYTHON").unwrap_or_else(|_| "python3".into());
    ensure_at(&airflow_path()?, &AIRFLOW, &python, Some(AIRFLOW_CHECK))
}

/// A name for what `venv` holds (a hash of the requirements it was built
/// with), for what is made from it and kept: a template database, say.
pub fn fingerprint(venv: &Path) -> String {
    let built = std::fs::read(venv.join(READY)).unwrap_or_default();
    // FNV-1a: stable across processes and Rust releases, unlike `DefaultHasher`.
    let hash = built.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// Whether `venv` was built, completely, with `requirements`.
pub fn is_built(venv: &Path, requirements: &[&str]) -> bool {
    std::fs::read_to_string(venv.join(READY)).is_ok_and(|built| built == requirements.join("\n"))
}

fn cache() -> Result<PathBuf, String> {
    let home = std::env::var("HOME").map_err(|_| "HOME is not set".to_owned())?;
    let cache = Path::new(&home).join(".cache/overseer");
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    Ok(cache)
}

/// `~/.cache/overseer/{name}` with `requirements` pip-installed, built if missing
/// (or if it was built with other requirements).
pub fn ensure(name: &str, requirements: &[&str]) -> Result<PathBuf, String> {
    ensure_at(&cache()?.join(name), requirements, "python3", None)
}

/// `venv` with `requirements` installed by `python`'s pip, and `check` (Python
/// source) run in it successfully, built if missing; a lock folder beside it
/// (`VENV.lock`) makes a second builder wait.
fn ensure_at(
    venv: &Path,
    requirements: &[&str],
    python: &str,
    check: Option<&str>,
) -> Result<PathBuf, String> {
    let lock = PathBuf::from(format!("{}.lock", venv.display()));
    if let Some(parent) = venv.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    let started = Instant::now();
    loop {
        if is_built(venv, requirements) {
            return Ok(venv.to_path_buf());
        }
        match std::fs::create_dir(&lock) {
            Ok(()) => {
                eprintln!("building {} (once per machine)", venv.display());
                let built = install(venv, requirements, python, check);
                let _ = std::fs::remove_dir(&lock);
                return built.map(|()| venv.to_path_buf());
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

fn install(
    venv: &Path,
    requirements: &[&str],
    python: &str,
    check: Option<&str>,
) -> Result<(), String> {
    let started = Instant::now();
    let _ = std::fs::remove_dir_all(venv);
    run(Command::new(python).arg("-m").arg("venv").arg(venv))?;
    let pip = |args: &[&str]| {
        let mut command = Command::new(venv.join("bin/python"));
        command.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ]);
        command.args(args);
        command
    };
    run(&mut pip(&["--upgrade", "pip"]))?;
    run(&mut pip(requirements))?;
    if let Some(check) = check {
        // Importing Airflow makes $AIRFLOW_HOME: a throwaway one, not ~/airflow.
        let home = tempfile::tempdir().map_err(|e| e.to_string())?;
        run(Command::new(venv.join("bin/python"))
            .args(["-c", check])
            .env("AIRFLOW_HOME", home.path()))?;
    }
    let frozen = Command::new(venv.join("bin/python"))
        .args(["-m", "pip", "freeze", "--disable-pip-version-check"])
        .output()
        .map_err(|e| e.to_string())?;
    let _ = std::fs::write(venv.join("requirements-resolved.txt"), frozen.stdout);
    let _ = std::fs::write(
        venv.join(".install-seconds"),
        started.elapsed().as_secs().to_string(),
    );
    std::fs::write(venv.join(READY), requirements.join("\n")).map_err(|e| e.to_string())
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
