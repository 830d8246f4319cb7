//! A broker reached through Redis Sentinel: throwaway master and sentinel servers.

use crate::support;

use std::time::Duration;

use overseer_celery::{BrokerStatus, BrokerUrl, CeleryCheck, CheckSettings, Probe};
use overseer_core::ExecutorHealth;
use support::{ThrowawayRedis, ThrowawaySentinel};

/// The supervisor's timeout in these tests: the check must answer within it.
const POLL_TIMEOUT: Duration = Duration::from_secs(2);

fn check(url: &str, master_name: Option<&str>) -> CeleryCheck {
    CeleryCheck::new(
        &BrokerUrl::parse(url).expect("a valid URL"),
        CheckSettings {
            poll_timeout: POLL_TIMEOUT,
            sentinel_master_name: master_name.map(str::to_owned),
            ..CheckSettings::default()
        },
    )
    .expect("valid settings")
}

async fn poll(check: &CeleryCheck) -> (ExecutorHealth, Probe) {
    support::poll_within(check, POLL_TIMEOUT).await
}

#[tokio::test]
async fn the_master_is_found_through_the_sentinels_that_answer() {
    let Some(master) = ThrowawayRedis::start(&["--requirepass", "master-pw"]) else {
        return;
    };
    let Some(sentinel) = ThrowawaySentinel::start("overseer-master", master.port) else {
        return;
    };
    let down = support::closed_port();
    // kombu's form: the first entry's password is the master's; the name is a transport option.
    let url = format!(
        "sentinel://:master-pw@127.0.0.1:{down}/0;sentinel://:master-pw@127.0.0.1:{}/0",
        sentinel.port()
    );
    let (health, probe) = poll(&check(&url, Some("overseer-master"))).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    assert_eq!(probe.brokers.len(), 1, "a sentinel list is one broker");
    assert_eq!(probe.brokers[0].status, BrokerStatus::Answered);
    assert_eq!(probe.brokers[0].queues[0].messages, Some(0));

    // A sentinel that hangs does not use up the poll: the next one is still asked.
    let silent = support::SilentListener::start();
    let url = format!(
        "sentinel://:master-pw@127.0.0.1:{}/0;sentinel://:master-pw@127.0.0.1:{}/0",
        silent.port,
        sentinel.port()
    );
    let (health, probe) = poll(&check(&url, Some("overseer-master"))).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");

    // The name may also ride on the URL itself.
    let url = format!(
        "sentinel://:master-pw@127.0.0.1:{}/0?master_name=overseer-master",
        sentinel.port()
    );
    assert_eq!(poll(&check(&url, None)).await.0, ExecutorHealth::Healthy);
}

#[tokio::test]
async fn unknown_masters_and_silent_sentinels_are_their_own_reasons() {
    let Some(master) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let Some(sentinel) = ThrowawaySentinel::start("overseer-master", master.port) else {
        return;
    };
    let url = format!("sentinel://127.0.0.1:{}/0", sentinel.port());
    let (health, _) = poll(&check(&url, Some("no-such-master"))).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "the sentinels of broker {url} know no master named \"no-such-master\""
        ))
    );

    let (a, b) = (support::closed_port(), support::closed_port());
    let url = format!("sentinel://127.0.0.1:{a};sentinel://127.0.0.1:{b}");
    let (health, _) = poll(&check(&url, Some("overseer-master"))).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "no sentinel of broker {url} answered: sentinel 127.0.0.1:{a} refused the connection; \
             sentinel 127.0.0.1:{b} refused the connection"
        ))
    );
}
