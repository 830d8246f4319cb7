//! The Redis broker check: `PING`, `ROLE`, and the depth of Celery's queues.
//!
//! One multiplexed connection per broker is kept across polls and reopened when it
//! breaks. Every wait is bounded by the deadline the caller passes in (derived from
//! the supervisor's `poll_timeout`, see [`crate::budget`]): the connection's own
//! connect and response timeouts are set from it too, so a silent server costs one
//! timed-out attempt, not a pile of them.
//!
//! Verdicts, each naming the broker by its identity:
//! - refused, timed out, wrong password, no password, `LOADING`, `MASTERDOWN`;
//! - a replica (`ROLE` is not `master`): Celery writes to its broker, a read-only
//!   replica cannot take tasks;
//! - a sentinel broker: the sentinels are asked for the master by name ([`sentinel`]);
//!   none answering, or none knowing the name, are each their own reason.
//!
//! - over TLS (`rediss://`, or `ssl_*` parameters): the options of [`crate::tls`], and
//!   its reasons for a TLS failure (untrusted, expired or misnamed certificate, client
//!   certificate refused, a plain-TCP port); a pooled TLS connection is reused like a
//!   plain one, and a handshake is made again only on reconnect.
//!
//! How a connection is made (straight, through sentinels, over TLS) is in
//! [`connect`]; the connections held between polls are [`watch`] and
//! [`subscription`]; the worker ping is [`ping`].
//!
//! kombu's names for a queue's lists ([`queue_keys`]) live here too: the depth is
//! their sum, and the worker ping (in [`ping`]) reads its answers from such lists.

mod connect;
mod ping;
mod sentinel;
mod subscription;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, Value};
use tokio::sync::Mutex;
use tokio::time::{Instant, timeout_at};

use crate::broker::held::{self, Listener};
use crate::broker::{self, Answers, BrokerProbe, Reason, timed_out};
use crate::detail::{BrokerRead, QueueDepth};
use crate::events::{self, WorkerEvents};
use crate::ping::{Pidbox, Unsent};
use crate::tls::{self, Verification};
use crate::url::{Password, RedisAddress, RedisBroker, SentinelBroker, TlsOptions};
use chrono::{DateTime, Timelike, Utc};
use overseer_core::check::Alarm;
use overseer_core::detail::WorkerDetail;
use overseer_core::secret::scrub_with;

/// kombu's Redis separator between a queue and its priority, and within bindings.
const SEP: &str = "\x06\x16";

/// kombu's Redis priority steps: a queue `q` is the lists `q`, `q\x06\x163`,
/// `q\x06\x166`, `q\x06\x169`.
const PRIORITY_SUFFIXES: [&str; 3] = ["3", "6", "9"];

/// The Redis lists that make up queue `name` (kombu's `_q_for_pri` for every step).
fn queue_keys(name: &str) -> [String; 4] {
    [
        name.to_owned(),
        format!("{name}{SEP}{}", PRIORITY_SUFFIXES[0]),
        format!("{name}{SEP}{}", PRIORITY_SUFFIXES[1]),
        format!("{name}{SEP}{}", PRIORITY_SUFFIXES[2]),
    ]
}

/// How to reach the master.
enum Target {
    /// Straight to it.
    Direct(redis::ConnectionInfo),
    /// Through sentinels, asked for `master_name`; `settings` are the master's.
    Sentinel {
        sentinels: Vec<(String, u16)>,
        master_name: String,
        settings: RedisConnectionInfo,
    },
}

/// One Redis broker's check, with its pooled connection.
pub(crate) struct RedisCheck {
    target: Target,
    /// The broker's identity, for reasons.
    identity: String,
    /// The database, for the pidbox channel name (`/{db}.celery.pidbox`).
    db: i64,
    /// Masked out of any driver message before it is shown.
    password: Option<Password>,
    /// The TLS options, for a `rediss://` broker: the files they name are read at
    /// each new connection.
    tls: Option<TlsOptions>,
    /// The host name the certificate must be valid for, for reasons.
    host: String,
    /// The pooled connection, `None` until the first success or after a failure.
    /// A mutex (not a lock-free cell) because a probe replaces it as a whole; the
    /// supervisor's in-flight guard means it is never contended in practice.
    conn: Mutex<Option<MultiplexedConnection>>,
    /// The server's `run_id` and the start its uptime gave when that run was
    /// first seen: the start read again at every poll would move by a second
    /// with the rounding of the uptime, and a reason that names it would not
    /// hold still.
    started: std::sync::Mutex<Option<(String, DateTime<Utc>)>>,
}

/// kombu's Redis hash of the messages delivered to a worker and not yet
/// acknowledged (its `unacked_key`): prefetched, or running with `acks_late`.
const UNACKED: &str = "unacked";

/// How a command on an open connection failed.
enum Failure {
    /// The connection is gone (the server restarted or died): worth one reconnect.
    Broken(Reason),
    /// The server answered with an error, or not in time: that is the verdict.
    Answered(Reason),
}

impl Failure {
    fn into_reason(self) -> Reason {
        match self {
            Self::Broken(reason) | Self::Answered(reason) => reason,
        }
    }
}

fn settings(
    db: i64,
    username: Option<&String>,
    password: Option<&Password>,
) -> RedisConnectionInfo {
    let mut settings = RedisConnectionInfo::default().set_db(db);
    if let Some(username) = username {
        settings = settings.set_username(username);
    }
    if let Some(password) = password {
        settings = settings.set_password(password.expose_secret());
    }
    settings
}

impl RedisCheck {
    pub(crate) fn direct(broker: &RedisBroker, identity: &str) -> Self {
        let (addr, host) = match (&broker.address, &broker.tls) {
            (RedisAddress::Tcp { host, port }, None) => {
                (ConnectionAddr::Tcp(host.clone(), *port), host.clone())
            }
            (RedisAddress::Tcp { host, port }, Some(options)) => (
                ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: Verification::of(options) == Verification::None,
                    tls_params: None,
                },
                host.clone(),
            ),
            // TLS over a Unix socket is not offered (see `check.rs`).
            (RedisAddress::Unix(path), _) => (ConnectionAddr::Unix(path.into()), path.clone()),
        };
        let info = addr
            .into_connection_info()
            .expect("an address is always connection info")
            .set_redis_settings(settings(
                broker.db,
                broker.username.as_ref(),
                broker.password.as_ref(),
            ));
        Self {
            target: Target::Direct(info),
            identity: identity.to_owned(),
            db: broker.db,
            password: broker.password.clone(),
            tls: broker.tls.clone(),
            host,
            conn: Mutex::new(None),
            started: std::sync::Mutex::new(None),
        }
    }

    pub(crate) fn sentinel(broker: &SentinelBroker, master_name: &str, identity: &str) -> Self {
        Self {
            target: Target::Sentinel {
                sentinels: broker.sentinels.clone(),
                master_name: master_name.to_owned(),
                settings: settings(
                    broker.db,
                    broker.username.as_ref(),
                    broker.password.as_ref(),
                ),
            },
            identity: identity.to_owned(),
            db: broker.db,
            password: broker.password.clone(),
            tls: broker.tls.clone(),
            // The master's name is known only once a sentinel gives it.
            host: String::new(),
            conn: Mutex::new(None),
            started: std::sync::Mutex::new(None),
        }
    }

    /// `PING`, `ROLE`, then in one round trip the `LLEN`s, the `HLEN` of the
    /// messages delivered unacknowledged and `INFO server` (its start), on an
    /// open connection.
    async fn commands(
        &self,
        mut conn: MultiplexedConnection,
        queues: &[String],
        deadline: Instant,
        budget: Duration,
    ) -> Result<BrokerRead, Failure> {
        let failure = |e: redis::RedisError| {
            if e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error() {
                Failure::Broken(self.describe(e, budget))
            } else {
                Failure::Answered(self.describe(e, budget))
            }
        };
        let timed_out = |_| Failure::Answered(self.timed_out(budget));
        timeout_at(deadline, redis::cmd("PING").query_async::<()>(&mut conn))
            .await
            .map_err(timed_out)?
            .map_err(failure)?;
        // ROLE and INFO are in Redis's `@dangerous` category, which an ACL
        // user made for an application (`+@all -@dangerous`) may not run:
        // refused, they leave the role and the broker's start unknown, no
        // fault of the broker's. The queues' depths are the check.
        let role: Value = match timeout_at(deadline, redis::cmd("ROLE").query_async(&mut conn))
            .await
            .map_err(timed_out)?
        {
            Err(e) if refused(&e) => Value::Nil,
            answer => answer.map_err(failure)?,
        };
        match role_name(&role).as_deref() {
            Some("master") | None => {}
            Some(_) => {
                return Err(Failure::Answered(format!(
                    "broker {} is a read-only replica, not the master Celery sends tasks to",
                    self.identity
                )));
            }
        }
        let mut pipe = redis::pipe();
        // Each command's answer on its own: a refused HLEN or INFO leaves
        // what it says unknown; a refused LLEN is the check's failure.
        pipe.ignore_errors();
        for queue in queues {
            for key in queue_keys(queue) {
                pipe.cmd("LLEN").arg(key);
            }
        }
        pipe.cmd("HLEN").arg(UNACKED);
        pipe.cmd("INFO").arg("server");
        let mut values: Vec<redis::RedisResult<Value>> =
            timeout_at(deadline, pipe.query_async(&mut conn))
                .await
                .map_err(timed_out)?
                .map_err(failure)?;
        let answer = |value: Option<redis::RedisResult<Value>>, command: &str| match value {
            Some(Err(e)) if refused(&e) => {
                tracing::debug!(broker = %self.identity, command, "refused: the user lacks the permission (NOPERM); left unknown");
                None
            }
            Some(value) => value.ok(),
            None => None,
        };
        let info: String = answer(values.pop(), "INFO")
            .and_then(|v| redis::from_redis_value(v).ok())
            .unwrap_or_default();
        let delivered: Option<u64> =
            answer(values.pop(), "HLEN").and_then(|v| redis::from_redis_value(v).ok());
        let lengths: Vec<u64> = values
            .into_iter()
            .map(|value| {
                value.map_err(failure).and_then(|v| {
                    redis::from_redis_value(v).map_err(|e| {
                        Failure::Answered(format!(
                            "broker {} answered LLEN with {e}",
                            self.identity
                        ))
                    })
                })
            })
            .collect::<Result<_, _>>()?;
        let depths = queues
            .iter()
            .zip(lengths.chunks(4))
            .map(|(queue, lengths)| QueueDepth {
                queue: queue.clone(),
                messages: Some(lengths.iter().sum()),
                consumers: None,
                note: None,
            })
            .collect();
        Ok(BrokerRead {
            queues: depths,
            delivered,
            started_at: self.started_at(&info),
        })
    }

    /// When the server started, from `INFO server`'s `run_id` and
    /// `uptime_in_seconds`: the start first computed for a run, for as long
    /// as the run is the same.
    fn started_at(&self, info: &str) -> Option<DateTime<Utc>> {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let run_id = field("run_id")?;
        let mut started = self
            .started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, at)) = started.as_ref().filter(|(run, _)| run == run_id) {
            return Some(*at);
        }
        let uptime: i64 = field("uptime_in_seconds")?.parse().ok()?;
        let at = Utc::now() - chrono::Duration::seconds(uptime);
        let at = at.with_nanosecond(0).unwrap_or(at);
        *started = Some((run_id.to_owned(), at));
        Some(at)
    }

    fn timed_out(&self, budget: Duration) -> Reason {
        timed_out(&self.broker(), budget)
    }

    /// How reasons name the broker.
    fn broker(&self) -> String {
        format!("broker {}", self.identity)
    }

    fn scrub(&self, text: String) -> String {
        let password: Vec<&str> = self.password.iter().map(Password::expose_secret).collect();
        scrub_with(&text, &password)
    }

    /// A driver error, in plain words naming the broker.
    fn describe(&self, e: redis::RedisError, budget: Duration) -> Reason {
        self.describe_for(&self.broker(), e, budget)
    }

    /// A driver error, in plain words naming `id` (the broker, or one of its sentinels).
    fn describe_for(&self, id: &str, e: redis::RedisError, budget: Duration) -> Reason {
        let code = e.code().unwrap_or_default();
        if let Some(reason) = tls::fault(id, &self.host, &e) {
            reason
        } else if e.is_connection_refusal() {
            broker::refused(id)
        } else if e.is_timeout() {
            timed_out(id, budget)
        } else if code == "WRONGPASS" || e.kind() == redis::ErrorKind::AuthenticationFailed {
            format!("{id} rejected the password")
        } else if code == "NOAUTH" {
            format!("{id} requires a password, and the URL gives none")
        } else if code == "LOADING" {
            format!("{id} is loading its dataset into memory and cannot serve yet (LOADING)")
        } else if code == "MASTERDOWN" {
            format!("{id} is a replica that lost its master (MASTERDOWN)")
        } else if code == "NOPERM" {
            format!("{id} refused the command: the user lacks the permission (NOPERM)")
        } else if code == "READONLY" {
            format!("{id} is a read-only replica, not the master Celery sends tasks to")
        } else if e.is_connection_dropped() || e.is_io_error() {
            self.scrub(format!("{id} dropped the connection ({e})"))
        } else {
            self.scrub(format!("{id} failed: {e}"))
        }
    }
}

#[async_trait::async_trait]
impl BrokerProbe for RedisCheck {
    /// `PING`s the master, checks it is one, and reads the depth of `queues`, all
    /// before `deadline` (`budget` is the same bound, as a length, for reasons).
    ///
    /// A pooled connection found broken (the server restarted since the last poll)
    /// is replaced at once, within the same deadline: the verdict is about the
    /// server now, not about a socket from before.
    async fn probe(
        &self,
        queues: &[String],
        deadline: Instant,
        budget: Duration,
    ) -> Result<BrokerRead, Reason> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.clone() {
            match self.commands(conn, queues, deadline, budget).await {
                Ok(depths) => return Ok(depths),
                Err(Failure::Broken(reason)) => {
                    tracing::debug!(broker = %self.identity, %reason, "reconnecting");
                    *slot = None;
                }
                Err(Failure::Answered(reason)) => {
                    *slot = None;
                    return Err(reason);
                }
            }
        }
        let conn = self.connect(deadline, budget).await?;
        *slot = Some(conn.clone());
        let result = self.commands(conn, queues, deadline, budget).await;
        if result.is_err() {
            // A slow, failing or demoted server's connection is not reused.
            *slot = None;
        }
        result.map_err(Failure::into_reason)
    }

    /// Celery's remote-control ping (`active_queues`), on the pooled connection.
    async fn ping(
        &self,
        pidbox: &Pidbox,
        window_end: Instant,
        cleanup: Duration,
    ) -> Result<Vec<WorkerDetail>, Unsent> {
        let conn = self.conn.lock().await.clone();
        let Some(mut conn) = conn else {
            return Err(Unsent::Failed(broker::not_connected(&self.identity)));
        };
        ping::ping(&mut conn, self.db, pidbox, window_end, cleanup)
            .await
            .map_err(|e| e.map(|e| self.scrub(format!("broker {}: {e}", self.identity))))
    }

    /// Blocks on a key nobody writes, over a connection of its own ([`watch`]).
    async fn watch(&self, alarm: Alarm, answers: Answers) {
        let key = format!("_overseer.watch.{}", uuid::Uuid::new_v4().simple());
        let link = watch::Watch { check: self, key };
        held::drive(link, Listener::Watch(alarm), &self.identity, &answers).await;
    }

    /// The workers' events, by a pattern subscription ([`subscription`]).
    async fn subscribe(&self, index: usize, events: Arc<WorkerEvents>, answers: Answers) {
        let pattern = format!("/{}.{}/worker.*", self.db, events::EXCHANGE);
        let link = subscription::Subscription {
            check: self,
            index,
            events: Arc::clone(&events),
            pattern,
        };
        let listener = Listener::Events { index, events };
        held::drive(link, listener, &self.identity, &answers).await;
    }
}

/// How late Redis may answer a blocking command whose own timeout ran out (the
/// worker ping's answers, the watch's `BLPOP`). It notices at the next turn of
/// its event loop, which an idle server takes every `1/hz` seconds: 100 ms at
/// the default `hz 10`; and a little for the reply to travel. A blocking wait
/// is sent this much shorter than the time it may take, so that its empty
/// answer is never mistaken for a broker that stopped answering.
pub(super) const REDIS_TIMEOUT_LAG: Duration = Duration::from_millis(120);

/// The server refused the command to this user (its ACL: `NOPERM`).
fn refused(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM")
}

/// The first element of a `ROLE` reply: `master`, `slave` or `sentinel`.
fn role_name(role: &Value) -> Option<String> {
    match role {
        Value::Array(items) => match items.first()? {
            Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            Value::SimpleString(text) => Some(text.clone()),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_keys_use_kombus_separator() {
        assert_eq!(
            queue_keys("default"),
            [
                "default".to_owned(),
                "default\x06\x163".to_owned(),
                "default\x06\x166".to_owned(),
                "default\x06\x169".to_owned()
            ]
        );
    }
}
