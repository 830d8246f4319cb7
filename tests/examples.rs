//! The examples build (cargo builds examples with the tests) and run: the two
//! embedding examples, and a check that panics at every call.

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
    // Its loop runs 3 s, and on until the report holds every verdict.
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
fn a_check_that_panics_every_time_backs_off_past_the_restart_limit_and_the_process_stays_up() {
    // The example runs until it has seen the back-off; 60 s only bounds the wait.
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
    assert!(stdout.contains("still up"), "{stdout}");
    // Five restarts allowed within 60 s: the sixth panic starts the back-off,
    // and no poll runs the check for 30 s.
    assert!(
        stdout.contains(
            "verdict: unhealthy: health check panicked 6 times within 60s; not run again for "
        ),
        "the verdict names the panics and the back-off: {stdout}"
    );
    assert!(
        stdout.contains("backed off: 10 polls ran the check 0 times"),
        "{stdout}"
    );
    let counts: Vec<u64> = stdout
        .lines()
        .find(|l| l.starts_with("BuggyExecutor: "))
        .unwrap()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let (polls, panics, restarts) = (counts[0], counts[1], counts[2]);
    assert_eq!((panics, restarts), (6, 6), "{stdout}");
    assert!(polls >= 16, "polled all along: {stdout}");
}
