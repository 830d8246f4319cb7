//! `check_command` and `check_url` end to end: the real `overseer serve`
//! supervising executors through probe scripts and an HTTP server of the test's
//! own, configured in `overseer.toml` and named by Airflow's executor list. The
//! verdicts reach the health report; a probe that hangs is killed each poll and
//! leaves neither a second process nor a zombie behind; no secret is shown.

#![cfg(target_os = "linux")]

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Serving, health, health_until, overseer, workdir};

/// Fast polls: the hanging probe is killed at 90 % of `poll_timeout`, 450 ms.
const QUICK: &str = "[supervisor]\npoll_interval = \"1s\"\npoll_timeout = \"500ms\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n";

/// Writes an executable `#!/bin/sh` script and returns its path.
fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_owned()
}

/// An HTTP server on loopback: `GET /health...` answers 200, anything else 503.
fn http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            let _ = reader.read_line(&mut request_line);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
            }
            let status = if request_line.starts_with("GET /health") {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    port
}

/// The instance of the report's `executor` entry for executor `name`.
fn instance<'a>(json: &'a Value, name: &str) -> Option<&'a Value> {
    json["executor"]["instances"]
        .as_array()?
        .iter()
        .find(|i| i["executor"] == name)
}

/// `(state, ppid, cmdline)` of every process in `/proc`.
fn processes() -> Vec<(u32, char, u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = fields.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
            .unwrap_or_default();
        found.push((pid, state, ppid, cmdline));
    }
    found
}

/// Running processes whose command line holds `marker`.
fn alive_with(marker: &str) -> usize {
    processes()
        .iter()
        .filter(|(_, state, _, cmdline)| !matches!(state, 'Z' | 'X') && cmdline.contains(marker))
        .count()
}

/// The zombie children of `pid`: processes that ended and were not reaped yet.
fn zombies_of(pid: u32) -> Vec<u32> {
    processes()
        .iter()
        .filter(|(_, state, ppid, _)| *state == 'Z' && *ppid == pid)
        .map(|(child, ..)| *child)
        .collect()
}

#[test]
fn command_and_http_checks_reach_the_report_and_leave_nothing_behind() {
    let dir = workdir();
    let port = http_server();
    let marker = format!("9000.{}", std::process::id());
    let stuck = script(dir.path(), "stuck", "echo 'queue default is stuck'\nexit 1");
    let fine = script(dir.path(), "fine", "exit 0");
    let hangs = script(dir.path(), "hangs", &format!("sleep {marker}\necho never"));
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            r#"{QUICK}
[[executors]]
name = "KubernetesExecutor"
check_url = "http://ops:hunter2@127.0.0.1:{port}/health?token=s3cret"

[[executors]]
name = "team:my.company.DownExecutor"
check_url = "http://127.0.0.1:{port}/down?token=s3cret"

[[executors]]
name = "my.company.StuckExecutor"
check_command = ["{stuck}", "--token", "s3cret"]

[[executors]]
name = "LocalExecutor"
check_command = ["{fine}"]

[[executors]]
name = "my.company.HangingExecutor"
check_command = ["{hangs}"]
"#
        ),
    )
    .unwrap();
    let mut serving = Serving::start(overseer(dir.path()).env(
        "AIRFLOW__CORE__EXECUTOR",
        "LocalExecutor,KubernetesExecutor,team:my.company.DownExecutor,my.company.StuckExecutor,my.company.HangingExecutor",
    ));

    let json = health_until(&serving, "every check answered", |json| {
        [
            "KubernetesExecutor",
            "team:my.company.DownExecutor",
            "my.company.StuckExecutor",
            "LocalExecutor",
            "my.company.HangingExecutor",
        ]
        .iter()
        .all(|name| instance(json, name).is_some_and(|i| i["health"] != "unknown"))
    });
    let verdict = |name: &str| {
        let i = instance(&json, name).unwrap();
        (
            i["instance"].as_str().unwrap_or_default().to_owned(),
            i["health"].as_str().unwrap_or_default().to_owned(),
            i["reason"].as_str().unwrap_or_default().to_owned(),
        )
    };
    let url = format!("http://127.0.0.1:{port}");
    assert_eq!(
        verdict("KubernetesExecutor"),
        (
            format!("http://ops:***@127.0.0.1:{port}/health"),
            "healthy".into(),
            String::new()
        )
    );
    assert_eq!(
        verdict("team:my.company.DownExecutor"),
        (
            format!("{url}/down"),
            "unhealthy".into(),
            format!("GET {url}/down?token=*** answered 503 Service Unavailable")
        )
    );
    assert_eq!(
        verdict("my.company.StuckExecutor"),
        (
            stuck.clone(),
            "unhealthy".into(),
            "queue default is stuck".into()
        )
    );
    assert_eq!(
        verdict("LocalExecutor"),
        (fine.clone(), "healthy".into(), String::new())
    );
    assert_eq!(
        verdict("my.company.HangingExecutor"),
        (
            hangs.clone(),
            "unhealthy".into(),
            format!("check command {hangs} timed out after 450ms")
        )
    );

    // Over several polls of the hanging probe: never more than its one `sleep`,
    // never a zombie of Overseer's.
    // A probe is a zombie for the moment between its end and its reaping (longer
    // on a loaded machine): what must not happen is one that stays.
    let pid = serving.child.id();
    let mut most = 0;
    let mut zombies: std::collections::HashMap<u32, Instant> = Default::default();
    let mut longest = Duration::ZERO;
    let until = Instant::now() + Duration::from_secs(3);
    let settle = until + Duration::from_secs(2);
    loop {
        let now = Instant::now();
        if now < until {
            most = most.max(alive_with(&marker));
        }
        let current = zombies_of(pid);
        zombies.retain(|z, _| current.contains(z));
        for z in current {
            longest = longest.max(now - *zombies.entry(z).or_insert(now));
        }
        if now >= settle || (now >= until && zombies.is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(most <= 1, "{most} hanging probes at once");
    assert!(
        zombies.is_empty(),
        "zombie children of overseer never reaped: {zombies:?}"
    );
    println!("the longest a probe stayed a zombie before it was reaped: {longest:?}");

    let body = serde_json::to_string(&health(&serving)).unwrap();
    serving.wait_for("overseer is running");
    let (code, lines) = serving.terminate();
    assert_eq!(code, Some(0), "{lines:?}");
    for text in lines.iter().chain([&body]) {
        assert!(
            !text.contains("hunter2") && !text.contains("s3cret"),
            "a secret is shown: {text}"
        );
    }
    // Stopped, Overseer left no probe running.
    let until = Instant::now() + Duration::from_secs(5);
    while alive_with(&marker) > 0 {
        assert!(Instant::now() < until, "a probe outlived overseer");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A probe that starts a process in a session of its own (`setsid`, which
/// leaves the probe's process group) and exits: Overseer adopts that orphan
/// and ends it after the probe, so they never pile up one per poll, and none
/// outlives Overseer.
#[test]
fn what_a_probe_leaves_in_a_session_of_its_own_is_ended_with_it() {
    let dir = workdir();
    // Unique to this test process, and short: were the test to fail, what it
    // left ends by itself.
    let marker = format!("30.{}", std::process::id());
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            r#"[supervisor]
poll_interval = "300ms"
poll_timeout = "250ms"
heartbeat_interval = "200ms"
refresh_interval = "100ms"

[[executors]]
name = "my.company.DaemonisingExecutor"
check_command = ["sh", "-c", "setsid sleep {marker} >/dev/null 2>&1 </dev/null & echo ok"]
"#
        ),
    )
    .unwrap();
    let serving = Serving::start(&mut overseer(dir.path()));
    health_until(&serving, "the probe answered", |json| {
        instance(json, "my.company.DaemonisingExecutor").is_some_and(|i| i["health"] == "healthy")
    });

    // Ten polls: one orphan per poll without the adoption. With it, at most the
    // one the last probe left, for the moment before its sweep; no zombie stays.
    let pid = serving.child.id();
    let mut most = 0;
    let mut most_zombies = 0;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        most = most.max(alive_with(&marker));
        most_zombies = most_zombies.max(zombies_of(pid).len());
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(
        most <= 2,
        "{most} processes probes left behind were running at once"
    );
    assert!(
        most_zombies <= 2,
        "{most_zombies} zombies of overseer at once"
    );
    let json = health(&serving);
    assert_eq!(
        instance(&json, "my.company.DaemonisingExecutor").unwrap()["health"],
        "healthy",
        "{json}"
    );

    let (code, lines) = serving.terminate();
    assert_eq!(code, Some(0), "{lines:?}");
    let until = Instant::now() + Duration::from_secs(5);
    while alive_with(&marker) > 0 {
        assert!(
            Instant::now() < until,
            "a process a probe left outlived overseer"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}
