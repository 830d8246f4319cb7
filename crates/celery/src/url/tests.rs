//! The URL forms against kombu's own readings, and what never prints.

use super::*;

fn one(text: &str) -> Broker {
    let url = BrokerUrl::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(url.brokers().len(), 1, "{text}");
    url.brokers()[0].clone()
}

fn amqp(text: &str) -> AmqpBroker {
    match one(text).transport {
        Transport::Amqp(b) => b,
        other => panic!("{text}: {other:?}"),
    }
}

fn redis(text: &str) -> RedisBroker {
    match one(text).transport {
        Transport::Redis(b) => b,
        other => panic!("{text}: {other:?}"),
    }
}

#[test]
fn amqp_virtual_hosts_follow_kombu() {
    for (url, vhost) in [
        ("amqp://h", "/"),
        ("amqp://h/", "/"),
        ("amqp://h//", "/"),
        ("amqp://h/%2F", "/"),
        ("amqp://h/%2f", "/"),
        ("amqp://h/prod", "prod"),
        ("amqp://h//prod", "/prod"),
        ("amqp://h/a/b", "a/b"),
        ("amqp://h:5672/prod?heartbeat=10", "prod"),
        ("amqp://h/my%20vhost", "my vhost"),
    ] {
        assert_eq!(amqp(url).vhost, vhost, "{url}");
    }
}

#[test]
fn redis_databases_follow_kombu() {
    for (url, db) in [
        ("redis://h", 0),
        ("redis://h/", 0),
        ("redis://h//", 0),
        ("redis://h/3", 3),
        ("redis://h//3", 3),
        ("redis://h/%2F", 0),
        ("redis+socket:///tmp/r.sock?virtual_host=2", 2),
        ("redis+socket:///tmp/r.sock", 0),
    ] {
        assert_eq!(redis(url).db, db, "{url}");
    }
}

#[test]
fn defaults_are_kombus() {
    let b = amqp("amqp://");
    assert_eq!(
        (b.host.as_str(), b.port, b.username.as_str()),
        ("localhost", 5672, "guest")
    );
    assert_eq!(b.password.expose_secret(), "guest");
    assert_eq!(amqp("amqps://h").port, 5671);
    assert_eq!(
        redis("redis://").address,
        RedisAddress::Tcp {
            host: "127.0.0.1".into(),
            port: 6379
        }
    );
}

#[test]
fn brokers_that_differ_only_in_credentials_keep_identities_of_their_own() {
    let url = BrokerUrl::parse(
        "redis://:pw1@h:6379/0;redis://:pw2@h:6379/0;redis://u:pw3@h:6379/0?x=1;redis://g:6379/0",
    )
    .unwrap();
    let identities: Vec<&str> = url.brokers().iter().map(|b| b.identity.as_str()).collect();
    assert_eq!(
        identities,
        [
            "redis://h:6379/0",
            "redis://h:6379/0 (broker URL 2 of 4)",
            "redis://h:6379/0 (broker URL 3 of 4)",
            "redis://g:6379/0",
        ]
    );
    assert!(!url.identity().contains("pw"), "{}", url.identity());
    // A list without repeats is shown as written.
    let url = BrokerUrl::parse("amqp://u:p@a//;amqp://u:p@b//").unwrap();
    assert_eq!(url.identity(), "amqp://a//;amqp://b//");
}

#[test]
fn passwords_are_decoded_and_never_debug_printed() {
    let b = redis("redis://:p%40ss%3Aw@h:6379/0");
    assert_eq!(
        b.password.as_ref().map(Password::expose_secret),
        Some("p@ss:w")
    );
    assert!(!format!("{b:?}").contains("p@ss"));
    let b = redis("redis://:p@ss@h:6379/0");
    assert_eq!(
        b.password.as_ref().map(Password::expose_secret),
        Some("p@ss")
    );
}
