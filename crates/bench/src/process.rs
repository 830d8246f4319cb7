//! Processes the harness starts: its own scenarios (this binary re-run with
//! `--scenario`), the release `overseer` binary, Airflow's API server. Each is
//! stopped by its own process id, never by name.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

use crate::system;

/// How long a stopped process may take to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(20);
/// How long `overseer serve` may take to say where it listens (it migrates first).
const SERVE_START_DEADLINE: Duration = Duration::from_secs(60);
/// One HTTP request of the harness's own (not the load generator's).
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs one scenario in a child process of its own (so its CPU time and peak
/// memory are its own) and returns the JSON it prints on its `result` line.
/// `on_line` sees every other line as it comes (the window markers).
/// The child is killed if it outlives `deadline`.
pub fn scenario(
    name: &str,
    params: &[(&str, String)],
    deadline: Duration,
    mut on_line: impl FnMut(&str),
) -> Result<Value> {
    let log = tempfile::NamedTempFile::new()?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg("--scenario")
        .arg(name)
        .args(params.iter().map(|(k, v)| format!("{k}={v}")))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log.reopen()?)
        .spawn()
        .context("while starting a scenario process")?;
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + deadline;
            while Instant::now() < until {
                if done.load(Ordering::Relaxed) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            system::signal(pid, "KILL");
            true
        })
    };
    let mut result = None;
    let stdout = child.stdout.take().expect("stdout is piped");
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        match line.strip_prefix("result ") {
            Some(json) => result = Some(serde_json::from_str::<Value>(json)?),
            None => on_line(&line),
        }
    }
    let status = child.wait()?;
    done.store(true, Ordering::Relaxed);
    let killed = watchdog.join().unwrap_or(false);
    let stderr = std::fs::read_to_string(log.path()).unwrap_or_default();
    if killed {
        bail!(
            "scenario {name} ran past {deadline:?} and was killed; its log:\n{}",
            tail(&stderr, 20)
        );
    }
    match result {
        Some(result) if status.success() => Ok(result),
        _ => Err(anyhow!(
            "scenario {name} ({}) failed ({status}):\n{}",
            params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
            tail(&stderr, 30)
        )),
    }
}

/// The last `lines` lines of a text.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The workspace this binary was built from (BENCHMARKS.md is written there).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from("."))
}

/// The `overseer` binary of the same profile as this one, built now (a no-op
/// when it is up to date) unless `OVERSEER_BIN` names one. Returns it and, when
/// the build failed but an older binary exists, a note saying so.
pub fn overseer_binary() -> Result<(PathBuf, Option<String>)> {
    if let Ok(path) = std::env::var("OVERSEER_BIN") {
        return Ok((PathBuf::from(path), None));
    }
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .ok_or_else(|| anyhow!("no folder for {}", exe.display()))?
        .join("overseer");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "--quiet", "-p", "overseer", "--bin", "overseer"])
        .current_dir(workspace());
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    eprintln!(
        "overseer-bench: building the overseer binary ({})",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    let built = build.output();
    let note = match built {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "building the overseer binary failed, so the existing {} was used: {}",
            bin.display(),
            tail(&String::from_utf8_lossy(&out.stderr), 3)
        )),
        Err(e) => Some(format!(
            "cargo could not run ({e}); the existing {} was used",
            bin.display()
        )),
    };
    if !bin.exists() {
        bail!(
            "no overseer binary at {} ({})",
            bin.display(),
            note.unwrap_or_default()
        );
    }
    Ok((bin, note))
}

/// A long-running server of the harness's: `overseer serve` or Airflow's API server.
pub struct Server {
    pub name: String,
    child: Child,
    log: PathBuf,
    stopped: bool,
}

impl Server {
    /// Starts `command` with its output to `log`.
    pub fn spawn(name: &str, mut command: Command, log: PathBuf) -> Result<Self> {
        let file = File::create(&log)?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("while starting {name}"))?;
        Ok(Self {
            name: name.to_owned(),
            child,
            log,
            stopped: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails if the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            bail!(
                "{} exited ({status}); its log:\n{}",
                self.name,
                tail(&self.log_text(), 30)
            );
        }
        Ok(())
    }

    /// Waits until `probe` answers (checking that the process lives), or fails at `deadline`.
    pub fn wait_for<T>(
        &mut self,
        what: &str,
        deadline: Duration,
        mut probe: impl FnMut(&Self) -> Option<T>,
    ) -> Result<T> {
        let until = Instant::now() + deadline;
        loop {
            if let Some(answer) = probe(self) {
                return Ok(answer);
            }
            self.check_alive()?;
            if Instant::now() > until {
                bail!(
                    "{}: {what} did not happen within {deadline:?}; its log:\n{}",
                    self.name,
                    tail(&self.log_text(), 30)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM to it, SIGKILL after a grace period, then SIGKILL to any
    /// descendant of it still alive (by the pids seen before the stop).
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let family = system::tree(self.pid());
        system::signal(self.pid(), "TERM");
        let until = Instant::now() + STOP_GRACE;
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in family.into_iter().skip(1) {
            if system::alive(pid) {
                system::signal(pid, "KILL");
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A command with a clean environment (PATH, HOME, LANG and what is given),
/// so a user's `OVERSEER_*` or `AIRFLOW__*` variables cannot change a scenario.
pub fn clean_command(program: impl AsRef<std::ffi::OsStr>, dir: &Path) -> Command {
    let mut command = Command::new(program);
    command.current_dir(dir).env_clear();
    for var in ["PATH", "HOME", "LANG", "TMPDIR"] {
        if let Ok(value) = std::env::var(var) {
            command.env(var, value);
        }
    }
    command
}

/// Starts `overseer serve --bind 127.0.0.1:0` in `dir` with `env`, and waits for
/// the address it logs (`overseer is running, listening on http://ADDR`).
pub fn serve_overseer(bin: &Path, dir: &Path, env: &[(&str, String)]) -> Result<(Server, String)> {
    let mut command = clean_command(bin, dir);
    command
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env("RUST_LOG", "warn,overseer::serve=info")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    let mut server = Server::spawn("overseer serve", command, dir.join("overseer.log"))?;
    let addr = server.wait_for(
        "saying where it listens",
        SERVE_START_DEADLINE,
        listening_addr,
    )?;
    Ok((server, addr))
}

/// The `host:port` a server's log says it listens on (`... listening on
/// http://ADDR`), once it has said so.
pub fn listening_addr(server: &Server) -> Option<String> {
    server
        .log_text()
        .split("listening on http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(HTTP_TIMEOUT).build()
}

/// GET a URL: its status and body, whatever the status; `None` if nothing answered.
pub fn get(url: &str) -> Option<(u16, String)> {
    match agent().get(url).call() {
        Ok(response) => {
            let status = response.status();
            response.into_string().ok().map(|body| (status, body))
        }
        Err(ureq::Error::Status(status, response)) => {
            Some((status, response.into_string().unwrap_or_default()))
        }
        Err(_) => None,
    }
}

/// GET a URL's JSON (any status).
pub fn get_json(url: &str) -> Option<Value> {
    get(url).and_then(|(_, body)| serde_json::from_str(&body).ok())
}

/// Runs a command to its end with its output to `log`; fails if it fails or
/// outlives `deadline` (then it is killed).
pub fn run_to_end(name: &str, mut command: Command, log: &Path, deadline: Duration) -> Result<()> {
    let file = File::create(log)?;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("while starting {name}"))?;
    let until = Instant::now() + deadline;
    loop {
        if let Some(status) = child.try_wait()? {
            if status.success() {
                return Ok(());
            }
            bail!(
                "{name} failed ({status}):\n{}",
                tail(&std::fs::read_to_string(log).unwrap_or_default(), 20)
            );
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{name} did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
