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
//! kombu's names for a queue's lists ([`queue_keys`]) live here too: the depth is
//! their sum, and the worker ping (in [`ping`]) reads its answers from such lists.

mod ping;
mod sentinel;
mod subscription;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, ProtocolVersion,
    RedisConnectionInfo, TlsCertificates, Value,
};
use tokio::sync::Mutex;
use tokio::time::{Instant, timeout_at};

use crate::broker::held::{self, Listener};
use crate::broker::{self, Answers, BrokerProbe, Reason, timed_out};
use crate::detail::QueueDepth;
use crate::events::{self, WorkerEvents};
use crate::ping::{Pidbox, Unsent};
use crate::tls::{self, Verification};
use crate::url::{Password, RedisAddress, RedisBroker, SentinelBroker, TlsOptions};
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
}

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
        }
    }

    /// `PING`, `ROLE` and the `LLEN`s, on an open connection.
    async fn commands(
        &self,
        mut conn: MultiplexedConnection,
        queues: &[String],
        deadline: Instant,
        budget: Duration,
    ) -> Result<Vec<QueueDepth>, Failure> {
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
        let role: Value = timeout_at(deadline, redis::cmd("ROLE").query_async(&mut conn))
            .await
            .map_err(timed_out)?
            .map_err(failure)?;
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
        for queue in queues {
            for key in queue_keys(queue) {
                pipe.cmd("LLEN").arg(key);
            }
        }
        let lengths: Vec<u64> = if queues.is_empty() {
            Vec::new()
        } else {
            timeout_at(deadline, pipe.query_async(&mut conn))
                .await
                .map_err(timed_out)?
                .map_err(failure)?
        };
        Ok(queues
            .iter()
            .zip(lengths.chunks(4))
            .map(|(queue, lengths)| QueueDepth {
                queue: queue.clone(),
                messages: Some(lengths.iter().sum()),
                consumers: None,
                note: None,
            })
            .collect())
    }

    /// Opens a connection to the master, bounded by `deadline`.
    async fn connect(
        &self,
        deadline: Instant,
        budget: Duration,
    ) -> Result<MultiplexedConnection, Reason> {
        self.connect_pushing(deadline, budget, None).await
    }

    /// [`Self::connect`]; with `push`, over RESP3, its pushes (the messages of
    /// its subscriptions, its end) handed to `push`.
    async fn connect_pushing(
        &self,
        deadline: Instant,
        budget: Duration,
        push: Option<subscription::EventSink>,
    ) -> Result<MultiplexedConnection, Reason> {
        match &self.target {
            Target::Direct(info) => {
                self.open(&self.broker(), info.clone(), deadline, budget, push)
                    .await
            }
            Target::Sentinel {
                sentinels,
                master_name,
                settings,
            } => {
                self.through_sentinels(sentinels, master_name, settings, deadline, budget, push)
                    .await
            }
        }
    }

    /// Connects to `info` (the master, or a sentinel named `who` in reasons);
    /// with `push`, over RESP3, handing it the connection's pushes.
    async fn open(
        &self,
        who: &str,
        info: redis::ConnectionInfo,
        deadline: Instant,
        budget: Duration,
        push: Option<subscription::EventSink>,
    ) -> Result<MultiplexedConnection, Reason> {
        let info = match &push {
            Some(_) => {
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_protocol(ProtocolVersion::RESP3);
                info.set_redis_settings(settings)
            }
            None => info,
        };
        let tls_addr = match info.addr() {
            ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
            _ => None,
        };
        let plain_tcp = match info.addr() {
            ConnectionAddr::Tcp(host, port) => Some((host.clone(), *port)),
            _ => None,
        };
        let client = self.client(who, info, budget)?;
        let left = deadline.saturating_duration_since(Instant::now());
        // The driver's own bounds, so that a connection never outlives our deadline
        // with a request pending; `timeout_at` below is the one that decides.
        let mut config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(left))
            .set_response_timeout(Some(budget));
        if let Some(push) = push {
            config = config.set_push_sender(push);
        }
        let connecting = timeout_at(
            deadline,
            client.get_multiplexed_async_connection_with_config(&config),
        );
        let result = match &tls_addr {
            None => connecting.await,
            Some((host, port)) => {
                self.handshake(who, connecting, host, *port, deadline)
                    .await?
            }
        };
        let e = match result.map_err(|_| timed_out(who, budget))? {
            Ok(conn) => return Ok(conn),
            Err(e) => e,
        };
        Err(match plain_tcp {
            Some((host, port)) if e.is_connection_dropped() && !e.is_connection_refusal() => {
                if broker::refuses(&host, port, deadline).await {
                    // It died under the attempt.
                    broker::refused(who)
                } else {
                    // A TLS server ends a connection whose first bytes are not TLS.
                    format!(
                        "{who} closed the connection before answering (is this port TLS? \
                         then the URL should be rediss://, not redis://)"
                    )
                }
            }
            _ => match tls_addr
                .as_ref()
                .and_then(|(host, _)| tls::fault(who, host, &e))
            {
                // Named with the host connected to (a sentinel's master, say).
                Some(reason) => reason,
                None => self.describe_for(who, e, budget),
            },
        })
    }

    /// Waits for a TLS connection. A server that accepts and never completes the
    /// handshake is most often a plain-TCP port behind a `rediss://` URL (a plain
    /// Redis waits for the end of a line that TLS never sends): when the handshake
    /// is still pending halfway to `deadline`, a bare TCP connect to the same port
    /// is made beside it, and if it is accepted while the handshake times out, the
    /// reason says so. A quick handshake costs nothing more.
    async fn handshake<T>(
        &self,
        who: &str,
        connecting: impl Future<Output = Result<redis::RedisResult<T>, tokio::time::error::Elapsed>>,
        host: &str,
        port: u16,
        deadline: Instant,
    ) -> Result<Result<redis::RedisResult<T>, tokio::time::error::Elapsed>, Reason> {
        let started = Instant::now();
        let halfway = started + deadline.saturating_duration_since(started) / 2;
        tokio::pin!(connecting);
        tokio::select! {
            result = &mut connecting => return Ok(result),
            () = tokio::time::sleep_until(halfway) => {}
        }
        let (result, tcp) = tokio::join!(
            connecting,
            timeout_at(deadline, tokio::net::TcpStream::connect((host, port)))
        );
        let handshake_timed_out = match &result {
            Err(_) => true,
            Ok(Err(e)) => e.is_timeout(),
            Ok(Ok(_)) => false,
        };
        if handshake_timed_out && matches!(tcp, Ok(Ok(_))) {
            return Err(format!(
                "{who} accepted the connection but did not complete the TLS handshake within {} \
                 (is this port plain TCP? then the URL should be redis://, not rediss://)",
                overseer_core::duration::short(deadline.saturating_duration_since(started))
            ));
        }
        Ok(result)
    }

    /// The driver's client for `info`: over TLS with the broker's options when its
    /// address asks for TLS (the CA bundle and client certificate read now).
    fn client(
        &self,
        who: &str,
        info: redis::ConnectionInfo,
        budget: Duration,
    ) -> Result<redis::Client, Reason> {
        let describe = |e| self.describe_for(who, e, budget);
        let options = match (info.addr(), &self.tls) {
            (ConnectionAddr::TcpTls { .. }, Some(options)) => options,
            _ => return redis::Client::open(info).map_err(describe),
        };
        let root_cert = match &options.ca_certs {
            Some(path) => Some(tls::read_pem(who, "ssl_ca_certs", path)?),
            None => None,
        };
        let client_tls = tls::client_identity(who, options)?.map(|identity| ClientTlsConfig {
            client_cert: identity.cert,
            client_key: identity.key,
        });
        let client = if root_cert.is_some() || client_tls.is_some() {
            let certificates = TlsCertificates {
                client_tls,
                root_cert,
            };
            redis::Client::build_with_tls(info, certificates).map_err(describe)?
        } else {
            // The system's roots.
            redis::Client::open(info).map_err(describe)?
        };
        if Verification::of(options) != Verification::ChainOnly {
            return Ok(client);
        }
        let info = client.get_connection_info().clone();
        let mut addr = info.addr().clone();
        addr.set_danger_accept_invalid_hostnames(true);
        redis::Client::open(info.set_addr(addr)).map_err(describe)
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
    ) -> Result<Vec<QueueDepth>, Reason> {
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
