//! The RabbitMQ broker check against the machine's RabbitMQ, with tasks the real
//! Celery client enqueued; and against a closed port and a listener that never speaks.

use crate::support;

use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
use overseer_celery::{BrokerStatus, CeleryCheck, Probe, QueueDepth};
use std::time::Duration;

use overseer_core::{ExecutorHealth, HealthCheck as _};
use support::{SilentListener, check};

async fn poll(check: &CeleryCheck) -> (ExecutorHealth, Probe) {
    support::poll_within(check, support::POLL_TIMEOUT).await
}

/// Removes what Celery declared for `queue` (the queue and its direct exchange).
async fn delete_queue(queue: &str) {
    let conn = lapin::Connection::connect(support::RABBITMQ_URL, Default::default())
        .await
        .expect("RabbitMQ");
    let channel = conn.create_channel().await.expect("a channel");
    let _ = channel
        .queue_delete(queue.into(), QueueDeleteOptions::default())
        .await;
    let _ = channel
        .exchange_delete(queue.into(), ExchangeDeleteOptions::default())
        .await;
    let _ = conn.close(200, "OK".into()).await;
}

#[tokio::test]
async fn celery_enqueued_tasks_show_as_ready_messages_and_a_missing_queue_is_no_failure() {
    if !support::rabbitmq_up() {
        return;
    }
    let Some(venv) = support::venv() else { return };
    let queue = support::unique_name("overseer-depth");
    let missing = support::unique_name("overseer-missing");
    support::send_tasks(&venv, support::RABBITMQ_URL, &queue, 4, None);

    let check = check(support::RABBITMQ_URL, &[&queue, &missing]);
    let (health, probe) = poll(&check).await;
    // The pooled connection serves the next poll too.
    let (again, _) = poll(&check).await;
    delete_queue(&queue).await;

    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    assert_eq!(again, ExecutorHealth::Healthy);
    assert_eq!(check.instance(), "amqp://127.0.0.1:5672//");
    let broker = &probe.brokers[0];
    assert_eq!(broker.status, BrokerStatus::Answered);
    assert_eq!(
        broker.queues,
        [
            QueueDepth {
                queue: queue.clone(),
                messages: Some(4),
                consumers: Some(0),
                note: None
            },
            QueueDepth {
                queue: missing.clone(),
                messages: None,
                consumers: None,
                note: Some(
                    "the queue does not exist yet: no task was sent to it and no worker consumes it"
                        .into()
                )
            },
        ]
    );
}

#[tokio::test]
async fn a_wrong_password_is_access_refused() {
    if !support::rabbitmq_up() {
        return;
    }
    let (health, _) = poll(&check(
        "amqp://guest:not-the-password@127.0.0.1:5672//",
        &["default"],
    ))
    .await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(
            "broker amqp://127.0.0.1:5672// refused the user name or password (ACCESS_REFUSED)"
        )
    );
}

#[tokio::test]
async fn a_wrong_virtual_host_is_not_allowed() {
    if !support::rabbitmq_up() {
        return;
    }
    let (health, _) = poll(&check(
        "pyamqp://guest:guest@127.0.0.1:5672/overseer-no-such-vhost",
        &["default"],
    ))
    .await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(
            "broker pyamqp://127.0.0.1:5672/overseer-no-such-vhost refused access to virtual host \
             \"overseer-no-such-vhost\" (NOT_ALLOWED)"
        )
    );
}

#[tokio::test]
async fn a_port_where_nothing_listens_refuses_the_connection() {
    let port = support::closed_port();
    let (health, _) = poll(&check(
        &format!("amqp://guest:guest@127.0.0.1:{port}//"),
        &["default"],
    ))
    .await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "broker amqp://127.0.0.1:{port}// refused the connection"
        ))
    );
}

/// A listener that dies while a poll's connection waits for the AMQP greeting
/// (a listening socket closed with connections it never took: the kernel resets
/// them, as it does when a broker is killed): the port's refusal right after
/// says the broker is down; the TLS hint is kept for a port that still listens.
#[tokio::test]
async fn a_listener_that_dies_under_a_poll_s_connection_is_refused_not_called_tls() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    let check = support::check_within(
        &format!("amqp://guest:guest@127.0.0.1:{port}//"),
        &["default"],
        Duration::from_secs(20),
    );
    let polling = tokio::spawn(async move {
        check.start();
        (check.probe().await, check)
    });
    support::until_connected(port, Duration::from_secs(15)).await;
    drop(listener);
    let (probe, check) = polling.await.expect("the poll ends");
    let refused = ExecutorHealth::unhealthy(format!(
        "broker amqp://127.0.0.1:{port}// refused the connection"
    ));
    assert_eq!(probe.observation().health, refused, "{probe:?}");
    assert_eq!(check.get_health().await, refused, "the next poll");
}

#[tokio::test]
async fn a_broker_that_never_answers_times_out_inside_every_poll() {
    let silent = SilentListener::start();
    let check = check(
        &format!("amqp://guest:guest@127.0.0.1:{}//", silent.port),
        &["default"],
    );
    let expected = ExecutorHealth::unhealthy(format!(
        "broker amqp://127.0.0.1:{}// did not answer within 1.8s",
        silent.port
    ));
    // The second poll waits on the first's attempt instead of opening another.
    assert_eq!(poll(&check).await.0, expected);
    assert_eq!(poll(&check).await.0, expected);
}

/// A broker that came back is healthy at the next poll, although a poll while
/// it hung left a connection attempt behind that failed as it went: that
/// attempt's failure says what the broker was, not what it is.
#[tokio::test]
async fn a_broker_back_after_a_poll_timed_out_is_healthy_at_the_next_poll() {
    if !support::rabbitmq_up() {
        return;
    }
    // A listener that takes connections and says nothing: the broker hung.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = hung.local_addr().unwrap().port();
    let holding = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = hung.accept().await {
            held.push(stream);
        }
    });
    let check = check(
        &format!("amqp://guest:guest@127.0.0.1:{port}//"),
        &["default"],
    );
    let (health, _) = poll(&check).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "broker amqp://127.0.0.1:{port}// did not answer within 1.8s"
        ))
    );
    // The hung broker goes (its connections close, the attempt fails) and the
    // real one takes its port.
    holding.abort();
    let _ = holding.await;
    let back = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = back.accept().await {
            tokio::spawn(async move {
                let mut broker = tokio::net::TcpStream::connect("127.0.0.1:5672").await?;
                tokio::io::copy_bidirectional(&mut client, &mut broker).await
            });
        }
    });
    let (health, probe) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
}
