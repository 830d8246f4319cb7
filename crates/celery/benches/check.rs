//! How long one healthy check takes, beside what a Python operator would run for the
//! same question, in the same run and against the same brokers:
//! `celery -b URL inspect ping` and kombu's `Connection(url).ensure_connection()`.
//!
//! `cargo bench -p overseer-celery --bench check` (needs the machine's Redis and
//! RabbitMQ; builds the Celery venv the tests use on first run). Each figure is the
//! median of several runs; the Python ones include starting the interpreter, as an
//! operator's probe does.
//!
//! Then the same check over TLS beside plain TCP, on two throwaway `redis-server`s of
//! the same build (one `--tls-port` with certificates made at run time, one plain),
//! pooled and fresh: `cargo bench -p overseer-celery --bench check -- --tls` runs
//! only that part.

#[path = "../tests/support/certs.rs"]
mod certs;
#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use overseer_celery::{BrokerUrl, CeleryCheck, CheckSettings};
use overseer_core::ExecutorHealth;

/// Runs per figure for our check (cheap).
const OURS_RUNS: usize = 20;
/// Runs per figure for the Python commands (each starts an interpreter).
const PYTHON_RUNS: usize = 5;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn check(url: &str, worker_ping: bool) -> CeleryCheck {
    CeleryCheck::new(
        &BrokerUrl::parse(url).expect("a valid URL"),
        CheckSettings {
            worker_ping,
            ..CheckSettings::default()
        },
    )
    .expect("valid settings")
}

async fn time_check(check: &CeleryCheck) -> Duration {
    check.start();
    let started = Instant::now();
    let probe = check.probe().await;
    let health = probe.observation().health;
    let took = started.elapsed();
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    took
}

/// Our check on a pooled connection: what every poll after the first costs.
async fn ours_pooled(url: &str, worker_ping: bool) -> Duration {
    let check = check(url, worker_ping);
    time_check(&check).await; // opens the pooled connection
    let mut samples = Vec::new();
    for _ in 0..OURS_RUNS {
        samples.push(time_check(&check).await);
    }
    median(samples)
}

/// Our check from nothing: a fresh check, so a fresh connection, each time.
async fn ours_fresh(url: &str) -> Duration {
    let mut samples = Vec::new();
    for _ in 0..OURS_RUNS {
        samples.push(time_check(&check(url, false)).await);
    }
    median(samples)
}

fn python(venv: &std::path::Path, args: &[&str]) -> Duration {
    let mut samples = Vec::new();
    for _ in 0..PYTHON_RUNS {
        let started = Instant::now();
        let out = Command::new(venv.join("bin/python"))
            .args(args)
            .output()
            .expect("python");
        samples.push(started.elapsed());
        // `inspect ping` exits 69 when no worker answers: still an answer to time.
        assert!(
            out.status.success() || out.status.code() == Some(69),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    median(samples)
}

fn row(what: &str, took: Duration, baseline: Duration) {
    println!(
        "| {what:<52} | {:>9.1} | {:>7.1}x |",
        took.as_secs_f64() * 1000.0,
        took.as_secs_f64() / baseline.as_secs_f64()
    );
}

/// Our check over TLS beside plain TCP, pooled and fresh, on two throwaway servers.
async fn tls_beside_plain() {
    let pki = certs::Pki::new("bench");
    let server = pki.server("server", &["127.0.0.1"]);
    let Some(tls) =
        support::ThrowawayRedis::start_tls(&server.cert, &server.key, &pki.ca_pem(), "no", &[])
    else {
        return;
    };
    let Some(plain) = support::ThrowawayRedis::start(&[]) else {
        return;
    };
    let plain_url = plain.url(None, 0);
    let tls_url = format!(
        "rediss://127.0.0.1:{}/0?ssl_cert_reqs=required&ssl_ca_certs={}",
        tls.port,
        pki.ca_pem().display()
    );
    let plain_pooled = ours_pooled(&plain_url, false).await;
    let plain_fresh = ours_fresh(&plain_url).await;
    let tls_pooled = ours_pooled(&tls_url, false).await;
    let tls_fresh = ours_fresh(&tls_url).await;
    println!(
        "\nRedis over TLS beside plain TCP (throwaway servers), median ms, ratio to plain pooled:"
    );
    println!("| {:<52} | {:>9} | {:>8} |", "what", "ms", "ratio");
    println!("|{}|{}|{}|", "-".repeat(54), "-".repeat(11), "-".repeat(10));
    row("plain TCP, pooled connection", plain_pooled, plain_pooled);
    row("plain TCP, fresh connection", plain_fresh, plain_pooled);
    row(
        "TLS (rediss://), pooled connection",
        tls_pooled,
        plain_pooled,
    );
    row(
        "TLS (rediss://), fresh connection and handshake",
        tls_fresh,
        plain_pooled,
    );
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--tls") {
        tls_beside_plain().await;
        return;
    }
    if !support::redis_up() || !support::rabbitmq_up() {
        return;
    }
    let Some(venv) = support::venv() else { return };
    for (name, url) in [
        ("Redis", support::REDIS_URL),
        ("RabbitMQ", support::RABBITMQ_URL),
    ] {
        let pooled = ours_pooled(url, false).await;
        let fresh = ours_fresh(url).await;
        let with_ping = ours_pooled(url, true).await;
        let kombu = python(
            &venv,
            &[
                "-c",
                &format!(
                    "from kombu import Connection; Connection('{url}').ensure_connection(max_retries=1)"
                ),
            ],
        );
        let inspect = python(&venv, &["-m", "celery", "-b", url, "inspect", "ping"]);
        let identity = BrokerUrl::parse(url).expect("a valid URL").identity();
        println!("\n{name} ({identity}), median ms, ratio to overseer's pooled check:");
        println!("| {:<52} | {:>9} | {:>8} |", "what", "ms", "ratio");
        println!("|{}|{}|{}|", "-".repeat(54), "-".repeat(11), "-".repeat(10));
        row("overseer check, pooled connection", pooled, pooled);
        row("overseer check, fresh connection", fresh, pooled);
        row(
            "overseer check + worker ping (1 s window), pooled",
            with_ping,
            pooled,
        );
        row("kombu Connection(url).ensure_connection()", kombu, pooled);
        row("celery -b URL inspect ping", inspect, pooled);
    }
    tls_beside_plain().await;
}
