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
    if let Some(rest) = url.expose_secret().strip_prefix("sqlite:") {
        return sqlite_file(rest);
    }
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

/// A SQLite file opened without `mode=rwc` must exist: say so by name, as
/// the driver's "unable to open database file" does not (an Airflow whose
/// home has an `airflow.cfg` but no database yet, say).
fn sqlite_file(rest: &str) -> Result<(), String> {
    let rest = rest.trim_start_matches("//");
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let creates = query
        .split('&')
        .any(|pair| matches!(pair.split_once('='), Some(("mode", "rwc" | "memory"))));
    if creates || path.is_empty() || path.starts_with(":memory:") {
        return Ok(());
    }
    if std::path::Path::new(path).exists() {
        return Ok(());
    }
    Err(format!(
        "the file {path} does not exist (Overseer creates only its own database, \
         with ?mode=rwc: if it is Airflow's, run `airflow db migrate` first)"
    ))
}

#[cfg(test)]
mod tests {
    use super::sqlite_file;

    #[test]
    fn a_missing_sqlite_file_is_named_unless_it_is_to_be_created() {
        let missing = "/nonexistent/overseer-test/airflow.db";
        let reason = sqlite_file(&format!("//{missing}")).unwrap_err();
        assert!(
            reason.starts_with(&format!("the file {missing} does not exist")),
            "{reason}"
        );
        assert!(sqlite_file("//overseer.db?mode=rwc").is_ok());
        assert!(sqlite_file(":memory:").is_ok());
        assert!(sqlite_file("//:memory:").is_ok());
        let here = std::env::current_exe().unwrap();
        assert!(sqlite_file(&format!("//{}", here.display())).is_ok());
    }
}
