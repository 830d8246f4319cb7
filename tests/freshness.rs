//! Freshness, with the real binary (issue 14, item 3): this process's verdicts
//! reach `/api/v2/monitor/health` as soon as they are made, whatever the
//! heartbeat and refresh intervals, and while the metadata database is stopped
//! or frozen too.
//!
//! Each test asserts an order a user can see: the verdict on HTTP while the next
//! write and read are an hour away, or while the database is stopped or frozen.
//! How soon is the bench's to measure (`just bench`, section 3: broker death to
//! `unhealthy`); each test prints what it saw, from the client's side with its
//! own 20 ms reads, and asserts no durations.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use overseer_testkit::throwaway::{ThrowawayPostgres, ThrowawayRedis};
use serde_json::Value;
use support::{Serving, celery, get, health, health_until, overseer, workdir};

/// How often the client reads the health JSON while it waits: the resolution
/// of the measured times.
const READ_EVERY: Duration = Duration::from_millis(20);

/// The longest wait for anything that is not the measured freshness.
const PATIENCE: Duration = Duration::from_secs(60);

fn celery_health(json: &Value) -> Option<&str> {
    celery(json)?["health"].as_str()
}

/// `overseer serve` supervising one `CeleryExecutor` on `broker`, polled every
/// second, with the heartbeat and refresh intervals given.
fn serve(
    database: &str,
    broker: &str,
    heartbeat: &str,
    refresh: &str,
) -> (tempfile::TempDir, Serving) {
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            "[supervisor]\nhostname = \"sched-1\"\npoll_interval = \"1s\"\npoll_timeout = \"500ms\"\n\
             heartbeat_interval = \"{heartbeat}\"\nrefresh_interval = \"{refresh}\"\n"
        ),
    )
    .unwrap();
    let serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", database)
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env("AIRFLOW__CELERY__BROKER_URL", broker),
    );
    (dir, serving)
}

/// Reads the health every [`READ_EVERY`] until `done`, and returns how long
/// that took and the JSON that satisfied it (or panics after [`PATIENCE`]).
fn time_until(serving: &Serving, what: &str, done: impl Fn(&Value) -> bool) -> (Duration, Value) {
    let started = Instant::now();
    loop {
        let json = health(serving);
        if done(&json) {
            return (started.elapsed(), json);
        }
        assert!(started.elapsed() < PATIENCE, "{what}: last {json}");
        std::thread::sleep(READ_EVERY);
    }
}

/// `SELECT executor_health FROM job` on a throwaway server, `None` while it
/// does not answer.
fn table_health(postgres: &ThrowawayPostgres) -> Option<String> {
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &postgres.port.to_string(),
            "-U",
            "postgres",
            "-tAc",
        ])
        .arg("SELECT executor_health FROM job WHERE job_type = 'ExecutorJob' AND end_date IS NULL")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// With writes and reads an hour apart, a dead broker is `unhealthy` on HTTP
/// all the same, three kills in a row: the report shows this process's verdict
/// when it is made, not after the next flush and the next read (an hour away,
/// far past the test's patience).
#[test]
fn a_dead_broker_is_unhealthy_on_http_before_the_next_flush_and_read_an_hour_away() {
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let dir = workdir();
    let database = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("overseer.db").display()
    );
    let (_dir, serving) = serve(&database, &broker.url(None, 0), "1h", "1h");
    let mut measured = Vec::new();
    for kill in 1..=3 {
        health_until(&serving, "healthy before the kill", |j| {
            celery_health(j) == Some("healthy")
        });
        // At a different phase of the poll each time.
        std::thread::sleep(Duration::from_millis(300 * kill));
        let killed = Instant::now();
        broker.kill();
        let (_, json) = time_until(&serving, "unhealthy after the kill", |j| {
            celery_health(j) == Some("unhealthy")
        });
        let took = killed.elapsed();
        measured.push(took);
        assert_eq!(json["executor"]["status"], "unhealthy", "{json}");
        broker.resume().unwrap();
    }
    println!(
        "broker killed -> unhealthy on HTTP (heartbeat 1h, refresh 1h, poll 1s, timeout 500ms): \
         {measured:?}"
    );
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

/// Postgres stopped, then the broker killed: the executor reads `unhealthy`
/// (and `metadatabase` unhealthy) on HTTP and `/metrics` while Postgres is
/// still stopped, nothing can be written or read. When Postgres returns, the
/// verdict is in the table.
#[test]
fn with_postgres_stopped_a_dead_broker_is_unhealthy_on_http_and_in_the_table_after() {
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
    let (_dir, serving) = serve(&postgres.url(), &broker.url(None, 0), "5s", "1s");
    health_until(&serving, "healthy before the outage", |j| {
        celery_health(j) == Some("healthy") && j["metadatabase"]["status"] == "healthy"
    });

    postgres.kill();
    let stopped = Instant::now();
    broker.kill();
    let (_, json) = time_until(&serving, "unhealthy with the database stopped", |j| {
        celery_health(j) == Some("unhealthy") && j["metadatabase"]["status"] == "unhealthy"
    });
    let took = stopped.elapsed();
    println!(
        "Postgres stopped, broker killed -> executor and metadatabase unhealthy on HTTP after {took:?}"
    );
    assert_eq!(json["executor"]["status"], "unhealthy");
    let reason = celery(&json).unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, metrics) = get(&serving.url("/metrics"));
    assert!(
        metrics.lines().any(|l| l
            .starts_with("overseer_executor_health{executor=\"CeleryExecutor\"")
            && l.ends_with(" 0")),
        "{metrics}"
    );
    assert!(
        metrics.contains("overseer_component_healthy{component=\"metadatabase\"} 0"),
        "{metrics}"
    );

    postgres.resume().unwrap();
    let deadline = Instant::now() + PATIENCE;
    while table_health(&postgres).as_deref() != Some("unhealthy") {
        assert!(
            Instant::now() < deadline,
            "the verdict not in the table after the outage"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let json = health_until(&serving, "metadatabase healthy again", |j| {
        j["metadatabase"]["status"] == "healthy"
    });
    assert_eq!(celery(&json).unwrap()["reason"], reason.as_str());
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

/// The processes of a throwaway Postgres, stopped (`SIGSTOP`) by pid: a server
/// that holds its connections open and answers nothing. Dropping this lets
/// them go on, so that the server can be stopped afterwards.
struct Frozen(Vec<u32>);

impl Frozen {
    /// The postmaster and its children, stopped.
    fn freeze(postgres: &ThrowawayPostgres) -> Self {
        let postmaster = postgres.pid().expect("the postmaster's pid");
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid ...`: the fields after the command's parenthesis.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            if parent == Some(postmaster) {
                pids.push(pid);
            }
        }
        signal(&pids, "STOP");
        Self(pids)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(&self.0, "CONT");
    }
}

fn signal(pids: &[u32], name: &str) {
    for pid in pids {
        let _ = Command::new("kill")
            .args([&format!("-{name}"), &pid.to_string()])
            .status();
    }
}

/// Postgres frozen (its connections open, nothing answered): `metadatabase`
/// turns unhealthy while it is frozen (the read has a timeout of its own), and
/// a dead broker shows meanwhile.
#[test]
fn with_postgres_frozen_metadatabase_turns_unhealthy_and_verdicts_still_show() {
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
    let (_dir, serving) = serve(&postgres.url(), &broker.url(None, 0), "5s", "1s");
    health_until(&serving, "healthy before the freeze", |j| {
        celery_health(j) == Some("healthy") && j["metadatabase"]["status"] == "healthy"
    });

    let frozen = Frozen::freeze(&postgres);
    let (took, _) = time_until(&serving, "metadatabase unhealthy while frozen", |j| {
        j["metadatabase"]["status"] == "unhealthy"
    });
    // A refresh (1 s) and the read's timeout (1 s; 5 s when the read under way
    // is one of every live row, once every 10 s).
    println!("Postgres frozen -> metadatabase unhealthy on HTTP after {took:?}");

    let killed = Instant::now();
    broker.kill();
    time_until(&serving, "unhealthy with the database frozen", |j| {
        celery_health(j) == Some("unhealthy")
    });
    let took = killed.elapsed();
    println!("Postgres frozen, broker killed -> unhealthy on HTTP after {took:?}");

    drop(frozen);
    let deadline = Instant::now() + PATIENCE;
    while table_health(&postgres).as_deref() != Some("unhealthy") {
        assert!(
            Instant::now() < deadline,
            "the verdict not in the table after the freeze"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    health_until(&serving, "metadatabase healthy again", |j| {
        j["metadatabase"]["status"] == "healthy"
    });
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}
