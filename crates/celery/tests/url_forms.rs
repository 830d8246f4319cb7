//! Broker URLs: every form Celery accepts parses (and means what kombu 5.5 itself
//! makes of it), malformed ones give one clear line without the password, and the
//! parser never panics, whatever it is given.

use crate::support;

use std::time::Duration;

use overseer_celery::url::{AmqpBroker, CertReqs, RedisAddress, RedisBroker, Transport};
use overseer_celery::{
    AIRFLOW_DEFAULT_BROKER_URL, BrokerUrl, BrokerUrlError, CeleryCheck, CheckSettings,
};
use overseer_core::ExecutorHealth;
use overseer_core::secret::SecretUrl;
use proptest::prelude::*;

/// Every accepted form, and the instance identity it gets.
const ACCEPTED: &[(&str, &str)] = &[
    (AIRFLOW_DEFAULT_BROKER_URL, "redis://redis:6379/0"),
    ("redis://localhost:6379/0", "redis://localhost:6379/0"),
    ("redis://:s3cret@broker:6379/0", "redis://broker:6379/0"),
    (
        "redis://celery:s3cret@broker:6379/2",
        "redis://broker:6379/2",
    ),
    ("redis://celery@broker", "redis://broker"),
    ("redis://broker", "redis://broker"),
    ("redis://", "redis://"),
    ("redis://[::1]:6379/1", "redis://[::1]:6379/1"),
    ("redis://:p%40ss@broker:6379//3", "redis://broker:6379//3"),
    (
        "rediss://:pw@broker:6380/0?ssl_cert_reqs=CERT_REQUIRED",
        "rediss://broker:6380/0",
    ),
    (
        "rediss://broker:6380/0?ssl_cert_reqs=required&ssl_ca_certs=/etc/ca.pem",
        "rediss://broker:6380/0",
    ),
    ("rediss://broker:6380/0", "rediss://broker:6380/0"),
    (
        "redis+socket:///run/redis/redis.sock",
        "redis+socket:///run/redis/redis.sock",
    ),
    (
        "redis+socket://:pw@/run/redis/redis.sock?virtual_host=3",
        "redis+socket:///run/redis/redis.sock",
    ),
    (
        "sentinel://:pw@s1:26379/0?master_name=mymaster;sentinel://:pw@s2:26379/0",
        "sentinel://s1:26379/0;sentinel://s2:26379/0",
    ),
    (
        "sentinel://s1;sentinel://s2:26380",
        "sentinel://s1;sentinel://s2:26380",
    ),
    ("amqp://guest:guest@rabbit:5672//", "amqp://rabbit:5672//"),
    ("amqp://rabbit", "amqp://rabbit"),
    ("amqp://rabbit/", "amqp://rabbit/"),
    ("amqp://user:pw@rabbit:5672/prod", "amqp://rabbit:5672/prod"),
    ("amqp://user:pw@rabbit:5672/%2F", "amqp://rabbit:5672/%2F"),
    ("amqps://user:pw@rabbit:5671//", "amqps://rabbit:5671//"),
    ("pyamqp://user:pw@rabbit//prod", "pyamqp://rabbit//prod"),
    ("librabbitmq://rabbit//", "librabbitmq://rabbit//"),
    (
        "amqp://u:p@rabbit-1:5672//;amqp://u:p@rabbit-2:5672//",
        "amqp://rabbit-1:5672//;amqp://rabbit-2:5672//",
    ),
    (
        " redis://a:6379/0 ; redis://b:6379/0 ",
        "redis://a:6379/0;redis://b:6379/0",
    ),
    (
        "redis://a:6379/0;amqp://guest:guest@b//",
        "redis://a:6379/0;amqp://b//",
    ),
    ("sqs://AKIA:secretkey@", "sqs://"),
    ("filesystem://", "filesystem://"),
    ("memory://", "memory://"),
    (
        "sqla+postgresql://airflow:pw@db/airflow",
        "sqla+postgresql://db/airflow",
    ),
];

#[test]
fn every_accepted_form_parses_with_an_identity_free_of_credentials() {
    for (url, identity) in ACCEPTED {
        let parsed = BrokerUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(parsed.identity(), *identity, "{url}");
    }
}

#[test]
fn each_form_means_what_celery_means() {
    let only = |url: &str| {
        BrokerUrl::parse(url).unwrap().brokers()[0]
            .transport
            .clone()
    };
    let Transport::Redis(RedisBroker {
        address,
        db,
        username,
        password,
        tls,
    }) = only("redis://celery:s3cret@broker:6380/2")
    else {
        panic!("a Redis broker")
    };
    assert_eq!(
        address,
        RedisAddress::Tcp {
            host: "broker".into(),
            port: 6380
        }
    );
    assert_eq!((db, username.as_deref(), tls), (2, Some("celery"), None));
    assert_eq!(
        password.map(|p| p.expose_secret().to_owned()).as_deref(),
        Some("s3cret")
    );

    let Transport::Redis(socket) = only("redis+socket://:pw@/run/redis/redis.sock?virtual_host=3")
    else {
        panic!("a Redis broker")
    };
    assert_eq!(
        socket.address,
        RedisAddress::Unix("/run/redis/redis.sock".into())
    );
    assert_eq!(socket.db, 3);

    let Transport::Redis(tls) = only("rediss://broker:6380/0?ssl_cert_reqs=CERT_NONE") else {
        panic!("a Redis broker")
    };
    assert_eq!(tls.tls.unwrap().cert_reqs, Some(CertReqs::None));
    // kombu turns TLS on for any ssl_* parameter, whatever the scheme.
    let Transport::Redis(tls) = only("redis://broker/0?ssl_cert_reqs=optional") else {
        panic!("a Redis broker")
    };
    assert_eq!(tls.tls.unwrap().cert_reqs, Some(CertReqs::Optional));

    let Transport::Sentinel(sentinel) =
        only("sentinel://:pw@s1/1?master_name=mymaster;sentinel://s2:26380")
    else {
        panic!("a sentinel broker")
    };
    assert_eq!(
        sentinel.sentinels,
        [("s1".to_owned(), 26379), ("s2".to_owned(), 26380)]
    );
    assert_eq!(
        (sentinel.master_name.as_deref(), sentinel.db),
        (Some("mymaster"), 1)
    );

    let Transport::Amqp(AmqpBroker {
        host,
        port,
        vhost,
        username,
        tls,
        ..
    }) = only("amqps://celery:pw@rabbit//prod")
    else {
        panic!("an AMQP broker")
    };
    assert_eq!(
        (
            host.as_str(),
            port,
            vhost.as_str(),
            username.as_str(),
            tls.is_some()
        ),
        ("rabbit", 5671, "/prod", "celery", true)
    );
    assert_eq!(
        only("sqla+postgresql://db/airflow"),
        Transport::Unsupported {
            scheme: "sqla+postgresql".into()
        }
    );
    assert_eq!(
        BrokerUrl::parse("amqp://a;amqp://b")
            .unwrap()
            .brokers()
            .len(),
        2
    );
}

/// Malformed URLs and the exact line each gives: none quotes the URL or its password.
const MALFORMED: &[(&str, &str)] = &[
    ("", "broker URL is empty"),
    ("   ", "broker URL is empty"),
    (
        "redis://a:6379/0;",
        "broker URL 2 of 2: empty entry in the ';'-separated list (a stray ';'?)",
    ),
    (
        ";redis://a",
        "broker URL 1 of 2: empty entry in the ';'-separated list (a stray ';'?)",
    ),
    (
        "broker:6379",
        "broker URL: no scheme; expected a URL such as redis://host:6379/0 or amqp://host:5672//",
    ),
    (
        "redis:/:hunter2@broker:6379/0",
        "broker URL: no scheme; expected a URL such as redis://host:6379/0 or amqp://host:5672//",
    ),
    (
        "1redis://broker",
        "broker URL: the scheme is not a URL scheme (letters, digits, '+', '-', '.', starting with a letter)",
    ),
    (
        "redis://broker:65536/0",
        "broker URL (redis://): the port is not a number from 0 to 65535",
    ),
    (
        "redis://broker:port/0",
        "broker URL (redis://): the port is not a number from 0 to 65535",
    ),
    // A password with an unencoded '/' puts part of it where the port goes: never shown.
    (
        "redis://:hunter2/x@broker:6379/0",
        "broker URL (redis://): the port is not a number from 0 to 65535",
    ),
    (
        "amqp://guest:guest@rabbit:5672//;amqp://guest:hunter2@rabbit-2:56x2//",
        "broker URL 2 of 2 (amqp://): the port is not a number from 0 to 65535",
    ),
    (
        "redis://[::1:6379/0",
        "broker URL (redis://): the host is not valid (an IPv6 address is written [::1]:6379)",
    ),
    (
        "redis://broker:6379/zero",
        "broker URL (redis://): the Redis database (the URL's path) must be a whole number, as in redis://host:6379/0",
    ),
    (
        "redis://:hunter2@broker:6379/-1",
        "broker URL (redis://): the Redis database (the URL's path) must be a whole number, as in redis://host:6379/0",
    ),
    (
        "rediss://broker:6380/0?ssl_cert_reqs=maybe",
        "broker URL (rediss://): ssl_cert_reqs must be CERT_REQUIRED, CERT_OPTIONAL or CERT_NONE (or required, optional, none)",
    ),
    (
        "redis+socket://",
        "broker URL (redis+socket://): the socket's path is missing, as in redis+socket:///run/redis/redis.sock",
    ),
    (
        "redis+socket:///tmp/r.sock?virtual_host=x",
        "broker URL (redis+socket://): the Redis database (the URL's path) must be a whole number, as in redis://host:6379/0",
    ),
    (
        "sentinel://s1:26379;redis://broker:6379/0",
        "broker URL 2 of 2 (redis://): a sentinel:// list may hold only sentinel:// entries",
    ),
    (
        "redis://broker:6379/0;sentinel://s1:26379",
        "broker URL 2 of 2 (sentinel://): a sentinel:// list may hold only sentinel:// entries",
    ),
];

#[test]
fn malformed_urls_give_one_clear_line_without_the_password() {
    for (url, expected) in MALFORMED {
        let error = BrokerUrl::parse(url).expect_err(url);
        let line = error.to_string();
        assert_eq!(line, *expected, "{url}");
        assert!(!line.contains("hunter2"), "{url}");
        assert!(!line.contains('\n'), "{url}");
    }
    let long_vhost = format!("amqp://rabbit/{}", "v".repeat(256));
    assert_eq!(
        BrokerUrl::parse(&long_vhost).unwrap_err().to_string(),
        "broker URL (amqp://): the virtual host is longer than AMQP's 255 bytes"
    );
}

#[test]
fn the_constructor_rejects_what_can_never_be_checked() {
    let url = |text: &str| SecretUrl::new(text);
    let make = |u: &SecretUrl, queues: &[String]| {
        overseer_celery::executor(
            "CeleryExecutor",
            u,
            queues,
            false,
            0,
            Duration::from_secs(5),
        )
    };
    let default = ["default".to_owned()];
    assert_eq!(
        make(&url("sentinel://:hunter2@s1:26379;sentinel://s2"), &default).unwrap_err(),
        BrokerUrlError::MissingMasterName
    );
    assert_eq!(
        make(&url("sentinel://:hunter2@s1:26379;sentinel://s2"), &default)
            .unwrap_err()
            .to_string(),
        "broker URL (sentinel://): no master_name; add ?master_name=NAME to the URL, or set Celery's master_name transport option"
    );
    assert_eq!(
        make(&url("amqp://rabbit//"), &["q".repeat(256)])
            .unwrap_err()
            .to_string(),
        format!(
            "queue name {:?} is longer than AMQP's 255 bytes",
            "q".repeat(40)
        )
    );
    assert_eq!(
        make(&url("redis://broker"), &[String::new()])
            .unwrap_err()
            .to_string(),
        "a queue name is empty"
    );
    let executor = make(&url("redis://:hunter2@broker:6379/0"), &default).unwrap();
    assert_eq!(executor.executor_class, "CeleryExecutor");
    assert_eq!(executor.instance.as_deref(), Some("redis://broker:6379/0"));
    let executor = overseer_celery::executor_with(
        "alias:CeleryExecutor",
        &url("sentinel://s1;sentinel://s2"),
        CheckSettings {
            sentinel_master_name: Some("mymaster".into()),
            ..CheckSettings::default()
        },
    )
    .unwrap();
    assert_eq!(
        executor.instance.as_deref(),
        Some("sentinel://s1;sentinel://s2")
    );
}

#[tokio::test]
async fn a_transport_without_a_check_is_unknown_and_says_which() {
    for (url, reason) in [
        (
            "sqs://AKIA:hunter2@",
            "the sqs:// transport has no health check yet",
        ),
        (
            "filesystem://",
            "the filesystem:// transport has no health check yet",
        ),
        (
            "amqps://u:hunter2@rabbit:5671//?ssl_cert_reqs=CERT_NONE",
            "broker amqps://rabbit:5671//: ssl_cert_reqs=none or ssl_check_hostname=false over AMQP is not checked (the AMQP client always verifies the certificate and its name)",
        ),
    ] {
        let check =
            CeleryCheck::new(&BrokerUrl::parse(url).unwrap(), CheckSettings::default()).unwrap();
        check.start();
        let probe = check.probe().await;
        assert_eq!(
            probe.observation().health,
            ExecutorHealth::unknown(reason),
            "{url}"
        );
        assert_eq!(probe.reason.as_deref(), Some(reason), "{url}");
    }
}

#[test]
fn kombu_itself_agrees_on_host_port_credentials_and_virtual_host() {
    let Some(venv) = support::venv() else { return };
    let urls = [
        "amqp://h",
        "amqp://h/",
        "amqp://h//",
        "amqp://h/%2F",
        "amqp://h/prod",
        "amqp://h//prod",
        "amqp://h/a/b",
        "amqp://u:p%40x@H:5673/v%20h",
        "pyamqp://h:1234",
        "amqp://",
        "redis://",
        "redis://h",
        "redis://h/",
        "redis://h/3",
        "redis://h//3",
        "redis://:pw@h:6390/4",
        "redis://user:p:w@h/1",
        "redis://:p@ss@h",
        "redis://[::1]:6379/2",
        "redis://h:0/2",
    ];
    let out = std::process::Command::new(venv.join("bin/python"))
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/kombu_parse.py"))
        .args(urls)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = String::from_utf8(out.stdout).unwrap();
    for (url, line) in urls.iter().zip(lines.lines()) {
        let kombu: serde_json::Value = serde_json::from_str(line).unwrap();
        let text = |key: &str| kombu[key].as_str().map(str::to_owned);
        let port = kombu["port"].as_u64().map(|p| p as u16);
        match &BrokerUrl::parse(url).unwrap().brokers()[0].transport {
            Transport::Amqp(ours) => {
                assert_eq!(
                    Some(ours.host.clone()),
                    text("hostname").or(Some("localhost".into())),
                    "{url}"
                );
                assert_eq!(ours.port, port.unwrap_or(5672), "{url}");
                assert_eq!(
                    Some(ours.username.clone()),
                    text("userid").or(Some("guest".into())),
                    "{url}"
                );
                assert_eq!(
                    Some(ours.password.expose_secret().to_owned()),
                    text("password").or(Some("guest".into())),
                    "{url}"
                );
                assert_eq!(Some(ours.vhost.clone()), text("virtual_host"), "{url}");
            }
            Transport::Redis(ours) => {
                let RedisAddress::Tcp {
                    host,
                    port: our_port,
                } = &ours.address
                else {
                    panic!("{url}")
                };
                assert_eq!(
                    Some(host.clone()),
                    text("hostname").or(Some("127.0.0.1".into())),
                    "{url}"
                );
                assert_eq!(*our_port, port.unwrap_or(6379), "{url}");
                assert_eq!(
                    ours.password.as_ref().map(|p| p.expose_secret().to_owned()),
                    text("password"),
                    "{url}"
                );
                assert_eq!(Some(ours.db), kombu["db"].as_i64(), "{url}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    assert_eq!(lines.lines().count(), urls.len());
}

proptest! {
    #[test]
    fn the_parser_never_panics_on_any_text(text in ".*") {
        let _ = BrokerUrl::parse(&text);
    }

    #[test]
    fn the_parser_never_panics_on_url_shaped_text(
        scheme in "(redis|rediss|redis\\+socket|sentinel|amqp|amqps|pyamqp|sqs|x)",
        rest in "[a-z0-9:@/%?&=;.\\[\\]#+ _-]{0,40}",
    ) {
        let _ = BrokerUrl::parse(&format!("{scheme}://{rest}"));
    }

    #[test]
    fn a_password_never_shows_in_an_identity_or_an_error(
        scheme in "(redis|sentinel|amqp|pyamqp|sqs)",
        password in "[A-Za-z0-9]{8,16}",
        host in "[a-z0-9:/%?=\\[\\]@.-]{0,20}",
    ) {
        let url = format!("{scheme}://user:{password}@{host}");
        match BrokerUrl::parse(&url) {
            Ok(parsed) => prop_assert!(!parsed.identity().contains(&password)),
            Err(e) => prop_assert!(!e.to_string().contains(&password)),
        }
    }
}
