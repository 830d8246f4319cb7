//! How a RabbitMQ broker's pooled connection is made: one attempt at a time,
//! as a task of its own that a later poll joins when it outlives a poll's
//! deadline; over TLS with the broker's options; and the reasons a failed
//! attempt gets.

use std::sync::Arc;
use std::time::Duration;

use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::uri::AMQPUri;
use lapin::{Connection, ConnectionProperties, DefaultConnectionBuilder, ErrorKind};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};

use super::AmqpCheck;
use crate::broker::{self, Reason};
use crate::tls;
use crate::url::TlsOptions;

/// The name RabbitMQ's management UI shows for our connection.
const CONNECTION_NAME: &str = "overseer health check";

/// The pooled connection, and the attempt that may be under way.
#[derive(Default)]
pub(super) struct State {
    /// The open connection, reused while it stays connected.
    pub(super) conn: Option<Arc<Connection>>,
    /// A connection attempt that outlived an earlier poll's deadline: the next
    /// poll joins it, and tries once afresh if it failed.
    pending: Option<JoinHandle<lapin::Result<Connection>>>,
}

impl AmqpCheck {
    /// The pooled connection while it stays connected, else one made now (or
    /// joined, if an earlier poll's attempt is still under way), before
    /// `deadline`.
    pub(super) async fn connection(
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
    pub(super) fn tls_config(&self, options: &TlsOptions) -> Result<OwnedTLSConfig, Reason> {
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
}

/// Opens a connection to `uri`, over TLS with `tls`.
pub(super) async fn open(
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
