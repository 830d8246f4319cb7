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

use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use overseer_core::duration::short;
use overseer_core::secret::{MASK, Scrubber};
use overseer_core::{Executor, ExecutorHealth, HealthCheck};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use overseer_core::reason;

use crate::budget;
use crate::error::{Error, Result};

/// The most output kept of each of standard output and standard error: the
/// reason needs one line, and a probe that prints megabytes costs no memory.
pub const MAX_OUTPUT: usize = 64 * 1024;

/// What an option's name holds when its value is a credential (`--api-token`,
/// `--password`, `--secret-key`, `--auth`), compared without case.
const CREDENTIAL_WORDS: [&str; 7] = [
    "password",
    "passwd",
    "secret",
    "token",
    "key",
    "auth",
    "credential",
];

/// The shortest credential masked in free text (reasons, log lines): masking
/// every `1` because some `--key 1` was given would hide more than it protects.
/// Where the command itself is shown, every credential value is masked.
pub const MIN_MASKED_IN_REASONS: usize = 4;

/// How long the output pipes may stay open once the program has exited (a
/// process it left in the background may hold them); then what was read is used.
pub const PIPE_GRACE: Duration = Duration::from_millis(100);

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

/// Whether `argv` can be run: a program first, no NUL character anywhere, and
/// no whole command line written as one string. The program need not exist yet
/// (a missing one is a verdict: `not found`).
pub fn check_argv(argv: &[String]) -> Result<()> {
    let Some(program) = argv.first() else {
        return Err(Error::NoProgram);
    };
    if let Some(index) = argv.iter().position(|a| a.contains('\0')) {
        return Err(Error::Nul(index));
    }
    if program.trim().is_empty() {
        return Err(Error::NoProgram);
    }
    if program.contains(char::is_whitespace) && !Path::new(program).exists() {
        return Err(Error::CommandLine);
    }
    Ok(())
}

/// Whether an option (`--api-token`, `-password`) names a credential.
fn names_credential(option: &str) -> bool {
    let name = option.trim_start_matches('-').to_ascii_lowercase();
    option.starts_with('-') && CREDENTIAL_WORDS.iter().any(|word| name.contains(word))
}

/// Where the credentials of `argv` are: `(index, start)`, the argument at
/// `index` from byte `start` on (after the `=` of `--password=s3cret`, or 0 for
/// the whole value after `--token`).
fn credential_spans(argv: &[String]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut index = 1;
    while let Some(arg) = argv.get(index) {
        match arg.split_once('=') {
            Some((option, _)) if names_credential(option) => spans.push((index, option.len() + 1)),
            // The value follows the option, unless another option does.
            None if names_credential(arg)
                && argv
                    .get(index + 1)
                    .is_some_and(|next| !next.starts_with('-')) =>
            {
                index += 1;
                spans.push((index, 0));
            }
            _ => {}
        }
        index += 1;
    }
    spans
}

/// The arguments of `argv` that are credentials: the value after an option
/// whose name says so (`--token s3cret`), or after its `=` (`--password=s3cret`).
/// A rule of thumb, not a guarantee: a token passed any other way is not found.
pub fn credential_arguments(argv: &[String]) -> Vec<&str> {
    credential_spans(argv)
        .into_iter()
        .map(|(index, start)| &argv[index][start..])
        .collect()
}

/// `argv` as it may be shown (`overseer config`): each [`credential_arguments`]
/// value masked, and every URL's password.
pub fn redacted_argv(argv: &[String]) -> Vec<String> {
    let mut shown: Vec<String> = argv
        .iter()
        .map(|arg| overseer_core::secret::scrub(arg))
        .collect();
    for (index, start) in credential_spans(argv) {
        shown[index] = format!("{}{MASK}", &argv[index][..start]);
    }
    shown
}

/// `scrubber`, also masking the [`credential_arguments`] of `argv` in free
/// text (the shortest excepted, see [`MIN_MASKED_IN_REASONS`]): for a check's
/// reasons, and for the log writer.
pub fn scrubbing_credentials(scrubber: Scrubber, argv: &[String]) -> Scrubber {
    credential_arguments(argv)
        .into_iter()
        .filter(|secret| secret.chars().count() >= MIN_MASKED_IN_REASONS)
        .fold(scrubber, Scrubber::with_secret)
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
    async fn run(&self) -> ExecutorHealth {
        let deadline = Instant::now() + self.inner.deadline;
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
            Err(e) => return ExecutorHealth::unhealthy(self.cannot_start(&e)),
        };
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
        let verdict = match ran {
            Ok(Ok(Ended::Flooded)) => {
                self.kill(&mut child, &group).await;
                self.flooded(&out, &err)
            }
            Ok(Ok(Ended::Exited(exit))) => {
                if !exit.pipes_closed {
                    // A process it left behind holds its output: the group still
                    // exists through it, so its id is still ours to kill.
                    group.kill();
                }
                self.judge(exit.status, &out, &err)
            }
            Ok(Err(e)) => {
                self.kill(&mut child, &group).await;
                ExecutorHealth::unhealthy(format!(
                    "check command {}: cannot wait for it: {e}",
                    self.inner.program
                ))
            }
            Err(_elapsed) => {
                self.kill(&mut child, &group).await;
                ExecutorHealth::unhealthy(format!(
                    "check command {} timed out after {}",
                    self.inner.program,
                    short(self.inner.deadline)
                ))
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
        // Sanitised here too, as the debug log below shows it.
        let said = || {
            reason::first_line(out)
                .or_else(|| reason::first_line(err))
                .map(|line| reason::sanitise_with(&self.inner.scrubber, &line))
        };
        match status.code() {
            Some(0) => ExecutorHealth::Healthy,
            Some(1) => ExecutorHealth::unhealthy(said().unwrap_or_else(|| {
                format!("check command {program} exited with 1 and printed nothing")
            })),
            Some(code) => {
                tracing::debug!(
                    %program,
                    code,
                    said = said().as_deref().unwrap_or(""),
                    "check command exited with neither 0 nor 1: unknown"
                );
                ExecutorHealth::unknown(format!(
                    "check command {program} exited with {code} (neither 0, healthy, nor 1, unhealthy)"
                ))
            }
            None => {
                tracing::debug!(%program, %status, "check command ended by a signal: unknown");
                ExecutorHealth::unknown(format!(
                    "check command {program} was ended by a signal ({status})"
                ))
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
        ExecutorHealth::unhealthy(match line {
            Some(line) => format!("{stopped}; its first line: {line}"),
            None => stopped,
        })
    }

    /// Why the program could not be started, as a reason.
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
    /// The verdict of [`Self::run`], its reason sanitised ([`reason`]) with
    /// the command's credential arguments masked before it is cut.
    async fn get_health(&self) -> ExecutorHealth {
        let scrubber = &self.inner.scrubber;
        match self.run().await {
            ExecutorHealth::Unhealthy { reason } => {
                ExecutorHealth::unhealthy(reason::sanitise_with(scrubber, &reason))
            }
            ExecutorHealth::Unknown { reason } => {
                ExecutorHealth::unknown(reason::sanitise_with(scrubber, &reason))
            }
            ExecutorHealth::Healthy => ExecutorHealth::Healthy,
        }
    }
}

/// How [`run_to_exit`] ended.
enum Ended {
    /// The program exited.
    Exited(Exit),
    /// It wrote more than [`MAX_OUTPUT`] to a stream while it ran; it is still
    /// unreaped, for its caller to kill.
    Flooded,
}

/// How the program ended, once it has.
struct Exit {
    status: ExitStatus,
    /// Both pipes reached their end (no process it left behind holds them).
    pipes_closed: bool,
}

/// Reads the program's output while it runs, until it has exited and its pipes
/// have closed (or [`PIPE_GRACE`] after it exited), or until a stream has
/// given more than [`MAX_OUTPUT`]. Unbounded in time: the caller holds the
/// deadline.
async fn run_to_exit(
    child: &mut Child,
    group: &Group,
    stdout: Option<impl AsyncRead + Unpin>,
    stderr: Option<impl AsyncRead + Unpin>,
    out: &mut Vec<u8>,
    err: &mut Vec<u8>,
) -> io::Result<Ended> {
    // Ends at the first stream to flood, without waiting for the other.
    let reading = async {
        tokio::try_join!(read_up_to_max(stdout, out), read_up_to_max(stderr, err)).map(|_| ())
    };
    let exiting = async {
        let status = child.wait().await;
        // In the same poll as the reaping: the guard never kills a reaped group.
        group.leader_reaped();
        status
    };
    tokio::pin!(reading, exiting);
    let status = tokio::select! {
        status = &mut exiting => status?,
        read = &mut reading => {
            if read.is_err() {
                return Ok(Ended::Flooded);
            }
            let status = exiting.await?;
            return Ok(Ended::Exited(Exit { status, pipes_closed: true }));
        }
    };
    // A process it left behind that still writes (floods) holds the pipes too.
    let pipes_closed = matches!(
        tokio::time::timeout(PIPE_GRACE, &mut reading).await,
        Ok(Ok(()))
    );
    Ok(Ended::Exited(Exit {
        status,
        pipes_closed,
    }))
}

/// A stream gave more than [`MAX_OUTPUT`]: reading stopped there.
#[derive(Debug)]
struct Flooded;

/// Reads `pipe` to its end, keeping what it gives in `kept`; stops with
/// [`Flooded`] at the first byte past [`MAX_OUTPUT`], reading nothing more.
/// What it read stays in `kept` even if it is dropped before the end.
async fn read_up_to_max(
    pipe: Option<impl AsyncRead + Unpin>,
    kept: &mut Vec<u8>,
) -> std::result::Result<(), Flooded> {
    let Some(mut pipe) = pipe else {
        return Ok(());
    };
    let mut chunk = [0u8; 8 * 1024];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
                if n > room {
                    return Err(Flooded);
                }
            }
        }
    }
}

/// The program's process group (its id is the program's pid): killed whole at
/// the deadline, and on drop while the program is still unreaped, so a check
/// dropped mid-run leaves no process behind.
struct Group {
    /// The group's id; `None` when the system gave no pid (never on Unix).
    id: Option<i32>,
    /// The program has been reaped: its id may be reused, so only a group that
    /// still has members may be killed (see [`Group::kill`]'s callers).
    reaped: AtomicBool,
}

impl Group {
    fn of(child: &Child) -> Self {
        Self {
            // Never 0 or 1: `killpg(0)` is our own group, and 1 is init's.
            id: child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .filter(|id| *id > 1),
            reaped: AtomicBool::new(false),
        }
    }

    fn leader_reaped(&self) {
        self.reaped.store(true, Ordering::Release);
    }

    /// Sends `SIGKILL` to every process of the group. Only while the program is
    /// unreaped, or while another member lives: either keeps the id from reuse.
    fn kill(&self) {
        #[cfg(unix)]
        if let Some(id) = self.id {
            // SAFETY: killpg has no memory effects; a group that is gone is ESRCH.
            unsafe {
                libc::killpg(id, libc::SIGKILL);
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.reaped.load(Ordering::Acquire) {
            self.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_command_needs_a_program_and_no_shell_line() {
        assert_eq!(check_argv(&[]), Err(Error::NoProgram));
        assert_eq!(check_argv(&argv(&["  "])), Err(Error::NoProgram));
        assert_eq!(check_argv(&argv(&["probe", "a\0b"])), Err(Error::Nul(1)));
        assert_eq!(
            check_argv(&argv(&["/usr/local/bin/probe --token s3cret"])),
            Err(Error::CommandLine)
        );
        assert!(
            !Error::CommandLine.to_string().contains("s3cret"),
            "the command is never quoted"
        );
        check_argv(&argv(&["probe"])).unwrap();
        check_argv(&argv(&["/usr/local/bin/probe", "--fast", ""])).unwrap();
        check_argv(&argv(&["sh", "-c", "exit 0"])).unwrap();
    }

    #[test]
    fn credential_arguments_are_found_by_their_option_and_masked() {
        let command = argv(&[
            "/usr/local/bin/probe",
            "--token",
            "s3cret",
            "--api-key=k3y-value",
            "--fast",
            "--password",
            "--verbose",
            "--broker",
            "redis://:hunter2@b:6379/0",
            "--region=eu",
        ]);
        assert_eq!(credential_arguments(&command), ["s3cret", "k3y-value"]);
        assert_eq!(
            redacted_argv(&command),
            [
                "/usr/local/bin/probe",
                "--token",
                "***",
                "--api-key=***",
                "--fast",
                "--password",
                "--verbose",
                "--broker",
                "redis://:***@b:6379/0",
                "--region=eu",
            ]
        );
        // The program itself is never taken for a value.
        assert!(credential_arguments(&argv(&["--token-probe", "x"])).is_empty());
    }

    #[test]
    fn the_instance_is_the_program_without_its_arguments() {
        let executor = executor(
            "my.company.MyExecutor",
            &argv(&["/usr/local/bin/probe", "--token", "s3cret"]),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(executor.instance.as_deref(), Some("/usr/local/bin/probe"));
        let check = CommandCheck::new(&argv(&["probe", "s3cret"]), Duration::from_secs(5)).unwrap();
        assert!(!format!("{check:?}").contains("s3cret"));
        assert_eq!(check.deadline(), Duration::from_millis(4500));
    }
}
