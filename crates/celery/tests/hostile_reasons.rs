//! Reasons from what the outside world says, at its worst: a failover list of
//! many brokers all down, and a "broker" whose errors are kilobytes of text with
//! terminal escapes. Whatever they say, the verdict's reason is one line of at
//! most 240 characters, and a long list says how many it left out.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpListener;

use overseer_core::ExecutorHealth;
use overseer_core::reason::MAX_CHARS;

async fn unhealthy_reason(url: &str) -> String {
    let check = support::check(url, &["default"]);
    let (health, probe) = support::poll_within(&check, support::POLL_TIMEOUT).await;
    let ExecutorHealth::Unhealthy { reason } = health else {
        panic!("no broker answers: {health:?}");
    };
    assert_eq!(
        probe.reason.as_deref(),
        Some(reason.as_str()),
        "the probe says the same"
    );
    reason.into_string()
}

fn assert_one_bounded_line(reason: &str) {
    assert!(
        !reason.contains(|c: char| c.is_control()),
        "one line: {reason:?}"
    );
    assert!(
        reason.chars().count() <= MAX_CHARS,
        "{} characters: {reason}",
        reason.chars().count()
    );
}

#[tokio::test]
async fn a_failover_list_of_many_brokers_down_is_named_in_part_and_counted() {
    let ports: Vec<u16> = (0..12).map(|_| support::closed_port()).collect();
    let url = ports
        .iter()
        .map(|port| format!("redis://127.0.0.1:{port}/0"))
        .collect::<Vec<_>>()
        .join(";");
    let reason = unhealthy_reason(&url).await;
    assert_one_bounded_line(&reason);
    assert!(
        reason.starts_with(&format!(
            "broker redis://127.0.0.1:{}/0 refused the connection; ",
            ports[0]
        )),
        "{reason}"
    );
    assert!(reason.ends_with("; and 10 more"), "{reason}");
}

/// A loopback "Redis" that answers every command with a RESP error of `text`
/// (a client may send several commands in one write: one answer each).
fn erring_broker(text: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let answer = format!("-ERR {text}\r\n");
            std::thread::spawn(move || {
                let mut buf = [0u8; 64 * 1024];
                while let Ok(n @ 1..) = stream.read(&mut buf) {
                    let sent = &buf[..n];
                    // Each command is an array: `*<count>` at the start of a line.
                    let commands = usize::from(sent.starts_with(b"*"))
                        + sent.windows(3).filter(|w| w == b"\r\n*").count();
                    if stream
                        .write_all(answer.repeat(commands.max(1)).as_bytes())
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn a_broker_error_of_kilobytes_with_escapes_is_one_bounded_line() {
    let text = format!("\x1b[2J\x1b[31mforged\t{}", "z".repeat(20_000));
    let port = erring_broker(text);
    let reason = unhealthy_reason(&format!("redis://127.0.0.1:{port}/0")).await;
    assert_one_bounded_line(&reason);
    assert!(
        reason.starts_with(&format!("broker redis://127.0.0.1:{port}/0")),
        "{reason}"
    );
    assert!(
        reason.contains("forged zzz"),
        "the server's words, one line: {reason}"
    );
    assert!(reason.ends_with('…'), "{reason}");
}
