//! The Celery executor's result backend (issue 36, item 4), configured as
//! Airflow is (`AIRFLOW__CELERY__RESULT_BACKEND`), asked at each poll: a Redis
//! backend with a password, and a `db+postgresql` one, each a throwaway server
//! of the test's own, killed by its pid with every core saturated. The
//! executor turns unhealthy naming the backend (never its password), stays so
//! with one reason while it is down, and healthy once it is back.

use crate::support;

use std::time::{Duration, Instant};

use overseer_testkit::load::Saturation;
use overseer_testkit::throwaway::{ThrowawayPostgres, ThrowawayRedis};
use support::{Serving, celery, health, health_until, overseer, workdir};

const QUICK: &str = "[supervisor]\nhostname = \"sched-1\"\npoll_interval = \"1s\"\npoll_timeout = \"900ms\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n";
const LOADED_FOR: Duration = Duration::from_secs(120);
/// How long the dead backend is sampled.
const HOLD: Duration = Duration::from_secs(5);

/// `overseer serve` configured as Airflow is: the Celery executor on
/// `broker`, its result backend `backend` (quick intervals in `dir`'s
/// overseer.toml).
fn overseer_with(
    dir: &tempfile::TempDir,
    broker: &ThrowawayRedis,
    backend: &str,
) -> std::process::Command {
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let mut command = overseer(dir.path());
    command
        .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
        .env("AIRFLOW__CELERY__BROKER_URL", broker.url(None, 0))
        .env("AIRFLOW__CELERY__RESULT_BACKEND", backend);
    command
}

fn reason_of(json: &serde_json::Value) -> String {
    celery(json).map_or_else(String::new, |c| {
        c["reason"].as_str().unwrap_or_default().to_owned()
    })
}

/// Healthy, then the backend killed: unhealthy with `expected` as the reason,
/// held while it is down; `resume` brings it back: healthy.
fn judged_through_a_kill(
    serving: &Serving,
    expected: &str,
    kill: impl FnOnce(),
    resume: impl FnOnce(),
) {
    health_until(serving, "healthy with the backend up", |j| {
        celery(j).is_some_and(|c| c["health"] == "healthy")
    });
    let load = Saturation::start(LOADED_FOR);
    let killed = Instant::now();
    kill();
    let json = health_until(serving, "unhealthy, naming the result backend", |j| {
        celery(j).is_some_and(|c| c["health"] == "unhealthy")
    });
    eprintln!(
        "result backend: unhealthy {:.1?} after the kill",
        killed.elapsed()
    );
    assert_eq!(reason_of(&json), expected, "{json}");
    let held = Instant::now();
    while held.elapsed() < HOLD {
        let json = health(serving);
        assert_eq!(
            celery(&json).map(|c| c["health"].clone()),
            Some("unhealthy".into()),
            "{json}"
        );
        assert_eq!(reason_of(&json), expected, "one reason while it is down");
        std::thread::sleep(Duration::from_millis(250));
    }
    drop(load);
    resume();
    health_until(serving, "healthy with the backend back", |j| {
        celery(j).is_some_and(|c| c["health"] == "healthy")
    });
}

#[test]
fn a_redis_result_backend_that_dies_makes_the_executor_unhealthy_naming_it() {
    let Some(broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let password = "Backend%Secret-7";
    let Some(mut backend) = ThrowawayRedis::start(&["--requirepass", "Backend%Secret-7"]) else {
        return;
    };
    let url = backend.url(Some("Backend%25Secret-7"), 1);
    let shown = url.replace("Backend%25Secret-7", "***");
    let dir = workdir();
    let serving = Serving::start(overseer_with(&dir, &broker, &url).env("RUST_LOG", "debug"));
    let expected = format!("result backend {shown} does not answer");
    let port = backend.port;
    let backend_cell = std::cell::RefCell::new(&mut backend);
    judged_through_a_kill(
        &serving,
        &expected,
        || backend_cell.borrow_mut().kill(),
        || {
            backend_cell
                .borrow_mut()
                .resume()
                .expect("the backend restarts")
        },
    );
    let json = health(&serving).to_string();
    let (code, log) = serving.terminate();
    assert_eq!(code, Some(0));
    for (what, text) in [("the JSON", json), ("the log", log.join("\n"))] {
        assert!(!text.contains(password), "{what} shows the password");
        assert!(
            !text.contains("Backend%25Secret"),
            "{what} shows the password"
        );
    }
    assert!(
        log.iter()
            .any(|l| l.contains("the result backend does not answer") && l.contains(&shown)),
        "the failure is logged, naming the backend: {port}"
    );
}

#[test]
fn a_database_result_backend_that_dies_makes_the_executor_unhealthy_naming_it() {
    let Some(broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let postgres = match ThrowawayPostgres::start() {
        Ok(server) => server,
        Err(e) => {
            overseer_testkit::unavailable::<()>("a throwaway PostgreSQL server", e);
            return;
        }
    };
    // As Airflow writes it: a SQLAlchemy URL with its driver, behind `db+`.
    let url = format!(
        "db+{}",
        postgres
            .url()
            .replacen("postgres://", "postgresql+psycopg2://", 1)
    );
    let dir = workdir();
    let serving = Serving::start(&mut overseer_with(&dir, &broker, &url));
    judged_through_a_kill(
        &serving,
        &format!("result backend {url} does not answer"),
        || postgres.kill(),
        || postgres.resume().expect("the backend restarts"),
    );
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}
