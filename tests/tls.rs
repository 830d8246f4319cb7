//! TLS end to end with the real binary: a `redis-server` of the test's own that
//! speaks only TLS and wants a client certificate, configured through Airflow's own
//! variables (`AIRFLOW__CELERY__SSL_*`), with certificates made at run time.

#[path = "../crates/celery/tests/support/certs.rs"]
mod certs;
use crate::support;

use certs::Pki;
use overseer_testkit::throwaway::ThrowawayRedis;
use serde_json::Value;
use support::{Serving, get, overseer, workdir};

const QUICK: &str = "[supervisor]\nhostname = \"sched-1\"\npoll_interval = \"500ms\"\npoll_timeout = \"400ms\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n";

/// GETs the health until the Celery executor's verdict satisfies `done`.
fn verdict_until(serving: &Serving, done: impl Fn(&Value) -> bool) -> Value {
    overseer_testkit::wait::until("the Celery executor's verdict", || {
        let (_, body) = get(&serving.url("/api/v2/monitor/health"));
        let json: Value = serde_json::from_str(&body).unwrap();
        let celery = json["executor"]["instances"].as_array().and_then(|i| {
            i.iter()
                .find(|i| i["executor"] == "CeleryExecutor")
                .cloned()
        });
        celery.filter(|c| done(c)).ok_or(json)
    })
}

/// A verdict that says something of the broker: not `unknown`, and not a poll
/// that ran out of time (on a loaded host a debug build's TLS handshake may
/// outlast the quick timeout; it is the next polls that answer).
fn judged(celery: &Value) -> bool {
    let reason = celery["reason"].as_str().unwrap_or_default();
    celery["health"] != "unknown"
        && !reason.contains("did not answer within")
        && !reason.contains("no reply within")
}

#[tokio::test]
async fn airflows_ssl_variables_check_a_tls_broker_and_its_password_shows_nowhere() {
    const PASSWORD: &str = "tls-broker-s3cret";
    let pki = Pki::new("airflow");
    let server = pki.server("server", &["localhost", "127.0.0.1"]);
    let Some(mut redis) = ThrowawayRedis::start_tls(
        &server.cert,
        &server.key,
        &pki.ca_pem(),
        "yes",
        &["--requirepass", PASSWORD],
    ) else {
        return;
    };
    let client = pki.client("client");
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    // A redis:// URL, as Airflow's own docs write it: ssl_active turns TLS on.
    let broker = format!("redis://:{PASSWORD}@localhost:{}/0", redis.port);
    let serving = Serving::start(
        overseer(dir.path())
            .env("RUST_LOG", "debug")
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env("AIRFLOW__CELERY__BROKER_URL", &broker)
            .env("AIRFLOW__CELERY__SSL_ACTIVE", "True")
            .env("AIRFLOW__CELERY__SSL_KEY", &client.key)
            .env("AIRFLOW__CELERY__SSL_CERT", &client.cert)
            .env("AIRFLOW__CELERY__SSL_CACERT", pki.ca_pem()),
    );
    let celery = verdict_until(&serving, judged);
    assert_eq!(celery["health"], "healthy", "{celery}");
    assert_eq!(
        celery["instance"],
        format!("redis://localhost:{}/0", redis.port)
    );

    redis.kill();
    let celery = verdict_until(&serving, |c| c["health"] == "unhealthy" && judged(c));
    let reason = celery["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("refused"), "{celery}");

    redis.resume().expect("the TLS server starts again");
    verdict_until(&serving, |c| c["health"] == "healthy");

    let (_, metrics) = get(&serving.url("/metrics"));
    let (_, health) = get(&serving.url("/api/v2/monitor/health"));
    let (code, logs) = serving.terminate();
    assert_eq!(code, Some(0));
    for text in [metrics, health, logs.join("\n")] {
        assert!(!text.contains(PASSWORD), "the password shows in: {text}");
    }
}

#[tokio::test]
async fn without_airflows_ca_the_tls_broker_is_untrusted_and_says_so() {
    let pki = Pki::new("airflow");
    let server = pki.server("server", &["127.0.0.1"]);
    let Some(redis) =
        ThrowawayRedis::start_tls(&server.cert, &server.key, &pki.ca_pem(), "no", &[])
    else {
        return;
    };
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env(
                "AIRFLOW__CELERY__BROKER_URL",
                format!("rediss://127.0.0.1:{}/0", redis.port),
            )
            .env("AIRFLOW__CELERY__SSL_ACTIVE", "True"),
    );
    let celery = verdict_until(&serving, judged);
    assert_eq!(celery["health"], "unhealthy", "{celery}");
    let reason = celery["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("untrusted certificate") && reason.contains("rediss://127.0.0.1"),
        "{celery}"
    );
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn the_api_served_over_tls_answers_overseer_health_with_its_ca() {
    let pki = Pki::new("api");
    let server = pki.server("api", &["localhost", "127.0.0.1"]);
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            "{QUICK}\n[api]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
            server.cert.display(),
            server.key.display()
        ),
    )
    .unwrap();
    let mut serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("OVERSEER_EXECUTORS", r#"[{name = "LocalExecutor"}]"#),
    );
    let line = serving.wait_for("overseer is running");
    let address = line
        .split("listening on https://")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| c.is_whitespace() || c == '"').next())
        .unwrap_or_else(|| panic!("no https:// address in {line:?}"))
        .to_owned();
    let port = address.rsplit(':').next().unwrap().to_owned();

    // By name and by address, both in the certificate.
    for host in ["localhost", "127.0.0.1"] {
        let url = format!("https://{host}:{port}");
        let out = support::run(
            overseer(dir.path())
                .args(["health", "--url", &url, "--json", "--cacert"])
                .arg(pki.ca_pem()),
        );
        // Exit 1: no scheduler heartbeats here, so the report is unhealthy; but
        // it was read, over TLS.
        assert_eq!(out.code, Some(1), "{url}: {}", out.stderr);
        assert!(out.stderr.is_empty(), "{url}: {}", out.stderr);
        let json: Value = serde_json::from_str(out.stdout.trim()).expect("the health JSON");
        assert_eq!(json["metadatabase"]["status"], "healthy", "{json}");
        assert_eq!(json["scheduler"]["status"], "unhealthy", "{json}");
    }

    // Without the CA (the system's roots never signed a test CA), it says why.
    let out = support::run(overseer(dir.path()).args([
        "health",
        "--url",
        &format!("https://127.0.0.1:{port}"),
    ]));
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stderr.contains("cannot reach https://127.0.0.1:")
            && out.stderr.contains("UnknownIssuer"),
        "{}",
        out.stderr
    );

    // Plain HTTP is not served beside it.
    let plain = ureq::get(&format!("http://127.0.0.1:{port}/api/v2/monitor/health"))
        .timeout(std::time::Duration::from_secs(5))
        .call();
    assert!(plain.is_err(), "plain HTTP answered on the TLS port");

    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

/// The README names `OVERSEER_API__TLS_CERT` and `OVERSEER_API__TLS_KEY`: set
/// only there, with no `overseer.toml` at all, they serve HTTPS; a certificate
/// path that is not there stops start-up with the variable named.
#[tokio::test]
async fn the_api_is_served_over_tls_from_the_environment_alone() {
    let pki = Pki::new("api-env");
    let server = pki.server("api", &["localhost", "127.0.0.1"]);
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    let mut serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("OVERSEER_API__TLS_CERT", &server.cert)
            .env("OVERSEER_API__TLS_KEY", &server.key)
            .env("OVERSEER_EXECUTORS", r#"[{name = "LocalExecutor"}]"#),
    );
    let line = serving.wait_for("overseer is running");
    assert!(
        line.contains("listening on https://"),
        "TLS from the environment was not served: {line}"
    );
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));

    let out = support::run(
        overseer(dir.path())
            .args(["serve", "--bind", "127.0.0.1:0"])
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("OVERSEER_API__TLS_CERT", "/nonexistent/api.pem")
            .env("OVERSEER_API__TLS_KEY", &server.key),
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert_eq!(
        out.stderr.trim().lines().last().unwrap_or_default(),
        "error: invalid configuration: api.tls_cert (from environment variable OVERSEER_API__TLS_CERT): cannot read /nonexistent/api.pem: no such file",
    );
}

/// `check_url` over `https://`: a real TLS server (an `overseer serve` with
/// its API over TLS, its certificate for `localhost` only) asked by another
/// Overseer's executors: healthy with `check_cacert`, and each failure said
/// plainly without it or by a name the certificate does not list.
#[tokio::test]
async fn an_https_check_url_is_verified_against_check_cacert() {
    let pki = Pki::new("probe");
    let server = pki.server("probe", &["localhost"]);
    let probed_db = overseer_testkit::sqlite().await;
    let probed_dir = workdir();
    std::fs::write(
        probed_dir.path().join("overseer.toml"),
        format!(
            "{QUICK}\n[api]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
            server.cert.display(),
            server.key.display()
        ),
    )
    .unwrap();
    let mut probed = Serving::start(
        overseer(probed_dir.path())
            .env("OVERSEER_DATABASE__URL", &probed_db.url)
            .env("OVERSEER_EXECUTORS", r#"[{name = "LocalExecutor"}]"#),
    );
    let line = probed.wait_for("overseer is running");
    let port = line
        .split("listening on https://")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| c.is_whitespace() || c == '"').next())
        .and_then(|address| address.rsplit(':').next())
        .unwrap_or_else(|| panic!("no https:// address in {line:?}"))
        .to_owned();

    let ca = pki.ca_pem().display().to_string();
    let path = "/api/v2/monitor/health?token=probe-s3cret";
    let executors = format!(
        r#"[{{name = "KubernetesExecutor", check_url = "https://localhost:{port}{path}", check_cacert = "{ca}"}},
            {{name = "my.company.UntrustedExecutor", check_url = "https://localhost:{port}{path}"}},
            {{name = "my.company.MisnamedExecutor", check_url = "https://127.0.0.1:{port}{path}", check_cacert = "{ca}"}}]"#
    );
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("OVERSEER_EXECUTORS", &executors),
    );
    let verdict = |name: &str, done: &dyn Fn(&Value) -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (_, body) = get(&serving.url("/api/v2/monitor/health"));
            assert!(!body.contains("probe-s3cret"), "{body}");
            let json: Value = serde_json::from_str(&body).unwrap();
            let found = json["executor"]["instances"]
                .as_array()
                .and_then(|i| i.iter().find(|i| i["executor"] == name).cloned());
            if let Some(found) = found.filter(|f| done(f)) {
                return found;
            }
            assert!(std::time::Instant::now() < deadline, "{name}: last {json}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let checked = |i: &Value| i["health"] != "unknown";
    let trusted = verdict("KubernetesExecutor", &checked);
    assert_eq!(trusted["health"], "healthy", "{trusted}");
    assert_eq!(
        trusted["instance"],
        format!("https://localhost:{port}/api/v2/monitor/health")
    );
    let untrusted = verdict("my.company.UntrustedExecutor", &checked);
    assert_eq!(
        untrusted["reason"],
        format!(
            "GET https://localhost:{port}/api/v2/monitor/health?token=*** failed: the server's \
             certificate is signed by no trusted CA (set check_cacert to the CA that issued it)"
        ),
        "{untrusted}"
    );
    let misnamed = verdict("my.company.MisnamedExecutor", &checked);
    assert_eq!(
        misnamed["reason"],
        format!(
            "GET https://127.0.0.1:{port}/api/v2/monitor/health?token=*** failed: the server's \
             certificate is not valid for the name 127.0.0.1 (host name mismatch)"
        ),
        "{misnamed}"
    );

    // A CA file that is not there stops start-up, naming the key and the file.
    let out = support::run(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env(
                "OVERSEER_EXECUTORS",
                format!(
                    r#"[{{name = "KubernetesExecutor", check_url = "https://localhost:{port}/", check_cacert = "/nonexistent/ca.pem"}}]"#
                ),
            )
            .arg("config"),
    );
    assert_eq!(out.code, Some(2), "{}", out.stdout);
    assert_eq!(
        out.stderr.trim(),
        "error: invalid configuration: executors[0].check_cacert (from environment variable OVERSEER_EXECUTORS): /nonexistent/ca.pem: no such file"
    );

    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
    let (code, _) = probed.terminate();
    assert_eq!(code, Some(0));
}
