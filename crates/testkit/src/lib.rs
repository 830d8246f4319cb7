//! # overseer-testkit
//!
//! Test support shared by every crate: a database of its own for each test, so
//! tests run in parallel without sharing rows, and Airflow's own `job` DDL.
//!
//! # Layout
//! - [`TestDb`]: one throwaway database (a SQLite file in a temporary folder, or a
//!   fresh Postgres or MariaDB database), dropped when the value is dropped.
//! - [`sqlite`], [`postgres`], [`mariadb`]: make one. The server ones answer `None`
//!   when the server is unreachable and `CI` is unset (after printing that the test
//!   skipped); with `CI` set an unreachable server fails the test.
//! - [`airflow_job_ddl`]: the `job` table as Airflow 3.3.2 creates it on each backend.
//! - [`throwaway`]: a PostgreSQL server of the test's own, to stop and start.
//! - [`venv`]: Python venvs (Celery, Schemathesis), built once per machine.
//! - [`load`]: every core kept busy, for faults judged on a loaded host.
//! - [`procs`]: signals by process id, and the connections open to a port.
//! - [`wait`]: the one way a test waits for a settled state, and its deadlines.
//!
//! The servers default to the machine's shared ones on loopback; `TESTKIT_POSTGRES_URL`
//! and `TESTKIT_MARIADB_URL` point elsewhere (an admin connection that may create databases).

pub mod celery;
pub mod load;
pub mod procs;
pub mod rabbitmq;
pub mod throwaway;
pub mod venv;
pub mod wait;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
};

/// The shared Postgres on loopback, trust auth, as this machine's kind provides it.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// The shared MariaDB on loopback, root with an empty password.
pub const DEFAULT_MARIADB_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// How long a test waits for a server to accept a connection before calling it unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Gives every database of this process its own name.
static NEXT_DB: AtomicUsize = AtomicUsize::new(0);

/// The Postgres `job` table exactly as `pg_dump` printed it from a real Airflow 3.3.2.
pub const AIRFLOW_JOB_DDL_POSTGRES: &str =
    include_str!("../fixtures/airflow-3.3.2-job-postgres.sql");

/// The `job` table as Airflow 3.3.2's SQLAlchemy model creates it on MySQL/MariaDB
/// (`UtcDateTime` is `TIMESTAMP(6)` there).
pub const AIRFLOW_JOB_DDL_MYSQL: &str = "CREATE TABLE job (
    id INTEGER NOT NULL AUTO_INCREMENT,
    dag_id VARCHAR(250), state VARCHAR(20), job_type VARCHAR(30),
    start_date TIMESTAMP(6) NULL, end_date TIMESTAMP(6) NULL, latest_heartbeat TIMESTAMP(6) NULL,
    executor_class VARCHAR(500), hostname VARCHAR(500), unixname VARCHAR(1000),
    CONSTRAINT job_pkey PRIMARY KEY (id));
CREATE INDEX idx_job_dag_id ON job (dag_id);
CREATE INDEX idx_job_state_heartbeat ON job (state, latest_heartbeat);
CREATE INDEX job_type_heart ON job (job_type, latest_heartbeat);";

/// The `job` table as Airflow 3.3.2's SQLAlchemy model creates it on SQLite
/// (`UtcDateTime` is `DATETIME` there, stored as naive UTC text).
pub const AIRFLOW_JOB_DDL_SQLITE: &str = "CREATE TABLE job (
    id INTEGER NOT NULL,
    dag_id VARCHAR(250), state VARCHAR(20), job_type VARCHAR(30),
    start_date DATETIME, end_date DATETIME, latest_heartbeat DATETIME,
    executor_class VARCHAR(500), hostname VARCHAR(500), unixname VARCHAR(1000),
    CONSTRAINT job_pkey PRIMARY KEY (id));
CREATE INDEX idx_job_dag_id ON job (dag_id);
CREATE INDEX idx_job_state_heartbeat ON job (state, latest_heartbeat);
CREATE INDEX job_type_heart ON job (job_type, latest_heartbeat);";

/// Airflow's `job` DDL for a backend.
pub fn airflow_job_ddl(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => AIRFLOW_JOB_DDL_POSTGRES,
        DbBackend::MySql => AIRFLOW_JOB_DDL_MYSQL,
        _ => AIRFLOW_JOB_DDL_SQLITE,
    }
}

/// A database that belongs to one test.
pub struct TestDb {
    /// The URL the service under test would be given (no password on these servers).
    pub url: String,
    /// An open connection to it.
    pub conn: DatabaseConnection,
    /// Which server it lives on.
    pub backend: DbBackend,
    /// How to drop it afterwards: the admin URL and the database's name.
    drop_with: Option<(String, String)>,
    /// Keeps a SQLite file's folder until the test ends.
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// Runs each `;`-separated statement of `sql` (no `;` inside literals).
    pub async fn execute_script(&self, sql: &str) {
        for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            self.conn
                .execute_unprepared(statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
    }

    /// The first column of every row `sql` returns, as text.
    pub async fn strings(&self, sql: &str) -> Vec<String> {
        self.conn
            .query_all_raw(Statement::from_string(self.backend, sql))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|row| {
                row.try_get_by_index::<String>(0)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"))
            })
            .collect()
    }

    /// The columns of `table`, in table order.
    pub async fn column_names(&self, table: &str) -> Vec<String> {
        self.strings(&match self.backend {
            DbBackend::Postgres => format!(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = '{table}' ORDER BY ordinal_position"
            ),
            DbBackend::MySql => format!(
                "SELECT CAST(column_name AS CHAR) FROM information_schema.columns \
                 WHERE table_schema = DATABASE() AND table_name = '{table}' ORDER BY ordinal_position"
            ),
            _ => format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid"),
        })
        .await
    }

    /// The names of the indexes on `table` (primary keys and automatic ones left out), sorted.
    pub async fn index_names(&self, table: &str) -> Vec<String> {
        self.strings(&match self.backend {
            DbBackend::Postgres => format!(
                "SELECT indexname::text FROM pg_indexes WHERE schemaname = current_schema() \
                 AND tablename = '{table}' AND indexname NOT LIKE '%pkey' ORDER BY 1"
            ),
            DbBackend::MySql => format!(
                "SELECT DISTINCT CAST(index_name AS CHAR) FROM information_schema.statistics \
                 WHERE table_schema = DATABASE() AND table_name = '{table}' AND index_name <> 'PRIMARY' ORDER BY 1"
            ),
            _ => format!(
                "SELECT name FROM pragma_index_list('{table}') WHERE origin = 'c' ORDER BY 1"
            ),
        })
        .await
    }

    /// True when `table` exists.
    pub async fn has_table(&self, table: &str) -> bool {
        let sql = match self.backend {
            DbBackend::Postgres => format!(
                "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = '{table}'"
            ),
            DbBackend::MySql => format!(
                "SELECT CAST(table_name AS CHAR) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '{table}'"
            ),
            _ => {
                format!("SELECT name FROM sqlite_master WHERE type = 'table' AND name = '{table}'")
            }
        };
        !self.strings(&sql).await.is_empty()
    }

    /// Creates `job` as Airflow 3.3.2 does on this backend.
    pub async fn create_airflow_job_table(&self) {
        self.execute_script(airflow_job_ddl(self.backend)).await;
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.drop_with.take() else {
            return;
        };
        let backend = self.backend;
        // Drop runs inside the test's runtime, which cannot be blocked on: a thread of
        // its own with its own runtime drops the database and is waited for.
        let dropper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for dropping the test database");
            runtime.block_on(async {
                let Ok(admin) = connect(&admin_url).await else {
                    return;
                };
                let statement = match backend {
                    DbBackend::Postgres => {
                        format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#)
                    }
                    _ => format!("DROP DATABASE IF EXISTS `{name}`"),
                };
                let _ = admin.execute_unprepared(&statement).await;
                let _ = admin.close().await;
            });
        });
        let _ = dropper.join();
    }
}

/// True when running under CI, where a missing service is a failure, not a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Reports a service this test needs but cannot reach: fails under CI, else says
/// plainly that the test is skipped and returns `None`.
pub fn unavailable<T>(service: &str, detail: impl std::fmt::Display) -> Option<T> {
    assert!(
        !in_ci(),
        "{service} is required when CI is set, and is unreachable: {detail}"
    );
    eprintln!("SKIPPED: {service} is unreachable ({detail}); start it to run this test");
    None
}

/// A unique database name for this process.
pub fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    )
}

async fn connect(url: &str) -> Result<DatabaseConnection, sea_orm::DbErr> {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .connect_timeout(CONNECT_TIMEOUT)
        .acquire_timeout(CONNECT_TIMEOUT)
        .max_connections(4)
        .sqlx_logging(false);
    Database::connect(options).await
}

/// A SQLite database file of its own, in a temporary folder.
pub async fn sqlite() -> TestDb {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("overseer.db").display()
    );
    let conn = connect(&url).await.expect("SQLite opens a new file");
    TestDb {
        url,
        conn,
        backend: DbBackend::Sqlite,
        drop_with: None,
        _dir: Some(dir),
    }
}

/// A fresh database on the shared Postgres, or `None` (skipped) when it is unreachable.
pub async fn postgres() -> Option<TestDb> {
    server_db(DbBackend::Postgres, "Postgres", postgres_admin_url()).await
}

/// The admin connection to the Postgres the tests use.
fn postgres_admin_url() -> String {
    std::env::var("TESTKIT_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.into())
}

/// A fresh database on the shared MariaDB, or `None` (skipped) when it is unreachable.
pub async fn mariadb() -> Option<TestDb> {
    let admin_url =
        std::env::var("TESTKIT_MARIADB_URL").unwrap_or_else(|_| DEFAULT_MARIADB_URL.into());
    server_db(DbBackend::MySql, "MariaDB", admin_url).await
}

/// A fresh database on the shared Postgres copied from the template database
/// `template` (`CREATE DATABASE ... TEMPLATE`), or `None` (skipped) when the
/// server is unreachable. The first test on a server that lacks the template
/// makes it: `make` gets the URL of an empty database to fill (an `airflow db
/// migrate`, seconds of Python), which becomes the template once `make`
/// succeeds. Tests on other processes wait for the maker (a Postgres advisory
/// lock), so the template is made once per server and kept, as the venvs are
/// kept: `template` must name what is in it (a version, a hash).
pub async fn postgres_from_template(
    template: &str,
    make: impl FnOnce(&str) -> Result<(), String>,
) -> Option<TestDb> {
    let admin_url = postgres_admin_url();
    let mut options = ConnectOptions::new(admin_url.clone());
    // One connection: an advisory lock belongs to its session.
    options
        .connect_timeout(CONNECT_TIMEOUT)
        .max_connections(1)
        .sqlx_logging(false);
    let admin = match Database::connect(options).await {
        Ok(admin) => admin,
        Err(e) => return unavailable("Postgres", format!("{admin_url}: {e}")),
    };
    let run = |sql: String| {
        let admin = &admin;
        async move {
            admin
                .execute_unprepared(&sql)
                .await
                .unwrap_or_else(|e| panic!("Postgres: {sql}: {e}"));
        }
    };
    run("SELECT pg_advisory_lock(7303672358)".into()).await;
    let exists = admin
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT 1 FROM pg_database WHERE datname = '{template}'"),
        ))
        .await
        .unwrap_or_else(|e| panic!("Postgres: looking for the template {template}: {e}"))
        .is_some();
    if !exists {
        let making = format!("{template}_making");
        run(format!(
            r#"DROP DATABASE IF EXISTS "{making}" WITH (FORCE)"#
        ))
        .await;
        run(format!(r#"CREATE DATABASE "{making}""#)).await;
        let (base, _) = admin_url
            .rsplit_once('/')
            .expect("an admin URL ends with /database");
        if let Err(e) = make(&format!("{base}/{making}")) {
            run(format!(
                r#"DROP DATABASE IF EXISTS "{making}" WITH (FORCE)"#
            ))
            .await;
            panic!("making the template database {template}: {e}");
        }
        run(format!(
            r#"ALTER DATABASE "{making}" RENAME TO "{template}""#
        ))
        .await;
    }
    run("SELECT pg_advisory_unlock(7303672358)".into()).await;
    let _ = admin.close().await;
    server_db_as(
        DbBackend::Postgres,
        "Postgres",
        admin_url,
        &format!(r#"TEMPLATE "{template}""#),
    )
    .await
}

async fn server_db(backend: DbBackend, service: &str, admin_url: String) -> Option<TestDb> {
    server_db_as(backend, service, admin_url, "").await
}

/// [`server_db`], the `CREATE DATABASE` statement ending with `postgres_options`.
async fn server_db_as(
    backend: DbBackend,
    service: &str,
    admin_url: String,
    postgres_options: &str,
) -> Option<TestDb> {
    let admin = match connect(&admin_url).await {
        Ok(admin) => admin,
        Err(e) => return unavailable(service, format!("{admin_url}: {e}")),
    };
    let name = unique_name("overseer_test");
    let create = match backend {
        DbBackend::Postgres => format!(r#"CREATE DATABASE "{name}" {postgres_options}"#),
        _ => format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"),
    };
    admin
        .execute_unprepared(&create)
        .await
        .unwrap_or_else(|e| panic!("{service}: {create}: {e}"));
    let _ = admin.close().await;

    let (base, _) = admin_url
        .rsplit_once('/')
        .expect("an admin URL ends with /database");
    let url = format!("{base}/{name}");
    let conn = connect(&url)
        .await
        .unwrap_or_else(|e| panic!("{service}: connecting to the new database {name}: {e}"));
    Some(TestDb {
        url,
        conn,
        backend,
        drop_with: Some((admin_url, name)),
        _dir: None,
    })
}

/// Every backend this machine offers, each a fresh database: SQLite always, then
/// Postgres and MariaDB where reachable (see [`unavailable`]).
pub async fn all_backends() -> Vec<TestDb> {
    let mut dbs = vec![sqlite().await];
    dbs.extend(postgres().await);
    dbs.extend(mariadb().await);
    dbs
}
