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
    let mut options = ConnectOptions::new(url.expose().to_owned());
    options
        .connect_timeout(CONNECT_TIMEOUT)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .max_connections(MAX_CONNECTIONS)
        .sqlx_logging(false);
    Database::connect(options).await.map_err(|e| {
        anyhow!(
            "cannot open the database {url}: {}",
            url.scrub_from(&e.to_string())
        )
    })
}
