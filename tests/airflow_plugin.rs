//! Overseer's dashboard inside Airflow's UI: the Airflow plugin in
//! `integrations/airflow`, in a real Airflow 3.3.2, and the frame policy the
//! dashboard needs to be shown there.
//!
//! - `the_plugin_puts_the_dashboard_in_airflows_navigation`: the plugin is
//!   pip-installed (`--no-deps --target` a folder of the test's own, on
//!   `PYTHONPATH`: the shared venv is never written to) and its unit tests run
//!   against what was installed; then, with `AIRFLOW__OVERSEER__URL` pointing at
//!   an `overseer serve` that lets the Airflow UI's origin frame it,
//!   `airflow plugins --output json` lists the plugin and its external view, and
//!   the api-server (on a fresh Postgres database, `airflow db migrate`d) answers
//!   `GET /api/v2/plugins` with the view, whose `href` is the dashboard, which
//!   names Airflow's origin in `frame-ancestors`. The api-server runs in a
//!   process group of its own, stopped as a whole, and no process of the test is
//!   left behind (checked).
//! - `serve_frames_the_dashboard_for_the_configured_origins_only`: `overseer
//!   serve`, with `OVERSEER_API__FRAME_ANCESTORS` as a TOML array and without it.
//!
//! Needs the Airflow venv (`overseer_testkit::venv::airflow`), PyPI (pip fetches
//! setuptools to build the plugin) and Postgres on loopback; without them the
//! first test says SKIPPED, and fails under `CI`.
//!
//! Longer than this project's ~400 lines per file: besides the tests it holds
//! the harness only they use (`Airflow`: its commands run from the shared venv
//! with the plugin on `PYTHONPATH`, the api-server stopped by process group).

mod support;

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Serving, overseer, workdir};

/// The plugin's source, in this repository.
const PLUGIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/integrations/airflow");
/// What pip installs it as: the distribution and its version.
const DISTRIBUTION: &str = "airflow-overseer-plugin==0.1.0";

/// `pip install` of the plugin, fetching setuptools to build it.
const PIP_DEADLINE: Duration = Duration::from_secs(300);
/// `airflow db migrate` on an empty database.
const MIGRATE_DEADLINE: Duration = Duration::from_secs(300);
/// An Airflow command: mostly Python starting and loading providers.
const CLI_DEADLINE: Duration = Duration::from_secs(120);
/// The api-server from a cold interpreter on 2 cores until it answers.
const START_DEADLINE: Duration = Duration::from_secs(240);
/// SIGTERM to the api-server's group, then this long before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// Every process the test starts carries `AIRFLOW_PLUGIN_RUN=<id>`, and so do
/// their children: how strays are found at the end.
const MARKER_VAR: &str = "AIRFLOW_PLUGIN_RUN";

#[tokio::test]
async fn the_plugin_puts_the_dashboard_in_airflows_navigation() {
    let venv = match overseer_testkit::venv::airflow() {
        Ok(venv) if venv.join("bin/airflow").exists() => venv,
        Ok(venv) => {
            let detail = format!("{} has no bin/airflow", venv.display());
            overseer_testkit::unavailable::<()>(
                "the Airflow 3.3.2 venv (pip install from PyPI)",
                detail,
            );
            return;
        }
        Err(e) => {
            overseer_testkit::unavailable::<()>(
                "the Airflow 3.3.2 venv (pip install from PyPI)",
                tail(&e),
            );
            return;
        }
    };
    let Some(db) = overseer_testkit::postgres().await else {
        return;
    };
    let mut airflow = Airflow::new(venv, &db.url);
    if !airflow.install_plugin() {
        return;
    }

    // The dashboard the view opens, framed by the Airflow UI's origin only.
    let airflow_origin = format!("http://127.0.0.1:{}", airflow.api_port);
    let dir = workdir();
    let serving = Serving::start(overseer(dir.path()).env(
        "OVERSEER_API__FRAME_ANCESTORS",
        format!("[\"{airflow_origin}\"]"),
    ));
    let dashboard = serving.url("/");
    let expected = json!({
        "name": "Executor health",
        "href": dashboard,
        "destination": "nav",
        "category": "browse",
        "url_route": "overseer",
    });
    airflow
        .env
        .push(("AIRFLOW__OVERSEER__URL".into(), dashboard.clone()));

    // `airflow plugins` lists it, loaded through its entry point.
    let listed = airflow.finish(&["plugins", "--output", "json"], CLI_DEADLINE);
    let plugins: Value = serde_json::from_str(&listed)
        .unwrap_or_else(|e| panic!("airflow plugins --output json: {e}: {listed}"));
    let plugin = overseer_plugin(&plugins);
    assert_eq!(plugin["external_views"], json!([expected]), "{plugin}");
    let source = plugin["source"].as_str().unwrap_or_default();
    assert!(
        source.starts_with(DISTRIBUTION) && source.contains("group='airflow.plugins'"),
        "{source}"
    );

    // The api-server gives it to the UI.
    airflow.finish(&["db", "migrate"], MIGRATE_DEADLINE);
    airflow.start_api_server();
    let answer = airflow.plugins_from_the_api_server();
    let plugin = overseer_plugin(&answer["plugins"]);
    let views = plugin["external_views"].as_array().expect("external_views");
    assert_eq!(views.len(), 1, "{plugin}");
    eprintln!(
        "airflow plugin: GET /api/v2/plugins gives the view {}",
        views[0]
    );
    for (field, value) in expected.as_object().unwrap() {
        assert_eq!(&views[0][field], value, "{field} in {plugin}");
    }

    // The view's href is Overseer's dashboard, which the Airflow UI may frame.
    let href = views[0]["href"].as_str().unwrap();
    let (status, policy) = page_policy(href);
    assert_eq!(status, 200, "GET {href}");
    assert!(
        policy.ends_with(&format!("frame-ancestors 'self' {airflow_origin}")),
        "{policy}"
    );

    let strays = airflow.stop();
    assert!(strays.is_empty(), "processes left behind: {strays:?}");
    drop(serving);
    drop(airflow);
    drop(db);
}

#[test]
fn serve_frames_the_dashboard_for_the_configured_origins_only() {
    let dir = workdir();
    let serving = Serving::start(&mut overseer(dir.path()));
    let (status, policy) = page_policy(&serving.url("/"));
    assert_eq!(status, 200);
    assert!(policy.starts_with("default-src 'none'; "), "{policy}");
    assert!(policy.ends_with("; frame-ancestors 'self'"), "{policy}");
    drop(serving);

    let serving = Serving::start(overseer(dir.path()).env(
        "OVERSEER_API__FRAME_ANCESTORS",
        r#"["https://Airflow.example.com:443/", "http://127.0.0.1:28080"]"#,
    ));
    let (status, policy) = page_policy(&serving.url("/"));
    assert_eq!(status, 200);
    assert!(
        policy.ends_with(
            "; frame-ancestors 'self' https://airflow.example.com http://127.0.0.1:28080"
        ),
        "{policy}"
    );
}

/// The status of `GET url` and its `Content-Security-Policy`.
fn page_policy(url: &str) -> (u16, String) {
    let response = ureq::get(url)
        .timeout(Duration::from_secs(10))
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let policy = response
        .header("content-security-policy")
        .unwrap_or_default()
        .to_owned();
    (response.status(), policy)
}

/// The plugin named `overseer` among `plugins` (a JSON array), exactly once.
fn overseer_plugin(plugins: &Value) -> &Value {
    let found: Vec<&Value> = plugins
        .as_array()
        .unwrap_or_else(|| panic!("a list of plugins: {plugins}"))
        .iter()
        .filter(|p| p["name"] == "overseer")
        .collect();
    assert_eq!(found.len(), 1, "the overseer plugin once in {plugins}");
    found[0]
}

/// Airflow run from the shared venv, with the plugin on `PYTHONPATH` and a home,
/// database and port of its own. Dropping it stops the api-server's whole group
/// and anything else of the run that still runs.
struct Airflow {
    /// Airflow's home, the plugin's copy and install, every log.
    dir: tempfile::TempDir,
    venv: PathBuf,
    /// The api-server's loopback port.
    api_port: u16,
    /// Airflow's configuration, as environment variables.
    env: Vec<(String, String)>,
    /// The value of [`MARKER_VAR`] for this run.
    marker: String,
    /// The api-server, leader of a process group of its own.
    api_server: Option<Child>,
}

impl Airflow {
    fn new(venv: PathBuf, db_url: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("overseer-airflow-plugin-")
            .tempdir()
            .expect("a run folder");
        let rest = db_url.split_once("://").expect("a Postgres URL").1;
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
                format!("postgresql+psycopg2://{rest}"),
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
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.venv.join("bin").join(program));
        command
            .current_dir(self.dir.path())
            .env_clear()
            .stdin(Stdio::null());
        for var in ["HOME", "TMPDIR", "LANG"] {
            if let Ok(value) = std::env::var(var) {
                command.env(var, value);
            }
        }
        let path = std::env::var("PATH").unwrap_or_default();
        command
            .env(
                "PATH",
                format!("{}:{path}", self.venv.join("bin").display()),
            )
            .env(MARKER_VAR, &self.marker)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// Installs the plugin from a copy of its source (pip builds in the source
    /// folder) into `site/`, then runs its unit tests against the install.
    /// `false` (skipped) when PyPI cannot be reached for setuptools.
    fn install_plugin(&mut self) -> bool {
        let source = self.dir.path().join("plugin-source");
        copy_tree(Path::new(PLUGIN), &source);
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
        .arg(&source);
        let (ok, log) = finish(pip, PIP_DEADLINE, None);
        if !ok {
            let network = [
                "Could not find a version that satisfies the requirement setuptools",
                "No matching distribution found for setuptools",
                "NewConnectionError",
                "Temporary failure in name resolution",
                "Network is unreachable",
            ];
            if network.iter().any(|n| log.contains(n)) {
                let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
                overseer_testkit::unavailable::<()>(
                    "PyPI (pip fetches setuptools to build the plugin)",
                    errors.join(" "),
                );
                return false;
            }
            panic!("pip install {PLUGIN} failed:\n{log}");
        }
        let mut unit = self.command("python");
        unit.args(["-m", "unittest", "discover", "-v", "-s"])
            .arg(source.join("tests"));
        let (ok, log) = finish(unit, CLI_DEADLINE, None);
        assert!(ok, "the plugin's unit tests failed:\n{log}");
        true
    }

    /// Runs `airflow args` to its end, which must succeed; its standard output.
    fn finish(&self, args: &[&str], deadline: Duration) -> String {
        let out = self.dir.path().join("out.txt");
        let mut airflow = self.command("airflow");
        airflow.args(args);
        let (ok, log) = finish(airflow, deadline, Some(&out));
        assert!(ok, "airflow {args:?} failed:\n{log}");
        std::fs::read_to_string(&out).unwrap()
    }

    /// `airflow api-server` on the test's port, leading a process group of its
    /// own (its workers are its children), its output to `api-server.log`.
    fn start_api_server(&mut self) {
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
    fn plugins_from_the_api_server(&mut self) -> Value {
        let url = format!("http://127.0.0.1:{}/api/v2/plugins", self.api_port);
        let until = Instant::now() + START_DEADLINE;
        loop {
            match ureq::get(&url).timeout(Duration::from_secs(10)).call() {
                Ok(response) => return response.into_json().expect("the plugins as JSON"),
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
    fn stop(&mut self) -> Vec<String> {
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
    fn ours(&self) -> Vec<u32> {
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

/// Runs `command` to its end (killed at `deadline`): whether it succeeded, and
/// what it printed (its standard output goes to `stdout` instead, when given).
fn finish(mut command: Command, deadline: Duration, stdout: Option<&Path>) -> (bool, String) {
    let log = tempfile::NamedTempFile::new().expect("a log file");
    let file = log.reopen().unwrap();
    let out = match stdout {
        Some(path) => std::fs::File::create(path).unwrap(),
        None => file.try_clone().unwrap(),
    };
    let mut child = command
        .stdout(out)
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?} starts: {e}"));
    let until = Instant::now() + deadline;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(log.path()).unwrap_or_default();
    match status {
        Some(status) => (status.success(), text),
        None => panic!(
            "{command:?} did not finish within {deadline:?}:\n{}",
            tail(&text)
        ),
    }
}

/// Copies the plugin's source, without what a local build or run left in it.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == "__pycache__" || name == "build" || name.ends_with(".egg-info") {
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

/// `kill -SIGNAL target` (a pid, or `-pgid` for a whole group).
fn signal(target: &str, signal: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), "--".to_owned(), target.to_owned()])
        .stderr(Stdio::null())
        .status();
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

/// The last 40 lines of `text`.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
