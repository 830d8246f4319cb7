//! The connections held to a RabbitMQ broker between polls (its watch, its
//! events subscription, each driven by [`crate::broker::held`]): made with a
//! heartbeat of their own, so a broker that stops answering without closing
//! is an error within two of them; and the watch itself, which holds such a
//! connection until lapin reports it lost (closed by the broker, the socket
//! gone, heartbeats missed).

use std::time::Duration;

use lapin::{Connection, ConnectionProperties};
use tokio_stream::StreamExt;

use super::AmqpCheck;
use super::connect::open;
use crate::broker::Reason;
use crate::broker::held::{Ended, Link};

/// The heartbeat, in seconds, of a watcher's connection: missed twice, lapin
/// reports the connection lost.
const WATCH_HEARTBEAT: u16 = 1;
/// How long a held connection may take to open (and a subscription to set up).
pub(super) const HELD_CONNECT: Duration = Duration::from_secs(3);
/// What RabbitMQ's management UI calls a watcher's connection.
const WATCH_CONNECTION_NAME: &str = "overseer-watch";
/// How often a held connection's status is looked at, beside its events (an
/// error lapin reported before the listener was there is not sent again).
pub(super) const STATUS_EVERY: Duration = Duration::from_secs(1);

impl AmqpCheck {
    /// A connection of a watcher's or subscription's own, called `name`:
    /// heartbeats every `heartbeat` seconds, opened within [`HELD_CONNECT`].
    pub(super) async fn held_connection(
        &self,
        name: &str,
        heartbeat: u16,
    ) -> Result<Connection, Reason> {
        let mut uri = self.uri.clone();
        uri.query.heartbeat = Some(heartbeat);
        let properties = ConnectionProperties::default().with_connection_name(name.into());
        let tls = match &self.tls {
            Some(options) => Some(self.tls_config(options)?),
            None => None,
        };
        match tokio::time::timeout(HELD_CONNECT, open(uri, properties, tls)).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(self.describe(&e, HELD_CONNECT)),
            Err(_) => Err(self.timed_out(HELD_CONNECT)),
        }
    }
}

/// The watch's connection to one broker.
pub(super) struct Watch<'a>(pub(super) &'a AmqpCheck);

impl Link for Watch<'_> {
    type Conn = Connection;

    async fn connect(&mut self) -> Result<Connection, Ended> {
        self.0
            .held_connection(WATCH_CONNECTION_NAME, WATCH_HEARTBEAT)
            .await
            .map_err(|reason| Ended::Gone(Some(reason)))
    }

    async fn hold(&mut self, conn: Connection) -> Ended {
        until_lost(&conn).await;
        Ended::Gone(None)
    }
}

/// Waits until `conn` is lost: lapin reports an error on it, or its status
/// says it is no longer connected.
async fn until_lost(conn: &Connection) {
    let mut events = std::pin::pin!(conn.events_listener());
    let mut status = tokio::time::interval(STATUS_EVERY);
    loop {
        tokio::select! {
            event = events.next() => if matches!(event, None | Some(lapin::Event::Error(_))) {
                return;
            },
            _ = status.tick() => if !conn.status().connected() {
                return;
            },
        }
    }
}
