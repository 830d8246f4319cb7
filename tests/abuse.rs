//! Bad and slow HTTP clients get clean errors and do not disturb the supervision:
//! while they hammer the server, polls keep going, none is skipped or times out.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::{Serving, get, overseer, workdir};

const QUICK: &str = "[supervisor]\npoll_interval = \"200ms\"\npoll_timeout = \"150ms\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n\n[[executors]]\nname = \"LocalExecutor\"\n";

/// How long the abuse lasts.
const ABUSE: Duration = Duration::from_secs(3);

/// A counter of ours from `/metrics`.
fn metric(serving: &Serving, name: &str) -> f64 {
    let (_, body) = get(&serving.url("/metrics"));
    body.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {body}"))
}

/// Sends `request` raw and returns the status line.
fn raw(address: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut answer = vec![0; 4096];
    let n = stream.read(&mut answer).unwrap_or(0);
    String::from_utf8_lossy(&answer[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn bad_and_slow_clients_get_clean_errors_and_the_polls_go_on() {
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    let polls = r#"overseer_polls_total{executor="LocalExecutor""#;
    let skipped = r#"overseer_polls_skipped_total{executor="LocalExecutor""#;
    let timeouts = r#"overseer_poll_timeouts_total{executor="LocalExecutor""#;
    while metric(&serving, polls) < 1.0 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let polls_before = metric(&serving, polls);

    // Slow clients: 48 connections that send a request one byte at a time.
    let started = Instant::now();
    let slow: Vec<_> = (0..48)
        .map(|_| {
            let address = serving.address.clone();
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(&address).unwrap();
                for byte in b"GET /api/v2/monitor/health HTTP/1.1\r\nHost: slow\r\nX-Slow: " {
                    if stream.write_all(&[*byte]).is_err() || started.elapsed() > ABUSE {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect();

    // Meanwhile, malformed requests get clean answers.
    let address = serving.address.clone();
    while started.elapsed() < ABUSE {
        assert!(
            raw(
                &address,
                b"BREW /api/v2/monitor/health HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            .starts_with("HTTP/1.1 405")
        );
        assert!(
            raw(
                &address,
                b"GET /api/v2/monitor/health?strict=%ZZ HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            .starts_with("HTTP/1.1 400")
        );
        assert!(
            raw(
                &address,
                b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            .starts_with("HTTP/1.1 404")
        );
        assert!(raw(&address, b"\x16\x03\x01 not http at all\r\n\r\n").starts_with("HTTP/1.1 400"));
        assert_eq!(get(&serving.url("/api/v2/monitor/health")).0, 200);
    }
    for client in slow {
        client.join().unwrap();
    }

    // The supervision went on undisturbed: polls kept coming, none skipped, none late.
    let polls_after = metric(&serving, polls);
    assert!(
        polls_after > polls_before + 2.0,
        "polls went on: {polls_before} -> {polls_after}"
    );
    assert_eq!(metric(&serving, skipped), 0.0);
    assert_eq!(metric(&serving, timeouts), 0.0);
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

/// Everything the server sends on one connection after `request`, until it
/// closes it (or 5 s of silence).
fn whole_answer(address: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// Every answer, the errors actix-http writes itself included, says its type
/// is not to be sniffed; the page allows no inline script but its own.
#[tokio::test]
async fn every_answer_says_nosniff_and_the_page_runs_only_its_own_script() {
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    for target in [
        "/api/v2/monitor/health",
        "/",
        "/metrics",
        "/nowhere",
        "/api/v2/version",
    ] {
        let answer = whole_answer(
            &serving.address,
            format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        let head = answer
            .split("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        assert!(
            head.contains("\r\nx-content-type-options: nosniff\r\n"),
            "{target}: {head}"
        );
        if target == "/" {
            let policy = head
                .lines()
                .find_map(|l| l.strip_prefix("content-security-policy: "))
                .unwrap_or_else(|| panic!("no policy: {head}"));
            assert!(policy.contains("script-src 'sha256-"), "{policy}");
            assert!(!policy.contains("unsafe-inline"), "{policy}");
        }
    }
    let answer = whole_answer(&serving.address, b"\x16\x03\x01 not http at all\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains("\r\nx-content-type-options: nosniff\r\n"),
        "{answer}"
    );
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

/// A request carrying both framing headers is refused, naming them, and its
/// connection closed (RFC 9112 6.3) with nothing after the refusal: a request
/// smuggled in its body, or pipelined behind it, is never answered, whichever
/// header comes first. And a head with too many fields is told so.
#[tokio::test]
async fn ambiguous_framing_is_refused_and_too_many_fields_are_named() {
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    let smuggled = "GET /api/v2/monitor/health HTTP/1.1\r\nHost: x\r\n\r\n";
    let body = format!("0\r\n\r\n{smuggled}");
    let cl = format!("Content-Length: {}\r\n", body.len());
    let te = "Transfer-Encoding: chunked\r\n";
    let refusal =
        r#"{"detail":"a request may not carry both Content-Length and Transfer-Encoding"}"#;
    for (order, headers) in [
        ("CL.TE", format!("{cl}{te}")),
        ("TE.CL", format!("{te}{cl}")),
    ] {
        for pipelined in ["", smuggled] {
            let request = format!(
                "POST /api/v2/monitor/health HTTP/1.1\r\nHost: x\r\n{headers}\r\n{body}{pipelined}"
            );
            let answer = whole_answer(&serving.address, request.as_bytes());
            let case = format!("{order}, pipelined: {}", !pipelined.is_empty());
            assert!(answer.starts_with("HTTP/1.1 400"), "{case}: {answer}");
            assert!(answer.contains("connection: close"), "{case}: {answer}");
            assert!(answer.ends_with(refusal), "{case}: {answer}");
            assert_eq!(
                answer.matches("HTTP/1.1 ").count(),
                1,
                "{case}: a smuggled request was answered: {answer}"
            );
        }
    }
    // A clean connection beside it is served as ever, pipelining included.
    let answer = whole_answer(
        &serving.address,
        format!(
            "{smuggled}{}",
            smuggled.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
        )
        .as_bytes(),
    );
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 2, "{answer}");

    // 97 small header fields (1.5 KB): too many fields, not too many bytes.
    let mut many = String::from("GET /api/v2/monitor/health HTTP/1.1\r\nHost: x\r\n");
    for i in 0..97 {
        many.push_str(&format!("X-{i}: y\r\n"));
    }
    many.push_str("\r\n");
    let answer = whole_answer(&serving.address, many.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert!(answer.contains("more than 96 header fields"), "{answer}");
    // A request that is no HTTP at all: actix-http's own 400, which its
    // dispatcher writes before any handler, with the JSON body every error has.
    let answer = whole_answer(&serving.address, b"\x16\x03\x01 not http at all\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains("content-type: application/json\r\n"),
        "{answer}"
    );
    assert!(
        answer.ends_with(
            r#"{"detail":"Bad Request: the request line or headers could not be parsed"}"#
        ),
        "{answer}"
    );
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}
