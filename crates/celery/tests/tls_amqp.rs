//! The RabbitMQ broker check over TLS (`amqps://`), against a RabbitMQ node of the
//! test's own: its own node name, ports, configuration file, database and log
//! folders in a temporary folder, a TLS listener with a certificate made at run
//! time, and a plain listener beside it; stopped by its process group when the test
//! ends. The machine's shared node (5672) and its configuration are never touched:
//! the new node registers with the shared `epmd` under its own name, which is how
//! Erlang nodes share a machine.
//!
//! One node is slow to start (several seconds), so one test walks every case.

use crate::certs;
use crate::support;

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use certs::{Issued, Pki};
use overseer_celery::{BrokerStatus, CeleryCheck, Probe};
use overseer_core::ExecutorHealth;
use support::{check, free_port};

/// How long a RabbitMQ node may take to open its listeners.
const START_DEADLINE: Duration = Duration::from_secs(120);
/// How long a stopped node may take to go.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// The check's timeout here: a TLS handshake with RabbitMQ on a busy machine.
const POLL_TIMEOUT: Duration = Duration::from_secs(4);

fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))
        .is_ok()
}

/// A RabbitMQ node of the test's own with a TLS listener (`tls_port`) and a plain
/// one (`plain_port`).
struct ThrowawayRabbit {
    child: Option<Child>,
    dir: tempfile::TempDir,
    tls_port: u16,
    plain_port: u16,
    dist_port: u16,
    node: String,
}

impl ThrowawayRabbit {
    fn start(server: &Issued, ca: &Path) -> Option<Self> {
        if !Path::new("/usr/lib/rabbitmq/bin/rabbitmq-server").exists() {
            return overseer_testkit::unavailable("rabbitmq-server", "not installed");
        }
        let dir = tempfile::Builder::new()
            .prefix("overseer-rabbit-")
            .tempdir()
            .expect("a temporary folder");
        let (tls_port, plain_port, dist_port) = (free_port(), free_port(), free_port());
        let config = format!(
            "listeners.tcp.1 = 127.0.0.1:{plain_port}\n\
             listeners.ssl.1 = 127.0.0.1:{tls_port}\n\
             ssl_options.cacertfile = {}\n\
             ssl_options.certfile = {}\n\
             ssl_options.keyfile = {}\n\
             ssl_options.verify = verify_none\n\
             ssl_options.fail_if_no_peer_cert = false\n",
            ca.display(),
            server.cert.display(),
            server.key.display()
        );
        std::fs::write(dir.path().join("rabbitmq.conf"), config).unwrap();
        std::fs::write(dir.path().join("enabled_plugins"), "[].\n").unwrap();
        std::fs::write(
            dir.path().join("rabbitmq-env.conf"),
            "ERL_EPMD_ADDRESS=127.0.0.1\n",
        )
        .unwrap();
        let mut rabbit = Self {
            child: None,
            node: format!("overseer-tls-{}-{tls_port}@localhost", std::process::id()),
            dir,
            tls_port,
            plain_port,
            dist_port,
        };
        match rabbit.resume() {
            Ok(()) => Some(rabbit),
            Err(e) => overseer_testkit::unavailable("a RabbitMQ node of the test's own", e),
        }
    }

    /// Starts the node (again), and waits until both listeners accept connections.
    fn resume(&mut self) -> Result<(), String> {
        let dir = self.dir.path();
        let child = Command::new("/usr/lib/rabbitmq/bin/rabbitmq-server")
            .env("HOME", dir)
            .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_NODE_PORT", self.plain_port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_PLUGINS_EXPAND_DIR", dir.join("plugins"))
            .env("ERL_FLAGS", "-kernel inet_dist_use_interface {127,0,0,1}")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("rabbitmq-server: {e}"))?;
        self.child = Some(child);
        let started = Instant::now();
        while !(port_open(self.tls_port) && port_open(self.plain_port)) {
            if started.elapsed() > START_DEADLINE {
                let log = std::fs::read_dir(dir.join("log"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                    .collect::<Vec<_>>()
                    .join("\n");
                self.kill();
                return Err(format!("the node did not open its listeners: {log}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Kills the node's process group (SIGKILL: as abrupt as a crash) and waits
    /// until its listeners are closed.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
        }
        let started = Instant::now();
        while (port_open(self.tls_port) || port_open(self.plain_port))
            && started.elapsed() < STOP_DEADLINE
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ThrowawayRabbit {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn poll(check: &CeleryCheck) -> (ExecutorHealth, Probe) {
    support::poll_within(check, POLL_TIMEOUT + Duration::from_secs(1)).await
}

fn amqp_check(url: &str) -> CeleryCheck {
    let broker = overseer_celery::BrokerUrl::parse(url).expect("a valid URL");
    CeleryCheck::new(
        &broker,
        overseer_celery::CheckSettings {
            queues: vec!["default".into()],
            poll_timeout: POLL_TIMEOUT,
            ..overseer_celery::CheckSettings::default()
        },
    )
    .expect("valid settings")
}

fn reason(probe: &Probe) -> String {
    probe.reason.clone().unwrap_or_default().into_string()
}

#[tokio::test]
async fn an_amqps_broker_healthy_with_its_ca_and_each_tls_failure_named() {
    const PASSWORD: &str = "guest";
    let logs = support::Logs::capture();
    let pki = Pki::new("rabbit");
    let rogue = Pki::new("rogue");
    let server = pki.server("server", &["127.0.0.1"]);
    let Some(mut rabbit) = ThrowawayRabbit::start(&server, &pki.ca_pem()) else {
        return;
    };
    let url = |host: &str, port: u16, ca: &Path| {
        format!(
            "amqps://guest:{PASSWORD}@{host}:{port}//?ssl_cert_reqs=required&ssl_ca_certs={}",
            ca.display()
        )
    };
    let mut shown = Vec::new();

    // The right CA: healthy, the queue's depth read over TLS.
    let good = amqp_check(&url("127.0.0.1", rabbit.tls_port, &pki.ca_pem()));
    let (health, probe) = poll(&good).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");
    assert_eq!(probe.brokers[0].status, BrokerStatus::Answered);
    assert_eq!(
        good.instance(),
        format!("amqps://127.0.0.1:{}//", rabbit.tls_port)
    );
    shown.push(format!("{probe:?}"));

    // Another CA: untrusted.
    let (health, probe) = poll(&amqp_check(&url(
        "127.0.0.1",
        rabbit.tls_port,
        &rogue.ca_pem(),
    )))
    .await;
    assert!(
        matches!(health, ExecutorHealth::Unhealthy { .. }),
        "{probe:?}"
    );
    assert!(
        reason(&probe).contains("untrusted certificate"),
        "{probe:?}"
    );
    shown.push(format!("{probe:?}"));

    // A name the certificate does not list.
    let (health, probe) = poll(&amqp_check(&url(
        "localhost",
        rabbit.tls_port,
        &pki.ca_pem(),
    )))
    .await;
    assert!(
        matches!(health, ExecutorHealth::Unhealthy { .. }),
        "{probe:?}"
    );
    assert!(reason(&probe).contains("host name mismatch"), "{probe:?}");
    shown.push(format!("{probe:?}"));

    // amqps:// at the plain port, and amqp:// at the TLS port.
    let (_, probe) = poll(&amqp_check(&url(
        "127.0.0.1",
        rabbit.plain_port,
        &pki.ca_pem(),
    )))
    .await;
    assert!(
        reason(&probe).contains("did not answer in TLS"),
        "{probe:?}"
    );
    shown.push(format!("{probe:?}"));
    let plain = check(
        &format!("amqp://guest:{PASSWORD}@127.0.0.1:{}//", rabbit.tls_port),
        &["default"],
    );
    let (_, probe) = poll(&plain).await;
    assert!(reason(&probe).contains("amqps://"), "{probe:?}");
    shown.push(format!("{probe:?}"));

    // Killed, then restarted: the pooled TLS connection flips both ways.
    rabbit.kill();
    let (health, probe) = poll(&good).await;
    assert!(
        matches!(health, ExecutorHealth::Unhealthy { .. })
            && reason(&probe)
                .starts_with(&format!("broker amqps://127.0.0.1:{}// ", rabbit.tls_port)),
        "{probe:?}"
    );
    // The pooled connection is gone now: the next poll finds nothing listening.
    let (_, probe) = poll(&good).await;
    assert!(
        reason(&probe).contains("refused the connection"),
        "{probe:?}"
    );
    rabbit.resume().expect("the node starts again");
    let (health, probe) = poll(&good).await;
    assert_eq!(health, ExecutorHealth::Healthy, "{probe:?}");

    shown.push(logs.text());
    for text in &shown {
        assert!(!text.contains(&format!(":{PASSWORD}@")), "{text}");
    }
}
