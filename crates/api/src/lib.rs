//! # overseer-api
//!
//! The HTTP API: what the [`Aggregator`](overseer_core::actors::Aggregator)
//! publishes, served to dashboards and scripts, to Prometheus, and to people.
//! Nothing here asks an actor, and only the history touches the database:
//! every other request reads the latest published
//! [`HealthReport`](overseer_core::HealthReport), whose JSON was rendered once
//! when it was built. It knows no executor kind (no Celery).
//!
//! # Layout
//! - [`health`]: `GET /api/v2/monitor/health` (`?strict=true`) and its
//!   Server-Sent Events stream.
//! - [`history`]: `GET /api/v2/monitor/health/history`, every change of a
//!   verdict's state, read from the database (a small pool, a timeout).
//! - [`fleet`]: `GET /api/v2/monitor/health/executor/workers` and `/queues`,
//!   every worker and queue the checks saw, paged (the report shows a few).
//! - [`openapi`]: `GET /openapi.json`, generated from the types the responses
//!   are written from (the report's are core's own).
//! - [`metrics`]: `GET /metrics`, in Prometheus' text format.
//! - [`dashboard`]: `GET /`, a self-contained page for people, and who may
//!   frame it ([`dashboard::FrameAncestors`]).
//! - [`version`]: `GET /api/v2/version`, a static answer in Airflow's shape.
//! - [`errors`]: JSON bodies for unknown routes, wrong methods and bad queries.
//! - [`early_errors`]: JSON bodies for the errors actix-http answers itself
//!   (a request head it cannot parse, or too large).
//! - [`request_span`]: a `DEBUG` span and line per request, free at the
//!   default level.
//!
//! A program that embeds Overseer serves these routes with [`ApiState::new`]
//! and [`routes`] in an actix-web app of its own; `overseer serve` runs them in
//! [`server`].

pub mod dashboard;
pub mod early_errors;
pub mod errors;
pub mod fleet;
pub mod health;
pub mod history;
pub mod metrics;
pub mod openapi;
pub mod request_span;
pub mod version;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, dev::Server, web};
use overseer_core::{HealthReport, Overseer};
use tokio::sync::watch;

use crate::early_errors::JsonEarlyErrors;

/// The largest request body accepted: no route takes one, so anything bigger is abuse.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// How long a graceful shutdown waits for requests in flight (SSE streams end at once).
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

/// How often an idle SSE stream sends a keep-alive comment, so proxies keep it open.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How long a client refused by a full SSE stream is asked to wait (`Retry-After`).
pub const STREAM_RETRY_AFTER: Duration = Duration::from_secs(10);

/// What every handler reads.
#[derive(Clone)]
pub struct ApiState {
    /// The latest report, and its changes.
    pub reports: watch::Receiver<Arc<HealthReport>>,
    /// The Prometheus registry `/metrics` renders.
    pub metrics: Arc<metrics::Metrics>,
    /// Flips to `true` when the service shuts down: SSE streams end then.
    pub shutdown: watch::Receiver<bool>,
    /// The places of the SSE stream: at most `api.max_stream_clients` clients
    /// served at once, across every worker. Each holds a socket for as long as
    /// it stays, and a [`health::StreamPlace`] it gives back when it ends; one
    /// more gets 503, so stream clients can never take every descriptor and
    /// starve the probes.
    pub stream_places: health::StreamPlaces,
    /// Who may show the dashboard in a frame (`api.frame_ancestors`): its own
    /// origin, and these (the Airflow UI's, for Overseer's Airflow plugin).
    pub frame_ancestors: dashboard::FrameAncestors,
    /// Reads the history of verdict states for
    /// `GET /api/v2/monitor/health/history` (the one route that reads the
    /// database); `None`, the route answers 503.
    pub history: Option<overseer_core::history::HistoryReader>,
}

impl ApiState {
    /// What the routes read, from a running [`Overseer`]: its reports and
    /// counters. SSE streams end when `shutdown` turns `true` (send it before
    /// stopping the HTTP server, or a graceful stop waits for them); at most
    /// `max_stream_clients` are served at once. Only the dashboard's own origin
    /// may frame it, unless [`ApiState::with_frame_ancestors`] says otherwise.
    pub fn new(
        overseer: &Overseer,
        shutdown: watch::Receiver<bool>,
        max_stream_clients: usize,
    ) -> Self {
        Self {
            reports: overseer.watch(),
            metrics: Arc::new(metrics::Metrics::new(
                overseer.executor_stats(),
                overseer.aggregator_stats(),
                overseer.watch(),
            )),
            shutdown,
            stream_places: health::StreamPlaces::new(max_stream_clients),
            frame_ancestors: dashboard::FrameAncestors::default(),
            history: None,
        }
    }

    /// The same state, with a reader of the history of verdict states (see
    /// [`overseer_core::history::HistoryReader::connect`]).
    pub fn with_history(self, history: overseer_core::history::HistoryReader) -> Self {
        Self {
            history: Some(history),
            ..self
        }
    }

    /// The same state, with `extra`'s counters on `/metrics` beside the actors'
    /// (the `overseer` binary's alert notifier's, say).
    pub fn with_extra_metrics(self, extra: Arc<dyn metrics::ExtraMetrics>) -> Self {
        Self {
            metrics: Arc::new(self.metrics.with_extra(extra)),
            ..self
        }
    }

    /// The same state, with the dashboard allowed in frames of `frame_ancestors`
    /// besides its own origin's.
    pub fn with_frame_ancestors(self, frame_ancestors: dashboard::FrameAncestors) -> Self {
        Self {
            frame_ancestors,
            ..self
        }
    }
}

/// Registers every route on an actix-web app, which must hold the
/// [`ApiState`] as `web::Data<ApiState>`.
pub fn routes(config: &mut web::ServiceConfig) {
    config
        .app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
        .app_data(web::QueryConfig::default().error_handler(errors::bad_query))
        .service(
            web::resource("/api/v2/monitor/health")
                .route(web::get().to(health::health))
                .route(web::head().to(health::health))
                .default_service(web::to(errors::method_not_allowed)),
        )
        .service(
            web::resource("/api/v2/monitor/health/history")
                .route(web::get().to(history::history))
                .route(web::head().to(history::history))
                .default_service(web::to(errors::method_not_allowed)),
        )
        .service(
            web::resource("/api/v2/monitor/health/executor/workers")
                .route(web::get().to(fleet::workers))
                .route(web::head().to(fleet::workers))
                .default_service(web::to(errors::method_not_allowed)),
        )
        .service(
            web::resource("/api/v2/monitor/health/executor/queues")
                .route(web::get().to(fleet::queues))
                .route(web::head().to(fleet::queues))
                .default_service(web::to(errors::method_not_allowed)),
        )
        .service(
            web::resource("/api/v2/monitor/health/stream")
                .route(web::get().to(health::stream))
                .route(web::head().to(health::stream_head))
                .default_service(web::to(errors::method_not_allowed)),
        )
        .service(
            web::resource("/metrics")
                .route(web::get().to(metrics::metrics))
                .route(web::head().to(metrics::metrics))
                .default_service(web::to(errors::method_not_allowed)),
        )
        .service(
            web::resource("/openapi.json")
                .route(web::get().to(openapi::openapi))
                .route(web::head().to(openapi::openapi))
                .default_service(web::to(errors::method_not_allowed)),
        )
        .service(
            web::resource("/api/v2/version")
                .route(web::get().to(version::version))
                .route(web::head().to(version::version))
                .default_service(web::to(errors::method_not_allowed)),
        )
        .service(
            web::resource("/")
                .route(web::get().to(dashboard::page))
                .route(web::head().to(dashboard::page))
                .default_service(web::to(errors::method_not_allowed)),
        );
}

/// Has the kernel close `tcp` when what it sends has not been taken for
/// `after` (`TCP_USER_TIMEOUT`): a client that stops reading, an SSE client
/// above all, then holds its socket's buffers for that long and no longer.
/// actix-http does not poll a response whose client does not read, so nothing
/// in the process can see such a client; the kernel can. An idle connection
/// (nothing to send) is not affected.
fn close_when_stalled(tcp: &actix_web::rt::net::TcpStream, after: Duration) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let millis = libc::c_uint::try_from(after.as_millis()).unwrap_or(libc::c_uint::MAX);
        // SAFETY: a valid socket, and an option value of the size given.
        let failed = unsafe {
            libc::setsockopt(
                tcp.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_USER_TIMEOUT,
                (&raw const millis).cast(),
                std::mem::size_of_val(&millis) as libc::socklen_t,
            )
        } != 0;
        if failed {
            tracing::debug!(error = %std::io::Error::last_os_error(), "cannot set TCP_USER_TIMEOUT");
        }
    }
}

/// The HTTP server on `listener`, until its handle stops it. Signals are the
/// caller's to handle.
///
/// It holds at most `max_connections` connections at once, all workers
/// together (the caller sizes it from the open-file limit). At that number it
/// stops calling `accept()`, and new connections wait in the listen backlog
/// until one closes, instead of `accept()` failing with EMFILE, which makes
/// actix-server stop accepting for 500 ms at a time, probes included.
///
/// With `tls` (a rustls server configuration, as `[api] tls_cert` and `tls_key`
/// make it), the same routes are served over HTTPS only.
///
/// It is actix-web's `HttpServer`, spelled out (actix-server, actix-http and
/// the same defaults), for the one thing `HttpServer` cannot do: put each
/// connection's socket in [`JsonEarlyErrors`], so that the errors actix-http
/// answers before any handler runs have JSON bodies too; and, on the socket,
/// [`close_when_stalled`].
pub fn server(
    state: ApiState,
    listener: TcpListener,
    max_connections: usize,
    tls: Option<rustls::ServerConfig>,
) -> std::io::Result<Server> {
    use actix_http::Protocol;
    use actix_service::{ServiceFactoryExt, fn_service};
    use actix_web::rt::net::TcpStream;

    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let builder = Server::build()
        .disable_signals()
        .shutdown_timeout(SHUTDOWN_TIMEOUT.as_secs())
        .workers(workers)
        // actix counts connections per worker.
        .max_concurrent_connections((max_connections / workers).max(1));
    let name = "overseer-api";
    let builder = match tls {
        None => builder.listen(name, listener, move || {
            fn_service(|io: TcpStream| async move {
                close_when_stalled(&io, health::STREAM_LAG_LIMIT);
                let peer = io.peer_addr().ok();
                Ok((JsonEarlyErrors::new(io), Protocol::Http1, peer))
            })
            .and_then(http_service(state.clone()))
        })?,
        Some(mut config) => {
            // As actix-web's `listen_rustls_0_23`: HTTP/2 when the client offers it.
            let mut protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            protocols.extend_from_slice(&config.alpn_protocols);
            config.alpn_protocols = protocols;
            builder.listen(name, listener, move || {
                actix_tls::accept::rustls_0_23::Acceptor::new(config.clone())
                    .map_err(|e| tracing::debug!(error = ?e, "a TLS handshake failed"))
                    .and_then(fn_service(
                        |io: actix_tls::accept::rustls_0_23::TlsStream<TcpStream>| async move {
                            let (tcp, tls) = io.get_ref();
                            close_when_stalled(tcp, health::STREAM_LAG_LIMIT);
                            let peer = tcp.peer_addr().ok();
                            let protocol = match tls.alpn_protocol() {
                                Some(b"h2") => Protocol::Http2,
                                _ => Protocol::Http1,
                            };
                            Ok((JsonEarlyErrors::new(io), protocol, peer))
                        },
                    ))
                    .and_then(
                        http_service(state.clone())
                            .map_err(|e| tracing::debug!(error = ?e, "a connection failed")),
                    )
            })?
        }
    };
    Ok(builder.run())
}

/// The routes as actix-http's service of one connection, with actix-web's
/// `HttpServer` defaults (keep-alive 5 s, 5 s for a request's head, 1 s for
/// a client to close), and an SSE stream's end when its client closes its end
/// (it gives its place back at once, not at its next write).
fn http_service<T>(
    state: ApiState,
) -> impl actix_service::ServiceFactory<
    (
        JsonEarlyErrors<T>,
        actix_http::Protocol,
        Option<std::net::SocketAddr>,
    ),
    Config = (),
    Response = (),
    Error = actix_http::error::DispatchError,
    InitError = (),
>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    use actix_service::{IntoServiceFactory, ServiceFactoryExt, map_config};
    let app = App::new()
        .app_data(web::Data::new(state))
        .wrap_fn(|request, service| {
            use actix_web::dev::Service as _;
            use futures_util::future::{Either, ready};
            // Once one request of a connection is refused as one that may
            // smuggle another, so is every later one (none is run), and the
            // connection ends with the first refusal's answer.
            let refusal = request.conn_data::<early_errors::Refusal>();
            let refused_before = refusal.is_some_and(|r| r.is_raised());
            if refused_before || errors::has_both_lengths(request.headers()) {
                // HTTP/2 frames each message itself: nothing to end there.
                if let Some(refusal) = refusal
                    && request.version() < actix_web::http::Version::HTTP_2
                {
                    refusal.raise();
                }
                let (request, _) = request.into_parts();
                let refused = actix_web::dev::ServiceResponse::new(request, errors::both_lengths());
                Either::Left(ready(Ok(refused.map_into_right_body())))
            } else {
                let answered = service.call(request);
                Either::Right(async move { answered.await.map(|r| r.map_into_left_body()) })
            }
        })
        .wrap(request_span::RequestSpan)
        // Every answer is read as the type it says (JSON, the page, text
        // metrics), never sniffed into another.
        .wrap(
            actix_web::middleware::DefaultHeaders::new()
                .add((actix_web::http::header::X_CONTENT_TYPE_OPTIONS, "nosniff")),
        )
        .configure(routes)
        .default_service(web::to(errors::not_found));
    actix_http::HttpService::build()
        .keep_alive(actix_http::KeepAlive::default())
        .client_request_timeout(Duration::from_secs(5))
        .client_disconnect_timeout(Duration::from_secs(1))
        .h1_allow_half_closed(false)
        .on_connect_ext(|io: &JsonEarlyErrors<T>, extensions| {
            extensions.insert(io.refusal());
        })
        .finish(map_config(
            app.into_factory()
                .map_err(|err: actix_web::Error| err.as_response_error().error_response()),
            // No route builds URLs or reads the connection's info, so the
            // app's configuration (host, scheme) is actix's default.
            |_| actix_web::dev::AppConfig::default(),
        ))
}
