//! The command line against real databases: `migrate up|status|down` and `serve`.

use crate::support;

use overseer_testkit::TestDb;
use support::{Serving, overseer, run, workdir};

const EXECUTOR_COLUMNS: [&str; 4] = [
    "executor_health",
    "executor_health_reason",
    "executor_instance",
    "executor_health_checked_at",
];

async fn migrate_commands_manage_the_schema(db: TestDb) {
    let dir = workdir();
    let migrate = |action: &str| {
        run(overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .args(["migrate", action]))
    };

    let status = migrate("status");
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    assert_eq!(
        status.stdout,
        "m20261129_000001_executor_health         pending\n\
         m20261201_000001_executor_history        pending\n\
         m20261205_000001_history_cost            pending\n"
    );

    let up = migrate("up");
    assert_eq!(up.code, Some(0), "{}", up.stderr);
    assert_eq!(
        up.stdout,
        "applied m20261129_000001_executor_health\napplied m20261201_000001_executor_history\n\
         applied m20261205_000001_history_cost\n"
    );
    assert!(db.has_table("overseer_executor_history").await);
    assert!(
        db.column_names("job")
            .await
            .ends_with(&EXECUTOR_COLUMNS.map(String::from))
    );

    let again = migrate("up");
    assert_eq!(again.stdout, "the schema is up to date\n");
    assert_eq!(
        migrate("status").stdout,
        "m20261129_000001_executor_health         applied\n\
         m20261201_000001_executor_history        applied\n\
         m20261205_000001_history_cost            applied\n"
    );

    // Each `down` rolls back one migration, the latest first: the history's
    // cost columns,
    let down = migrate("down");
    assert_eq!(down.code, Some(0), "{}", down.stderr);
    assert_eq!(down.stdout, "rolled back m20261205_000001_history_cost\n");
    assert!(
        !db.column_names("overseer_executor_history")
            .await
            .iter()
            .any(|c| c.starts_with("cost_"))
    );
    // the history table,
    let down = migrate("down");
    assert_eq!(down.code, Some(0), "{}", down.stderr);
    assert_eq!(
        down.stdout,
        "rolled back m20261201_000001_executor_history\n"
    );
    assert!(!db.has_table("overseer_executor_history").await);
    assert_eq!(db.column_names("job").await.len(), 14);

    // then the four columns.
    let down = migrate("down");
    assert_eq!(down.code, Some(0), "{}", down.stderr);
    assert_eq!(
        down.stdout,
        "rolled back m20261129_000001_executor_health\n"
    );
    let columns = db.column_names("job").await;
    assert_eq!(
        columns.len(),
        10,
        "{:?}: Airflow's ten columns remain",
        db.backend
    );
    assert!(!columns.iter().any(|c| c.starts_with("executor_health")));
}

#[tokio::test]
async fn migrate_on_sqlite() {
    migrate_commands_manage_the_schema(overseer_testkit::sqlite().await).await;
}

#[tokio::test]
async fn migrate_on_postgres() {
    if let Some(db) = overseer_testkit::postgres().await {
        migrate_commands_manage_the_schema(db).await;
    }
}

#[tokio::test]
async fn migrate_on_mariadb() {
    if let Some(db) = overseer_testkit::mariadb().await {
        migrate_commands_manage_the_schema(db).await;
    }
}

#[test]
fn serve_on_the_default_sqlite_migrates_and_stops_cleanly_on_sigterm() {
    let dir = workdir();
    let serving = Serving::start(&mut overseer(dir.path()));
    // The embedded default: overseer.db in the working folder, with the Jobs table.
    assert!(dir.path().join("overseer.db").exists());
    let (code, lines) = serving.terminate();
    assert_eq!(code, Some(0), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("stopped")), "{lines:?}");
    // No executor configured: said once, with how to configure one.
    let warnings: Vec<&String> = lines.iter().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{lines:?}");
    assert!(
        warnings[0].contains("no executor is configured")
            && warnings[0].contains("AIRFLOW__CORE__EXECUTOR"),
        "{}",
        warnings[0]
    );
}

async fn serve_supervises_the_configured_executors(db: TestDb) {
    // A loopback port where nothing listens: the broker's check is refused at once.
    let closed = overseer_testkit::throwaway::free_port();
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        r#"
[supervisor]
hostname = "sched-7"
poll_interval = "200ms"
poll_timeout = "100ms"
heartbeat_interval = "200ms"
refresh_interval = "100ms"

[[executors]]
name = "LocalExecutor"
"#,
    )
    .unwrap();
    let serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("AIRFLOW__CORE__EXECUTOR", "LocalExecutor,CeleryExecutor")
            .env(
                "AIRFLOW__CELERY__BROKER_URL",
                format!("redis://:hunter2@127.0.0.1:{closed}/0"),
            ),
    );
    let open = db
        .strings(
            "SELECT executor_class || ' ' || COALESCE(executor_instance, '-') || ' ' || state || ' ' || hostname \
             FROM job WHERE job_type = 'ExecutorJob' AND end_date IS NULL ORDER BY id",
        )
        .await;
    assert_eq!(
        open,
        [
            "LocalExecutor - running sched-7".to_owned(),
            format!("CeleryExecutor redis://127.0.0.1:{closed}/0 running sched-7")
        ],
        "{:?}",
        db.backend
    );

    let (code, lines) = serving.terminate();
    assert_eq!(code, Some(0), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains("hunter2")), "{lines:?}");
    let ended = db
        .strings("SELECT state FROM job WHERE job_type = 'ExecutorJob' AND end_date IS NOT NULL ORDER BY id")
        .await;
    assert_eq!(ended, ["success", "success"], "{:?}", db.backend);
}

#[tokio::test]
async fn serve_supervises_on_sqlite() {
    serve_supervises_the_configured_executors(overseer_testkit::sqlite().await).await;
}

#[tokio::test]
async fn serve_supervises_on_postgres() {
    if let Some(db) = overseer_testkit::postgres().await {
        serve_supervises_the_configured_executors(db).await;
    }
}

#[tokio::test]
async fn after_kill_9_a_restart_closes_the_crashed_rows() {
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    let serve = |dir: &std::path::Path| {
        let mut command = overseer(dir);
        command
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("OVERSEER_SUPERVISOR__HOSTNAME", "sched-9")
            .env("AIRFLOW__CORE__EXECUTOR", "LocalExecutor");
        command
    };
    let mut crashed = Serving::start(&mut serve(dir.path()));
    let status = std::process::Command::new("kill")
        .args(["-KILL", &crashed.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let _ = crashed.child.wait();
    let states = "SELECT state || ' ' || CASE WHEN end_date IS NULL THEN 'open' ELSE 'ended' END FROM job ORDER BY id";
    assert_eq!(
        db.strings(states).await,
        ["running open"],
        "kill -9 leaves the row open"
    );

    let restarted = Serving::start(&mut serve(dir.path()));
    assert_eq!(db.strings(states).await, ["failed ended", "running open"]);
    let (code, _) = restarted.terminate();
    assert_eq!(code, Some(0));
    assert_eq!(db.strings(states).await, ["failed ended", "success ended"]);
}

/// Another writer ends a running service's rows (another Overseer, started
/// with the same hostname while this one was frozen, closes them as a
/// crash's): the service's heartbeats would land nowhere, so it says so,
/// naming the hostname, and exits 1, leaving the rows as the other ended them.
#[tokio::test]
async fn a_service_whose_rows_another_writer_ended_says_so_and_exits_1() {
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    let serving = Serving::start(
        overseer(dir.path())
            .env("OVERSEER_DATABASE__URL", &db.url)
            .env("OVERSEER_SUPERVISOR__HOSTNAME", "sched-9")
            .env("AIRFLOW__CORE__EXECUTOR", "LocalExecutor"),
    );
    let states = "SELECT state || ' ' || CASE WHEN end_date IS NULL THEN 'open' ELSE 'ended' END FROM job ORDER BY id";
    assert_eq!(db.strings(states).await, ["running open"]);
    // What the other one's start-up does to rows it finds silent.
    db.execute_script(
        "UPDATE job SET state = 'failed', end_date = CURRENT_TIMESTAMP \
         WHERE job_type = 'ExecutorJob' AND hostname = 'sched-9'",
    )
    .await;
    let (code, lines) = serving.exited();
    let why = "another writer ended 1 of the 1 executor rows this Overseer keeps for \
               hostname \"sched-9\" (another Overseer given the same hostname took them over?): \
               this one stops, as its verdicts would no longer be written; give each Overseer \
               a hostname of its own ([supervisor] hostname)";
    assert_eq!(code, Some(1), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("ERROR") && l.ends_with(why)),
        "logged loudly: {lines:?}"
    );
    assert_eq!(
        lines.last().map(String::as_str),
        Some(format!("error: {why}").as_str())
    );
    assert_eq!(db.strings(states).await, ["failed ended"]);
}

#[test]
fn an_unreachable_database_fails_with_exit_1_and_no_password() {
    let dir = workdir();
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let out = run(overseer(dir.path())
        .env(
            "OVERSEER_DATABASE__URL",
            "postgres://airflow:hunter2@127.0.0.1:1/airflow",
        )
        // A free port, never the README's 8781, which a newcomer's serve may hold.
        .args(["serve", "--bind", "127.0.0.1:0"]));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last == "error: cannot open the database postgres://airflow:***@127.0.0.1:1/airflow: 127.0.0.1:1: Connection refused (os error 111)",
        "{last}"
    );
    assert!(!out.stderr.contains("hunter2"), "{}", out.stderr);
}

#[test]
fn log_lines_can_be_json_for_log_shippers() {
    let dir = workdir();
    let serving = Serving::start(overseer(dir.path()).args(["--log-format", "json"]));
    let (code, lines) = serving.terminate();
    assert_eq!(code, Some(0));
    assert!(!lines.is_empty());
    for line in &lines {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert!(
            event["level"].is_string() && event["fields"].is_object(),
            "{line}"
        );
    }
    assert!(lines.iter().any(|l| l.contains("overseer is running")));
}
