//! Alerts on transitions (`[[alerts]]`), end to end: the real binary watching a
//! Celery executor on a throwaway Redis it kills and restarts, and a webhook
//! receiver of this test's own (a plain TCP server recording each POST).
//!
//! Each test asserts what was received, exactly: nothing for a blip shorter
//! than `min_duration`; one `firing` and one `resolved` for an outage that
//! outlives it (only the `firing` without `send_resolved`); an alert that
//! arrives after the receiver was down, counted, while polling went on; and a
//! webhook token that shows nowhere. Times are never asserted as performance.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use overseer_testkit::throwaway::{ThrowawayRedis, free_port};
use overseer_testkit::wait;
use serde_json::Value;
use support::{Serving, celery, get, health, health_until, overseer, run, workdir};

/// Quick intervals: a poll every 500 ms, writes every 200 ms, reads every 100 ms.
const QUICK: &str = "[supervisor]\nhostname = \"sched-1\"\npoll_interval = \"500ms\"\npoll_timeout = \"400ms\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n";

/// One POST the receiver took: its path and its body.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    body: Value,
}

/// A webhook receiver: a TCP server on loopback that records each POST and
/// answers `200 OK`, or `500` to the first `fail_first` requests.
struct Receiver {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
    /// Requests answered so far (200 or 500).
    requests: Arc<AtomicUsize>,
}

impl Receiver {
    /// A receiver on a free port of its own, answering 200.
    fn start() -> Self {
        Self::start_on(free_port(), 0)
    }

    /// A receiver on `port`, answering 500 to the first `fail_first` requests.
    fn start_on(port: u16, fail_first: usize) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("the receiver's port");
        let received = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(AtomicUsize::new(0));
        let (into, counted) = (received.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let answered = counted.load(Ordering::SeqCst);
                let status = if answered < fail_first {
                    "500 Internal Server Error"
                } else {
                    "200 OK"
                };
                if let Some((path, body)) = read_post(&stream) {
                    counted.fetch_add(1, Ordering::SeqCst);
                    if status == "200 OK" {
                        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        into.lock().unwrap().push(Received { path, body });
                    }
                    let mut stream = stream;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                }
            }
        });
        Self {
            port,
            received,
            requests,
        }
    }

    /// `http://127.0.0.1:{port}{path}`.
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The bodies received (with a 200) on `path`, in order.
    fn bodies(&self, path: &str) -> Vec<Value> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.body.clone())
            .collect()
    }

    /// Waits until `path` has received `count` bodies, and returns them.
    fn wait_for(&self, path: &str, count: usize, what: &str) -> Vec<Value> {
        wait::until(what, || {
            let bodies = self.bodies(path);
            if bodies.len() >= count {
                Ok(bodies)
            } else {
                Err(bodies)
            }
        })
    }
}

/// Reads one HTTP request: its path, if it is a POST, and its body.
fn read_post(stream: &TcpStream) -> Option<(String, Vec<u8>)> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut words = line.split_whitespace();
    let (method, path) = (words.next()?.to_owned(), words.next()?.to_owned());
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    (method == "POST").then_some((path, body))
}

/// The value of the first series of `/metrics` that starts with `series` (0 when absent).
fn metric(serving: &Serving, series: &str) -> f64 {
    let (_, body) = get(&serving.url("/metrics"));
    body.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Waits until `done` holds.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    wait::until_true(what, done);
}

fn is_healthy(json: &Value) -> bool {
    celery(json).is_some_and(|c| c["health"] == "healthy")
}

fn is_unhealthy(json: &Value) -> bool {
    celery(json).is_some_and(|c| c["health"] == "unhealthy")
}

/// `overseer.toml`: the quick intervals, a Celery executor on `broker`, and `alerts`.
fn config(broker: &ThrowawayRedis, alerts: &str) -> String {
    format!(
        "{QUICK}\n[[executors]]\nname = \"CeleryExecutor\"\nbroker_url = \"{}\"\n\n{alerts}",
        broker.url(None, 0)
    )
}

/// `overseer serve` on `toml`, once its executor is healthy.
fn serve(dir: &std::path::Path, toml: &str) -> Serving {
    std::fs::write(dir.join("overseer.toml"), toml).unwrap();
    let serving = Serving::start(&mut overseer(dir));
    health_until(&serving, "the broker healthy at first", is_healthy);
    serving
}

/// Parses an RFC 3339 time of an alert's body.
fn time(value: &Value) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(value.as_str().expect("a time")).expect("RFC 3339")
}

/// The fields of the JSON body the README's "Alerts" section shows, in order.
fn readme_body_fields() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split("\n## Alerts\n")
        .nth(1)
        .expect("the README has an Alerts section");
    let block = section
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("its first JSON block");
    let body: serde_json::Map<String, Value> = serde_json::from_str(block).unwrap();
    body.keys().cloned().collect()
}

#[test]
fn a_blip_shorter_than_min_duration_sends_nothing() {
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let receiver = Receiver::start();
    let dir = workdir();
    let alerts = format!(
        "[[alerts]]\nurl = \"{}\"\nmin_duration = \"8s\"\n",
        receiver.url("/hook")
    );
    let serving = serve(dir.path(), &config(&broker, &alerts));

    // Down for about a second (one or two polls), far less than min_duration.
    broker.kill();
    health_until(&serving, "unhealthy while the broker is down", is_unhealthy);
    broker.resume().unwrap();
    health_until(&serving, "healthy again", is_healthy);
    // Past min_duration since it turned unhealthy, and since it recovered.
    std::thread::sleep(Duration::from_secs(9));

    assert_eq!(receiver.bodies("/hook"), Vec::<Value>::new());
    assert_eq!(receiver.requests.load(Ordering::SeqCst), 0);
    let target = "target=\"http://127.0.0.1";
    let sent = format!("overseer_alerts_sent_total{{{target}");
    assert_eq!(metric(&serving, &sent), 0.0, "the series is there, at 0");
    assert!(
        get(&serving.url("/metrics")).1.contains(&sent),
        "sent counted per target from the start"
    );
}

#[test]
fn an_outage_past_min_duration_fires_once_and_resolves_once() {
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let receiver = Receiver::start();
    let dir = workdir();
    // Two targets on one receiver: JSON with resolved alerts, Slack without.
    let alerts = format!(
        "[[alerts]]\nname = \"resolving\"\nurl = \"{}\"\nmin_duration = \"2s\"\n\n\
         [[alerts]]\nname = \"firing-only\"\nurl = \"{}\"\nformat = \"slack\"\nmin_duration = \"2s\"\nsend_resolved = false\n",
        receiver.url("/json"),
        receiver.url("/slack"),
    );
    let serving = serve(dir.path(), &config(&broker, &alerts));
    let instance = broker.url(None, 0);

    // Taken before the kill: Overseer may see the death before this thread,
    // on a loaded host, gets back from reaping the broker.
    let killed = chrono::Utc::now();
    broker.kill();
    let firing = receiver.wait_for("/json", 1, "the firing alert")[0].clone();
    let slack = receiver.wait_for("/slack", 1, "the Slack firing alert")[0].clone();
    // Held past min_duration while it was still down.
    assert!(is_unhealthy(&health(&serving)));

    assert_eq!(firing["status"], "firing");
    assert_eq!(firing["executor"], "CeleryExecutor");
    assert_eq!(firing["instance"], instance.as_str());
    assert_eq!(firing["hostname"], "sched-1");
    assert_eq!(firing["health"], "unhealthy");
    assert_eq!(firing["previous"], "healthy");
    let reason = firing["reason"].as_str().unwrap();
    assert!(reason.contains(&instance), "{reason}");
    assert_eq!(firing["since"], firing["unhealthy_since"]);
    assert!(time(&firing["since"]) >= killed, "{firing}");
    let held = time(&firing["sent_at"]) - time(&firing["since"]);
    assert!(held >= chrono::Duration::seconds(2), "sent after {held}");
    assert_eq!(firing["overseer"], env!("CARGO_PKG_VERSION"));
    let fields: Vec<&str> = firing
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        fields,
        [
            "status",
            "executor",
            "instance",
            "hostname",
            "health",
            "previous",
            "reason",
            "since",
            "unhealthy_since",
            "cost",
            "sent_at",
            "overseer"
        ]
    );
    assert_eq!(
        fields,
        readme_body_fields(),
        "the README's body, field for field"
    );

    let text = slack["text"].as_str().unwrap();
    assert_eq!(slack.as_object().unwrap().len(), 1, "{slack}");
    assert!(
        text.starts_with(&format!(
            ":red_circle: CeleryExecutor @ {instance} on sched-1 is unhealthy: "
        )),
        "{text}"
    );
    assert!(text.ends_with(reason), "{text}");

    broker.resume().unwrap();
    let resolved = receiver.wait_for("/json", 2, "the resolved alert")[1].clone();
    assert_eq!(resolved["status"], "resolved");
    assert_eq!(resolved["health"], "healthy");
    assert_eq!(resolved["previous"], "unhealthy");
    assert_eq!(resolved["reason"], Value::Null);
    assert_eq!(resolved["unhealthy_since"], firing["since"]);
    assert!(time(&resolved["since"]) > time(&firing["since"]));

    // Nothing more comes, to either: past min_duration again, and then some.
    health_until(&serving, "healthy again", is_healthy);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(receiver.bodies("/json"), [firing, resolved]);
    assert_eq!(receiver.bodies("/slack"), [slack]);
    for (series, value) in [
        (
            r#"overseer_alerts_sent_total{target="resolving",status="firing"}"#,
            1.0,
        ),
        (
            r#"overseer_alerts_sent_total{target="resolving",status="resolved"}"#,
            1.0,
        ),
        (
            r#"overseer_alerts_sent_total{target="firing-only",status="firing"}"#,
            1.0,
        ),
        (
            r#"overseer_alerts_sent_total{target="firing-only",status="resolved"}"#,
            0.0,
        ),
        (r#"overseer_alert_failures_total{target="resolving"}"#, 0.0),
        (
            r#"overseer_alerts_dropped_total{target="firing-only"}"#,
            0.0,
        ),
    ] {
        assert_eq!(metric(&serving, series), value, "{series}");
    }
}

#[test]
fn a_receiver_that_is_down_gets_the_alert_after_retries_while_polling_goes_on() {
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    // Nothing listens on the receiver's port yet.
    let port = free_port();
    let dir = workdir();
    let alerts = format!(
        "[[alerts]]\nname = \"pager\"\nurl = \"http://127.0.0.1:{port}/hook\"\nmin_duration = \"0s\"\n",
    );
    let serving = serve(dir.path(), &config(&broker, &alerts));
    let polls = r#"overseer_polls_total{executor="CeleryExecutor""#;
    let failures = r#"overseer_alert_failures_total{target="pager"}"#;

    broker.kill();
    wait_until("a failed delivery", || metric(&serving, failures) >= 1.0);
    let polls_at_first_failure = metric(&serving, polls);
    let failing_since = Instant::now();
    // While deliveries fail (refused, then a 500), the executor is polled on.
    std::thread::sleep(Duration::from_millis(2500));
    let receiver = Receiver::start_on(port, 1);
    let bodies = receiver.wait_for("/hook", 1, "the alert, once the receiver is up");
    let failing_for = failing_since.elapsed();
    let polls_after = metric(&serving, polls);

    assert_eq!(bodies[0]["status"], "firing");
    assert_eq!(
        receiver.requests.load(Ordering::SeqCst),
        2,
        "one 500, then the 200"
    );
    assert!(metric(&serving, failures) >= 2.0, "refused, then the 500");
    assert_eq!(
        metric(
            &serving,
            r#"overseer_alerts_sent_total{target="pager",status="firing"}"#
        ),
        1.0
    );
    assert_eq!(
        metric(&serving, r#"overseer_alerts_dropped_total{target="pager"}"#),
        0.0
    );
    // Polling was never held up by the failing deliveries: at least half the
    // polls a 500 ms interval makes in that time (a loose bound, not a speed).
    let expected = failing_for.as_secs_f64() / 0.5;
    assert!(
        polls_after - polls_at_first_failure >= expected / 2.0,
        "{polls_at_first_failure} -> {polls_after} polls in {failing_for:?}"
    );
    assert!(is_unhealthy(&health(&serving)));
}

#[test]
fn the_webhook_token_shows_nowhere() {
    const PATH_TOKEN: &str = "T0KEN-in-the-path-7f3a";
    const QUERY_TOKEN: &str = "qu3ry-t0ken-91bc";
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let port = free_port();
    let path = format!("/services/{PATH_TOKEN}?token={QUERY_TOKEN}");
    let dir = workdir();
    let alerts =
        format!("[[alerts]]\nurl = \"http://127.0.0.1:{port}{path}\"\nmin_duration = \"0s\"\n",);
    let toml = config(&broker, &alerts);
    std::fs::write(dir.path().join("overseer.toml"), &toml).unwrap();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_LOG", "trace"));
    health_until(&serving, "the broker healthy at first", is_healthy);

    // A failed delivery (refused: nothing listens yet), then a delivered one.
    broker.kill();
    let target = format!("target=\"http://127.0.0.1:{port}/***\"");
    let failures = format!("overseer_alert_failures_total{{{target}}}");
    wait_until("a failed delivery", || metric(&serving, &failures) >= 1.0);
    let receiver = Receiver::start_on(port, 0);
    let received = receiver.wait_for(&path, 1, "the alert, with its token, to the receiver");
    assert_eq!(received[0]["status"], "firing");

    let (_, metrics) = get(&serving.url("/metrics"));
    assert!(metrics.contains(&target), "{metrics}");
    let json = health(&serving).to_string();
    let shown = run(overseer(dir.path()).arg("config"));
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    assert!(
        shown
            .stdout
            .contains(&format!("url = \"http://127.0.0.1:{port}/***\"")),
        "{}",
        shown.stdout
    );
    let (code, log) = serving.terminate();
    assert_eq!(code, Some(0));
    let log = log.join("\n");
    assert!(log.contains("cannot send the firing alert"), "{log}");
    assert!(log.contains("sent the firing alert"), "{log}");
    for (what, text) in [
        ("/metrics", metrics.as_str()),
        ("the health JSON", json.as_str()),
        ("overseer config", shown.stdout.as_str()),
        ("overseer config's stderr", shown.stderr.as_str()),
        ("the trace log", log.as_str()),
    ] {
        for token in [PATH_TOKEN, QUERY_TOKEN] {
            assert!(!text.contains(token), "{what} shows {token}:\n{text}");
        }
    }
}

/// An alert still firing when Overseer stops is resolved by the next run: the
/// broker dies, the alert fires, the service stops; the broker comes back and
/// the service starts again on the same database. The new run takes the open
/// alert back from the history, and sends its `resolved` once the executor is
/// healthy, naming the outage the first run alerted on.
#[test]
fn an_alert_firing_when_the_service_stops_is_resolved_by_the_next_run() {
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let receiver = Receiver::start();
    let dir = workdir();
    let alerts = format!(
        "[[alerts]]\nurl = \"{}\"\nmin_duration = \"1s\"\n",
        receiver.url("/hook")
    );
    let toml = config(&broker, &alerts);
    let first = serve(dir.path(), &toml);
    broker.kill();
    let firing = receiver.wait_for("/hook", 1, "the firing alert")[0].clone();
    assert_eq!(firing["status"], "firing");
    let (code, _) = first.terminate();
    assert_eq!(code, Some(0));

    broker.resume().unwrap();
    let second = serve(dir.path(), &toml);
    let bodies = receiver.wait_for("/hook", 2, "the resolved alert from the next run");
    let resolved = &bodies[1];
    assert_eq!(resolved["status"], "resolved");
    assert_eq!(resolved["executor"], firing["executor"]);
    assert_eq!(resolved["instance"], firing["instance"]);
    assert_eq!(resolved["health"], "healthy");
    assert_eq!(resolved["unhealthy_since"], firing["since"]);
    // Nothing more: past min_duration again, and then some.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        receiver.bodies("/hook").len(),
        2,
        "{:#?}",
        receiver.bodies("/hook")
    );
    // The second run sent the resolved alert, and no firing one of its own.
    let (_, metrics) = get(&second.url("/metrics"));
    let sent = |status: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("overseer_alerts_sent_total{")
                    && l.contains(&format!("status=\"{status}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    assert_eq!((sent("firing"), sent("resolved")), (Some(0.0), Some(1.0)));
}

/// On an Airflow database, the resolved alert says what the outage cost: the
/// executor's task instances that failed or went up for retry while its broker
/// was down, as the history's transition out of `unhealthy` counts them.
#[test]
fn a_resolved_alert_says_what_the_outage_cost() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = runtime.block_on(overseer_testkit::postgres()) else {
        return;
    };
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    // Airflow's `task_instance`, the columns the count reads.
    runtime.block_on(db.execute_script(
        "CREATE TABLE task_instance (task_id VARCHAR(250) NOT NULL, dag_id VARCHAR(250) NOT NULL, \
         run_id VARCHAR(250) NOT NULL, map_index INTEGER NOT NULL DEFAULT -1, state VARCHAR(20), \
         queue VARCHAR(256), executor VARCHAR(1000), end_date TIMESTAMP WITH TIME ZONE, \
         PRIMARY KEY (dag_id, task_id, run_id, map_index))",
    ));
    let receiver = Receiver::start();
    let dir = workdir();
    let alerts = format!(
        "[database]\nurl = \"{}\"\n\n[[alerts]]\nurl = \"{}\"\nmin_duration = \"1s\"\n",
        db.url,
        receiver.url("/json"),
    );
    let serving = serve(dir.path(), &config(&broker, &alerts));

    broker.kill();
    receiver.wait_for("/json", 1, "the firing alert");
    // The scheduler fails what it cannot send; one goes up for retry.
    runtime.block_on(db.execute_script(
        "INSERT INTO task_instance (task_id, dag_id, run_id, state, queue, executor, end_date) VALUES \
         ('a', 'etl', 'r1', 'failed', 'default', NULL, now()), \
         ('b', 'etl', 'r1', 'failed', 'default', 'CeleryExecutor', now()), \
         ('c', 'etl', 'r1', 'up_for_retry', 'default', NULL, now())",
    ));
    broker.resume().unwrap();
    let resolved = receiver.wait_for("/json", 2, "the resolved alert")[1].clone();
    assert_eq!(resolved["status"], "resolved", "{resolved}");
    assert_eq!(
        resolved["cost"],
        serde_json::json!({"failed": 2, "up_for_retry": 1}),
        "{resolved}"
    );
    drop(serving);
}
