//! Opening the metadata database.

use anyhow::anyhow;
use overseer_core::connect::{self, CONNECT_TIMEOUT};
use sea_orm::{Database, DatabaseConnection};

use crate::secret::SecretUrl;

/// Opens a connection pool. The error names the database by its redacted URL and
/// carries the driver's reason with any credential masked.
pub async fn connect(url: &SecretUrl) -> anyhow::Result<DatabaseConnection> {
    let options = connect::options(url.expose_secret());
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
