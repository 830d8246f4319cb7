//! What Airflow does to a value before it uses it: `expand_env_var` (`$VAR`,
//! `${VAR}` and a leading `~`, repeated until nothing changes), and `_CMD`
//! commands, split as `shlex.split` splits them and run without a shell.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a `_CMD` command may run before it is killed: Airflow waits for
/// ever; Overseer's start does not.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a `_CMD` command may print: a URL or a password is far shorter.
pub const COMMAND_MAX_OUTPUT: usize = 64 * 1024;
/// Expansions after which a value that still changes is refused (Python
/// would loop for ever on `A='$A$A'`).
const MAX_EXPANSIONS: usize = 16;
/// The longest an expanded value may grow.
const MAX_EXPANDED: usize = 64 * 1024;

/// `airflow.configuration.expand_env_var`: `os.path.expandvars` then
/// `os.path.expanduser`, again until the value stops changing. `env` is the
/// environment Airflow would see.
pub fn expand_env_var(value: &str, env: &BTreeMap<String, String>) -> Result<String, String> {
    let mut value = value.to_owned();
    for _ in 0..MAX_EXPANSIONS {
        let expanded = expand_user(&expand_vars(&value, env), env);
        if expanded.len() > MAX_EXPANDED {
            return Err(format!(
                "its $VARIABLE references expand past {} KiB",
                MAX_EXPANDED / 1024
            ));
        }
        if expanded == value {
            return Ok(value);
        }
        value = expanded;
    }
    Err(format!(
        "its $VARIABLE references still change after {MAX_EXPANSIONS} expansions (a variable refers to itself)"
    ))
}

/// POSIX `os.path.expandvars`: `$name` (ASCII letters, digits, `_`) or
/// `${name}`; a name not in the environment is left as written.
fn expand_vars(value: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, length) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        match env.get(name).filter(|_| length > 0 && !name.is_empty()) {
            Some(found) => {
                out.push_str(found);
                rest = &after[length..];
            }
            None => {
                // Not a reference, or an unknown one: kept, and the scan goes on after it.
                let keep = if length == 0 { 0 } else { length };
                out.push('$');
                out.push_str(&after[..keep]);
                rest = &after[keep..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// POSIX `os.path.expanduser`: a leading `~` is `$HOME`, `~name` that user's
/// home (from `/etc/passwd`); anything else, or an unknown user, is left as is.
fn expand_user(value: &str, env: &BTreeMap<String, String>) -> String {
    let Some(rest) = value.strip_prefix('~') else {
        return value.to_owned();
    };
    let end = rest.find('/').unwrap_or(rest.len());
    let (user, tail) = rest.split_at(end);
    let home = if user.is_empty() {
        env.get("HOME").cloned().or_else(|| passwd_home(None))
    } else {
        passwd_home(Some(user))
    };
    match home {
        Some(home) => {
            let joined = format!("{}{tail}", home.trim_end_matches('/'));
            if joined.is_empty() {
                "/".into()
            } else {
                joined
            }
        }
        None => value.to_owned(),
    }
}

/// A user's home folder from `/etc/passwd`: `name`'s, or this process's
/// user's (by its uid) when `None`.
fn passwd_home(name: Option<&str>) -> Option<String> {
    let uid = match name {
        Some(_) => None,
        None => Some(
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").ok()?).to_string(),
        ),
    };
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let matches = match (name, &uid) {
            (Some(name), _) => fields.first() == Some(&name),
            (None, Some(uid)) => fields.get(2) == Some(&uid.as_str()),
            (None, None) => false,
        };
        matches
            .then(|| fields.get(5).map(|h| (*h).to_owned()))
            .flatten()
    })
}

/// `shlex.split` in POSIX mode: whitespace separates words, `'...'` is
/// literal, `"..."` lets `\` escape `"` and `\`, and outside quotes `\`
/// escapes any character. No comments, no expansion.
pub fn shlex_split(command: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if let Some(done) = word.take() {
                    words.push(done);
                }
            }
            '\'' => {
                let word = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("it has no closing quotation".into()),
                    }
                }
            }
            '"' => {
                let word = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("it has no closing quotation".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("it has no closing quotation".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => word.get_or_insert_with(String::new).push(c),
                None => return Err("it ends in an escape with no character after it".into()),
            },
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// Runs a `_CMD` command as Airflow's `run_command` does (split by
/// [`shlex_split`], no shell) and returns what it printed, as printed. Bounded:
/// killed, with its process group, after [`COMMAND_TIMEOUT`] or past
/// [`COMMAND_MAX_OUTPUT`]. What it leaves in a session of its own (`setsid`)
/// is ended once it has run, as a probe's is, where this process adopts
/// orphans (the `overseer` binary does: [`overseer_checks::orphans`]). An
/// error says what went wrong and never what the command printed: that may be
/// the secret.
pub fn run_command(command: &str, env: &BTreeMap<String, String>) -> Result<String, String> {
    let ran = run_command_within(command, env, COMMAND_TIMEOUT);
    overseer_checks::orphans::sweep();
    ran
}

fn run_command_within(
    command: &str,
    env: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<String, String> {
    use std::os::unix::process::CommandExt;

    let argv = shlex_split(command)?;
    let Some((program, args)) = argv.split_first() else {
        return Err("the command is empty".into());
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = overseer_checks::orphans::spawning(|| command.spawn(), |c| Some(c.id()))
        .map_err(|e| format!("cannot run {program:?}: {e}"))?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let (sender, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let read = (&mut stdout)
            .take(COMMAND_MAX_OUTPUT as u64 + 1)
            .read_to_end(&mut out);
        let _ = sender.send(read.map(|_| out));
    });
    let kill = |child: &mut std::process::Child| {
        // The whole group: what the command started goes with it.
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: kill(2) with a negative pid signals that process group only.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = child.kill();
        let _ = child.wait();
    };
    let deadline = Instant::now() + timeout;
    let too_long = format!(
        "{program:?} did not finish within {}",
        humantime::format_duration(timeout)
    );
    // Whether the program itself has exited: its output may stay open after
    // it, held by a process it started.
    let mut exited = false;
    let printed = loop {
        match output.recv_timeout(Duration::from_millis(10)) {
            Ok(Ok(printed)) => break printed,
            Ok(Err(_)) => {
                kill(&mut child);
                return Err(format!("cannot read what {program:?} printed"));
            }
            Err(_) if Instant::now() >= deadline => {
                kill(&mut child);
                return Err(if exited {
                    format!(
                        "{program:?} exited, but a process it started kept its output open for {}",
                        humantime::format_duration(timeout)
                    )
                } else {
                    too_long
                });
            }
            Err(_) => exited = exited || matches!(child.try_wait(), Ok(Some(_))),
        }
    };
    if printed.len() > COMMAND_MAX_OUTPUT {
        kill(&mut child);
        return Err(format!(
            "{program:?} printed more than {} KiB",
            COMMAND_MAX_OUTPUT / 1024
        ));
    }
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                kill(&mut child);
                return Err(too_long);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("cannot wait for {program:?}: {e}")),
        }
    };
    if !status.success() {
        let how = status.code().map_or_else(
            || "was killed by a signal".to_owned(),
            |c| format!("exited with {c}"),
        );
        return Err(format!("{program:?} {how}"));
    }
    // Python decodes with errors="ignore": bytes that are not UTF-8 are dropped.
    Ok(String::from_utf8_lossy(&printed).replace('\u{FFFD}', ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn variables_and_home_expand_as_pythons_os_path_does() {
        let env = env(&[("HOME", "/home/af/"), ("DB", "airflow"), ("NEST", "$DB-x")]);
        for (value, expanded) in [
            ("postgresql://db/$DB", "postgresql://db/airflow"),
            ("postgresql://db/${DB}x", "postgresql://db/airflowx"),
            ("$NEST", "airflow-x"),
            ("pa$$word", "pa$$word"),
            ("p$UNKNOWN@x", "p$UNKNOWN@x"),
            ("cost ${} $", "cost ${} $"),
            ("${unterminated", "${unterminated"),
            ("~/dags", "/home/af/dags"),
            ("~", "/home/af"),
            ("a~/b", "a~/b"),
            ("~nosuchuser-overseer/x", "~nosuchuser-overseer/x"),
            ("~root/x", "/root/x"),
        ] {
            assert_eq!(expand_env_var(value, &env).unwrap(), expanded, "{value}");
        }
        let looping = super::tests::env(&[("A", "$A$A")]);
        assert!(expand_env_var("$A", &looping).is_err());
    }

    #[test]
    fn commands_split_as_shlex_does() {
        for (command, words) in [
            (
                "cat /run/secrets/broker",
                vec!["cat", "/run/secrets/broker"],
            ),
            (
                "  echo   'a b'  \"c \\\" d\"",
                vec!["echo", "a b", "c \" d"],
            ),
            ("echo a\\ b \"x\\y\"", vec!["echo", "a b", "x\\y"]),
            ("echo ''", vec!["echo", ""]),
            (
                "echo # not a comment",
                vec!["echo", "#", "not", "a", "comment"],
            ),
        ] {
            assert_eq!(shlex_split(command).unwrap(), words, "{command}");
        }
        assert_eq!(
            shlex_split("echo 'open").unwrap_err(),
            "it has no closing quotation"
        );
        assert!(shlex_split("echo \\").is_err());
    }

    #[test]
    fn commands_run_bounded_and_their_failures_show_no_output() {
        let env = env(&[("PATH", "/usr/bin:/bin")]);
        assert_eq!(
            run_command("printf 'redis://:s3cret@h/0\\n'", &env).unwrap(),
            "redis://:s3cret@h/0\n"
        );
        let failed = run_command("sh -c 'echo s3cret; exit 3'", &env).unwrap_err();
        assert_eq!(failed, "\"sh\" exited with 3");
        let missing = run_command("/nonexistent/overseer-secret", &env).unwrap_err();
        assert!(
            missing.starts_with("cannot run \"/nonexistent/overseer-secret\""),
            "{missing}"
        );
        let flood = run_command("head -c 1000000 /dev/zero", &env).unwrap_err();
        assert_eq!(flood, "\"head\" printed more than 64 KiB");
        assert_eq!(run_command("", &env).unwrap_err(), "the command is empty");
        let hung = run_command_within(
            "sh -c 'sleep 30 & sleep 30'",
            &env,
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert_eq!(hung, "\"sh\" did not finish within 300ms");
        let held = run_command_within(
            "sh -c 'sleep 30 & exit 0'",
            &env,
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert_eq!(
            held,
            "\"sh\" exited, but a process it started kept its output open for 300ms"
        );
    }
}
