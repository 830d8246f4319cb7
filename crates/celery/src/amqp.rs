//! The RabbitMQ broker check: connection and channel open, and a passive
//! `queue.declare` of each configured queue (ready messages, consumers).
//!
//! One connection per broker is kept across polls and reopened when it breaks. A
//! connection attempt runs as a task of its own: when it outlives the deadline (a
//! broker that accepts and never speaks) the poll reports the timeout and the next
//! polls wait on *that* attempt instead of starting another, so a silent broker holds
//! at most one attempt (lapin gives each attempt an I/O thread) however long it lasts.
//!
//! A configured queue that does not exist is not a broker failure: Celery declares
//! a queue when it first sends to it or a worker first consumes it. Its depth is
//! reported as unknown with a note saying so.
//!
//! Over TLS (`amqps://`, or `ssl_*` options, or Celery's `broker_use_ssl`), lapin's
//! rustls with the system's roots and `ssl_ca_certs` added, the client certificate
//! of `ssl_certfile`/`ssl_keyfile`; the TLS failures are worded by [`crate::tls`].
//! lapin verifies the certificate and host name always: `ssl_cert_reqs=none` and
//! `ssl_check_hostname=false` are not offered over AMQP (see `check.rs`).
//!
//! The worker ping over the same connection is in [`ping`].

mod held;
mod ping;
mod subscription;

use std::sync::Arc;
use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::types::FieldTable;
use lapin::uri::{AMQPAuthority, AMQPQueryString, AMQPScheme, AMQPUri, AMQPUserInfo};
use lapin::{Connection, ConnectionProperties, DefaultConnectionBuilder, ErrorKind};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};

use crate::broker::held::Listener;
use crate::broker::{self, Answers, BrokerProbe, Reason};
use crate::detail::QueueDepth;
use crate::events::WorkerEvents;
use crate::ping::{Pidbox, Unsent};
use crate::tls;
use crate::url::{AmqpBroker, TlsOptions};
use overseer_core::check::Alarm;
use overseer_core::detail::WorkerDetail;
use overseer_core::secret::scrub_with;

/// The name RabbitMQ's management UI shows for our connection.
const CONNECTION_NAME: &str = "overseer health check";

/// The pooled connection, and the attempt that may be under way.
#[derive(Default)]
struct State {
    /// The open connection, reused while it stays connected.
    conn: Option<Arc<Connection>>,
    /// A connection attempt that outlived an earlier poll's deadline: the next
    /// poll joins it, and tries once afresh if it failed.
    pending: Option<JoinHandle<lapin::Result<Connection>>>,
}

/// One RabbitMQ broker's check, with its pooled connection.
pub(crate) struct AmqpCheck {
    uri: AMQPUri,
    /// The broker's identity, for reasons.
    identity: String,
    /// The virtual host, for the reason when it is refused.
    vhost: String,
    /// Masked out of any driver message before it is shown.
    password: String,
    /// The TLS options, for a TLS broker: the files they name are read at each
    /// new connection.
    tls: Option<TlsOptions>,
    /// The host name the certificate must be valid for, for reasons.
    host: String,
    /// A mutex because a probe replaces the connection as a whole; the supervisor's
    /// in-flight guard means it is never contended in practice.
    state: Mutex<State>,
}

/// A passive declare's outcome for one queue.
enum Declared {
    Found(QueueDepth),
    Missing(QueueDepth),
}

impl AmqpCheck {
    pub(crate) fn new(broker: &AmqpBroker, identity: &str) -> Self {
        let uri = AMQPUri {
            scheme: if broker.tls.is_some() {
                AMQPScheme::AMQPS
            } else {
                AMQPScheme::AMQP
            },
            authority: AMQPAuthority {
                userinfo: AMQPUserInfo {
                    username: broker.username.clone(),
                    password: broker.password.expose_secret().to_owned(),
                },
                host: broker.host.clone(),
                port: broker.port,
            },
            vhost: broker.vhost.clone(),
            query: AMQPQueryString::default(),
        };
        Self {
            uri,
            identity: identity.to_owned(),
            vhost: broker.vhost.clone(),
            password: broker.password.expose_secret().to_owned(),
            tls: broker.tls.clone(),
            host: broker.host.clone(),
            state: Mutex::new(State::default()),
        }
    }

    async fn connection(
        &self,
        state: &mut State,
        deadline: Instant,
        budget: Duration,
    ) -> Result<Arc<Connection>, Reason> {
        if let Some(conn) = &state.conn {
            if conn.status().connected() {
                return Ok(Arc::clone(conn));
            }
            state.conn = None;
        }
        // An attempt inherited from an earlier poll began before this one: its
        // failure says what the broker was then (refused while it was down),
        // not now, so it is never this poll's answer; one fresh attempt is.
        let mut inherited = state.pending.is_some();
        loop {
            let attempt = match state.pending.take() {
                Some(attempt) => attempt,
                None => self.attempt()?,
            };
            let joined = match timeout_at(deadline, state.pending.insert(attempt)).await {
                Err(_) => return Err(self.timed_out(budget)),
                Ok(joined) => joined,
            };
            state.pending = None;
            match joined {
                Ok(Ok(conn)) => {
                    let conn = Arc::new(conn);
                    state.conn = Some(Arc::clone(&conn));
                    return Ok(conn);
                }
                _ if std::mem::take(&mut inherited) => {}
                Ok(Err(e)) => return Err(self.describe_attempt(&e, deadline, budget).await),
                Err(e) => {
                    return Err(format!(
                        "broker {}: the connection attempt failed: {e}",
                        self.identity
                    ));
                }
            }
        }
    }

    /// A connection attempt, started now: a task of its own, so that it
    /// outlives a poll whose deadline passes and the next poll joins it rather
    /// than open a second connection to a broker that hangs.
    fn attempt(&self) -> Result<JoinHandle<lapin::Result<Connection>>, Reason> {
        let uri = self.uri.clone();
        let tls_config = match &self.tls {
            Some(options) => Some(self.tls_config(options)?),
            None => None,
        };
        let properties =
            ConnectionProperties::default().with_connection_name(CONNECTION_NAME.into());
        Ok(tokio::spawn(open(uri, properties, tls_config)))
    }

    /// lapin's TLS settings from `options`: the CA bundle (added to the system's
    /// roots) and the client certificate, read now.
    fn tls_config(&self, options: &TlsOptions) -> Result<OwnedTLSConfig, Reason> {
        let who = format!("broker {}", self.identity);
        let cert_chain = match &options.ca_certs {
            Some(path) => Some(
                String::from_utf8(tls::read_pem(&who, "ssl_ca_certs", path)?)
                    .map_err(|_| format!("{who}: ssl_ca_certs {path} is not a PEM file"))?,
            ),
            None => None,
        };
        let identity = tls::client_identity(&who, options)?.map(|identity| OwnedIdentity::PKCS8 {
            pem: identity.cert,
            key: identity.key,
        });
        Ok(OwnedTLSConfig {
            identity,
            cert_chain,
        })
    }

    async fn declare_all(
        &self,
        conn: &Connection,
        queues: &[String],
        deadline: Instant,
        budget: Duration,
    ) -> Result<Vec<QueueDepth>, Reason> {
        let mut depths = Vec::with_capacity(queues.len());
        let mut channel = None;
        for queue in queues {
            let open = match channel.take() {
                Some(open) => open,
                None => timeout_at(deadline, conn.create_channel())
                    .await
                    .map_err(|_| self.timed_out(budget))?
                    .map_err(|e| self.describe(&e, budget))?,
            };
            match self.declare(&open, queue, deadline, budget).await? {
                Declared::Found(depth) => {
                    depths.push(depth);
                    channel = Some(open);
                }
                // A 404 closes the channel: the next queue gets a fresh one.
                Declared::Missing(depth) => depths.push(depth),
            }
        }
        if let Some(open) = channel {
            let _ = timeout_at(deadline, open.close(200, "OK".into())).await;
        }
        if queues.is_empty() {
            // Still prove the broker serves channels.
            let open = timeout_at(deadline, conn.create_channel())
                .await
                .map_err(|_| self.timed_out(budget))?
                .map_err(|e| self.describe(&e, budget))?;
            let _ = timeout_at(deadline, open.close(200, "OK".into())).await;
        }
        Ok(depths)
    }

    async fn declare(
        &self,
        channel: &lapin::Channel,
        queue: &str,
        deadline: Instant,
        budget: Duration,
    ) -> Result<Declared, Reason> {
        let declared = timeout_at(deadline, declare_passive(channel, queue))
            .await
            .map_err(|_| self.timed_out(budget))?;
        match declared {
            Ok(found) => Ok(Declared::Found(QueueDepth {
                queue: queue.to_owned(),
                messages: Some(u64::from(found.message_count())),
                consumers: Some(found.consumer_count()),
                note: None,
            })),
            Err(e) if soft_error(&e) == Some(AMQPSoftError::NOTFOUND) => Ok(Declared::Missing(QueueDepth {
                queue: queue.to_owned(),
                messages: None,
                consumers: None,
                note: Some(
                    "the queue does not exist yet: no task was sent to it and no worker consumes it".into(),
                ),
            })),
            Err(e) => Err(self.describe(&e, budget)),
        }
    }

    fn timed_out(&self, budget: Duration) -> Reason {
        broker::timed_out(&format!("broker {}", self.identity), budget)
    }

    /// A connection attempt's error, as [`Self::describe`] says it, but for a
    /// plain connection closed before the broker answered: a port that now
    /// refuses is a broker that died under the attempt, not a TLS listener.
    async fn describe_attempt(
        &self,
        e: &lapin::Error,
        deadline: Instant,
        budget: Duration,
    ) -> Reason {
        let closed = matches!(e.kind(), ErrorKind::IOError(io) if matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::UnexpectedEof
        ));
        if closed
            && self.tls.is_none()
            && broker::refuses(&self.host, self.uri.authority.port, deadline).await
        {
            return broker::refused(&format!("broker {}", self.identity));
        }
        self.describe(e, budget)
    }

    /// A driver error, in plain words naming the broker.
    fn describe(&self, e: &lapin::Error, budget: Duration) -> Reason {
        let id = &self.identity;
        if self.tls.is_some() {
            let tls_fault =
                tls::fault(&format!("broker {id}"), &self.host, e).or_else(|| match e.kind() {
                    ErrorKind::IOError(io) => {
                        tls::fault(&format!("broker {id}"), &self.host, io.as_ref())
                    }
                    _ => None,
                });
            if let Some(reason) = tls_fault {
                return scrub_with(&reason, &[&self.password]);
            }
        }
        let reason = match e.kind() {
            ErrorKind::IOError(io) => match io.kind() {
                std::io::ErrorKind::ConnectionRefused => broker::refused(&format!("broker {id}")),
                std::io::ErrorKind::TimedOut => self.timed_out(budget),
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::UnexpectedEof
                    if self.tls.is_none() =>
                {
                    // A TLS listener ends a connection whose first bytes are not TLS.
                    format!(
                        "broker {id} closed the connection ({io}; is this port TLS? then the \
                         URL should be amqps://, not amqp://)"
                    )
                }
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::UnexpectedEof => {
                    format!("broker {id} closed the connection ({io})")
                }
                _ => format!("broker {id} could not be reached: {io}"),
            },
            ErrorKind::ProtocolError(amqp) => match amqp.kind() {
                AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => {
                    format!("broker {id} refused the user name or password (ACCESS_REFUSED)")
                }
                AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED) => format!(
                    "broker {id} refused access to virtual host {:?} (NOT_ALLOWED)",
                    self.vhost
                ),
                _ => format!("broker {id} failed: {amqp}"),
            },
            ErrorKind::ParsingError(_) if self.tls.is_none() => format!(
                "broker {id} answered something that is not AMQP (is this port TLS? then the \
                 URL should be amqps://, not amqp://)"
            ),
            ErrorKind::MissingHeartbeatError => format!("broker {id} stopped sending heartbeats"),
            ErrorKind::InvalidConnectionState(state) => {
                format!("broker {id} connection is {state:?}")
            }
            _ => format!("broker {id} failed: {e}"),
        };
        scrub_with(&reason, &[&self.password])
    }
}

#[async_trait::async_trait]
impl BrokerProbe for AmqpCheck {
    /// Opens (or reuses) the connection and a channel, and declares each queue
    /// passively, all before `deadline` (`budget` is the same bound, for reasons).
    async fn probe(
        &self,
        queues: &[String],
        deadline: Instant,
        budget: Duration,
    ) -> Result<Vec<QueueDepth>, Reason> {
        let mut state = self.state.lock().await;
        let reused = state.conn.as_ref().is_some_and(|c| c.status().connected());
        let conn = self.connection(&mut state, deadline, budget).await?;
        let result = self.declare_all(&conn, queues, deadline, budget).await;
        if result.is_err() && !conn.status().connected() {
            state.conn = None;
            if reused {
                // The pooled connection broke since the last poll (a restarted broker):
                // the verdict is about the broker now, so try once more on a fresh one.
                let conn = self.connection(&mut state, deadline, budget).await?;
                return self.declare_all(&conn, queues, deadline, budget).await;
            }
        }
        result
    }

    /// Celery's remote-control ping (`active_queues`), on the pooled connection.
    async fn ping(
        &self,
        pidbox: &Pidbox,
        window_end: Instant,
        cleanup: Duration,
    ) -> Result<Vec<WorkerDetail>, Unsent> {
        let conn = self.state.lock().await.conn.clone();
        let Some(conn) = conn.filter(|c| c.status().connected()) else {
            return Err(Unsent::Failed(broker::not_connected(&self.identity)));
        };
        ping::ping(&conn, pidbox, window_end, cleanup)
            .await
            .map_err(|e| {
                e.map(|e| scrub_with(&format!("broker {}: {e}", self.identity), &[&self.password]))
            })
    }

    /// Holds a heartbeating connection of its own ([`held`]).
    async fn watch(&self, alarm: Alarm, answers: Answers) {
        let link = held::Watch(self);
        broker::held::drive(link, Listener::Watch(alarm), &self.identity, &answers).await;
    }

    /// The workers' events, from a queue of Overseer's own ([`subscription`]).
    async fn subscribe(&self, index: usize, events: Arc<WorkerEvents>, answers: Answers) {
        let link = subscription::Subscription {
            check: self,
            index,
            events: Arc::clone(&events),
        };
        let listener = Listener::Events { index, events };
        broker::held::drive(link, listener, &self.identity, &answers).await;
    }
}

/// Opens a connection to `uri`, over TLS with `tls`.
async fn open(
    uri: AMQPUri,
    properties: ConnectionProperties,
    tls: Option<OwnedTLSConfig>,
) -> lapin::Result<Connection> {
    match tls {
        None => Connection::connect_uri(uri, properties).await,
        Some(config) => {
            DefaultConnectionBuilder::new()?
                .with_uri(uri)
                .with_properties(properties)
                .with_tls_config(config)
                .connect()
                .await
        }
    }
}

/// A passive `queue.declare` of `queue`: its ready messages and consumers,
/// without making it.
async fn declare_passive(channel: &lapin::Channel, queue: &str) -> lapin::Result<lapin::Queue> {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
}

/// The AMQP soft error (channel-level: 403, 404, 406, ...) behind a lapin error.
fn soft_error(e: &lapin::Error) -> Option<AMQPSoftError> {
    match e.kind() {
        ErrorKind::ProtocolError(amqp) => match amqp.kind() {
            AMQPErrorKind::Soft(soft) => Some(soft.clone()),
            AMQPErrorKind::Hard(_) => None,
        },
        _ => None,
    }
}
