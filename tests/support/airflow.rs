//! Airflow 3.3.2 from the shared venv with Overseer's plugin installed for one
//! test: its commands run with a clean environment, the plugin pip-installed
//! (`--no-deps --target`) into a folder of the test's own on `PYTHONPATH` (the
//! shared venv is never written to), Airflow's configuration as environment
//! variables on a fresh Postgres database, and the api-server in a process group
//! of its own, stopped as a whole; no process of the run is left behind.
//! Shared by `airflow_plugin.rs` and `airflow_health.rs`; its free functions also
//! by the other Airflow tests and the interop tests' harness (`airflow_run.rs`).

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The plugin's source, in this repository.
pub const PLUGIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/integrations/airflow");
/// What pip installs it as: the distribution and its version.
pub const DISTRIBUTION: &str = "airflow-overseer-plugin==0.1.0";

/// `pip install` of the plugin, fetching setuptools to build it.
pub const PIP_DEADLINE: Duration = Duration::from_secs(300);
/// `airflow db migrate` on an empty database.
pub const MIGRATE_DEADLINE: Duration = Duration::from_secs(300);
/// An Airflow command: mostly Python starting and loading providers.
pub const CLI_DEADLINE: Duration = Duration::from_secs(120);
/// The api-server from a cold interpreter on 2 cores until it answers.
pub const START_DEADLINE: Duration = Duration::from_secs(240);
/// SIGTERM to the api-server's group, then this long before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(20);

/// Every process the test starts carries `AIRFLOW_PLUGIN_RUN=<id>`, and so do
/// their children: how strays are found at the end.
pub const MARKER_VAR: &str = "AIRFLOW_PLUGIN_RUN";

/// The Airflow 3.3.2 venv, built (or waited for) once per machine; `None` and
/// SKIPPED (a failure under `CI`) when it cannot be had.
pub fn venv() -> Option<PathBuf> {
    match overseer_testkit::venv::airflow() {
        Ok(venv) if venv.join("bin/airflow").exists() => Some(venv),
        Ok(venv) => {
            let detail = format!("{} has no bin/airflow", venv.display());
            overseer_testkit::unavailable("the Airflow 3.3.2 venv (pip install from PyPI)", detail)
        }
        Err(e) => overseer_testkit::unavailable(
            "the Airflow 3.3.2 venv (pip install from PyPI)",
            tail(&e),
        ),
    }
}

/// Airflow run from the shared venv, with the plugin on `PYTHONPATH` and a home,
/// database and port of its own. Dropping it stops the api-server's whole group
/// and anything else of the run that still runs.
pub struct Airflow {
    /// Airflow's home, the plugin's copy and install, every log.
    pub dir: tempfile::TempDir,
    pub venv: PathBuf,
    /// The api-server's loopback port.
    pub api_port: u16,
    /// Airflow's configuration, as environment variables.
    pub env: Vec<(String, String)>,
    /// The value of [`MARKER_VAR`] for this run.
    pub marker: String,
    /// The api-server, leader of a process group of its own.
    pub api_server: Option<Child>,
}

impl Airflow {
    pub fn new(venv: PathBuf, db_url: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("overseer-airflow-plugin-")
            .tempdir()
            .expect("a run folder");
        let api_port = overseer_testkit::throwaway::free_port();
        let marker = overseer_testkit::unique_name("plugin");
        let home = dir.path().join("airflow-home");
        std::fs::create_dir_all(&home).unwrap();
        let env = [
            ("AIRFLOW_HOME", home.display().to_string()),
            ("PYTHONPATH", dir.path().join("site").display().to_string()),
            ("PYTHONDONTWRITEBYTECODE", "1".into()),
            (
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                sql_alchemy_conn(db_url),
            ),
            ("AIRFLOW__CORE__LOAD_EXAMPLES", "False".into()),
            // No login: every request is an admin's (Airflow's SimpleAuthManager).
            (
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS",
                "True".into(),
            ),
            ("AIRFLOW__API_AUTH__JWT_SECRET", format!("secret-{marker}")),
            // Airflow's default is localhost:8080, which may be anyone's.
            (
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
                format!("http://127.0.0.1:{api_port}/execution/"),
            ),
        ];
        Self {
            env: env.map(|(k, v)| (k.to_owned(), v)).to_vec(),
            dir,
            venv,
            api_port,
            marker,
            api_server: None,
        }
    }

    /// A command from the venv with a clean environment: the basics, the run's
    /// marker and Airflow's configuration.
    pub fn command(&self, program: &str) -> Command {
        let mut command = clean_command(
            self.venv.join("bin").join(program),
            self.dir.path(),
            &self.venv,
        );
        command
            .env(MARKER_VAR, &self.marker)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// Installs the plugin from a copy of its source (pip builds in the source
    /// folder, and the build runs npm for the card's bundle) into `site/`, then
    /// runs its unit tests against the install. `false` (skipped) when PyPI
    /// cannot be reached for setuptools, or the npm registry for vite.
    pub fn install_plugin(&mut self) -> bool {
        let source = self.dir.path().join("plugin-source");
        copy_tree(Path::new(PLUGIN), &source);
        if !self.pip_install(
            source.as_os_str(),
            "PyPI and the npm registry (the plugin's build fetches setuptools and vite)",
        ) {
            return false;
        }
        let mut unit = self.command("python");
        unit.args(["-m", "unittest", "discover", "-v", "-s"])
            .arg(source.join("tests"));
        let (ok, log) = finish(unit, CLI_DEADLINE, None);
        assert!(ok, "the plugin's unit tests failed:\n{log}");
        true
    }

    /// `pip install --no-deps --target site/ what` (a folder or a requirement);
    /// `false` (skipped, saying `needs`) when PyPI cannot be reached.
    pub fn pip_install(&self, what: &std::ffi::OsStr, needs: &str) -> bool {
        let mut pip = self.command("python");
        // pip's own settings (an index mirror, a CA bundle) and proxies, as set here.
        pip.envs(std::env::vars().filter(|(var, _)| {
            var.starts_with("PIP_") || var.to_ascii_uppercase().ends_with("_PROXY")
        }));
        pip.args([
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-input",
            "--target",
        ])
        .arg(self.dir.path().join("site"))
        .arg(what);
        let (ok, log) = finish(pip, PIP_DEADLINE, None);
        if !ok {
            let network = [
                "Could not find a version that satisfies the requirement",
                "No matching distribution found for",
                "NewConnectionError",
                "Temporary failure in name resolution",
                "Network is unreachable",
                // npm, building the card's bundle (setup.py).
                "ENOTFOUND",
                "EAI_AGAIN",
            ];
            if network.iter().any(|n| log.contains(n)) {
                let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
                overseer_testkit::unavailable::<()>(needs, errors.join(" "));
                return false;
            }
            panic!("pip install {} failed:\n{log}", what.to_string_lossy());
        }
        true
    }

    /// Runs `airflow args` to its end, which must succeed; its standard output.
    pub fn finish(&self, args: &[&str], deadline: Duration) -> String {
        let out = self.dir.path().join("out.txt");
        let mut airflow = self.command("airflow");
        airflow.args(args);
        let (ok, log) = finish(airflow, deadline, Some(&out));
        assert!(ok, "airflow {args:?} failed:\n{log}");
        std::fs::read_to_string(&out).unwrap()
    }

    /// `airflow api-server` on the test's port, leading a process group of its
    /// own (its workers are its children), its output to `api-server.log`.
    pub fn start_api_server(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("api-server.log")).unwrap();
        let mut command = self.command("airflow");
        command
            .args(["api-server", "--host", "127.0.0.1", "--workers", "1"])
            .args(["--port", &self.api_port.to_string()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0);
        self.api_server = Some(command.spawn().expect("airflow api-server starts"));
    }

    /// `GET /api/v2/plugins`, once the api-server answers it.
    pub fn plugins_from_the_api_server(&mut self) -> Value {
        self.json_once_up("/api/v2/plugins")
    }

    /// `http://127.0.0.1:<api port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.api_port)
    }

    /// `GET path` as JSON, once the api-server answers it (it must answer 2xx).
    pub fn json_once_up(&mut self, path: &str) -> Value {
        let url = self.url(path);
        let until = Instant::now() + START_DEADLINE;
        loop {
            match ureq::get(&url).timeout(Duration::from_secs(10)).call() {
                Ok(response) => return response.into_json().expect("the answer as JSON"),
                Err(ureq::Error::Status(status, response)) => panic!(
                    "GET {url}: {status} {}",
                    response.into_string().unwrap_or_default()
                ),
                // Not listening yet.
                Err(ureq::Error::Transport(_)) => {}
            }
            let server = self.api_server.as_mut().expect("the api-server");
            let log = || std::fs::read_to_string(self.dir.path().join("api-server.log"));
            if let Ok(Some(status)) = server.try_wait() {
                panic!("the api-server ended ({status}):\n{}", log().unwrap());
            }
            assert!(
                Instant::now() < until,
                "GET {url} did not answer within {START_DEADLINE:?}:\n{}",
                tail(&log().unwrap_or_default())
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Stops the api-server's group (SIGTERM, SIGKILL after [`STOP_GRACE`]), then
    /// anything else carrying the run's marker; answers what outlived even that.
    pub fn stop(&mut self) -> Vec<String> {
        if let Some(mut server) = self.api_server.take() {
            let group = server.id();
            signal(&format!("-{group}"), "TERM");
            let until = Instant::now() + STOP_GRACE;
            while Instant::now() < until && !self.ours().is_empty() {
                let _ = server.try_wait();
                std::thread::sleep(Duration::from_millis(100));
            }
            signal(&format!("-{group}"), "KILL");
            let _ = server.wait();
        }
        for pid in self.ours() {
            signal(&pid.to_string(), "KILL");
        }
        std::thread::sleep(Duration::from_millis(200));
        self.ours()
            .into_iter()
            .map(|pid| format!("{pid}: {}", cmdline(pid)))
            .collect()
    }

    /// The running processes (zombies aside) that carry the run's marker.
    pub fn ours(&self) -> Vec<u32> {
        let needle = format!("{MARKER_VAR}={}", self.marker);
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let running = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim().to_owned()))
                    .is_some_and(|rest| !rest.starts_with('Z'));
                running
                    && std::fs::read(format!("/proc/{pid}/environ"))
                        .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
            })
            .collect()
    }
}

impl Drop for Airflow {
    fn drop(&mut self) {
        let strays = self.stop();
        if !strays.is_empty() {
            eprintln!("airflow plugin: could not stop {strays:?}");
        }
        if std::thread::panicking() {
            let log = self.dir.path().join("api-server.log");
            if let Ok(text) = std::fs::read_to_string(&log) {
                eprintln!(
                    "airflow plugin: the api-server's last lines:\n{}",
                    tail(&text)
                );
            }
        }
    }
}

/// What a test of a real Airflow beside a Redis broker needs: the Airflow
/// venv, `redis-server`, and a fresh database with Airflow's schema
/// ([`migrated_db`]); `None` (skipped, or a failure under `CI`) when one is
/// missing.
pub async fn venv_redis_and_db() -> Option<(PathBuf, overseer_testkit::TestDb)> {
    let venv = venv()?;
    if let Err(e) = Command::new("redis-server").arg("--version").output() {
        overseer_testkit::unavailable::<()>("redis-server", e);
        return None;
    }
    let db = migrated_db(&venv).await?;
    Some((venv, db))
}

/// A fresh Postgres database holding Airflow's schema as `airflow db migrate`
/// leaves it (the Edge provider's tables included: Airflow finds its database
/// manager among the installed providers), copied from a template database
/// that the first test on this server makes for this venv and that is kept;
/// `None` (skipped) when Postgres is unreachable.
pub async fn migrated_db(venv: &Path) -> Option<overseer_testkit::TestDb> {
    let template = format!(
        "overseer_airflow_{}",
        overseer_testkit::venv::fingerprint(venv)
    );
    overseer_testkit::postgres_from_template(&template, |url| {
        let home = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut migrate = clean_command(venv.join("bin/airflow"), home.path(), venv);
        migrate
            .args(["db", "migrate"])
            .env("AIRFLOW_HOME", home.path())
            .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", sql_alchemy_conn(url))
            .env("AIRFLOW__CORE__LOAD_EXAMPLES", "False");
        match finish(migrate, MIGRATE_DEADLINE, None) {
            (true, _) => Ok(()),
            (false, log) => Err(format!("airflow db migrate failed:\n{}", tail(&log))),
        }
    })
    .await
}

/// Runs `command` to its end (killed at `deadline`): whether it succeeded, and
/// what it printed (its standard output goes to `stdout` instead, when given).
pub fn finish(mut command: Command, deadline: Duration, stdout: Option<&Path>) -> (bool, String) {
    let log = tempfile::NamedTempFile::new().expect("a log file");
    let what = format!("{command:?}");
    let (status, text) = finish_logged(&mut command, &what, deadline, log.path(), stdout);
    (status.success(), text)
}

/// Runs `command` to its end, its output to `log` (its standard output to `stdout`
/// instead, when given): how it ended, and what `log` holds. Killed at `deadline`,
/// which fails the test, naming it `what`.
pub fn finish_logged(
    command: &mut Command,
    what: &str,
    deadline: Duration,
    log: &Path,
    stdout: Option<&Path>,
) -> (std::process::ExitStatus, String) {
    let file = std::fs::File::create(log).expect("a log file");
    let out = match stdout {
        Some(path) => std::fs::File::create(path).unwrap(),
        None => file.try_clone().expect("the log file"),
    };
    let mut child = command
        .stdout(out)
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("{what} starts: {e}"));
    let status = super::procs::wait_deadline(&mut child, deadline);
    let text = super::procs::read(log);
    match status {
        Some(status) => (status, text),
        None => panic!(
            "{what} did not finish within {deadline:?}:\n{}",
            tail(&text)
        ),
    }
}

/// Airflow's SQLAlchemy URL (psycopg2) for the Postgres database at `db_url`.
pub fn sql_alchemy_conn(db_url: &str) -> String {
    match db_url.split_once("://") {
        Some((_, rest)) => format!("postgresql+psycopg2://{rest}"),
        None => panic!("a Postgres URL: {db_url}"),
    }
}

/// Copies the plugin's source, without what a local build or run left in it.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // npm's install: the build runs `npm ci` itself (setup.py).
        let left_by_a_build = ["__pycache__", "build", "node_modules"];
        if left_by_a_build.contains(&&*name) || name.ends_with(".egg-info") {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(&*name));
        } else {
            std::fs::copy(&path, to.join(&*name)).unwrap();
        }
    }
}

/// The arguments of `airflow celery worker` as the tests run it, node
/// `hostname`: one pool process, queue `default`, no log server, no gossip
/// or mingle (quiet beside other tests' workers).
pub fn celery_worker_args(hostname: &str) -> [&str; 11] {
    [
        "celery",
        "worker",
        "--concurrency",
        "1",
        "--queues",
        "default",
        "--skip-serve-logs",
        "--celery-hostname",
        hostname,
        "--without-gossip",
        "--without-mingle",
    ]
}

/// `kill -SIGNAL target` (a pid, or `-pgid` for a whole group).
pub fn signal(target: &str, signal: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), "--".to_owned(), target.to_owned()])
        .stderr(Stdio::null())
        .status();
}

pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

/// The last 40 lines of `text`.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// `program` run in `dir` with a clean environment: only `HOME`, `TMPDIR` and
/// `LANG` kept, `venv`'s `bin` first on the `PATH`, nothing on standard input.
/// Each harness adds its run's marker and Airflow's configuration.
pub fn clean_command(program: impl AsRef<std::ffi::OsStr>, dir: &Path, venv: &Path) -> Command {
    let mut command = Command::new(program);
    command.current_dir(dir).env_clear().stdin(Stdio::null());
    for var in ["HOME", "TMPDIR", "LANG"] {
        if let Ok(value) = std::env::var(var) {
            command.env(var, value);
        }
    }
    let path = std::env::var("PATH").unwrap_or_default();
    command.env("PATH", format!("{}:{path}", venv.join("bin").display()));
    command
}
