//! The HTTP check against a real HTTP server of the test's own, on loopback:
//! one that answers each status, one that hangs, and a port where nothing
//! listens. The check is blocking, so each test simply calls it.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use overseer_checks::HttpCheck;
use overseer_core::secret::SecretUrl;
use overseer_core::{BlockingHealthCheck, ExecutorHealth};

/// The poll timeout of the tests: the check gives itself 90 % of it.
const POLL_TIMEOUT: Duration = Duration::from_millis(1000);

/// What the server does with each request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers with this status line (after `HTTP/1.1 `) and an empty body.
    Status(&'static str),
    /// Reads the request and never answers, holding the connection open.
    Hang,
    /// Answers `200 OK` as soon as a client connects, before reading anything
    /// (a plain HTTP server, as a TLS client hears it).
    AtOnce,
}

/// A one-route HTTP/1.1 server on `127.0.0.1:0`, on a thread of its own,
/// keeping each request's head (request line and headers) for the test.
struct Server {
    port: u16,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            // Connections are kept until the test process ends (a hanging server
            // must not close them).
            let mut held: Vec<TcpStream> = Vec::new();
            for mut stream in listener.incoming().flatten() {
                if let Behaviour::AtOnce = behaviour {
                    let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                    held.push(stream);
                    continue;
                }
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                seen.lock().unwrap().push(head);
                let mut stream = stream;
                match behaviour {
                    Behaviour::Status(status) => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        );
                    }
                    Behaviour::Hang | Behaviour::AtOnce => held.push(stream),
                }
            }
        });
        Self { port, requests }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn check(url: &str) -> HttpCheck {
    HttpCheck::new(&SecretUrl::new(url), None, POLL_TIMEOUT).unwrap()
}

#[test]
fn a_2xx_answer_is_healthy() {
    for status in ["200 OK", "204 No Content", "299 Whatever"] {
        let server = Server::start(Behaviour::Status(status));
        assert_eq!(
            check(&server.url("/health")).get_health(),
            ExecutorHealth::Healthy,
            "{status}"
        );
    }
}

#[test]
fn any_other_status_is_unhealthy_with_the_status_line() {
    for status in [
        "500 Internal Server Error",
        "503 Service Unavailable",
        "404 Not Found",
        "301 Moved Permanently",
        "429 Too Many Requests",
    ] {
        let server = Server::start(Behaviour::Status(status));
        let url = server.url("/health");
        assert_eq!(
            check(&url).get_health(),
            ExecutorHealth::unhealthy(format!("GET {url} answered {status}")),
        );
    }
    // A redirect is not followed: one request only.
    let server = Server::start(Behaviour::Status("302 Found\r\nLocation: /elsewhere"));
    let _ = check(&server.url("/health")).get_health();
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn the_url_reaches_the_server_whole_and_is_shown_redacted() {
    let server = Server::start(Behaviour::Status("503 token s3cret rejected"));
    let url = format!(
        "http://ops:hunter2@127.0.0.1:{}/health?token=s3cret&verbose=1",
        server.port
    );
    let health = check(&url).get_health();
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "GET http://ops:***@127.0.0.1:{}/health?token=***&verbose=1 answered 503 token *** rejected",
            server.port
        ))
    );
    let requests = server.requests();
    let head = &requests[0];
    assert!(
        head.starts_with("GET /health?token=s3cret&verbose=1 HTTP/1.1\r\n"),
        "{head}"
    );
    // ops:hunter2, as HTTP Basic authentication.
    assert!(
        head.contains("Authorization: Basic b3BzOmh1bnRlcjI=\r\n"),
        "{head}"
    );
    assert!(head.contains("User-Agent: overseer/"), "{head}");
}

#[test]
fn a_server_that_hangs_is_unhealthy_within_the_poll_timeout() {
    let server = Server::start(Behaviour::Hang);
    let url = server.url("/health");
    // The check's own deadline (900 ms, inside the poll timeout), as the
    // verdict says.
    let health = check(&url).get_health();
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!("GET {url} failed: no answer within 900ms"))
    );
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_refused_connection_is_unhealthy() {
    // A port that was free a moment ago: nothing listens on it.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/health?token=s3cret");
    assert_eq!(
        check(&url).get_health(),
        ExecutorHealth::unhealthy(format!(
            "GET http://127.0.0.1:{port}/health?token=*** failed: connection refused"
        ))
    );
}

#[test]
fn a_server_that_closes_without_answering_is_unhealthy() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut line = String::new();
            let _ = BufReader::new(&stream).read_line(&mut line);
            drop(stream);
        }
    });
    let url = format!("http://127.0.0.1:{port}/health");
    let health = check(&url).get_health();
    let ExecutorHealth::Unhealthy { reason } = health else {
        panic!("{health:?}");
    };
    assert!(
        reason.starts_with(&format!("GET {url} failed: ")),
        "{reason}"
    );
}

#[test]
fn https_to_a_plain_http_server_says_it_does_not_speak_tls() {
    let server = Server::start(Behaviour::AtOnce);
    let url = format!("https://127.0.0.1:{}/health", server.port);
    assert_eq!(
        check(&url).get_health(),
        ExecutorHealth::unhealthy(format!(
            "GET {url} failed: the server did not answer in TLS (is it plain http://?)"
        ))
    );
}

/// A status line as long as a server cares to send, with a tab, a terminal
/// escape and the URL's own password where the cut falls: the reason is one
/// line of at most 240 characters, and no part of the password shows.
#[test]
fn a_hostile_status_line_gives_one_bounded_line_without_the_password() {
    const PASSWORD: &str = "hunter2secret";
    let max = overseer_core::reason::MAX_CHARS;
    // The port is not known before the server starts: the text is sized for
    // a port of 5 digits (an ephemeral one), so that the password starts 7
    // characters before the cap (`[2J ` and a space come before it).
    let shown = "GET http://probe:***@127.0.0.1:65535/health answered 503 ";
    let pad = max - shown.chars().count() - 12;
    let status: &'static str = Box::leak(
        format!(
            "503 \x1b[2J\t{} {PASSWORD} {}",
            "x".repeat(pad),
            "y".repeat(5000)
        )
        .into_boxed_str(),
    );
    let server = Server::start(Behaviour::Status(status));
    let url = format!("http://probe:{PASSWORD}@127.0.0.1:{}/health", server.port);
    let ExecutorHealth::Unhealthy { reason } = check(&url).get_health() else {
        panic!("503 is unhealthy");
    };
    assert!(
        reason.chars().count() <= max,
        "{} characters",
        reason.chars().count()
    );
    assert!(!reason.contains(|c: char| c.is_control()), "{reason:?}");
    assert!(!reason.contains("hunt"), "{reason}");
    assert!(
        reason.starts_with(&format!(
            "GET http://probe:***@127.0.0.1:{}/health answered 503 [2J xxx",
            server.port
        )),
        "{reason}"
    );
}
