//! A database of the benchmark's own on the machine's Postgres: created under a
//! unique name, dropped when the value is dropped. The shared server itself is
//! never stopped or reconfigured.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection};

/// The shared Postgres, as the tests reach it (`TESTKIT_POSTGRES_URL` overrides).
pub fn admin_url() -> String {
    std::env::var("TESTKIT_POSTGRES_URL")
        .unwrap_or_else(|_| overseer_testkit::DEFAULT_POSTGRES_URL.into())
}

/// How long connecting may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn connect(url: &str) -> Result<DatabaseConnection> {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .connect_timeout(CONNECT_TIMEOUT)
        .acquire_timeout(CONNECT_TIMEOUT)
        .max_connections(2)
        .sqlx_logging(false);
    Database::connect(options)
        .await
        .with_context(|| format!("while connecting to {url}"))
}

/// A fresh database on the shared server.
pub struct BenchDb {
    pub name: String,
    /// `host:port` of the server, for the counting proxy.
    pub server: String,
    admin: String,
}

impl BenchDb {
    /// Creates one, or says why the server cannot be used.
    pub async fn create(prefix: &str) -> Result<Self> {
        let admin = admin_url();
        let conn = connect(&admin).await?;
        let name = overseer_testkit::unique_name(prefix);
        conn.execute_unprepared(&format!(r#"CREATE DATABASE "{name}""#))
            .await
            .with_context(|| format!("while creating the database {name}"))?;
        let _ = conn.close().await;
        let server = admin
            .split_once('@')
            .map(|(_, rest)| rest)
            .unwrap_or(&admin)
            .split('/')
            .next()
            .ok_or_else(|| anyhow!("no host in {admin}"))?
            .to_owned();
        Ok(Self {
            name,
            server,
            admin,
        })
    }

    /// Its URL on the server directly (`host` overrides `host:port`, for the proxy).
    pub fn url_via(&self, server: &str) -> String {
        let (base, _) = self.admin.rsplit_once('/').unwrap_or((&self.admin, ""));
        let base = base.replace(&self.server, server);
        format!("{base}/{}?sslmode=disable", self.name)
    }

    pub fn url(&self) -> String {
        self.url_via(&self.server.clone())
    }

    /// The same database as Airflow's SQLAlchemy sees it.
    pub fn sqlalchemy_url(&self) -> String {
        let url = self.url();
        let url = url.split('?').next().unwrap_or(&url).to_owned();
        url.replacen("postgres://", "postgresql+psycopg2://", 1)
    }

    /// Runs statements on it (each `;`-separated, no `;` inside literals).
    pub async fn execute(&self, sql: &str) -> Result<()> {
        let conn = connect(&self.url()).await?;
        for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            conn.execute_unprepared(statement)
                .await
                .with_context(|| format!("while running {statement}"))?;
        }
        let _ = conn.close().await;
        Ok(())
    }
}

impl Drop for BenchDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // Drop may run inside a runtime, which cannot be blocked on: a thread with a
        // runtime of its own drops the database, and is waited for.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                if let Ok(conn) = connect(&admin).await {
                    let _ = conn
                        .execute_unprepared(&format!(
                            r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#
                        ))
                        .await;
                    let _ = conn.close().await;
                }
            })
        })
        .join();
    }
}
