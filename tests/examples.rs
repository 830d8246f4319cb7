//! Both embedding examples build (cargo builds examples with the tests) and run.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// An example's binary, built beside this test's.
fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let path = deps.parent().unwrap().join("examples").join(name);
    assert!(
        path.exists(),
        "{} was not built: cargo builds examples when it builds the whole package's tests (or run `cargo build --examples`)",
        path.display()
    );
    path
}

#[test]
fn the_tokio_example_keeps_its_main_loop_and_reports_the_hung_executors() {
    let out = Command::new(example("tokio_main_loop"))
        .env("EXAMPLE_RUN_FOR", "3s")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("main loop lateness: p99 "), "{stdout}");
    assert!(
        stdout.contains("HungExecutor: unhealthy (no reply within 250ms)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("BlockedExecutor: unhealthy (no reply within 250ms)"),
        "{stdout}"
    );
    assert!(stdout.contains("CeleryExecutor: healthy"), "{stdout}");
    // Each hung check holds one task or thread: one poll sent, the rest skipped.
    assert!(stdout.contains("HungExecutor: 1 polls,"), "{stdout}");
    assert!(stdout.contains("BlockedExecutor: 1 polls,"), "{stdout}");
}

#[test]
fn the_actix_web_example_serves_the_report() {
    let mut child = Command::new(example("actix_web_app"))
        .env("EXAMPLE_BIND", "127.0.0.1:0")
        .env("EXAMPLE_RUN_FOR", "4s")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let address = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();

    let mut body = String::new();
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    write!(stream, "GET /health HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    stream.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.0 200 OK"), "{body}");
    let json = body.split("\r\n\r\n").nth(1).unwrap();
    let report: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(report["metadatabase"]["status"], "healthy");
    assert_eq!(
        report["executor"]["instances"][0]["executor"],
        "LocalExecutor"
    );

    assert!(child.wait().unwrap().success());
}

#[test]
fn a_check_that_panics_every_time_for_a_minute_backs_off_and_the_process_stays_up() {
    let out = Command::new(example("panicking_check"))
        .env("EXAMPLE_RUN_FOR", "60s")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("still up after 60s"), "{stdout}");
    assert!(
        stdout.contains("verdict: unhealthy: health check panicked"),
        "the verdict names the panic: {stdout}"
    );
    let counts: Vec<u64> = stdout
        .lines()
        .find(|l| l.starts_with("BuggyExecutor: "))
        .unwrap()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let (polls, panics, restarts) = (counts[0], counts[1], counts[2]);
    // Polled about once a second, but the check ran only until the limit (6
    // panics, restarts 1-6 in the first seconds), then once after a 30 s back-off.
    assert!(polls >= 30, "polled all along: {stdout}");
    assert_eq!(
        panics, restarts,
        "every panic restarted the actor: {stdout}"
    );
    assert!(
        (6..=8).contains(&panics),
        "backed off after the limit, not once a second: {stdout}"
    );
}
