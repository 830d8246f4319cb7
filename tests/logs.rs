//! Logs an operator can read (issue 10, item 6), from the real binary at the
//! default log level: a broker that refuses the login is one `WARN` line, not
//! three `ERROR` lines per poll; a broker that dies and returns is one `WARN` and
//! one `INFO`; malformed HTTP requests, the clients' mistakes, are `DEBUG`. No
//! password shows in any of it.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use overseer_testkit::throwaway::ThrowawayRedis;
use overseer_testkit::wait;
use serde_json::Value;
use support::{Serving, celery, get, health_until, overseer, workdir};

/// The password in every broker URL here; it must never reach the log.
const PASSWORD: &str = "wr0ng-s3cret-pw";

/// `overseer` at the default log level: none of `RUST_LOG` or `OVERSEER_LOG`.
fn at_default_level(dir: &std::path::Path) -> Command {
    let mut command = overseer(dir);
    command.env_remove("RUST_LOG").env_remove("OVERSEER_LOG");
    command
}

/// The level of a plain log line (`2026-11-30T20:29:39.804387Z  WARN target: ...`).
fn level(line: &str) -> &str {
    line.split_whitespace().nth(1).unwrap_or_default()
}

/// The lines at `wanted` level.
fn at<'a>(log: &'a [String], wanted: &str) -> Vec<&'a String> {
    log.iter().filter(|l| level(l) == wanted).collect()
}

/// The value of the first series of `/metrics` that starts with `series`.
fn metric(serving: &Serving, series: &str) -> f64 {
    let (_, body) = get(&serving.url("/metrics"));
    body.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Waits until `executor` has been polled `polls` times (from its start).
fn wait_for_polls(serving: &Serving, executor: &str, polls: f64) {
    let series = format!("overseer_polls_total{{executor=\"{executor}\"");
    wait::until(&format!("{executor} polled {polls} times"), || {
        let now = metric(serving, &series);
        if now >= polls { Ok(()) } else { Err(now) }
    });
}

/// No line carries the password; no line at all is `ERROR`.
fn assert_no_password_and_no_error(log: &[String]) {
    let leaks: Vec<_> = log.iter().filter(|l| l.contains(PASSWORD)).collect();
    assert!(leaks.is_empty(), "the password is in the log: {leaks:#?}");
    assert!(at(log, "ERROR").is_empty(), "ERROR lines: {log:#?}");
}

#[tokio::test]
async fn a_rabbitmq_broker_refusing_the_login_is_one_warn_line_per_executor_and_no_error() {
    if TcpStream::connect("127.0.0.1:5672").is_err() {
        overseer_testkit::unavailable::<()>("RabbitMQ on 127.0.0.1:5672", "connection refused");
        return;
    }
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    // A bad password, and a good one on a virtual host that does not exist.
    let executors = format!(
        r#"[{{name = "CeleryExecutor", broker_url = "amqp://guest:{PASSWORD}@127.0.0.1:5672//"}},
            {{name = "vhost:CeleryExecutor", broker_url = "amqp://guest:guest@127.0.0.1:5672/no-such-vhost"}}]"#
    );
    let serving = Serving::start(
        at_default_level(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("OVERSEER_SUPERVISOR__POLL_INTERVAL", "1s")
            .env("OVERSEER_SUPERVISOR__POLL_TIMEOUT", "500ms")
            .env("OVERSEER_EXECUTORS", executors),
    );
    wait_for_polls(&serving, "CeleryExecutor", 6.0);
    wait_for_polls(&serving, "vhost:CeleryExecutor", 6.0);
    let (code, log) = serving.terminate();
    assert_eq!(code, Some(0));

    assert_no_password_and_no_error(&log);
    let warnings = at(&log, "WARN");
    assert_eq!(warnings.len(), 2, "one WARN per executor: {log:#?}");
    let password = warnings
        .iter()
        .find(|l| l.contains("executor=CeleryExecutor @ amqp://127.0.0.1:5672//"))
        .unwrap_or_else(|| panic!("the bad password's line: {warnings:#?}"));
    assert!(password.contains("executor turned unhealthy"), "{password}");
    assert!(
        password.contains("refused the user name or password"),
        "{password}"
    );
    let vhost = warnings
        .iter()
        .find(|l| l.contains("executor=vhost:CeleryExecutor @ amqp://"))
        .unwrap_or_else(|| panic!("the bad virtual host's line: {warnings:#?}"));
    assert!(vhost.contains("no-such-vhost"), "{vhost}");
    let lapin: Vec<_> = log.iter().filter(|l| l.contains("lapin")).collect();
    assert!(lapin.is_empty(), "the AMQP client's own lines: {lapin:#?}");
}

#[tokio::test]
async fn a_redis_broker_that_dies_and_returns_is_one_warn_and_one_info_line() {
    let Some(mut broker) = ThrowawayRedis::start(&["--requirepass", PASSWORD]) else {
        return;
    };
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    let serving = Serving::start(
        at_default_level(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("OVERSEER_SUPERVISOR__POLL_INTERVAL", "1s")
            .env("OVERSEER_SUPERVISOR__POLL_TIMEOUT", "500ms")
            .env("OVERSEER_SUPERVISOR__REFRESH_INTERVAL", "200ms")
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env("AIRFLOW__CELERY__BROKER_URL", broker.url(Some(PASSWORD), 0)),
    );
    let health = |j: &Value| celery(j).map(|c| c["health"].clone());
    health_until(&serving, "healthy first", |j| {
        health(j).is_some_and(|h| h == "healthy")
    });

    broker.kill();
    health_until(&serving, "unhealthy while the broker is dead", |j| {
        health(j).is_some_and(|h| h == "unhealthy")
    });
    // Several more polls of a dead broker: the same verdict, no more lines.
    let polled = metric(&serving, "overseer_polls_total{executor=\"CeleryExecutor\"");
    wait_for_polls(&serving, "CeleryExecutor", polled + 4.0);

    broker.resume().expect("the broker restarts on its port");
    health_until(&serving, "healthy again", |j| {
        health(j).is_some_and(|h| h == "healthy")
    });
    let (code, log) = serving.terminate();
    assert_eq!(code, Some(0));

    assert_no_password_and_no_error(&log);
    let warnings = at(&log, "WARN");
    assert_eq!(warnings.len(), 1, "one WARN for the outage: {log:#?}");
    assert!(
        warnings[0].contains("executor turned unhealthy")
            && warnings[0].contains(&format!(
                "executor=CeleryExecutor @ redis://127.0.0.1:{}/0",
                broker.port
            ))
            && warnings[0].contains("reason="),
        "{}",
        warnings[0]
    );
    let info = at(&log, "INFO");
    let again: Vec<_> = info
        .iter()
        .filter(|l| l.contains("executor is healthy again"))
        .collect();
    assert_eq!(again.len(), 1, "one INFO for the return: {log:#?}");
    let verdicts = info
        .iter()
        .filter(|l| l.contains("executor is healthy"))
        .count();
    assert_eq!(verdicts, 2, "the first verdict, then the return: {log:#?}");
}

/// A fault whose cause changes while the executor stays unhealthy: one `WARN`
/// when it turns unhealthy, one `INFO` naming the new cause and the old, and
/// nothing more while each cause holds.
#[tokio::test]
async fn a_new_cause_while_unhealthy_is_one_info_line_naming_both() {
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    // The probe says what the file says, exit 1: unhealthy for that reason.
    let cause = dir.path().join("cause");
    std::fs::write(&cause, "disk full\n").unwrap();
    let probe = dir.path().join("probe.sh");
    std::fs::write(
        &probe,
        format!("#!/bin/sh\ncat '{}'\nexit 1\n", cause.display()),
    )
    .unwrap();
    std::fs::set_permissions(&probe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            "[supervisor]\npoll_interval = \"1s\"\nrefresh_interval = \"200ms\"\n\n\
             [[executors]]\nname = \"LocalExecutor\"\ncheck_command = [\"{}\"]\n",
            probe.display()
        ),
    )
    .unwrap();
    let serving =
        Serving::start(at_default_level(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    let reason = |j: &Value| {
        j["executor"]["instances"]
            .as_array()
            .and_then(|all| all.iter().find(|i| i["executor"] == "LocalExecutor"))
            .map(|i| i["reason"].clone())
    };
    health_until(&serving, "unhealthy: disk full", |j| {
        reason(j).is_some_and(|r| r == "disk full")
    });
    let polled = metric(&serving, "overseer_polls_total{executor=\"LocalExecutor\"");
    wait_for_polls(&serving, "LocalExecutor", polled + 2.0);
    std::fs::write(&cause, "disk gone\n").unwrap();
    health_until(&serving, "unhealthy: disk gone", |j| {
        reason(j).is_some_and(|r| r == "disk gone")
    });
    let polled = metric(&serving, "overseer_polls_total{executor=\"LocalExecutor\"");
    wait_for_polls(&serving, "LocalExecutor", polled + 2.0);
    let (code, log) = serving.terminate();
    assert_eq!(code, Some(0));

    let warnings = at(&log, "WARN");
    assert_eq!(
        warnings.len(),
        1,
        "one WARN, when it turned unhealthy: {log:#?}"
    );
    assert!(warnings[0].contains("reason=disk full"), "{}", warnings[0]);
    let changed: Vec<_> = at(&log, "INFO")
        .into_iter()
        .filter(|l| l.contains("executor still unhealthy, for another reason"))
        .collect();
    assert_eq!(changed.len(), 1, "one INFO for the new cause: {log:#?}");
    assert!(
        changed[0].contains("reason=disk gone") && changed[0].contains("previous=disk full"),
        "{}",
        changed[0]
    );
}

/// Requests no HTTP server should accept, each answered with a 4xx and the
/// connection closed.
const MALFORMED: &[&[u8]] = &[
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
    b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
    b"GET / HTTP/1.1\r\nX\x01: y\r\n\r\n",
    b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b" / HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\n: novalue\r\n\r\n",
    b"GET /\x7f HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\n\tfolded\r\n\r\n",
    b"GET / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked, identity\r\n\r\n",
    b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
];

/// Sends 20 malformed requests and checks each was refused.
fn send_malformed(address: &str) {
    for request in MALFORMED.iter().cycle().take(20) {
        let mut stream = TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request).unwrap();
        let mut answer = vec![0; 256];
        let n = stream.read(&mut answer).unwrap_or(0);
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(
            answer.starts_with("HTTP/1.1 4"),
            "{:?} answered {answer:?}",
            String::from_utf8_lossy(request)
        );
    }
}

#[tokio::test]
async fn malformed_http_requests_are_debug_lines_not_errors() {
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    let serve = |command: &mut Command| {
        Serving::start(
            command
                .env("OVERSEER_DATABASE__URL", &db.url)
                .env("AIRFLOW__CORE__EXECUTOR", "LocalExecutor"),
        )
    };

    // At the default level: not a line.
    let serving = serve(&mut at_default_level(dir.path()));
    send_malformed(&serving.address);
    let (code, log) = serving.terminate();
    assert_eq!(code, Some(0));
    let loud: Vec<_> = log
        .iter()
        .filter(|l| matches!(level(l), "WARN" | "ERROR"))
        .collect();
    assert!(loud.is_empty(), "client mistakes logged loudly: {loud:#?}");
    assert!(
        !log.iter().any(|l| l.contains("actix_http")),
        "client mistakes at the default level: {log:#?}"
    );

    // Asked for, they are there, one DEBUG line each.
    let serving = serve(
        at_default_level(dir.path()).env("OVERSEER_LOG", "info,actix_http::h1::dispatcher=debug"),
    );
    send_malformed(&serving.address);
    let (_, log) = serving.terminate();
    assert!(at(&log, "ERROR").is_empty(), "{log:#?}");
    let mistakes = at(&log, "DEBUG")
        .into_iter()
        .filter(|l| l.contains("actix_http::h1::dispatcher: stream error: request parse error"))
        .count();
    assert_eq!(mistakes, 20, "{log:#?}");
}
