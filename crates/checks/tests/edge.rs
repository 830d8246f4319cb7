//! The Edge check against real databases (SQLite, and the loopback Postgres and
//! MariaDB when they answer), on both schemas the Edge provider has had:
//! `sysinfo` a JSON column without the job counters (3.5.0 and later, as
//! 5.1.0's models create it), and `sysinfo` a `VARCHAR(256)` of JSON text
//! beside `jobs_taken`, `jobs_success`, `jobs_failed` (3.0.0's first migration).

use std::time::Duration;

use overseer_checks::edge::{self, EdgeCheck};
use overseer_core::secret::SecretUrl;
use overseer_core::{ExecutorHealth, HealthCheck};
use overseer_testkit::{TestDb, all_backends};
use sea_orm::DbBackend;

const POLL_TIMEOUT: Duration = Duration::from_secs(5);

/// The tables as the provider's 5.1.0 models create them (SQLAlchemy's DDL for
/// each dialect, printed from the installed provider).
fn current_schema(backend: DbBackend) -> String {
    let (timestamp, ascii) = match backend {
        DbBackend::Postgres => ("TIMESTAMP WITH TIME ZONE", ""),
        DbBackend::MySql => (
            "TIMESTAMP(6) NULL",
            " CHARACTER SET ascii COLLATE ascii_bin",
        ),
        _ => ("TIMESTAMP", ""),
    };
    let map_index_default = match backend {
        DbBackend::Postgres => "DEFAULT -1 NOT NULL",
        DbBackend::MySql => "NOT NULL DEFAULT (-1)",
        _ => "DEFAULT (-1) NOT NULL",
    };
    format!(
        "CREATE TABLE edge_worker (
            worker_name VARCHAR(64) NOT NULL, state VARCHAR(20) NOT NULL,
            maintenance_comment VARCHAR(1024), queues VARCHAR(256),
            first_online {timestamp}, last_update {timestamp},
            jobs_active INTEGER NOT NULL, sysinfo JSON, team_name VARCHAR(64), concurrency INTEGER,
            CONSTRAINT edge_worker_pkey PRIMARY KEY (worker_name));
        CREATE TABLE edge_job (
            dag_id VARCHAR(250) NOT NULL, task_id VARCHAR(250) NOT NULL, run_id VARCHAR(250) NOT NULL,
            map_index INTEGER {map_index_default}, try_number INTEGER NOT NULL,
            task_instance_id VARCHAR(36){ascii} NOT NULL DEFAULT '',
            state VARCHAR(20) NOT NULL, queue VARCHAR(256) NOT NULL,
            concurrency_slots INTEGER NOT NULL, priority_weight INTEGER NOT NULL DEFAULT 1,
            command VARCHAR(2048) NOT NULL, queued_dttm {timestamp}, edge_worker VARCHAR(64),
            last_update {timestamp}, team_name VARCHAR(64),
            CONSTRAINT edge_job_pkey PRIMARY KEY (dag_id, task_id, run_id, map_index, try_number, task_instance_id));
        CREATE INDEX rj_order ON edge_job (state, priority_weight DESC, queued_dttm, queue)"
    )
}

/// The tables as the provider's first migration (3.0.0) creates them.
fn older_schema(backend: DbBackend) -> String {
    let datetime = match backend {
        DbBackend::Postgres => "TIMESTAMP WITHOUT TIME ZONE",
        DbBackend::MySql => "DATETIME NULL",
        _ => "DATETIME",
    };
    let map_index_default = match backend {
        DbBackend::MySql => "NOT NULL DEFAULT -1",
        _ => "DEFAULT -1 NOT NULL",
    };
    format!(
        "CREATE TABLE edge_worker (
            worker_name VARCHAR(64) NOT NULL, state VARCHAR(20) NOT NULL,
            maintenance_comment VARCHAR(1024), queues VARCHAR(256),
            first_online {datetime}, last_update {datetime},
            jobs_active INTEGER NOT NULL, jobs_taken INTEGER NOT NULL,
            jobs_success INTEGER NOT NULL, jobs_failed INTEGER NOT NULL,
            sysinfo VARCHAR(256),
            PRIMARY KEY (worker_name));
        CREATE TABLE edge_job (
            dag_id VARCHAR(250) NOT NULL, task_id VARCHAR(250) NOT NULL, run_id VARCHAR(250) NOT NULL,
            map_index INTEGER {map_index_default}, try_number INTEGER NOT NULL,
            state VARCHAR(20) NOT NULL, queue VARCHAR(256) NOT NULL,
            concurrency_slots INTEGER NOT NULL, command VARCHAR(2048) NOT NULL,
            queued_dttm {datetime}, edge_worker VARCHAR(64), last_update {datetime},
            PRIMARY KEY (dag_id, task_id, run_id, map_index, try_number));
        CREATE INDEX rj_order ON edge_job (state, queued_dttm, queue)"
    )
}

/// One worker row; `older` fills the counters the older schema requires.
fn insert_worker(older: bool, name: &str, state: &str, queues: &str, sysinfo: &str) -> String {
    let (columns, values) = if older {
        (", jobs_taken, jobs_success, jobs_failed", ", 0, 0, 0")
    } else {
        ("", "")
    };
    let queues = queues.replace('\'', "''");
    format!(
        "INSERT INTO edge_worker (worker_name, state, queues, last_update, jobs_active, sysinfo{columns}) \
         VALUES ('{name}', '{state}', '{queues}', CURRENT_TIMESTAMP, 0, '{sysinfo}'{values})"
    )
}

fn insert_job(task: &str, state: &str, queue: &str) -> String {
    format!(
        "INSERT INTO edge_job (dag_id, task_id, run_id, map_index, try_number, state, queue, \
         concurrency_slots, command, queued_dttm) \
         VALUES ('d', '{task}', 'r', -1, 1, '{state}', '{queue}', 1, '{{}}', CURRENT_TIMESTAMP)"
    )
}

const NEW_SYSINFO: &str = r#"{"status": 20, "airflow_version": "3.3.2", "edge_provider_version": "5.1.0", "python_version": "3.11", "worker_start_time": 1.5, "concurrency": 8, "free_concurrency": 7}"#;
const OLD_SYSINFO: &str = r#"{"airflow_version": "3.0.2", "edge_provider_version": "1.1.0", "concurrency": 8, "free_concurrency": 6}"#;

async fn observe(db: &TestDb) -> overseer_core::Observation {
    EdgeCheck::new(&SecretUrl::new(&db.url), &["default".into()], POLL_TIMEOUT)
        .observe()
        .await
}

#[tokio::test]
async fn both_schemas_read_on_every_backend() {
    for db in all_backends().await {
        for older in [false, true] {
            let case = format!("{:?}, older schema: {older}", db.backend);
            let schema = if older {
                older_schema(db.backend)
            } else {
                current_schema(db.backend)
            };
            db.execute_script("DROP TABLE IF EXISTS edge_worker; DROP TABLE IF EXISTS edge_job")
                .await;
            db.execute_script(&schema).await;
            let sysinfo = if older { OLD_SYSINFO } else { NEW_SYSINFO };

            // No worker, nothing waiting: a fleet scaled to zero.
            let seen = observe(&db).await;
            assert_eq!(seen.health, ExecutorHealth::Healthy, "{case}");

            db.execute_script(&format!(
                "{}; {}; {}; {}",
                insert_worker(older, "edge-1", "idle", "['default']", sysinfo),
                insert_job("a", "queued", "default"),
                insert_job("b", "running", "default"),
                insert_job("c", "success", "gpu"),
            ))
            .await;
            let seen = observe(&db).await;
            assert_eq!(seen.health, ExecutorHealth::Healthy, "{case}");
            let detail = seen.detail.expect("a detail");
            let workers = detail.workers.expect("workers");
            assert_eq!(workers.len(), 1, "{case}");
            assert_eq!(workers[0].name, "edge-1", "{case}");
            assert_eq!(workers[0].state.as_deref(), Some("idle"), "{case}");
            assert_eq!(
                workers[0].queues,
                Some(vec!["default".to_owned()]),
                "{case}"
            );
            assert_eq!(
                workers[0].free_concurrency,
                Some(if older { 6 } else { 7 }),
                "{case}"
            );
            let queues: Vec<(&str, Option<u64>, Option<u32>)> = detail
                .queues
                .iter()
                .map(|q| (q.name.as_str(), q.depth, q.consumers))
                .collect();
            assert_eq!(queues, [("default", Some(1), Some(1))], "{case}");

            // A job on a queue nobody serves.
            db.execute_script(&insert_job("d", "queued", "gpu")).await;
            let seen = observe(&db).await;
            assert_eq!(
                seen.health,
                ExecutorHealth::unhealthy(
                    "queue gpu: 1 job waiting and no connected edge worker serves it"
                ),
                "{case}"
            );

            // The worker lost.
            db.execute_script("UPDATE edge_worker SET state = 'unknown'")
                .await;
            let seen = observe(&db).await;
            assert_eq!(
                seen.health,
                ExecutorHealth::unhealthy(
                    "every edge worker is unknown or offline (edge-1: unknown) \
                     while 2 jobs wait (default: 1, gpu: 1)"
                ),
                "{case}"
            );
        }
    }
}

#[tokio::test]
async fn a_database_without_the_edge_tables_is_unknown() {
    let db = overseer_testkit::sqlite().await;
    db.create_airflow_job_table().await;
    let seen = observe(&db).await;
    assert_eq!(
        seen.health,
        ExecutorHealth::unknown(
            "the database has no edge_worker table (is the Edge provider installed and migrated?)"
        )
    );
    assert_eq!(seen.detail, None);
}

/// A database that refuses: the check's own verdict, by its own deadline,
/// inside the poll timeout. In paused time, so that what is asserted is the
/// deadline the check sets itself, not how fast the machine is.
#[tokio::test(start_paused = true)]
async fn a_database_that_refuses_is_unhealthy_within_the_poll_timeout() {
    let port = overseer_testkit::throwaway::free_port();
    let url = SecretUrl::new(format!(
        "postgres://airflow:s3cret@127.0.0.1:{port}/airflow"
    ));
    let poll_timeout = Duration::from_secs(1);
    let check = EdgeCheck::new(&url, &[], poll_timeout);
    let started = tokio::time::Instant::now();
    let seen = check.observe().await;
    let waited = started.elapsed();
    assert!(
        waited < poll_timeout,
        "answered at {waited:?} (paused time)"
    );
    let reason = seen.health.reason().expect("unhealthy").to_owned();
    assert!(
        reason.starts_with("cannot read the edge_worker table: "),
        "{reason}"
    );
    assert!(!reason.contains("s3cret"), "{reason}");
    assert_eq!(
        edge::instance(&url),
        format!("edge_worker@127.0.0.1:{port}/airflow")
    );
}

/// A queue whose name holds a newline, as the provider stores it: escaped in
/// `edge_worker.queues` (`str(['new\nline'])`), the newline itself in
/// `edge_job.queue`. The worker serves the jobs waiting there; the reason that
/// names the queue when nobody serves it is one line.
#[tokio::test]
async fn a_queue_name_with_a_newline_keeps_its_meaning_on_every_backend() {
    for db in all_backends().await {
        let case = format!("{:?}", db.backend);
        db.execute_script("DROP TABLE IF EXISTS edge_worker; DROP TABLE IF EXISTS edge_job")
            .await;
        db.execute_script(&current_schema(db.backend)).await;
        // MySQL reads a backslash in a literal as an escape: doubled, it is stored as one.
        let stored = match db.backend {
            DbBackend::MySql => r"['new\\nline']",
            _ => r"['new\nline']",
        };
        db.execute_script(&format!(
            "{}; {}",
            insert_worker(false, "edge-1", "idle", stored, NEW_SYSINFO),
            insert_job("a", "queued", "new\nline"),
        ))
        .await;
        let seen = observe(&db).await;
        assert_eq!(seen.health, ExecutorHealth::Healthy, "{case}");
        let workers = seen.detail.and_then(|d| d.workers).expect("workers");
        assert_eq!(
            workers[0].queues,
            Some(vec!["new\nline".to_owned()]),
            "{case}"
        );

        db.execute_script("UPDATE edge_worker SET state = 'offline'")
            .await;
        assert_eq!(
            observe(&db).await.health,
            ExecutorHealth::unhealthy(
                "every edge worker is unknown or offline (edge-1: offline) \
                 while 1 job waits (new line: 1)"
            ),
            "{case}"
        );
    }
}

/// Rows as a hostile client may write them where nothing bounds a name
/// (SQLite ignores `VARCHAR(64)`): ten workers whose names are kilobytes with
/// newlines. The reason is one line, capped, and counts the workers it left out.
#[tokio::test]
async fn huge_worker_names_with_newlines_give_one_bounded_line() {
    let db = overseer_testkit::sqlite().await;
    db.execute_script(&current_schema(db.backend)).await;
    let mut script = Vec::new();
    for i in 0..10 {
        let name = format!(
            "w{i}\n2026-12-01T00:00:00Z INFO forged {}",
            "x".repeat(8000)
        );
        script.push(insert_worker(
            false,
            &name,
            "offline",
            "['default']",
            NEW_SYSINFO,
        ));
        script.push(insert_job(
            &format!("t{i}"),
            "queued",
            &format!("q{i}\n{}", "y".repeat(8000)),
        ));
    }
    db.execute_script(&script.join("; ")).await;
    let ExecutorHealth::Unhealthy { reason } = observe(&db).await.health else {
        panic!("every worker offline while jobs wait is unhealthy");
    };
    assert!(!reason.contains(['\n', '\r']), "{reason:?}");
    assert!(
        reason.chars().count() <= overseer_core::reason::MAX_CHARS,
        "{} characters",
        reason.chars().count()
    );
    assert!(
        reason.starts_with("every edge worker is unknown or offline (w0 2026-12-01T00:00:00Z INFO"),
        "{reason}"
    );
    assert!(reason.contains(", and 8 more)"), "{reason}");
}
