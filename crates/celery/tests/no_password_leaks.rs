//! No password shows anywhere: a run against a password-protected throwaway Redis
//! (right and wrong password, with worker ping) and RabbitMQ with a wrong password,
//! with every log line at every level captured, then every verdict, reason, instance,
//! probe (as JSON and as `Debug`) and error searched for each password.

use crate::support;

use std::time::Duration;

use overseer_celery::{BrokerUrl, CeleryCheck, CheckSettings};
use overseer_core::secret::SecretUrl;
use support::{Logs, ThrowawayRedis};

/// Passwords no other text contains by chance.
const REDIS_PASSWORD: &str = "Rd-pw-4f7Qx9Lm2";
const WRONG_REDIS_PASSWORD: &str = "Rd-wrong-8Kp3Zt6";
const WRONG_RABBITMQ_PASSWORD: &str = "Mq-wrong-2Vh8Nc5";
const MALFORMED_URL_PASSWORD: &str = "Bad-url-6Yw1Rj4";

#[tokio::test]
async fn no_password_appears_in_logs_verdicts_reasons_instances_or_json() {
    let logs = Logs::capture();
    if !support::rabbitmq_up() {
        return;
    }
    let Some(server) = ThrowawayRedis::start(&["--requirepass", REDIS_PASSWORD]) else {
        return;
    };
    let mut shown = Vec::new();
    let urls = [
        server.url(Some(REDIS_PASSWORD), 0),
        server.url(Some(WRONG_REDIS_PASSWORD), 0),
        format!("amqp://guest:{WRONG_RABBITMQ_PASSWORD}@127.0.0.1:5672//"),
        // A failover list: the good Redis, and RabbitMQ with the wrong password.
        format!(
            "{};amqp://guest:{WRONG_RABBITMQ_PASSWORD}@127.0.0.1:5672//",
            server.url(Some(REDIS_PASSWORD), 0)
        ),
    ];
    let mut verdicts = Vec::new();
    for url in &urls {
        let check = CeleryCheck::new(
            &BrokerUrl::parse(url).unwrap(),
            CheckSettings {
                worker_ping: true,
                min_workers: 1,
                poll_timeout: Duration::from_secs(3),
                control_exchange: support::unique_name("overseer-ce"),
                ..CheckSettings::default()
            },
        )
        .unwrap();
        check.start();
        let probe = check.probe().await;
        let health = probe.observation().health;
        verdicts.push(health.as_str());
        shown.push(format!("{health:?}"));
        shown.extend(health.reason().map(str::to_owned));
        shown.push(check.instance().to_owned());
        shown.push(format!("{check:?}"));
        shown.push(format!("{probe:?}"));
        shown.push(serde_json::to_string(&probe).unwrap());
        let executor = overseer_celery::executor(
            "CeleryExecutor",
            &SecretUrl::new(url.clone()),
            &["default".into()],
            true,
            1,
            Duration::from_secs(3),
        )
        .unwrap();
        shown.push(format!("{executor:?}"));
        shown.push(executor.label());
    }
    // Each check really ran: the good Redis answered (no worker, so min_workers fails),
    // the wrong passwords were refused.
    assert_eq!(verdicts, ["unhealthy"; 4]);
    assert!(
        shown
            .iter()
            .any(|s| s.contains("0 of at least 1 workers answered ping"))
    );
    assert!(shown.iter().any(|s| s.contains("rejected the password")));
    assert!(shown.iter().any(|s| s.contains("ACCESS_REFUSED")));

    let malformed = format!("redis://:{MALFORMED_URL_PASSWORD}/x@broker:6379/0");
    let error = BrokerUrl::parse(&malformed).unwrap_err();
    shown.push(error.to_string());
    shown.push(format!("{error:?}"));
    let error = overseer_celery::executor(
        "CeleryExecutor",
        &SecretUrl::new(malformed),
        &[],
        false,
        0,
        Duration::from_secs(5),
    )
    .unwrap_err();
    shown.push(error.to_string());

    let logged = logs.text();
    // Our own debug line with the whole probe, and the drivers' own trace lines.
    assert!(logged.contains("celery check"), "{logged}");
    assert!(logged.contains("lapin"), "{logged}");
    for password in [
        REDIS_PASSWORD,
        WRONG_REDIS_PASSWORD,
        WRONG_RABBITMQ_PASSWORD,
        MALFORMED_URL_PASSWORD,
    ] {
        assert!(
            !logged.contains(password),
            "{password} in the logs:\n{logged}"
        );
        for text in &shown {
            assert!(!text.contains(password), "{password} in {text}");
        }
    }
}
