//! `overseer health` and `overseer jobs check`, as probes and people use them.

use crate::support;

use chrono::Utc;
use overseer_testkit::TestDb;
use support::{Run, Serving, overseer, run, workdir};

async fn migrated_sqlite() -> TestDb {
    use overseer_migration::{Migrator, MigratorTrait};
    let db = overseer_testkit::sqlite().await;
    Migrator::up(&db.conn, None).await.unwrap();
    db
}

/// A running scheduler row on `host` whose heartbeat is `age` seconds old, in
/// the naive UTC text Airflow stores in SQLite.
async fn scheduler(db: &TestDb, host: &str, age: i64) {
    let at = (Utc::now() - chrono::Duration::seconds(age)).format("%Y-%m-%d %H:%M:%S%.6f");
    db.execute_script(&format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, unixname) \
         VALUES ('running', 'SchedulerJob', '{at}', '{at}', '{host}', 'airflow')"
    ))
    .await;
}

fn jobs_check(db: &TestDb, args: &[&str]) -> Run {
    let dir = workdir();
    run(overseer(dir.path())
        .env("OVERSEER_DATABASE__URL", &db.url)
        .env("OVERSEER_SUPERVISOR__HOSTNAME", "sched-1")
        .args(["jobs", "check"])
        .args(args))
}

#[tokio::test]
async fn jobs_check_has_airflows_semantics_and_exit_codes() {
    let db = migrated_sqlite().await;
    scheduler(&db, "sched-1", 1).await;
    scheduler(&db, "sched-2", 2).await;
    scheduler(&db, "sched-3", 600).await;

    for (args, code, stdout, stderr) in [
        (
            &["--job-type", "SchedulerJob"][..],
            0,
            "Found one alive job.\n",
            "",
        ),
        (
            &["--job-type", "SchedulerJob", "--limit", "3"],
            1,
            "",
            "Found 2 alive jobs. Expected only one.\n",
        ),
        (
            &[
                "--job-type",
                "SchedulerJob",
                "--limit",
                "3",
                "--allow-multiple",
            ],
            0,
            "Found 2 alive jobs.\n",
            "",
        ),
        // As in Airflow, 0 means no limit, which --allow-multiple does not accept.
        (
            &["--job-type", "SchedulerJob", "--limit", "0"],
            1,
            "",
            "Found 2 alive jobs. Expected only one.\n",
        ),
        (
            &["--job-type", "SchedulerJob", "--allow-multiple"],
            1,
            "",
            "To use option --allow-multiple, you must set the limit to a value greater than 1.\n",
        ),
        (&["--hostname", "sched-3"], 1, "", "No alive jobs found.\n"),
        (&["--hostname", "sched-2"], 0, "Found one alive job.\n", ""),
        (&["--local"], 0, "Found one alive job.\n", ""),
        (
            &["--hostname", "x", "--local"],
            1,
            "",
            "You can't use --hostname and --local at the same time\n",
        ),
        (
            &["--job-type", "TriggererJob"],
            1,
            "",
            "No alive jobs found.\n",
        ),
    ] {
        let out = jobs_check(&db, args);
        assert_eq!(out.code, Some(code), "{args:?}: {}", out.stderr);
        assert_eq!(out.stdout, stdout, "{args:?}");
        assert!(out.stderr.ends_with(stderr), "{args:?}: {:?}", out.stderr);
    }
}

#[tokio::test]
async fn health_prints_the_report_and_exits_1_while_anything_is_unhealthy() {
    let db = migrated_sqlite().await;
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        "[supervisor]\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\npoll_interval = \"200ms\"\npoll_timeout = \"100ms\"\n\n[[executors]]\nname = \"LocalExecutor\"\n",
    )
    .unwrap();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    let base = serving.url("");
    let health = |extra: &[&str]| {
        run(overseer(dir.path())
            .args(["health", "--url", &base])
            .args(extra))
    };

    // No scheduler has ever run: Airflow calls that unhealthy.
    let out = health(&[]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with("COMPONENT      STATUS     DETAIL    LATEST HEARTBEAT\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("\nscheduler      unhealthy  down      -\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("  LocalExecutor - on "),
        "{}",
        out.stdout
    );

    // A scheduler heartbeats: everything is fine.
    scheduler(&db, "sched-1", 0).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let out = loop {
        let out = health(&["--json"]);
        if out.code == Some(0) || std::time::Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(out.code, Some(0), "{}", out.stdout);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["scheduler"]["status"], "healthy");

    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));

    let out = health(&[]);
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr
            .starts_with(&format!("error: cannot reach {base}/api/v2/monitor/health")),
        "{}",
        out.stderr
    );
}

/// The README's first run: `serve` with no executor configured. `overseer
/// health` exits 1 as before (no scheduler ever ran: Airflow's rule), and its
/// table says in one line that no executor is supervised and what to configure.
#[tokio::test]
async fn health_says_what_to_configure_when_no_executor_is_supervised() {
    let db = migrated_sqlite().await;
    let dir = workdir();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    let out = run(overseer(dir.path()).args(["health", "--url", &serving.url("")]));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("executor "))
        .unwrap_or_else(|| panic!("an executor line: {}", out.stdout));
    assert_eq!(
        line,
        "executor       none supervised: neither this Overseer nor any other on its database \
         supervises an executor; set AIRFLOW__CORE__EXECUTOR (with AIRFLOW__CELERY__BROKER_URL \
         for Celery, AIRFLOW__DATABASE__SQL_ALCHEMY_CONN for Airflow's database), \
         OVERSEER_EXECUTORS, or [[executors]] in overseer.toml, and restart it"
    );
    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

/// A probe of the executors alone, with no Airflow scheduler writing to the
/// database (the embedded default): `--component executor` and
/// `?strict=true&component=executor` judge the executor entry only.
#[tokio::test]
async fn an_executor_probe_judges_the_executors_alone() {
    let db = migrated_sqlite().await;
    let dir = workdir();
    let ok = dir.path().join("ok");
    std::fs::write(&ok, "").unwrap();
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            "[supervisor]\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\npoll_interval = \"200ms\"\npoll_timeout = \"150ms\"\n\n[[executors]]\nname = \"LocalExecutor\"\ncheck_command = [\"test\", \"-e\", \"{}\"]\n",
            ok.display()
        ),
    )
    .unwrap();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    let base = serving.url("");
    let health = |extra: &[&str]| {
        run(overseer(dir.path())
            .args(["health", "--url", &base])
            .args(extra))
    };
    let until = |extra: &[&str], code: i32| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let out = health(extra);
            if out.code == Some(code) || std::time::Instant::now() > deadline {
                return out;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let status =
        |query: &str| support::get(&serving.url(&format!("/api/v2/monitor/health{query}"))).0;

    // The executor is healthy; no scheduler ever ran, so the whole report is not.
    let out = until(&["--component", "executor"], 0);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(health(&[]).code, Some(1));
    assert_eq!(health(&["--component", "scheduler"]).code, Some(1));
    assert_eq!(
        health(&["--component", "executor", "--component", "metadatabase"]).code,
        Some(0)
    );
    assert_eq!(status("?strict=true&component=executor"), 200);
    assert_eq!(status("?strict=true"), 503);
    assert_eq!(
        status("?strict=true&component=executor&component=scheduler"),
        503
    );

    // The probe fails: now the executor probe fails too.
    std::fs::remove_file(&ok).unwrap();
    let out = until(&["--component", "executor"], 1);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert_eq!(status("?strict=true&component=executor"), 503);

    // A name that is not a component is refused, naming the choices.
    let out = health(&["--component", "webserver"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "unknown component \"webserver\" (expected one of: metadatabase, scheduler, triggerer, dag_processor, executor)"
        ),
        "{}",
        out.stderr
    );

    let (code, _) = serving.terminate();
    assert_eq!(code, Some(0));
}

/// A probe that names a component asks whether it is healthy: one with no
/// verdict is not. Nothing supervised (a deployment Overseer was not pointed
/// at), or supervised but not checked yet (its first check still running),
/// `overseer health --component executor` exits 1 and says which; once the
/// check has answered healthy, 0.
#[test]
fn a_named_component_without_a_verdict_is_not_taken_for_healthy() {
    // Nothing supervised: the embedded default with no executor.
    let dir = workdir();
    let serving = Serving::start(&mut overseer(dir.path()));
    let base = serving.url("");
    let out = run(overseer(dir.path()).args(["health", "--url", &base, "--component", "executor"]));
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("executor: none supervised"),
        "{}",
        out.stderr
    );
    serving.terminate();

    // Supervised, its first check held until the test lets it answer.
    let dir = workdir();
    let release = dir.path().join("release");
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            "[supervisor]\npoll_interval = \"1m\"\npoll_timeout = \"50s\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n\n\
             [[executors]]\nname = \"LocalExecutor\"\n\
             check_command = [\"sh\", \"-c\", \"while [ ! -e {} ]; do sleep 0.05; done\"]\n",
            release.display()
        ),
    )
    .unwrap();
    let serving = Serving::start(&mut overseer(dir.path()));
    let base = serving.url("");
    let health =
        || run(overseer(dir.path()).args(["health", "--url", &base, "--component", "executor"]));
    let out = health();
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("executor: no verdict yet (nothing checked)"),
        "{}",
        out.stderr
    );
    std::fs::write(&release, "").unwrap();
    overseer_testkit::wait::until_true("overseer health --component executor to exit 0", || {
        health().code == Some(0)
    });
    serving.terminate();
}
