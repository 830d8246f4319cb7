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
//! How the pooled connection is made is in [`connect`]; the connections held
//! between polls (the watch, the events subscription) are [`held`] and
//! [`subscription`]; the worker ping over the pooled connection is [`ping`].

mod connect;
mod held;
mod ping;
mod subscription;

use std::sync::Arc;
use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use lapin::types::FieldTable;
use lapin::uri::{AMQPAuthority, AMQPQueryString, AMQPScheme, AMQPUri, AMQPUserInfo};
use lapin::{Connection, ErrorKind};
use tokio::sync::Mutex;
use tokio::time::{Instant, timeout_at};

use crate::broker::held::Listener;
use crate::broker::{self, Answers, BrokerProbe, Reason};
use crate::detail::{BrokerRead, QueueDepth};
use crate::events::WorkerEvents;
use crate::ping::{Pidbox, Unsent};
use crate::tls;
use crate::url::{AmqpBroker, TlsOptions};
use connect::State;
use overseer_core::check::Alarm;
use overseer_core::detail::WorkerDetail;
use overseer_core::secret::scrub_with;

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
    /// Opens (or reuses) the connection and a channel, and declares each queue
    /// passively: their depths and consumers.
    async fn depths(
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
    ) -> Result<BrokerRead, Reason> {
        let queues = self.depths(queues, deadline, budget).await?;
        // AMQP keeps the unacknowledged count from its clients, and the
        // broker's start from them too.
        Ok(BrokerRead {
            queues,
            delivered: None,
            started_at: None,
        })
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
