//! Limits that keep probes answering: under a low open-file limit, more SSE
//! clients than `api.max_stream_clients` (and than the process has descriptors)
//! get 503 while `GET /api/v2/monitor/health` goes on answering; a client that
//! leaves frees its place; and the soft open-file limit is raised to the hard
//! one at start.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use overseer_testkit::wait;
use serde_json::Value;
use support::{Serving, get, overseer, workdir};

const QUICK: &str = "[supervisor]\npoll_interval = \"200ms\"\npoll_timeout = \"150ms\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n\n[[executors]]\nname = \"LocalExecutor\"\n";

/// The open-file limit the service runs under, soft and hard alike.
const OPEN_FILES: u64 = 256;

/// The stream cap under test, below what `OPEN_FILES` leaves for connections.
const MAX_STREAMS: usize = 100;

/// SSE clients that come: more than the cap, and more than the descriptors.
const STREAM_CLIENTS: usize = 300;

/// How long a probe may wait for `/health`: the pass/fail bound, a generous
/// timeout and not a benchmark (the latencies are printed, not asserted).
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// `overseer` in `dir`, started with an open-file limit of `soft` and `hard`.
fn limited(dir: &std::path::Path, soft: u64, hard: u64) -> Command {
    let mut command = overseer(dir);
    // SAFETY: setrlimit is async-signal-safe, and the closure allocates nothing.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: soft as libc::rlim_t,
                rlim_max: hard as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    command
}

/// `serve` under an open-file limit of `OPEN_FILES`, soft and hard, on a SQLite
/// file of its own (the default `./overseer.db` in its folder).
fn serve(max_streams: Option<usize>) -> (tempfile::TempDir, Serving) {
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let mut command = limited(dir.path(), OPEN_FILES, OPEN_FILES);
    if let Some(max) = max_streams {
        command.env("OVERSEER_API__MAX_STREAM_CLIENTS", max.to_string());
    }
    let serving = Serving::start(&mut command);
    (dir, serving)
}

/// An SSE client's answer: a stream held open, or a refusal.
enum Answer {
    Stream(BufReader<TcpStream>),
    Refused {
        retry_after: Option<String>,
        body: String,
    },
}

/// Opens the stream and reads the answer's head: a 200 is held open (after its
/// first `report` event), a 503 read to its end. Anything else fails.
fn open_stream(address: &str) -> Answer {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /api/v2/monitor/health/stream HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end().to_owned();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    match status.split_whitespace().nth(1) {
        Some("200") => {
            assert_eq!(
                header("content-type").as_deref(),
                Some("text/event-stream"),
                "{headers:?}"
            );
            let mut line = String::new();
            while !line.starts_with("event: report") {
                line.clear();
                assert!(reader.read_line(&mut line).unwrap() > 0, "stream ended");
            }
            Answer::Stream(reader)
        }
        Some("503") => {
            assert_eq!(
                header("content-type").as_deref(),
                Some("application/json"),
                "{headers:?}"
            );
            let length: usize = header("content-length").unwrap().parse().unwrap();
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            Answer::Refused {
                retry_after: header("retry-after"),
                body: String::from_utf8(body).unwrap(),
            }
        }
        _ => panic!("unexpected answer to the stream: {status:?} {headers:?}"),
    }
}

/// GETs `/api/v2/monitor/health` on a fresh connection each time (so each goes
/// through `accept()`) until `stop`, and returns how long each took. Each must
/// answer 200 with the health JSON within `PROBE_TIMEOUT`.
fn probe(address: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Duration>> {
    std::thread::spawn(move || {
        let agent = ureq::AgentBuilder::new()
            .max_idle_connections(0)
            .timeout(PROBE_TIMEOUT)
            .build();
        let url = format!("http://{address}/api/v2/monitor/health");
        let mut took = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let response = agent
                .get(&url)
                .call()
                .unwrap_or_else(|e| panic!("GET /health after {:?}: {e}", started.elapsed()));
            assert_eq!(response.status(), 200);
            let json: Value = response.into_json().unwrap();
            took.push(started.elapsed());
            assert_eq!(json["metadatabase"]["status"], "healthy", "{json}");
            std::thread::sleep(Duration::from_millis(10));
        }
        took
    })
}

/// `/metrics`' `overseer_stream_clients`.
fn stream_clients(serving: &Serving) -> usize {
    let (_, body) = get(&serving.url("/metrics"));
    body.lines()
        .find_map(|l| l.strip_prefix("overseer_stream_clients "))
        .unwrap_or_else(|| panic!("overseer_stream_clients in {body}"))
        .parse()
        .unwrap()
}

/// Waits until `/metrics` counts `n` streams.
fn wait_for_stream_clients(serving: &Serving, n: usize) {
    wait::until(&format!("{n} streams"), || {
        let now = stream_clients(serving);
        if now == n { Ok(()) } else { Err(now) }
    });
}

/// Descriptors the process holds now.
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

fn summary(took: &mut [Duration]) -> String {
    took.sort();
    let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize];
    format!(
        "{} probes, median {:?}, p99 {:?}, max {:?}",
        took.len(),
        at(0.5),
        at(0.99),
        took[took.len() - 1]
    )
}

#[test]
fn past_the_stream_cap_clients_get_503_and_the_health_route_keeps_answering() {
    let (_dir, serving) = serve(Some(MAX_STREAMS));
    let pid = serving.child.id();
    let at_rest = descriptors(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let probing = probe(serving.address.clone(), stop.clone());

    // More SSE clients than the cap, and than the descriptors the service has:
    // the first MAX_STREAMS are served, the rest refused with a JSON 503.
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..STREAM_CLIENTS {
        match open_stream(&serving.address) {
            Answer::Stream(stream) => {
                assert!(i < MAX_STREAMS, "client {i} got a stream past the cap");
                held.push(stream);
            }
            Answer::Refused { retry_after, body } => {
                assert!(i >= MAX_STREAMS, "client {i} refused below the cap: {body}");
                assert_eq!(retry_after.as_deref(), Some("10"));
                let json: Value = serde_json::from_str(&body).unwrap();
                let detail = json["detail"].as_str().unwrap();
                assert!(
                    detail.contains("at capacity") && detail.contains("/api/v2/monitor/health"),
                    "{json}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!(held.len(), MAX_STREAMS);
    assert_eq!(refused, STREAM_CLIENTS - MAX_STREAMS);
    assert_eq!(stream_clients(&serving), MAX_STREAMS);
    let at_cap = descriptors(pid);

    // Probes answer while the stream is full, for a while.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let mut took = probing.join().expect("every probe answered in time");
    eprintln!(
        "/health under {MAX_STREAMS} held streams and {refused} refusals, limit {OPEN_FILES}: {}",
        summary(&mut took)
    );
    eprintln!("descriptors: {at_rest} at rest, {at_cap} with {MAX_STREAMS} streams");

    // Ten clients leave: their places are free, and a new client gets one.
    held.truncate(MAX_STREAMS - 10);
    let left = Instant::now();
    wait_for_stream_clients(&serving, MAX_STREAMS - 10);
    eprintln!(
        "ten places freed {:?} after their clients left",
        left.elapsed()
    );
    assert!(matches!(open_stream(&serving.address), Answer::Stream(_)));

    drop(held);
    let (code, lines) = serving.terminate();
    assert_eq!(code, Some(0), "{lines:#?}");
    assert!(
        !lines.iter().any(|l| l.contains("Too many open files")),
        "{lines:#?}"
    );
}

#[test]
fn a_stream_cap_the_open_file_limit_cannot_hold_is_lowered_with_a_warning() {
    // The default cap, 256, under a limit of 256 descriptors.
    let (_dir, mut serving) = serve(None);
    let warning = serving.wait_for("api.max_stream_clients is 256");
    assert!(warning.contains("WARN"), "{warning}");
    let lowered: usize = warning
        .split("serving at most ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(lowered < OPEN_FILES as usize, "{warning}");

    let held: Vec<_> = (0..lowered)
        .map(|_| match open_stream(&serving.address) {
            Answer::Stream(stream) => stream,
            Answer::Refused { body, .. } => panic!("refused below the cap: {body}"),
        })
        .collect();
    assert!(matches!(
        open_stream(&serving.address),
        Answer::Refused { .. }
    ));
    assert_eq!(
        support::health(&serving)["metadatabase"]["status"],
        "healthy"
    );
    drop(held);
    let (code, lines) = serving.terminate();
    assert_eq!(code, Some(0), "{lines:#?}");
}

#[test]
fn the_soft_open_file_limit_is_raised_to_the_hard_one_at_start() {
    // A hard limit of 4096, or what this process may give a child if less.
    let mut own = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid pointer.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut own) }, 0);
    let hard = own.rlim_max.min(4096);
    assert!(hard > 256, "a hard open-file limit above 256: {hard}");
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let serving =
        Serving::start(limited(dir.path(), 256, hard).env("OVERSEER_LOG", "overseer=debug"));
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", serving.child.id())).unwrap();
    let open_files: Vec<_> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .collect();
    let hard = hard.to_string();
    assert_eq!(open_files[3..5], [hard.as_str(), hard.as_str()], "{limits}");
    assert!(
        serving.seen.iter().any(|l| l.contains(&format!(
            "raised the soft open-file limit from 256 to the hard limit, {hard}"
        ))),
        "{:#?}",
        serving.seen
    );
}
