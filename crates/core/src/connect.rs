//! How Overseer opens the metadata database: one set of pool options for the
//! actors, the command line and migrations alike.

use std::time::Duration;

use sea_orm::ConnectOptions;

/// How long opening a connection may take before the database counts as
/// unreachable. Bounds start-up against a database that does not answer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a statement waits for a free pooled connection (and so how long a
/// write or read waits on a database that stopped answering).
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections kept open: the aggregator's writes and reads, and a migration.
pub const MAX_CONNECTIONS: u32 = 4;

/// The pool options for `url` (which carries its password: call this only where
/// the connection is made). sqlx's own statement logging is off: Overseer logs
/// what a statement was for, and sqlx would log every heartbeat.
pub fn options(url: &str) -> ConnectOptions {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .connect_timeout(CONNECT_TIMEOUT)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .max_connections(MAX_CONNECTIONS)
        .sqlx_logging(false);
    options
}
