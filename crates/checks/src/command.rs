//! [`CommandCheck`]: a program Overseer runs at each poll; its exit code is the verdict.
//!
//! | the program | the verdict |
//! | --- | --- |
//! | exits 0 | `healthy` |
//! | exits 1 | `unhealthy`, the reason its first non-empty line of standard output, else of standard error (else `check command /p exited with 1 and printed nothing`) |
//! | writes more than [`MAX_OUTPUT`] to either stream (`yes`) | `unhealthy: check command yes printed more than 64 KiB and was stopped; its first line: y`, at once: it is killed with its group and reaped, whatever it would have exited with |
//! | exits with any other code (2 is the convention), or dies of a signal we did not send | `unknown`; what it said is logged at debug, as the report keeps no reason for `unknown` |
//! | does not exist | `unhealthy: check command /x/y: not found`: a check that cannot run is a fault someone must fix, and `unknown` would hide it |
//! | cannot be run (not executable, ...) | `unhealthy: check command /x/y: permission denied` (or what the system said) |
//! | runs past the deadline | `unhealthy: check command /p timed out after 4.5s`: it is killed with every process it started, and reaped |
//!
//! # How it runs
//! - No shell, unless the command names one (`["sh", "-c", "..."]`): the program
//!   gets its arguments as they are written. A bare name is looked up in `PATH`, a
//!   relative path from Overseer's working folder. The program inherits Overseer's
//!   environment and working folder; its standard input is `/dev/null`.
//! - Its output is read as it comes, up to [`MAX_OUTPUT`] of each stream: all
//!   the reason needs, and a program that writes less never blocks on a full
//!   pipe. One that writes more is stopped there: nothing more is read, its
//!   group is killed (as at the deadline, while it is still unreaped) and the
//!   verdict says so. A probe that floods costs Overseer 64 KiB of reading, not
//!   a core until the deadline; and neither a probe that ignores `SIGPIPE` nor
//!   one that blocks on the full pipe is left running to its deadline.
//! - It runs in a process group of its own. At the deadline (`budget`: 90 % of
//!   `poll_timeout`) the whole group is killed with `SIGKILL`, so a script's own
//!   children die with it, and the program is reaped before the check answers.
//!   The supervisor polls an executor again only once its check has answered
//!   (the in-flight guard), so at most one probe per executor is ever alive.
//! - If the check is dropped before it answers (Overseer stopping, say), a
//!   guard kills the group, `kill_on_drop` kills the program, and tokio's orphan
//!   reaper reaps it: no zombie is left behind.
//! - Once the program has exited, its pipes get [`PIPE_GRACE`] to close; a
//!   process it left in the background still holding them is killed with the group.
//! - A process it started in a session of its own (`setsid`), which leaves its
//!   group, is ended after the probe where Overseer adopts orphans (the
//!   `overseer` binary does): see [`crate::orphans`].
//! - The instance is the program alone: arguments may carry a token. The value
//!   of an option whose name says it is a credential (`--token s3cret`,
//!   `--password=s3cret`: [`credential_arguments`]) is masked wherever the
//!   command is shown ([`redacted_argv`]) and in the reason, should the probe
//!   print it; so is any URL's password.
//!
//! # Layout
//! - this module: [`CommandCheck`], the program started, bounded by its
//!   deadline, and its end made a verdict;
//! - `argv`: what a command may be ([`check_argv`]) and where its credentials
//!   are ([`credential_arguments`], [`redacted_argv`], [`scrubbing_credentials`]);
//! - `process`: the started program's life: its output read up to
//!   [`MAX_OUTPUT`] while it runs, its exit and its pipes awaited, its process
//!   group killed whole.

use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use overseer_core::duration::short;
use overseer_core::secret::Scrubber;
use overseer_core::{Executor, ExecutorHealth, HealthCheck, Observation, Reason};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use overseer_core::reason;

use crate::budget;
use crate::error::Result;

mod argv;
mod process;
mod starved;

pub use argv::{
    MIN_MASKED_IN_REASONS, check_argv, credential_arguments, redacted_argv, scrubbing_credentials,
};
use process::{Ended, Group, run_to_exit};
pub use process::{MAX_OUTPUT, PIPE_GRACE};

/// A health check that runs a program; cloning it is cheap.
#[derive(Clone)]
pub struct CommandCheck {
    inner: Arc<Inner>,
}

struct Inner {
    /// The program, as written: a path, or a name looked up in `PATH`.
    program: String,
    /// Its arguments, given as they are (no shell splits or expands them).
    args: Vec<String>,
    /// How long it may run (`budget::deadline` of `poll_timeout`).
    deadline: Duration,
    /// Masks its credential arguments (and URL passwords) in reasons.
    scrubber: Scrubber,
}

impl std::fmt::Debug for CommandCheck {
    /// The program and the deadline only: an argument may be a token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandCheck")
            .field("program", &self.inner.program)
            .field("deadline", &self.inner.deadline)
            .finish_non_exhaustive()
    }
}

/// What the composition root calls: an executor named `executor_class` whose
/// check runs `argv` (program first), answering within `poll_timeout`. The
/// instance is the program.
pub fn executor(executor_class: &str, argv: &[String], poll_timeout: Duration) -> Result<Executor> {
    let check = CommandCheck::new(argv, poll_timeout)?;
    let program = check.program().to_owned();
    Ok(Executor::new(executor_class, check).with_instance(program))
}

impl CommandCheck {
    /// A check that runs `argv` (program first) and answers within `poll_timeout`.
    pub fn new(argv: &[String], poll_timeout: Duration) -> Result<Self> {
        check_argv(argv)?;
        let scrubber = scrubbing_credentials(Scrubber::default(), argv);
        Ok(Self {
            inner: Arc::new(Inner {
                program: argv[0].clone(),
                args: argv[1..].to_vec(),
                deadline: budget::deadline(poll_timeout),
                scrubber,
            }),
        })
    }

    /// The program, as written: the instance.
    pub fn program(&self) -> &str {
        &self.inner.program
    }

    /// How long the program may run before it is killed.
    pub fn deadline(&self) -> Duration {
        self.inner.deadline
    }

    /// Runs the program once, to its verdict.
    async fn run(&self) -> Observation {
        let started = Instant::now();
        let deadline = started + self.inner.deadline;
        let mut command = Command::new(&self.inner.program);
        command
            .args(&self.inner.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        command.process_group(0);
        let mut child = match crate::orphans::spawning(|| command.spawn(), Child::id) {
            Ok(child) => child,
            Err(e) => return ExecutorHealth::unhealthy(self.reason(&self.cannot_start(&e))).into(),
        };
        let spawn = started.elapsed();
        let pid = child.id();
        // Declared after `child`, so dropped before it: the group is killed while
        // its leader is still unreaped, and its id cannot have been reused.
        let group = Group::of(&child);
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let ran = tokio::time::timeout_at(
            deadline,
            run_to_exit(&mut child, &group, stdout, stderr, &mut out, &mut err),
        )
        .await;
        let verdict: Observation = match ran {
            Ok(Ok(Ended::Flooded)) => {
                self.kill(&mut child, &group).await;
                self.flooded(&out, &err).into()
            }
            Ok(Ok(Ended::Exited(exit))) => {
                if !exit.pipes_closed {
                    // A process it left behind holds its output: the group still
                    // exists through it, so its id is still ours to kill.
                    group.kill();
                }
                self.judge(exit.status, &out, &err).into()
            }
            Ok(Err(e)) => {
                self.kill(&mut child, &group).await;
                ExecutorHealth::unhealthy(self.reason(&format!(
                    "check command {}: cannot wait for it: {e}",
                    self.inner.program
                )))
                .into()
            }
            Err(_elapsed) => {
                // Read before it is reaped: what this host did to it.
                let starved = pid.and_then(|pid| starved::starved(pid, spawn, self.inner.deadline));
                self.kill(&mut child, &group).await;
                let program = &self.inner.program;
                let within = short(self.inner.deadline);
                match starved {
                    // This host kept it from answering: not the executor's fault.
                    // The reason holds still while the host stays busy; the
                    // figures are the log's.
                    Some(starved) => {
                        tracing::debug!(%program, starved = %starved.said(), "check command starved by this host");
                        Observation::host_busy(self.reason(&format!(
                            "not judged: Overseer's host did not run check command {program} in time to answer within {within} (its CPUs are busy)"
                        )))
                    }
                    None => ExecutorHealth::unhealthy(
                        self.reason(&format!("check command {program} timed out after {within}")),
                    )
                    .into(),
                }
            }
        };
        // What it left in a session of its own (setsid) is ended too.
        crate::orphans::after_probe();
        verdict
    }

    /// Kills the program's whole group, then the program, and reaps it.
    async fn kill(&self, child: &mut Child, group: &Group) {
        group.kill();
        // `kill` also waits, which reaps; an error means it had already exited.
        let _ = child.kill().await;
        group.leader_reaped();
    }

    /// The verdict of an exited program.
    fn judge(&self, status: ExitStatus, out: &[u8], err: &[u8]) -> ExecutorHealth {
        let program = &self.inner.program;
        // A reason already, as the debug log below shows it.
        let said = || {
            reason::first_line(out)
                .or_else(|| reason::first_line(err))
                .map(|line| self.reason(&line))
        };
        match status.code() {
            Some(0) => ExecutorHealth::Healthy,
            Some(1) => ExecutorHealth::unhealthy(said().unwrap_or_else(|| {
                self.reason(&format!(
                    "check command {program} exited with 1 and printed nothing"
                ))
            })),
            Some(code) => {
                tracing::debug!(
                    %program,
                    code,
                    said = said().as_deref().unwrap_or(""),
                    "check command exited with neither 0 nor 1: unknown"
                );
                ExecutorHealth::unknown(self.reason(&format!(
                    "check command {program} exited with {code} (neither 0, healthy, nor 1, unhealthy)"
                )))
            }
            None => {
                tracing::debug!(%program, %status, "check command ended by a signal: unknown");
                ExecutorHealth::unknown(self.reason(&format!(
                    "check command {program} was ended by a signal ({status})"
                )))
            }
        }
    }

    /// The verdict of a program stopped for writing more than [`MAX_OUTPUT`].
    fn flooded(&self, out: &[u8], err: &[u8]) -> ExecutorHealth {
        let program = &self.inner.program;
        let kib = MAX_OUTPUT / 1024;
        let stopped =
            format!("check command {program} printed more than {kib} KiB and was stopped");
        let line = reason::first_line(out).or_else(|| reason::first_line(err));
        ExecutorHealth::unhealthy(self.reason(&match line {
            Some(line) => format!("{stopped}; its first line: {line}"),
            None => stopped,
        }))
    }

    /// `text` as a reason, the command's credential arguments masked before
    /// it is cut: every reason of this check is made here.
    fn reason(&self, text: &str) -> Reason {
        Reason::scrubbed(&self.inner.scrubber, text)
    }

    /// Why the program could not be started, as a reason's text.
    fn cannot_start(&self, e: &io::Error) -> String {
        let program = &self.inner.program;
        let why = match e.kind() {
            // A script whose `#!` interpreter is missing fails the same way.
            io::ErrorKind::NotFound if program.contains('/') && Path::new(program).is_file() => {
                "not found: its interpreter (the #! line) is missing".to_owned()
            }
            io::ErrorKind::NotFound => "not found".to_owned(),
            io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
            _ => format!("cannot start: {e}"),
        };
        format!("check command {program}: {why}")
    }
}

#[async_trait::async_trait]
impl HealthCheck for CommandCheck {
    /// The verdict of [`Self::run`], its reason made with the command's
    /// credential arguments masked before it is cut ([`Self::reason`]).
    async fn get_health(&self) -> ExecutorHealth {
        self.run().await.health
    }

    /// [`Self::run`]'s observation: a probe this host starved is
    /// [`Observation::host_busy`], never the executor's fault.
    async fn observe(&self) -> Observation {
        self.run().await
    }
}
#[cfg(test)]
mod tests;
