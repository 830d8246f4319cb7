//! The Redis broker check over TLS (`rediss://`), against `redis-server`s of the
//! test's own with a TLS port and certificates made at run time: healthy with the
//! right CA, each TLS failure with its own reason, a killed and restarted server
//! flipping the verdict both ways, and no password in anything shown.

use crate::certs;
use crate::support;

use std::path::Path;

use certs::{Issued, Pki};
use overseer_celery::{BrokerStatus, CeleryCheck, Probe};
use overseer_core::ExecutorHealth;
use support::{ThrowawayRedis, ThrowawaySentinel, check};

async fn poll(check: &CeleryCheck) -> (ExecutorHealth, Probe) {
    support::poll_within(check, support::POLL_TIMEOUT).await
}

/// A `redis-server` of the test's own that speaks only TLS, with `server`'s
/// certificate, trusting `ca` for client certificates; `auth_clients` is its
/// `--tls-auth-clients` (`no`, `yes`); `extra` more arguments.
fn tls_redis(
    ca: &Path,
    server: &Issued,
    auth_clients: &str,
    extra: &[&str],
) -> Option<ThrowawayRedis> {
    ThrowawayRedis::start_tls(&server.cert, &server.key, ca, auth_clients, extra)
}

/// `rediss://{host}:{port}/0?{query}`.
fn url(host: &str, port: u16, query: &str) -> String {
    format!("rediss://{host}:{port}/0?{query}")
}

fn ca_query(ca: &Path) -> String {
    format!("ssl_cert_reqs=required&ssl_ca_certs={}", ca.display())
}

/// The verdict's reason when unhealthy, else a panic saying what it was.
async fn unhealthy_reason(url: &str) -> String {
    let (health, probe) = poll(&check(url, &["default"])).await;
    match health {
        ExecutorHealth::Unhealthy { reason } => {
            assert_eq!(probe.reason.as_deref(), Some(reason.as_str()));
            reason.into_string()
        }
        other => panic!("{url}: expected unhealthy, got {other:?} ({probe:?})"),
    }
}

#[tokio::test]
async fn the_right_ca_makes_a_tls_broker_healthy_by_address_or_name() {
    let pki = Pki::new("good");
    let server = pki.server("server", &["localhost", "127.0.0.1"]);
    let Some(redis) = tls_redis(&pki.ca_pem(), &server, "no", &[]) else {
        return;
    };
    for (host, query) in [
        ("127.0.0.1", ca_query(&pki.ca_pem())),
        (
            "localhost",
            format!(
                "ssl_cert_reqs=CERT_REQUIRED&ssl_ca_certs={}",
                pki.ca_pem().display()
            ),
        ),
        // CERT_OPTIONAL verifies what the server sends, as Python's client does.
        (
            "localhost",
            format!(
                "ssl_cert_reqs=optional&ssl_ca_certs={}",
                pki.ca_pem().display()
            ),
        ),
        // Nothing verified: still TLS, still healthy.
        ("127.0.0.1", "ssl_cert_reqs=none".to_owned()),
        ("127.0.0.1", "ssl_cert_reqs=CERT_NONE".to_owned()),
    ] {
        let url = url(host, redis.port, &query);
        let check = check(&url, &["default"]);
        let (health, probe) = poll(&check).await;
        assert_eq!(health, ExecutorHealth::Healthy, "{url}: {probe:?}");
        assert_eq!(probe.brokers[0].status, BrokerStatus::Answered);
        assert_eq!(probe.brokers[0].queues[0].messages, Some(0));
        assert_eq!(
            check.instance(),
            format!("rediss://{host}:{}/0", redis.port),
            "the instance carries no query"
        );
    }
}

#[tokio::test]
async fn an_untrusted_certificate_is_named_as_such() {
    let pki = Pki::new("good");
    let rogue = Pki::new("rogue");
    let server = pki.server("server", &["127.0.0.1"]);
    let Some(redis) = tls_redis(&pki.ca_pem(), &server, "no", &[]) else {
        return;
    };
    // Another CA's bundle, and the system's roots (which never signed a test CA).
    for query in [
        ca_query(&rogue.ca_pem()),
        "ssl_cert_reqs=required".to_owned(),
    ] {
        let url = url("127.0.0.1", redis.port, &query);
        let reason = unhealthy_reason(&url).await;
        assert!(
            reason.starts_with(&format!("broker rediss://127.0.0.1:{}/0 ", redis.port))
                && reason.contains("untrusted certificate")
                && reason.contains("ssl_ca_certs"),
            "{reason}"
        );
    }
}

#[tokio::test]
async fn a_name_mismatch_is_named_and_ssl_check_hostname_false_allows_it() {
    let pki = Pki::new("good");
    let server = pki.server("server", &["broker.example"]);
    let Some(redis) = tls_redis(&pki.ca_pem(), &server, "no", &[]) else {
        return;
    };
    let url_ = url("127.0.0.1", redis.port, &ca_query(&pki.ca_pem()));
    let reason = unhealthy_reason(&url_).await;
    assert!(
        reason.contains("not valid for the name 127.0.0.1") && reason.contains("mismatch"),
        "{reason}"
    );
    let relaxed = format!("{url_}&ssl_check_hostname=false");
    let (health, probe) = poll(&check(&relaxed, &["default"])).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
}

#[tokio::test]
async fn an_expired_certificate_is_named_as_such() {
    let pki = Pki::new("good");
    let server = pki.expired_server("server", &["127.0.0.1"]);
    let Some(redis) = tls_redis(&pki.ca_pem(), &server, "no", &[]) else {
        return;
    };
    let reason = unhealthy_reason(&url("127.0.0.1", redis.port, &ca_query(&pki.ca_pem()))).await;
    assert!(reason.contains("expired certificate"), "{reason}");
}

#[tokio::test]
async fn client_certificates_missing_refused_and_accepted() {
    let pki = Pki::new("good");
    let rogue = Pki::new("rogue");
    let server = pki.server("server", &["127.0.0.1"]);
    let Some(redis) = tls_redis(&pki.ca_pem(), &server, "yes", &[]) else {
        return;
    };
    let base = url("127.0.0.1", redis.port, &ca_query(&pki.ca_pem()));

    let reason = unhealthy_reason(&base).await;
    assert!(
        reason.contains("client certificate"),
        "none given: {reason}"
    );

    let stranger = rogue.client("client");
    let with = |c: &Issued| {
        format!(
            "{base}&ssl_certfile={}&ssl_keyfile={}",
            c.cert.display(),
            c.key.display()
        )
    };
    let reason = unhealthy_reason(&with(&stranger)).await;
    assert!(
        reason.contains("refused the client certificate"),
        "another CA's: {reason}"
    );

    let (health, probe) = poll(&check(&with(&pki.client("client")), &["default"])).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");

    let missing = format!("{base}&ssl_certfile=/nonexistent/client.pem");
    let reason = unhealthy_reason(&missing).await;
    assert!(
        reason.contains("cannot read ssl_certfile /nonexistent/client.pem: no such file"),
        "{reason}"
    );
}

#[tokio::test]
async fn plain_tcp_behind_rediss_and_tls_behind_redis_each_say_so() {
    let pki = Pki::new("good");
    let Some(plain) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let reason = unhealthy_reason(&url("127.0.0.1", plain.port, &ca_query(&pki.ca_pem()))).await;
    assert!(
        reason.contains("did not complete the TLS handshake") && reason.contains("plain TCP"),
        "{reason}"
    );

    let server = pki.server("server", &["127.0.0.1"]);
    let Some(tls) = tls_redis(&pki.ca_pem(), &server, "no", &[]) else {
        return;
    };
    let reason = unhealthy_reason(&format!("redis://127.0.0.1:{}/0", tls.port)).await;
    assert!(reason.contains("rediss://"), "{reason}");
}

#[tokio::test]
async fn a_killed_and_restarted_tls_broker_flips_the_verdict_both_ways() {
    let pki = Pki::new("good");
    let server = pki.server("server", &["127.0.0.1"]);
    let Some(mut redis) = tls_redis(&pki.ca_pem(), &server, "no", &[]) else {
        return;
    };
    let check = check(
        &url("127.0.0.1", redis.port, &ca_query(&pki.ca_pem())),
        &["default"],
    );
    assert_eq!(poll(&check).await.0, ExecutorHealth::Healthy);
    // The pooled TLS connection is reused while the server lives.
    assert_eq!(poll(&check).await.0, ExecutorHealth::Healthy);

    redis.kill();
    let (health, probe) = poll(&check).await;
    let reason = probe.reason.clone().unwrap_or_default();
    assert!(
        matches!(health, ExecutorHealth::Unhealthy { .. }) && reason.contains("refused"),
        "{health:?} {probe:?}"
    );

    redis.resume().expect("the server starts again");
    let (health, probe) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
}

#[tokio::test]
async fn no_output_holds_the_password_of_a_tls_broker() {
    const PASSWORD: &str = "tls-s3cr3t:p@ss";
    const ENCODED: &str = "tls-s3cr3t%3Ap%40ss";
    let logs = support::Logs::capture();
    let pki = Pki::new("good");
    let rogue = Pki::new("rogue");
    let server = pki.server("server", &["127.0.0.1"]);
    let Some(redis) = tls_redis(&pki.ca_pem(), &server, "no", &["--requirepass", PASSWORD]) else {
        return;
    };
    let with = |password: &str, ca: &Path| {
        format!(
            "rediss://:{password}@127.0.0.1:{}/0?{}",
            redis.port,
            ca_query(ca)
        )
    };
    let mut shown = Vec::new();
    for (url, healthy) in [
        (with(ENCODED, &pki.ca_pem()), true),
        (with("wrong%40one", &pki.ca_pem()), false),
        (with(ENCODED, &rogue.ca_pem()), false),
    ] {
        let check = check(&url, &["default"]);
        let (health, probe) = poll(&check).await;
        assert_eq!(health == ExecutorHealth::Healthy, healthy, "{probe:?}");
        shown.push(format!("{health:?}"));
        shown.push(format!("{probe:?}"));
        shown.push(serde_json::to_string(&probe).expect("JSON"));
        shown.push(format!("{check:?}"));
        shown.push(check.instance().to_owned());
    }
    shown.push(logs.text());
    for text in &shown {
        for secret in [PASSWORD, ENCODED, "wrong@one", "wrong%40one"] {
            assert!(!text.contains(secret), "{secret} shown in: {text}");
        }
    }
}

#[tokio::test]
async fn broker_use_ssl_turns_tls_on_for_a_redis_url_as_airflows_ssl_settings_do() {
    let pki = Pki::new("good");
    let server = pki.server("server", &["127.0.0.1"]);
    let Some(redis) = tls_redis(&pki.ca_pem(), &server, "yes", &[]) else {
        return;
    };
    let client = pki.client("client");
    // What Airflow's [celery] ssl_active, ssl_key, ssl_cert, ssl_cacert become.
    let ssl = overseer_celery::TlsOptions {
        cert_reqs: Some(overseer_celery::CertReqs::Required),
        ca_certs: Some(pki.ca_pem().display().to_string()),
        certfile: Some(client.cert.display().to_string()),
        keyfile: Some(client.key.display().to_string()),
        check_hostname: None,
    };
    let url = format!("redis://127.0.0.1:{}/0", redis.port);
    let settings = overseer_celery::CheckSettings {
        poll_timeout: support::POLL_TIMEOUT,
        broker_use_ssl: Some(ssl),
        ..overseer_celery::CheckSettings::default()
    };
    let check = CeleryCheck::new(&overseer_celery::BrokerUrl::parse(&url).unwrap(), settings)
        .expect("valid settings");
    let (health, probe) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    assert_eq!(check.instance(), url);
}

#[tokio::test]
async fn a_tls_master_found_through_plain_sentinels_is_checked_over_tls() {
    let pki = Pki::new("good");
    let rogue = Pki::new("rogue");
    let server = pki.server("server", &["127.0.0.1"]);
    let Some(master) = tls_redis(&pki.ca_pem(), &server, "no", &[]) else {
        return;
    };
    let Some(sentinel) = ThrowawaySentinel::start("overseer-tls-master", master.port) else {
        return;
    };
    let url = |ca: &Path| {
        format!(
            "sentinel://127.0.0.1:{}/0?master_name=overseer-tls-master&{}",
            sentinel.port(),
            ca_query(ca)
        )
    };
    let (health, probe) = poll(&check(&url(&pki.ca_pem()), &["default"])).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    let reason = unhealthy_reason(&url(&rogue.ca_pem())).await;
    assert!(
        reason.contains(&format!(
            "broker sentinel://127.0.0.1:{}/0 ",
            sentinel.port()
        )) && reason.contains("untrusted certificate"),
        "{reason}"
    );
}
