//! Each transport's URL forms, as kombu reads them (the table in [`super`]):
//! Redis over TCP or a Unix socket, sentinel lists, AMQP, and the transports that
//! have no check.

use super::parts::{is_scheme, split};
use super::tls::tls_options;
use super::{
    AmqpBroker, Broker, Password, RedisAddress, RedisBroker, SentinelBroker, TlsOptions, Transport,
};
use crate::error::{BrokerUrlError, Position, Result};

/// kombu's Redis port when the URL gives none.
const REDIS_PORT: u16 = 6379;
/// kombu's sentinel port when the URL gives none.
const SENTINEL_PORT: u16 = 26379;
/// py-amqp's port when the URL gives none.
const AMQP_PORT: u16 = 5672;
/// py-amqp's TLS port, for `amqps://`.
const AMQPS_PORT: u16 = 5671;
/// AMQP carries the virtual host as a short string: at most 255 bytes.
const AMQP_SHORT_STRING_MAX: usize = 255;

/// One `;`-separated entry, before sentinel entries are merged into one broker.
pub(super) struct Entry {
    pub(super) at: Position,
    pub(super) identity: String,
    pub(super) kind: EntryKind,
}

pub(super) enum EntryKind {
    Ready(Transport),
    Sentinel {
        host: String,
        port: u16,
        db: i64,
        username: Option<String>,
        password: Option<Password>,
        master_name: Option<String>,
        tls: Option<TlsOptions>,
    },
}

pub(super) fn parse_entry(entry: &str, mut at: Position) -> Result<Entry> {
    let Some((scheme, rest)) = entry.split_once("://") else {
        return Err(BrokerUrlError::MissingScheme { at });
    };
    if !is_scheme(scheme) {
        return Err(BrokerUrlError::InvalidScheme { at });
    }
    at.scheme = Some(scheme.to_owned());
    let parts = split(rest, &at)?;
    let identity = format!("{scheme}://{}{}", parts.hostinfo, parts.raw_path);
    let kind = match scheme {
        "redis" | "rediss" => {
            let tls = tls_options(scheme == "rediss", &parts, &at)?;
            EntryKind::Ready(Transport::Redis(RedisBroker {
                address: RedisAddress::Tcp {
                    host: parts.host.clone().unwrap_or_else(|| "127.0.0.1".into()),
                    port: parts.port.filter(|&p| p != 0).unwrap_or(REDIS_PORT),
                },
                db: redis_db(parts.path.as_deref(), &at)?,
                username: parts.username.clone(),
                password: parts.password.clone().map(Password),
                tls,
            }))
        }
        "redis+socket" => {
            let Some(path) = parts.path.as_deref() else {
                return Err(BrokerUrlError::MissingSocketPath { at });
            };
            let tls = tls_options(false, &parts, &at)?;
            EntryKind::Ready(Transport::Redis(RedisBroker {
                address: RedisAddress::Unix(format!("/{path}")),
                db: redis_db(parts.query("virtual_host"), &at)?,
                username: parts.username.clone(),
                password: parts.password.clone().map(Password),
                tls,
            }))
        }
        "sentinel" => EntryKind::Sentinel {
            host: parts.host.clone().unwrap_or_else(|| "127.0.0.1".into()),
            port: parts.port.filter(|&p| p != 0).unwrap_or(SENTINEL_PORT),
            db: redis_db(parts.path.as_deref(), &at)?,
            username: parts.username.clone(),
            password: parts.password.clone().map(Password),
            master_name: parts.query("master_name").map(str::to_owned),
            tls: tls_options(false, &parts, &at)?,
        },
        "amqp" | "amqps" | "pyamqp" | "librabbitmq" => {
            let vhost = parts.path.clone().unwrap_or_else(|| "/".into());
            if vhost.len() > AMQP_SHORT_STRING_MAX {
                return Err(BrokerUrlError::VhostTooLong { at });
            }
            let secure = scheme == "amqps";
            EntryKind::Ready(Transport::Amqp(AmqpBroker {
                host: parts.host.clone().unwrap_or_else(|| "localhost".into()),
                port: parts.port.filter(|&p| p != 0).unwrap_or(if secure {
                    AMQPS_PORT
                } else {
                    AMQP_PORT
                }),
                vhost,
                username: parts.username.clone().unwrap_or_else(|| "guest".into()),
                password: Password(parts.password.clone().unwrap_or_else(|| "guest".into())),
                tls: tls_options(secure, &parts, &at)?,
            }))
        }
        other => EntryKind::Ready(Transport::Unsupported {
            scheme: other.to_owned(),
        }),
    };
    Ok(Entry { at, identity, kind })
}

/// Merges a list of sentinel entries into the one broker they reach.
pub(super) fn sentinel_broker(entries: Vec<Entry>) -> Result<Broker> {
    let identity = entries
        .iter()
        .map(|e| e.identity.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let mut sentinels = Vec::with_capacity(entries.len());
    let mut first = None;
    let mut master = None;
    for entry in entries {
        let EntryKind::Sentinel {
            host,
            port,
            db,
            username,
            password,
            master_name,
            tls,
        } = entry.kind
        else {
            return Err(BrokerUrlError::MixedSentinel { at: entry.at });
        };
        sentinels.push((host, port));
        master = master.or(master_name);
        // kombu takes the credentials and database from the first URL only.
        first.get_or_insert((db, username, password, tls));
    }
    let (db, username, password, tls) = first.expect("a sentinel list has an entry");
    Ok(Broker {
        identity,
        transport: Transport::Sentinel(SentinelBroker {
            sentinels,
            master_name: master,
            db,
            username,
            password,
            tls,
        }),
    })
}

/// kombu's `_prepare_virtual_host` for Redis: none or `/` is database 0; one more
/// leading `/` is dropped; the rest must be a whole number.
fn redis_db(vhost: Option<&str>, at: &Position) -> Result<i64> {
    let vhost = match vhost {
        None | Some("/") => return Ok(0),
        Some(vhost) => vhost.strip_prefix('/').unwrap_or(vhost).trim(),
    };
    let digits = vhost.strip_prefix('+').unwrap_or(vhost);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BrokerUrlError::InvalidDatabase { at: at.clone() });
    }
    digits
        .parse()
        .map_err(|_| BrokerUrlError::InvalidDatabase { at: at.clone() })
}
