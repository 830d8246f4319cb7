//! Broker URLs as Celery (kombu 5.5) reads them.
//!
//! kombu splits a `broker_url` on `;` into failover alternates, then parses each
//! one with Python's `urlparse` under HTTP rules (`kombu.utils.url.url_to_parts`):
//! the authority ends at the first `/`, `?` or `#`; the user information ends at its
//! last `@`; user and password split at the first `:`; everything is percent-decoded.
//! The path, less one leading `/`, is the *virtual host*:
//!
//! | URL | kombu's virtual host | what it means |
//! | --- | --- | --- |
//! | `amqp://h`, `amqp://h/` | none | vhost `/` (the default) |
//! | `amqp://h//` | `/` | vhost `/` |
//! | `amqp://h/%2F` | `/` | vhost `/` |
//! | `amqp://h/prod` | `prod` | vhost `prod` |
//! | `amqp://h//prod` | `/prod` | vhost `/prod` |
//! | `redis://h`, `redis://h/` | none | database 0 |
//! | `redis://h/3`, `redis://h//3` | `3`, `/3` | database 3 (one more leading `/` is dropped) |
//!
//! What this module supports, and how:
//! - `redis://[[user]:password@]host[:port][/db]` (port 6379, host `127.0.0.1` when empty).
//! - `rediss://`, and any Redis URL with `ssl_*` query parameters (kombu then uses TLS):
//!   `ssl_cert_reqs` validated (`CERT_REQUIRED|CERT_OPTIONAL|CERT_NONE`, or
//!   `required|optional|none`), `ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`,
//!   `ssl_check_hostname`; checked over TLS as `crate::tls` says. A sentinel list with
//!   them reaches its master over TLS (the sentinels in plain TCP, as kombu does).
//! - `redis+socket:///path/to/redis.sock[?virtual_host=N]`.
//! - `sentinel://host:26379;sentinel://host2:26379[/db]`: one broker reached through its
//!   sentinels (not a failover list); the password of the first entry is the master's, as
//!   in kombu. The master's name comes from `?master_name=NAME` on any entry (an Overseer
//!   addition: kombu reads it only from its transport options), or from the check's
//!   settings (see [`crate::CheckSettings::sentinel_master_name`]).
//! - `amqp://`, `pyamqp://`, `librabbitmq://` (port 5672; user and password default to
//!   `guest`, host to `localhost`, as kombu's py-amqp transport does); `amqps://` and any
//!   AMQP URL with `ssl` or `ssl_*` parameters are TLS, checked as `crate::tls` says
//!   (`ssl_cert_reqs=none` and `ssl_check_hostname=false` are answered `unknown`).
//! - `;`-separated failover lists of the above, which may mix transports.
//! - Any other well-formed scheme (`sqs://`, `filesystem://`, `memory://`, `sqla+...`)
//!   is a transport with no check yet: not an error, its verdict is `unknown`.
//!
//! # Layout
//! - `parts`: one URL cut into its pieces as Python's `urlparse` cuts it.
//! - `forms`: each transport's URL forms (the table above) read from those pieces,
//!   and a sentinel list merged into its one broker.
//! - `tls`: the `ssl_*` options a URL (or Celery's `broker_use_ssl`) asks for.
//! - `identity`: what may be shown of a broker: its identity, told apart from a
//!   repeat, and the password that never prints.

mod forms;
mod identity;
mod parts;
#[cfg(test)]
mod tests;
mod tls;

use crate::error::{BrokerUrlError, Position, Result};

pub use identity::Password;
pub use tls::{CertReqs, TlsOptions};

use forms::{EntryKind, parse_entry, sentinel_broker};
use identity::told_apart;

/// Airflow's broker when `[celery] broker_url` is unset.
pub const AIRFLOW_DEFAULT_BROKER_URL: &str = "redis://redis:6379/0";

/// Where a Redis server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisAddress {
    /// A TCP host and port.
    Tcp {
        /// Host name or address (IPv6 without brackets).
        host: String,
        /// Port.
        port: u16,
    },
    /// A Unix socket (`redis+socket://`).
    Unix(String),
}

/// A Redis broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisBroker {
    /// Where it listens.
    pub address: RedisAddress,
    /// The database number (kombu's virtual host).
    pub db: i64,
    /// The ACL user, if any.
    pub username: Option<String>,
    /// The password, if any.
    pub password: Option<Password>,
    /// TLS, when asked for.
    pub tls: Option<TlsOptions>,
}

/// A Redis master found through its sentinels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelBroker {
    /// The sentinels, in the URL's order: `(host, port)`.
    pub sentinels: Vec<(String, u16)>,
    /// The master's name from `?master_name=`, if the URL gives it.
    pub master_name: Option<String>,
    /// The master's database number.
    pub db: i64,
    /// The master's ACL user, if any.
    pub username: Option<String>,
    /// The master's password, if any.
    pub password: Option<Password>,
    /// TLS to the master, when asked for.
    pub tls: Option<TlsOptions>,
}

/// A RabbitMQ (AMQP 0-9-1) broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpBroker {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port.
    pub port: u16,
    /// The virtual host, decoded (`/` by default).
    pub vhost: String,
    /// The user (`guest` by default).
    pub username: String,
    /// The password (`guest` by default).
    pub password: Password,
    /// TLS, when asked for.
    pub tls: Option<TlsOptions>,
}

/// What kind of broker an entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// `redis://`, `rediss://`, `redis+socket://`.
    Redis(RedisBroker),
    /// `sentinel://` (the whole list is one broker).
    Sentinel(SentinelBroker),
    /// `amqp://`, `amqps://`, `pyamqp://`, `librabbitmq://`.
    Amqp(AmqpBroker),
    /// A transport Celery knows and this crate does not check (`sqs`, `filesystem`, ...).
    Unsupported {
        /// The scheme as written (`sqs`, `sqla+postgresql`).
        scheme: String,
    },
}

/// One broker of a broker URL: a failover alternate, or a whole sentinel list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    /// How to reach it.
    pub transport: Transport,
    /// Its identity: the URL with user, password, query and fragment removed
    /// (`redis://broker:6379/0`). Safe to show anywhere.
    pub identity: String,
}

/// A parsed `broker_url`: one or more brokers, Celery's failover order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    brokers: Vec<Broker>,
}

impl BrokerUrl {
    /// Parses a broker URL (or `;`-separated list) as kombu would, or says in one
    /// line, without the password, what is wrong with it.
    pub fn parse(text: &str) -> Result<Self> {
        let text = text.trim();
        if text.is_empty() {
            return Err(BrokerUrlError::Empty);
        }
        let entries: Vec<&str> = text.split(';').map(str::trim).collect();
        let of = entries.len();
        let mut parsed = Vec::with_capacity(of);
        for (i, entry) in entries.iter().enumerate() {
            let at = Position {
                index: i + 1,
                of,
                scheme: None,
            };
            if entry.is_empty() {
                return Err(BrokerUrlError::EmptyEntry { at });
            }
            parsed.push(parse_entry(entry, at)?);
        }
        let brokers = if parsed
            .first()
            .is_some_and(|e| matches!(e.kind, EntryKind::Sentinel { .. }))
        {
            vec![sentinel_broker(parsed)?]
        } else if let Some(entry) = parsed
            .iter()
            .find(|e| matches!(e.kind, EntryKind::Sentinel { .. }))
        {
            return Err(BrokerUrlError::MixedSentinel {
                at: entry.at.clone(),
            });
        } else {
            parsed
                .into_iter()
                .map(|entry| Broker {
                    identity: entry.identity,
                    transport: match entry.kind {
                        EntryKind::Ready(transport) => transport,
                        EntryKind::Sentinel { .. } => unreachable!("sentinels handled above"),
                    },
                })
                .collect()
        };
        Ok(Self {
            brokers: told_apart(brokers),
        })
    }

    /// The brokers, in failover order.
    pub fn brokers(&self) -> &[Broker] {
        &self.brokers
    }

    /// This URL with TLS on for every Redis (TCP), sentinel and AMQP broker, as
    /// Celery's `broker_use_ssl` turns it on: each option `ssl` sets wins over the
    /// URL's own. The identities stay as written.
    pub fn with_tls(&self, ssl: &TlsOptions) -> Self {
        let merged =
            |own: &Option<TlsOptions>| Some(own.clone().unwrap_or_default().overridden_by(ssl));
        let brokers = self
            .brokers
            .iter()
            .cloned()
            .map(|mut broker| {
                match &mut broker.transport {
                    Transport::Redis(redis)
                        if matches!(redis.address, RedisAddress::Tcp { .. }) =>
                    {
                        redis.tls = merged(&redis.tls);
                    }
                    Transport::Sentinel(sentinel) => sentinel.tls = merged(&sentinel.tls),
                    Transport::Amqp(amqp) => amqp.tls = merged(&amqp.tls),
                    Transport::Redis(_) | Transport::Unsupported { .. } => {}
                }
                broker
            })
            .collect();
        Self { brokers }
    }

    /// The instance identity: every broker's identity, `;`-separated, no credentials.
    pub fn identity(&self) -> String {
        self.brokers
            .iter()
            .map(|b| b.identity.as_str())
            .collect::<Vec<_>>()
            .join(";")
    }
}
