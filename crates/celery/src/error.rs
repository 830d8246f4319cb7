//! This crate's one error type: a Celery executor whose configuration cannot be
//! checked. Everything that goes wrong *at run time* (a broker that refuses, a
//! worker that does not answer) is a verdict, not an error.
//!
//! No message ever quotes the broker URL or any piece of it that could hold a
//! password: a malformed URL may put its password where the port or the database
//! should be, so the messages name the entry and its scheme, and say what is wrong.

use std::fmt;

/// Where in a `;`-separated broker list a fault is: shown as `broker URL` for a
/// single URL and `broker URL 2 of 3 (amqp://)` in a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// 1-based index of the entry.
    pub index: usize,
    /// How many entries the list has.
    pub of: usize,
    /// The entry's scheme, when it has a well-formed one (a scheme cannot hold a password).
    pub scheme: Option<String>,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("broker URL")?;
        if self.of > 1 {
            write!(f, " {} of {}", self.index, self.of)?;
        }
        if let Some(scheme) = &self.scheme {
            write!(f, " ({scheme}://)")?;
        }
        Ok(())
    }
}

/// A broker URL, or a Celery executor's settings, that cannot be used.
///
/// `Display` is one line, fit for `error: invalid configuration: executors[0].broker_url: {this}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerUrlError {
    /// The URL is empty (or only blanks).
    #[error("broker URL is empty")]
    Empty,
    /// Two `;` with nothing between them, or a `;` at either end.
    #[error("{at}: empty entry in the ';'-separated list (a stray ';'?)")]
    EmptyEntry {
        /// Which entry.
        at: Position,
    },
    /// No `scheme://` in front.
    #[error("{at}: no scheme; expected a URL such as redis://host:6379/0 or amqp://host:5672//")]
    MissingScheme {
        /// Which entry.
        at: Position,
    },
    /// A scheme with characters no URL scheme has.
    #[error(
        "{at}: the scheme is not a URL scheme (letters, digits, '+', '-', '.', starting with a letter)"
    )]
    InvalidScheme {
        /// Which entry.
        at: Position,
    },
    /// The port is not a number from 0 to 65535.
    #[error("{at}: the port is not a number from 0 to 65535")]
    InvalidPort {
        /// Which entry.
        at: Position,
    },
    /// A `[` IPv6 host without its `]`, or text between `]` and `:port`.
    #[error("{at}: the host is not valid (an IPv6 address is written [::1]:6379)")]
    InvalidHost {
        /// Which entry.
        at: Position,
    },
    /// The Redis database (the URL's path) is not a whole number.
    #[error(
        "{at}: the Redis database (the URL's path) must be a whole number, as in redis://host:6379/0"
    )]
    InvalidDatabase {
        /// Which entry.
        at: Position,
    },
    /// `ssl_cert_reqs` has a value kombu does not know.
    #[error(
        "{at}: ssl_cert_reqs must be CERT_REQUIRED, CERT_OPTIONAL or CERT_NONE (or required, optional, none)"
    )]
    InvalidCertReqs {
        /// Which entry.
        at: Position,
    },
    /// A `redis+socket://` URL without the socket's path.
    #[error("{at}: the socket's path is missing, as in redis+socket:///run/redis/redis.sock")]
    MissingSocketPath {
        /// Which entry.
        at: Position,
    },
    /// An AMQP virtual host longer than the protocol allows.
    #[error("{at}: the virtual host is longer than AMQP's 255 bytes")]
    VhostTooLong {
        /// Which entry.
        at: Position,
    },
    /// `sentinel://` entries mixed with other transports in one list.
    #[error("{at}: a sentinel:// list may hold only sentinel:// entries")]
    MixedSentinel {
        /// The first entry that is not a sentinel.
        at: Position,
    },
    /// A sentinel broker without the name of the master to ask for.
    #[error(
        "broker URL (sentinel://): no master_name; add ?master_name=NAME to the URL, or set Celery's master_name transport option"
    )]
    MissingMasterName,
    /// A queue name the AMQP protocol cannot carry.
    #[error("queue name {name:?} is longer than AMQP's 255 bytes")]
    QueueNameTooLong {
        /// The first 40 characters of the name (queue names are not secrets).
        name: String,
    },
    /// An empty queue name (Celery has no such queue).
    #[error("a queue name is empty")]
    EmptyQueueName,
}

/// `Result` with this crate's error.
pub type Result<T, E = BrokerUrlError> = std::result::Result<T, E>;
