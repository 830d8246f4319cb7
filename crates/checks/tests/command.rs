//! The command check against real programs: shell scripts written by each test,
//! run as Overseer runs them. What is left behind is read from `/proc`: a probe
//! that hangs is killed with its children and reaped, whether the check answers
//! or is dropped, and never leaves a zombie.

#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use overseer_checks::CommandCheck;
use overseer_core::{ExecutorHealth, HealthCheck};

/// The poll timeout of most tests: the check gives itself 90 % of it.
const POLL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the kernel may take to deliver a SIGKILL and the orphan reaper to
/// run, before a test calls a process left behind.
const SETTLE: Duration = Duration::from_secs(5);

/// Writes an executable `#!/bin/sh` script and returns its path.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

async fn verdict(argv: &[String], poll_timeout: Duration) -> ExecutorHealth {
    CommandCheck::new(argv, poll_timeout)
        .unwrap()
        .get_health()
        .await
}

async fn run_script(body: &str) -> ExecutorHealth {
    let dir = tempfile::tempdir().unwrap();
    let path = script(dir.path(), "probe", body);
    verdict(&argv(&[path.to_str().unwrap()]), POLL_TIMEOUT).await
}

/// A `sleep` duration no other process on the machine uses, to find it in `/proc`.
fn marker() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}.{}",
        7000 + NEXT.fetch_add(1, Ordering::Relaxed),
        std::process::id()
    )
}

/// One process of `/proc`: its pid, state and parent, and its command line.
struct Process {
    pid: u32,
    state: char,
    ppid: u32,
    cmdline: String,
}

fn processes() -> Vec<Process> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = fields.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
            .unwrap_or_default();
        found.push(Process {
            pid,
            state,
            ppid,
            cmdline,
        });
    }
    found
}

/// Our own children that are zombies: exited, never reaped.
fn our_zombies() -> Vec<u32> {
    let me = std::process::id();
    processes()
        .into_iter()
        .filter(|p| p.ppid == me && p.state == 'Z')
        .map(|p| p.pid)
        .collect()
}

/// Processes still running whose command line holds `marker` (a zombie has an
/// empty command line, and is counted by [`our_zombies`] when it is ours).
fn alive_with(marker: &str) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|p| p.state != 'Z' && p.state != 'X' && p.cmdline.contains(marker))
        .map(|p| p.pid)
        .collect()
}

/// Waits (letting the runtime's drivers run) until nothing with `marker` runs
/// and no child of ours is a zombie; fails with what is left after [`SETTLE`].
async fn assert_nothing_left(marker: &str) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let (alive, zombies) = (alive_with(marker), our_zombies());
        if alive.is_empty() && zombies.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: running {alive:?}, zombies {zombies:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn exit_0_is_healthy() {
    assert_eq!(
        run_script("echo all good\nexit 0").await,
        ExecutorHealth::Healthy
    );
}

#[tokio::test]
async fn exit_1_is_unhealthy_with_the_first_line_of_output() {
    assert_eq!(
        run_script("echo\necho '   '\necho '  queue default is stuck  '\necho second line\nexit 1")
            .await,
        ExecutorHealth::unhealthy("queue default is stuck")
    );
    // Nothing on standard output: standard error's first line.
    assert_eq!(
        run_script("echo 'cannot reach the API' >&2\nexit 1").await,
        ExecutorHealth::unhealthy("cannot reach the API")
    );
    // Standard output wins over standard error.
    assert_eq!(
        run_script("echo warning >&2\necho 'the real reason'\nexit 1").await,
        ExecutorHealth::unhealthy("the real reason")
    );
}

#[tokio::test]
async fn exit_1_in_silence_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(dir.path(), "quiet", "exit 1");
    let program = path.to_str().unwrap();
    assert_eq!(
        verdict(&argv(&[program]), POLL_TIMEOUT).await,
        ExecutorHealth::unhealthy(format!(
            "check command {program} exited with 1 and printed nothing"
        ))
    );
}

#[tokio::test]
async fn any_other_exit_is_unknown() {
    for code in [2, 3, 42, 127, 255] {
        let verdict = run_script(&format!("echo 'not sure'\nexit {code}"))
            .await
            .to_string();
        assert!(
            verdict.starts_with("unknown: check command /")
                && verdict.ends_with(&format!(
                    "/probe exited with {code} (neither 0, healthy, nor 1, unhealthy)"
                )),
            "exit {code}: {verdict}"
        );
    }
    // Ended by a signal it was not sent by the check.
    let killed = run_script("kill -KILL $$").await;
    assert!(
        killed.to_string().contains("/probe was ended by a signal"),
        "{killed}"
    );
}

#[tokio::test]
async fn the_reason_is_one_bounded_line_without_credentials() {
    let health =
        run_script("printf 'broker redis://:hunter2@broker:6379/0 refused\\033[0m\\n'\nexit 1")
            .await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy("broker redis://:***@broker:6379/0 refused [0m")
    );
    let ExecutorHealth::Unhealthy { reason } =
        run_script("head -c 60000 /dev/zero | tr '\\0' x\nexit 1").await
    else {
        panic!("exit 1 is unhealthy");
    };
    assert!(reason.chars().count() <= 241, "{}", reason.len());
    assert!(
        reason.starts_with("xxxx") && reason.ends_with('…'),
        "{reason}"
    );
}

/// A probe that prints the token it was given: the reason masks it.
#[tokio::test]
async fn a_token_given_as_an_argument_is_masked_in_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(dir.path(), "echoes", "echo \"token $2 rejected\"\nexit 1");
    assert_eq!(
        verdict(
            &argv(&[path.to_str().unwrap(), "--token", "s3cret-value"]),
            POLL_TIMEOUT
        )
        .await,
        ExecutorHealth::unhealthy("token *** rejected")
    );
}

/// A probe that echoes its token where the reason is cut: the token is masked
/// before the cut, so not even its first characters show.
#[tokio::test]
async fn a_token_where_the_reason_is_cut_is_masked_whole() {
    let dir = tempfile::tempdir().unwrap();
    let pad = overseer_core::reason::MAX_CHARS - 6;
    let body = format!("printf '%s \\033 %s\\n' \"$(printf 'x%.0s' $(seq {pad}))\" \"$2\"\nexit 1");
    let path = script(dir.path(), "echoes", &body);
    let health = verdict(
        &argv(&[path.to_str().unwrap(), "--token", "s3cret-value"]),
        POLL_TIMEOUT,
    )
    .await;
    let ExecutorHealth::Unhealthy { reason } = health else {
        panic!("exit 1 is unhealthy: {health:?}");
    };
    assert!(!reason.contains("s3c"), "{reason}");
    assert!(
        reason.starts_with("xxxx") && reason.chars().count() <= 240,
        "{reason}"
    );
}

/// A probe that prints far more than the check keeps is stopped at what is
/// kept: the verdict says so, with its first line.
#[tokio::test]
async fn a_probe_that_prints_megabytes_is_stopped_at_what_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(
        dir.path(),
        "probe",
        "echo first\nhead -c 4000000 /dev/zero\nhead -c 4000000 /dev/zero >&2\nexit 1",
    );
    assert_eq!(
        verdict(&argv(&[path.to_str().unwrap()]), POLL_TIMEOUT).await,
        ExecutorHealth::unhealthy(format!(
            "check command {} printed more than 64 KiB and was stopped; its first line: first",
            path.display()
        ))
    );
}

/// `check_command = ["yes"]`: a probe that never stops writing. The check
/// reads what it keeps, then stops it: the verdict names its first line (not
/// `timed out`: it did not wait for the deadline), and nothing is left behind.
#[tokio::test]
async fn a_probe_that_floods_is_stopped_and_reaped_without_waiting_for_its_deadline() {
    let marker = marker();
    let health = verdict(&argv(&["yes", &marker]), POLL_TIMEOUT).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "check command yes printed more than 64 KiB and was stopped; its first line: {marker}"
        ))
    );
    assert_eq!(our_zombies(), Vec::<u32>::new(), "reaped before the answer");
    assert_nothing_left(&marker).await;
}

/// A flooding probe that ignores `SIGPIPE`, and its children, flooding
/// standard error: stopped the same way, the whole group with it.
#[tokio::test]
async fn a_flooding_probe_that_ignores_sigpipe_is_stopped_with_its_children() {
    let marker = marker();
    let health = run_script(&format!(
        "trap '' PIPE\nsleep {marker} &\necho 'flooding stderr' >&2\nwhile :; do echo x >&2; done"
    ))
    .await;
    let ExecutorHealth::Unhealthy { reason } = health else {
        panic!("a flood is unhealthy: {health:?}");
    };
    assert!(
        reason
            .ends_with("printed more than 64 KiB and was stopped; its first line: flooding stderr"),
        "{reason}"
    );
    assert_nothing_left(&marker).await;
}

#[tokio::test]
async fn arguments_reach_the_program_as_written_with_no_shell_between() {
    // `$HOME`, `*` and `;` would each mean something to a shell.
    let health = verdict(
        &argv(&[
            "sh",
            "-c",
            "echo \"$1|$2|$3\"; exit 1",
            "sh",
            "$HOME",
            "*",
            "; exit 0",
        ]),
        POLL_TIMEOUT,
    )
    .await;
    assert_eq!(health, ExecutorHealth::unhealthy("$HOME|*|; exit 0"));
    // Standard input is empty: a probe that reads it does not wait.
    assert_eq!(
        run_script("read line || exit 0\nexit 1").await,
        ExecutorHealth::Healthy
    );
}

#[tokio::test]
async fn a_program_that_does_not_exist_is_unhealthy_and_says_not_found() {
    assert_eq!(
        verdict(
            &argv(&["/nonexistent/overseer/probe", "--fast"]),
            POLL_TIMEOUT
        )
        .await,
        ExecutorHealth::unhealthy("check command /nonexistent/overseer/probe: not found")
    );
    assert_eq!(
        verdict(&argv(&["overseer-no-such-probe-in-path"]), POLL_TIMEOUT).await,
        ExecutorHealth::unhealthy("check command overseer-no-such-probe-in-path: not found")
    );
    // A script whose interpreter is missing.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orphan");
    std::fs::write(&path, "#!/nonexistent/interpreter\nexit 0\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = path.to_str().unwrap();
    assert_eq!(
        verdict(&argv(&[program]), POLL_TIMEOUT).await,
        ExecutorHealth::unhealthy(format!(
            "check command {program}: not found: its interpreter (the #! line) is missing"
        ))
    );
}

#[tokio::test]
async fn a_program_that_cannot_be_run_is_unhealthy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-executable");
    std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let program = path.to_str().unwrap();
    let health = verdict(&argv(&[program]), POLL_TIMEOUT).await;
    // root may execute nothing without an x bit either: the kernel refuses.
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!("check command {program}: permission denied"))
    );
}

/// A probe that hangs is killed at the check's own deadline (900 ms, inside the
/// poll timeout: the verdict names it), with the process it started; it is
/// reaped before the check answers.
#[tokio::test]
async fn a_command_that_hangs_is_killed_with_its_children_and_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let marker = marker();
    // `sh` forks `sleep` (a command follows it, so it is not exec'd): two processes.
    let path = script(dir.path(), "hangs", &format!("sleep {marker}\necho never"));
    let program = path.to_str().unwrap();
    let poll_timeout = Duration::from_millis(1000);

    for _ in 0..3 {
        let health = verdict(&argv(&[program]), poll_timeout).await;
        assert_eq!(
            health,
            ExecutorHealth::unhealthy(format!("check command {program} timed out after 900ms"))
        );
        // The script was reaped before the answer: no zombie of ours, at once.
        assert_eq!(our_zombies(), Vec::<u32>::new());
        // Its `sleep` was killed too (its new parent reaps it).
        assert_nothing_left(&marker).await;
    }
}

/// While a probe hangs, it is one process; the check's own deadline ends it.
#[tokio::test]
async fn a_hanging_probe_is_one_process_until_its_deadline() {
    let marker = marker();
    let check = CommandCheck::new(&argv(&["sleep", &marker]), Duration::from_millis(1000)).unwrap();
    let running = tokio::spawn(async move { check.get_health().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(alive_with(&marker).len(), 1);
    assert!(matches!(
        running.await.unwrap(),
        ExecutorHealth::Unhealthy { reason } if reason.ends_with("timed out after 900ms")
    ));
    assert_nothing_left(&marker).await;
}

/// The check's future dropped mid-run (the runtime shutting down, say): the
/// probe and its children are killed, and tokio's orphan reaper reaps the probe.
#[tokio::test]
async fn a_check_dropped_mid_run_leaves_no_process_and_no_zombie() {
    let dir = tempfile::tempdir().unwrap();
    let marker = marker();
    let path = script(dir.path(), "hangs", &format!("sleep {marker}\necho never"));
    for program in [argv(&["sleep", &marker]), argv(&[path.to_str().unwrap()])] {
        let check = CommandCheck::new(&program, Duration::from_secs(60)).unwrap();
        let dropped = tokio::time::timeout(Duration::from_millis(300), check.get_health()).await;
        assert!(dropped.is_err(), "the probe was still running");
        assert_nothing_left(&marker).await;
    }
}

/// A probe that exits but leaves a process holding its output answers with
/// its own verdict at its exit (not the deadline's `timed out`, which waiting
/// for the process left, a `sleep` of hours, would give), and what it left is
/// killed.
#[tokio::test]
async fn a_probe_that_leaves_a_process_behind_answers_at_once() {
    let marker = marker();
    let health = run_script(&format!("sleep {marker} &\necho 'left one behind'\nexit 1")).await;
    assert_eq!(health, ExecutorHealth::unhealthy("left one behind"));
    assert_nothing_left(&marker).await;
}
