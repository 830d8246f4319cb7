//! How Overseer opens the metadata database: one set of pool options for the
//! actors, the command line and migrations alike.

use std::time::Duration;

use sea_orm::ConnectOptions;

/// How long opening a connection may take before the database counts as
/// unreachable. Bounds start-up against a database that does not answer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a statement waits for a free pooled connection. The aggregator's
/// writes and reads are bounded sooner, by [`write_timeout`] and [`read_timeout`].
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest bound on one write or read of the aggregator: on a healthy
/// database a refresh takes milliseconds.
pub const MIN_STATEMENT_TIMEOUT: Duration = Duration::from_secs(1);

/// The shortest bound on a read of every live row, whose work grows with the
/// executors of other hosts (50,000 rows take about a second on a loaded
/// Postgres).
pub const MIN_FULL_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest bound on any of the aggregator's writes and reads.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one read of what changed (a refresh) may take before the report
/// says `metadatabase: unhealthy`: the refresh interval, within
/// [`MIN_STATEMENT_TIMEOUT`] and [`MIN_FULL_READ_TIMEOUT`]. So a database that
/// stops answering (unreachable, or frozen with its connections open) shows
/// within a refresh and this timeout, not after the pool's 10 s (the pool
/// retries a refused connection until then) or a TCP timeout.
pub fn read_timeout(refresh_interval: Duration) -> Duration {
    refresh_interval.clamp(MIN_STATEMENT_TIMEOUT, MIN_FULL_READ_TIMEOUT)
}

/// How long a read of every live row (the aggregator's first, then one every
/// few seconds) may take: the refresh interval, within
/// [`MIN_FULL_READ_TIMEOUT`] and [`MAX_TIMEOUT`].
pub fn full_read_timeout(refresh_interval: Duration) -> Duration {
    refresh_interval.clamp(MIN_FULL_READ_TIMEOUT, MAX_TIMEOUT)
}

/// How long one flush (heartbeats and changed verdicts, one transaction), or
/// ending the rows, may take before it counts as failed and its verdicts are
/// kept for the next: two heartbeat intervals (one is due every interval, and
/// the rows' liveness threshold is at least 2.1 of them), within
/// [`MIN_STATEMENT_TIMEOUT`] and [`MAX_TIMEOUT`]. Nothing waits on a write (the
/// report shows the verdicts meanwhile): this bounds a write to a database
/// that stopped answering, which the driver alone would wait on for as long as
/// the pool or TCP does.
pub fn write_timeout(heartbeat_interval: Duration) -> Duration {
    (heartbeat_interval * 2).clamp(MIN_STATEMENT_TIMEOUT, MAX_TIMEOUT)
}

/// Connections kept open: the aggregator's writes and reads, and a migration.
pub const MAX_CONNECTIONS: u32 = 4;

/// Connections kept open to a SQLite file: one write and one read at a time.
/// SQLite runs one writer at a time whatever the pool, and each connection is
/// a thread with a page cache of its own (up to 2 MiB) and, under glibc, a
/// malloc arena: two instead of four took 11 MiB off the peak memory at 10,000
/// executors, with the same flush times.
pub const SQLITE_MAX_CONNECTIONS: u32 = 2;

/// The name Overseer's connections carry on Postgres (`application_name`,
/// in `pg_stat_activity` and the server's logs), so that a DBA tells them from
/// Airflow's own on a shared metadata database.
pub const APPLICATION_NAME: &str = "overseer";

/// `url` naming its connections [`APPLICATION_NAME`] on Postgres, unless it
/// names them itself (`?application_name=...`). Other databases' URLs as
/// they are: sqlx sends MySQL no connection attributes to carry a name.
pub fn named(url: &str) -> String {
    let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or_default();
    let named = query
        .split('&')
        .any(|pair| pair.split('=').next() == Some("application_name"));
    if !postgres || named {
        return url.to_owned();
    }
    let join = if url.contains('?') { '&' } else { '?' };
    format!("{url}{join}application_name={APPLICATION_NAME}")
}

/// The pool options for `url` (which carries its password: call this only where
/// the connection is made), its connections [`named`]. sqlx's own statement
/// logging is off: Overseer logs what a statement was for, and sqlx would log
/// every heartbeat.
pub fn options(url: &str) -> ConnectOptions {
    let mut options = ConnectOptions::new(named(url));
    let max_connections = if url.starts_with("sqlite:") {
        SQLITE_MAX_CONNECTIONS
    } else {
        MAX_CONNECTIONS
    };
    options
        .connect_timeout(CONNECT_TIMEOUT)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .max_connections(max_connections)
        .sqlx_logging(false);
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_connections_are_named_unless_the_url_names_them() {
        for (url, named_as) in [
            (
                "postgres://a@h/db",
                "postgres://a@h/db?application_name=overseer",
            ),
            (
                "postgresql://a@h/db?sslmode=require",
                "postgresql://a@h/db?sslmode=require&application_name=overseer",
            ),
            (
                "postgres://a@h/db?application_name=mine",
                "postgres://a@h/db?application_name=mine",
            ),
            ("mysql://root@h/db", "mysql://root@h/db"),
            (
                "sqlite://./overseer.db?mode=rwc",
                "sqlite://./overseer.db?mode=rwc",
            ),
        ] {
            assert_eq!(named(url), named_as, "{url}");
        }
    }
}
