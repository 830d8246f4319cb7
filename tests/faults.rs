//! Faults, each with the real binary: the metadata database away for 20 s while
//! the broker dies, SIGTERM, and a restart after `kill -9` with no ghost.

use crate::support;

use std::time::{Duration, Instant};

use overseer_testkit::load::Saturation;
use overseer_testkit::throwaway::{ThrowawayPostgres, ThrowawayRedis};
use support::{Serving, celery, health, health_until, overseer, workdir};

/// The bound on the load generator's processes, should a test die first: the
/// broker's death is judged with every core busy, as on a scheduler's host.
const LOADED_FOR: Duration = Duration::from_secs(120);

/// Quick intervals: a poll every 500 ms, writes every 200 ms, reads every 100 ms.
const QUICK: &str = "[supervisor]\nhostname = \"sched-1\"\npoll_interval = \"500ms\"\npoll_timeout = \"400ms\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n";

#[test]
fn the_metadata_database_away_for_20s_loses_no_verdict() {
    let postgres = match ThrowawayPostgres::start() {
        Ok(server) => server,
        Err(e) => {
            overseer_testkit::unavailable::<()>("a throwaway PostgreSQL server", e);
            return;
        }
    };
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", postgres.url())
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env("AIRFLOW__CELERY__BROKER_URL", broker.url(None, 0)),
    );
    health_until(&serving, "healthy before the outage", |j| {
        celery(j).is_some_and(|c| c["health"] == "healthy")
    });

    // The database goes away, and while it is away the broker dies too.
    let outage = Instant::now();
    postgres.kill();
    broker.kill();
    health_until(
        &serving,
        "metadatabase unhealthy while the database is away",
        |j| j["metadatabase"]["status"] == "unhealthy",
    );
    // The service keeps answering through the whole outage.
    while outage.elapsed() < Duration::from_secs(20) {
        assert_eq!(health(&serving)["metadatabase"]["status"], "unhealthy");
        std::thread::sleep(Duration::from_millis(500));
    }
    postgres.resume().unwrap();

    // The verdict made during the outage reaches the table and the report.
    let json = health_until(
        &serving,
        "the verdict made during the outage, read back",
        |j| {
            j["metadatabase"]["status"] == "healthy"
                && celery(j).is_some_and(|c| c["health"] == "unhealthy")
        },
    );
    let reason = celery(&json).unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(reason.contains(&broker.url(None, 0)), "{reason}");

    let (code, log) = serving.terminate();
    assert_eq!(code, Some(0));
    let failures = log
        .iter()
        .filter(|l| l.contains("cannot write to the database"))
        .count();
    assert_eq!(
        failures, 1,
        "one log line per outage, not one per retry: {log:#?}"
    );
    let rows = std::process::Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &postgres.port.to_string(),
            "-U",
            "postgres",
            "-tAc",
        ])
        .arg("SELECT state || ' ' || executor_health FROM job WHERE job_type = 'ExecutorJob'")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&rows.stdout).trim(),
        "success unhealthy"
    );
}

/// SIGTERM: the service ends both rows as `success` before it exits 0 (how
/// fast is the bench's to measure, not a test's to bound).
#[tokio::test]
async fn sigterm_ends_the_rows_with_success() {
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let mut serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env(
                "AIRFLOW__CORE__EXECUTOR",
                "LocalExecutor,team:my.company.BatchExecutor",
            ),
    );
    health_until(&serving, "both rows", |j| {
        j["executor"]["instances"]
            .as_array()
            .is_some_and(|i| i.len() == 2)
    });
    let ended = "SELECT state FROM job WHERE job_type = 'ExecutorJob' AND end_date IS NOT NULL";
    assert!(
        db.strings(ended).await.is_empty(),
        "rows ended while running"
    );

    let status = std::process::Command::new("kill")
        .args(["-TERM", &serving.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(serving.child.wait().unwrap().code(), Some(0));
    assert_eq!(db.strings(ended).await, ["success", "success"]);
}

/// SIGTERM while another process holds the SQLite file locked (`BEGIN
/// EXCLUSIVE`, for 6 s): the last write is asked again until the lock goes,
/// and the rows end `success`; they are not left `running` for the next start.
#[tokio::test]
async fn sigterm_against_a_locked_database_still_ends_the_rows() {
    let dir = workdir();
    let file = dir.path().join("locked.db");
    let url = format!("sqlite://{}?mode=rwc", file.display());
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let mut serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &url)
            .env("AIRFLOW__CORE__EXECUTOR", "LocalExecutor"),
    );
    health_until(&serving, "the row", |j| {
        j["executor"]["instances"]
            .as_array()
            .is_some_and(|i| i.len() == 1)
    });
    // Python's sqlite3 holds the lock, and says when it has it.
    let mut holder = std::process::Command::new("python3")
        .args([
            "-c",
            concat!(
                "import sqlite3, sys, time\n",
                "c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n",
                "c.execute('BEGIN EXCLUSIVE')\n",
                "print('locked', flush=True)\n",
                "time.sleep(6)\n",
                "c.execute('COMMIT')\n",
            ),
        ])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 holds the lock");
    let mut said = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut said,
    )
    .unwrap();
    assert_eq!(said.trim(), "locked");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &serving.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(serving.child.wait().unwrap().code(), Some(0));
    holder.wait().unwrap();
    let db = sea_orm::Database::connect(&url).await.unwrap();
    let states: Vec<String> = sea_orm::ConnectionTrait::query_all_raw(
        &db,
        sea_orm::Statement::from_string(
            sea_orm::DbBackend::Sqlite,
            "SELECT state FROM job WHERE job_type = 'ExecutorJob'",
        ),
    )
    .await
    .unwrap()
    .iter()
    .map(|row| row.try_get::<String>("", "state").unwrap())
    .collect();
    assert_eq!(states, ["success"]);
}

#[tokio::test]
async fn after_kill_9_the_restarted_service_reports_no_ghost() {
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let serve = || {
        let mut command = overseer(dir.path());
        command
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("AIRFLOW__CORE__EXECUTOR", "LocalExecutor");
        command
    };
    let mut crashed = Serving::start(&mut serve());
    health_until(&crashed, "a first verdict", |j| {
        j["executor"]["instances"][0]["checked_at"].is_string()
    });
    std::process::Command::new("kill")
        .args(["-KILL", &crashed.child.id().to_string()])
        .status()
        .unwrap();
    let _ = crashed.child.wait();

    // Restarted at once, while the crashed row's heartbeat is still fresh.
    let restarted = Serving::start(&mut serve());
    let json = health_until(&restarted, "one instance", |j| {
        j["executor"]["instances"]
            .as_array()
            .is_some_and(|i| i.len() == 1)
    });
    // One instance, with no verdict yet (LocalExecutor has no check): no
    // ghost makes it degraded.
    assert_eq!(
        json["executor"]["detailed_status"], "unknown",
        "no ghost makes it degraded: {json}"
    );
    // Not checked yet, nothing is said healthy (null, as Airflow writes a
    // component it knows nothing of); checked (`unknown`: no check for
    // LocalExecutor), it is not dead.
    let checked = json["executor"]["instances"][0]["checked_at"].is_string();
    let expected = if checked {
        "healthy".into()
    } else {
        serde_json::Value::Null
    };
    assert_eq!(json["executor"]["status"], expected, "{json}");
    assert_eq!(
        db.strings("SELECT state FROM job WHERE job_type = 'ExecutorJob' ORDER BY id")
            .await,
        ["failed", "running"]
    );
}

/// With an hour between polls, `overseer serve` on Airflow's environment with
/// the Celery broker `broker_url`, healthy at its first poll: afterwards, only
/// an alarm polls again.
fn serving_with_an_hour_between_polls(broker_url: &str) -> (tempfile::TempDir, Serving) {
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        "[supervisor]\npoll_interval = \"1h\"\npoll_timeout = \"5s\"\n\
         heartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n",
    )
    .unwrap();
    let serving = Serving::start(
        overseer(dir.path())
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env("AIRFLOW__CELERY__BROKER_URL", broker_url),
    );
    health_until(&serving, "healthy at the first poll", |j| {
        celery(j).is_some_and(|c| c["health"] == "healthy")
    });
    (dir, serving)
}

/// Waits for the executor to turn `health` (`what` says why): its verdict.
fn celery_until(serving: &Serving, what: &str, health: &str) -> serde_json::Value {
    let json = health_until(serving, what, |j| {
        celery(j).is_some_and(|c| c["health"] == health)
    });
    celery(&json).unwrap().clone()
}

/// A broker's death is seen the moment it happens, not at the next tick: with
/// an hour between polls, the broker killed (SIGKILL) turns the executor
/// unhealthy on HTTP at once, through the connection Overseer holds to it; and
/// its return turns it healthy at once too.
#[test]
fn a_broker_that_dies_between_polls_is_unhealthy_at_once_and_its_return_healthy() {
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let (_dir, serving) = serving_with_an_hour_between_polls(&broker.url(None, 0));
    let _load = Saturation::start(LOADED_FOR);
    broker.kill();
    let verdict = celery_until(
        &serving,
        "unhealthy without waiting for a tick",
        "unhealthy",
    );
    let reason = verdict["reason"].as_str().unwrap();
    assert!(
        reason.contains(&broker.url(None, 0)),
        "names the broker: {reason}"
    );
    broker.resume().unwrap();
    celery_until(&serving, "healthy again once the broker is back", "healthy");
}

/// A TCP proxy of the test's own in front of the machine's RabbitMQ: killing it
/// is, to Overseer, the broker dying (every connection through it closes, and
/// its port refuses); started again on the same port, the broker is back. The
/// machine's RabbitMQ itself is never touched.
struct BrokerProxy {
    port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    runtime: tokio::runtime::Runtime,
}

impl BrokerProxy {
    fn start(port: u16) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))
            .expect("the proxy's port");
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        runtime.spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((mut client, _)) = accepted else { continue };
                        connections.spawn(async move {
                            if let Ok(mut broker) = tokio::net::TcpStream::connect("127.0.0.1:5672").await {
                                let _ = tokio::io::copy_bidirectional(&mut client, &mut broker).await;
                            }
                        });
                    }
                }
            }
            // Dropping the tasks closes every connection through the proxy.
            connections.abort_all();
        });
        Self {
            port,
            stop: Some(stop),
            runtime,
        }
    }

    fn kill(mut self) -> u16 {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let port = self.port;
        self.runtime.shutdown_timeout(Duration::from_secs(5));
        port
    }
}

/// The same on RabbitMQ: an hour between polls, the broker's connections
/// closed, and the verdict is unhealthy at once; back, healthy at once.
#[test]
fn a_rabbitmq_broker_that_dies_between_polls_is_unhealthy_at_once() {
    if std::net::TcpStream::connect("127.0.0.1:5672").is_err() {
        overseer_testkit::unavailable::<()>("RabbitMQ", "127.0.0.1:5672 refuses connections");
        return;
    }
    let proxy = BrokerProxy::start(overseer_testkit::throwaway::free_port());
    let broker = format!("amqp://guest:guest@127.0.0.1:{}//", proxy.port);
    let (_dir, serving) = serving_with_an_hour_between_polls(&broker);
    let _load = Saturation::start(LOADED_FOR);
    let port = proxy.kill();
    celery_until(
        &serving,
        "unhealthy without waiting for a tick",
        "unhealthy",
    );
    let _proxy = BrokerProxy::start(port);
    celery_until(&serving, "healthy again once the broker is back", "healthy");
}

/// A broker that dies again soon after a long outage is seen at once too. The
/// outage (10 s) leaves the broker's watch waiting seconds between attempts
/// to reconnect; once the broker is back, the first poll that reaches it
/// must wake the watch, or a death before the watch's next attempt goes
/// unseen until the next tick (an hour here). The polls come from a second
/// broker of Celery's failover list (`redis://a;redis://b`), whose death and
/// return each bring one.
#[test]
fn a_broker_that_dies_again_soon_after_a_long_outage_is_seen_at_once() {
    let Some(mut first) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let Some(mut second) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let (first_url, second_url) = (first.url(None, 0), second.url(None, 0));
    let (_dir, serving) = serving_with_an_hour_between_polls(&format!("{first_url};{second_url}"));
    // Healthy through failover, and naming the broker that does not answer.
    let not_answering = |broker: &str| {
        let broker = broker.to_owned();
        move |j: &serde_json::Value| {
            celery(j).is_some_and(|c| {
                c["health"] == "healthy"
                    && c["reason"].as_str().is_some_and(|r| {
                        r.starts_with("healthy through failover; not answering: ")
                            && r.contains(&broker)
                    })
            })
        }
    };

    first.kill();
    health_until(
        &serving,
        "the first broker's death seen",
        not_answering(&first_url),
    );
    std::thread::sleep(Duration::from_secs(10));
    first.resume().unwrap();
    // Nothing tells Overseer the first broker is back but a poll: the
    // second broker's death brings one, and its return another.
    second.kill();
    let json = health_until(
        &serving,
        "the second broker's death seen, the first answering",
        not_answering(&second_url),
    );
    let reason = celery(&json).unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!reason.contains(&first_url), "the first answers: {reason}");
    second.resume().unwrap();
    health_until(&serving, "both brokers answering", |j| {
        celery(j).is_some_and(|c| c["health"] == "healthy" && c["reason"].is_null())
    });

    first.kill();
    health_until(
        &serving,
        "the first broker's second death seen without waiting for a tick",
        not_answering(&first_url),
    );
}

/// A broker that serves Celery but refuses the watch's command (an ACL
/// without `BLPOP`): every watch connection ends at once and rings for a
/// poll, and every poll finds the broker answering. The polls' answers must
/// not bring the watch straight back each time, or the two feed each other
/// in a loop: the watch retries at its back-off's pace (rings at about 0.5,
/// 1.5, 3.5 s), and the executor stays healthy.
#[test]
fn a_broker_that_refuses_the_watch_is_not_polled_in_a_loop() {
    let Some(broker) = ThrowawayRedis::start(&[
        "--user", "default", "on", "nopass", "~*", "&*", "+@all", "-blpop",
    ]) else {
        return;
    };
    let (_dir, serving) = serving_with_an_hour_between_polls(&broker.url(None, 0));
    let polls = || {
        let (_, body) = support::get(&serving.url("/metrics"));
        body.lines()
            .find(|l| l.starts_with(r#"overseer_polls_total{executor="CeleryExecutor""#))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .expect("the executor's poll counter")
    };
    let before = polls();
    std::thread::sleep(Duration::from_secs(5));
    let during = polls() - before;
    assert!(
        during <= 8.0,
        "{during} polls in 5 s with an hour between polls: the watch and the polls feed each other"
    );
    let json = health(&serving);
    assert_eq!(celery(&json).unwrap()["health"], "healthy", "{json}");
}
