//! How a connection to a Redis broker is made: straight to the master or
//! through its sentinels ([`super::sentinel`]), over TLS when its address asks
//! for it, within the caller's deadline; and the reasons a failed one gets
//! (a TLS port behind `redis://`, a plain one behind `rediss://`, a broker
//! that died under the attempt).

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ClientTlsConfig, ConnectionAddr, ProtocolVersion, TlsCertificates,
};
use tokio::time::{Instant, timeout_at};

use super::{RedisCheck, Target, subscription};
use crate::broker::{self, Reason, timed_out};
use crate::tls::{self, Verification};

impl RedisCheck {
    /// Opens a connection to the master, bounded by `deadline`.
    pub(super) async fn connect(
        &self,
        deadline: Instant,
        budget: Duration,
    ) -> Result<MultiplexedConnection, Reason> {
        self.connect_pushing(deadline, budget, None).await
    }

    /// [`Self::connect`]; with `push`, over RESP3, its pushes (the messages of
    /// its subscriptions, its end) handed to `push`.
    pub(super) async fn connect_pushing(
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
    pub(super) async fn open(
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
}
