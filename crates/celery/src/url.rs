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
//! Longer than this project's ~400 lines per file, for a reason: it is one grammar,
//! the table above, its types, its parser and their unit tests (about 90 lines); cut
//! in two, the rules would stand apart from the table that states them.

use std::fmt;

use percent_encoding::percent_decode_str;

use crate::error::{BrokerUrlError, Position, Result};

/// Airflow's broker when `[celery] broker_url` is unset.
pub const AIRFLOW_DEFAULT_BROKER_URL: &str = "redis://redis:6379/0";

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

/// A password: it never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// The password itself, only for handing to a driver.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(***)")
    }
}

/// `ssl_cert_reqs`: how kombu checks the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertReqs {
    /// `CERT_REQUIRED` / `required`.
    Required,
    /// `CERT_OPTIONAL` / `optional`.
    Optional,
    /// `CERT_NONE` / `none`.
    None,
}

/// The TLS settings a URL asks for (`rediss://`, `amqps://`, `ssl_*` parameters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// `ssl_cert_reqs`.
    pub cert_reqs: Option<CertReqs>,
    /// `ssl_ca_certs`: the CA bundle's path.
    pub ca_certs: Option<String>,
    /// `ssl_certfile`: the client certificate's path.
    pub certfile: Option<String>,
    /// `ssl_keyfile`: the client key's path.
    pub keyfile: Option<String>,
    /// `ssl_check_hostname` (anything but `false` is true, as in kombu).
    pub check_hostname: Option<bool>,
}

impl TlsOptions {
    /// These options with every one `other` sets taken from `other`.
    pub fn overridden_by(self, other: &TlsOptions) -> Self {
        Self {
            cert_reqs: other.cert_reqs.or(self.cert_reqs),
            ca_certs: other.ca_certs.clone().or(self.ca_certs),
            certfile: other.certfile.clone().or(self.certfile),
            keyfile: other.keyfile.clone().or(self.keyfile),
            check_hostname: other.check_hostname.or(self.check_hostname),
        }
    }
}

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

/// One `;`-separated entry, before sentinel entries are merged into one broker.
struct Entry {
    at: Position,
    identity: String,
    kind: EntryKind,
}

enum EntryKind {
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

/// The pieces of one URL, as `urlparse("http://" + rest)` cuts them.
struct Parts<'a> {
    /// `host[:port]` as written (no user information): part of the identity.
    hostinfo: &'a str,
    host: Option<String>,
    port: Option<u16>,
    username: Option<String>,
    password: Option<String>,
    /// The path as written, for the identity.
    raw_path: &'a str,
    /// The path less one leading `/`, decoded; `None` when empty.
    path: Option<String>,
    /// The query's `key=value` pairs, decoded, blank values dropped (`parse_qsl`).
    query: Vec<(String, String)>,
}

impl Parts<'_> {
    /// The last value of a query key (Python's `dict(parse_qsl(...))`).
    fn query(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn parse_entry(entry: &str, mut at: Position) -> Result<Entry> {
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

/// The brokers, each identity distinct: a broker whose identity an earlier
/// one has (the list names one server twice, differing only in credentials or
/// options) is told apart by its place in the list,
/// `redis://broker:6379/0 (broker URL 2 of 2)`, so that its reasons, its
/// detail and its series on `/metrics` are its own, never merged with the
/// other's, and no credential is shown to tell them apart.
fn told_apart(mut brokers: Vec<Broker>) -> Vec<Broker> {
    let of = brokers.len();
    for i in 1..brokers.len() {
        let (earlier, rest) = brokers.split_at_mut(i);
        if earlier.iter().any(|b| b.identity == rest[0].identity) {
            rest[0].identity = format!("{} (broker URL {} of {of})", rest[0].identity, i + 1);
        }
    }
    brokers
}

/// Merges a list of sentinel entries into the one broker they reach.
fn sentinel_broker(entries: Vec<Entry>) -> Result<Broker> {
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

/// RFC 3986 scheme characters, as Python's `urlparse` accepts them.
fn is_scheme(scheme: &str) -> bool {
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Cuts `rest` (what follows `scheme://`) as `urlparse("http://" + rest)` does.
fn split<'a>(rest: &'a str, at: &Position) -> Result<Parts<'a>> {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(authority_end);
    let after = after.split_once('#').map_or(after, |(before, _)| before);
    let (raw_path, query) = after.split_once('?').unwrap_or((after, ""));

    let (userinfo, hostinfo) = match authority.rsplit_once('@') {
        Some((userinfo, hostinfo)) => (Some(userinfo), hostinfo),
        None => (None, authority),
    };
    let (username, password) = match userinfo {
        Some(info) => match info.split_once(':') {
            Some((user, password)) => (non_empty(unquote(user)), non_empty(unquote(password))),
            None => (non_empty(unquote(info)), None),
        },
        None => (None, None),
    };

    let (host, port) = if let Some(bracketed) = hostinfo.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err(BrokerUrlError::InvalidHost { at: at.clone() });
        };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return Err(BrokerUrlError::InvalidHost { at: at.clone() }),
            },
        };
        (host, port)
    } else {
        if hostinfo.contains(']') {
            return Err(BrokerUrlError::InvalidHost { at: at.clone() });
        }
        match hostinfo.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostinfo, None),
        }
    };
    let port = match port.filter(|p| !p.is_empty()) {
        None => None,
        Some(port) if port.bytes().all(|b| b.is_ascii_digit()) => Some(
            port.parse::<u16>()
                .map_err(|_| BrokerUrlError::InvalidPort { at: at.clone() })?,
        ),
        Some(_) => return Err(BrokerUrlError::InvalidPort { at: at.clone() }),
    };

    let path = raw_path.strip_prefix('/').unwrap_or(raw_path);
    Ok(Parts {
        hostinfo,
        host: non_empty(unquote(&host.to_lowercase())),
        port,
        username,
        password,
        raw_path,
        path: non_empty(unquote(path)),
        query: parse_qsl(query),
    })
}

/// Python's `unquote`: `%XX` decoded, invalid UTF-8 replaced.
fn unquote(text: &str) -> String {
    percent_decode_str(text).decode_utf8_lossy().into_owned()
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

/// Python's `parse_qsl(query)`: `&`-separated, `+` is a space, blank values dropped.
fn parse_qsl(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(_, value)| !value.is_empty())
        .map(|(key, value)| {
            (
                unquote(&key.replace('+', " ")),
                unquote(&value.replace('+', " ")),
            )
        })
        .collect()
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

/// The TLS settings of an entry: TLS is on for a secure scheme, or (as kombu does)
/// when the query carries `ssl` or any `ssl_*` parameter.
fn tls_options(
    secure_scheme: bool,
    parts: &Parts<'_>,
    at: &Position,
) -> Result<Option<TlsOptions>> {
    let asks_tls = parts
        .query
        .iter()
        .any(|(k, _)| k == "ssl" || k.starts_with("ssl_"));
    if !secure_scheme && !asks_tls {
        return Ok(None);
    }
    let cert_reqs = match parts.query("ssl_cert_reqs") {
        None => None,
        Some("CERT_REQUIRED" | "required") => Some(CertReqs::Required),
        Some("CERT_OPTIONAL" | "optional") => Some(CertReqs::Optional),
        Some("CERT_NONE" | "none") => Some(CertReqs::None),
        Some(_) => return Err(BrokerUrlError::InvalidCertReqs { at: at.clone() }),
    };
    Ok(Some(TlsOptions {
        cert_reqs,
        ca_certs: parts.query("ssl_ca_certs").map(str::to_owned),
        certfile: parts.query("ssl_certfile").map(str::to_owned),
        keyfile: parts.query("ssl_keyfile").map(str::to_owned),
        check_hostname: parts
            .query("ssl_check_hostname")
            .map(|v| !v.eq_ignore_ascii_case("false")),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Broker {
        let url = BrokerUrl::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(url.brokers().len(), 1, "{text}");
        url.brokers()[0].clone()
    }

    fn amqp(text: &str) -> AmqpBroker {
        match one(text).transport {
            Transport::Amqp(b) => b,
            other => panic!("{text}: {other:?}"),
        }
    }

    fn redis(text: &str) -> RedisBroker {
        match one(text).transport {
            Transport::Redis(b) => b,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn amqp_virtual_hosts_follow_kombu() {
        for (url, vhost) in [
            ("amqp://h", "/"),
            ("amqp://h/", "/"),
            ("amqp://h//", "/"),
            ("amqp://h/%2F", "/"),
            ("amqp://h/%2f", "/"),
            ("amqp://h/prod", "prod"),
            ("amqp://h//prod", "/prod"),
            ("amqp://h/a/b", "a/b"),
            ("amqp://h:5672/prod?heartbeat=10", "prod"),
            ("amqp://h/my%20vhost", "my vhost"),
        ] {
            assert_eq!(amqp(url).vhost, vhost, "{url}");
        }
    }

    #[test]
    fn redis_databases_follow_kombu() {
        for (url, db) in [
            ("redis://h", 0),
            ("redis://h/", 0),
            ("redis://h//", 0),
            ("redis://h/3", 3),
            ("redis://h//3", 3),
            ("redis://h/%2F", 0),
            ("redis+socket:///tmp/r.sock?virtual_host=2", 2),
            ("redis+socket:///tmp/r.sock", 0),
        ] {
            assert_eq!(redis(url).db, db, "{url}");
        }
    }

    #[test]
    fn defaults_are_kombus() {
        let b = amqp("amqp://");
        assert_eq!(
            (b.host.as_str(), b.port, b.username.as_str()),
            ("localhost", 5672, "guest")
        );
        assert_eq!(b.password.expose_secret(), "guest");
        assert_eq!(amqp("amqps://h").port, 5671);
        assert_eq!(
            redis("redis://").address,
            RedisAddress::Tcp {
                host: "127.0.0.1".into(),
                port: 6379
            }
        );
    }

    #[test]
    fn brokers_that_differ_only_in_credentials_keep_identities_of_their_own() {
        let url = BrokerUrl::parse(
            "redis://:pw1@h:6379/0;redis://:pw2@h:6379/0;redis://u:pw3@h:6379/0?x=1;redis://g:6379/0",
        )
        .unwrap();
        let identities: Vec<&str> = url.brokers().iter().map(|b| b.identity.as_str()).collect();
        assert_eq!(
            identities,
            [
                "redis://h:6379/0",
                "redis://h:6379/0 (broker URL 2 of 4)",
                "redis://h:6379/0 (broker URL 3 of 4)",
                "redis://g:6379/0",
            ]
        );
        assert!(!url.identity().contains("pw"), "{}", url.identity());
        // A list without repeats is shown as written.
        let url = BrokerUrl::parse("amqp://u:p@a//;amqp://u:p@b//").unwrap();
        assert_eq!(url.identity(), "amqp://a//;amqp://b//");
    }

    #[test]
    fn passwords_are_decoded_and_never_debug_printed() {
        let b = redis("redis://:p%40ss%3Aw@h:6379/0");
        assert_eq!(
            b.password.as_ref().map(Password::expose_secret),
            Some("p@ss:w")
        );
        assert!(!format!("{b:?}").contains("p@ss"));
        let b = redis("redis://:p@ss@h:6379/0");
        assert_eq!(
            b.password.as_ref().map(Password::expose_secret),
            Some("p@ss")
        );
    }
}
