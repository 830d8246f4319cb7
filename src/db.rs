//! Opening the metadata database.

use std::time::Duration;

use anyhow::anyhow;
use sea_orm::{ConnectOptions, Database, DatabaseConnection};

use crate::secret::SecretUrl;

/// How long opening a connection may take before the database counts as
/// unreachable. Bounds start-up against a database that does not answer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a statement waits for a free pooled connection.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections kept open: the aggregator's writes and reads, and a migration.
pub const MAX_CONNECTIONS: u32 = 4;

/// Opens a connection pool. The error names the database by its redacted URL and
/// carries the driver's reason with any credential masked.
pub async fn connect(url: &SecretUrl) -> anyhow::Result<DatabaseConnection> {
    let mut options = ConnectOptions::new(url.expose_secret().to_owned());
    options
        .connect_timeout(CONNECT_TIMEOUT)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .max_connections(MAX_CONNECTIONS)
        .sqlx_logging(false);
    probe(url)
        .await
        .map_err(|reason| anyhow!("cannot open the database {url}: {reason}"))?;
    Database::connect(options).await.map_err(|e| {
        anyhow!(
            "cannot open the database {url}: {}",
            url.scrub(&e.to_string())
        )
    })
}

/// Reaches a database server's TCP port once, so that a refused or silent port is
/// reported as such at once, instead of as the pool's time-out after retrying.
/// SQLite and Unix sockets have nothing to probe.
async fn probe(url: &SecretUrl) -> Result<(), String> {
    let Ok(parsed) = url::Url::parse(url.expose_secret()) else {
        return Ok(());
    };
    let default_port = match parsed.scheme() {
        "postgres" | "postgresql" => 5432,
        "mysql" => 3306,
        _ => return Ok(()),
    };
    let Some(host) = parsed.host_str().filter(|h| !h.is_empty()) else {
        return Ok(());
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = parsed.port().unwrap_or(default_port);
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("{host}:{port}: {e}")),
        Err(_) => Err(format!(
            "{host}:{port}: no answer within {}s",
            CONNECT_TIMEOUT.as_secs()
        )),
    }
}
