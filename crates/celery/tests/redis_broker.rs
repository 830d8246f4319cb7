//! The Redis broker check against real servers: the machine's Redis with tasks the
//! real Celery client enqueued, and throwaway `redis-server`s that the tests kill,
//! restart, protect with a password or make a replica.

use crate::support;

use std::time::Duration;

use overseer_celery::{BrokerStatus, CeleryCheck, Probe};
use overseer_core::{ExecutorHealth, HealthCheck as _};
use support::{SilentListener, ThrowawayRedis, check};

async fn poll(check: &CeleryCheck) -> (ExecutorHealth, Probe) {
    support::poll_within(check, support::POLL_TIMEOUT).await
}

#[tokio::test]
async fn celery_enqueued_tasks_show_as_queue_depth_with_their_priority_lists() {
    if !support::redis_up() {
        return;
    }
    let Some(venv) = support::venv() else { return };
    let queue = support::unique_name("overseer-depth");
    let empty = support::unique_name("overseer-empty");
    support::send_tasks(&venv, support::REDIS_URL, &queue, 3, None);
    support::send_tasks(&venv, support::REDIS_URL, &queue, 2, Some(5));
    support::send_tasks(&venv, support::REDIS_URL, &queue, 1, Some(9));

    // Celery really spread them over kombu's priority lists: the test counts them all.
    let mut conn = support::redis_conn(support::REDIS_URL);
    let on_priority_lists: u64 = ["\x06\x163", "\x06\x166", "\x06\x169"]
        .iter()
        .map(|s| {
            redis::cmd("LLEN")
                .arg(format!("{queue}{s}"))
                .query::<u64>(&mut conn)
                .unwrap()
        })
        .sum();
    assert_eq!(on_priority_lists, 3, "tasks sent with priorities 5 and 9");

    let check = check(support::REDIS_URL, &[&queue, &empty]);
    let (health, probe) = poll(&check).await;
    support::delete_redis_queue(support::REDIS_URL, &queue);

    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    assert_eq!(probe.brokers.len(), 1);
    assert_eq!(probe.brokers[0].broker, "redis://127.0.0.1:6379/0");
    assert_eq!(probe.brokers[0].status, BrokerStatus::Answered);
    let depths: Vec<(&str, Option<u64>)> = probe.brokers[0]
        .queues
        .iter()
        .map(|q| (q.queue.as_str(), q.messages))
        .collect();
    assert_eq!(
        depths,
        [(queue.as_str(), Some(6)), (empty.as_str(), Some(0))]
    );
    assert_eq!(check.instance(), "redis://127.0.0.1:6379/0");
}

#[tokio::test]
async fn a_killed_broker_is_unhealthy_then_healthy_again_once_restarted() {
    let Some(mut server) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let check = check(&server.url(None, 0), &["default"]);
    assert_eq!(poll(&check).await.0, ExecutorHealth::Healthy);

    server.kill();
    let (health, _) = poll(&check).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "broker redis://127.0.0.1:{}/0 refused the connection",
            server.port
        ))
    );

    server.resume().expect("the server starts again");
    let (health, probe) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
}

/// A broker that answered, then runs out a poll's budget without a word: once
/// may be this host's slowness (a loaded CI machine kept the shared Redis from
/// answering within 810 ms for one poll), so the last verdict and its detail
/// stand for that poll; a second run out in a row is the broker's, and from
/// then on every poll names it with one reason until it answers again.
#[tokio::test]
async fn a_frozen_broker_is_named_at_its_second_silent_poll_and_never_healthy_after() {
    let Some(server) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let check = check(&server.url(None, 0), &["default"]);
    let (health, answered) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{answered:?}");
    assert_eq!(answered.brokers[0].queues[0].messages, Some(0));

    server.signal("STOP");
    let (health, held) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "one silent poll: {held:?}");
    let json = |probe: &Probe| serde_json::to_value(&probe.brokers).unwrap();
    assert_eq!(json(&held), json(&answered), "the last answer stands");
    assert!(held.checked_at > answered.checked_at, "{held:?}");

    let frozen = ExecutorHealth::unhealthy(format!(
        "broker redis://127.0.0.1:{}/0 did not answer within 1.8s",
        server.port
    ));
    for n in 0..3 {
        let (health, probe) = poll(&check).await;
        assert_eq!(health, frozen, "silent poll {}: {probe:?}", n + 2);
    }

    server.signal("CONT");
    let (health, probe) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "thawed: {probe:?}");
    // Late again after answering: once more, one poll is forgiven.
    server.signal("STOP");
    assert_eq!(poll(&check).await.0, ExecutorHealth::Healthy);
    assert_eq!(poll(&check).await.0, frozen);
    server.signal("CONT");
}

/// What the lost-work rule weighs beside the queues: the messages kombu holds
/// delivered unacknowledged (its `unacked` hash), and when the server started,
/// held still while its run is the same and moved by a restart, which empties
/// both (the server keeps nothing on disk, as the machine's Redis does not).
#[tokio::test]
async fn delivered_messages_and_the_broker_s_start_are_read_and_a_restart_moves_it() {
    let Some(mut server) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let url = server.url(None, 0);
    let mut conn = support::redis_conn(&url);
    for tag in ["tag-1", "tag-2"] {
        redis::cmd("HSET")
            .arg("unacked")
            .arg(tag)
            .arg("[{}, \"\", \"default\"]")
            .query::<()>(&mut conn)
            .unwrap();
    }
    redis::cmd("LPUSH")
        .arg("default")
        .arg("{}")
        .query::<()>(&mut conn)
        .unwrap();
    let check = check(&url, &["default"]);
    let (health, probe) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    let broker = &probe.brokers[0];
    assert_eq!(broker.delivered, Some(2), "{probe:?}");
    assert_eq!(broker.queues[0].messages, Some(1), "{probe:?}");
    let started = broker.started_at.expect("the start, from INFO server");
    assert!(
        chrono::Utc::now() - started < chrono::Duration::seconds(60),
        "{started}"
    );
    let detail = probe.detail();
    assert_eq!(detail.brokers.len(), 1, "{detail:?}");
    assert_eq!(detail.brokers[0].broker, url);
    assert_eq!(detail.brokers[0].delivered, Some(2));

    // The same run: the same start, to the second, whatever the uptime's rounding.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(poll(&check).await.1.brokers[0].started_at, Some(started));

    server.kill();
    server.resume().expect("the server starts again");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (health, probe) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    let broker = &probe.brokers[0];
    assert_eq!(broker.delivered, Some(0), "restarted empty: {probe:?}");
    assert_eq!(broker.queues[0].messages, Some(0), "{probe:?}");
    assert!(
        broker.started_at.expect("the new start") > started,
        "{probe:?}"
    );
}

/// A broker killed while a poll's connection waits for its first answer: its
/// kernel resets the connection, which is also how a TLS port ends plain bytes.
/// The port's refusal right after says which it was: the broker is down, and
/// the first poll's reason is the refusal every later poll gives, not a hint
/// about TLS (seen on a loaded host, where connects land inside kills).
#[tokio::test]
async fn a_broker_killed_under_a_poll_s_connection_is_refused_not_called_tls() {
    let Some(mut server) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let port = server.port;
    let refused = ExecutorHealth::unhealthy(format!(
        "broker redis://127.0.0.1:{port}/0 refused the connection"
    ));
    // Frozen, it answers nothing, but its kernel still completes connections.
    server.signal("STOP");
    let check = support::check_within(&server.url(None, 0), &["default"], Duration::from_secs(20));
    let polling = tokio::spawn(async move {
        check.start();
        (check.probe().await, check)
    });
    support::until_connected(port, Duration::from_secs(15)).await;
    server.kill();
    let (probe, check) = polling.await.expect("the poll ends");
    assert_eq!(probe.observation().health, refused, "{probe:?}");
    assert_eq!(check.get_health().await, refused, "the next poll");
}

#[tokio::test]
async fn a_wrong_or_missing_password_is_its_own_reason() {
    let Some(server) = ThrowawayRedis::start(&["--requirepass", "right-one"]) else {
        return;
    };
    let port = server.port;
    let (health, _) = poll(&check(&server.url(Some("wrong-one"), 0), &["default"])).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "broker redis://127.0.0.1:{port}/0 rejected the password"
        ))
    );
    let (health, _) = poll(&check(&server.url(None, 0), &["default"])).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "broker redis://127.0.0.1:{port}/0 requires a password, and the URL gives none"
        ))
    );
    let (health, _) = poll(&check(&server.url(Some("right-one"), 0), &["default"])).await;
    assert_eq!(health, ExecutorHealth::Healthy);
}

#[tokio::test]
async fn a_port_where_nothing_listens_refuses_the_connection() {
    let port = support::closed_port();
    let (health, _) = poll(&check(&format!("redis://127.0.0.1:{port}/0"), &["default"])).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "broker redis://127.0.0.1:{port}/0 refused the connection"
        ))
    );
}

#[tokio::test]
async fn a_broker_that_never_answers_times_out_inside_the_poll() {
    let silent = SilentListener::start();
    let check = check(
        &format!("redis://127.0.0.1:{}/0", silent.port),
        &["default"],
    );
    let expected = ExecutorHealth::unhealthy(format!(
        "broker redis://127.0.0.1:{}/0 did not answer within 1.8s",
        silent.port
    ));
    // Twice: the second poll must not be stuck behind the first.
    assert_eq!(poll(&check).await.0, expected);
    assert_eq!(poll(&check).await.0, expected);
}

#[tokio::test]
async fn a_read_only_replica_is_not_the_master_celery_needs() {
    let nowhere = support::closed_port().to_string();
    let Some(server) = ThrowawayRedis::start(&["--replicaof", "127.0.0.1", &nowhere]) else {
        return;
    };
    let (health, _) = poll(&check(&server.url(None, 0), &["default"])).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "broker redis://127.0.0.1:{}/0 is a read-only replica, not the master Celery sends tasks to",
            server.port
        ))
    );
}

#[tokio::test]
async fn a_failover_list_is_healthy_while_one_broker_answers_and_names_the_others() {
    let Some(server) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let down = support::closed_port();
    let url = format!("redis://127.0.0.1:{down}/0;{}", server.url(None, 0));
    let check = check(&url, &["default"]);
    assert_eq!(
        check.instance(),
        format!(
            "redis://127.0.0.1:{down}/0;redis://127.0.0.1:{}/0",
            server.port
        )
    );
    let (health, probe) = poll(&check).await;
    assert_eq!(health, ExecutorHealth::Healthy);
    assert_eq!(
        probe.reason.as_deref(),
        Some(
            format!(
                "healthy through failover; not answering: broker redis://127.0.0.1:{down}/0 refused the connection"
            )
            .as_str()
        )
    );

    let down2 = support::closed_port();
    let url = format!("redis://127.0.0.1:{down}/0;redis://127.0.0.1:{down2}/0");
    let (health, _) = poll(&check_with(&url)).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "broker redis://127.0.0.1:{down}/0 refused the connection; \
             broker redis://127.0.0.1:{down2}/0 refused the connection"
        ))
    );
}

fn check_with(url: &str) -> CeleryCheck {
    check(url, &["default"])
}

#[tokio::test]
async fn a_broker_loading_its_dataset_is_unhealthy_until_it_has_loaded() {
    // A dump of 1000 keys of 1 KiB, reloaded with Redis's own per-key load delay
    // (a hidden setting its test suite uses), keeps the server in LOADING for 10 s,
    // answering clients between keys.
    let Some(mut server) = ThrowawayRedis::start(&[
        "--enable-debug-command",
        "local",
        "--dbfilename",
        "dump.rdb",
        "--key-load-delay",
        "10000",
        "--loading-process-events-interval-bytes",
        "1024",
    ]) else {
        return;
    };
    let mut conn = support::redis_conn(&server.url(None, 0));
    redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(1000)
        .arg("key")
        .arg(1024)
        .exec(&mut conn)
        .expect("DEBUG POPULATE");
    redis::cmd("SAVE").exec(&mut conn).expect("SAVE");
    drop(conn);
    server.kill();
    server
        .resume()
        .expect("the server starts again and loads its dump");

    let check = check(&server.url(None, 0), &["default"]);
    let (health, probe) = poll(&check).await;
    assert_eq!(
        health,
        ExecutorHealth::unhealthy(format!(
            "broker redis://127.0.0.1:{}/0 is loading its dataset into memory and cannot serve yet (LOADING)",
            server.port
        )),
        "{probe:?}"
    );
    // Once loaded, it is healthy again (bounded: 1000 keys x 10 ms is 10 s).
    let mut polls = 0;
    while poll(&check).await.0 != ExecutorHealth::Healthy {
        polls += 1;
        assert!(polls < 60, "the server never finished loading");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn a_broker_on_a_unix_socket_is_reached_through_redis_socket_urls() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let socket = dir.path().join("redis.sock");
    let socket = socket.to_str().expect("a UTF-8 path");
    let Some(server) = ThrowawayRedis::start(&["--unixsocket", socket, "--unixsocketperm", "700"])
    else {
        return;
    };
    let queue = support::unique_name("overseer-socket");
    let mut conn = support::redis_conn(&server.url(None, 2));
    redis::cmd("LPUSH")
        .arg(&queue)
        .arg("a task")
        .exec(&mut conn)
        .unwrap();

    let url = format!("redis+socket://{socket}?virtual_host=2");
    let (health, probe) = poll(&check(&url, &[&queue])).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    assert_eq!(probe.brokers[0].broker, format!("redis+socket://{socket}"));
    assert_eq!(probe.brokers[0].queues[0].messages, Some(1));
}

/// A Redis ACL user made for an application, `+@all -@dangerous` (as the
/// Redis docs suggest): `ROLE` and `INFO` are refused to it. The check still
/// reads the queues and is healthy; the broker's start is unknown. A user also
/// refused `HLEN` leaves the delivered count unknown (the lost-work rule then
/// stays silent), never a broker fault. A user refused `LLEN` fails the check,
/// saying so.
#[tokio::test]
async fn an_application_acl_user_is_checked_with_what_it_may_run() {
    let Some(server) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let mut admin = support::redis_conn(&server.url(None, 0));
    for (user, rules) in [
        ("app", &["+@all", "-@dangerous"][..]),
        ("nohash", &["+@all", "-@dangerous", "-hlen"][..]),
        ("nolist", &["+@all", "-@dangerous", "-llen"][..]),
    ] {
        redis::cmd("ACL")
            .arg(&["SETUSER", user, "on", ">s3cret", "~*", "&*"][..])
            .arg(rules)
            .query::<()>(&mut admin)
            .unwrap();
    }
    redis::cmd("RPUSH")
        .arg(&["default", "m1", "m2"][..])
        .query::<()>(&mut admin)
        .unwrap();
    redis::cmd("HSET")
        .arg(&["unacked", "tag", "m0"][..])
        .query::<()>(&mut admin)
        .unwrap();
    let as_user = |user: &str| {
        server
            .url(None, 0)
            .replacen("redis://", &format!("redis://{user}:s3cret@"), 1)
    };

    let (health, probe) = poll(&check(&as_user("app"), &["default"])).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    let broker = &probe.brokers[0];
    assert_eq!(broker.queues[0].messages, Some(2), "{probe:?}");
    assert_eq!(
        broker.delivered,
        Some(1),
        "HLEN is no @dangerous command: {probe:?}"
    );
    assert_eq!(broker.started_at, None, "INFO refused: {probe:?}");

    let (health, probe) = poll(&check(&as_user("nohash"), &["default"])).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    assert_eq!(probe.brokers[0].queues[0].messages, Some(2), "{probe:?}");
    assert_eq!(probe.brokers[0].delivered, None, "HLEN refused: {probe:?}");

    let (health, probe) = poll(&check(&as_user("nolist"), &["default"])).await;
    assert_eq!(health.as_str(), "unhealthy", "{probe:?}");
    let reason = health.reason().unwrap_or_default();
    assert!(reason.contains("NOPERM"), "{reason}");
    assert!(!reason.contains("s3cret"), "{reason}");
}
