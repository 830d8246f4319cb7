//! One run of a real Airflow 3.3.2 beside `overseer serve`, as the interop tests
//! (`interop_airflow.rs`, `interop_edge.rs`) drive it: a folder of its own (Airflow's
//! home, the DAG folder, every process's log), commands with a clean environment
//! carrying the run's marker and Airflow's configuration (which Overseer reads too),
//! long-running processes started and watched by pid (a worker as a process group of
//! its own), and waits that fail at once when one of them died. Dropping the run stops
//! every process of it by pid or group ([`Processes::stop_all`]); when the test failed
//! it prints each log's tail and keeps the folder.
//!
//! Built on [`super::airflow`] (the clean command, a command finished with a
//! deadline, the venv's deadlines) and [`super::procs`] (the processes and their
//! stop). What only one test starts (a Redis broker, a Celery or edge worker) stays
//! in that test, over [`Run::start`], [`Run::start_group`] and [`Run::running`].

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use overseer_testkit::TestDb;
use serde_json::Value;

use super::OVERSEER;
use super::airflow::{STOP_GRACE, clean_command, finish_logged, sql_alchemy_conn};
use super::procs::{Process, Processes};

/// The DAG processor storing a DAG of the test's; the scheduler queuing its task.
pub const SCHEDULE_DEADLINE: Duration = Duration::from_secs(120);

/// What differs from one interop test's run to another's.
pub struct Setup {
    /// Names the run in what it prints (`interop`), its folder
    /// (`overseer-<name>-...`), its marker's value and its JWT secret.
    pub name: &'static str,
    /// The variable every process of the run carries (not `OVERSEER_*`: Overseer
    /// would take it for configuration and refuse to start).
    pub marker_var: &'static str,
    /// `AIRFLOW__CORE__EXECUTOR`.
    pub executor: &'static str,
    /// The DAG folder's files: each one's name and source.
    pub dags: &'static [(&'static str, &'static str)],
}

/// One run: its folder, its processes, the port and the environment they share.
/// Dropping it stops every process (also when an assertion failed).
pub struct Run {
    name: &'static str,
    /// Airflow's home, the DAG folder, every log; kept when the test fails.
    dir: Option<tempfile::TempDir>,
    /// The cached venv Airflow runs from.
    venv: PathBuf,
    /// The loopback port of Airflow's `api-server`.
    pub api_port: u16,
    /// Airflow's configuration, given to every command of the run (Overseer too).
    env: Vec<(String, OsString)>,
    /// Overseer's own settings, given to `overseer` only.
    overseer_env: Vec<(String, String)>,
    /// What the run started, and every process of theirs seen.
    pub procs: Processes,
}

/// What a finished command printed, and how it ended.
pub struct Finished {
    pub status: ExitStatus,
    pub log: String,
}

impl Run {
    /// A fresh folder with the DAGs written, a free port for the api-server, and
    /// the configuration every Airflow component of the run shares: `executor` on
    /// the test's database (`db_url`), one JWT secret, the api-server's execution
    /// API on loopback, one parsing process.
    pub fn new(setup: Setup, venv: PathBuf, db_url: &str) -> Self {
        let Setup {
            name,
            marker_var,
            executor,
            dags,
        } = setup;
        let dir = tempfile::Builder::new()
            .prefix(&format!("overseer-{name}-"))
            .tempdir()
            .expect("a run folder");
        for sub in ["dags", "airflow-home", "logs"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        for (file, source) in dags {
            std::fs::write(dir.path().join("dags").join(file), source).unwrap();
        }
        let marker = overseer_testkit::unique_name(&name.replace('-', "_"));
        let api_port = overseer_testkit::throwaway::free_port();
        let env = [
            ("PYTHONUNBUFFERED", "1".into()),
            ("AIRFLOW_HOME", dir.path().join("airflow-home").into()),
            (
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                sql_alchemy_conn(db_url).into(),
            ),
            ("AIRFLOW__CORE__EXECUTOR", executor.into()),
            ("AIRFLOW__CORE__LOAD_EXAMPLES", "False".into()),
            ("AIRFLOW__CORE__DAGS_FOLDER", dir.path().join("dags").into()),
            // Airflow's default is localhost:8080, which may be anyone's: point at ours.
            (
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
                format!("http://127.0.0.1:{api_port}/execution/").into(),
            ),
            // Signs the tokens Airflow's components hand each other: one value for all.
            (
                "AIRFLOW__API_AUTH__JWT_SECRET",
                format!("overseer-{name}-{marker}").into(),
            ),
            // One parsing process is plenty for a DAG or two on 2 cores.
            ("AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES", "1".into()),
        ];
        Self {
            name,
            dir: Some(dir),
            venv,
            api_port,
            env: env
                .map(|(k, v): (&str, OsString)| (k.to_owned(), v))
                .to_vec(),
            overseer_env: Vec::new(),
            procs: Processes::new(marker_var, marker),
        }
    }

    /// Adds `key=value` to the configuration every command of the run gets.
    pub fn env(&mut self, key: &str, value: impl Into<OsString>) {
        self.env.push((key.to_owned(), value.into()));
    }

    /// Adds `key=value` to what `overseer` runs with, beside Airflow's configuration.
    pub fn overseer_env(&mut self, key: &str, value: impl Into<String>) {
        self.overseer_env.push((key.to_owned(), value.into()));
    }

    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("the run folder").path()
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir().join("logs").join(format!("{name}.log"))
    }

    /// `http://127.0.0.1:<api port><path>`: Airflow's api-server.
    pub fn api_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.api_port)
    }

    /// A command with a clean environment: the basics, the venv first on the PATH, the
    /// run's marker, and Airflow's configuration (which Overseer reads too).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = clean_command(program, self.dir(), &self.venv);
        command
            .env(self.procs.marker_var, &self.procs.marker)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    pub fn airflow(&self, args: &[&str]) -> Command {
        let mut command = self.command(self.venv.join("bin/airflow"));
        command.args(args);
        command
    }

    pub fn overseer(&self, args: &[&str]) -> Command {
        let mut command = self.command(OVERSEER);
        command
            .args(args)
            .env("RUST_LOG", "info")
            .envs(self.overseer_env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// Starts a long-running process, its output to `logs/<name>.log`.
    pub fn start(&mut self, name: &str, command: Command) {
        self.launch(name, command, false);
    }

    /// Starts a long-running process as the leader of a process group of its own, which
    /// is then signalled as a whole.
    pub fn start_group(&mut self, name: &str, mut command: Command) {
        command.process_group(0);
        self.launch(name, command, true);
    }

    fn launch(&mut self, name: &str, mut command: Command, group: bool) {
        let log = self.log_path(name);
        let file = std::fs::File::create(&log).expect("a log file");
        let child = command
            .stdout(file.try_clone().expect("the log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        self.procs.started.push(Process {
            name: name.to_owned(),
            child,
            log,
            group,
            reaped: false,
        });
        self.procs.note_ours();
    }

    /// `airflow api-server` on the run's port, one worker.
    pub fn start_api_server(&mut self) {
        let port = self.api_port.to_string();
        let command = self.airflow(&[
            "api-server",
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--workers",
            "1",
        ]);
        self.start("api-server", command);
    }

    /// Starts `overseer serve --bind 127.0.0.1:0` and returns the address it logs.
    pub fn start_overseer(&mut self) -> String {
        let command = self.overseer(&["serve", "--bind", "127.0.0.1:0"]);
        self.start("overseer", command);
        let log = self.log_path("overseer");
        self.wait_until(
            "overseer serve says it is running",
            Duration::from_secs(60),
            || {
                super::procs::read(&log)
                    .split("listening on http://")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(str::to_owned)
            },
        )
    }

    /// The process started under a name `named` takes that still runs (not reaped).
    pub fn running(&mut self, named: impl Fn(&str) -> bool) -> Option<&mut Process> {
        self.procs
            .started
            .iter_mut()
            .find(|p| named(&p.name) && !p.reaped)
    }

    /// The plugin's package on every command's `PYTHONPATH`, as an installed
    /// plugin puts it there: copied into the run's folder (Python writes its
    /// bytecode beside the sources; the clone is left as it was).
    pub fn plugin_on_path(&mut self) {
        let site = self.dir().join("plugin-src");
        super::airflow::copy_tree(
            &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("integrations/airflow/src"),
            &site,
        );
        self.env("PYTHONPATH", site);
    }

    /// A free loopback port for the run's Redis broker, named to Airflow (and
    /// so to Overseer) as `[celery] broker_url`; start it with
    /// [`Run::redis_server`].
    pub fn redis_broker(&mut self) -> u16 {
        let port = overseer_testkit::throwaway::free_port();
        self.env(
            "AIRFLOW__CELERY__BROKER_URL",
            format!("redis://127.0.0.1:{port}/0"),
        );
        port
    }

    /// `overseer migrate` on the run's database, which must succeed.
    pub fn migrate_overseer(&mut self) {
        let migrate = self.finish(
            self.overseer(&["migrate"]),
            "overseer-migrate",
            super::airflow::CLI_DEADLINE,
        );
        assert!(
            migrate.status.success(),
            "overseer migrate failed:\n{}",
            migrate.log
        );
    }

    /// `airflow ARGS` to its end, which must succeed (its log as
    /// `airflow-<first two args>`).
    pub fn airflow_cli(&mut self, args: &[&str]) {
        let name = format!("airflow-{}", args[..2.min(args.len())].join("-"));
        let done = self.finish(self.airflow(args), &name, super::airflow::CLI_DEADLINE);
        assert!(done.status.success(), "airflow {args:?}:\n{}", done.log);
    }

    /// A Redis broker of the run's own on `port` (loopback), keeping nothing on
    /// disk: started again, it is empty.
    pub fn redis_server(&self, port: u16) -> Command {
        let mut command = self.command("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(self.dir());
        command
    }

    /// Kills the process started as `name` by its pid (SIGKILL), as a crash
    /// or an OOM kill ends it, and reaps it.
    pub fn kill(&mut self, name: &str) {
        let process = self
            .running(|n| n == name)
            .unwrap_or_else(|| panic!("{name} runs"));
        process.child.kill().expect("killed by its pid");
        let _ = process.child.wait();
        process.reaped = true;
    }

    /// `airflow celery worker` consuming `queue` with one slot, as node
    /// `<run>-<name>@%h`, its process group and log `worker-<name>`, with
    /// `env` beside the run's configuration; returns once it is ready.
    pub fn start_celery_worker(&mut self, name: &str, queue: &str, env: &[(&str, &str)]) {
        let node = format!("{}-{name}@%h", self.name);
        let mut args = super::airflow::celery_worker_args(&node);
        args[5] = queue;
        let mut command = self.airflow(&args);
        command.envs(env.iter().copied());
        let name = format!("worker-{name}");
        self.start_group(&name, command);
        let log = self.log_path(&name);
        self.wait_until(
            &format!("{name} is ready"),
            super::airflow::START_DEADLINE,
            || super::procs::read(&log).contains(" ready.").then_some(()),
        );
    }

    /// Stops the worker [`Run::start_celery_worker`] started as `name`: SIGTERM
    /// to its process group, SIGKILL after the grace period.
    pub fn stop_celery_worker(&mut self, name: &str) {
        use super::procs::{group_gone_within, signal_group, wait_deadline};
        self.procs.note_ours();
        let name = format!("worker-{name}");
        let process = self.running(|n| n == name).expect("the worker runs");
        let pgid = process.child.id();
        signal_group(pgid, "TERM");
        let status = wait_deadline(&mut process.child, STOP_GRACE);
        process.reaped = true;
        if status.is_none() || !group_gone_within(pgid, STOP_GRACE) {
            signal_group(pgid, "KILL");
            assert!(group_gone_within(pgid, Duration::from_secs(5)));
        }
    }

    /// Runs a command to its end (killed at `deadline`), its output to `logs/<name>.log`.
    pub fn finish(&mut self, mut command: Command, name: &str, deadline: Duration) -> Finished {
        let (status, log) = finish_logged(&mut command, name, deadline, &self.log_path(name), None);
        Finished { status, log }
    }

    /// Reads `probe` until it answers, failing the test at `deadline`, or at once when
    /// a process of ours died meanwhile (with that process's log tail).
    #[track_caller]
    pub fn wait_until<T>(
        &mut self,
        what: &str,
        deadline: Duration,
        mut probe: impl FnMut() -> Option<T>,
    ) -> T {
        overseer_testkit::wait::until_within(what, deadline, || match probe() {
            Some(answer) => Ok(answer),
            None => {
                self.procs.check_ours(what);
                Err("not yet")
            }
        })
    }

    /// Runs `sql` until `accept` takes its rows, failing the test at `deadline` (with
    /// the last rows read), or at once when a process of ours died meanwhile.
    pub async fn wait_for_rows(
        &mut self,
        db: &TestDb,
        what: &str,
        deadline: Duration,
        sql: &str,
        accept: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let procs = std::cell::RefCell::new(&mut self.procs);
        let (procs, accept) = (&procs, &accept);
        overseer_testkit::wait::until_async(what, deadline, || async move {
            let rows = db.strings(sql).await;
            if accept(&rows) {
                return Ok(rows);
            }
            procs.borrow_mut().check_ours(what);
            Err(rows)
        })
        .await
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let name = self.name;
        if std::thread::panicking() {
            let tails = self.procs.tails();
            eprintln!("{name}: the test failed; the last lines of each process:\n{tails}");
        }
        if !self.procs.stopped {
            let strays = self.procs.stop_all(STOP_GRACE);
            if !strays.is_empty() {
                eprintln!("{name}: could not stop {strays:?}");
            }
        }
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("{name}: kept the run folder {}", dir.keep().display());
        }
    }
}

/// The first executor instance of the health body at `url` (Overseer's or
/// Airflow's, the plugin's entry), once it has one.
pub fn first_executor(url: &str) -> Option<Value> {
    let report = try_get_json(url)?;
    report["executor"]["instances"].as_array()?.first().cloned()
}

/// An executor instance's reason, or `""`.
pub fn reason_of(instance: &Value) -> String {
    instance["reason"].as_str().unwrap_or_default().to_owned()
}

/// A GET with no credentials: status and body, any status; a transport error is a 0.
pub fn get(url: &str) -> (u16, String) {
    match ureq::get(url).timeout(Duration::from_secs(10)).call() {
        Ok(response) => (
            response.status(),
            response.into_string().unwrap_or_default(),
        ),
        Err(ureq::Error::Status(status, response)) => {
            (status, response.into_string().unwrap_or_default())
        }
        Err(_) => (0, String::new()),
    }
}

/// A health report, or `None` while the server is not answering 200 with JSON.
pub fn try_get_json(url: &str) -> Option<Value> {
    match get(url) {
        (200, body) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// A 200 answer's JSON (anything else fails the test).
pub fn get_json(url: &str) -> Value {
    let (status, body) = get(url);
    assert_eq!(status, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}
